"""The conversation of one ACP session, as a sans-I/O fold.

``Conversation.apply(update)`` takes the ``update`` object of one ``session/update``
notification exactly as it came off the wire (a ``dict``; a pydantic model of the SDK
is accepted too) and returns the list of :class:`Change` it caused. Nothing here
awaits, spawns or draws: the ACP client feeds it, views subscribe to it.

The update vocabulary is ACP's (schema v1, ``session/update``): message, thought and
user chunks (grouped by ``messageId`` when the agent sends one), ``tool_call`` and
``tool_call_update`` (upserted by ``toolCallId``; ``content`` and ``locations``, when
given, replace the collection, as the spec says), ``plan`` (replaces the whole plan),
``available_commands_update``, ``current_mode_update``, ``config_option_update``,
``session_info_update`` and ``usage_update``, plus the SDK's unstable ``plan_update`` /
``plan_removed``, and the kinds newer than the SDK (:mod:`.acp_v1_25`): ``notice`` (a
:class:`Notice` of the agent) and ``compaction_update`` / ``compaction_summary_chunk`` (a
:class:`Compaction` boundary). Each update is validated with the SDK's own pydantic schema; an update
the schema does not know (a newer kind, an unknown content type) is kept raw as an
:class:`Unknown` item rather than dropped. Items keep the wire dicts they were built
from, so fields the SDK's models would drop are kept too.
"""

from __future__ import annotations

import copy
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from acp import schema as acp_schema

from . import acp_v1_25
from .observers import Observers, Subscription

log = logging.getLogger(__name__)

Role = Literal["user", "agent", "thought"]
NoticeLevel = Literal["info", "warning", "error"]
_NOTICE_LEVELS: dict[str, NoticeLevel] = {"info": "info", "warning": "warning", "error": "error"}
_ROLE_OF: dict[str, Role] = {
    "user_message_chunk": "user",
    "agent_message_chunk": "agent",
    "agent_thought_chunk": "thought",
}
_UNFINISHED = (None, "pending", "in_progress")
_TOOL_CALL_FIELDS = {"sessionUpdate", "toolCallId", "title", "kind", "status", "content", "locations",
                     "rawInput", "rawOutput", "_meta"}


@dataclass(eq=False)
class Item:
    """One entry of the transcript. ``key`` is unique in its conversation; ``version``
    grows by one on every change, so a view can tell what it has already drawn."""

    key: str
    version: int = 0
    rewound: bool = False
    """Part of a turn a rewind undid (:meth:`Conversation.mark_rewound`): shown, marked rewound."""

    def touch(self) -> None:
        self.version += 1


@dataclass(eq=False)
class Message(Item):
    """A user, agent or thought message: text parts in arrival order, plus any non-text
    content blocks (images, resource links…) as wire dicts."""

    role: Role = "agent"
    message_id: str | None = None
    parts: list[str] = field(default_factory=list)
    blocks: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False
    first_at: float | None = None
    """``time.monotonic()`` when its first chunk was folded (None: built otherwise, e.g. our prompt)."""
    last_at: float | None = None
    """``time.monotonic()`` when its latest chunk was folded (None as ``first_at``)."""
    steered: bool = False
    """A prompt of the user's sent while a turn ran (``agent.steer``): into that turn, or
    as the prompt that followed it (the views and the text say "steered")."""
    checkpointed: bool = False
    """A user prompt whose turn has a checkpoint of the agent's folder before it (a rewind can go back there)."""

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def duration(self) -> float | None:
        """Seconds from its first chunk to its latest ("thought for 3 s"); None until both
        times are known (a message not built from chunks)."""
        if self.first_at is None or self.last_at is None:
            return None
        return self.last_at - self.first_at


