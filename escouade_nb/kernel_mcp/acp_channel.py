"""The kernel's MCP server carried over an agent's own ACP pipe: :class:`AcpChannel`.

ACP's unstable MCP-over-ACP: the client offers ``{"type": "acp", "name": "escouade",
"serverId": ID}`` in ``mcpServers``; the agent (or the relay started with it on the far side,
:mod:`escouade_nb.engine.launch.pipe_relay`) then asks the client, on the same stdio as ACP:

* ``mcp/connect {serverId}`` → ``{"connectionId"}``: a new MCP connection to this channel's
  server; ``serverId`` must be the one this channel offered (it is random per channel);
* ``mcp/message {connectionId, method, params?}``: one MCP message of that connection. As a
  JSON-RPC request it is an MCP request and its answer is the MCP answer (``result`` as the
  MCP ``result``, an MCP error as the JSON-RPC error); as a notification (no ``id``) it is an
  MCP notification (``notifications/initialized``…);
* ``mcp/disconnect {connectionId}`` → ``{}``: the connection ends.

Each connection is the ``mcp`` SDK's own server loop (the lowlevel server of the kernel's
``MCPServer``, the very tools the HTTP transport serves: no second dispatch) over in-memory
streams, run as a task whose context holds THIS channel's grant (:data:`~.http.CALLER`):
the same consent as an HTTP client with that grant's token — one card per ``run_code``, rule
plugins, the journal. The MCP ids inside the server are the channel's own (the agent's ids
are mapped back on the answer). A connection id is known only to the channel that made it:
another agent's channel refuses it as unknown. Bounds: :data:`MAX_CONNECTIONS` connections,
:data:`MAX_IN_FLIGHT` requests under way per connection (more are refused with a JSON-RPC
error, nothing queued). Ending a connection (``mcp/disconnect``, :meth:`AcpChannel.aclose` when
the pipe closes) sets its :data:`~.http.GONE` event — a ``run_code`` whose card waits is
withdrawn, never run, as for an HTTP client gone mid-call — and cancels its calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
from collections.abc import Callable
from typing import Any

from .._errors import EscouadeError
from .http import CALLER, GONE, Grant

log = logging.getLogger(__name__)

__all__ = ["AcpChannel", "ChannelError", "MAX_CONNECTIONS", "MAX_IN_FLIGHT", "METHODS"]

METHODS = ("mcp/connect", "mcp/message", "mcp/disconnect")
"""The agent → client requests of MCP-over-ACP."""
MAX_CONNECTIONS = 8
"""MCP connections one channel keeps open at once (an agent opens one per server it uses)."""
MAX_IN_FLIGHT = 16
"""MCP requests under way at once on one connection; more are refused, not queued."""
INVALID_PARAMS, INTERNAL, LIMIT = -32602, -32603, -32000


class ChannelError(EscouadeError):
    """A refused MCP-over-ACP request: ``code`` and ``message`` are its JSON-RPC error's."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def error(self) -> dict[str, Any]:
        """The JSON-RPC error object."""
        return {"code": self.code, "message": self.message}


class _Connection:
    """One MCP connection: the server loop's task, its streams, the requests under way."""

    def __init__(self, connection_id: str, grant: Grant) -> None:
        import anyio

        self.id = connection_id
        self.gone = asyncio.Event()
        self.to_server, self.server_in = anyio.create_memory_object_stream[Any](MAX_IN_FLIGHT * 2)
        self.server_out, self.from_server = anyio.create_memory_object_stream[Any](MAX_IN_FLIGHT * 2)
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.ids = itertools.count(1)
        self.tasks: list[asyncio.Task] = []
        self.grant = grant


