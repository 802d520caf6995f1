"""Per-agent transcripts: every wire message and client event, as JSON lines, as it happens.

A transcript is what survives a kernel restart: ``%escouade resume AGENT`` rebuilds the
conversation from it (:func:`replay`) and, when the agent supports ``session/load``,
reattaches to the same session.

Where: ``$ESCOUADE_NB_TRANSCRIPTS_DIR``, else ``<jupyter data dir>/escouade_nb/transcripts``.
One file per agent start, ``<agent>-<YYYYmmdd-HHMMSS>-<pid>.jsonl`` (``-2``… for a second
start of that name in the same second), rotated by size
(``<file>.1`` … ``<file>.<backups>``, oldest dropped). Each line is one
:class:`Record`: ``{"t": epoch seconds, "kind": "header"|"in"|"out"|"event", ...}``.
A write that fails (disk full, read-only folder) never stops the session: the
transcript turns itself off and reports the error once through ``on_error``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ..core.conversation import Conversation

MAX_BYTES = 20 * 1024 * 1024
"""A transcript file is rotated past this size (bytes)."""
BACKUPS = 3


class Record(BaseModel):
    """One line of a transcript."""

    model_config = ConfigDict(extra="allow")
    t: float
    kind: Literal["header", "in", "out", "event"]
    msg: dict[str, Any] | None = None  # in/out: the JSON-RPC message
    event: str | None = None  # event: start, session, exit, notice…
    data: dict[str, Any] | None = None


def transcripts_dir() -> Path:
    env = os.environ.get("ESCOUADE_NB_TRANSCRIPTS_DIR")
    if env:
        return Path(env).expanduser()
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "escouade_nb" / "transcripts"


_started: set[Path] = set()
"""The transcript files this process has started (one per agent start)."""


class Transcript:
    """An append-only JSON-lines file with size rotation."""

    def __init__(self, path: Path, *, max_bytes: int = MAX_BYTES, backups: int = BACKUPS,
                 on_error: Callable[[OSError], None] | None = None) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.on_error = on_error
        self.error: OSError | None = None
        self._fh = None
        self._pending = 0
        self._size = 0
        self._flush_handle: asyncio.TimerHandle | None = None

    @classmethod
    def new(cls, agent_name: str, header: dict[str, Any], **kwargs: Any) -> Transcript:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in agent_name)
        path = transcripts_dir() / f"{safe}-{stamp}-{os.getpid()}.jsonl"
        n = 2
        while path in _started:  # a second start within the same second (a restart): its own file
            path = path.with_name(f"{safe}-{stamp}-{os.getpid()}-{n}.jsonl")
            n += 1
        _started.add(path)
        t = cls(path, **kwargs)
        t.write({"kind": "header", **header})
        return t

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps({"t": round(time.time(), 3), **record}, ensure_ascii=False, default=str)
        self._append(line, buffered=record.get("kind") == "in")

    def wire_line(self, direction: str, message: bytes) -> None:
        """Record one wire message from its exact JSON text (not serialised again)."""
        self._append(f'{{"t":{time.time():.3f},"kind":"{direction}","msg":'
                     f'{message.decode("utf-8", "replace")}}}', buffered=direction == "in")

    def _append(self, line: str, buffered: bool) -> None:
        if self.error is not None:
            return
        try:
            if self._fh is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "a", encoding="utf-8")
                self._size = self._fh.tell()
            self._fh.write(line)
            self._fh.write("\n")
            self._size += len(line) + 1  # characters, close enough to bytes for rotation
            self._pending += 1
            if not buffered or self._pending >= 256 or not self._schedule_flush():
                self.flush()
            if self._size > self.max_bytes:
                self._rotate()
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        """A write failed: stop writing (the session goes on) and say so once."""
        self.error = exc
        self.close()
        if self.on_error is not None:
            self.on_error(exc)

    def flush(self) -> None:
        """Push buffered lines to the file (done at once for everything but the agent's
        stream, which is flushed every 256 lines or 0.2 s)."""
        self._flush_handle = None
        self._pending = 0
        if self._fh is not None and self.error is None:
            try:
                self._fh.flush()
            except OSError as exc:
                self._failed(exc)

    def _schedule_flush(self) -> bool:
        if self._flush_handle is not None:
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._flush_handle = loop.call_later(0.2, self.flush)
        return True

    def wire(self, direction: str, message: dict[str, Any]) -> None:
        self.write({"kind": direction, "msg": message})

    def event(self, name: str, **data: Any) -> None:
        self.write({"kind": "event", "event": name, "data": data})

    def _rotate(self) -> None:
        self.close()
        for n in range(self.backups, 0, -1):
            src = self.path.with_name(f"{self.path.name}.{n - 1}") if n > 1 else self.path
            if src.exists():
                src.replace(self.path.with_name(f"{self.path.name}.{n}"))

    def close(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass
            self._fh = None


def read(path: Path) -> Iterator[Record]:
    """The records of a transcript, oldest rotated part first; bad lines are skipped."""
    parts = sorted(path.parent.glob(path.name + ".*"), key=lambda p: -int(p.suffix[1:]) if p.suffix[1:].isdigit()
                   else 0)
    for part in [*parts, path]:
        if not part.exists():
            continue
        with open(part, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    yield Record.model_validate_json(line)
                except ValueError:
                    continue


def header(path: Path) -> dict[str, Any] | None:
    """The header record of a transcript (agent, harness id, cwd…), or None."""
    for part in [path, *sorted(path.parent.glob(path.name + ".*"))]:
        try:
            with open(part, encoding="utf-8") as fh:
                first = json.loads(fh.readline())
        except (OSError, ValueError):
            continue
        if first.get("kind") == "header":
            return first
    return None


def latest(agent_name: str | None = None) -> dict[str, Path]:
    """The newest transcript of each agent name (or of ``agent_name`` only)."""
    found: dict[str, tuple[float, Path]] = {}
    folder = transcripts_dir()
    if not folder.is_dir():
        return {}
    for path in folder.glob("*.jsonl"):
        head = header(path)
        if head is None:
            continue
        name = head.get("agent", "")
        if agent_name is not None and name != agent_name:
            continue
        mtime = path.stat().st_mtime
        if name not in found or mtime > found[name][0]:
            found[name] = (mtime, path)
    return {name: path for name, (_, path) in sorted(found.items())}


def replay(records: Iterator[Record], conversation: Conversation) -> dict[str, Any]:
    """Rebuild ``conversation`` from a transcript's records: the agent's updates, the
    prompts sent, the permission cards and how they were answered, exits. Returns what
    the records say of the session: ``{"session_id", "agent_capabilities", ...}``."""
    info: dict[str, Any] = {}
    cards: dict[Any, Any] = {}  # JSON-RPC id of a permission request -> its Permission
    records = list(records)
    # the sessions this agent had: an update for any other one was dropped live, so it is here too
    sessions = {(r.data or {}).get("session_id") for r in records if r.kind == "event" and r.event == "session"}
    sessions |= {r.msg["result"]["sessionId"] for r in records if r.kind == "in" and isinstance(r.msg, dict)
                 and isinstance(r.msg.get("result"), dict) and "sessionId" in r.msg["result"]}
    loads: set[Any] = set()  # ids of session/load requests not answered yet
    for rec in records:
        msg = rec.msg or {}
        if rec.kind == "header":
            info.update({k: v for k, v in rec.model_extra.items()} if rec.model_extra else {})
        elif rec.kind == "in":
            method = msg.get("method")
            params = msg.get("params") or {}
            if "id" in msg and "method" not in msg:
                loads.discard(msg["id"])
            if method == "session/update":
                if loads:  # the agent's replay of a reloaded session: already in the records before
                    continue
                if params.get("sessionId") in (None, *sessions) or not sessions:
                    conversation.apply(params.get("update") or {})
            elif method == "session/request_permission" and "id" in msg:
                cards[msg["id"]] = conversation.add_permission(params.get("toolCall") or {},
                                                               params.get("options") or [])
            elif isinstance(msg.get("result"), dict) and "sessionId" in msg["result"]:
                info["session_id"] = msg["result"]["sessionId"]
            elif isinstance(msg.get("result"), dict) and "agentCapabilities" in msg["result"]:
                info["agent_capabilities"] = msg["result"]["agentCapabilities"]
        elif rec.kind == "out":
            if msg.get("method") == "session/load" and "id" in msg:
                loads.add(msg["id"])
            if msg.get("method") == "session/prompt":
                conversation.add_user_message((msg.get("params") or {}).get("prompt") or [])
            elif "id" in msg and msg["id"] in cards and isinstance(msg.get("result"), dict):
                outcome = (msg["result"].get("outcome") or {})
                meta = (msg["result"].get("_meta") or {}).get("escouade") or {}
                if outcome.get("outcome") == "selected":
                    conversation.resolve_permission(cards[msg["id"]], "selected", outcome.get("optionId"),
                                                    meta.get("by"), meta.get("message"))
                else:
                    conversation.resolve_permission(cards[msg["id"]], "cancelled")
        elif rec.kind == "event":
            data = rec.data or {}
            if rec.event == "exit" and not data.get("expected"):
                conversation.add_notice(f"Agent exited with code {data.get('code')}", level="error",
                                        detail=data.get("stderr_tail", ""))
            elif rec.event == "session":
                info["session_id"] = data.get("session_id")
    for perm in cards.values():  # a card never answered before the kernel went away
        if perm.state == "pending":
            conversation.resolve_permission(perm, "cancelled", None, "the kernel restarted")
    conversation.cancel_unfinished()
    conversation.close_messages()
    return info
