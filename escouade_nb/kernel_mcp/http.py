"""The kernel MCP server's transport: each client's :class:`Grant` (its bearer token), the
ASGI gate that lets through only a live grant's token (and keeps each MCP session to the
grant that opened it), the request's context the tools read (:data:`CALLER`,
:data:`GONE`), and uvicorn serving the app from a loopback socket as a task on the running
loop (:func:`serve_on_loopback`). ``mcp`` and
uvicorn are imported by :func:`import_server_side`, never when this module is.
"""

import asyncio
import contextlib
import contextvars
import logging
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.observers import Observers

START_TIMEOUT = 30.0
"""Seconds uvicorn may take to start serving."""

CALLER: contextvars.ContextVar["Grant | None"] = contextvars.ContextVar("escouade_mcp_caller", default=None)
"""The grant of the request a tool call belongs to (set by :class:`BearerGate`)."""
GONE: contextvars.ContextVar["asyncio.Event | None"] = contextvars.ContextVar("escouade_mcp_gone", default=None)
"""Set when the HTTP client of the request (a POST) closed its connection (ASGI ``http.disconnect``)."""


@dataclass(eq=False)
class Grant:
    """One client's access: ``token`` (``secrets.token_urlsafe(32)``, never in a repr),
    ``owner`` (a :class:`ToolOwner`), ``connected`` (an authorised request with this token
    was seen), ``calls`` (tool calls made), ``on_connect`` (fired once, with the grant,
    at the first authorised request)."""

    owner: Any
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    connected: bool = False
    calls: int = 0
    on_connect: Observers = field(default_factory=lambda: Observers("kernel server grant.on_connect"), repr=False)

    @property
    def authorization(self) -> str:
        """The ``Authorization`` header's value: ``Bearer <token>``."""
        return f"Bearer {self.token}"

    def _seen(self) -> None:
        if not self.connected:
            self.connected = True
            self.on_connect.emit(self)


def _bearer(scope: Mapping[str, Any]) -> bytes | None:
    """The token of the request's first ``Authorization: Bearer …`` header."""
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                return token.strip()
            return None
    return None


def _header(headers: Any, name: bytes) -> str | None:
    for key, value in headers or ():
        if key.lower() == name:
            return value.decode("latin-1")
    return None


class BearerGate:
    """ASGI wrapper: an HTTP request carries a live grant's token or gets 401; the grant
    is put in a context variable for the tools (the SDK carries the request's context
    to the tool's task). The lifespan passes; websockets are refused.

    MCP sessions are the grant's that opened them: the ``Mcp-Session-Id`` of each
    response is recorded with the request's grant, and a request (POST, GET, DELETE)
    carrying a session id another grant opened — or one never seen — gets 404, as the
    SDK answers an unknown session. A POST's client closing its connection (ASGI
    ``http.disconnect``, seen when the SDK's response listens for it) sets the request's
    ``GONE`` event: a ``run_code`` whose card waits is then withdrawn, never run. (The
    spec lets a client drop a POST's stream and resume it; this server keeps no event
    store, so a dropped stream's answer could never reach anyone: a run nobody can read
    is not made.)"""

    def __init__(self, app: Any, grant_for: Callable[[bytes | None], Grant | None],
                 sessions: dict[str, Grant]) -> None:
        self.app = app
        self.grant_for = grant_for  # a token -> its live grant, or None
        self.sessions = sessions  # Mcp-Session-Id -> the grant whose request opened it (shared, kept up to date)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        kind = scope.get("type")
        if kind == "lifespan":
            await self.app(scope, receive, send)
            return
        if kind != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        grant = self.grant_for(_bearer(scope))
        if grant is None:
            await _refuse(send, 401, b'{"error": "unauthorized: this MCP server needs its bearer token '
                                     b'(Authorization header)"}')
            return
        grant._seen()
        sessions = self.sessions
        session_id = _header(scope.get("headers"), b"mcp-session-id")
        if session_id is not None and sessions.get(session_id) is not grant:
            await _refuse(send, 404, b'{"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32600, '
                                     b'"message": "Session not found"}}')
            return
        method = scope.get("method")
        gone = asyncio.Event()

        async def receive_watched() -> dict:
            message = await receive()
            if message.get("type") == "http.disconnect":
                gone.set()
            return message

        async def send_watched(message: dict) -> None:
            if message.get("type") == "http.response.start":
                opened = _header(message.get("headers"), b"mcp-session-id")
                if opened is not None and opened not in sessions:
                    sessions[opened] = grant
                if method == "DELETE" and session_id is not None and message.get("status", 500) < 300:
                    sessions.pop(session_id, None)
            await send(message)

        token, gone_token = CALLER.set(grant), GONE.set(gone if method == "POST" else None)
        try:
            await self.app(scope, receive_watched, send_watched)
        finally:
            GONE.reset(gone_token)
            CALLER.reset(token)


async def _refuse(send: Callable, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def import_server_side() -> tuple[Any, Any, Any, Any]:
    """(MCPServer, ToolError, uvicorn, pydantic.Field): the heavy imports (~0.5 s), run in
    a worker thread by :meth:`~.server.KernelServer.start`, or at once by ``%load_ext``."""
    import uvicorn
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import Field

    return MCPServer, ToolError, uvicorn, Field



QUIET_LOGGERS = ("mcp", "uvicorn", "sse_starlette")


def quiet_third_party_loggers() -> None:
    """A ``NullHandler`` on each of :data:`QUIET_LOGGERS` (once): their records reach only
    the handlers the user configured, never the notebook through logging's last resort."""
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())


async def serve_on_loopback(uvicorn: Any, app: Any) -> tuple[socket.socket, Any, asyncio.Task, int]:
    """Serve the ASGI ``app`` with ``uvicorn`` (the module) from a socket bound to
    ``127.0.0.1:0``, as a task on the running loop (no thread; the kernel's SIGINT stays the
    kernel's): ``(socket, uvicorn server, its task, port)`` once it serves. ``RuntimeError``
    when it does not start within :data:`START_TIMEOUT` s or stops while starting; on any
    failure or cancellation nothing is left serving and the socket is closed."""
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says
    # TCP, and without it every answer on a kept-alive connection waited for the
    # client's delayed ACK (40 ms per request, measured)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    server: Any = None
    task: asyncio.Task | None = None
    try:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on",
                                timeout_graceful_shutdown=1, ws="none", interface="asgi3",
                                server_header=False, proxy_headers=False)
        await asyncio.to_thread(config.load)  # its imports (protocols, lifespan) off the loop too

        class _Server(uvicorn.Server):
            def capture_signals(self) -> contextlib.AbstractContextManager:
                return contextlib.nullcontext()  # the kernel's SIGINT stays the kernel's

        server = _Server(config)

        async def serve() -> None:
            try:
                await server.serve(sockets=[sock])
            except SystemExit as exc:  # uvicorn's startup failure: never out of a task
                raise RuntimeError(f"the MCP server did not start (uvicorn exit {exc.code})") from None

        task = asyncio.ensure_future(serve())
        deadline = time.monotonic() + START_TIMEOUT
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("the MCP server stopped while starting")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the MCP server did not start in {START_TIMEOUT:.0f} s")
            await asyncio.sleep(0.01)
    except BaseException:  # a failure, a timeout or a cancellation: nothing is left serving
        if task is not None and not task.done():
            server.should_exit = server.force_exit = True
            task.cancel()
        sock.close()
        raise
    return sock, server, task, port
