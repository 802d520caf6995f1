"""The kernel's own MCP server, ``escouade``: an agent started from the notebook reads the
live kernel (variables, cells) and asks to run code in it.

One server per running event loop (:meth:`KernelServer.shared`), started on first use: the
``mcp`` SDK's streamable-HTTP app (``mcp.server.mcpserver.MCPServer``), served by uvicorn
as a task on *this* loop — no thread — from a socket bound to ``127.0.0.1:0``. ``mcp`` and
uvicorn are imported there, in a worker thread (0.6–1 s), never when this module is.
Each agent session gets a :class:`Grant`: a bearer token the client sends as
``Authorization: Bearer <token>`` (in the ``mcpServers`` entry's headers, or in the stdio
bridge's environment: never in argv). A request without a live token gets HTTP 401. An MCP
session (``Mcp-Session-Id``) belongs to the grant that opened it: another token's request
naming it gets 404, as an unknown session does.

Tools (input schemas in each tool's description; results are plain text):

``list_variables(include_all=False)``
    the user namespace's names, type and a one-line summary (no modules, functions,
    classes, ``_private`` or IPython names unless ``include_all``).
``inspect_variable(name, rows=5, attributes=False)``
    type, ``repr`` cut to 2,000 characters, len/shape/dtype/dtypes/columns/head for
    array- and frame-like values (duck typed), public attributes on request.
``notebook_cells(start=None, end=None, source="history")``
    ``history``: the cells run in this kernel (IPython's In/Out, by execution count;
    a result is shown by its ``repr``);
    ``file``: the saved cells of the notebook file when the kernel knows its path
    (``__session__``/``JPY_SESSION_NAME``, see :mod:`escouade_nb.core.notebook`; the file
    is read in a thread, and the answer says which file); ``both``.
``run_code(code)``
    always asks the caller's owner first (:meth:`ToolOwner.ask_run_code`: a permission
    card), then runs the code in the user namespace on the loop: stdout/stderr captured
    per call (two runs awaiting at once keep their own output, see ``_execute``), the
    last expression's ``repr``, an exception as its traceback text.

What the read tools run of the user's values, exactly (the values' own code, which may be
slow or hang): ``repr``; ``len``; for values with a ``shape`` of integers, the ``shape``,
``dtype``, ``columns`` and ``dtypes`` attributes and ``head(rows)`` (or ``value[:rows]``)
rendered by ``to_string()`` or ``repr``; with ``attributes=True``, ``vars(value)`` and the
``repr`` of each instance attribute (properties are never evaluated); an ``isinstance``
check (which may read ``__class__``). Never on the loop: they run in at most ``READERS``
daemon worker threads, and a tool call waits for them at most ``READ_BUDGET`` seconds
(2 s). A look still running then is reported by what it was doing ("its repr took longer
than 2 s: not shown") and left to finish in its thread; while it runs, later calls do
not start it again on the same object ("still running from an earlier call"); when
every thread is held by such looks, reads answer "not read: every reader thread was
busy". The looks may overlap a cell that runs meanwhile (the loop is free).

Rules of the loop. The tools are ``async def``: they run on the loop's thread, between
cells (or between the awaits of an async cell), so they see ``user_ns`` as cells do. While
a cell blocks the loop, calls wait and answer after it. A heartbeat task notices such
blocks: a ``run_code`` that starts after the loop was blocked longer than ``busy_limit``
seconds is not run (its client has probably given up) and answers "the kernel was busy…
call it again"; reads answer anyway. A ``run_code`` whose MCP request is cancelled while
its card waits is never run: the cancellation reaches ``ask_run_code`` (the engine
withdraws the card); so does one whose HTTP client closes its connection meanwhile.

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
import concurrent.futures
import contextlib
import contextvars
import hmac
import inspect
import io
import linecache
import logging
import os
import queue
import secrets
import socket
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Awaitable, Callable, Container, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from .._errors import EscouadeError
from .._version import __version__
from .token_files import TokenFiles
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
READ_BUDGET = 2.0
"""Seconds one read tool call (``list_variables``, ``inspect_variable``, ``notebook_cells``)
waits for the looks at user values it runs; what is not done by then is reported as such."""
READERS = 4
"""Worker threads that run the looks at user values (one server's; started on first use,
daemon threads: a look that never ends does not hold the interpreter's exit)."""
MAX_QUEUED = 1000
"""Looks waiting for a reader thread beyond which new ones are not queued (reported as not
read): the queue stays bounded while every thread is held by a look that never ends."""
START_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0

INSTRUCTIONS = (
    "The live Jupyter kernel this agent was started from. list_variables and inspect_variable read the "
    "user's variables; what runs of the values' own code is exactly: repr, len, and for array- or frame-like "
    "values (those with a shape) the shape, dtype, dtypes and columns attributes and head(rows), plus vars() "
    "and each attribute's repr when inspect_variable is asked for attributes (properties are never run). "
    "These run in worker threads with a 2-second budget per call: a value whose repr (or len, head...) takes "
    "longer is reported as such, and is not started again while it still runs. notebook_cells gives the cells "
    "run so far (their results' repr, same budget) and the saved notebook file; run_code runs Python in the "
    "kernel after the user allows it (a permission card)."
)

_CALLER: contextvars.ContextVar["Grant | None"] = contextvars.ContextVar("escouade_mcp_caller", default=None)
_GONE: contextvars.ContextVar["asyncio.Event | None"] = contextvars.ContextVar("escouade_mcp_gone", default=None)
"""Set when the HTTP client of the request (a POST) closed its connection (ASGI ``http.disconnect``)."""


class Refused(EscouadeError):
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
    each run (``{"stdout", "stderr", "result", "error"}``). ``tool_done(tool, arguments,
    status, text)`` (optional) is told how every call ended, in the call's own task: ``status``
    ``"ok"``, ``"error"`` (a run whose code raised, or a tool that failed), ``"refused"``,
    ``"cancelled"`` or ``"busy"`` (not run: the kernel was busy); ``text`` is what the
    model read (the result, or the error)."""

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
    """A tool's anticipated failure; its text goes to the model as a ToolError.
    ``status`` is what the owner's ``tool_done`` is told: ``"error"``, ``"refused"``,
    ``"cancelled"`` (the owner's consent was cancelled) or ``"busy"`` (not run)."""

    def __init__(self, message: str, status: str = "error") -> None:
        super().__init__(message)
        self.status = status


class _Capture(io.TextIOBase):
    """A text stream keeping the first ``limit`` characters written to it."""

    encoding = "utf-8"

    def __init__(self, limit: int = MAX_CAPTURE) -> None:
        super().__init__()
        self._limit = limit
        self._parts: list[str] = []
        self._size = 0
        self.dropped = 0
        self.finished = False  # the run is over: writes go to the kernel's stream (see _Routed)

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


class _Readers:
    """The worker threads that look at user values (``repr``, ``len``, ``shape``… of
    :mod:`escouade_nb.core.variables`): at most ``size`` daemon threads, started on first
    use, fed from one queue. A look is ``(label, value, fn)``: while a look of an earlier
    call at the same object (``id``, the value held so the id stays its own) is still
    running or queued, it is not started again — :meth:`read` reports it as still running.

    :meth:`read` is the loop's side: it waits at most ``budget`` seconds (never blocks the
    loop), then answers a :class:`_Read` per look: done (``result``), still running past
    the budget (``step``: the look under way, ``since``: monotonic start), or not started
    (every thread busy: the job is withdrawn)."""

    def __init__(self, size: int = READERS) -> None:
        self._size = size
        self._jobs: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._running: dict[int, "_Read"] = {}  # id(value) -> its look under way (or queued)
        self._closed = False

    def _ensure_threads(self) -> None:
        while len(self._threads) < self._size:
            thread = threading.Thread(target=self._work, name=f"escouade-reader-{len(self._threads) + 1}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            read, fn = job
            if not read.future.set_running_or_notify_cancel():
                self._forget(read)
                continue
            read.since = time.monotonic()
            try:
                read.future.set_result(fn(read.progress))
            except BaseException as exc:  # the value's problem, reported with the read
                read.future.set_exception(exc)
            finally:
                self._forget(read)

    def _forget(self, read: "_Read") -> None:
        with self._lock:
            if self._running.get(id(read.value)) is read:
                del self._running[id(read.value)]

    async def read(self, looks: list[tuple[str, Any, Callable[[dict], Any]]], budget: float) -> list["_Read"]:
        """Run ``looks`` (``(label, value, fn(progress) -> result)``) within ``budget`` seconds;
        one :class:`_Read` per look, in order. A cancellation withdraws the looks not started."""
        if self._closed:
            raise RuntimeError("the kernel's MCP server is closed")
        reads: list[_Read] = []
        fresh: list[_Read] = []
        with self._lock:
            before = dict(self._running)  # looks of earlier calls (this call's own duplicates run)
            for label, value, fn in looks:
                earlier = before.get(id(value))
                if earlier is not None and earlier.value is value:
                    reads.append(_Read(label, value, earlier=earlier))
                    continue
                read = _Read(label, value)
                reads.append(read)
                if self._jobs.qsize() >= MAX_QUEUED:  # every thread held for long: withdrawn at once
                    read.withdrawn = True
                    read.future.cancel()
                    continue
                self._running[id(value)] = read
                fresh.append(read)
                self._jobs.put((read, fn))
        if fresh:
            self._ensure_threads()
            waiting = [asyncio.wrap_future(r.future) for r in fresh]
            try:
                await asyncio.wait(waiting, timeout=budget)
            finally:
                for r in fresh:
                    if not r.future.done() and r.future.cancel():  # never started: withdrawn
                        r.withdrawn = True
                        self._forget(r)
                for w in waiting:  # no "exception never retrieved" for the ones left behind
                    w.add_done_callback(lambda f: f.cancelled() or f.exception())
        return reads

    def close(self) -> None:
        """Stop the idle threads (a look under way finishes in its thread, unwaited)."""
        self._closed = True
        for _ in self._threads:
            self._jobs.put(None)


@dataclass(eq=False)
class _Read:
    """One look of :meth:`_Readers.read`: ``label`` (e.g. the variable's name), the
    ``value``, its ``future``, ``progress`` (filled by the look, see
    :func:`escouade_nb.core.variables.summarize`), ``since`` (monotonic start), ``earlier``
    (the look of an earlier call still running on the same value: this one was not
    started), ``withdrawn`` (never started: every thread was busy)."""

    label: str
    value: Any
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    progress: dict = field(default_factory=dict)
    since: float | None = None
    earlier: "_Read | None" = None
    withdrawn: bool = False

    @property
    def done(self) -> bool:
        return self.earlier is None and self.future.done() and not self.future.cancelled()

    def result(self) -> Any:
        return self.future.result()

    def why_not(self, budget: float) -> str:
        """Why there is no result: a sentence naming the look that took too long."""
        if self.earlier is not None:
            run = self.earlier
            step = run.progress.get("step") or "look"
            took = f" for {time.monotonic() - run.since:.1f} s" if run.since is not None else ""
            return (f"not read: its {step} from an earlier call is still running{took} (it is not started "
                    "again while it runs)")
        if self.withdrawn:
            return ("not read: every reader thread is busy (with values whose repr, len or head is still "
                    "running)")
        step = self.progress.get("step") or "look"
        return f"its {step} took longer than {budget:g} s: not shown (it goes on in a worker thread)"


_RUN_OUTPUT: contextvars.ContextVar["tuple[_Capture, _Capture] | None"] = contextvars.ContextVar(
    "escouade_run_code_output", default=None)


class _Routed:
    """What ``sys.stdout``/``sys.stderr`` are while ``run_code`` calls run: a write made in
    a run's context (its task, and the tasks its code starts) goes to that run's capture;
    any other write (a cell, another task, a thread) goes to the stream this one replaced.
    Everything else (``fileno``, ``encoding``, ``isatty``…) is the replaced stream's."""

    def __init__(self, original: Any, index: int) -> None:
        self._original = original
        self._index = index

    def _capture(self) -> "_Capture | None":
        captures = _RUN_OUTPUT.get()
        if captures is None or captures[self._index].finished:
            return None  # a task the run started, printing after the run ended: the kernel's stream
        return captures[self._index]

    def write(self, text: str) -> int:
        capture = self._capture()
        return (capture if capture is not None else self._original).write(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self._capture() is None:
            self._original.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


class _Routing:
    """Installs :class:`_Routed` streams while at least one ``run_code`` runs, and puts the
    replaced streams back when the last one ends (unless something else replaced ours
    meanwhile: that stream is left as it is). Loop-thread only."""

    users = 0
    saved: tuple[Any, Any] = (None, None)
    routed: tuple[Any, Any] = (None, None)

    @classmethod
    @contextlib.contextmanager
    def capture(cls, out: "_Capture", err: "_Capture"):
        if cls.users == 0:
            cls.saved = (sys.stdout, sys.stderr)
            cls.routed = (_Routed(sys.stdout, 0), _Routed(sys.stderr, 1))
            sys.stdout, sys.stderr = cls.routed
        cls.users += 1
        token = _RUN_OUTPUT.set((out, err))
        try:
            yield
        finally:
            out.finished = err.finished = True
            try:
                _RUN_OUTPUT.reset(token)
            except ValueError:  # the code switched contexts: the finished captures route nothing anyway
                pass
            cls.users -= 1
            if cls.users == 0:
                if sys.stdout is cls.routed[0]:
                    sys.stdout = cls.saved[0]
                if sys.stderr is cls.routed[1]:
                    sys.stderr = cls.saved[1]
                cls.saved = cls.routed = (None, None)


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


def _header(headers: Any, name: bytes) -> str | None:
    for key, value in headers or ():
        if key.lower() == name:
            return value.decode("latin-1")
    return None


class _BearerGate:
    """ASGI wrapper: an HTTP request carries a live grant's token or gets 401; the grant
    is put in a context variable for the tools (the SDK carries the request's context
    to the tool's task). The lifespan passes; websockets are refused.

    MCP sessions are the grant's that opened them: the ``Mcp-Session-Id`` of each
    response is recorded with the request's grant, and a request (POST, GET, DELETE)
    carrying a session id another grant opened — or one never seen — gets 404, as the
    SDK answers an unknown session. A POST's client closing its connection (ASGI
    ``http.disconnect``, seen when the SDK's response listens for it) sets the request's
    ``_GONE`` event: a ``run_code`` whose card waits is then withdrawn, never run. (The
    spec lets a client drop a POST's stream and resume it; this server keeps no event
    store, so a dropped stream's answer could never reach anyone: a run nobody can read
    is not made.)"""

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
            await _refuse(send, 401, b'{"error": "unauthorized: this MCP server needs its bearer token '
                                     b'(Authorization header)"}')
            return
        grant._seen()
        sessions = self.server._sessions
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

        token, gone_token = _CALLER.set(grant), _GONE.set(gone if method == "POST" else None)
        try:
            await self.app(scope, receive_watched, send_watched)
        finally:
            _GONE.reset(gone_token)
            _CALLER.reset(token)


async def _refuse(send: Callable, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


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
        self._sessions: dict[str, Grant] = {}  # Mcp-Session-Id -> the grant whose request opened it
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
        self._readers = _Readers()
        self.read_budget = READ_BUDGET
        self.token_files = TokenFiles()
        """The grants' token files, for the stdio bridge (:meth:`token_file`)."""

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
        """End a grant: its token gets 401 from now on (calls under way finish); its
        token file, if one was made, is deleted."""
        self._grants.pop(grant.token, None)
        for session_id in [sid for sid, g in self._sessions.items() if g is grant]:
            del self._sessions[session_id]
        self.token_files.remove(grant.token)

    async def token_file(self, grant: Grant) -> Path:
        """A file holding ``grant``'s token and nothing else, mode 0600 in a private
        0700 folder (:class:`~.token_files.TokenFiles`), for a program that must not get
        the token in its argv or environment (the stdio bridge's
        ``ESCOUADE_MCP_TOKEN_FILE``). Written off the loop; deleted by :meth:`revoke`,
        when the server stops, or at interpreter exit. ``RuntimeError`` for a grant
        that is not live; ``OSError`` if the file cannot be written."""
        if self._grants.get(grant.token) is not grant:
            raise RuntimeError("this grant of the kernel's MCP server has ended")
        path = await asyncio.to_thread(self.token_files.write, grant.token)
        if self._grants.get(grant.token) is not grant:  # revoked while it was written
            self.token_files.remove(grant.token)
            raise RuntimeError("this grant of the kernel's MCP server has ended")
        return path

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
        self._readers.close()
        self.token_files.remove_all()

    def _stop_now(self) -> None:
        """Interpreter exit (the loop no longer runs): refuse everything, stop serving,
        cancel the tasks, close the socket, delete the token files."""
        self._grants.clear()
        self._readers.close()
        self.token_files.remove_all()
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
                           "call it again", "busy")

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
            Runs each value's own repr and len (and shape, dtype, dtypes, columns for frame-like values) in
            worker threads, 2 s budget per call: a value that takes longer is listed as such.
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
            What runs of the value's own code: repr, len, shape, dtype, dtypes, columns, head(rows), and with
            attributes=true vars() and each attribute's repr (never properties); in a worker thread with a 2 s
            budget: what took longer is named and not shown.
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

    async def _call(self, tool: str, arguments: dict,
                    impl: Callable[[], Awaitable[str | tuple[str, str]]]) -> str:
        """One tool call: who called (the request's grant), the owner's consent for reads,
        the tool, and every failure as a ToolError the model reads."""
        ToolError = self._tool_error
        grant = _CALLER.get()
        if grant is None or self._grants.get(grant.token) is not grant:
            raise ToolError("this call carries no live grant of the kernel's MCP server")
        grant.calls += 1
        status, text = "cancelled", ""
        try:
            if tool != "run_code":
                allow = getattr(grant.owner, "allow_read", None)
                if callable(allow):
                    await self._consent(allow(tool, arguments))
            answer = await impl()
            text, status = answer if isinstance(answer, tuple) else (answer, "ok")
            return text
        except _Failure as exc:
            status, text = exc.status, str(exc)
            raise ToolError(text) from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("kernel MCP tool %s failed", tool, exc_info=True)
            status, text = "error", f"{tool} failed: {type(exc).__name__}: {exc}"
            raise ToolError(text) from None
        finally:
            self._tell_done(grant.owner, tool, arguments, status, text)

    @staticmethod
    def _tell_done(owner: Any, tool: str, arguments: dict, status: str, text: str) -> None:
        """The owner's ``tool_done`` (optional), told how a call ended; never raises."""
        done = getattr(owner, "tool_done", None)
        if callable(done):
            try:
                done(tool, arguments, status, text)
            except Exception:
                log.exception("kernel MCP server: %s.tool_done failed", getattr(owner, "name", owner))

    @staticmethod
    async def _consent(ask: Awaitable[None]) -> None:
        """Await an owner's answer: :class:`Refused` becomes the call's error; a
        cancellation of the owner's own (not of this request) is a refusal too."""
        try:
            await ask
        except Refused as exc:
            raise _Failure(f"refused: {exc.message}", "refused") from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the MCP request itself was cancelled
            raise _Failure("refused: the permission request was cancelled", "cancelled") from None

    async def _consent_while_connected(self, ask: Awaitable[None]) -> None:
        """:meth:`_consent`, withdrawn when the request's HTTP client goes away while the
        owner decides (its card is cancelled): the call then fails and nothing runs."""
        gone = _GONE.get()
        if gone is None:
            await self._consent(ask)
            return
        asking = asyncio.ensure_future(self._consent(ask))
        watching = asyncio.ensure_future(gone.wait())
        try:
            await asyncio.wait({asking, watching}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            asking.cancel()  # the request was cancelled: the owner's ask is too (its card withdrawn)
            await asyncio.gather(asking, return_exceptions=True)
            if inspect.iscoroutine(ask):
                ask.close()  # never started (cancelled first): no "never awaited" warning
            raise
        finally:
            watching.cancel()
        if not asking.done():
            asking.cancel()
            await asyncio.gather(asking, return_exceptions=True)
        if inspect.iscoroutine(ask):
            ask.close()
        if gone.is_set():
            raise _Failure("the client closed its connection while the permission card waited; the code was "
                           "not run")
        asking.result()

    async def _list_variables(self, include_all: bool) -> str:
        ns, hidden = self._user_ns()
        named = variables_core.listed_names(ns, hidden, include_all=include_all)

        def row(name: str, value: Any) -> Callable[[dict], Any]:
            return lambda progress: variables_core.variable_row(name, value, include_all=include_all,
                                                                progress=progress)

        reads = await self._readers.read([(name, value, row(name, value)) for name, value in named],
                                         self.read_budget)
        lines = []
        for r in reads:
            if r.done:
                try:
                    got = r.result()
                except Exception as exc:
                    lines.append(f"- {r.label}: {type(r.value).__name__} — (could not be read: "
                                 f"{type(exc).__name__})")
                    continue
                if got is not None:
                    lines.append(f"- {got['name']}: {got['type']} — {got['summary']}")
            else:
                kind = ((r.earlier or r).progress.get("found") or {}).get("type") or type(r.value).__name__
                lines.append(f"- {r.label}: {kind} — ({r.why_not(self.read_budget)})")
        if not lines:
            return ("No variables in the kernel's namespace" +
                    ("." if include_all else " (modules, functions, classes and _private names are not listed; "
                                             "include_all=true lists them)."))
        head = f"{len(lines)} variable{'s' if len(lines) != 1 else ''}" + (
            "" if include_all else " (modules, functions, classes and _private names not listed)") + ":"
        return "\n".join([head] + lines)

    async def _inspect_variable(self, name: str, rows: int, attributes: bool) -> str:
        ns, _ = self._user_ns()
        if name not in ns:
            raise _Failure(f"no variable named {name!r} in the kernel's namespace (list_variables gives the names)")
        value = ns[name]
        if not isinstance(rows, int) or rows < 0:
            raise _Failure(f"rows must be an integer ≥ 0, got {rows!r}")
        (r,) = await self._readers.read(
            [(name, value, lambda progress: variables_core.summarize(name, value, rows=rows, attributes=attributes,
                                                                     progress=progress))],
            self.read_budget)
        if r.done:
            return variables_core.summary_text(r.result())
        why = r.why_not(self.read_budget)
        d = dict(r.progress.get("found") or {}) if r.earlier is None and not r.withdrawn else {}
        d.update(name=name)
        d.setdefault("type", type(value).__name__)
        d["summary"] = f"{d['summary']} (incomplete: {why})" if "summary" in d else f"(incomplete: {why})"
        d.setdefault("repr", "(not shown)")
        return variables_core.summary_text(d)

    def _notebook_ref(self) -> notebook_core.NotebookRef | None:
        return notebook_core.kernel_notebook(self._user_ns()[0], os.environ, Path.cwd())

    async def _notebook_cells(self, start: int | None, end: int | None, source: str,
                              ref: notebook_core.NotebookRef | None) -> str:
        if source not in ("history", "file", "both"):
            raise _Failure(f"source must be history, file or both, not {source!r}")
        ns, _ = self._user_ns()
        parts: list[str] = []
        if source in ("history", "both"):
            parts.append(await self._history_text(ns, start, end))
        if source in ("file", "both"):
            parts.append(await self._file_text(ref, start, end))
        return "\n\n".join(parts)

    async def _history_text(self, ns: Mapping[str, Any], start: int | None, end: int | None) -> str:
        try:
            cells = variables_core.history_cells(ns, start=start, end=end)
        except ValueError as exc:
            raise _Failure(str(exc)) from None
        if not isinstance(ns.get("In"), list):
            return "History: this namespace has no IPython history (In/Out)."
        if not cells:
            return "History: no cells run in this kernel" + (" in that range." if (start, end) != (None, None) else ".")

        def show(value: Any) -> Callable[[dict], str]:
            def look(progress: dict) -> str:
                progress["step"] = "repr"
                return variables_core.short_repr(value, variables_core.MAX_OUTPUT)
            return look

        with_output = [c for c in cells if "value" in c]
        reads = await self._readers.read([(f"Out[{c['execution_count']}]", c["value"], show(c["value"]))
                                          for c in with_output], self.read_budget)
        outputs = {c["execution_count"]: (r.result() if r.done else f"({r.why_not(self.read_budget)})")
                   for c, r in zip(with_output, reads)}
        lines = [f"History: {len(cells)} cell{'s' if len(cells) != 1 else ''} run in this kernel "
                 f"(execution counts {cells[0]['execution_count']}–{cells[-1]['execution_count']}):"]
        for c in cells:
            lines += [f"In [{c['execution_count']}]:", c["source"].rstrip("\n")]
            if c["execution_count"] in outputs:
                lines += [f"Out[{c['execution_count']}]:", outputs[c["execution_count"]]]
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

    async def _run_code(self, code: str) -> tuple[str, str]:
        """Ask, run, tell the owner: ``(text the model reads, "ok" | "error")``."""
        grant = _CALLER.get()
        owner = grant.owner  # type: ignore[union-attr]
        self._check_busy()
        await self._consent_while_connected(owner.ask_run_code(code))
        self._check_busy()  # a block while the card waited: its client has given up too
        result = await self._execute(code)
        told = getattr(owner, "ran_code", None)
        if callable(told):
            try:
                told(code, result)
            except Exception:
                log.exception("kernel MCP server: %s.ran_code failed", getattr(owner, "name", owner))
        return run_result_text(result), "error" if result.get("error") else "ok"

    async def _execute(self, code: str) -> dict[str, Any]:
        """Run ``code`` in the user namespace on the loop: ``{"stdout", "stderr",
        "result" (repr of the last expression, or None), "error" (traceback text, or
        None)}``. Top-level ``await`` runs on the loop.

        Captures are per call, not one run at a time: while runs are under way
        ``sys.stdout``/``sys.stderr`` are :class:`_Routed` streams, and a write lands in the
        capture of the run whose context makes it (a context variable: the run's task and
        the tasks its code starts). So two runs awaiting at once never see each other's
        output, a cell or task of the kernel printing meanwhile still reaches the notebook,
        and the streams are put back when the last run ends (whatever order they end in).
        Chosen over a lock because a run that awaits for long (a server, a queue) would
        otherwise hold every later run behind it, and the kernel's own prints during an
        awaiting run would still land in its result. Not captured: writes from threads
        (they do not carry the context) and from objects that kept the old stream."""
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
        with _Routing.capture(out, err):
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
