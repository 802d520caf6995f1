"""The kernel's own MCP server, ``escouade`` (a layer of its own, beside :mod:`..wire`): an
agent started from the notebook reads the live kernel and asks to run code in it.

:mod:`.server` (grants, start and stop, the busy rule, each call's consent), :mod:`.http`
(the bearer gate, uvicorn on loopback), :mod:`.tools` (the tools' schemas), :mod:`.reads`
(the read tools), :mod:`.run` (``run_code``'s execution), :mod:`.token_files` (the stdio
bridge's token files), :mod:`.written_reads` (what each agent wrote in a notebook, read
through the kernel's channel to its page). It imports only :mod:`..core` and the package's
small root modules; it knows whoever answers for a grant (the engine's agent session) only
as a :class:`~.server.ToolOwner` and the notebook's page only as a
:class:`~.server.LiveNotebook`. Names are loaded on first use (PEP 562).
"""

from __future__ import annotations

from .._lazy import lazy_names

_LAZY = {
    "KernelServer": "server", "ToolOwner": "server", "LiveNotebook": "server", "Refused": "server",
    "Grant": "server", "use_live_notebook": "server", "preload_in_kernel": "server", "SERVER_NAME": "server",
    "ToolFailure": "tools", "TOOLS": "tools", "read_written": "written_reads", "written": "written_reads",
}
__all__ = list(_LAZY)

__getattr__ = lazy_names(__name__, _LAZY, globals())
