"""The root of the package's exceptions: ``except EscouadeError`` catches every error the
package raises on purpose (a bug's ``TypeError`` or ``KeyError`` is not one of them).

It sits below every layer (like ``_version``) and imports nothing, so any module may
derive from it; the families keep the bases they had (``AgentError`` is still a
``RuntimeError``, ``FenceError`` still an ACP ``RequestError``), so older ``except``
clauses catch what they caught.
"""

from __future__ import annotations

__all__ = ["EscouadeError"]


class EscouadeError(Exception):
    """Any error escouade_nb raises on purpose. The families, by layer:

    - **core**: ``InvalidTransition`` (a status move the agent's machine does not have: a
      bug of the client; also a ``RuntimeError``).
    - **manifest**: ``ManifestError`` (a harness manifest that cannot be read or does not
      match its schema).
    - **wire**, an agent process and its session: ``AgentError`` (could not start, or
      stopped answering; also a ``RuntimeError``) with ``AuthRequired`` (the agent wants a
      sign-in), ``NoEventLoop`` (called where no asyncio loop runs) and ``AgentExited``;
      ``SessionClosed`` (closed before its process was up); ``FenceError`` (an ``fs/*``
      path outside the agent's folder; also an ACP ``RequestError``, its JSON-RPC answer);
      ``Changed`` (a symlink, or another change, on the way of ``wire/folder_fds``'s walk).
    - **permissions**, the rule plugins and their wire: ``RpcError`` (a request got no
      result) with ``PeerClosed``, ``RemoteError`` (also an ACP ``RequestError``) and
      ``PluginNotRunning``; ``CommandError`` (a usage error of ``%escouade plugins`` or
      ``journal``).
    - **engine**: ``SquadError`` (a request the squad cannot carry out) with
      ``ProgramNotFound``; ``WorktreeError`` (a worktree request git refused or that would
      lose work); ``Refused`` (a kernel tool call denied by the user or a rule, or
      cancelled: the kernel's MCP server answers it); ``ToolFailure`` (a kernel tool's
      anticipated failure, its text the model's ToolError).
    - **tools**: ``McpHttpError`` and ``McpRpcError`` (the MCP bridge's HTTP and JSON-RPC
      failures).

    Each is caught by ``except EscouadeError`` and by its own family's ``except``.
    Control-flow exceptions private to a module (``_UsageError``, ``_Failure``…) are not
    errors of the package and do not derive from it.
    """
