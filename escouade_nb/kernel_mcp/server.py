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
    is read in a thread, and the answer says which file); ``both``; ``live``: the notebook
    as its page shows it now, unsaved edits included, through the kernel's channel to
    the page (:class:`LiveNotebook`, given by :func:`use_live_notebook`; JSON with each
    cell's id, type, source, its SHA-256, execution count and outputs as text; a tool
    error in one line when no page answers).
``run_code(code, wait=None)``
    always asks the caller's owner first (:meth:`ToolOwner.ask_run_code`: a permission
    card), then runs the code in the user namespace (:func:`~.run.execute`: synchronous
    code in a thread of its own, the loop left free; code with a top-level ``await`` on
    the loop): stdout/stderr captured per call (two runs at once keep their own output),
    the last expression's ``repr``, an exception as its traceback text. With ``wait``
    (seconds), a run still going then answers at once with a ``task_id`` (:mod:`.tasks`).
``insert_cell(source, cell_type="code", after_cell_id=None)``,
``edit_cell(cell_id, source, base_sha256)``, ``delete_cell(cell_id, base_sha256)``
    change the notebook open in the user's page, through the channel
    (:meth:`LiveNotebook.change_cell`), at once and pending the user's review: JSON
    ``{"cell_id", "status": "pending review", "change"}``. Not asked first (the owner's
    ``allow_read`` check, as for a read, and its ``tool_done``); the page refuses an edit
    or delete whose ``base_sha256`` is not its cell's source's hash now ("changed since").
``execute_cell(cell_id)``
    runs a code cell of the open notebook IN the notebook: the cell's source is read from
    the page (:meth:`LiveNotebook.cell_to_run`), the owner asks with one card showing it
    whole (:meth:`ToolOwner.ask_execute_cell`; rule plugins see ``mcp__escouade__execute_cell``
    with that source), then the page runs it (:meth:`LiveNotebook.run_cell`) only if its
    source is still the one the card showed (else "changed since", nothing run): output in
    the cell, its execution count set, and the code that ran in its metadata
    (``escouade.ran``). The answer is the cell's outputs as text, when its run has ended.
    Refused before the card when a cell of the kernel is running (the page's run would
    queue behind it, and that cell may be awaiting this very turn: a deadlock).
``task_status(task_id, wait=0)``, ``task_cancel(task_id)``
    a run the caller left running (``wait``): its status, output since, result; an
    interrupt of it (not asked). Another grant's task is refused as an unknown one.

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

