"""The journal of the rule plugins: every decision, start, crash and error.

Persisted as JSON lines, one file per plugin: ``<journal dir>/<plugin id>.jsonl``, where
the journal dir is ``$ESCOUADE_NB_JOURNAL_DIR`` if set, else
``<jupyter data dir>/escouade_nb/journal`` (``jupyter --data-dir`` prints the data dir;
usually ``~/.local/share/jupyter``). Each line is one :class:`Entry` (camelCase keys).

Read as plain text (:meth:`Entry.text`), a decision is one line::

    14:03:12  Decision  refused Bash rm -rf build (2 ms): no rm -rf here
    14:05:40  Decision  allowed Bash npm test (1 ms)
    14:07:02  Decision  did not decide Bash cargo build: no answer in time; the user is asked

The kernel's tools have a journal of their own, ``kernel-tools``: one ``Answer`` a call,
whoever answered it (rule plugin or not)::

    14:08:30  Answer  allowed mcp__escouade__run_code total = df.revenue.sum() by you
    14:09:02  Answer  refused mcp__escouade__run_code import shutil by Team rules via Escouade: not here
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from ..core.observers import Observers, Subscription

__all__ = ["JOURNAL_ENV", "Entry", "Journal", "journal_dir"]

JOURNAL_ENV = "ESCOUADE_NB_JOURNAL_DIR"
KEEP = 2000
"""Entries kept in memory per plugin (the file keeps everything)."""

Kind = Literal["Decision", "Answer", "Start", "Stop", "Crash", "Error", "Output"]
Verdict = Literal["allowed", "refused", "did not decide", "cancelled"]


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def journal_dir() -> Path:
    env = os.environ.get(JOURNAL_ENV)
    if env:
        return Path(env).expanduser()
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "escouade_nb" / "journal"


class Entry(BaseModel):
    """One line of a plugin's journal. For a ``Decision``: ``verdict``, ``tool``,
    ``target`` (what it aimed at), ``delay_ms`` (None without an answer), ``message``
    (the plugin's), ``reason`` (why it did not decide), ``applied`` (False when the
    answer came after the card was settled), ``then`` (what happened to the request
    when this plugin did not settle it: the user is asked, another plugin decided…),
    ``fields`` (for each field of the request longer than ``target`` shows, by path:
    ``{"chars": N, "sha256": hex}`` of its whole UTF-8 text — the file names what was
    judged without keeping megabytes of it) and ``truncated`` (the fields cut to fit the
    request: no allowance of it was honoured).

    An ``Answer`` is how a call of the kernel's tools was answered, whoever answered it
    (journal ``kernel-tools``, :mod:`escouade_nb.engine.kernel_record`): ``verdict``
    (``allowed``, ``refused``, ``cancelled``), ``tool``, ``target``, ``by`` (who decided:
    ``you``, a rule plugin's ``NAME via Escouade``, ``escouade_nb``…; None for a
    cancellation), ``message`` (a refusal's, or why it was cancelled), ``request_id`` (the
    card's tool call id)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    time: datetime
    plugin: str
    kind: Kind
    text_: str | None = Field(default=None, alias="text")
    verdict: Verdict | None = None
    tool: str | None = None
    target: str | None = None
    delay_ms: float | None = None
    message: str | None = None
    reason: str | None = None
    applied: bool | None = None
    then: str | None = None
    by: str | None = None
    request_id: str | None = None
    agent: str | None = None
    project: str | None = None
    fields: dict[str, dict[str, Any]] | None = None
    truncated: list[str] | None = None

    def clock(self) -> str:
        return self.time.astimezone().strftime("%H:%M:%S")

    def body(self) -> str:
        """The line without its time and kind."""
        aim = " ".join(x for x in (self.tool, self.target) if x)
        if self.kind == "Answer":
            line = f"{self.verdict} {aim}" + (f" by {self.by}" if self.by else "")
            return line + (f": {self.message}" if self.message else "")
        if self.kind != "Decision":
            return self.text_ or ""
        delay = f" ({max(1, math.ceil(self.delay_ms))} ms)" if self.delay_ms is not None else ""
        line = f"{self.verdict} {aim}{delay}"
        if self.verdict == "did not decide":
            line += f": {self.reason or 'no answer'}"
            if self.then:
                line += f"; {self.then}"
        elif self.message:
            line += f": {self.message}"
        if self.applied is False:
            line += f" — not applied: {self.then or 'the card was already answered'}"
        return line

    def text(self) -> str:
        return f"{self.clock()}  {self.kind}  {self.body()}"

    def line(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)


class Journal:
    """All plugins' journals: keeps the newest entries in memory, tells subscribers
    (``subscribe(fn)`` -> a token, ``fn(entry)``) of each new one at once, and appends them
    to the files.

    Writing never blocks the kernel's loop: an entry added on a running asyncio loop is
    queued and appended by one writer thread (started when there is something to write,
    gone when the queue is empty), in order. Added where no loop runs, it is written at
    once. :meth:`flush` (synchronous: interpreter exit) and :meth:`aclose` write what is
    queued. A file that cannot be written (a read-only data dir) loses its lines, never
    a decision: the entries stay in memory."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else journal_dir()
        self._entries: dict[str, deque[Entry]] = {}
        self._loaded: set[str] = set()
        self._observers: Observers[[Entry]] = Observers("journal")
        self._queue: list[Entry] = []
        self._queue_lock = threading.Lock()  # guards _queue and _writing
        self._io_lock = threading.Lock()  # held while the files are touched: one writer at a time, in order
        self._writing = False
        self._writer: threading.Thread | None = None
        self._before: dict[str, int] = {}  # bytes of a plugin's file from before this journal wrote to it

    def path(self, plugin: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in plugin)
        return self.folder / f"{safe}.jsonl"

    def subscribe(self, fn: Callable[[Entry], None]) -> Subscription:
        """Call ``fn(entry)`` for each new entry; returns the token that ends it."""
        return self._observers.subscribe(fn)

    # -- reading the files ----------------------------------------------------------------
    def _size_before(self, plugin: str) -> int:
        """With the I/O lock held: how much of the file predates this journal."""
        if plugin not in self._before:
            try:
                self._before[plugin] = self.path(plugin).stat().st_size
            except OSError:
                self._before[plugin] = 0
        return self._before[plugin]

    def _load(self, plugin: str) -> deque[Entry]:
        """The entries of ``plugin``: those of the file written before this journal,
        read once, then this session's."""
        entries = self._entries.setdefault(plugin, deque(maxlen=KEEP))
        if plugin not in self._loaded:
            self._loaded.add(plugin)
            old: list[Entry] = []
            with self._io_lock:
                size = self._size_before(plugin)
                try:
                    with open(self.path(plugin), "rb") as fh:
                        data = fh.read(size)
                except OSError:
                    data = b""
            for raw in data.splitlines():
                try:
                    old.append(Entry.model_validate_json(raw))
                except ValidationError:
                    continue  # a torn or foreign line
            room = KEEP - len(entries)
            if room > 0:
                entries.extendleft(reversed(old[-room:]))
        return entries

    # -- writing --------------------------------------------------------------------------
    def write(self, entry: Entry) -> Entry:
        """Keep ``entry``, tell the subscribers, and queue its line for the file."""
        self._entries.setdefault(entry.plugin, deque(maxlen=KEEP)).append(entry)
        with self._queue_lock:
            self._queue.append(entry)
            start = not self._writing
            if start:
                self._writing = True
        if start:
            if _on_a_loop():
                self._writer = threading.Thread(target=self._drain, name="escouade journal writer", daemon=True)
                self._writer.start()
            else:
                self._drain()
        self._observers.emit(entry)
        return entry

    def add(self, plugin: str, kind: Kind, text: str | None = None, **fields) -> Entry:
        return self.write(Entry(time=datetime.now().astimezone(), plugin=plugin, kind=kind, text=text, **fields))

    def _drain(self) -> None:
        """The writer: write batches until the queue is empty."""
        while True:
            with self._io_lock:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                    if not batch:
                        self._writing = False
                        return
                self._append(batch)

    def _append(self, batch: list[Entry]) -> None:
        """With the I/O lock held: append ``batch`` to the files, in order, one open per file."""
        lines: dict[str, list[str]] = {}
        for entry in batch:
            lines.setdefault(entry.plugin, []).append(entry.line() + "\n")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return
        for plugin, chunk in lines.items():
            self._size_before(plugin)
            try:
                with open(self.path(plugin), "a", encoding="utf-8") as fh:
                    fh.write("".join(chunk))
            except OSError:
                pass  # a read-only data dir must not stop decisions; the entries stay in memory

    def flush(self) -> None:
        """Write every queued entry now, in the calling thread (synchronous: usable at
        interpreter exit). On return, every entry added before the call is on disk."""
        with self._io_lock:
            with self._queue_lock:
                batch, self._queue = self._queue, []
            if batch:
                self._append(batch)

    async def aclose(self) -> None:
        """Flush, off the loop, and wait for the writer thread to end."""
        await asyncio.to_thread(self.flush)
        writer = self._writer
        if writer is not None:
            await asyncio.to_thread(writer.join, 5.0)
            self._writer = None

    def plugins(self) -> list[str]:
        """Plugins with a journal (a file or entries of this session)."""
        names = set(self._entries)
        try:
            names |= {p.stem for p in self.folder.glob("*.jsonl")}
        except OSError:
            pass
        return sorted(names)

    def entries(self, plugin: str | None = None, kind: str | None = None, text: str | None = None,
                since: datetime | None = None) -> list[Entry]:
        """Entries of ``plugin`` (all plugins when None), oldest first, filtered by
        ``kind`` and by a case-insensitive ``text`` found in the plain-text line."""
        plugins: Iterable[str] = [plugin] if plugin else self.plugins()
        out: list[Entry] = []
        for p in plugins:
            out.extend(self._load(p))
        if plugin is None:
            out.sort(key=lambda e: e.time)
        if kind:
            out = [e for e in out if e.kind == kind]
        if since is not None:
            out = [e for e in out if e.time >= since]
        if text:
            needle = text.lower()
            out = [e for e in out if needle in e.text().lower()]
        return out

    def text(self, plugin: str | None = None, kind: str | None = None, text: str | None = None,
             since: datetime | None = None) -> str:
        return "\n".join(e.text() for e in self.entries(plugin, kind, text, since))
