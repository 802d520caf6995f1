"""The model of the user's life (``tests/kernel/test_user_walks.py``, ``tests/browser/test_lab_user_walks.py``):
what the walks share — the seed and number of walks to play, what kind of failure a walk met, and its
shrinking to the shortest sequence of steps that still fails that way."""

from __future__ import annotations

import os
import re
from collections.abc import Callable


def seed_and_walks(seed: int, walks: int) -> tuple[int, int]:
    """``ESCOUADE_WALK_SEED`` and ``ESCOUADE_WALKS`` when set, else the file's fixed ``seed`` and ``walks``."""
    return int(os.environ.get("ESCOUADE_WALK_SEED", seed)), int(os.environ.get("ESCOUADE_WALKS", walks))


def walk_length(steps: int) -> int:
    """``ESCOUADE_WALK_STEPS`` when set (longer walks find more, each costs more), else ``steps``."""
    return int(os.environ.get("ESCOUADE_WALK_STEPS", steps))


def shrinking() -> bool:
    """``ESCOUADE_WALK_SHRINK`` is set: a failing walk is shrunk before it is reported."""
    return bool(os.environ.get("ESCOUADE_WALK_SHRINK"))


def kind_of(failure: str) -> str:
    """What broke, without the details: ``invariant N: what`` (or ``cell failed: Error``), the failure's
    first line to its second colon, what it quotes (a step's own words, numbered) left out."""
    return re.sub(r"(?<=\s)'[^']*'|(?<=\s)\"[^\"]*\"|\[.*", "…", ":".join(failure.splitlines()[0].split(":")[:2]))


def shrink(steps: list[str], kind: str, play: Callable[[list[str]], str | None]) -> list[str]:
    """Delta debugging, one step at a time: drop each step while ``play`` (the steps played afresh: their
    failure, or None) still fails the same way (:func:`kind_of` is ``kind``). The shortest such sequence
    found; each try is a whole walk (seconds to a minute), so this is for a run by hand."""
    i = 0
    while i < len(steps):
        shorter = steps[:i] + steps[i + 1:]
        failure = play(shorter) if shorter else None
        if failure is not None and kind_of(failure) == kind:
            steps = shorter
        else:
            i += 1
    return steps