The parts, by what they do: :mod:`.http` (the bearer gate, the request's context,
uvicorn on loopback), :mod:`.tools` (the tools' schemas and descriptions),
:mod:`.reads` (the read tools: looks at user values in worker threads),
:mod:`.run` (``run_code``'s execution and captures), :mod:`.token_files`. This
module holds the server: grants, start and stop, the busy rule, each call's consent.
"""


import asyncio
import atexit
import hmac
import inspect
import logging
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Container, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, cast, get_args, runtime_checkable

from .._errors import EscouadeError
from .._threads import collector_paused
from .._version import __version__
from ..core import notebook as notebook_core
from ..core.output_images import Images
from .acp_channel import AcpChannel
from .http import CALLER, GONE, BearerGate, DirectCalls, Grant, import_server_side, quiet_third_party_loggers, \
    serve_on_loopback
from .reads import READ_BUDGET, Readers, inspect_variable_text, list_variables_text, live_cells_text, \
    notebook_cells_text
from .run import Run, execute, interrupt_on_sigint, run_result_text
from .tasks import CANCEL_WAIT, RunTask, Tasks, status_text
from .tools import INSTRUCTIONS, TOOLS, ImageAnswer, TaskAnswer, ToolFailure, register_tools
from .token_files import TokenFiles

__all__ = ["SERVER_NAME", "TOOLS", "DEFAULT_BUSY_LIMIT", "Refused", "ToolOwner", "LiveNotebook", "CellRunner", "Grant",
           "KernelServer", "run_result_text", "use_live_notebook"]

log = logging.getLogger(__name__)

SERVER_NAME = "escouade"
DEFAULT_BUSY_LIMIT = 30.0
"""Seconds the loop may have been blocked before a ``run_code`` is refused as stale."""
HEARTBEAT = 0.5
"""Seconds between the heartbeat's wake-ups (it measures how late each one is)."""
BUSY_GRACE = 2.0
"""A block counts for calls that start within this many seconds after it ended (the
backlog of a long block takes a moment to be served)."""
SESSION_IDLE_TIMEOUT = 8 * 3600.0
"""Seconds an MCP session may idle (no request, no GET stream) before the SDK drops it."""
STOP_TIMEOUT = 5.0
PROGRESS_EVERY = 1.0
"""Seconds between a waiting run's MCP progress notifications (sent only when it printed more,
and only to a client that asked for progress)."""


class Refused(EscouadeError):
    """A tool call the owner did not allow (denied by the user or a rule, or cancelled).
    ``message`` is what the model reads."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


OwnerCall = Literal["allow_read", "ran_code", "tool_done", "notice", "edited", "provenance", "ask_execute_cell",
                    "ran_cell", "task_started"]
OPTIONAL_CALLS: tuple[str, ...] = get_args(OwnerCall)
"""The members of :class:`ToolOwner` an owner may lack (one table, as the ACP SDK's ``Route(optional=True)``):
without ``allow_read`` every read is allowed, without ``ask_execute_cell`` ``execute_cell`` is refused (nobody
to ask), and an owner without one of the others is not told. The server calls them only by these names,
checked by the type checker (:data:`OwnerCall`)."""


@runtime_checkable
class ToolOwner(Protocol):
    """Whoever answers for one grant's calls (the engine's agent session,
    :class:`escouade_nb.engine.kernel_access.KernelAccess`): every member the server calls is declared
    here; ``name`` and ``ask_run_code`` are required, the others (:data:`OPTIONAL_CALLS`) may be absent.

    ``ask_run_code`` returns when the code may run and raises :class:`Refused` when not;
    it is cancelled when the MCP request is (the card must then be withdrawn).
    ``allow_read(tool, arguments)`` has the same contract for the read tools (an owner
    without it allows every read); a ``notebook_cells`` that reads the notebook file has
    that file in ``arguments["path"]`` (so a private project's fence can be applied).
    ``ran_code(code, result)`` is told the result dict of each run (``{"stdout", "stderr",
    "result", "error"}``). ``tool_done(tool, arguments, status, text)`` (optional) is told
    how every call ended, in the call's own task: ``status`` ``"ok"``, ``"error"`` (a run
    whose code raised, or a tool that failed), ``"refused"``, ``"cancelled"``, ``"busy"``
    (not run: the kernel was busy) or ``"running"`` (left running as task
    ``arguments["task_id"]``); ``text`` is what the model read (the result, or the
    error). When such a task's run ends, ``tool_done("task", {"task_id", "tool", "ran",
    …the call's arguments}, end, text)`` (``end``: ``done``, ``interrupted``, ``cancelled``,
    ``ended``; ``ran``: ``ok`` or ``error``; ``by``: who stopped it, or None), from a done callback of
    the loop. ``task_started(task)`` (optional) is given the kernel's own :class:`~.tasks.RunTask` of a
    ``run_code`` left running, in the call's own task, before its ``tool_done`` (a view follows its output
    and stops it with :meth:`~.tasks.RunTask.stop`)."""

    name: str

    async def ask_run_code(self, code: str) -> None: ...

    async def allow_read(self, tool: str, arguments: dict) -> None: ...

    def ran_code(self, code: str, result: dict) -> None: ...

    def tool_done(self, tool: str, arguments: dict, status: str, text: str) -> None: ...

    def task_started(self, task: RunTask) -> None: ...

    def edited(self, cell_id: str, change: str, live: "LiveNotebook") -> None:
        """Told of each change the page made (``insert``, ``edit``, ``delete``, ``removed``) with
        the channel that made it."""

    def provenance(self) -> dict[str, Any]:
        """``{"agent", "harness", "session", "turn"}``, sent with each change (the page writes it,
        with ``at``, into a kept cell's metadata ``escouade``)."""
        ...

    def notice(self) -> str | None:
        """Appended once to its next tool result (a Reject of its change), or None."""

    async def ask_execute_cell(self, cell_id: str, source: str, unreviewed: bool) -> None:
        """As ``ask_run_code``, for a cell of the open notebook (its whole source now;
        ``unreviewed``: an agent's change pending review)."""

    def ran_cell(self, cell_id: str, source: str, text: str, failed: bool) -> None:
        """Told how an ``execute_cell`` ran (``text``: what the model reads)."""


@runtime_checkable
class LiveNotebook(Protocol):
    """The kernel's channel to the page that shows its notebook (Jupyter-side: the views'
    layer implements it, :class:`escouade_nb.widgets.notebook_pages.NotebookPages`; the
    engine never imports it). ``live_cells()`` answers ``{"path": str, "cells": list}``
    (the cells as the page sent them, checked by the reader) or raises
    :class:`~.tools.ToolFailure` with one line for the model (no page answered)."""

    async def live_cells(self) -> dict[str, Any]: ...

    async def change_cell(self, op: str, fields: dict[str, Any]) -> dict[str, Any]:
        """An agent's change, applied by the page at once and pending review there: ``op``
        ``insert`` (``source``, ``cell_type``, ``after``), ``edit`` (``cell``, ``source``,
        ``base``: the SHA-256 the agent read, checked by the page as it applies the edit) or
        ``delete`` (``cell``, ``base``); ``agent`` names who. Answers the page's reply
        (``cell_id``, ``change``) or raises :class:`~.tools.ToolFailure` (no page,
        the cell changed since, no such cell)."""
        ...

    async def settle_cell(self, cell_id: str, keep: bool) -> dict[str, Any]:
        """Keep (``keep``) or Reject an agent's pending change of a cell, in the page (a
        ``client=`` keyword may name the page, when the user clicked in one):
        ``{"outcome": "kept" | "rejected", "changed_by_user": bool}`` (``changed_by_user``:
        the user changed the cell after the agent; may be absent), or
        :class:`~.tools.ToolFailure` (no page, the cell is not pending review)."""
        ...


class CellRunner(LiveNotebook, Protocol):
    """A :class:`LiveNotebook` that can run cells (the views' ``NotebookPages`` is one): what
    ``execute_cell`` needs of the channel. A channel without ``run_cell`` cannot (the tool says so,
    nothing run); one without ``running`` is taken as never busy."""

    def running(self) -> str | None:
        """Why a cell run from the page would wait now (a cell of the kernel is running), else None."""

    async def cell_to_run(self, cell_id: str) -> dict[str, Any]:
        """``{"source", "sha256", "pending": bool}``: a code cell as the page shows it now, or
        :class:`~.tools.ToolFailure` (no page, no such cell, not a code cell)."""
        ...

    async def run_cell(self, cell_id: str, base: str, by: dict[str, Any]) -> dict[str, Any]:
        """``{"execution_count", "outputs": [nbformat-like outputs]}``: the page runs the cell when its
        source's SHA-256 is still ``base`` (else :class:`~.tools.ToolFailure` "changed since"), writes
        ``by`` and the code that ran into its metadata, and answers when the run ended."""
        ...


_live_notebook: LiveNotebook | None = None


def use_live_notebook(live: LiveNotebook | None) -> None:
    """Give this process's kernel servers the channel to the notebook's page (one kernel per
    process: ``%load_ext escouade_nb`` calls it); ``None`` takes it away. A server made with
    its own ``live=`` keeps that one."""
    global _live_notebook
    _live_notebook = live
    notebook_core.pages_coming(None)


def ipython_shell() -> Any:
    """The running IPython shell, without importing IPython when nobody did."""
    module = sys.modules.get("IPython")
    if module is None:
        return None
    try:
        return module.get_ipython()
    except Exception:
        return None




_preloaded = False
_preload_lock = threading.Lock()


def preload_in_kernel(*, collect: bool = True) -> bool:
    """Make ready, in the calling thread, what the first agent of a kernel would otherwise
    load on the kernel's loop; called by the first ``get_squad()`` in a kernel, i.e. in the
    user's cell that asked for escouade (about a second, once per process), and by
    ``%load_ext escouade_nb``'s worker thread with ``collect=False``. A call while another
    thread's runs waits for it; later calls return ``False`` at once.

    Imports anyio's asyncio backend (loaded on first use, on the loop) and
    :func:`import_server_side` (mcp, uvicorn); then ``gc.collect()`` (unless ``collect`` is
    false) and ``gc.freeze()``: every object alive is moved out of the cyclic collector's
    scans. Without that, the next full collections, whether triggered by these imports in
    the server's worker thread or later by the agents' traffic, walk the whole kernel heap
    (~150,000 objects after these imports) under the GIL: 70–210 ms during which the loop
    cannot turn (measured: benchmarks/loop_stall.py). The full collection itself holds the
    GIL as long: ``%load_ext``'s thread freezes after each step of its imports instead, so
    that no collection walks more than one step's objects (what was garbage in a cycle at
    that moment is kept). The price: an object alive now that later becomes garbage only
    through a reference cycle is not reclaimed (anything freed by its reference count still
    is); modules, classes and IPython's own objects, which are most of the heap at this
    point, live until the kernel exits anyway. The engine (the ACP SDK, pydantic models) is
    loaded by the caller first: :mod:`..engine.squad` imports it and hands this function on.
    ``True`` when this call did the work."""
    global _preloaded
    if _preloaded:
        return False
    import gc

    with _preload_lock:
        if _preloaded:
            return False
        import anyio._backends._asyncio  # noqa: F401  (anyio loads its backend on first use: on the loop)

        if not collect:
            gc.freeze()
        import_server_side()
        if collect:
            gc.collect()
        gc.freeze()
        _preloaded = True
        return True


def _owner_call(owner: Any, method: OwnerCall) -> Callable[..., Any] | None:
    """The owner's optional ``method`` (:data:`OPTIONAL_CALLS`, declared on :class:`ToolOwner`),
    or None when it has none."""
    found = getattr(owner, method, None)
    return found if callable(found) else None


def _tell_owner(owner: Any, method: OwnerCall, *args: Any) -> Any:
    """Call the owner's optional ``method`` (:func:`_owner_call`) with ``args``: its answer, or None
    when it has none or it raised (logged: an owner's failure never fails the tool call)."""
    told = _owner_call(owner, method)
    if told is None:
        return None
    try:
        return told(*args)
    except Exception:
        log.exception("kernel MCP server: %s.%s failed", getattr(owner, "name", owner), method)
        return None


def _utf8(text: str) -> str:
    """``text`` as UTF-8 can carry it on the wire: a lone surrogate (a ``repr`` may hold one) escaped as
    ``\\udXXX`` — else neither the SDK nor :class:`DirectCalls` could write the answer."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class KernelServer:
    """The ``escouade`` MCP server of one event loop.

    ``await KernelServer.shared()`` gives the loop's server, started on first call (the
    interpreter's exit stops it; :meth:`close_shared` stops it earlier).
    ``KernelServer(namespace=dict)`` serves that dict (plain asyncio, tests); without a
    namespace it serves IPython's ``user_ns`` (hidden names: ``user_ns_hidden``) when a
    shell runs, else an empty namespace of its own (a script's globals are never shown).
    ``busy_limit``: seconds, see the module. ``live``: the channel ``notebook_cells(source="live")``
    reads through (default: the one given to :func:`use_live_notebook`, if any).
    ``url`` is ``http://127.0.0.1:PORT/mcp`` once started."""

    _shared: ClassVar["weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, KernelServer]"] = \
        weakref.WeakKeyDictionary()

    def __init__(self, namespace: dict | None = None, *, busy_limit: float = DEFAULT_BUSY_LIMIT,
                 hidden: Container[str] = (), live: LiveNotebook | None = None) -> None:
        if busy_limit <= 0:
            raise ValueError(f"busy_limit must be > 0 seconds, got {busy_limit!r}")
        self._namespace = namespace
        self._own_namespace: dict | None = None
        self._hidden = hidden
        self._live = live
        self.busy_limit = float(busy_limit)
        self._grants: dict[str, Grant] = {}
        self._sessions: dict[str, Grant] = {}  # Mcp-Session-Id -> the grant whose request opened it
        self._port: int | None = None
        self._starting: asyncio.Future | None = None
        self._serve_task: asyncio.Task | None = None
        self._heartbeat_task: asyncio.Task | None = None
        self._uvicorn: Any = None
        self._direct: DirectCalls | None = None  # answers the read tools' calls without the SDK's session (issue 37)
        self._mcp: Any = None  # the MCPServer: its HTTP app served, its lowlevel loop run per AcpChannel connection
        self._socket: socket.socket | None = None
        self._tool_error: type[Exception] = ToolFailure
        self._closed = False
        self._last_beat = time.monotonic()
        self._stall = (0.0, 0.0)  # (ended at, seconds) of the last late heartbeat
        self._runs = 0
        self._tasks = Tasks(self._task_ended)
        self._readers = Readers()
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
        self._tasks.end_grant(grant)  # its runs left running are interrupted (status "ended")
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

    def channel(self, grant: Grant, notify: Callable[[dict[str, Any]], None] | None = None) -> AcpChannel:
        """This server offered to one agent's own ACP pipe under ``grant`` (MCP-over-ACP,
        :class:`~.acp_channel.AcpChannel`: ``mcp/connect``, ``mcp/message``, ``mcp/disconnect``
        answered by the same tools and consent as the HTTP transport). ``RuntimeError`` before
        :meth:`start` or for a grant that is not live."""
        if self._mcp is None or self._closed:
            raise RuntimeError("the kernel's MCP server is not started")
        if self._grants.get(grant.token) is not grant:
            raise RuntimeError("this grant of the kernel's MCP server has ended")
        return AcpChannel(self._mcp, grant, notify)

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
        quiet_third_party_loggers()

        def build() -> Any:
            root = logging.getLogger()
            handlers, level = root.handlers[:], root.level
            with collector_paused():  # pydantic and inspect parse ASTs here: safe beside the kernel's (_threads.py)
                try:  # MCPServer() calls logging.basicConfig: the notebook's logging is left as it was
                    mcp = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, version=__version__)
                finally:
                    root.handlers[:] = handlers
                    root.setLevel(level)
                register_tools(mcp, Field, self._call, variables=self._list_variables,
                               variable=self._inspect_variable, cells=self._notebook_cells,
                               live_cells=self._live_cells, notebook_ref=self._notebook_ref, run=self._run_code,
                               change=self._change_cell, execute=self._execute_cell,
                               status=self._task_status, cancel=self._task_cancel)
            return mcp

        # the server and its tools' pydantic models and JSON schemas (20–40 ms on a busy machine, issue 37)
        # are built in a worker thread, which lets the loop turn every few ms; nothing serves them yet
        mcp = self._mcp = await asyncio.to_thread(build)
        app = mcp.streamable_http_app(host="127.0.0.1", session_idle_timeout=SESSION_IDLE_TIMEOUT)
        self._direct = DirectCalls(mcp)
        await asyncio.sleep(0)
        sock, server, task, port = await serve_on_loopback(
            uvicorn, BearerGate(app, self._grant_for, self._sessions, self._direct))
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
        self._tasks.close()
        self._grants.clear()
        self._readers.close()
        self.token_files.remove_all()

    def _stop_now(self) -> None:
        """Interpreter exit (the loop no longer runs): refuse everything, stop serving,
        cancel the tasks, close the socket, delete the token files."""
        self._tasks.close()
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
            raise ToolFailure(f"the kernel was busy running a cell for {blocked:.0f} s; the call was not run — "
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
    async def _call(self, tool: str, arguments: dict,
                    impl: Callable[[], Awaitable[str | tuple[str, str] | ImageAnswer]]) -> str | list[Any]:
        """One tool call: who called (the request's grant), the owner's consent for reads,
        the tool, and every failure as a ToolError the model reads. The answer: text, or for
        an :class:`ImageAnswer` with images ``[TextContent, ImageContent…]`` (the owner's
        ``tool_done`` is told the text and how many images, never their data)."""
        ToolError = self._tool_error
        grant = CALLER.get()
        if grant is None or self._grants.get(grant.token) is not grant:
            raise ToolError("this call carries no live grant of the kernel's MCP server")
        grant.calls += 1
        status, text = "cancelled", ""
        images: list[dict[str, Any]] = []
        try:
            if tool not in ("run_code", "execute_cell"):  # these two ask with a card
                allow = _owner_call(grant.owner, "allow_read")
                if allow is not None:
                    await self._consent(allow(tool, arguments))
            answer = await impl()
            if isinstance(answer, TaskAnswer):
                from mcp.types import CallToolResult, TextContent  # imported with the server already

                status, text = answer.status, _utf8(self._with_notice(grant.owner, answer.text))
                if status == "running":  # the call left its run running: its record names the task
                    arguments = {**arguments, "task_id": answer.structured["task_id"]}
                return CallToolResult(content=[TextContent(type="text", text=text)],
                                      structured_content=answer.structured)
            if isinstance(answer, ImageAnswer):
                text, status, images = answer.text, answer.status, answer.images
            else:
                text, status = answer if isinstance(answer, tuple) else (answer, "ok")
            text = _utf8(self._with_notice(grant.owner, text))
            if not images:
                return text
            from mcp.types import ImageContent, TextContent  # imported with the server already

            return [TextContent(type="text", text=text),
                    *(ImageContent(type="image", data=i["data"], mime_type=i["mime_type"]) for i in images)]
        except ToolFailure as exc:
            status, text = exc.status, _utf8(str(exc))
            raise ToolError(text) from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("kernel MCP tool %s failed", tool, exc_info=True)
            status, text = "error", _utf8(f"{tool} failed: {type(exc).__name__}: {exc}")
            raise ToolError(text) from None
        finally:
            told = text + (f"\n[{len(images)} image{'s' if len(images) > 1 else ''} attached]" if images else "")
            _tell_owner(grant.owner, "tool_done", tool, arguments, status, told)  # told how the call ended

    @staticmethod
    def _with_notice(owner: Any, text: str) -> str:
        """``text`` and the owner's ``notice()`` (optional: what the agent must learn, such as
        the user's Reject of its change), once."""
        told = _tell_owner(owner, "notice")
        return f"{text}\n\n{told}" if isinstance(told, str) and told else text

    @staticmethod
    async def _consent(ask: Awaitable[None]) -> None:
        """Await an owner's answer: :class:`Refused` becomes the call's error; a
        cancellation of the owner's own (not of this request) is a refusal too."""
        try:
            await ask
        except Refused as exc:
            raise ToolFailure(f"refused: {exc.message}", "refused") from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the MCP request itself was cancelled
            raise ToolFailure("refused: the permission request was cancelled", "cancelled") from None

    async def _consent_while_connected(self, ask: Awaitable[None]) -> None:
        """:meth:`_consent`, withdrawn when the request's HTTP client goes away while the
        owner decides (its card is cancelled): the call then fails and nothing runs."""
        gone = GONE.get()
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
            raise ToolFailure("the client closed its connection while the permission card waited; the code was "
                           "not run")
        asking.result()

    async def _list_variables(self, include_all: bool) -> str:
        ns, hidden = self._user_ns()
        return await list_variables_text(self._readers, ns, hidden, include_all, self.read_budget)

    async def _inspect_variable(self, name: str, rows: int, attributes: bool) -> str:
        return await inspect_variable_text(self._readers, self._user_ns()[0], name, rows, attributes,
                                           self.read_budget)

    def _notebook_ref(self) -> notebook_core.NotebookRef | None:
        return notebook_core.kernel_notebook(self._user_ns()[0], os.environ, Path.cwd())

    async def _notebook_cells(self, start: int | None, end: int | None, source: str,
                              ref: notebook_core.NotebookRef | None) -> str:
        return await notebook_cells_text(self._readers, self._user_ns()[0], start, end, source, ref,
                                         self.read_budget)

    async def _live_channel(self) -> LiveNotebook | None:
        """:meth:`live_notebook`, once the one ``%load_ext``'s thread loads is there
        (:func:`~..core.notebook.pages_coming`): a live read meanwhile waits for it (~2 s at most, once), instead
        of answering that escouade_nb is not loaded."""
        coming = notebook_core.pages_coming_wait()
        if self._live is None and _live_notebook is None and coming is not None:
            await asyncio.to_thread(coming)
            await asyncio.sleep(0)  # the thread's last act queued the channel's start on the loop: it runs first
        return self.live_notebook()

    async def _live_cells(self, start: int | None, end: int | None,
                          ref: notebook_core.NotebookRef | None) -> str | ImageAnswer:
        live = await self._live_channel()
        return await live_cells_text(live.live_cells if live is not None else None, start, end, ref)

    async def _change_cell(self, tool: str, fields: dict[str, Any]) -> str:
        """``insert_cell``, ``edit_cell``, ``delete_cell``: through the channel to the page,
        at once (no card: the user reviews the change after); JSON ``{"cell_id", "status":
        "pending review", "change"}``."""
        import json

        live = await self._live_channel()
        if live is None:
            raise ToolFailure(f"{tool} needs escouade_nb loaded in a kernel whose notebook is open in JupyterLab 4 "
                              "or Notebook 7 (this server has no channel to a page)")
        grant = CALLER.get()
        agent = str(getattr(grant.owner, "name", "") or "") if grant is not None else ""
        if tool == "insert_cell":
            op, wire = "insert", {"source": fields["source"], "cell_type": fields["cell_type"],
                                  "after": fields["after_cell_id"]}
        elif tool == "edit_cell":
            op, wire = "edit", {"cell": fields["cell_id"], "source": fields["source"], "base": fields["base_sha256"]}
        else:
            op, wire = "delete", {"cell": fields["cell_id"], "base": fields["base_sha256"]}
        reply = await live.change_cell(op, {**wire, "agent": agent, "by": self._provenance(grant, agent)})
        cell_id = reply.get("cell_id")
        change = reply.get("change")
        if not isinstance(cell_id, str) or not cell_id:
            raise ToolFailure("the notebook page answered no cell id")
        owner = grant.owner if grant is not None else None
        # the owner's pending edits (agent.pending_edits)
        _tell_owner(owner, "edited", cell_id[:200], change if isinstance(change, str) else op, live)
        removed = change == "removed"
        answer = {"cell_id": cell_id[:200], "status": "removed" if removed else "pending review",
                  "change": change if isinstance(change, str) else op,
                  "note": "your own pending new cell: removed at once" if removed else
                          "made in the open notebook; the user keeps or rejects it (notebook_cells(source=\"live\") "
                          "shows it with pending: true and its new sha256)"}
        return json.dumps(answer, ensure_ascii=False)

    @staticmethod
    def _provenance(grant: Any, agent: str) -> dict[str, Any]:
        """Who makes a change, for the cell's metadata once kept: ``agent``, ``harness``,
        ``session``, ``turn`` (the owner's ``provenance()``, optional) and ``at`` (now, ISO-8601 UTC)."""
        from datetime import UTC, datetime

        by: dict[str, Any] = {"agent": agent, "harness": None, "session": None, "turn": None}
        got = _tell_owner(grant.owner, "provenance") if grant is not None else None
        if isinstance(got, dict):
            by.update({k: got[k] for k in ("agent", "harness", "session", "turn") if k in got})
        by["at"] = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        return by

    async def _run_code(self, code: str, wait: float | None = None,
                        progress: Callable[..., Awaitable[None]] | None = None) -> tuple[str, str] | TaskAnswer:
        """Ask, run, tell the owner: ``(text the model reads, "ok" | "error")``; with ``wait``
        (seconds), a run still going then is left running as a task: a :class:`TaskAnswer`
        (``task_id``, the output so far)."""
        grant = CALLER.get()
        owner = grant.owner  # type: ignore[union-attr]
        self._check_busy()
        await self._consent_while_connected(owner.ask_run_code(code))
        self._check_busy()  # a block while the card waited: its client has given up too
        run = Run()

        async def job() -> tuple[str, str]:
            result = await self._execute(code, run)
            _tell_owner(owner, "ran_code", code, result)
            return run_result_text(result), "error" if result.get("error") else "ok"

        interrupt_on_sigint()  # Jupyter's Interrupt stops the run (main thread only: the kernel's)
        began = time.monotonic()
        running = asyncio.ensure_future(job())
        if not await self._until_done(running, wait, run, progress):
            task = self._tasks.add("run_code", {"code": code}, grant, running, run, began)
            _tell_owner(owner, "task_started", task)
            return self._task_answer(task, wait)
        return running.result()

    async def _until_done(self, job: asyncio.Task, wait: float | None, run: Run | None,
                          progress: Callable[..., Awaitable[None]] | None) -> bool:
        """Wait for ``job`` at most ``wait`` seconds (None: until it ends), sending MCP progress
        (what it printed since, every :data:`PROGRESS_EVERY` s) meanwhile; ``True`` when it ended.
        The request cancelled meanwhile: ``job`` is cancelled too (its run interrupted)."""
        deadline = None if wait is None else time.monotonic() + wait
        told, ticks = (0, 0), 0
        try:
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return job.done()
                step = PROGRESS_EVERY if left is None else min(PROGRESS_EVERY, left)
                done, _ = await asyncio.wait({job}, timeout=step)
                if done:
                    return True
                if progress is not None and run is not None and (run.out.size, run.err.size) != told:
                    message = (run.out.text(told[0]) + run.err.text(told[1]))[-2000:]
                    told, ticks = (run.out.size, run.err.size), ticks + 1
                    try:
                        await progress(ticks, None, message)
                    except Exception:  # a client gone: its answer will not be read either
                        log.debug("progress notification failed", exc_info=True)
        except asyncio.CancelledError:
            job.cancel()
            await asyncio.gather(job, return_exceptions=True)
            raise

    def _task_answer(self, task: RunTask, wait: float | None) -> TaskAnswer:
        out, err = task.since()
        so_far = run_result_text({"stdout": out, "stderr": err}) if out or err else "(no output yet)"
        text = (f"task_id: {task.task_id}\nstill running after {wait:g} s: {task.tool} goes on in the kernel as "
                f"task {task.task_id}.\noutput so far:\n{so_far}\ncall task_status(task_id=\"{task.task_id}\", "
                "wait=N) for the output since and its result once ended; task_cancel(task_id) interrupts it.")
        return TaskAnswer(text, {**task.structured(), "stdout": out, "stderr": err,
                                 "next": "task_status(task_id, wait) for the output since and the result once "
                                         "ended; task_cancel(task_id) interrupts it"}, "running")

    def _task_ended(self, task: RunTask) -> None:
        """A task's run ended: its owner is told (``tool_done("task", {"task_id", "tool", "ran"
        ("ok" | "error"), the call's arguments}, end state, result text)``: on record)."""
        arguments = {"task_id": task.task_id, "tool": task.tool, "ran": task.ran, "by": task.cancelled_by,
                     **task.arguments}
        _tell_owner(task.grant.owner, "tool_done", "task", arguments, task.state, task.text)

    async def _task_status(self, task_id: str, wait: float = 0) -> TaskAnswer:
        grant = CALLER.get()
        task = self._tasks.get(task_id, grant)
        if task.state == "running" and wait > 0:
            await asyncio.wait({task.job}, timeout=wait)
            await asyncio.sleep(0)  # its done callbacks (the task's end) run first
        return self._status(task)

    async def _task_cancel(self, task_id: str) -> TaskAnswer:
        grant = CALLER.get()
        task = self._tasks.get(task_id, grant)
        if task.state == "running":
            task.cancelled_by = "the agent (task_cancel)"
            if task.run is not None:
                task.run.interrupt(task.cancelled_by)
            else:
                raise ToolFailure(f"task {task.task_id} is a cell running in the notebook: task_cancel cannot tell "
                                  "it from another cell of the kernel; the user stops it with Jupyter's Interrupt "
                                  "(task_status follows it)", "error")
            await asyncio.wait({task.job}, timeout=CANCEL_WAIT)
            await asyncio.sleep(0)
        answer = self._status(task)
        if task.state == "running":
            return TaskAnswer(answer.text + "\n(interrupt sent: the code is inside one long call and stops when it "
                                            "returns)", answer.structured)
        return answer

    def _status(self, task: RunTask) -> TaskAnswer:
        out, err = task.since()
        structured = {**task.structured(), "stdout": out, "stderr": err}
        if task.state != "running":
            structured["result"] = task.text
        return TaskAnswer(status_text(task, out, err), structured)

    async def _execute(self, code: str, run: Run | None = None) -> dict[str, Any]:
        """:func:`~.run.execute` in the user namespace (each run its own file name,
        for its tracebacks)."""
        self._runs += 1
        ns = cast(dict[str, Any], self._user_ns()[0])  # a dict: the one given, or IPython's user_ns
        return await execute(code, ns, f"<escouade run_code {self._runs}>", run)

    def live_notebook(self) -> LiveNotebook | None:
        """The channel to the notebook's page this server uses: its own ``live=``, else the
        process's (:func:`use_live_notebook`), else None."""
        return self._live if self._live is not None else _live_notebook

    async def _execute_cell(self, cell_id: str, wait: float | None = None,
                            progress: Callable[..., Awaitable[None]] | None = None) -> ImageAnswer | TaskAnswer:
        """``execute_cell``: read the cell from the page, ask (one card, the source whole), have the
        page run it if unchanged, tell the owner: the outputs as text (PNG and JPEG outputs named
        there and attached as images, checked: :class:`~..core.output_images.Images`), status
        ``"ok"`` or ``"error"``."""
        live = cast(CellRunner | None, await self._live_channel())  # a CellRunner when it has run_cell
        if live is None or not callable(getattr(live, "run_cell", None)):
            raise ToolFailure("execute_cell needs escouade_nb loaded in a kernel whose notebook is open in JupyterLab "
                              "4 or Notebook 7 (this server has no channel to a page): nothing was run")
        grant = CALLER.get()
        owner = grant.owner  # type: ignore[union-attr]
        ask = _owner_call(owner, "ask_execute_cell")
        if ask is None:
            raise ToolFailure("execute_cell: this session has no one to ask (no permission card): nothing was run")
        self._check_busy()
        cell = await live.cell_to_run(cell_id)  # no page: its one-line error first
        self._check_queue(live)
        source, sha = cell["source"], cell["sha256"]
        await self._consent_while_connected(ask(cell_id, source, bool(cell.get("pending"))))
        self._check_busy()
        self._check_queue(live)  # a cell started while the card waited
        began = time.monotonic()
        running = asyncio.ensure_future(self._run_cell(live, grant, owner, cell_id, source, sha))
        if not await self._until_done(running, wait, None, progress):
            task = self._tasks.add("execute_cell", {"cell_id": cell_id}, grant, running, None, began)
            return self._task_answer(task, wait)
        return running.result()

    async def _run_cell(self, live: CellRunner, grant: Any, owner: Any, cell_id: str, source: str,
                        sha: str) -> ImageAnswer:
        """The page runs the cell (allowed); the owner is told; its outputs as the model reads them."""
        agent = str(getattr(owner, "name", "") or "")
        try:
            ran = await live.run_cell(cell_id, sha, self._provenance(grant, agent))
        except ToolFailure as exc:  # stale, the page gone: the card's call says so too
            _tell_owner(owner, "ran_cell", cell_id, source, str(exc), True)
            raise
        got = ran.get("outputs")
        outputs = got if isinstance(got, list) else []
        failed = any(isinstance(o, Mapping) and o.get("output_type") == "error" for o in outputs)
        images = Images()
        try:
            _, (item,) = notebook_core.live_cells([{"id": cell_id, "cell_type": "code", "source": source,
                                                    "execution_count": ran.get("execution_count"),
                                                    "outputs": outputs}], images=images)
        except ValueError as exc:
            raise ToolFailure(f"the notebook page answered outputs that could not be read: {exc}") from None
        count = item["execution_count"]
        text = f"cell {cell_id} ran in the notebook [{count if count is not None else ' '}]" + \
            (" and raised" if failed else "") + ":\n" + (item["outputs"] or "(no output)")
        if images.items:
            text += f"\n({len(images.items)} image{'s' if len(images.items) > 1 else ''} of this cell's outputs " \
                    "attached after this text, in order)"
        _tell_owner(owner, "ran_cell", cell_id, source, text, failed)
        return ImageAnswer(text, "error" if failed else "ok", images.items)

    @staticmethod
    def _check_queue(live: CellRunner) -> None:
        """A cell of the kernel running now: a run from the page would wait behind it (and that
        cell may await this very turn): refused, nothing run."""
        running = getattr(live, "running", None)
        why = running() if callable(running) else None
        if why:
            raise ToolFailure(f"execute_cell: {why}; nothing was run — call it again when the kernel is idle "
                              "(a turn started with %%escouade or a.send(...) without await leaves it idle), "
                              "or use run_code", "busy")