@dataclass(eq=False)
class ToolCall(Item):
    """A tool call of the agent. ``content`` holds the ACP ``ToolCallContent`` items as
    wire dicts (``{"type": "content"|"diff"|"terminal", ...}``). ``placeholder`` is true
    while the call is known only from an update or a permission request. ``cancelled``
    is set by the client when the user stops the turn while the call was unfinished."""

    tool_call_id: str = ""
    title: str | None = None
    kind: str | None = None
    status: str | None = None
    content: list[dict[str, Any]] = field(default_factory=list)
    locations: list[dict[str, Any]] = field(default_factory=list)
    raw_input: Any = None
    raw_output: Any = None
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    placeholder: bool = False
    cancelled: bool = False
    mcp: tuple[str, str] | None = None
    origin: str | None = None
    """Which part of escouade_nb made this call — ``"budget"``, ``"worktree"``, ``"sign-in"``,
    ``"write"``, ``"kernel"`` — else None: the agent's. Set only by the client's own
    constructors (:meth:`Conversation.apply_own`, :meth:`Conversation.add_permission` with
    ``origin``), never read from the wire: an agent's call whose id, title or kind looks like
    ours is still the agent's. Our calls live in :attr:`Conversation.own_calls`, a namespace
    of their own that no ``tool_call`` / ``tool_call_update`` of the agent reaches."""
    not_asked: str | None = None
    """The client's note on a call the agent ran without asking, when earlier in this
    session an option was chosen that lets it (the option's name, who chose it, on which
    card): set by the client, not the agent; None otherwise."""
    """``(server, tool)`` when the client knows this call as a tool of an MCP server it
    gave the agent (whatever name the agent uses): set by the client, not the agent."""
    asked: ToolCall | None = None
    """What the latest permission card of this call asked (its frozen
    :attr:`Permission.request`): the title, kind and input a view and the text show for the
    call, whatever the agent updated since. Set by the client, not the agent."""
    kernel_run: dict[str, Any] | None = None
    """How a call of the kernel's ``run_code`` ended, when the kernel's server served it:
    ``{"status": "ok"|"error"|"refused"|"cancelled"|"busy", "chars": int, "by": str|None}``
    (see :mod:`escouade_nb.wire.kernel_calls`); set by the client, not the agent."""
    kernel_task: dict[str, Any] | None = None
    """When the kernel's ``run_code`` of this call was left running as a task (issue 36): ``{"task_id",
    "state": "running"|"done"|"interrupted"|"cancelled"|"ended", "by": who stopped it or None, "output": the
    last lines it printed (the whole result's end once it ended), "cut": lines before those not shown}``; set
    by the client (:mod:`escouade_nb.engine.kernel_record`), not the agent; the Interrupt a view shows finds
    the kernel's own task through the record, by this call."""
    kernel_notebook: str | None = None
    """The ``path`` of this call's diff that is the notebook the kernel runs (its cards
    say so), else None: set by the client, not the agent."""
    terminals: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The client's view of terminals embedded in ``content`` (``{"type": "terminal"}``),
    by terminal id: ``output``, ``truncated``, ``exit_code``, ``signal``, ``running``."""
    subagents: list[Subagent] = field(default_factory=list)
    """The child sessions (ACP ``subagent_update``) this call started, each with its own
    nested :class:`Conversation`, in announcement order."""

    @property
    def shown_status(self) -> str:
        """The status a view shows: the agent's, or ``cancelled`` for an unfinished
        call of a stopped turn."""
        if self.cancelled and self.status in _UNFINISHED:
            return "cancelled"
        return self.status or "pending"

    @property
    def diffs(self) -> list[dict[str, Any]]:
        return [c for c in self.content if c.get("type") == "diff"]


@dataclass(eq=False)
class Plan(Item):
    """The agent's plan: entries ``{content, priority, status}``. A ``plan`` update
    replaces all entries. ``plan_id``/``markdown`` come from the unstable
    ``plan_update`` variant; ``removed`` from ``plan_removed``."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    plan_id: str | None = None
    markdown: str | None = None
    removed: bool = False


PermissionState = Literal["pending", "selected", "cancelled"]


def frozen_request(call: ToolCall, **fields: Any) -> ToolCall:
    """A detached deep copy of what ``call`` asks — tool call id, title, kind, ``rawInput``,
    content, locations, ``_meta``, the client's notes (``mcp``, ``kernel_notebook``) —
    with ``fields`` replacing some: the frozen :attr:`Permission.request`. It is in no
    conversation's ``tool_calls``, so no update of the agent reaches it."""
    snap = ToolCall(call.key, tool_call_id=call.tool_call_id, title=call.title, kind=call.kind,
                    status=call.status, content=copy.deepcopy(call.content),
                    locations=copy.deepcopy(call.locations), raw_input=copy.deepcopy(call.raw_input),
                    meta=copy.deepcopy(call.meta), extra=copy.deepcopy(call.extra), placeholder=call.placeholder,
                    mcp=call.mcp, kernel_notebook=call.kernel_notebook, origin=call.origin)
    for name, value in fields.items():
        setattr(snap, name, value)
    return snap


@dataclass(eq=False)
class Permission(Item):
    """A ``session/request_permission`` of the agent. ``options`` are the agent's own
    ``{optionId, name, kind}``; ``state`` moves once from ``pending`` to ``selected``
    (with ``option_id``) or ``cancelled``; ``answered_by`` says who answered
    (``"you"``, a rule plugin's name, …). ``deciding`` is true while permission
    policies (rule plugins, the mode) may still settle it: the card is shown, quietly;
    the user is called when it turns false with the card still pending. ``plan`` holds
    the plan's markdown when the request is a plan to approve (ExitPlanMode).
    ``denied``: the answer was a refusal (a rule plugin's, a policy's: ``PermissionCard.deny``),
    sent as the agent's ``reject_once`` option or, when it offered none, as ``cancelled``.

    ``tool_call`` is the live call (the agent's later updates change it: its status, its
    output); ``request`` is what was asked, frozen when the card was made — the call's
    title, kind, ``rawInput``, content and locations as they stood then, as a detached
    :class:`ToolCall` no update reaches. Cards, rule plugins and the mode decide on, and
    views draw, ``request``: nothing the agent sends after asking changes what the user
    is asked to approve.

    ``note``: why the policies left it to the user when that is worth saying (a request
    too large for rule plugins to judge whole), shown on the card while it waits."""

    tool_call: ToolCall | None = None
    request: ToolCall | None = None
    options: list[dict[str, Any]] = field(default_factory=list)
    deciding: bool = False
    plan: str | None = None
    state: PermissionState = "pending"
    option_id: str | None = None
    answered_by: str | None = None
    message: str | None = None
    denied: bool = False
    note: str | None = None

    @property
    def chosen(self) -> dict[str, Any] | None:
        return next((o for o in self.options if o.get("optionId") == self.option_id), None)


