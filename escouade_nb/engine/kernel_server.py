"""The kernel's own MCP server, ``escouade``: an agent started from the notebook reads the
live kernel (variables, cells) and asks to run code in it.

One server per running event loop (:meth:`KernelServer.shared`), started on first use: the
``mcp`` SDK's streamable-HTTP app (``mcp.server.mcpserver.MCPServer``), served by uvicorn
as a task on *this* loop — no thread — from a socket bound to ``127.0.0.1:0``. ``mcp`` and
uvicorn are imported there, in a worker thread (0.6–1 s), never when this module is.
Each agent session gets a :class:`Grant`: a bearer token the client sends as
``Authorization: Bearer <token>`` (in the ``mcpServers`` entry's headers, or in the stdio
bridge's environment: never in argv). A request without a live token gets HTTP 401.

Tools (input schemas in each tool's description; results are plain text):

``list_variables(include_all=False)``
    the user namespace's names, type and a one-line summary (no modules, functions,
    classes, ``_private`` or IPython names unless ``include_all``).
``inspect_variable(name, rows=5, attributes=False)``
    type, ``repr`` cut to 2,000 characters, len/shape/dtype/dtypes/columns/head for
    array- and frame-like values (duck typed), public attributes on request.
``notebook_cells(start=None, end=None, source="history")``
    ``history``: the cells run in this kernel (IPython's In/Out, by execution count);
    ``file``: the saved cells of the notebook file when the kernel knows its path
    (``__session__``/``JPY_SESSION_NAME``, see :mod:`escouade_nb.core.notebook`; the file
    is read in a thread, and the answer says which file); ``both``.
``run_code(code)``
    always asks the caller's owner first (:meth:`ToolOwner.ask_run_code`: a permission
    card), then runs the code in the user namespace on the loop: stdout/stderr captured,
    the last expression's ``repr``, an exception as its traceback text.

Rules of the loop. The tools are ``async def``: they run on the loop's thread, between
cells (or between the awaits of an async cell), so they see ``user_ns`` as cells do. While
a cell blocks the loop, calls wait and answer after it. A heartbeat task notices such
blocks: a ``run_code`` that starts after the loop was blocked longer than ``busy_limit``
seconds is not run (its client has probably given up) and answers "the kernel was busy…
call it again"; reads answer anyway. A ``run_code`` whose MCP request is cancelled while
its card waits is never run: the cancellation reaches ``ask_run_code`` (the engine
withdraws the card).

Quiet by design: ``MCPServer()`` configures root logging (``basicConfig``), so the root
logger's handlers and level are restored around it; uvicorn gets ``log_config=None``,
``access_log=False``, its signal capture turned off; the ``mcp`` and ``uvicorn`` loggers get
a ``NullHandler`` so their records reach only the handlers the user configured (never
the notebook through logging's last resort). Tools turn every failure into a ``ToolError``
whose text reaches the model.
"""

import ast
import asyncio
import atexit
import contextlib
import contextvars
import hmac
import inspect
import io
import linecache
import logging
import os
import secrets
import socket
import sys
import time
import traceback
import weakref
from collections.abc import Awaitable, Callable, Container, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from .._version import __version__
from ..core import notebook as notebook_core
from ..core import variables as variables_core
from ..core.observers import Observers

__all__ = ["SERVER_NAME", "TOOLS", "DEFAULT_BUSY_LIMIT", "Refused", "ToolOwner", "Grant", "KernelServer",
           "run_result_text"]

log = logging.getLogger(__name__)

SERVER_NAME = "escouade"
TOOLS = ("list_variables", "inspect_variable", "notebook_cells", "run_code")
DEFAULT_BUSY_LIMIT = 30.0
"""Seconds the loop may have been blocked before a ``run_code`` is refused as stale."""
HEARTBEAT = 0.5
"""Seconds between the heartbeat's wake-ups (it measures how late each one is)."""
BUSY_GRACE = 2.0
"""A block counts for calls that start within this many seconds after it ended (the
backlog of a long block takes a moment to be served)."""
SESSION_IDLE_TIMEOUT = 8 * 3600.0
"""Seconds an MCP session may idle (no request, no GET stream) before the SDK drops it."""
MAX_CAPTURE = 50_000
"""Characters of stdout, of stderr and of the result's repr kept by ``run_code``."""
START_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0

