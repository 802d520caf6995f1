"""What the engine raises: an agent that could not start, wants a sign-in, or exited."""

from __future__ import annotations

from typing import Any


class AgentError(RuntimeError):
    """The agent could not start, or stopped answering."""


class AuthRequired(AgentError):
    """The agent wants the user to sign in (ACP ``-32000``, ``auth_required``).
    ``methods`` are its ``authMethods`` (wire dicts); ``await agent.authenticate(method_id)``
    then retries once."""

    def __init__(self, message: str, methods: list[dict[str, Any]]) -> None:
        self.methods = methods
        names = ", ".join(f"{m.get('id')} ({m.get('name')})" for m in methods) or "none advertised"
        super().__init__(f"{message}; sign-in methods: {names}")


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
