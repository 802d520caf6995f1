"""What the engine raises: an agent that could not start, wants a sign-in, or exited;
and what it says when it is used where no event loop runs (:func:`running_loop`)."""

from __future__ import annotations

import asyncio
from typing import Any

from .._errors import EscouadeError

WHERE_IT_WORKS = (
    "escouade_nb runs agents on a Jupyter kernel's event loop, which keeps running between cells: it works in any "
    "Jupyter kernel — JupyterLab, Jupyter Notebook, VS Code's notebooks, or `jupyter console` in a terminal. "
    "Terminal IPython has no such loop (an agent would stop between cells): run `jupyter console` instead; in a "
    "script, run everything inside one `asyncio.run(main())`.")
"""Where escouade_nb works, and what to do in terminal IPython (one text, said wherever needed)."""


class AgentError(EscouadeError, RuntimeError):
    """The agent could not start, or stopped answering."""


class AuthRequired(AgentError):
    """The agent wants the user to sign in (ACP ``-32000``, ``auth_required``).
    ``methods`` are its ``authMethods`` (wire dicts); ``await agent.authenticate(method_id)``
    then retries once."""

    def __init__(self, message: str, methods: list[dict[str, Any]]) -> None:
        self.methods = methods
        names = ", ".join(f"{m.get('id')} ({m.get('name')})" for m in methods) or "none advertised"
        super().__init__(f"{message}; sign-in methods: {names}")


class NoEventLoop(AgentError):
    """``what`` was called where no asyncio event loop runs (terminal IPython, a script
    outside ``asyncio.run``). IPython shows its message alone, not a traceback."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} needs a running event loop, and none runs here. {WHERE_IT_WORKS}")

    def _render_traceback_(self) -> list[str]:  # IPython's hook: these lines instead of a traceback
        return [f"{type(self).__name__}: {self}"]


def running_loop(what: str) -> asyncio.AbstractEventLoop:
    """The running event loop; :class:`NoEventLoop` naming ``what`` (``"agent.send()"``)
    when none runs."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise NoEventLoop(what) from None


class AgentExited(AgentError):
    """The agent's process ended; ``code`` is its exit code (None if unknown),
    ``stderr_tail`` its last lines of stderr."""

    def __init__(self, name: str, code: int | None, stderr_tail: str, during: str = "") -> None:
        self.code = code
        self.stderr_tail = stderr_tail
        where = f" during {during}" if during else ""
        msg = f"agent {name!r} exited with code {code}{where}"
        if stderr_tail:
            msg += "; its stderr ended with:\n" + stderr_tail
        super().__init__(msg)