QuestionState = Literal["pending", "accept", "decline", "cancel"]


@dataclass(eq=False)
class Question(Item):
    """A question of the agent to the user. ``mode``: ``form`` (ACP
    ``elicitation/create`` with a JSON ``schema`` of the fields), ``url`` (the user
    opens ``url`` and says when done), or ``text`` (questions an agent without a
    question tool wrote in an ``<escouade_question>`` block; ``questions`` holds them).
    ``state`` moves once from ``pending`` to ``accept``/``decline``/``cancel``; ``answer``
    is the content sent back."""

    message: str = ""
    mode: Literal["form", "url", "text"] = "form"
    schema: dict[str, Any] | None = None
    url: str | None = None
    questions: list[dict[str, Any]] = field(default_factory=list)
    tool_call_id: str | None = None
    elicitation_id: str | None = None
    state: QuestionState = "pending"
    answer: dict[str, Any] | None = None


STOPPED_BY_YOU = "Stopped by you"
"""The notice (level info) that ends a turn the user stopped (it ended ``cancelled``)."""


@dataclass(eq=False)
class Notice(Item):
    """Something the client says in the conversation (agent exited, turn failed…), or,
    with ``origin="agent"``, an ACP ``notice`` update of the agent (``text`` its title,
    ``detail`` its description, ``severity`` as it came; ``level`` is it when one of the
    three, else ``info``)."""

    level: NoticeLevel = "info"
    text: str = ""
    detail: str = ""
    origin: Literal["client", "agent"] = "client"
    severity: str | None = None


@dataclass(eq=False)
class Compaction(Item):
    """The agent summarised earlier context (ACP ``compaction_update`` /
    ``compaction_summary_chunk``, upserted by ``compaction_id``): a boundary in the
    conversation. ``status``: ``in_progress``, ``completed``, ``failed``, ``cancelled``
    or another string; ``summary`` the summary's content blocks (wire dicts), ``error``
    why it failed. The items before it stay: the agent's context no longer has them
    verbatim."""

    compaction_id: str = ""
    status: str = "in_progress"
    summary: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def summary_text(self) -> str:
        return acp_v1_25.blocks_text(self.summary)


@dataclass(eq=False)
class Subagent(Item):
    """A child session of the agent (ACP ``subagent_update``, sent on the parent session):
    ``session_id`` the child's, ``title``/``description`` as the agent patched them,
    ``state`` (``running``, ``idle``, ``requires_action``, ``unknown``; None before any)
    with ``stop_reason`` when idle, ``can_cancel`` (``capabilities.cancel``: the client
    may send ``session/cancel`` for it). ``conversation`` folds the child's own updates.
    ``tool_call``: the parent's call it runs under (its ``subagents`` list it), else None
    and the subagent is an item of the parent conversation itself."""

    session_id: str = ""
    title: str | None = None
    description: str | None = None
    state: str | None = None
    stop_reason: str | None = None
    can_cancel: bool = False
    cancelled: bool = False
    conversation: Conversation = field(default_factory=lambda: Conversation())
    tool_call: ToolCall | None = None

    @property
    def name(self) -> str:
        """What cards and rule plugins call it: its title, else its session id."""
        return self.title or self.session_id

    @property
    def running(self) -> bool:
        return self.state in ("running", "requires_action") and not self.cancelled


@dataclass(eq=False)
class Unknown(Item):
    """An update the SDK's schema does not know, kept as it came."""

    raw: dict[str, Any] = field(default_factory=dict)
    reason: str = ""


@dataclass(frozen=True)
class Change:
    """``kind`` is ``added`` (a new item), ``updated`` (an item changed) or ``state``
    (session state ``name`` changed: mode, config_options, commands, info, usage, agent_state)."""

    kind: Literal["added", "updated", "state"]
    item: Item | None = None
    name: str | None = None


def _wire(update: dict[str, Any] | BaseModel) -> dict[str, Any]:
    if isinstance(update, BaseModel):
        return update.model_dump(mode="json", by_alias=True, exclude_none=True)
    return update