INSTRUCTIONS = (
    "The live Jupyter kernel this agent was started from. list_variables and inspect_variable read the "
    "user's variables (no code runs but repr); notebook_cells gives the cells run so far and the saved "
    "notebook file; run_code runs Python in the kernel after the user allows it (a permission card)."
)

_CALLER: contextvars.ContextVar["Grant | None"] = contextvars.ContextVar("escouade_mcp_caller", default=None)


class Refused(Exception):
    """A tool call the owner did not allow (denied by the user or a rule, or cancelled).
    ``message`` is what the model reads."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@runtime_checkable
class ToolOwner(Protocol):
    """Whoever answers for one grant's calls (the engine's agent session).

    ``ask_run_code`` returns when the code may run and raises :class:`Refused` when not;
    it is cancelled when the MCP request is (the card must then be withdrawn).
    ``allow_read(tool, arguments)`` has the same contract for the read tools (an owner
    without it allows every read); a ``notebook_cells`` that reads the notebook file has
    that file in ``arguments["path"]`` (so a private project's fence can be applied). ``ran_code(code, result)`` is told the result dict of
    each run (``{"stdout", "stderr", "result", "error"}``)."""

    name: str

    async def ask_run_code(self, code: str) -> None: ...

    async def allow_read(self, tool: str, arguments: dict) -> None: ...

    def ran_code(self, code: str, result: dict) -> None: ...


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


def ipython_shell() -> Any:
    """The running IPython shell, without importing IPython when nobody did."""
    module = sys.modules.get("IPython")
    if module is None:
        return None
    try:
        return module.get_ipython()
    except Exception:
        return None


class _Failure(Exception):
    """A tool's anticipated failure; its text goes to the model as a ToolError."""


class _Capture(io.TextIOBase):
    """A text stream keeping the first ``limit`` characters written to it."""

    encoding = "utf-8"

    def __init__(self, limit: int = MAX_CAPTURE) -> None:
        super().__init__()
        self._limit = limit
        self._parts: list[str] = []
        self._size = 0
        self.dropped = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        room = self._limit - self._size
        if room > 0:
            kept = text[:room]
            self._parts.append(kept)
            self._size += len(kept)
            self.dropped += len(text) - len(kept)
        else:
            self.dropped += len(text)
        return len(text)

    def text(self) -> str:
        out = "".join(self._parts)
        return out + (f"… [cut: {self.dropped:,} more characters]" if self.dropped else "")


def run_result_text(result: Mapping[str, Any]) -> str:
    """A ``run_code`` result dict as the text the model reads: ``stdout:``, ``stderr:``,
    ``result:`` and ``error:`` sections, those that are not empty."""
    parts = []
    for key in ("stdout", "stderr", "result", "error"):
        value = result.get(key)
        if value:
            parts.append(f"{key}:\n{value.rstrip(chr(10))}")
    return "\n".join(parts) if parts else "(ran: no output, no result)"


def _bearer(scope: Mapping[str, Any]) -> bytes | None:
    """The token of the request's first ``Authorization: Bearer …`` header."""
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                return token.strip()
            return None
    return None


class _BearerGate:
    """ASGI wrapper: an HTTP request carries a live grant's token or gets 401; the grant
    is put in a context variable for the tools (the SDK carries the request's context
    to the tool's task). The lifespan passes; websockets are refused."""

    def __init__(self, app: Any, server: "KernelServer") -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        kind = scope.get("type")
        if kind == "lifespan":
            await self.app(scope, receive, send)
            return
        if kind != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        grant = self.server._grant_for(_bearer(scope))
        if grant is None:
            body = b'{"error": "unauthorized: this MCP server needs its bearer token (Authorization header)"}'
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        grant._seen()
        token = _CALLER.set(grant)
        try:
            await self.app(scope, receive, send)
        finally:
            _CALLER.reset(token)


def import_server_side() -> tuple[Any, Any, Any, Any]:
    """(MCPServer, ToolError, uvicorn, pydantic.Field): the heavy imports (~0.5 s), run in
    a worker thread by :meth:`KernelServer.start`, or at once by ``%load_ext``."""
    import uvicorn
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import Field

    return MCPServer, ToolError, uvicorn, Field


_preloaded = False


def preload_in_kernel() -> bool:
    """Make ready, in the calling thread, what the first agent of a kernel would otherwise
    load on the kernel's loop; called by ``%load_ext escouade_nb`` and by the first
    ``get_squad()`` in a kernel, i.e. in the user's cell that asked for escouade (about a
    second, once per process; later calls return ``False`` at once).

    Imports anyio's asyncio backend (loaded on first use, on the loop), the engine (the ACP
    SDK, pydantic models) and :func:`import_server_side` (mcp, uvicorn; ``%load_ext``
    imports the views before calling this); then ``gc.collect()`` and ``gc.freeze()``: every object alive is moved out of
    the cyclic collector's scans. Without that, the next full collections, whether
    triggered by these imports in the server's worker thread or later by the agents'
    traffic, walk the whole kernel heap (~150,000 objects after these imports) under the
    GIL: 70–210 ms during which the loop cannot turn (measured: benchmarks/loop_stall.py).
    The price: an object alive now that later becomes garbage only through a reference
    cycle is not reclaimed (anything freed by its reference count still is); modules,
    classes and IPython's own objects, which are most of the heap at this point, live
    until the kernel exits anyway. ``True`` when this call did the work."""
    global _preloaded
    if _preloaded:
        return False
    import gc

    import anyio._backends._asyncio  # noqa: F401  (anyio loads its backend on first use: on the loop)
    from . import agent, squad  # noqa: F401  (the ACP SDK, anyio, pydantic models)

    import_server_side()
    gc.collect()
    gc.freeze()
    _preloaded = True
    return True


_QUIET_LOGGERS = ("mcp", "uvicorn", "sse_starlette")


def _quiet_third_party_loggers() -> None:
    for name in _QUIET_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())