class AcpChannel:
    """The kernel server ``mcp`` (a started :class:`~.server.KernelServer`'s ``MCPServer``)
    offered to one agent's pipe under ``grant``. ``server_id`` (random) is what the
    ``acp`` entry names; ``notify(message)`` sends a JSON-RPC notification to the agent
    (the server's own MCP notifications, as ``mcp/message``). :meth:`handle` answers
    the three :data:`METHODS`; :meth:`aclose` ends every connection."""

    def __init__(self, mcp: Any, grant: Grant, notify: Callable[[dict[str, Any]], None] | None = None) -> None:
        self._mcp = mcp
        self.grant = grant
        self.server_id = f"escouade-{secrets.token_hex(8)}"
        self._notify = notify
        self._connections: dict[str, _Connection] = {}
        self.closed = False

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._connections)

    def entry(self, name: str) -> dict[str, Any]:
        """ACP's ``mcpServers`` entry for this channel: ``{"type": "acp", "name", "serverId"}``."""
        return {"type": "acp", "name": name, "serverId": self.server_id}

    async def handle(self, method: str, params: Any, *, request: bool = True) -> dict[str, Any] | None:
        """One MCP-over-ACP message from the agent (``request``: it has an id and wants an
        answer): the answer's ``result``, or None for a notification. Raises
        :class:`ChannelError` (its JSON-RPC error) for a bad or refused one."""
        if self.closed:
            raise ChannelError(INVALID_PARAMS, "the kernel's MCP server is no longer offered to this session")
        if not isinstance(params, dict):
            raise ChannelError(INVALID_PARAMS, f"{method}: params must be an object")
        if method == "mcp/connect":
            return await self._connect(params)
        named = params.get("connectionId")
        connection = self._connections.get(named) if isinstance(named, str) else None
        if connection is None:  # another agent's connection is unknown here too
            raise ChannelError(INVALID_PARAMS, f"{method}: unknown connectionId {str(named)[:80]!r}")
        if method == "mcp/disconnect":
            await self._end(connection)
            return {}
        if method != "mcp/message":
            raise ChannelError(-32601, f"method not found: {method[:80]}")
        inner = params.get("method")
        if not isinstance(inner, str) or not inner:
            raise ChannelError(INVALID_PARAMS, "mcp/message: method must be a non-empty string")
        inner_params = params.get("params")
        if inner_params is not None and not isinstance(inner_params, dict):
            raise ChannelError(INVALID_PARAMS, "mcp/message: params must be an object")
        if not request:
            await self._send(connection, {"jsonrpc": "2.0", "method": inner,
                                          **({"params": inner_params} if inner_params is not None else {})})
            return None
        return await self._request(connection, inner, inner_params)

    async def _connect(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("serverId") != self.server_id:
            raise ChannelError(INVALID_PARAMS, f"mcp/connect: unknown serverId {str(params.get('serverId'))[:80]!r}")
        if len(self._connections) >= MAX_CONNECTIONS:
            raise ChannelError(LIMIT, f"mcp/connect: {MAX_CONNECTIONS} MCP connections are open already")
        connection = _Connection(secrets.token_hex(12), self.grant)
        self._connections[connection.id] = connection
        lowlevel = self._mcp._lowlevel_server  # the SDK's own loop: the tools the HTTP app serves
        caller, gone = CALLER.set(self.grant), GONE.set(connection.gone)
        try:  # the loop's task (and every handler task it starts) holds this grant
            connection.tasks.append(asyncio.ensure_future(lowlevel.run(
                connection.server_in, connection.server_out, lowlevel.create_initialization_options())))
        finally:
            GONE.reset(gone)
            CALLER.reset(caller)
        connection.tasks.append(asyncio.ensure_future(self._pump(connection)))
        self.grant._seen()
        return {"connectionId": connection.id}

    async def _send(self, connection: _Connection, message: dict[str, Any]) -> None:
        from mcp.shared.message import SessionMessage
        from mcp_types import jsonrpc_message_adapter

        try:
            parsed = jsonrpc_message_adapter.validate_python(message)
        except Exception as exc:
            raise ChannelError(INVALID_PARAMS, f"mcp/message: not an MCP message: {str(exc).splitlines()[0][:200]}") \
                from None
        try:
            await connection.to_server.send(SessionMessage(parsed))
        except Exception:
            raise ChannelError(INVALID_PARAMS, "mcp/message: the connection has ended") from None

    async def _request(self, connection: _Connection, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        if len(connection.waiting) >= MAX_IN_FLIGHT:
            raise ChannelError(LIMIT, f"mcp/message: {MAX_IN_FLIGHT} requests are under way on this connection")
        rid = next(connection.ids)
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        connection.waiting[rid] = answer
        try:
            await self._send(connection, {"jsonrpc": "2.0", "id": rid, "method": method,
                                          **({"params": params} if params is not None else {})})
            got = await answer
        except asyncio.CancelledError:  # the pipe closed, or the agent's request was dropped: the call too
            if connection.id in self._connections:
                with contextlib.suppress(Exception):
                    connection.to_server.send_nowait(_cancelled(rid))
            raise
        finally:
            connection.waiting.pop(rid, None)
        if "error" in got:
            error = got["error"] if isinstance(got["error"], dict) else {}
            raise ChannelError(int(error.get("code", INTERNAL)), str(error.get("message", "MCP error")))
        result = got.get("result")
        return result if isinstance(result, dict) else {}

    async def _pump(self, connection: _Connection) -> None:
        """The server's messages: answers go to their waiting request, its notifications to the agent."""
        try:
            async for item in connection.from_server:
                message = item.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
                rid = message.get("id")
                if "method" not in message:
                    waiting = connection.waiting.get(rid) if isinstance(rid, int) else None
                    if waiting is not None and not waiting.done():
                        waiting.set_result(message)
                elif "id" not in message and self._notify is not None:
                    self._notify({"jsonrpc": "2.0", "method": "mcp/message",
                                  "params": {"connectionId": connection.id, "method": message["method"],
                                             **({"params": message["params"]} if "params" in message else {})}})
                # a server → client request (sampling, elicitation): the kernel's tools send none
        except Exception:
            log.debug("MCP-over-ACP connection %s: pump ended", connection.id, exc_info=True)
        finally:
            for waiting in connection.waiting.values():
                if not waiting.done():
                    waiting.set_result({"error": {"code": INTERNAL, "message": "the MCP connection ended"}})

    async def _end(self, connection: _Connection) -> None:
        """End one connection: its GONE event set (a card waiting is withdrawn), its tasks cancelled."""
        self._connections.pop(connection.id, None)
        connection.gone.set()
        await asyncio.sleep(0)  # the waiting consent sees GONE before the cancellation
        connection.to_server.close()
        for task in connection.tasks:
            task.cancel()
        await asyncio.gather(*connection.tasks, return_exceptions=True)
        for waiting in connection.waiting.values():
            if not waiting.done():
                waiting.set_result({"error": {"code": INTERNAL, "message": "the MCP connection ended"}})

    def close(self) -> None:
        """End every connection at once, without waiting (the session is over): GONE set,
        streams closed, tasks cancelled. Idempotent."""
        self.closed = True
        for connection in list(self._connections.values()):
            self._connections.pop(connection.id, None)
            connection.gone.set()
            connection.to_server.close()
            for task in connection.tasks:
                task.cancel()

    async def aclose(self) -> None:
        """End every connection (the agent's pipe closed, its session ended). Idempotent."""
        self.closed = True
        for connection in list(self._connections.values()):
            await self._end(connection)


def _cancelled(rid: int) -> Any:
    from mcp.shared.message import SessionMessage
    from mcp_types import jsonrpc_message_adapter

    return SessionMessage(jsonrpc_message_adapter.validate_python(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid, "reason": "gone"}}))
