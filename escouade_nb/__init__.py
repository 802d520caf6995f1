"""escouade_nb: run a squad of ACP coding agents from a Jupyter notebook.

``%load_ext escouade_nb`` registers the ``%escouade`` magics. From code::

    from escouade_nb import get_squad
    agent = get_squad().start("fake")         # on a running asyncio loop
    turn = agent.send("hello")
    result = await turn                        # .stop_reason, .text, .tool_calls

Importing the package is cheap: the engine, the ACP SDK, ipywidgets and even the
version (``importlib.metadata``) are loaded on first use of a name (PEP 562), so a rule
plugin or ``--version`` pays nothing for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_names

_LAZY = {
    "__version__": "_version",
    "Agent": "engine.squad",  # the squad module: it registers who forks a lone agent (Agent.fork)
    "AgentError": "wire.errors", "AgentExited": "wire.errors",
    "AuthRequired": "wire.errors", "NoEventLoop": "wire.errors", "PermissionCard": "engine.cards", "QuestionCard": "engine.cards",
    "Turn": "engine.turns", "Squad": "engine.squad", "SquadError": "engine.squad", "get_squad": "engine.squad",
    "render_item": "core.render_text", "render_items": "core.render_text",
}

__all__ = [*_LAZY, "load_ipython_extension"]

if TYPE_CHECKING:  # pragma: no cover
    from ._version import __version__
    from .core.render_text import render_item, render_items
    from .engine.agent import Agent
    from .engine.cards import PermissionCard, QuestionCard
    from .wire.errors import AgentError, AgentExited, AuthRequired, NoEventLoop
    from .engine.squad import Squad, SquadError, get_squad
    from .engine.turns import Turn


__getattr__ = lazy_names(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    return sorted(__all__)


def load_ipython_extension(ipython) -> None:
    """Called by ``%load_ext escouade_nb``: registers the magics."""
    from .magics import load

    load(ipython)
