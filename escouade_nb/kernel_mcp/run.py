"""``run_code``'s execution in the kernel: the code run in the user namespace (:func:`execute`):
synchronous code in a thread of its own, so that the kernel's loop keeps turning for as long as it
runs; code with a top-level ``await`` on the loop (its awaits let the loop turn). Its
stdout/stderr are captured per call, readable while it runs (:class:`Run`), and the result is the
text the model reads (:func:`run_result_text`). A run can be interrupted (:meth:`Run.interrupt`),
also by the kernel's SIGINT (Jupyter's *Interrupt*, :func:`interrupt_on_sigint`).
"""

import ast
import asyncio
import contextlib
import contextvars
import inspect
import io
import ctypes
import linecache
import signal
import sys
import threading
import traceback
from collections.abc import Mapping
from typing import Any

from ..core import variables as variables_core

MAX_CAPTURE = 50_000
"""Characters of stdout, of stderr and of the result's repr kept by ``run_code``."""


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

    def text(self, start: int = 0) -> str:
        """What was kept, from character ``start`` on (a run's output "since"), and a note of
        what was cut past the limit."""
        out = "".join(self._parts)[start:]
        return out + (f"… [cut: {self.dropped:,} more characters]" if self.dropped else "")

    @property
    def size(self) -> int:
        """Characters kept so far."""
        return self._size


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


class Run:
    """One ``run_code`` run under way: its captures (``out``, ``err``: readable while it runs),
    where it runs (``in_thread``: synchronous code in a thread of its own; else on the loop) and
    :meth:`interrupt`."""

    def __init__(self) -> None:
        self.out, self.err = _Capture(), _Capture()
        self.in_thread = False
        self.interrupted: str | None = None  # who interrupted it ("the agent", "Jupyter's Interrupt"...)
        self._thread_id: int | None = None
        self._lock = threading.RLock()
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def interrupt(self, by: str) -> bool:
        """Stop the run (any thread; a signal handler too): a ``KeyboardInterrupt`` raised in its
        thread at its next Python instruction (a run blocked in one long C call, such as
        ``time.sleep(600)``, stops when that call returns), or its task cancelled on the loop.
        ``False`` when it had not started or was over."""
        if self.interrupted is not None:
            return True
        with self._lock:
            if self._thread_id is not None:
                self.interrupted = by
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread_id),
                                                           ctypes.py_object(KeyboardInterrupt))
                return True
        task, loop = self._task, self._loop
        if task is not None and loop is not None and not task.done():
            self.interrupted = by
            loop.call_soon_threadsafe(task.cancel)
            return True
        return False


_RUNS: "set[Run]" = set()
"""The runs under way in this process (what Jupyter's Interrupt stops)."""
_previous_sigint: Any = None
_sigint_installed = False


def _on_sigint(signum: int, frame: Any) -> None:
    """SIGINT (Jupyter's *Interrupt* of an idle kernel): the runs under way are interrupted;
    when there are none, SIGINT does what it did before (ignored in an idle ipykernel)."""
    hit = [r for r in list(_RUNS) if r.interrupt("Jupyter's Interrupt")]
    if hit:
        return
    previous = _previous_sigint
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL:
        signal.default_int_handler(signum, frame)


def interrupt_on_sigint() -> bool:
    """Make the process's SIGINT interrupt the runs under way (from the main thread only, where
    Python handles signals: ``False`` elsewhere). ipykernel ignores SIGINT while idle and puts
    its own handler in place while a cell executes, then puts back the one it found: an
    Interrupt during a cell stops that cell (as always), one while the kernel is idle stops the
    runs. Called at each run's start and every half second while a run waits
    (:func:`_in_thread`): ours is put back whenever the idle kernel's ``SIG_IGN`` is in place
    again (a run approved during a cell outlives it: that cell's end restored ``SIG_IGN``);
    never over a cell's own handler."""
    global _previous_sigint, _sigint_installed
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        current = signal.getsignal(signal.SIGINT)
        if current is _on_sigint:
            return True
        if _sigint_installed and current is not signal.SIG_IGN:
            return False  # a cell's own handler (ipykernel's): its Interrupt stops that cell
        _previous_sigint = signal.signal(signal.SIGINT, _on_sigint)
    except (ValueError, OSError):
        return False
    _sigint_installed = True
    return True


