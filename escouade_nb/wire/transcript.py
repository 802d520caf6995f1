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

Segments: each agent process writes its own stretch, which starts with the file's header (a
start, a restart), a ``resume`` event (a new kernel writes on in the same file) or our
``segment`` event (:data:`SEGMENT_EVENT`); the agent's ids are only unique within one. The
client's own events (``notice``, ``answer``, ``question``…) are described in
:mod:`escouade_nb.engine.record`.

Off the loop: a record is only formatted and queued in memory where it happens. On a
running loop the queue is written by one writer thread, soon after (the agent's stream
every :data:`STREAM_DELAY` seconds or :data:`BATCH_BYTES`, anything else at the loop's next
turn); without a loop it is written at once. :meth:`Transcript.flush` writes what is
queued now, in the caller's thread (a turn's end, ``kill_now``); at interpreter exit
everything queued is written. :func:`read`, :func:`header` and :func:`latest` first write
what this process has queued, so they always see every record made so far.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ..core.conversation import STOPPED_BY_YOU, Conversation, PermissionState, Question, QuestionState
from ..core.prompt import is_context, steered_part_of
from . import kernel_calls, steering
from .reloads import ReplaySkip

MAX_BYTES = 20 * 1024 * 1024
"""A transcript file is rotated past this size (bytes)."""
BACKUPS = 3
REDACTED = b"\xc2\xabredacted\xc2\xbb"
"""What a secret becomes in a transcript line (UTF-8 of «redacted»)."""
STREAM_DELAY = 0.2
"""Seconds the agent's stream (``in`` lines) may wait in memory before it is written."""
BATCH_BYTES = 128 * 1024
"""Queued bytes past which the queue is handed to the writer at once."""


RECORD = 2
"""What a segment of this version records besides the wire (``segment`` event's ``record``):
the client's notices and every card's answer (:mod:`escouade_nb.engine.record`). A segment
without it (older transcripts) has its notices derived from the wire (exits, Stop)."""
SEGMENT_EVENT = "segment"
"""The event that starts one agent process's stretch of a transcript (its ids are its own)."""
NOTICE_EVENT = "notice"
"""The event of a notice of the client, in its place."""
ANSWER_EVENT = "answer"
"""The event of a permission card's answer, with who answered."""
QUESTION_EVENT = "question"
"""The event of a question card made (a form, a link, questions written in text)."""
QUESTION_ANSWER_EVENT = "question_answer"
"""The event of a question card settled."""
NOT_ASKED_EVENT = "not_asked"
"""The event of the client's note on a call the agent ran without asking (``ToolCall.not_asked``)."""
BUDGET_EVENT = "budget"
"""The events of a budget card (``engine/budget.py``): ``{"phase": "card", "call", "title", "text",
"options", "scope", "kinds"}`` when it is made (its answer is an ``answer`` event), ``{"phase": "end",
"call", "status"}`` after."""
BUDGET_ORIGIN = "budget"
"""The :attr:`~..core.conversation.ToolCall.origin` of a budget card: known from the code that made it (a
``budget`` event, ours), never from its id."""
CHECKPOINT_EVENT = "checkpoint"
"""The event of a checkpoint of the agent's folder before a turn (:mod:`escouade_nb.engine.review.checkpoints`)."""
UNSENT_EVENT = "unsent"
"""The event of a prompt shown in the conversation and never sent (a Stop while its turn took
its checkpoint): ``{"prompt": [blocks], "steered": bool}``, the user's words as shown."""
REWIND_EVENT = "rewind"
"""The event of a rewind: ``{"turn", "commit", "session"}``; the turns from ``turn`` on are marked rewound."""
KERNEL_RESTARTED = "the kernel restarted"
"""Why a card never answered before its process's stretch ended is shown cancelled."""


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

_queued: set[Transcript] = set()
"""Transcripts that queued lines since the last :func:`flush_all` (kept alive until then:
a transcript dropped with lines not written yet still gets them written)."""
_queued_lock = threading.Lock()
_writer: ThreadPoolExecutor | None = None
_writer_lock = threading.Lock()


def _writer_pool() -> ThreadPoolExecutor:
    """The one writer thread of every transcript (one thread: batches stay in order)."""
    global _writer
    with _writer_lock:
        if _writer is None:
            _writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="escouade-transcripts")
        return _writer


def flush_all() -> None:
    """Write everything every transcript of this process has queued (in this thread)."""
    with _queued_lock:
        pending = list(_queued)
        _queued.clear()
        for t in pending:
            t._registered = False
    for t in pending:
        t.flush()


