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
import json
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

DIRECT_TOOLS = frozenset({"list_variables", "inspect_variable", "notebook_cells"})
"""The read tools whose ``tools/call`` :class:`DirectCalls` may answer itself: no card, no progress, no message
from the server to the client, nothing but their answer."""
DIRECT_MAX_BODY = 64 * 1024
"""Bytes of a POST's body read before it is known whether :class:`DirectCalls` answers it (a longer one goes
to the SDK, replayed whole)."""

LOOPBACK_HOSTS = ("127.0.0.1:", "localhost:", "[::1]:")
"""The ``Host`` header's beginnings the SDK's DNS-rebinding check lets through for a server on loopback."""

log = logging.getLogger(__name__)


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
                 sessions: dict[str, Grant], direct: "DirectCalls | None" = None) -> None:
        self.app = app
        self.grant_for = grant_for  # a token -> its live grant, or None
        self.sessions = sessions  # Mcp-Session-Id -> the grant whose request opened it (shared, kept up to date)
        self.direct = direct  # answers a read tool's call itself (issue 37), or None: every request to the SDK

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
        source = [receive]  # what the SDK reads: the server's receive, or one replaying what DirectCalls read

        async def receive_watched() -> dict:
            message = await source[0]()
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
            direct = self.direct
            if method == "POST" and session_id is not None and direct is not None and direct.takes(scope, session_id):
                replay = await direct.answer(scope, receive, send, session_id)
                if replay is None:  # answered
                    return
                source[0] = replay
            await self.app(scope, receive_watched, send_watched)
        finally:
            GONE.reset(gone_token)
            CALLER.reset(token)