class KernelServer:
    """The ``escouade`` MCP server of one event loop.

    ``await KernelServer.shared()`` gives the loop's server, started on first call (the
    interpreter's exit stops it; :meth:`close_shared` stops it earlier).
    ``KernelServer(namespace=dict)`` serves that dict (plain asyncio, tests); without a
    namespace it serves IPython's ``user_ns`` (hidden names: ``user_ns_hidden``) when a
    shell runs, else an empty namespace of its own (a script's globals are never shown). ``busy_limit``: seconds, see the module.
    ``url`` is ``http://127.0.0.1:PORT/mcp`` once started."""

    _shared: ClassVar["weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, KernelServer]"] = \
        weakref.WeakKeyDictionary()

    def __init__(self, namespace: dict | None = None, *, busy_limit: float = DEFAULT_BUSY_LIMIT,
                 hidden: Container[str] = ()) -> None:
        if busy_limit <= 0:
            raise ValueError(f"busy_limit must be > 0 seconds, got {busy_limit!r}")
        self._namespace = namespace
        self._own_namespace: dict | None = None
        self._hidden = hidden
        self.busy_limit = float(busy_limit)
        self._grants: dict[str, Grant] = {}
        self._port: int | None = None
        self._starting: asyncio.Future | None = None
        self._serve_task: asyncio.Task | None = None
        self._heartbeat_task: asyncio.Task | None = None
        self._uvicorn: Any = None
        self._socket: socket.socket | None = None
        self._tool_error: type[Exception] = _Failure
        self._closed = False
        self._last_beat = time.monotonic()
        self._stall = (0.0, 0.0)  # (ended at, seconds) of the last late heartbeat
        self._runs = 0

    # -- the loop's server ------------------------------------------------------------
    @classmethod
    async def shared(cls) -> "KernelServer":
        """This loop's server, started if needed (concurrent callers share one start).
        Errors of the start (``RuntimeError``, ``OSError``) propagate; a later call retries."""
        loop = asyncio.get_running_loop()
        server = cls._shared.get(loop)
        if server is None or server._closed:
            server = cls._shared[loop] = cls()
            atexit.register(server._stop_now)
        await server.start()
        return server

    @classmethod
    async def close_shared(cls) -> None:
        """Stop this loop's shared server, if one runs (its grants end with it)."""
        server = cls._shared.pop(asyncio.get_running_loop(), None)
        if server is not None:
            await server.aclose()

    @property
    def started(self) -> bool:
        return self._port is not None and not self._closed

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT/mcp``; ``RuntimeError`` before :meth:`start`."""
        if self._port is None:
            raise RuntimeError("the kernel's MCP server is not started (await start() or KernelServer.shared())")
        return f"http://127.0.0.1:{self._port}/mcp"

    @property
    def grants(self) -> tuple[Grant, ...]:
        return tuple(self._grants.values())

    def grant(self, owner: ToolOwner) -> Grant:
        """A new grant (token) whose calls ``owner`` answers for."""
        if self._closed:
            raise RuntimeError("the kernel's MCP server is closed")
        if not callable(getattr(owner, "ask_run_code", None)):
            raise TypeError(f"{owner!r} is not a ToolOwner: it has no ask_run_code(code)")
        g = Grant(owner=owner)
        self._grants[g.token] = g
        return g

    def revoke(self, grant: Grant) -> None:
        """End a grant: its token gets 401 from now on (calls under way finish)."""
        self._grants.pop(grant.token, None)

    def _grant_for(self, token: bytes | None) -> Grant | None:
        if not token:
            return None
        found = None
        for known, g in list(self._grants.items()):  # every token compared: no early exit
            if hmac.compare_digest(token, known.encode()):
                found = g
        return found

    # -- start and stop ---------------------------------------------------------------
    async def start(self) -> "KernelServer":
        """Start serving (idempotent; concurrent calls share one start)."""
        if self._closed:
            raise RuntimeError("the kernel's MCP server is closed")
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        starting = self._starting
        try:
            await asyncio.shield(starting)
        except BaseException:
            if starting.done() and (starting.cancelled() or starting.exception() is not None):
                self._starting = None  # a later call tries again
            raise
        return self

    async def _start(self) -> None:
        MCPServer, ToolError, uvicorn, Field = await asyncio.to_thread(import_server_side)
        self._tool_error = ToolError
        _quiet_third_party_loggers()
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        try:  # MCPServer() calls logging.basicConfig: the notebook's logging is left as it was
            mcp = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, version=__version__)
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
        # these build pydantic models and starlette routes on the loop (5–25 ms each on a busy
        # machine): one turn of the loop each, so that its other callbacks run in between
        await asyncio.sleep(0)
        self._add_tools(mcp, Field)
        await asyncio.sleep(0)
        app = mcp.streamable_http_app(host="127.0.0.1", session_idle_timeout=SESSION_IDLE_TIMEOUT)
        await asyncio.sleep(0)
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
            config = uvicorn.Config(_BearerGate(app, self), log_config=None, access_log=False, lifespan="on",
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
        self._socket, self._uvicorn, self._serve_task, self._port = sock, server, task, port
        self._last_beat = time.monotonic()
        self._heartbeat_task = asyncio.ensure_future(self._heartbeat())
        log.debug("kernel MCP server on 127.0.0.1:%d", port)

    async def aclose(self) -> None:
        """Stop serving and wait for it (at most ~1 s with a client connected); every
        grant ends. Idempotent."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._stop_now)
        loop = asyncio.get_running_loop()
        if self._shared.get(loop) is self:
            del self._shared[loop]
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
            await asyncio.gather(self._starting, return_exceptions=True)
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            await asyncio.gather(self._heartbeat_task, return_exceptions=True)
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
        if self._serve_task is not None:
            done, _ = await asyncio.wait({self._serve_task}, timeout=STOP_TIMEOUT)
            if not done:
                self._uvicorn.force_exit = True
                self._serve_task.cancel()
            await asyncio.gather(self._serve_task, return_exceptions=True)
        if self._socket is not None:
            self._socket.close()
        self._grants.clear()

    def _stop_now(self) -> None:
        """Interpreter exit (the loop no longer runs): refuse everything, stop serving,
        cancel the tasks, close the socket."""
        self._grants.clear()
        if self._uvicorn is not None:
            self._uvicorn.should_exit = self._uvicorn.force_exit = True
        for task in (self._heartbeat_task, self._serve_task):
            if task is not None and not task.done():
                try:
                    task.cancel()
                except RuntimeError:  # its loop is closed
                    pass
        if self._socket is not None:
            self._socket.close()

    # -- the busy rule ------------------------------------------------------------------
    async def _heartbeat(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(HEARTBEAT)
            now = time.monotonic()
            late = now - before - HEARTBEAT
            # the longest block of the grace window is kept: the backlog served right
            # after a long block makes the next beats a little late too
            if late > 0.1 and (late >= self._stall[1] or now - self._stall[0] > BUSY_GRACE):
                self._stall = (now, late)
            self._last_beat = now

    def blocked_for(self) -> float:
        """Seconds the loop was just blocked: the block under way (the heartbeat has not
        run since), or one that ended less than ``BUSY_GRACE`` s ago; 0.0 when none."""
        now = time.monotonic()
        pending = now - self._last_beat - HEARTBEAT
        ended, seconds = self._stall
        recent = seconds if now - ended <= BUSY_GRACE else 0.0
        return max(pending, recent, 0.0)

    def _check_busy(self) -> None:
        blocked = self.blocked_for()
        if blocked > self.busy_limit:
            raise _Failure(f"the kernel was busy running a cell for {blocked:.0f} s; the call was not run — "
                           "call it again")

    # -- the namespace --------------------------------------------------------------------
    def _user_ns(self) -> tuple[Mapping[str, Any], Container[str]]:
        if self._namespace is not None:
            return self._namespace, self._hidden
        shell = ipython_shell()
        if shell is not None:
            return shell.user_ns, getattr(shell, "user_ns_hidden", ())
        if self._own_namespace is None:  # no kernel, no namespace given: one of its own, never __main__'s
            self._own_namespace = {}
        return self._own_namespace, self._hidden

    # -- the tools ----------------------------------------------------------------------
    def _add_tools(self, mcp: Any, Field: Any) -> None:
        """Register the four tools. Their signatures are the input schemas (pydantic
        ``Field`` descriptions go into them); ``structured_output=False``: text only."""
        from typing import Annotated, Literal

        call = self._call

        async def list_variables(
            include_all: Annotated[bool, Field(description="Also list modules, functions, classes, names "
                                                           "starting with _ and IPython's own names.")] = False,
        ) -> str:
            """List the variables of the live kernel's user namespace: one line each with its name, type and
            a short summary (shape and columns of data frames, length of containers, value of scalars).
            Input: {"include_all": bool, default false}."""
            return await call("list_variables", {"include_all": include_all},
                              lambda: self._list_variables(include_all))

        async def inspect_variable(
            name: Annotated[str, Field(description="A variable name of the kernel's namespace (as in "
                                                   "list_variables).")],
            rows: Annotated[int, Field(ge=0, le=1000, description="Rows of head() shown for data frames, "
                                                                  "series and arrays.")] = 5,
            attributes: Annotated[bool, Field(description="Also list public attributes (instance values with "
                                                          "a short repr; methods and properties by name, not "
                                                          "evaluated).")] = False,
        ) -> str:
            """Describe one live variable: type, repr (cut to 2000 characters), length, and for array- and
            frame-like values (pandas, numpy, polars, xarray) shape, dtype(s), columns and the first rows.
            Input: {"name": str, "rows": int 0-1000 (default 5), "attributes": bool (default false)}."""
            args = {"name": name, "rows": rows, "attributes": attributes}
            return await call("inspect_variable", args, lambda: self._inspect_variable(name, rows, attributes))

        async def notebook_cells(
            start: Annotated[int | None, Field(description="First cell, inclusive: an execution count for "
                                                           "history, a 1-based position for the file; negative "
                                                           "counts from the end (-1 is the last).")] = None,
            end: Annotated[int | None, Field(description="Last cell, inclusive (same numbering as "
                                                         "start).")] = None,
            source: Annotated[Literal["history", "file", "both"], Field(
                description="history: the cells run in this kernel (In/Out, outputs as text); file: the saved "
                            "cells of the notebook file the kernel runs, when it knows it; both.")] = "history",
        ) -> str:
            """The notebook's cells: those run in this kernel with their execution counts and results
            (source="history"), and/or the saved cells and outputs of the notebook file (source="file"; the
            answer names the file read, or says the kernel does not know it).
            Input: {"start": int|null, "end": int|null, "source": "history"|"file"|"both"}."""
            args: dict[str, Any] = {"start": start, "end": end, "source": source}
            ref = self._notebook_ref() if source in ("file", "both") else None
            if ref is not None:
                args["path"] = str(ref.path)  # for the owner: a private project's fence covers the file too
            return await call("notebook_cells", args, lambda: self._notebook_cells(start, end, source, ref))

        async def run_code(
            code: Annotated[str, Field(description="Python source to run in the kernel's user namespace; "
                                                   "top-level await is allowed; the value of a last "
                                                   "expression is returned.")],
        ) -> str:
            """Run Python code in the live kernel, in the user's namespace (variables it defines stay). The user
            is asked first (a permission card); a refusal comes back as an error with the reason. Returns
            stdout, stderr, the last expression's repr and any exception's traceback.
            Input: {"code": str}."""
            return await call("run_code", {"code": code}, lambda: self._run_code(code))

        for fn in (list_variables, inspect_variable, notebook_cells, run_code):
            mcp.add_tool(fn, structured_output=False)

    async def _call(self, tool: str, arguments: dict, impl: Callable[[], Awaitable[str]]) -> str:
        """One tool call: who called (the request's grant), the owner's consent for reads,
        the tool, and every failure as a ToolError the model reads."""
        ToolError = self._tool_error
        grant = _CALLER.get()
        if grant is None or self._grants.get(grant.token) is not grant:
            raise ToolError("this call carries no live grant of the kernel's MCP server")
        grant.calls += 1
        try:
            if tool != "run_code":
                allow = getattr(grant.owner, "allow_read", None)
                if callable(allow):
                    await self._consent(allow(tool, arguments))
            return await impl()
        except _Failure as exc:
            raise ToolError(str(exc)) from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("kernel MCP tool %s failed", tool, exc_info=True)
            raise ToolError(f"{tool} failed: {type(exc).__name__}: {exc}") from None

    @staticmethod
    async def _consent(ask: Awaitable[None]) -> None:
        """Await an owner's answer: :class:`Refused` becomes the call's error; a
        cancellation of the owner's own (not of this request) is a refusal too."""
        try:
            await ask
        except Refused as exc:
            raise _Failure(f"refused: {exc.message}") from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the MCP request itself was cancelled
            raise _Failure("refused: the permission request was cancelled") from None

    async def _list_variables(self, include_all: bool) -> str:
        ns, hidden = self._user_ns()
        rows = variables_core.list_variables(ns, hidden, include_all=include_all)
        if not rows:
            return ("No variables in the kernel's namespace" +
                    ("." if include_all else " (modules, functions, classes and _private names are not listed; "
                                             "include_all=true lists them)."))
        head = f"{len(rows)} variable{'s' if len(rows) != 1 else ''}" + (
            "" if include_all else " (modules, functions, classes and _private names not listed)") + ":"
        return "\n".join([head] + [f"- {r['name']}: {r['type']} — {r['summary']}" for r in rows])

    async def _inspect_variable(self, name: str, rows: int, attributes: bool) -> str:
        ns, _ = self._user_ns()
        if name not in ns:
            raise _Failure(f"no variable named {name!r} in the kernel's namespace (list_variables gives the names)")
        return variables_core.summary_text(variables_core.summarize(name, ns[name], rows=rows, attributes=attributes))

    def _notebook_ref(self) -> notebook_core.NotebookRef | None:
        return notebook_core.kernel_notebook(self._user_ns()[0], os.environ, Path.cwd())

    async def _notebook_cells(self, start: int | None, end: int | None, source: str,
                              ref: notebook_core.NotebookRef | None) -> str:
        if source not in ("history", "file", "both"):
            raise _Failure(f"source must be history, file or both, not {source!r}")
        ns, _ = self._user_ns()
        parts: list[str] = []
        if source in ("history", "both"):
            parts.append(self._history_text(ns, start, end))
        if source in ("file", "both"):
            parts.append(await self._file_text(ref, start, end))
        return "\n\n".join(parts)

    @staticmethod
    def _history_text(ns: Mapping[str, Any], start: int | None, end: int | None) -> str:
        try:
            cells = variables_core.cells_of(ns, start=start, end=end)
        except ValueError as exc:
            raise _Failure(str(exc)) from None
        if not isinstance(ns.get("In"), list):
            return "History: this namespace has no IPython history (In/Out)."
        if not cells:
            return "History: no cells run in this kernel" + (" in that range." if (start, end) != (None, None) else ".")
        lines = [f"History: {len(cells)} cell{'s' if len(cells) != 1 else ''} run in this kernel "
                 f"(execution counts {cells[0]['execution_count']}–{cells[-1]['execution_count']}):"]
        for c in cells:
            lines += [f"In [{c['execution_count']}]:", c["source"].rstrip("\n")]
            if c["output"] is not None:
                lines += [f"Out[{c['execution_count']}]:", c["output"]]
        return "\n".join(lines)

    @staticmethod
    async def _file_text(ref: notebook_core.NotebookRef | None, start: int | None, end: int | None) -> str:
        if ref is None:
            return ("Notebook file: this kernel does not know its notebook (no __session__ or JPY_SESSION_NAME: "
                    "started by nbclient, nbval, a console or a plain kernel).")
        if not ref.exists:
            return f"Notebook file: {ref.describe()}; nothing was read."
        try:
            nb = await asyncio.to_thread(_read_notebook, ref.path)
        except Exception as exc:
            return f"Notebook file: {ref.describe()} could not be read: {type(exc).__name__}: {exc}"
        try:
            cells = notebook_core.file_cells(nb, start=start, end=end)
        except ValueError as exc:
            raise _Failure(str(exc)) from None
        total = len(nb.get("cells") or [])
        lines = [f"Notebook file {ref.describe()}: the saved version (unsaved edits are not in it), {total} cells"
                 + (f", {len(cells)} shown" if len(cells) != total else "") + ":"]
        for c in cells:
            count = f" [{c['execution_count']}]" if c["execution_count"] is not None else ""
            lines.append(f"--- cell {c['index']} · {c['cell_type']}{count}" + (f" · id {c['id']}" if c["id"] else "")
                         + " ---")
            lines.append(c["source"].rstrip("\n"))
            if c["outputs"]:
                lines += ["--- outputs ---", c["outputs"].rstrip("\n")]
        return "\n".join(lines)

    async def _run_code(self, code: str) -> str:
        grant = _CALLER.get()
        owner = grant.owner  # type: ignore[union-attr]
        self._check_busy()
        await self._consent(owner.ask_run_code(code))
        self._check_busy()  # a block while the card waited: its client has given up too
        result = await self._execute(code)
        told = getattr(owner, "ran_code", None)
        if callable(told):
            try:
                told(code, result)
            except Exception:
                log.exception("kernel MCP server: %s.ran_code failed", getattr(owner, "name", owner))
        return run_result_text(result)

    async def _execute(self, code: str) -> dict[str, Any]:
        """Run ``code`` in the user namespace on the loop: ``{"stdout", "stderr",
        "result" (repr of the last expression, or None), "error" (traceback text, or
        None)}``. Top-level ``await`` runs on the loop (output printed meanwhile by other
        tasks is captured too)."""
        ns, _ = self._user_ns()
        self._runs += 1
        filename = f"<escouade run_code {self._runs}>"
        out, err = _Capture(), _Capture()
        result: dict[str, Any] = {"stdout": "", "stderr": "", "result": None, "error": None}
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        try:
            tree = ast.parse(code, filename, "exec")
        except SyntaxError as exc:
            result["error"] = "".join(traceback.format_exception_only(type(exc), exc))
            return result
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                body = compile(tree, filename, "exec", flags=flags)
                value = eval(body, ns)  # noqa: S307 — the user allowed this code
                if body.co_flags & inspect.CO_COROUTINE:
                    await value
                if last is not None:
                    expr = compile(last, filename, "eval", flags=flags)
                    value = eval(expr, ns)  # noqa: S307
                    if expr.co_flags & inspect.CO_COROUTINE:
                        value = await value
                    if value is not None:
                        result["result"] = variables_core.short_repr(value, MAX_CAPTURE)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # SystemExit and KeyboardInterrupt of the code included
                tb = exc.__traceback__
                while tb is not None and tb.tb_frame.f_code.co_filename != filename:
                    tb = tb.tb_next
                result["error"] = "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
        result["stdout"], result["stderr"] = out.text(), err.text()
        return result


def _read_notebook(path: Path) -> Any:
    """``nbformat.read`` (a worker thread's job: file I/O and nbformat's import)."""
    import nbformat

    return nbformat.read(str(path), as_version=4)
