"""The engine: :class:`~.agent.Agent` (a façade over one session object per process, its
cards, turns, controls, workspace and resume), the :class:`~.squad.Squad`, and three wings:
:mod:`.launch` (how an agent's program is found, wrapped and updated), :mod:`.worktrees`
(an agent's git worktree and its setup) and :mod:`.review` (Keep or Reject of cells and
files, checkpoints and the rewind). It needs no Jupyter: it runs in ``asyncio.run`` too.

This module is the engine's face: the names below are all that the views (``widgets/``) and
the magics import of the engine (the layering test holds it). Names are loaded on first use
(PEP 562): importing the face loads no part of the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

_LAZY = {
    # the user's agent, its turns and its squad
    "Agent": "agent", "AuthRequired": "agent", "protections": "agent", "Turn": "turns",
    "PermissionCard": "cards", "QuestionCard": "cards", "flatten_options": "controls",
    "Squad": "squad", "SquadError": "squad", "get_squad": "squad", "preload_in_kernel": "squad",
    "Listing": "squad", "READING": "squad", "listing_text": "listing",
    # a comparison of turns: its rows, and its columns (all; SHORT kept on one line; TIMES, durations)
    "Comparison": "compare", "comparison_rows": "compare", "comparison_text": "compare",
    "COLUMNS": "compare", "SHORT": "compare", "TIMES": "compare",
    # a cell's change pending the user's review, as the notebook's page reports on it
    "PendingEdit": "review.cell_review", "pending_edit": "review.cell_review",
    "user_changed": "review.cell_review", "drop": "review.cell_review",
    # a harness update's run
    "UpdateJob": "launch.harness_update", "UpdateResult": "launch.harness_update",
    "UPDATE_TIMEOUT": "launch.harness_update",
    # an agent of the ACP registry installed (%escouade install)
    "InstallResult": "launch.registry_install",
    # the relay that carries the kernel's tools over an agent's own stdio (escouade-acp-serve runs it too)
    "RELAY_BOOTSTRAP": "launch.launcher", "relay_preamble": "launch.launcher",
}
__all__ = list(_LAZY)

if TYPE_CHECKING:  # pragma: no cover  (``X as X``: a re-export, for type checkers and linters)
    from .agent import Agent as Agent, AuthRequired as AuthRequired, protections as protections
    from .cards import PermissionCard as PermissionCard, QuestionCard as QuestionCard
    from .compare import (COLUMNS as COLUMNS, SHORT as SHORT, TIMES as TIMES, Comparison as Comparison,
                          comparison_rows as comparison_rows, comparison_text as comparison_text)
    from .controls import flatten_options as flatten_options
    from .launch.harness_update import (UPDATE_TIMEOUT as UPDATE_TIMEOUT, UpdateJob as UpdateJob,
                                        UpdateResult as UpdateResult)
    from .launch.launcher import RELAY_BOOTSTRAP as RELAY_BOOTSTRAP, relay_preamble as relay_preamble
    from .launch.registry_install import InstallResult as InstallResult
    from .listing import listing_text as listing_text
    from .review.cell_review import (PendingEdit as PendingEdit, drop as drop, pending_edit as pending_edit,
                                     user_changed as user_changed)
    from .squad import (READING as READING, Listing as Listing, Squad as Squad, SquadError as SquadError,
                        get_squad as get_squad, preload_in_kernel as preload_in_kernel)
    from .turns import Turn as Turn

__getattr__ = lazy_names(__name__, _LAZY, globals())
