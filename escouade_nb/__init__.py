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

import sys
from typing import TYPE_CHECKING, Any

from ._lazy import lazy_names

_LAZY = {
    "__version__": "_version", "EscouadeError": "_errors",
    "Agent": "engine.squad",  # the squad module: it registers who forks a lone agent (Agent.fork)
    "AgentConfig": "engine.state",
    "AgentError": "wire.errors", "AgentExited": "wire.errors",
    "AuthRequired": "wire.errors", "NoEventLoop": "wire.errors",
    "PermissionCard": "engine.cards", "QuestionCard": "engine.cards",
    "Turn": "engine.turns", "Squad": "engine.squad", "SquadError": "engine.squad", "get_squad": "engine.squad",
    "render_item": "core.render_text", "render_items": "core.render_text",
    "written": "kernel_mcp.written_reads",
}

__all__ = [*_LAZY, "load_ipython_extension"]

if TYPE_CHECKING:  # pragma: no cover  (``X as X``: a re-export, for type checkers and linters)
    from ._errors import EscouadeError as EscouadeError
    from ._version import __version__ as __version__
    from .core.render_text import render_item as render_item, render_items as render_items
    from .engine.agent import Agent as Agent
    from .engine.state import AgentConfig as AgentConfig
    from .engine.cards import PermissionCard as PermissionCard, QuestionCard as QuestionCard
    from .engine.squad import Squad as Squad, SquadError as SquadError, get_squad as get_squad
    from .engine.turns import Turn as Turn
    from .kernel_mcp.written_reads import written as written
    from .wire.errors import (AgentError as AgentError, AgentExited as AgentExited, AuthRequired as AuthRequired,
                              NoEventLoop as NoEventLoop)


_resolve = lazy_names(__name__, _LAZY, globals())


def __getattr__(name: str) -> Any:
    magics = sys.modules.get(__name__ + ".magics") if name in _LAZY else None
    if magics is not None:  # %load_ext's thread may be importing the engine: one thread imports it
        magics.loaded()
    value = _resolve(name)
    if name in ("Squad", "get_squad", "written"):
        _listings_as_html()
    return value


def _listings_as_html() -> None:
    """In an IPython kernel where ``%load_ext escouade_nb`` was not run, a squad's listing
    evaluated in a cell still shows as its HTML table: the views' layer registers its
    printer (``widgets.tables.register``, by type name; the engine builds no HTML)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:
        from .widgets.tables import register

        register(shell)


def __dir__() -> list[str]:
    return sorted(__all__)


def load_ipython_extension(ipython) -> None:
    """Called by ``%load_ext escouade_nb``: registers the magics."""
    from .magics import load

    load(ipython)