atexit.register(flush_all)


class Transcript:
    """An append-only JSON-lines file with size rotation, written in batches off the loop."""

    def __init__(self, path: Path, *, max_bytes: int = MAX_BYTES, backups: int = BACKUPS,
                 on_error: Callable[[OSError], None] | None = None) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.on_error = on_error
        self.error: OSError | None = None
        self._lines: list[bytes] = []  # queued, oldest first; swapped out whole by a writer
        self._buf = threading.Lock()  # held only to append one line or to take the queue
        self._io = threading.Lock()  # one writer at a time: batches reach the file in order
        self._queued_bytes = 0  # since the last hand-off (the loop's thread only)
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self._urgent = False  # the planned hand-off is at the loop's next turn
        self._registered = False  # in _queued
        self._submitted = False  # a write is waiting for the writer thread: it takes all that is queued then
        self._reported = False
        self._secrets: list[bytes] = []  # redacted from every line (tokens, env and header values)

    def redact(self, *secrets: str) -> None:
        """Never write ``secrets`` (as they appear in JSON text): each becomes
        :data:`REDACTED` in every line queued from now on. Register them before the
        message that carries them is sent (the MCP servers of ``session/new``)."""
        for secret in secrets:
            if secret:
                encoded = json.dumps(secret, ensure_ascii=False)[1:-1].encode("utf-8", "replace")
                if encoded not in self._secrets:
                    self._secrets.append(encoded)

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
        self._append(line.encode("utf-8", "replace"), stream=record.get("kind") == "in")

    def wire_line(self, direction: str, message: bytes) -> None:
        """Record one wire message from its exact JSON text (not serialised again; bytes
        that are not UTF-8 are written as U+FFFD, by the writer)."""
        self._append(b'{"t":%.3f,"kind":"%s","msg":%s}' % (time.time(), direction.encode(), message),
                     stream=direction == "in")

    def wire(self, direction: str, message: dict[str, Any]) -> None:
        self.write({"kind": direction, "msg": message})

    def event(self, name: str, **data: Any) -> None:
        self.write({"kind": "event", "event": name, "data": data})

    # -- queue and hand-off (the loop's thread) ---------------------------------------------------
    def _append(self, line: bytes, stream: bool) -> None:
        if self.error is not None:
            return
        for secret in self._secrets:
            if secret in line:
                line = line.replace(secret, REDACTED)
        with self._buf:
            self._lines.append(line)
        if not self._registered:
            with _queued_lock:
                _queued.add(self)
                self._registered = True
        self._queued_bytes += len(line) + 1
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to keep free: write now
            self.flush()
            return
        if self._queued_bytes >= BATCH_BYTES:
            self._cancel_timer()
            self._hand_off(loop)
        elif not stream:
            if self._timer is None or not self._urgent:
                self._plan(loop, urgent=True)
        elif self._timer is None:
            self._plan(loop, urgent=False)

    def _plan(self, loop: asyncio.AbstractEventLoop, *, urgent: bool) -> None:
        self._cancel_timer()
        self._urgent = urgent
        self._timer = (loop.call_soon(self._hand_off, loop) if urgent
                       else loop.call_later(STREAM_DELAY, self._hand_off, loop))

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _hand_off(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        self._queued_bytes = 0
        if self._submitted:
            return
        self._submitted = True
        try:
            _writer_pool().submit(self._write_queued, loop)
        except RuntimeError:  # the interpreter is shutting down: write here
            self._submitted = False
            self.flush()

    # -- writing (any thread) ----------------------------------------------------------------------
    def flush(self) -> None:
        """Write every queued line now, in the caller's thread (a turn's end is on disk,
        whatever comes next; ``kill_now`` and interpreter exit)."""
        if self._timer is not None and _on_loop_thread():
            self._cancel_timer()
        self._queued_bytes = 0
        self._write_queued(None)

    def _write_queued(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Write what is queued now (lines queued meanwhile wait for the next call). An
        ``OSError`` turns the transcript off and is reported once: on ``loop`` when
        given (the writer thread), else here."""
        if loop is not None:
            self._submitted = False  # from here on, a line queued needs a new hand-off
        with self._io:
            with self._buf:
                batch, self._lines = self._lines, []
            if self.error is not None or not batch:
                return
            try:
                self._write_batch(batch)
            except OSError as exc:
                self.error = exc
                with self._buf:
                    self._lines = []
                if loop is None:
                    self._report()
                else:
                    try:
                        loop.call_soon_threadsafe(self._report)
                    except RuntimeError:  # the loop is closed: no one to tell
                        pass

    def _write_batch(self, batch: list[bytes]) -> None:
        data = (b"\n".join(batch) + b"\n").decode("utf-8", "replace").encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size + len(data) <= self.max_bytes:
                fh.write(data)
                return
        part = bytearray()  # rotation: a part ends with the line that crossed the limit
        for line in data.splitlines(keepends=True):
            part += line
            size += len(line)
            if size > self.max_bytes:
                with open(self.path, "ab") as fh:
                    fh.write(part)
                part.clear()
                self._rotate()
                size = 0
        if part:
            with open(self.path, "ab") as fh:
                fh.write(part)

    def _report(self) -> None:
        if self._reported or self.error is None:
            return
        self._reported = True
        if self.on_error is not None:
            self.on_error(self.error)

    def _rotate(self) -> None:
        for n in range(self.backups, 0, -1):
            src = self.path.with_name(f"{self.path.name}.{n - 1}") if n > 1 else self.path
            if src.exists():
                src.replace(self.path.with_name(f"{self.path.name}.{n}"))

    def close(self) -> None:
        """Write what is queued (no file stays open between batches). Records made after
        this are still written."""
        self.flush()


def _on_loop_thread() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def read(path: Path) -> Iterator[Record]:
    """The records of a transcript, oldest rotated part first; bad lines are skipped."""
    flush_all()
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


def history(path: Path) -> list[Record]:
    """The records of an agent's whole history up to the transcript ``path``: a restart
    starts a new file whose header names the one before (``"previous"``), so the files
    are read oldest first, following those links (a missing or looping link ends it)."""
    chain: list[Path] = []
    at: Path | None = path
    while at is not None and at not in chain:
        chain.append(at)
        before = (header(at) or {}).get("previous")
        at = Path(before) if isinstance(before, str) and Path(before).exists() else None
    return [record for part in reversed(chain) for record in read(part)]


def header(path: Path) -> dict[str, Any] | None:
    """The header record of a transcript (agent, harness id, cwd…), or None."""
    flush_all()
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
    flush_all()
    found: dict[str, tuple[float, Path]] = {}
    for path, head, mtime in headers():
        name = head.get("agent", "")
        if agent_name is not None and name != agent_name:
            continue
        if name not in found or mtime > found[name][0]:
            found[name] = (mtime, path)
    return {name: path for name, (_, path) in sorted(found.items())}


HEAD_BYTES = 256 * 1024
"""How much of a transcript file's beginning :func:`summaries` reads for its first prompt
(``initialize`` and the session setup come before it): never the whole of a big file."""
CHAIN_MAX = 20
"""At most this many files of an agent's history (restarts) are looked at for its first prompt."""
PROMPT_CHARS = 60
"""A listed first prompt is cut to this many characters (then "…")."""


@dataclass(frozen=True)
class Summary:
    """What ``%escouade resume`` lists of an agent's newest transcript: its ``name``, the
    file (``path``), ``written`` (its last write, epoch seconds) and ``first_prompt`` (the
    text of the first prompt of its history, on one line, cut to :data:`PROMPT_CHARS`; None
    when none is in the files' heads)."""

    name: str
    path: Path
    written: float
    first_prompt: str | None

    @property
    def written_text(self) -> str:
        """``written`` in local time, ``2026-12-01 14:03``."""
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(self.written))


def _header_of(path: Path) -> dict[str, Any] | None:
    """:func:`header` without writing what is queued first (safe in any thread)."""
    for part in [path, *sorted(path.parent.glob(path.name + ".*"))]:
        try:
            with open(part, encoding="utf-8", errors="replace") as fh:
                first = json.loads(fh.readline(HEAD_BYTES))
        except (OSError, ValueError):
            continue
        if isinstance(first, dict) and first.get("kind") == "header":
            return first
    return None


def _oldest_first(path: Path) -> list[Path]:
    """The rotated parts of ``path`` (``.3`` … ``.1``), then ``path``: as :func:`read`."""
    parts = [p for p in path.parent.glob(path.name + ".*") if p.suffix[1:].isdigit()]
    return [*sorted(parts, key=lambda p: -int(p.suffix[1:])), path]


def _prompt_text(prompt: Any, head: dict[str, Any]) -> str | None:
    """The user's own words of a ``session/prompt``'s blocks, on one line: its text
    blocks, without what escouade_nb put before them (the questionsInText instruction and
    a ``--system-prompt`` where no ``systemPrompt`` took it; a fork's conversation so far),
    unless nothing else is left."""
    texts = [b["text"] for b in prompt or [] if isinstance(b, dict) and b.get("type") == "text"
             and isinstance(b.get("text"), str) and b["text"].strip()]
    system = (head.get("system_prompt") or "").strip()

    def ours(text: str) -> bool:
        return (text.startswith("[escouade] ") or (bool(system) and text.strip().endswith(system))
                or text.rstrip().endswith("--- end of the earlier conversation; my next message follows. ---"))
    own = [t for t in texts if not ours(t)] or texts
    if not own:
        return None
    line = " ".join(" ".join(own).split())
    return line if len(line) <= PROMPT_CHARS else line[:PROMPT_CHARS - 1].rstrip() + "…"


def first_prompt(path: Path, *, limit: int = HEAD_BYTES) -> str | None:
    """The first prompt of the agent's history up to transcript ``path`` (its text on one
    line, cut; see :class:`Summary`), looking at most ``limit`` bytes into each file, oldest
    file first (a restart's file names the one before: ``"previous"``). Writes nothing
    queued first: safe in a thread."""
    chain: list[Path] = []
    at: Path | None = path
    while at is not None and at not in chain and len(chain) < CHAIN_MAX:
        chain.append(at)
        before = (_header_of(at) or {}).get("previous")
        at = Path(before) if isinstance(before, str) and Path(before).exists() else None
    head = _header_of(path) or {}
    for file in reversed(chain):
        for part in _oldest_first(file):
            try:
                with open(part, "rb") as fh:
                    left = limit
                    while left > 0:  # line by line: it stops at the first prompt, usually a few KB in
                        line = fh.readline(left)
                        if not line:
                            break
                        left -= len(line)
                        text = _prompt_of(line, head)
                        if text is not None:
                            return text
            except OSError:
                continue
    return None


def _prompt_of(line: bytes, head: dict[str, Any]) -> str | None:
    """The prompt text of a transcript line that is a ``session/prompt`` we sent, else None."""
    if b'"session/prompt"' not in line:
        return None
    try:
        rec = json.loads(line)
    except ValueError:
        return None  # a line cut at the limit, or a bad one
    msg = rec.get("msg") if isinstance(rec, dict) else None
    if isinstance(msg, dict) and rec.get("kind") == "out" and msg.get("method") == "session/prompt":
        return _prompt_text((msg.get("params") or {}).get("prompt"), head)
    return None


def headers(folder: Path | None = None) -> Iterator[tuple[Path, dict[str, Any], float]]:
    """(path, header, last write time) of each transcript in ``folder`` (default
    :func:`transcripts_dir`) with a readable header; reads each file's first line only and
    writes nothing queued first (safe in a thread). Nothing when the folder is missing."""
    folder = transcripts_dir() if folder is None else folder
    if not folder.is_dir():
        return
    for path in folder.glob("*.jsonl"):
        head = _header_of(path)
        if head is None:
            continue
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue
        yield path, head, mtime


def summaries(folder: Path | None = None) -> list[Summary]:
    """The newest transcript of each agent name in ``folder`` (default
    :func:`transcripts_dir`), by name, with its last write time and first prompt. Reads
    each file's first line, and the head of the newest ones up to their first prompt
    (:func:`first_prompt`, :data:`HEAD_BYTES` at most a file): bounded whatever the files'
    sizes. Writes nothing queued first: safe in a thread (``Squad.resumable_soon``)."""
    found: dict[str, tuple[float, Path]] = {}
    for path, head, mtime in headers(folder):
        name = str(head.get("agent", ""))
        if name not in found or mtime > found[name][0]:
            found[name] = (mtime, path)
    return [Summary(name, path, mtime, first_prompt(path)) for name, (mtime, path) in sorted(found.items())]


def _starts_segment(rec: Record) -> bool:
    """Whether ``rec`` starts a new agent process's stretch: a file's header (a start, a
    restart), a ``resume`` (a new kernel's process writes on in the same file), or our
    ``segment`` mark (each attach of a transcript)."""
    return rec.kind == "header" or (rec.kind == "event" and rec.event in ("resume", SEGMENT_EVENT))


def _user_messages(conversation: Conversation, words: list[dict[str, Any]], steered: bool,
                   sent: list[Any] | None = None) -> None:
    """The user's ``words`` of one prompt, as live (engine/turns.py): the prompt's message
    (``steered`` as its ``_meta`` says), then one marked steered for each steer joined to it
    before it was sent (its blocks marked :func:`~..core.prompt.steered_part`)."""
    parts: dict[int, list[dict[str, Any]]] = {0: []}
    for block in words:
        parts.setdefault(steered_part_of(block) or 0, []).append(block)
    for n, blocks in parts.items():
        conversation.add_user_message(blocks, sent=sent if n else None, steered=bool(n) or steered)


def replay(records: Iterator[Record], conversation: Conversation,
           adapt: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any]:
    """Rebuild ``conversation`` from a transcript's records: the agent's updates (through
    ``adapt`` when given: the harness's adapters, as live; None drops one), the prompts
    sent, the permission cards and how they were answered, by whom (``answer`` events;
    question cards: ``question`` events;
    the kernel's ``run_code`` cards from escouade_nb's own lines: :mod:`.kernel_calls`),
    the client's notices (``notice`` events; in segments older than :data:`RECORD`, the
    exits and Stops), exits. The records are read segment by segment (one agent process
    each, :func:`_starts_segment`): the agent's ids — JSON-RPC, tool call, message — are
    only its process's, so a new segment forgets them (``Conversation.new_session``), ends
    what the process left unfinished and shows a card it left pending cancelled
    (:data:`KERNEL_RESTARTED`), as the live view did. Replaying the same records again
    gives the same conversation. What an agent replays on ``session/load`` is matched
    against what the conversation has of that session (:class:`~.reloads.ReplaySkip`, as live):
    what it has is skipped, the rest shown, as it was live — so a history only the agent's
    replay brought is kept by the record. Returns what the records say of the session:
    ``{"session_id", "agent_capabilities", "history", ...}`` (``history``: what a reload
    of each session will replay, see :func:`expected_replay`)."""
    read = list(records)
    run = _Replay(read, conversation, adapt)
    # a chunk's time (Message.first_at / last_at) is its record's, on the monotonic clock's scale
    stamp, base, clock = [0.0], time.monotonic() - time.time(), conversation.clock
    conversation.clock = lambda: stamp[0]
    try:
        for index, rec in enumerate(read):
            stamp[0] = rec.t + base
            run.mark(rec)
            if rec.kind == "header":
                run.info.update(dict(rec.model_extra) if rec.model_extra else {})
            elif rec.kind == "in":
                run.incoming(index, rec.msg or {})
            elif rec.kind == "out":
                run.outgoing(rec.msg or {})
            elif rec.kind == "event":
                run.event(rec.event, rec.data or {})
        run.end_segment()
    finally:
        conversation.clock = clock
    run.info["history"] = run.history
    return run.info


def expected_replay(info: dict[str, Any], session_id: str | None) -> Iterator[Any]:
    """What the agent will replay when session ``session_id`` is reloaded, as the
    conversation :func:`replay` rebuilt (``info``, its answer) has it: that session's updates
    as they were shown (what a load's replay repeated is not in it twice; what it brought that
    the records lacked is), and our prompts as the agent's ``user_message_chunk``s."""
    for session, update in info.get("history") or ():
        if session in (None, session_id):
            yield update


def _sessions_of(records: list[Record]) -> set[Any]:
    """The sessions this agent had (``session`` events, answers giving a ``sessionId``): an
    update for any other one was dropped live, so it is in replay too."""
    sessions = {(r.data or {}).get("session_id") for r in records if r.kind == "event" and r.event == "session"}
    sessions |= {r.msg["result"]["sessionId"] for r in records if r.kind == "in" and isinstance(r.msg, dict)
                 and isinstance(r.msg.get("result"), dict) and "sessionId" in r.msg["result"]}
    return sessions


NoticeLevel = Literal["info", "warning", "error"]


class _Replay:
    """One run of :func:`replay`: the conversation rebuilt, what the records say of the
    session (``info``), and what the segment being read knows (its agent's ids)."""

    def __init__(self, records: list[Record], conversation: Conversation,
                 adapt: Callable[[dict[str, Any]], Any] | None) -> None:
        self.conversation = conversation
        self.adapt = adapt
        self.info: dict[str, Any] = {}
        self.kernel = kernel_calls.KernelReplay(records, _starts_segment)  # the kernel's run_code cards
        self.sessions = _sessions_of(records)
        self.history: list[tuple[Any, Any]] = []  # (session id, update) shown, and our prompts: what a reload replays
        self.skip = ReplaySkip()  # while a reload runs: what the conversation has of its session
        self.begun = self.quiet = False
        self._forget()

    def _forget(self) -> None:
        """What one segment knows, empty: its agent's ids mean nothing in the next one."""
        self.cards: dict[Any, Any] = {}  # JSON-RPC id of a permission request -> its Permission
        self.by_call: dict[tuple[str | None, str], list[Any]] = {}  # (origin, tool call id) -> its cards
        self.questions: dict[Any, Question] = {}  # a question card's number -> it
        self.reloads: set[Any] = set()  # ids of session/load or session/resume requests not answered yet
        self.prompts: dict[Any, bool] = {}  # ids of session/prompt requests not answered yet -> a Stop came since
        self.forks: set[Any] = set()  # ids of session/fork requests (a checkpoint's): their answer is no switch
        self.recorded = False  # this segment records the client's notices (RECORD): none are derived then
        self.steers: dict[Any, tuple[str, list[Any]]] = {}  # ids of steering requests -> (method, prompt)

    def mark(self, rec: Record) -> None:
        """A record that starts a segment ends the one before (marks in a row — a header,
        then ours; ours, then a resume — start one segment)."""
        if not _starts_segment(rec):
            self.quiet = False
            return
        if not self.quiet:
            if self.begun:
                self.end_segment()
            self.conversation.new_session()
            self._forget()
            self.kernel.new_segment()
        self.begun = self.quiet = True

    def end_segment(self) -> None:
        """Its process went away: cards never answered cancelled, questions too, what was
        unfinished ended."""
        conversation = self.conversation
        for perm in [p for ps in self.by_call.values() for p in ps]:
            if perm.state == "pending":
                conversation.resolve_permission(perm, "cancelled", None, KERNEL_RESTARTED)
        for question in self.questions.values():
            conversation.resolve_question(question, "cancel")  # (a no-op for one answered)
        conversation.cancel_unfinished()
        conversation.close_messages()

    def _card_made(self, perm: Any) -> Any:
        if perm.tool_call is not None:  # by who made it and id: an agent's id never names one of ours
            self.by_call.setdefault((perm.tool_call.origin, perm.tool_call.tool_call_id), []).append(perm)
        return perm

    def incoming(self, index: int, msg: dict[str, Any]) -> None:
        """A line the agent sent (record ``index``): an answer, an update, a card."""
        conversation, method, params = self.conversation, msg.get("method"), msg.get("params") or {}
        if "id" in msg and "method" not in msg and msg["id"] in self.steers:  # as live: where its answer came
            method, prompt = self.steers.pop(msg["id"])
            if steering.delivered(method, msg):
                conversation.add_user_message([b for b in prompt if isinstance(b, dict)], steered=True)
        if "id" in msg and "method" not in msg and msg["id"] in self.forks:
            self.forks.discard(msg["id"])  # a fork was made; the conversation stays in its session
            return
        if "id" in msg and "method" not in msg:
            self.reloads.discard(msg["id"])
            if not self.reloads:
                self.skip.done()
            stopped = self.prompts.pop(msg["id"], False)
            if stopped and not self.recorded and (msg.get("result") or {}).get("stopReason") == "cancelled":
                conversation.add_notice(STOPPED_BY_YOU)  # as live: the turn the user stopped (engine/turns.py)
        if method == "session/update":
            self._update(params)
        elif method == "session/request_permission" and "id" in msg and self.kernel.folded(index) \
                and params.get("sessionId") not in conversation.subagents:
            self.kernel.note_call(conversation, params.get("toolCall") or {})  # live: no card, the server's is
        elif method == "session/request_permission" and "id" in msg:
            child = conversation.subagents.get(params.get("sessionId", ""))  # a subagent's card is in its own
            perm = (child.conversation if child is not None else conversation).add_permission(
                params.get("toolCall") or {}, params.get("options") or [])
            self.cards[msg["id"]] = perm if child is not None else self._card_made(perm)
        elif isinstance(msg.get("result"), dict) and "sessionId" in msg["result"]:
            if self.info.get("session_id") not in (None, msg["result"]["sessionId"]):
                conversation.new_session()  # another session: message ids are the new session's
            self.info["session_id"] = msg["result"]["sessionId"]
        elif isinstance(msg.get("result"), dict) and "agentCapabilities" in msg["result"]:
            self.info["agent_capabilities"] = msg["result"]["agentCapabilities"]

    def _update(self, params: dict[str, Any]) -> None:
        """A ``session/update``: applied to its session (a subagent's to its own); during a
        reload, only what the conversation does not have of it (as live)."""
        session_id = params.get("sessionId")
        if self.reloads and (session_id in self.conversation.subagents or self.skip.skip(params.get("update"))):
            return  # the agent's replay of what the records hold already
        if session_id in self.conversation.subagents:  # a child session (a subagent)
            self.conversation.apply_child(params["sessionId"], params.get("update") or {})
            return
        self.history.append((session_id, params.get("update")))
        if session_id in (None, *self.sessions) or not self.sessions:
            update = params.get("update") or {}
            update = self.adapt(update) if self.adapt is not None and isinstance(update, dict) else update
            if update is not None:
                self.conversation.apply(update)

    def outgoing(self, msg: dict[str, Any]) -> None:
        """A line the client sent: a prompt, a Stop, a reload, a card's answer."""
        method = msg.get("method")
        if method in ("session/load", "session/resume") and "id" in msg:
            self.reloads.add(msg["id"])  # resume must not replay; an agent that does anyway is shown once
            self.conversation.new_session()  # as live: the replay folds afresh
            session = (msg.get("params") or {}).get("sessionId")
            self.skip = ReplaySkip.of(expected_replay({"history": self.history}, session))
            self.skip.active = True
        if method == "session/fork" and "id" in msg:
            self.forks.add(msg["id"])
        if method == "session/prompt" and "id" in msg:
            self.prompts[msg["id"]] = False
        elif method == "session/cancel" and \
                (msg.get("params") or {}).get("sessionId") not in self.conversation.subagents:
            self.prompts = dict.fromkeys(self.prompts, True)  # the user's Stop (the only session/cancel sent)
        if method in steering.METHODS and "id" in msg:
            self.steers[msg["id"]] = (method, list((msg.get("params") or {}).get("prompt") or []))
        if method == "session/prompt":  # the user's words, as live: not the context we put first
            sent = (msg.get("params") or {}).get("prompt") or []
            self.history.extend(((msg.get("params") or {}).get("sessionId"),
                                 {"sessionUpdate": "user_message_chunk", "content": block}) for block in sent)
            ours = ((msg.get("params") or {}).get("_meta") or {}).get("escouade") or {}
            _user_messages(self.conversation, [b for b in sent if isinstance(b, dict) and not is_context(b)],
                           steered=isinstance(ours, dict) and ours.get("steered") is True, sent=sent)
        elif "id" in msg and msg["id"] in self.cards and isinstance(msg.get("result"), dict):
            self._answered(self.cards[msg["id"]], msg["result"])

    def _answered(self, perm: Any, result: dict[str, Any]) -> None:
        """The client's answer to a permission request, as it settled the card."""
        outcome = result.get("outcome") or {}
        meta = (result.get("_meta") or {}).get("escouade") or {}
        if outcome.get("outcome") == "selected":
            self.conversation.resolve_permission(perm, "selected", outcome.get("optionId"), meta.get("by"),
                                                 meta.get("message"), denied=meta.get("denied") is True)
        elif meta.get("denied") is True:  # a refusal sent as cancelled (no reject option offered)
            self.conversation.resolve_permission(perm, "cancelled", None, meta.get("by"), meta.get("message"),
                                                 denied=True)
        else:
            self.conversation.resolve_permission(perm, "cancelled")

    def event(self, event: str | None, data: dict[str, Any]) -> None:
        """One of the client's own events (:mod:`escouade_nb.engine.record`)."""
        conversation = self.conversation
        if event == SEGMENT_EVENT:
            self.recorded = (data.get("record") or 0) >= RECORD
        elif event == NOTICE_EVENT and self.recorded:
            level: NoticeLevel = data["level"] if data.get("level") in ("info", "warning", "error") else "info"
            conversation.add_notice(str(data.get("text", "")), level=level, detail=str(data.get("detail") or ""))
        elif event == ANSWER_EVENT:
            _answer(conversation, self.by_call, data)
        elif event == NOT_ASKED_EVENT and isinstance(data.get("text"), str):
            call = conversation.tool_calls.get(str(data.get("call") or ""))
            if call is not None:
                call.not_asked = data["text"]
                conversation.touch(call)
        elif event == QUESTION_EVENT:
            self.questions[data.get("n")] = conversation.add_question(_question(data))
        elif event == QUESTION_ANSWER_EVENT and data.get("n") in self.questions:
            state: QuestionState = data["state"] if data.get("state") in ("accept", "decline", "cancel") else "cancel"
            answer = data.get("answer") if isinstance(data.get("answer"), dict) else None
            conversation.resolve_question(self.questions[data["n"]], state, answer)
        elif event == "exit" and not data.get("expected") and not self.recorded:
            conversation.add_notice(f"Agent exited with code {data.get('code')}", level="error",
                                    detail=data.get("stderr_tail", ""))
        elif event == UNSENT_EVENT and isinstance(data.get("prompt"), list):
            _user_messages(conversation, [b for b in data["prompt"] if isinstance(b, dict)],
                           steered=data.get("steered") is True)
        elif event == REWIND_EVENT and isinstance(data.get("turn"), int):
            conversation.mark_rewound(data["turn"])
            if data.get("session"):  # it went on in a fork: its ids are its own
                conversation.new_session()
        elif event == "session":
            self.info["session_id"] = data.get("session_id")
        elif event == BUDGET_EVENT and isinstance(data.get("call"), str):
            self._budget(data)
        elif event == kernel_calls.EVENT:
            made = self.kernel.apply(conversation, data)
            if made is not None:
                self._card_made(made)

    def _budget(self, data: dict[str, Any]) -> None:
        """A budget card made (the client's: not on the wire), the prompts it holds, or its call's end."""
        if data.get("phase") == "card":
            text = {"type": "content", "content": {"type": "text", "text": str(data.get("text") or "")}}
            options = [o for o in data.get("options") or [] if isinstance(o, dict)]
            self._card_made(self.conversation.add_permission(
                {"toolCallId": data["call"], "title": str(data.get("title") or "Budget reached"), "kind": "other",
                 "status": "pending", "content": [text]}, options, origin=BUDGET_ORIGIN))
        elif data.get("phase") == "held" and isinstance(data.get("text"), str):  # the prompts it held, named
            cards = self.by_call.get((BUDGET_ORIGIN, data["call"])) or []
            line = [{"type": "content", "content": {"type": "text", "text": data["text"]}}] if data["text"] else []
            for held in [c for c in (cards[-1].request, cards[-1].tool_call) if c is not None] if cards else []:
                held.content = [*held.content[:1], *line]
            if cards and cards[-1].tool_call is not None:
                self.conversation.touch(cards[-1].tool_call)
        elif data.get("phase") == "end" and data.get("status") in ("completed", "failed"):
            call = self.conversation.own_calls.get(data["call"])
            if call is not None and call.origin == BUDGET_ORIGIN:
                self.conversation.set_status(call, data["status"])


def _question(data: dict[str, Any]) -> Question:
    """The question card of a ``question`` event, as it was made."""
    def text(key: str) -> str | None:
        return data[key] if isinstance(data.get(key), str) else None
    mode: Literal["form", "url", "text"] = data["mode"] if data.get("mode") in ("form", "url", "text") else "form"
    return Question("", message=text("message") or "", mode=mode,
                    schema=data.get("schema") if isinstance(data.get("schema"), dict) else None, url=text("url"),
                    questions=[q for q in data.get("questions") or [] if isinstance(q, dict)],
                    tool_call_id=text("tool_call_id"), elicitation_id=text("elicitation_id"))


def _answer(conversation: Conversation, by_call: dict[tuple[str | None, str], list[Any]],
            data: dict[str, Any]) -> None:
    """An ``answer`` event: the oldest card of that origin and tool call still pending in this
    segment is settled as the live one was, with who answered (a line older than ``own``: the
    agent's card of that id first, else one of ours)."""
    call = str(data.get("call") or "")
    if "own" in data:
        origin = data["own"] if isinstance(data["own"], str) else None
        cards = by_call.get((origin, call), [])
    else:
        cards = [*by_call.get((None, call), []), *(p for (o, c), ps in by_call.items() if o and c == call for p in ps)]
    perm = next((p for p in cards if p.state == "pending"), None)
    if perm is None:
        return
    if isinstance(data.get("plan"), str):  # a plan to approve (the client knew it, from the harness's tools)
        perm.plan = data["plan"]
    outcome: PermissionState = "selected" if data.get("outcome") == "selected" else "cancelled"
    conversation.resolve_permission(perm, outcome, data.get("option_id") if outcome == "selected" else None,
                                    data.get("answered_by"), data.get("message"), denied=data.get("denied") is True)
