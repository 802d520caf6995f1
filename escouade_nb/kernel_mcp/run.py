"""``run_code``'s execution in the kernel: the code run in the user namespace on the loop
(top-level ``await`` allowed), its stdout/stderr captured per call (:func:`execute`), and the
result as the text the model reads (:func:`run_result_text`).
"""

import ast
import asyncio
import contextlib
import contextvars
import inspect
import io
import linecache
import sys
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

    def text(self) -> str:
        out = "".join(self._parts)
        return out + (f"… [cut: {self.dropped:,} more characters]" if self.dropped else "")


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


async def execute(code: str, ns: dict[str, Any], filename: str) -> dict[str, Any]:
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
        last = ast.Expression(tree.body[-1].value)
        tree.body.pop()
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    with _Routing.capture(out, err):
        try:
            body = compile(tree, filename, "exec", flags=flags)
            value = eval(body, ns)  # the user allowed this code
            if body.co_flags & inspect.CO_COROUTINE:
                await value
            if last is not None:
                expr = compile(last, filename, "eval", flags=flags)
                value = eval(expr, ns)
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