def _validate(update: dict[str, Any]) -> str | None:
    """Validate with the SDK's schema; return the error text, or None when valid. The
    commonest update — a text chunk of known kind, with nothing else but a string
    ``messageId`` — is checked by hand: it is most of a streamed reply's traffic."""
    if (update.get("sessionUpdate") in _ROLE_OF and len(update) <= 3
            and isinstance(update.get("messageId", ""), str)):
        content = update.get("content")
        if (isinstance(content, dict) and content.get("type") == "text" and len(content) == 2
                and isinstance(content.get("text"), str)):
            return None
    kind = update.get("sessionUpdate")
    if kind in acp_v1_25.UPDATES:  # newer than the SDK's schema: our own models
        error = acp_v1_25.validate_update(update)
        return None if error is None else f"a {kind} update this client cannot read ({error})"
    try:
        acp_schema.SessionNotification.model_validate({"sessionId": "-", "update": update})
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "union_tag_invalid":  # said readably, not as pydantic's list of tags
            tag = (first.get("ctx") or {}).get("tag")
            if len(first["loc"]) <= 1:
                return f"an update of kind {tag!r} that this client does not know"
            where = ".".join(str(p) for p in first["loc"][1:])
            return f"{where}: a type this client does not know ({tag!r})"
        where = ".".join(str(p) for p in first["loc"][1:])
        return f"{where}: {first['msg']}" if where else first["msg"]
    return None