async def _in_thread(run: Run, fn: Any) -> Any:
    """``fn()`` in a daemon thread of its own, in this context (its writes reach the run's
    captures); awaited without holding the loop. Cancelling the awaiting task interrupts the
    thread and still waits for it to end."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()
    context = contextvars.copy_context()
    started = threading.Event()

    def settle(value: Any, exc: BaseException | None) -> None:
        if done.done():
            return
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(value)

    def body() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            try:
                with run._lock:
                    run._thread_id = threading.get_ident()
                started.set()
                value = context.run(fn)
            except BaseException as exc:  # KeyboardInterrupt of an interrupt: the caller reports it
                error = exc
            finally:
                with run._lock:  # no interrupt is sent once this is None
                    run._thread_id = None
        except KeyboardInterrupt as late:  # an interrupt that landed as the code returned
            error = error or late
        for _ in range(3):  # one already sent may still land here
            try:
                loop.call_soon_threadsafe(settle, value, error)
                return
            except KeyboardInterrupt:
                continue
            except RuntimeError:  # the loop is closed: nobody waits any more
                return

    thread = threading.Thread(target=body, name="escouade run_code", daemon=True)
    thread.start()
    started.wait()
    try:
        while True:  # SIGINT kept ours while the kernel is idle (interrupt_on_sigint)
            finished, _ = await asyncio.wait({done}, timeout=0.5)
            if finished:
                return done.result()
            interrupt_on_sigint()
    except asyncio.CancelledError:
        run.interrupt("the request's cancellation")
        try:
            await done
        except BaseException:
            pass
        raise


async def execute(code: str, ns: dict[str, Any], filename: str, run: Run | None = None) -> dict[str, Any]:
    """Run ``code`` in the user namespace: ``{"stdout", "stderr", "result" (repr of the last
    expression, or None), "error" (traceback text, or None)}``. ``run``: this run's
    :class:`Run` (its captures readable meanwhile, its :meth:`~Run.interrupt`); a new one when
    omitted.

    Synchronous code (no top-level ``await``) runs in a thread of its own: the loop keeps
    turning (tool calls, the views, cells of an async turn), at the cost of sharing the GIL with
    it (``benchmarks/run_thread_loop.py``); the code sees the namespace as cells do, and a cell
    running meanwhile may see its variables change. Code with a top-level ``await`` runs on the
    loop, as a cell's would. An interrupted run answers ``error`` ``KeyboardInterrupt`` (who
    interrupted it is said there).

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
    run = run if run is not None else Run()
    out, err = run.out, run.err
    result: dict[str, Any] = {"stdout": "", "stderr": "", "result": None, "error": None}
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    try:
        tree = ast.parse(code, filename, "exec")
    except SyntaxError as exc:
        result["error"] = "".join(traceback.format_exception_only(type(exc), exc))
        return result
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body[-1].value)
        tree.body.pop()
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    with _Routing.capture(out, err):
        try:
            body = compile(tree, filename, "exec", flags=flags)
            expr = compile(last, filename, "eval", flags=flags) if last is not None else None
            if not (body.co_flags & inspect.CO_COROUTINE) and \
                    (expr is None or not expr.co_flags & inspect.CO_COROUTINE):
                run.in_thread = True
                _RUNS.add(run)

                def synchronous() -> Any:
                    eval(body, ns)  # the user allowed this code
                    return eval(expr, ns) if expr is not None else None

                try:
                    value = await _in_thread(run, synchronous)
                finally:
                    _RUNS.discard(run)
                if value is not None:
                    result["result"] = variables_core.short_repr(value, MAX_CAPTURE)
            else:
                run._task, run._loop = asyncio.current_task(), asyncio.get_running_loop()
                _RUNS.add(run)
                try:
                    value = eval(body, ns)  # the user allowed this code
                    if body.co_flags & inspect.CO_COROUTINE:
                        await value
                    if expr is not None:
                        value = eval(expr, ns)
                        if expr.co_flags & inspect.CO_COROUTINE:
                            value = await value
                        if value is not None:
                            result["result"] = variables_core.short_repr(value, MAX_CAPTURE)
                finally:
                    _RUNS.discard(run)
                    run._task = None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if run.interrupted is None or run.in_thread or task is None or task.cancelling() > 1:
                raise
            task.uncancel()  # our interrupt, not the request's cancellation: answered as an error
            result["error"] = f"KeyboardInterrupt: interrupted by {run.interrupted}\n"
        except BaseException as exc:  # SystemExit and KeyboardInterrupt of the code included
            tb = exc.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename != filename:
                tb = tb.tb_next
            result["error"] = "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
            if run.interrupted is not None and isinstance(exc, KeyboardInterrupt):
                result["error"] += f"(interrupted by {run.interrupted})\n"
    result["stdout"], result["stderr"] = out.text(), err.text()
    return result
