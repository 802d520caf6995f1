"""The verdict merge, sans I/O: plugins' answers in, one verdict out.

A denial wins, whatever the order of the answers; otherwise one allowance is enough;
otherwise — every plugin answered ``ask``, kept silent (``late``), answered a JSON-RPC
``error``, ``crash``-ed, answered something ``invalid`` (none of the three), or was
``not_running`` — the user decides (``ask``).

:class:`Tally` is fed the answers as they come: a denial settles at once; an allowance
settles only when every plugin asked has answered (or run out of time), since a later
denial would win over it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Outcome", "Answer", "Verdict", "Tally", "merge", "REASONS"]

Outcome = Literal["allow", "deny", "ask", "late", "error", "crash", "invalid", "not_running"]
Decision = Literal["allow", "deny", "ask"]

REASONS: dict[str, str] = {
    "ask": "it answered ask",
    "late": "no answer in time",
    "error": "an error",
    "crash": "a crash",
    "invalid": "an answer that is none of the three",
    "not_running": "not running",
}
"""Why a plugin did not decide, as the journal says it."""


@dataclass(frozen=True)
class Answer:
    """What one plugin did with one request. ``plugin`` is its id; ``delay_ms`` the
    time to its answer (None when it gave none); ``detail`` says more on an error."""

    plugin: str
    outcome: Outcome
    message: str | None = None
    delay_ms: float | None = None
    detail: str | None = None

    @property
    def decided(self) -> bool:
        return self.outcome in ("allow", "deny")

    @property
    def reason(self) -> str | None:
        """Why it did not decide (None when it did)."""
        if self.decided:
            return None
        base = REASONS[self.outcome]
        return f"{base}: {self.detail}" if self.detail else base


@dataclass(frozen=True)
class Verdict:
    """``decision``; ``by`` the answer that settled it (None for ``ask``)."""

    decision: Decision
    by: Answer | None = None


class Tally:
    """The answers to one request, in the order of ``plugins`` (the ids asked)."""

    def __init__(self, plugins: Sequence[str]) -> None:
        self.plugins = list(plugins)
        self.answers: dict[str, Answer] = {}

    @property
    def complete(self) -> bool:
        return all(p in self.answers for p in self.plugins)

    def add(self, answer: Answer) -> Verdict | None:
        """Record ``answer`` (the first answer of a plugin counts); return the verdict if
        it is now known: a denial at once, else the final one when all have answered."""
        if answer.plugin in self.plugins and answer.plugin not in self.answers:
            self.answers[answer.plugin] = answer
        return self.verdict()

    def verdict(self) -> Verdict | None:
        ordered = [self.answers[p] for p in self.plugins if p in self.answers]
        for a in ordered:
            if a.outcome == "deny":
                return Verdict("deny", a)
        if not self.complete:
            return None
        for a in ordered:
            if a.outcome == "allow":
                return Verdict("allow", a)
        return Verdict("ask")

    def final(self) -> Verdict:
        """The verdict once nothing more will come (missing answers count as late)."""
        for p in self.plugins:
            if p not in self.answers:
                self.answers[p] = Answer(p, "late")
        verdict = self.verdict()
        assert verdict is not None
        return verdict


def merge(answers: Iterable[Answer], plugins: Sequence[str] | None = None) -> Verdict:
    """The verdict of a complete set of answers (``plugins`` gives the order; by default
    the answers' own)."""
    answers = list(answers)
    tally = Tally(plugins if plugins is not None else [a.plugin for a in answers])
    for a in answers:
        tally.add(a)
    return tally.final()