class Conversation:
    """The folded state of one session: ``items`` in transcript order, the tool calls by
    id, and the session state (``modes``, ``current_mode_id``, ``config_options``,
    ``commands``, ``title``, ``updated_at``, ``usage``, ``agent_state``: the ``state``
    of the agent's latest ACP v2 ``state_update``, as sent).

    Subscribers (``subscribe(fn)``) are called synchronously with each batch of
    changes. A subscriber that raises is logged and does not stop the fold.
    """

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.tool_calls: dict[str, ToolCall] = {}  # the agent's calls of the current session, by id (see new_session)
        self.own_calls: dict[str, ToolCall] = {}  # escouade_nb's own calls, by id: a namespace the agent never reaches
        self.plan: Plan | None = None
        self.modes: dict[str, Any] | None = None
        self.current_mode_id: str | None = None
        self.config_options: list[dict[str, Any]] = []
        self.commands: list[dict[str, Any]] = []
        self.title: str | None = None
        self.updated_at: str | None = None
        self.usage: dict[str, Any] | None = None
        self.agent_state: str | None = None  # the latest ACP v2 state_update's ``state``, as sent
        self.session_meta: dict[str, Any] = {}  # session_info_update's _meta, merged per key (goose's activeRunId)
        self._messages: dict[tuple[str, str], Message] = {}
        self._growth: Change | None = None  # the latest chunk's Change("updated", message) (_chunk)
        self._echo: tuple[Message, str, list[dict[str, Any]]] | None = None  # the prompt an agent may echo back
        self.compactions: dict[str, Compaction] = {}
        self.subagents: dict[str, Subagent] = {}  # child session id -> its subagent (ACP subagent_update)
        self._ids = itertools.count(1)
        self.subscribers: Observers[[list[Change]]] = Observers("conversation")
        # when a chunk is folded (Message.first_at / last_at): the monotonic clock; a replay
        # of a transcript sets the record's own time instead (see wire/transcript.replay)
        self.clock: Callable[[], float] = time.monotonic

    # -- subscription -------------------------------------------------------------
    def subscribe(self, fn: Callable[[list[Change]], None], *, chunks: bool = True) -> Subscription:
        """Call ``fn(changes)`` after every change; returns the :class:`Subscription`
        token (call it, or ``.close()`` it, to stop). A subscriber that raises is logged
        and does not stop the fold (a view's bug must not). ``chunks=False``: not called
        for one more chunk of a message already in the conversation (``[Change("updated",
        message)]`` from the fold of a ``*_message_chunk``: most of a streamed reply's
        updates), for a subscriber that never looks at a message's text; it is called for
        everything else (a message added or closed, a card, a tool call, the state)."""
        return self.subscribers.subscribe(fn, hot=chunks)

    def notify_state(self, name: str) -> list[Change]:
        """Tell subscribers that session state ``name`` changed outside the fold (e.g.
        ``"models"``, kept by the engine)."""
        return self._emit([Change("state", name=name)])

    def _emit(self, changes: list[Change]) -> list[Change]:
        if changes:
            self.subscribers.emit(changes)
        return changes

    def _new_key(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    def _append(self, item: Item, changes: list[Change]) -> None:
        last = self.items[-1] if self.items else None
        if isinstance(last, Message) and not last.closed and not isinstance(item, Message):
            last.closed = True
            last.touch()
            changes.append(Change("updated", last))
        self.items.append(item)
        changes.append(Change("added", item))

    # -- the fold -------------------------------------------------------------------
    def apply(self, update: dict[str, Any] | BaseModel) -> list[Change]:
        """Fold one ``session/update`` ``update`` object; returns the changes."""
        raw = update if type(update) is dict else _wire(update)
        kind = raw.get("sessionUpdate") if isinstance(raw, dict) else None
        error = _validate(raw) if isinstance(raw, dict) else "not an object"
        changes: list[Change] = []
        if error is not None or kind is None:
            item = Unknown(self._new_key("unknown"), raw=raw if isinstance(raw, dict) else {"value": raw},
                           reason=error or "no sessionUpdate")
            self._append(item, changes)
            return self._emit(changes)
        if kind in _ROLE_OF:
            if self._chunk(_ROLE_OF[kind], raw, changes):  # a message grew: only those who follow chunks
                self.subscribers.emit_hot(changes)
                return changes
        elif kind in ("tool_call", "tool_call_update"):
            self._upsert_tool_call(raw, changes, announced=kind == "tool_call")
        elif kind == "plan":
            self._plan(raw.get("entries", []), None, None, changes)
        elif kind == "plan_update":
            plan = raw.get("plan") or {}
            # a markdown plan carries its text in ``content`` (schema ``PlanMarkdown``)
            markdown = plan.get("content") if plan.get("type") == "markdown" else plan.get("markdown")
            self._plan(plan.get("entries", plan.get("items", [])), plan.get("planId"), markdown, changes)
        elif kind == "plan_removed":
            if self.plan is not None and not self.plan.removed:
                self.plan.removed = True
                self.plan.touch()
                changes.append(Change("updated", self.plan))
        elif kind == "available_commands_update":
            self.commands = list(raw.get("availableCommands", []))
            changes.append(Change("state", name="commands"))
        elif kind == "current_mode_update":
            self.current_mode_id = raw.get("currentModeId")
            if self.modes is not None:
                self.modes["currentModeId"] = self.current_mode_id
            changes.append(Change("state", name="mode"))
        elif kind == "config_option_update":
            self.config_options = list(raw.get("configOptions", []))
            changes.append(Change("state", name="config_options"))
        elif kind == "session_info_update":
            if "title" in raw:
                self.title = raw["title"]
            if "updatedAt" in raw:
                self.updated_at = raw["updatedAt"]
            for name, value in (raw.get("_meta") or {}).items() if isinstance(raw.get("_meta"), dict) else ():
                merged = self.session_meta.get(name)
                self.session_meta[name] = {**merged, **value} if isinstance(merged, dict) and isinstance(
                    value, dict) else value
            changes.append(Change("state", name="info"))
        elif kind == "usage_update":
            self.usage = {k: v for k, v in raw.items() if k != "sessionUpdate"}
            changes.append(Change("state", name="usage"))
        elif kind == "notice":
            severity = str(raw.get("severity"))
            level = _NOTICE_LEVELS.get(severity, "info")
            self._append(Notice(self._new_key("notice"), level=level, text=raw.get("title", ""),
                                detail=raw.get("description") or "", origin="agent", severity=severity), changes)
        elif kind in ("compaction_update", "compaction_summary_chunk"):
            self._compaction(raw, changes)
        elif kind == "subagent_update":
            self._subagent(raw, changes)
        elif kind == "state_update":  # ACP v2's word of the agent on its work: data (core/activity.py)
            self.agent_state = raw["state"]
            changes.append(Change("state", name="agent_state"))
        else:  # a kind the SDK validates but we do not fold yet: keep it visible
            self._append(Unknown(self._new_key("unknown"), raw=raw, reason="not shown by this client"), changes)
        return self._emit(changes)

    def _chunk(self, role: Role, raw: dict[str, Any], changes: list[Change]) -> bool:
        """Fold one chunk; True when it only grew a message already there (``changes`` is
        then that message's one ``updated``)."""
        content = raw.get("content") or {}
        if content.get("type") == "text" and not content.get("text"):
            return False  # an empty chunk says nothing: it must not make an empty "agent:" or "thinks…" item
        if role == "user" and self._echoed(content):
            return False  # the agent echoes the prompt we sent (mistral-vibe): it is shown once, as sent
        message_id = raw.get("messageId")
        msg: Message | None = None
        if message_id is not None:
            msg = self._messages.get((role, message_id))
        else:
            last = self.items[-1] if self.items else None
            if isinstance(last, Message) and last.role == role and not last.closed:
                msg = last
        grown = msg is not None
        if msg is None:
            msg = Message(self._new_key(role), role=role, message_id=message_id)
            if message_id is not None:
                self._messages[(role, message_id)] = msg
            self._append(msg, changes)
        else:
            growth = self._growth  # one frozen Change per message growing, not one per chunk
            if growth is None or growth.item is not msg:
                growth = self._growth = Change("updated", msg)
            changes.append(growth)
        if content.get("type") == "text":
            msg.parts.append(content.get("text", ""))
        else:
            msg.blocks.append(content)
        msg.last_at = now = self.clock()
        if msg.first_at is None:
            msg.first_at = now
        msg.touch()
        return grown

    def _upsert_tool_call(self, raw: dict[str, Any], changes: list[Change], announced: bool,
                          origin: str | None = None) -> ToolCall:
        tcid = str(raw.get("toolCallId", ""))
        calls = self.tool_calls if origin is None else self.own_calls  # ours and the agent's never meet
        call = calls.get(tcid)
        if call is not None and call.origin != origin:  # one of ours, of another part: a call of its own
            call = None
        if call is None:
            call = ToolCall(self._new_key("tool"), tool_call_id=tcid, placeholder=not announced, origin=origin)
            calls[tcid] = call
            self._append(call, changes)
        else:
            if announced:
                call.placeholder = False
            changes.append(Change("updated", call))
        for wire, attr in (("title", "title"), ("kind", "kind"), ("status", "status"),
                           ("rawInput", "raw_input"), ("rawOutput", "raw_output"), ("_meta", "meta")):
            if wire in raw:
                setattr(call, attr, raw[wire])
        for wire, value in raw.items():  # fields this client does not model (unstable ``name``…)
            if wire not in _TOOL_CALL_FIELDS:
                call.extra[wire] = value
        if "content" in raw:
            call.content = list(raw["content"] or [])
        if "locations" in raw:
            call.locations = list(raw["locations"] or [])
        call.touch()
        return call

    def _compaction(self, raw: dict[str, Any], changes: list[Change]) -> None:
        cid = raw["compactionId"]
        item = self.compactions.get(cid)
        if item is None:  # the first update fixes its place in the timeline
            item = self.compactions[cid] = Compaction(self._new_key("compaction"), compaction_id=cid)
            self._append(item, changes)
        else:
            changes.append(Change("updated", item))
        if raw["sessionUpdate"] == "compaction_summary_chunk":
            item.summary.append(raw["content"])
        else:
            item.status = raw["status"]
            if "summary" in raw:  # omitted = unchanged, null or [] = cleared
                item.summary = list(raw["summary"] or [])
            if "error" in raw:
                item.error = raw["error"]
        item.touch()

    def _subagent(self, raw: dict[str, Any], changes: list[Change]) -> None:
        """Announce or patch a child session. The first update places it under the
        parent's tool call that links it (a ``{"type": "session", "sessionId"}`` content
        item: not confirmed in the schemas read) or else the latest unfinished one (the
        agent's Task tool runs while its subagent works); without either it is an item."""
        sid = raw["sessionId"]
        sub = self.subagents.get(sid)
        if sub is None:
            sub = self.subagents[sid] = Subagent(self._new_key("subagent"), session_id=sid)
            child = sub

            def child_changed(_changes: list[Change]) -> None:
                self._child_changed(child)

            sub.conversation.subscribe(child_changed)
            call = next((c for c in reversed(list(self.tool_calls.values()))
                         if any(x.get("type") == "session" and x.get("sessionId") == sid for x in c.content)), None)
            if call is None:
                call = next((c for c in reversed(list(self.tool_calls.values()))
                             if c.status in _UNFINISHED and not c.cancelled), None)
            if call is not None:
                sub.tool_call = call
                call.subagents.append(sub)
                call.touch()
                changes.append(Change("updated", call))
            else:
                self._append(sub, changes)
        else:
            changes.append(Change("updated", sub.tool_call or sub))
        for wire, attr in (("title", "title"), ("description", "description")):
            if wire in raw:
                setattr(sub, attr, raw[wire])
        if "capabilities" in raw:
            sub.can_cancel = isinstance((raw["capabilities"] or {}).get("cancel"), dict)
        if "state" in raw:
            state = raw["state"] or {}
            sub.state = state.get("state")
            sub.stop_reason = state.get("stopReason") if sub.state == "idle" else None
        sub.touch()
        if sub.tool_call is not None:
            sub.tool_call.touch()

    def _child_changed(self, sub: Subagent) -> None:
        """A child's conversation changed: the parent's item that draws it did too."""
        sub.touch()
        holder = sub.tool_call or sub
        if holder is not sub:
            holder.touch()
        self._emit([Change("updated", holder)])

    def apply_child(self, session_id: str, update: dict[str, Any] | BaseModel) -> list[Change] | None:
        """Fold a ``session/update`` of child session ``session_id`` into its subagent's
        conversation; None when no ``subagent_update`` announced that child."""
        sub = self.subagents.get(session_id)
        return None if sub is None else sub.conversation.apply(update)

    def _plan(self, entries: list[dict[str, Any]], plan_id: str | None, markdown: str | None,
              changes: list[Change]) -> None:
        if self.plan is None or self.plan.removed:
            self.plan = Plan(self._new_key("plan"))
            self._append(self.plan, changes)
        else:
            changes.append(Change("updated", self.plan))
        self.plan.entries = list(entries)
        self.plan.plan_id = plan_id
        self.plan.markdown = markdown
        self.plan.touch()

    # -- what the client adds ---------------------------------------------------------
    def new_session(self) -> None:
        """A new agent process or ACP session starts in this conversation (restart,
        resume; a transcript's next segment): its ids — message, tool call, compaction —
        are only unique within one session of one process (the shipped fake restarts them
        per process, real agents may too), so the old ones no longer name any item here:
        a new ``call-1`` is a new tool call, never an update of the old one. The items
        stay, as they were."""
        self._messages.clear()
        self._echo = None
        self.compactions.clear()  # compaction ids too
        self.tool_calls = {}  # the earlier calls stay in ``items`` (and their cards keep them)
        self.own_calls = {}  # ours too (their makers hold them; a transcript's next segment numbers them anew)
        self.close_messages()

    def add_user_message(self, blocks: Iterable[dict[str, Any]],
                         sent: Iterable[dict[str, Any]] | None = None, *, steered: bool = False) -> Message:
        """Append the user's prompt (ACP content blocks as wire dicts). ``sent``: the
        blocks that went on the wire, when more than ``blocks`` (a preamble): an agent that
        echoes them back as ``user_message_chunk`` (mistral-vibe does, during the turn) is
        folded into this message, however it chunks the text, until something else comes.
        ``steered``: sent while a turn ran (:attr:`Message.steered`)."""
        changes: list[Change] = []
        msg = Message(self._new_key("user"), role="user", closed=True, steered=steered)
        blocks = list(blocks)
        for block in blocks:
            if block.get("type") == "text":
                msg.parts.append(block.get("text", ""))
            else:
                msg.blocks.append(block)
        sent = blocks if sent is None else list(sent)
        self._echo = (msg, "".join(b.get("text", "") for b in sent if b.get("type") == "text"),
                      [b for b in sent if b.get("type") != "text"])
        self._append(msg, changes)
        self._emit(changes)
        return msg

    def _echoed(self, content: dict[str, Any]) -> bool:
        """Whether a ``user_message_chunk``'s ``content`` is the agent echoing the last
        prompt (consumed from what is left of it); anything else ends the echo."""
        if self._echo is None:
            return False
        msg, text, blocks = self._echo
        if content.get("type") == "text":
            wanted = str(content.get("text", "")).strip()
            at = text.find(wanted) if wanted else 0
            if at >= 0:
                self._echo = (msg, text[at + len(wanted):], blocks)
                return True
        elif content in blocks:
            blocks.remove(content)
            return True
        self._echo = None
        return False

    def add_permission(self, tool_call: dict[str, Any], options: list[dict[str, Any]],
                       request: ToolCall | None = None, origin: str | None = None) -> Permission:
        """Append a pending permission card for ``tool_call`` (a ``ToolCallUpdate`` wire
        dict; an unknown ``toolCallId`` creates a placeholder tool call, and fields it
        carries update the call). ``request``: what the card asks, when the client made
        it (a kernel tool's card shows the arguments its server received); else the call
        as it stands now, frozen (:func:`frozen_request`). ``origin``: the part of
        escouade_nb whose card this is (:attr:`ToolCall.origin`; its call is in
        :attr:`own_calls`); None (an agent's request) whatever its id says."""
        changes: list[Change] = []
        call = self._upsert_tool_call(tool_call, changes, announced=False, origin=origin)
        perm = Permission(self._new_key("permission"), tool_call=call, options=list(options),
                          request=request if request is not None else frozen_request(call))
        call.asked = perm.request
        self._append(perm, changes)
        self._emit(changes)
        return perm

    def apply_own(self, origin: str, update: dict[str, Any]) -> ToolCall:
        """A ``tool_call`` or ``tool_call_update`` (wire shape) of one of escouade_nb's own
        calls, made by the part ``origin`` (:attr:`ToolCall.origin`): folded into
        :attr:`own_calls`, never into the agent's :attr:`tool_calls`. Returns the call."""
        changes: list[Change] = []
        call = self._upsert_tool_call(update, changes, announced=update.get("sessionUpdate") == "tool_call",
                                      origin=origin)
        self._emit(changes)
        return call

    def set_status(self, call: ToolCall, status: str) -> None:
        """Set the status of a call the client holds (one of its own: a budget card's, a
        worktree command's), whatever namespace it is in now."""
        call.status = status
        self.touch(call)

    def set_deciding(self, perm: Permission, deciding: bool) -> None:
        if perm.deciding != deciding:
            perm.deciding = deciding
            perm.touch()
            self._emit([Change("updated", perm)])

    def resolve_permission(self, perm: Permission, state: PermissionState, option_id: str | None = None,
                           answered_by: str | None = None, message: str | None = None, *,
                           denied: bool = False) -> bool:
        """Settle a pending permission once; returns False if it was already settled.
        ``denied``: the answer is a refusal (see :attr:`Permission.denied`)."""
        if perm.state != "pending":
            return False
        perm.state = state
        perm.deciding = False
        perm.option_id = option_id
        perm.answered_by = answered_by
        perm.message = message
        perm.denied = denied
        perm.touch()
        self._emit([Change("updated", perm)])
        return True

    def add_question(self, question: Question) -> Question:
        """Append a question card (its key is assigned here)."""
        changes: list[Change] = []
        question.key = self._new_key("question")
        self._append(question, changes)
        self._emit(changes)
        return question

    def resolve_question(self, question: Question, state: QuestionState,
                         answer: dict[str, Any] | None = None) -> bool:
        """Settle a pending question once; returns False if it was already settled."""
        if question.state != "pending":
            return False
        question.state = state
        question.answer = answer
        question.touch()
        self._emit([Change("updated", question)])
        return True

    def set_current_mode(self, mode_id: str | None) -> None:
        """The client's own view of the agent's mode (optimistic, or a rollback)."""
        self.current_mode_id = mode_id
        if self.modes is not None:
            self.modes["currentModeId"] = mode_id
        self._emit([Change("state", name="mode")])

    def set_config_value(self, config_id: str, value: Any) -> Any:
        """Set one config option's ``currentValue`` (optimistic, or a rollback);
        returns the previous value. ``KeyError`` for an unknown option."""
        for option in self.config_options:
            if option.get("id") == config_id:
                previous = option.get("currentValue")
                option["currentValue"] = value
                self._emit([Change("state", name="config_options")])
                return previous
        raise KeyError(config_id)

    def add_notice(self, text: str, level: NoticeLevel = "info", detail: str = "") -> Notice:
        changes: list[Change] = []
        notice = Notice(self._new_key("notice"), level=level, text=text, detail=detail)
        self._append(notice, changes)
        self._emit(changes)
        return notice

    def set_session_state(self, modes: dict[str, Any] | None = None,
                          config_options: list[dict[str, Any]] | None = None) -> None:
        """Take the ``modes`` / ``configOptions`` of a ``session/new`` (or load) answer."""
        changes: list[Change] = []
        if modes is not None:
            self.modes = dict(modes)
            self.current_mode_id = modes.get("currentModeId")
            changes.append(Change("state", name="mode"))
        if config_options is not None:
            self.config_options = list(config_options)
            changes.append(Change("state", name="config_options"))
        self._emit(changes)

    def cancel_unfinished(self) -> None:
        """Mark every unfinished tool call as cancelled (the user stopped the turn). A
        later status from the agent still shows."""
        changes: list[Change] = []
        for sub in self.subagents.values():  # cancelling the parent cancels its children
            sub.conversation.cancel_unfinished()
            if sub.state not in ("idle",) and not sub.cancelled:
                sub.cancelled = True
                sub.touch()
        for call in [i for i in self.items if isinstance(i, ToolCall)]:  # an earlier session's too
            if call.status in _UNFINISHED and not call.cancelled:
                call.cancelled = True
                call.touch()
                changes.append(Change("updated", call))
        self._emit(changes)

    def touch(self, item: Item) -> None:
        """Say that ``item`` changed outside the fold (e.g. its terminal's output grew)."""
        item.touch()
        self._emit([Change("updated", item)])

    def add_tool_content(self, call: ToolCall, content: dict[str, Any]) -> None:
        """Append a content item the client knows of (e.g. the diff of a write it served)."""
        call.content = [*call.content, content]
        self.touch(call)

    def settle_rejected(self) -> None:
        """A tool call whose card was rejected and that the agent never settled is shown
        ``failed`` (some agents, e.g. Gemini CLI, leave it pending forever)."""
        changes: list[Change] = []
        for item in self.items:
            if isinstance(item, Permission) and item.state == "selected" and \
                    (item.chosen or {}).get("kind", "").startswith("reject"):
                call = item.tool_call
                if call is not None and call.status in _UNFINISHED:
                    call.status = "failed"
                    call.touch()
                    changes.append(Change("updated", call))
        self._emit(changes)

    def mark_rewound(self, turn: int) -> int:
        """Mark rewound every item from the ``turn``-th user prompt (1-based) on: the turns a
        rewind undid stay shown. Returns how many prompts were newly marked (0 for a turn the
        conversation does not have)."""
        users = [i for i in self.items if isinstance(i, Message) and i.role == "user"]
        if not 0 < turn <= len(users):
            return 0
        start = self.items.index(users[turn - 1])
        changes: list[Change] = []
        marked = 0
        for item in self.items[start:]:
            if not item.rewound:
                item.rewound = True
                marked += isinstance(item, Message) and item.role == "user"
                item.touch()
                changes.append(Change("updated", item))
        self._emit(changes)
        return marked

    def close_messages(self) -> None:
        """Freeze every open message (the turn ended)."""
        changes: list[Change] = []
        for sub in self.subagents.values():
            sub.conversation.close_messages()
        for item in self.items:
            if isinstance(item, Message) and not item.closed:
                item.closed = True
                item.touch()
                changes.append(Change("updated", item))
        self._emit(changes)
