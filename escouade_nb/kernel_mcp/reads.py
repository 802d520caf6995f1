"""The kernel MCP server's read tools: looks at the user's values (``repr``, ``len``,
``shape``… of :mod:`escouade_nb.core.variables`) run in worker threads within a budget
(:class:`Readers`, never on the loop), and the answers the model reads
(:func:`list_variables_text`, :func:`inspect_variable_text`, :func:`notebook_cells_text`,
:func:`live_cells_text`).
"""

import asyncio
import concurrent.futures
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Container, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import notebook as notebook_core
from ..core import variables as variables_core
from ..core.output_images import Images
from .tools import ImageAnswer, ToolFailure

READ_BUDGET = 2.0
"""Seconds one read tool call (``list_variables``, ``inspect_variable``, ``notebook_cells``)
waits for the looks at user values it runs; what is not done by then is reported as such."""
READERS = 4
"""Worker threads that run the looks at user values (one server's; started on first use,
daemon threads: a look that never ends does not hold the interpreter's exit)."""
MAX_QUEUED = 1000
"""Looks waiting for a reader thread beyond which new ones are not queued (reported as not
read): the queue stays bounded while every thread is held by a look that never ends."""


class Readers:
    """The worker threads that look at user values (``repr``, ``len``, ``shape``… of
    :mod:`escouade_nb.core.variables`): at most ``size`` daemon threads, started on first
    use, fed from one queue. A look is ``(label, value, fn)``: while a look of an earlier
    call at the same object (``id``, the value held so the id stays its own) is still
    running or queued, it is not started again — :meth:`read` reports it as still running.

    :meth:`read` is the loop's side: it waits at most ``budget`` seconds (never blocks the
    loop), then answers a :class:`Read` per look: done (``result``), still running past
    the budget (``step``: the look under way, ``since``: monotonic start), or not started
    (every thread busy: the job is withdrawn)."""

    def __init__(self, size: int = READERS) -> None:
        self._size = size
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._running: dict[int, Read] = {}  # id(value) -> its look under way (or queued)
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

    def _forget(self, read: "Read") -> None:
        with self._lock:
            if self._running.get(id(read.value)) is read:
                del self._running[id(read.value)]

    async def read(self, looks: list[tuple[str, Any, Callable[[dict], Any]]], budget: float) -> list["Read"]:
        """Run ``looks`` (``(label, value, fn(progress) -> result)``) within ``budget`` seconds;
        one :class:`Read` per look, in order. A cancellation withdraws the looks not started."""
        if self._closed:
            raise RuntimeError("the kernel's MCP server is closed")
        reads: list[Read] = []
        fresh: list[Read] = []
        with self._lock:
            before = dict(self._running)  # looks of earlier calls (this call's own duplicates run)
            for label, value, fn in looks:
                earlier = before.get(id(value))
                # an earlier look whose result is in (its thread has not yet forgotten it) is not still running
                if earlier is not None and earlier.value is value and not earlier.future.done():
                    reads.append(Read(label, value, earlier=earlier))
                    continue
                read = Read(label, value)
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
class Read:
    """One look of :meth:`Readers.read`: ``label`` (e.g. the variable's name), the
    ``value``, its ``future``, ``progress`` (filled by the look, see
    :func:`escouade_nb.core.variables.summarize`), ``since`` (monotonic start), ``earlier``
    (the look of an earlier call still running on the same value: this one was not
    started), ``withdrawn`` (never started: every thread was busy)."""

    label: str
    value: Any
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    progress: dict = field(default_factory=dict)
    since: float | None = None
    earlier: "Read | None" = None
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


async def list_variables_text(readers: Readers, ns: Mapping[str, Any], hidden: Container[str], include_all: bool,
                              budget: float) -> str:
    """``list_variables``' answer: a line per variable of ``ns`` (not ``hidden``), each
    read within ``budget`` seconds."""
    named = variables_core.listed_names(ns, hidden, include_all=include_all)

    def row(name: str, value: Any) -> Callable[[dict], Any]:
        return lambda progress: variables_core.variable_row(name, value, include_all=include_all,
                                                            progress=progress)

    reads = await readers.read([(name, value, row(name, value)) for name, value in named],
                                     budget)
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
            lines.append(f"- {r.label}: {kind} — ({r.why_not(budget)})")
    if not lines:
        return ("No variables in the kernel's namespace" +
                ("." if include_all else " (modules, functions, classes and _private names are not listed; "
                                         "include_all=true lists them)."))
    head = f"{len(lines)} variable{'s' if len(lines) != 1 else ''}" + (
        "" if include_all else " (modules, functions, classes and _private names not listed)") + ":"
    return "\n".join([head] + lines)


