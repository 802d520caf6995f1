"""The journal of the rule plugins: every decision, start, crash and error.

Persisted as JSON lines, one file per plugin: ``<journal dir>/<plugin id>.jsonl``, where
the journal dir is ``$ESCOUADE_NB_JOURNAL_DIR`` if set, else
``<jupyter data dir>/escouade_nb/journal`` (``jupyter --data-dir`` prints the data dir;
usually ``~/.local/share/jupyter``). Each line is one :class:`Entry` (camelCase keys).

Read as plain text (:meth:`Entry.text`), a decision is one line::

    14:03:12  Decision  refused Bash rm -rf build (2 ms): no rm -rf here
    14:05:40  Decision  allowed Bash npm test (1 ms)
    14:07:02  Decision  did not decide Bash cargo build: no answer in time; the user is asked
"""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

__all__ = ["JOURNAL_ENV", "Entry", "Journal", "journal_dir"]

JOURNAL_ENV = "ESCOUADE_NB_JOURNAL_DIR"
KEEP = 2000
"""Entries kept in memory per plugin (the file keeps everything)."""

Kind = Literal["Decision", "Start", "Stop", "Crash", "Error", "Output"]
Verdict = Literal["allowed", "refused", "did not decide"]


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
    when this plugin did not settle it: the user is asked, another plugin decided…)."""

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
    request_id: str | None = None
    agent: str | None = None
    project: str | None = None

    def clock(self) -> str:
        return self.time.astimezone().strftime("%H:%M:%S")

    def body(self) -> str:
        """The line without its time and kind."""
        if self.kind != "Decision":
            return self.text_ or ""
        aim = " ".join(x for x in (self.tool, self.target) if x)
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
    """All plugins' journals: appends to the files, keeps the newest entries in memory,
    tells subscribers (``subscribe(fn)``, ``fn(entry)``) of each new one."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else journal_dir()
        self._entries: dict[str, deque[Entry]] = {}
        self._loaded: set[str] = set()
        self._subscribers: list[Callable[[Entry], None]] = []

    def path(self, plugin: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in plugin)
        return self.folder / f"{safe}.jsonl"

    def subscribe(self, fn: Callable[[Entry], None]) -> Callable[[], None]:
        self._subscribers.append(fn)
        return lambda: self._subscribers.remove(fn) if fn in self._subscribers else None

    def _load(self, plugin: str) -> deque[Entry]:
        entries = self._entries.setdefault(plugin, deque(maxlen=KEEP))
        if plugin not in self._loaded:
            self._loaded.add(plugin)
            old: list[Entry] = []
            try:
                with open(self.path(plugin), encoding="utf-8") as fh:
                    for raw in fh:
                        try:
                            old.append(Entry.model_validate_json(raw))
                        except ValidationError:
                            continue  # a torn or foreign line
            except OSError:
                pass
            entries.extendleft(reversed(old[-KEEP:]))
        return entries

    def write(self, entry: Entry) -> Entry:
        entries = self._load(entry.plugin)
        entries.append(entry)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(self.path(entry.plugin), "a", encoding="utf-8") as fh:
                fh.write(entry.line() + "\n")
        except OSError:
            pass  # a read-only data dir must not stop decisions; the entry stays in memory
        for fn in list(self._subscribers):
            try:
                fn(entry)
            except Exception:
                pass
        return entry

    def add(self, plugin: str, kind: Kind, text: str | None = None, **fields) -> Entry:
        return self.write(Entry(time=datetime.now().astimezone(), plugin=plugin, kind=kind, text=text, **fields))

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