class DirectCalls:
    """The answer of a read tool's ``tools/call`` without the SDK's session machinery (issue 37: a kernel tool call
    near a bare request). The SDK's streamable HTTP carries every request through memory streams to the session's
    task, then its answer back through a router to an SSE stream of its own: ~1 ms a call here, as much as the whole
    HTTP request. A POST of a session the SDK holds (``Mcp-Session-Id``, already checked to be the request's grant's
    by :class:`BearerGate`), to a loopback ``Host`` without an ``Origin`` (the SDK's DNS-rebinding check), with a
    protocol version the SDK's stateful path serves (no header: the SDK's default, as it takes it), JSON in and JSON
    and SSE accepted, whose body is one JSON-RPC request ``tools/call`` of one of :data:`DIRECT_TOOLS` without
    ``_meta`` (no progress asked), gets its answer from the same :class:`MCPServer`'s ``call_tool`` — the same tool
    functions, argument validation and result conversion — as ``application/json`` (the spec lets a server answer a
    POST either way). Anything else, and any body it does not take, goes to the SDK as it came (the body replayed).
    A tool's ``ToolError`` or unexpected exception is the ``isError`` result the SDK's handler makes of it; an
    ``MCPError`` is the JSON-RPC error. What such a call does not get: a ``notifications/cancelled`` for it finds
    nothing to cancel (a read ends within the server's read budget anyway), and it does not count as the session's
    activity for the SDK's idle timeout (8 h; a GET stream or any other request does)."""

    def __init__(self, mcp: Any, path: str = "/mcp") -> None:
        from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
        from mcp.shared.exceptions import MCPError  # the server side is imported already (KernelServer._start)
        from mcp_types.methods import serialize_server_result
        from mcp_types import DEFAULT_NEGOTIATED_VERSION
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
        import pydantic_core

        self.mcp = mcp
        self.parse = pydantic_core.from_json  # the SDK's transport parses a POST's body with it
        self.wire = serialize_server_result  # the SDK's own shaping of a result for the request's protocol version
        self.path = path
        self.mcp_error, self.tool_error, self.unexpected = MCPError, ToolError, UnexpectedToolError
        self.versions = frozenset(HANDSHAKE_PROTOCOL_VERSIONS)
        self.default_version = DEFAULT_NEGOTIATED_VERSION  # the SDK's, for a request without the header
        self.answered = 0  # calls answered here (the tests and benchmarks/mcp_roundtrip.py read it)

    def takes(self, scope: dict, session_id: str) -> bool:
        """Whether a POST may be answered here, from its path and headers (its body is read by :meth:`answer`)."""
        if scope.get("path") != self.path:
            return False
        headers = scope.get("headers")
        # the SDK's DNS-rebinding check (a server on loopback) is its own: a request from a page (an Origin) or
        # to a name that is not loopback goes to the SDK, which answers it as it does (403, 421 or the call)
        if _header(headers, b"origin") is not None or not (_header(headers, b"host") or "").startswith(
                LOOPBACK_HOSTS):
            return False
        if (_header(headers, b"mcp-protocol-version") or self.default_version) not in self.versions:
            return False
        # the SDK's Content-Type and Accept checks, or stricter: what they might refuse goes to the SDK
        if "application/json" not in [part.strip() for part in
                                      (_header(headers, b"content-type") or "").split(";")[0].split(",")]:
            return False
        accepted = {kind.split(";")[0].strip().lower() for kind in (_header(headers, b"accept") or "").split(",")}
        if not {"application/json", "text/event-stream"} <= accepted:
            return False
        instances = getattr(self.mcp.session_manager, "_server_instances", None)  # the sessions the SDK holds
        return isinstance(instances, dict) and session_id in instances

    def _call_of(self, body: bytes) -> tuple[Any, str, dict] | None:
        """``(id, tool name, arguments)`` of a body this class answers, else None."""
        try:
            msg = self.parse(body)  # the SDK's parser: what it refuses (UTF-16, a BOM, a lone surrogate) goes to it
        except (ValueError, RecursionError):  # not JSON, or nested too deep
            return None
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or msg.get("method") != "tools/call":
            return None
        req_id, params = msg.get("id"), msg.get("params")
        if isinstance(req_id, bool) or not isinstance(req_id, (str, int)) or not isinstance(params, dict):
            return None
        name, arguments = params.get("name"), params.get("arguments", {})
        if name not in DIRECT_TOOLS or "_meta" in params or not isinstance(arguments, dict) or set(params) - {
                "name", "arguments"}:
            return None
        return req_id, name, arguments

    async def answer(self, scope: dict, receive: Callable, send: Callable, session_id: str) -> Callable | None:
        """Read the POST's body and answer it (None), or give the ``receive`` that replays it to the SDK."""
        chunks: list[bytes] = []
        size, more = 0, True
        while more and size <= DIRECT_MAX_BODY:
            message = await receive()
            if message.get("type") != "http.request":  # the client left: the SDK sees it as it would have
                return _replay(receive, b"".join(chunks), True, message)
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            more = bool(message.get("more_body"))
        body = b"".join(chunks)
        call = None if more or size > DIRECT_MAX_BODY else self._call_of(body)
        if call is None:
            return _replay(receive, body, more)
        req_id, name, arguments = call
        version = _header(scope.get("headers"), b"mcp-protocol-version") or self.default_version  # as the SDK
        try:
            try:
                result = (await self.mcp.call_tool(name, arguments)).model_dump(by_alias=True, mode="json",
                                                                                 exclude_none=True)
            except self.mcp_error:
                raise
            except Exception as exc:  # as the SDK's handler: a ToolError (the model reads it) or unexpected (logged)
                if not isinstance(exc, self.tool_error) or isinstance(exc, self.unexpected):
                    log.warning("escouade_nb: the tool %r raised an unexpected exception", name, exc_info=True)
                result = {"content": [{"type": "text", "text": str(exc)}], "isError": True}
            answer: dict = {"jsonrpc": "2.0", "id": req_id, "result": self.wire("tools/call", version, result)}
        except self.mcp_error as exc:
            answer = {"jsonrpc": "2.0", "id": req_id,
                      "error": exc.error.model_dump(by_alias=True, mode="json", exclude_none=True)}
        data = json.dumps(answer, ensure_ascii=False).encode("utf-8")
        self.answered += 1
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                                (b"mcp-session-id", session_id.encode("latin-1"))]})
        await send({"type": "http.response.body", "body": data})
        return None


def _replay(receive: Callable, body: bytes, more_body: bool, then: dict | None = None) -> Callable:
    """A ``receive`` that gives ``body`` (the part of a request's body read so far) as one message, then
    ``then`` (the message the reading stopped on), then what ``receive`` gives."""
    pending = [{"type": "http.request", "body": body, "more_body": more_body}]
    if then is not None:
        pending.append(then)

    async def replayed() -> dict:
        return pending.pop(0) if pending else await receive()

    return replayed


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