async def inspect_variable_text(readers: Readers, ns: Mapping[str, Any], name: str, rows: int, attributes: bool,
                                budget: float) -> str:
    """``inspect_variable``'s answer; :class:`ToolFailure` for an unknown name or a bad ``rows``."""
    if name not in ns:
        raise ToolFailure(f"no variable named {name!r} in the kernel's namespace (list_variables gives the names)")
    value = ns[name]
    if not isinstance(rows, int) or rows < 0:
        raise ToolFailure(f"rows must be an integer ≥ 0, got {rows!r}")
    (r,) = await readers.read(
        [(name, value, lambda progress: variables_core.summarize(name, value, rows=rows, attributes=attributes,
                                                                 progress=progress))],
        budget)
    if r.done:
        return variables_core.summary_text(r.result())
    why = r.why_not(budget)
    d = dict(r.progress.get("found") or {}) if r.earlier is None and not r.withdrawn else {}
    d.update(name=name)
    d.setdefault("type", type(value).__name__)
    d["summary"] = f"{d['summary']} (incomplete: {why})" if "summary" in d else f"(incomplete: {why})"
    d.setdefault("repr", "(not shown)")
    return variables_core.summary_text(d)


async def notebook_cells_text(readers: Readers, ns: Mapping[str, Any], start: int | None, end: int | None,
                              source: str, ref: notebook_core.NotebookRef | None, budget: float) -> str:
    """``notebook_cells``' answer: the kernel's history and/or the saved notebook file
    (``ref``); :class:`ToolFailure` for a bad ``source`` or range."""
    if source not in ("history", "file", "both"):
        raise ToolFailure(f"source must be history, file or both, not {source!r}")
    parts: list[str] = []
    if source in ("history", "both"):
        parts.append(await _history_text(readers, ns, start, end, budget))
    if source in ("file", "both"):
        parts.append(await _file_text(ref, start, end))
    return "\n\n".join(parts)


async def _history_text(readers: Readers, ns: Mapping[str, Any], start: int | None, end: int | None,
                        budget: float) -> str:
    try:
        cells = variables_core.history_cells(ns, start=start, end=end)
    except ValueError as exc:
        raise ToolFailure(str(exc)) from None
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
    reads = await readers.read([(f"Out[{c['execution_count']}]", c["value"], show(c["value"]))
                                      for c in with_output], budget)
    outputs = {c["execution_count"]: (r.result() if r.done else f"({r.why_not(budget)})")
               for c, r in zip(with_output, reads, strict=True)}
    lines = [f"History: {len(cells)} cell{'s' if len(cells) != 1 else ''} run in this kernel "
             f"(execution counts {cells[0]['execution_count']}–{cells[-1]['execution_count']}):"]
    for c in cells:
        lines += [f"In [{c['execution_count']}]:", c["source"].rstrip("\n")]
        if c["execution_count"] in outputs:
            lines += [f"Out[{c['execution_count']}]:", outputs[c["execution_count"]]]
    return "\n".join(lines)


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
        raise ToolFailure(str(exc)) from None
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


async def live_cells_text(read: Callable[[], Awaitable[dict[str, Any]]] | None, start: int | None,
                          end: int | None, ref: notebook_core.NotebookRef | None) -> str | ImageAnswer:
    """``notebook_cells(source="live")``'s answer, JSON: ``{"source": "live", "notebook"
    (the page's path), "cells_in_notebook", "cells": [{"index", "id", "cell_type", "source",
    "sha256", "execution_count", "outputs"}]}`` (:func:`~..core.notebook.live_cells`), and
    when PNG or JPEG outputs came within the caps, ``"images": [{"image", "cell_id",
    "index", "mime_type", "bytes"}]`` with the text of an :class:`ImageAnswer` carrying them.
    ``read()`` is the channel's (:meth:`.server.LiveNotebook.live_cells`);
    ``None``: this kernel has none. :class:`ToolFailure` in one line when no page answers
    (the channel's own), for a malformed answer or bad bounds."""
    import json

    if read is None:
        raise ToolFailure('source="live" needs escouade_nb loaded in a kernel whose notebook is open in '
                          'JupyterLab 4 or Notebook 7 (this server has no channel to a page): source="file" '
                          "reads the saved notebook")
    got = await read()
    try:
        images = Images()
        total, cells = notebook_core.live_cells(got.get("cells"), start=start, end=end, images=images)
    except ValueError as exc:
        raise ToolFailure(str(exc)) from None
    answer: dict[str, Any] = {
        "source": "live", "notebook": got.get("path") or (str(ref.path) if ref is not None else None),
        "note": "as open in the page now, unsaved edits included", "cells_in_notebook": total, "cells": cells}
    if not images.items:
        return json.dumps(answer, ensure_ascii=False, indent=1)
    answer["images"] = images.listing()
    answer["images_note"] = "each image follows this text as MCP image content, in this order"
    return ImageAnswer(json.dumps(answer, ensure_ascii=False, indent=1), "ok", images.items)


def _read_notebook(path: Path) -> Any:
    """``nbformat.read`` (a worker thread's job: file I/O and nbformat's import)."""
    import nbformat

    return nbformat.read(str(path), as_version=4)
