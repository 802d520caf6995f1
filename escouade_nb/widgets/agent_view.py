"""The live view of one agent (header, conversation, cards pinned by the prompt box) and
of one turn: one widget model each (:class:`~.front.FrontView`), drawn by
``widgets/escouade.js``.

The module's registry holds no view alive: ``_views`` maps an agent (weakly) to a weak
set of its open views (a view leaves it when closed); the tasks clicks start belong to
:data:`.views.clicks`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import weakref
from collections.abc import Callable
from typing import Any


from ..core.conversation import Item, Message, Permission, Question, ToolCall
from ..core.render_text import render_items, safe_render_item
from ..core.status import BUSY, CAN_RESTART, CAN_SEND, CONTROLS_OFF, ENDED, AgentStatus
from ..engine import Agent, AuthRequired, Turn, protections
from .feed import UNANSWERED, Feed, form_values, item_html, tool_status
from .front import HIDE_ORPHAN, FrontView, static_page
from .render import esc, unified_diff_html
from .views import clicks, current_run, shown_in_cell

log = logging.getLogger(__name__)
_serials = itertools.count()
CLOSE_AFTER = 1.5
"""Seconds between a turn's end (its cell's output made static) and its widget's close."""

STATUS_TEXT = {s.value: s.text for s in AgentStatus}
"""The words shown for each status (from :attr:`AgentStatus.text`)."""
STATUS_TONE = {AgentStatus.WAITING: "waiting", AgentStatus.EXITED: "failed", AgentStatus.FAILED: "failed",
               AgentStatus.WORKING: "in_progress", AgentStatus.STARTING: "pending", AgentStatus.SIGN_IN: "waiting",
               AgentStatus.CLOSED: "cancelled", AgentStatus.RESUMABLE: "pending",
               AgentStatus.HARNESS_MISSING: "failed"}
"""The colour class (``esc-st-TONE``) of each status."""


def status_text(status: str) -> str:
    """The words shown for ``status`` (the status itself if unknown)."""
    return STATUS_TEXT.get(status, str(status))


def activity_words(agent: Agent) -> tuple[str, str, str] | None:
    """While its turn's prompt is out and no card waits: ``(words, tone, state)`` of what it
    does (``thinking``, ``running a tool: Read x.py``, ``stalled for 74 s``…; tone
    ``stalled`` or ``in_progress``; :attr:`~..engine.agent.Agent.activity`), else None (the
    status says it: waiting for you, idle, starting…)."""
    if agent.status != AgentStatus.WORKING:
        return None
    activity = agent.activity
    if activity.state in ("idle", "waiting"):  # the prompt not sent yet (its checkpoint): "working…"
        return None
    return activity.text, ("stalled" if activity.state == "stalled" else "in_progress"), activity.state


_views: weakref.WeakKeyDictionary[Agent, weakref.WeakSet] = weakref.WeakKeyDictionary()


def views_of(agent: Agent) -> list[AgentView]:
    """The open :class:`AgentView` s shown for ``agent`` (oldest first)."""
    return sorted((v for v in _views.get(agent, ()) if not v.closed), key=lambda v: v._serial)


def _run(coro) -> None:
    """Run a coroutine from a front-end action on the running loop; its owner is
    :data:`.views.clicks` (an operation of the agent, not cancelled with the view)."""
    clicks.start(coro)


def _mode_label(mode: str, meaning: str, width: int = 70) -> str:
    label = f"{mode} — {meaning}" if meaning and meaning != mode else mode
    return label if len(label) <= width else label[:width - 1] + "…"


def control_specs(agent: Agent) -> dict[str, tuple]:
    """key -> (kind, label, options, value, setter) for every dial the agent offers now:
    Escouade's mode, the agent's own mode, its config options (select, grouped select,
    boolean) and the model; ``options`` are (label, value) pairs, ``setter(value)`` a
    coroutine."""
    from ..engine import flatten_options
    conv = agent.conversation
    out: dict[str, tuple] = {}
    modes = agent.escouade_modes()
    if len(modes) > 1:
        out["escouade_mode"] = ("select", "Mode", tuple((_mode_label(m, t), m) for m, t in modes.items()),
                                agent.escouade_mode, agent.set_escouade_mode)
    if conv.modes and not any(o.get("category") == "mode" for o in conv.config_options):
        modes_offered = conv.modes.get("availableModes") or []
        mode_choices = tuple((m.get("name") or m.get("id"), m.get("id")) for m in modes_offered)
        out["agent_mode"] = ("select", "Agent mode", mode_choices, conv.current_mode_id, agent.set_mode)
    for option in conv.config_options:
        oid = option.get("id")

        def setter(v: Any, oid: Any = oid) -> Any:
            return agent.set_config_option(oid, v)

        if option.get("type") == "boolean":
            out[f"config:{oid}"] = ("bool", option.get("name") or oid, (), bool(option.get("currentValue")), setter)
        elif option.get("type") == "select":
            pairs = tuple((label, value) for value, label in flatten_options(option.get("options") or []))
            out[f"config:{oid}"] = ("select", option.get("name") or oid, pairs, option.get("currentValue"), setter)
    if not any(o.get("category") == "model" for o in conv.config_options):
        current, choices = agent.model_choices()
        if choices:
            out["model"] = ("select", "Model", tuple((label, mid) for mid, label in choices), current, agent.set_model)
    return out


_KERNEL_TOOLS = {
    "pending": ("kernel tools…", "The kernel's MCP server is being started for this agent"),
    "offered": ("kernel tools offered", "The agent was given the kernel's MCP server; it has not connected yet"),
    "connected": ("kernel tools ✓", "The agent is connected to the kernel's MCP server (variables, cells, "
                                    "run_code behind a card)"),
    "not offered": ("no kernel tools", ""),
}


def _where(agent: Agent) -> str:
    """`` · at HOST:PORT`` or `` · via …`` (where it runs), the protections in force
    (`` · sandboxed · private · reviewed``: :func:`~..engine.agent.protections`), the worktree and
    the additional directories, or ``""``."""
    where = f" · {agent.place}" if agent.place else ""  # at HOST:PORT (by URL), via LAUNCHER…
    for word, _meaning in protections(agent):
        where += f" · {word}"
    worktree = getattr(agent, "worktree", None)
    if worktree is not None:
        where += f" · {worktree.header_text()}"
    dirs = getattr(agent, "add_dirs", None)
    if dirs:
        where += f" · + {', '.join(map(str, dirs))}"
    return where


def review_state(agent: Agent) -> dict[str, Any] | None:
    """The agent's changes to the open notebook pending review, as the agent view draws
    them (``head["review"]``): ``{"edits": [{"cell", "change", "label", "busy"}]}`` (a file's
    change, ``review=True``: :func:`_file_state`'s fields instead) (oldest
    first; ``busy``: a Keep or Reject of it under way), or ``None`` when none is pending."""
    review = getattr(agent, "edit_review", None)
    edits = review.pending if review is not None else []
    if not edits:
        return None
    return {"edits": [{"cell": e.cell_id, "change": e.change, "busy": e.settling,
                       "label": e.label} if e.cell_id is not None else _file_state(e) for e in edits]}


REVIEW_HUNKS_SHOWN = 20
"""Hunks of one file offered one by one in the review strip (beyond: the file is answered whole)."""
REVIEW_DIFF_ROWS = 200
"""Diff rows of one file (or hunk) in the review strip."""


def _file_state(edit: Any) -> dict[str, Any]:
    """A file's pending edit as the review strip draws it (``engine/review/file_review.py``): its
    ``key``, ``file`` (as shown), ``label``, ``through``, ``diff`` (escaped HTML rows) and
    ``hunks`` (``[{"index", "diff"}]``, each answered alone; empty: the file whole)."""
    hunks = edit.hunks
    shown = hunks if 1 < len(hunks) <= REVIEW_HUNKS_SHOWN else []
    return {"key": edit.key, "file": edit.rel, "change": edit.change, "busy": edit.settling, "label": edit.label,
            "through": sorted(edit.through), "diff": "" if shown else unified_diff_html(edit.diff, REVIEW_DIFF_ROWS),
            "hunks": [{"index": h.index, "at": h.diff.split("\n", 1)[0],
                       "diff": unified_diff_html(h.diff, REVIEW_DIFF_ROWS)} for h in shown]}


def review_summary(agent: Agent) -> list[str]:
    """What was answered of the agent's changes to the open notebook, one line each
    (``new cell ID: kept``), oldest first; then those still pending (``…: pending, not
    answered``). Empty when it changed nothing."""
    review = getattr(agent, "edit_review", None)
    if review is None:
        return []
    lines = [f"{e.label}: {e.state}" for e in review.settled]
    lines += [f"{e.label}: pending, not answered" for e in review.pending]
    return lines


def review_title(agent: Agent) -> str:
    """The saved form's words over :func:`review_summary`: ``Its changes to the notebook``,
    ``… and to files`` once a file's change (``review=True``) is among them."""
    review = getattr(agent, "edit_review", None)
    edits = [*review.settled, *review.pending] if review is not None else []
    cells = any(e.cell_id is not None for e in edits)
    files = any(e.cell_id is None for e in edits)
    return "Its changes to the notebook and to files" if cells and files else \
        "Its changes to files" if files else "Its changes to the notebook"


def status_line(agent: Agent) -> str:
    status = status_text(agent.status)
    if agent.status == AgentStatus.EXITED and agent.reconnect_pending:  # an agent by URL whose connection dropped
        status = "connection lost, reconnecting"
    elif agent.status == AgentStatus.EXITED and agent.exit is not None:
        status += f" (code {agent.exit.code})"
    return f"{agent.name} · {agent.harness.display_name}{_where(agent)} · {status}"


def _placeholder(name: str, status: AgentStatus, words: str) -> str:
    """The prompt box's hint: how to write to ``name``, or why it takes nothing now (the
    box is then disabled) and what brings the agent back."""
    if status in (AgentStatus.WORKING, AgentStatus.WAITING):  # a turn runs: Enter queues, Ctrl+Enter steers
        return f"Message {name}… (Enter queues, Ctrl+Enter: steer now, Shift+Enter: new line)"
    if status in CAN_SEND:
        return f"Message {name}… (Enter sends, Shift+Enter: new line, / commands)"
    if status in CAN_RESTART:
        return f"{name} is {words}: no prompt can be sent. ⋯ → Restart… starts it again (this conversation stays)"
    return f"{name}: {words} — no prompt can be sent"


def _hint(command: dict) -> str:
    """A slash command's input hint (``input.hint``), or ``""``."""
    given = command.get("input")
    return str((given if isinstance(given, dict) else {}).get("hint") or "")


def _prompt_text(turn: Turn) -> str:
    return "".join(b.get("text", "") for b in turn.prompt if isinstance(b, dict) and b.get("type") == "text")


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _budget_head(agent: Agent) -> dict[str, Any] | None:
    """Its spend against its budget and its squad's, for the head: ``{"text", "over",
    "squad"}`` (texts such as ``210 of 250 tokens``), None when neither is set."""
    budget = getattr(agent, "budget", None)
    if budget is None:
        return None
    own, squad = budget.view(), budget.squad
    shared = squad.view() if squad is not None else None
    if own is None and shared is None:
        return None
    return {"text": own["text"] if own else None, "over": bool(own and own["over"] or shared and shared["over"]),
            "squad": shared["text"] if shared else None}


def _rules(agent: Agent) -> tuple[list[str], str | None]:
    """(names of the rule plugins guarding the agent, a hint when none do)."""
    guarding = getattr(agent, "rules_guarding", None)
    names: list[str] = []
    hint = None
    try:
        if callable(guarding):
            names = [str(n[1] if isinstance(n, tuple) else n) for n in guarding()]
            hint_of = getattr(agent, "rules_hint", None)
            hint = hint_of() if callable(hint_of) and not names else None
        else:
            names = [str(getattr(p, "name", None) or getattr(p, "plugin", None) or p) for p in agent.policies]
    except Exception:
        names = []
    return names, hint


class CardActions:
    """What the front-end's card buttons do, for one agent: find the live card of the
    item the button names (``find(key)``: the item a button's key names, or None) and
    answer it (``by="you"``). ``form_error(question, text)`` says why a form's answer was
    not sent (None: logged only). One copy for the agent, turn and squad views."""

    def __init__(self, agent: Agent, find: Callable[[str], Item | None],
                 form_error: Callable[[Question, str], None] | None = None) -> None:
        self.agent = agent
        self.find = find
        self.form_error = form_error or (lambda q, text: log.warning("form of %s not sent: %s", q.key, text))

    def _card(self, perm: Permission):
        return next((c for c in self.agent.pending_cards if c.permission is perm), None)

    def bind(self, actions: dict[str, Callable[[dict], Any]]) -> None:
        actions.update(choose=self.choose, approve=self.approve, keep=self.keep,
                       answer=self.answer, decline=self.answer, cancel_q=self.answer,
                       interrupt_task=self.interrupt_task)

    def dispatch(self, msg: dict) -> None:
        """Run the card action ``msg["act"]`` names (nothing for another act)."""
        actions: dict[str, Callable[[dict], Any]] = {}
        self.bind(actions)
        fn = actions.get(str(msg.get("act")))
        if fn is not None:
            fn(msg)

    def choose(self, msg: dict) -> None:
        perm = self.find(str(msg.get("key")))
        card = self._card(perm) if isinstance(perm, Permission) else None
        if card is not None and isinstance(perm, Permission) and perm.state == "pending":
            card.choose(str(msg.get("value")), by="you")

    def interrupt_task(self, msg: dict) -> None:
        """*Interrupt* on a ``run_code`` left running as a task: the tool call the key names, and the
        kernel's own task the agent's record holds for that call (never an id from the page or the
        agent), stopped as "interrupted by you"."""
        call = self.find(str(msg.get("key")))
        record = getattr(getattr(getattr(self.agent, "live", None), "kernel", None), "record", None)
        if isinstance(call, ToolCall) and record is not None:
            record.interrupt(call)

    def approve(self, msg: dict) -> None:
        perm = self.find(str(msg.get("key")))
        card = self._card(perm) if isinstance(perm, Permission) and perm.plan is not None else None
        if card is not None:  # a plan's card only: Approve is not a way to allow another tool
            card.approve()

    def keep(self, msg: dict) -> None:
        perm = self.find(str(msg.get("key")))
        card = self._card(perm) if isinstance(perm, Permission) and perm.plan is not None else None
        if card is not None:
            card.keep_planning(str((msg.get("fields") or {}).get("feedback") or msg.get("value") or ""))

    def answer(self, msg: dict) -> None:
        question = self.find(str(msg.get("key")))
        if not isinstance(question, Question) or question.state != "pending":
            return
        card = next((c for c in self.agent.pending_questions if c.question is question), None)
        if card is None:
            return
        act = msg.get("act")
        if act == "decline":
            card.decline()
        elif act == "cancel_q":
            card.cancel()
        else:
            try:
                values = form_values(question, msg.get("fields") or {})
                card.accept(values)
            except ValueError as exc:  # not what the schema asks for: said under the form, nothing sent
                self.form_error(question, str(exc))
            except Exception as exc:  # a schema the validator cannot read: said, card kept
                log.warning("form of %s not checked", question.key, exc_info=True)
                self.form_error(question, f"the form could not be checked ({type(exc).__name__}: {exc}); "
                                          "Decline or Cancel answer it")


class ConversationView(FrontView):
    """Base of the agent and turn views: a :class:`~.feed.Feed` of the conversation,
    a head (``head()``, re-sent when it changes) and the card actions."""

    def __init__(self, agent: Agent, *, kind: str, accept: Callable[[Item], bool] | None = None,
                 speaker: str | None = None) -> None:
        super().__init__(kind=kind)
        self.agent = agent
        self.speaker = speaker or agent.harness.speaker
        self.feed = Feed(agent.conversation, speaker=self.speaker, accept=accept)
        self.feed.on_ops = self.push
        self.hold(self.feed.close)
        self._head_sent: dict | None = None
        self._static_whole: dict = {}  # see static_body
        CardActions(agent, self.feed.find, self.feed.form_error).bind(self.actions)
        self.actions["rewind"] = self._rewind  # *Rewind to here* on a prompt (engine/review/checkpoints.py)
        self.hold(agent.on_status.subscribe(self._head_changed))  # the conversation's state: the feed nudges
        self._serial = next(_serials)

    def _rewind(self, msg: dict) -> None:
        """*Rewind to here* was confirmed on a prompt: the agent rewinds to its turn's
        checkpoint (a task the agent owns; a refusal is said in its conversation)."""
        item = self.feed.find(str(msg.get("key")))
        users = [i for i in self.agent.conversation.items if isinstance(i, Message) and i.role == "user"]
        if isinstance(item, Message) and item in users:
            self.agent.rewind_soon(users.index(item) + 1)

    def head(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    def _head_changed(self, *_args: Any) -> None:
        self.push([], 0, True)

    def safe_head(self) -> dict[str, Any]:
        """:meth:`head`, or the name and status alone when an agent's value breaks it."""
        try:
            return self.head()
        except Exception as exc:  # the head must not take the view down
            log.warning("%s: head not drawn", self.agent.name, exc_info=True)
            status = str(self.agent.status)
            return {"name": self.agent.name, "status": status, "status_text": f"{status_text(status)} "
                    f"(part of the head could not be drawn: {type(exc).__name__})", "tone": "failed",
                    "can": {"stop": self.agent.status in BUSY, "send": self.agent.status in CAN_SEND,
                            "restart": self.agent.status in CAN_RESTART}}

    def collect(self) -> tuple[list, bool]:
        ops, _size, more = self.feed.ops()
        head = self.safe_head()
        if head != self._head_sent:
            self._head_sent = head
            ops.append(["hd", head])
        return ops, more

    def state(self) -> dict[str, Any]:
        head = self._head_sent = self.safe_head()
        return {"head": head, "items": self.feed.snapshot_items()}

    def card_html(self, card) -> str:
        """The HTML the front-end shows for a card (a :class:`~escouade_nb.agent.PermissionCard`,
        a QuestionCard or the item): the card of its tool call when it has one."""
        item = _item_of(card)
        if isinstance(item, Permission) and item.tool_call is not None and self.feed.find(
                self.feed.key(item.tool_call)) is not None:
            item = item.tool_call
        return self.feed.render(item)[0]

    def press(self, card, act: str = "choose", value: Any = None, **fields: Any) -> Any:
        """Do what a click on ``card``'s button does (``act``: ``choose`` with an
        ``optionId``, ``approve``, ``keep`` with ``feedback=``, ``answer`` with the
        form's fields, ``decline``, ``cancel_q``) — the message the front-end sends."""
        item = _item_of(card)
        message = {"k": "act", "act": act, "key": self.feed.key_of(item) or self.feed.key(item), "value": value}
        if fields:
            message["fields"] = fields
        return self.act(message)

    # -- static forms -------------------------------------------------------------------------------
    def static_body(self) -> str:
        """Every item the view shows, drawn static (no buttons, each message whole), as
        HTML. A message unchanged since the last call is not rendered again (the agent
        view's saved form is redrawn at every status change: a long conversation must not
        be rendered whole each time on the kernel's loop)."""
        shown = {id(i) for i in self.feed.items}
        feed = Feed(self.agent.conversation, speaker=self.speaker, accept=lambda i: id(i) in shown, interactive=False)
        kept = self._static_whole
        feed.whole = self._static_whole = {}
        for msg, drawn in kept.items():
            if id(msg) in shown:
                feed.whole[msg] = drawn
        try:
            items = "".join(item_html(k, h, m) for k, h, m in feed.snapshot_items())
        finally:
            feed.close()
        return items


PLAIN_KEEP = 20000
"""Characters of a conversation's text that a saved form's ``text/plain`` holds (its end): the ``text/html``
beside it holds the whole conversation, so a long thread is not saved twice (a saved ``.ipynb`` about its
conversation's size, not twice it)."""


def plain_tail(text: str, keep: int = PLAIN_KEEP) -> str:
    """``text`` when it is at most ``keep`` characters; else its end — from the first line's start after a cut
    that moves by ``keep // 2`` characters at a time (so a redraw after a turn changes the end only: the saved
    form's change stays small), between ``keep`` and ``1.5 × keep`` characters — under a first line saying how
    many characters before it are in the HTML form."""
    if len(text) <= keep:
        return text
    block = max(1, keep // 2)  # the cut moves by whole blocks: a turn added changes the end, not the whole text
    cut = (len(text) - keep) // block * block
    start = text.find("\n", cut)
    start = cut if start < 0 or start >= len(text) - 1 else start + 1
    return (f"… the first {start:,} characters of the conversation are in this output's HTML form "
            f"(text/html)\n" + text[start:])


def saved_text(items: list[Item], speaker: str) -> str:
    """The items as plain text for a saved form: :func:`render_items`, a card still waiting
    said to be unanswered (:data:`.feed.UNANSWERED`) instead of offering its options or
    "waiting for you" (nobody is asked once the kernel is gone), a call allowed whose status is
    still ``pending`` said "allowed" (as the HTML form: never "pending" once answered)."""
    lines = []
    allowed = {id(i.tool_call) for i in items if isinstance(i, Permission) and i.tool_call is not None
               and i.state == "selected" and tool_status(i.tool_call, i)[0] == "allowed"}
    for item in items:
        text = safe_render_item(item, speaker, whole=False)  # a long code by its start, length and SHA-256
        if isinstance(item, ToolCall) and id(item) in allowed:
            head, sep, rest = text.partition("\n")
            text = (head[:-len(", pending)")] + ", allowed)" if head.endswith(", pending)") else head) + sep + rest
        if isinstance(item, (Permission, Question)) and item.state == "pending":
            head, _sep, rest = text.partition("\n")
            if isinstance(item, Permission) and item.plan is None:  # "[permission] TITLE: [option] [option]…"
                options = " ".join(f"[{o.get('name', o.get('optionId'))}]" for o in item.options)
                at = head.rfind(f": {options}")
                head = (head[:at + 2] + UNANSWERED) if at >= 0 else head + f" ({UNANSWERED})"
            elif isinstance(item, Permission):  # a plan's card
                rest = rest.replace("[Approve] [Keep planning]", UNANSWERED)
            text = (head + ("\n" + rest if rest else "")).replace("(waiting for you)", f"({UNANSWERED})")
        lines.append(text)
    return "\n".join(lines)


def _item_of(card) -> Item:
    """The conversation item of a card (a PermissionCard's permission, a QuestionCard's
    question), or ``card`` itself when it is one."""
    return getattr(card, "permission", None) or getattr(card, "question", None) or card


class AgentView(ConversationView):
    """Header (name, harness, folder, status, session title, usage, the rule plugins
    guarding it, its menus), the conversation, the cards waiting for you pinned by the
    prompt box. ``close()`` lets go of the agent."""

    def __init__(self, agent: Agent) -> None:
        super().__init__(agent, kind="agent")
        self.prompt_value = ""
        self.actions.update(send=self._act_send, stop=self._act_stop, restart=self._act_restart,
                            close_agent=self._act_close_agent, set=self._act_set, sign_in=self._act_sign_in,
                            sign_in_input=self._act_sign_in_input, review=self._act_review)
        self.actions.update(steer=self._act_steer, queued=self._act_queued)  # Steer now, the queue's Edit / Drop
        _views.setdefault(agent, weakref.WeakSet()).add(self)
        self._retry_seen = None
        self.hold(agent.on_status.subscribe(self._retry))
        self.hold(agent.on_status.subscribe(self._status_form))  # the saved form follows the status
        self._task_states: dict[int, str] = {}  # id(tool call) -> its task's state last seen
        self.hold(agent.conversation.subscribe(self._task_form, chunks=False))  # ...and a task's start, end

    def _task_form(self, changes: list) -> None:
        """A ``run_code`` task started or ended (not each line it prints): the saved form follows."""
        for change in changes:
            call = change.item
            task = call.kernel_task if isinstance(call, ToolCall) else None
            if task is not None and self._task_states.get(id(call)) != task.get("state"):
                self._task_states[id(call)] = str(task.get("state"))
                self.update_companion_soon()

    def release(self) -> None:
        views = _views.get(self.agent)
        if views is not None:
            views.discard(self)

    # -- actions ---------------------------------------------------------------------------------------
    def _act_send(self, msg: dict) -> Turn | None:
        return self._from_box(msg, self.agent.send)

    def _act_steer(self, msg: dict) -> Turn | None:
        """*Steer now* / Ctrl+Enter: the box's text sent now (``agent.steer``)."""
        return self._from_box(msg, self.agent.steer)

    def _from_box(self, msg: dict, send: Callable[[str], Turn]) -> Turn | None:
        """The prompt box's text sent by ``send`` (``agent.send`` or ``agent.steer``); a
        prompt refused until a sign-in comes back into the box."""
        text = str(msg.get("text") or "").strip()
        if not text:
            return None
        self.prompt_value = ""
        turn = send(text)
        turn.add_done_callback(lambda _t: self._keep_refused(turn, text))
        return turn

    def _act_queued(self, msg: dict) -> None:
        """Edit (``value`` ``edit``, ``text``) or Drop (``drop``) of a queued prompt, by its
        turn's ``key`` (:attr:`Turn.id`); one that has started meanwhile is left alone."""
        turn = next((t for t in self.agent.turns.queued if str(t.id) == str(msg.get("key"))), None)
        text = str(msg.get("text") or "").strip()
        if turn is None or msg.get("value") not in ("edit", "drop") or (msg.get("value") == "edit" and not text):
            return
        turn.edit(text) if msg.get("value") == "edit" else turn.drop()

    def _keep_refused(self, turn: Turn, text: str) -> None:
        """A prompt the agent would not take until you sign in goes back in the box."""
        if isinstance(turn.error, AuthRequired) and not self.closed:
            self.prompt_value = text
            self.push([["pv", text]], 0, True)

    def _status_form(self, agent: Agent) -> None:
        """The saved form after a status change: at once when no turn runs any more (idle: the turn's reply
        is whole; an agent ended), so that a save or a kernel shut down right after it keeps the whole turn;
        debounced (:data:`.front.COMPANION_WAIT`) while one runs."""
        if self._closed:
            return
        if agent.status == AgentStatus.IDLE or agent.status in ENDED:
            self.update_companion()
        else:
            self.update_companion_soon()

    def _retry(self, _agent: Agent) -> None:
        retry = getattr(self.agent, "sign_in_retry", None)  # a terminal sign-in sent the refused prompt again
        if retry is not None and retry is not self._retry_seen:
            self._retry_seen = retry
            sent = "".join(b.get("text", "") for b in retry.prompt if b.get("type") == "text")
            if self.prompt_value.strip() == sent.strip():
                self.prompt_value = ""  # kept when it was refused; sent now: not twice
                self.push([["pv", ""]], 0, True)

    def _act_stop(self, _msg: dict) -> None:
        self.agent.cancel()

    def _act_restart(self, _msg: dict) -> None:
        if self.agent.status in CAN_RESTART:
            _run(self.agent.restart())

    def _act_close_agent(self, _msg: dict) -> None:
        _run(self.agent.close())

    def _act_set(self, msg: dict) -> None:
        spec = control_specs(self.agent).get(str(msg.get("key")))
        value = msg.get("value")
        if spec is None or value is None or spec[3] == value:
            return
        if spec[0] == "select" and value not in [v for _, v in spec[2]]:
            return
        _run(spec[4](bool(value) if spec[0] == "bool" else value))

    def _act_review(self, msg: dict) -> None:
        """Keep all / Reject all (``key`` empty) or Keep / Reject of one change (``key``: its
        cell id, or a file's ``file:PATH``; with ``hunk`` and ``at``, that hunk of the file
        alone, if its ``@@`` line is still ``at``), through ``agent.pending_edits``; a change
        already answered or being answered (another view, the page, Python) is left alone."""
        value, key = msg.get("value"), str(msg.get("key") or "")
        if value not in ("keep", "reject"):
            return
        review = getattr(self.agent, "edit_review", None)
        if review is None:
            return
        if not key:
            review.settle_all(value == "keep")
            return
        edit = next((e for e in review.pending if e.key == key), None)
        if edit is None or edit.settling:
            return
        hunk = msg.get("hunk")  # a file's hunk answered alone: its index and ``@@`` line as the view showed them
        if isinstance(hunk, int) and not isinstance(hunk, bool) and edit.cell_id is None:
            hunks = edit.hunks
            if 0 <= hunk < len(hunks) and hunks[hunk].diff.split("\n", 1)[0] == msg.get("at"):
                hunks[hunk].keep() if value == "keep" else hunks[hunk].reject()
            return
        edit.keep() if value == "keep" else edit.reject()

    def _act_sign_in(self, msg: dict) -> None:
        _run(self.agent.authenticate(str(msg.get("value"))))

    def _act_sign_in_input(self, msg: dict) -> None:
        _run(self.agent.sign_in_input(str(msg.get("text") or "")))

    # -- what the head shows ---------------------------------------------------------------------------
    def head(self) -> dict[str, Any]:
        a = self.agent
        conv = a.conversation
        status = a.status
        text = status_text(status)
        if status == AgentStatus.EXITED and a.reconnect_pending:  # an agent by URL whose connection dropped
            text = "connection lost, reconnecting"
        elif status == AgentStatus.EXITED and a.exit is not None:
            text += f" (code {a.exit.code})"
        waiting = getattr(a, "start_waiting", None)
        if status == AgentStatus.STARTING and waiting:
            text += f" ({waiting})"
        doing = activity_words(a)
        tone = STATUS_TONE.get(status, "idle")
        if doing is not None:
            text, tone = doing[0], doing[1]
        usage = conv.usage or {}
        cost = usage.get("cost") or {}
        state, why = a.kernel_tools_state
        tools = None
        if state != "off":
            label, tip = _KERNEL_TOOLS.get(state, (state, ""))
            tools = [label, why or tip]
        rules, hint = _rules(a)
        disabled = status in CONTROLS_OFF
        controls = [{"key": key, "kind": kind, "label": label, "options": [[str(lb), v] for lb, v in options],
                     "value": value, "disabled": disabled}
                    for key, (kind, label, options, value, _setter) in control_specs(a).items()]
        sign_in: dict[str, Any] | None = None
        if getattr(a, "sign_in_job", None) is not None:
            sign_in = {"input": True}
        elif status == AgentStatus.SIGN_IN:
            sign_in = {"methods": [
                {"id": m.get("id"), "label": f"Sign in: {m.get('name') or m.get('id')}"
                 + (" (terminal)" if m.get("type") == "terminal" else ""),
                 "tip": " ".join(filter(None, [m.get("description"), "(runs in a terminal: " + " ".join(
                     m.get("args") or []) + ")" if m.get("type") == "terminal" else ""]))}
                for m in a.auth_methods]}
        return {
            "name": a.name, "harness": a.harness.display_name, "folder": str(a.cwd), "where": _where(a),
            "protections": [[word, meaning] for word, meaning in protections(a)],
            "status": str(status), "status_text": text, "tone": tone,
            "activity": a.activity.state,  # idle, thinking, writing, tool, waiting, stalled (the page's attention)
            "title": conv.title, "placeholder": _placeholder(a.name, status, text),
            "usage": {"used": usage.get("used"), "size": usage.get("size"),
                      "cost": f"{cost.get('amount')} {cost.get('currency', '')}".strip() if cost else None}
            if usage else None,
            "budget": _budget_head(a),
            "rules": rules, "rules_hint": hint, "tools": tools, "controls": controls,
            "can": {"stop": status in BUSY or bool(waiting), "send": status in CAN_SEND,
                    "restart": status in CAN_RESTART},  # Stop while it starts: ends the start
            "sign_in": sign_in,
            "queued": [{"id": t.id, "text": _prompt_text(t), "steered": t.steered} for t in a.turns.queued],
            "steer": status in CAN_SEND and a.turns.current is not None and not a.turns.current.done,
            "review": review_state(a),
            "commands": [{"name": c["name"], "description": str(c.get("description") or ""), "hint": _hint(c)}
                         for c in conv.commands
                         if isinstance(c, dict) and isinstance(c.get("name"), str) and c["name"]],
        }

    def state(self) -> dict[str, Any]:
        out = super().state()
        out["prompt"] = self.prompt_value
        return out

    # -- saved forms ----------------------------------------------------------------------------------------
    def companion_bundle(self, final: bool = False) -> dict[str, str]:
        """The agent's saved form: its name and harness (and how it ended, once it has),
        how to bring it back, and its conversation so far, static (redrawn
        :data:`~.front.COMPANION_WAIT` after each status change: a turn's end, a card).
        No status that the kernel's end makes false, no folder (a machine's path)."""
        a = self.agent
        name = esc(a.name)
        ended = ""
        if a.status in ENDED:
            ended = status_text(a.status) + (f" (code {a.exit.code})" if a.status == AgentStatus.EXITED
                                             and a.exit is not None else "")
        harness = a.harness.display_name
        held = protections(a)
        held_html = "".join(f' · <span class="esc-protection" title="{esc(meaning)}">{esc(word)}</span>'
                            for word, meaning in held)
        held_text = "".join(f" · {word}" for word, _meaning in held)
        body = self.static_body()
        said = "Its conversation so far is below; " if body else ""
        reviewed = review_summary(a)
        review_html = (f'<div class="esc-saved-review esc-small"><b>{esc(review_title(a))}</b><ul>'
                       + "".join(f"<li>{esc(line)}</li>" for line in reviewed) + "</ul></div>") if reviewed else ""
        head = (f'<div class="esc-head"><div class="esc-head-row"><div class="esc-head-main"><b>{name}</b> · '
                f'{esc(harness)}{held_html}{f" · {esc(ended)}" if ended else ""}</div></div>'
                f'<div class="esc-dim esc-small">The live view of this agent was here. {said}'
                f'<code>%escouade resume {name}</code> brings it back (the finished turns of '
                f'<code>%%escouade</code> cells stay in their outputs).</div>{review_html}</div>')
        # a scroll box, as live: a long conversation does not make the saved notebook endless
        transcript = (f'<div class="esc-transcript esc-static-transcript" style="max-height:min(70vh,720px);'
                      f'overflow-y:auto">{body}</div>') if body else ""
        html = static_page(f'<div class="esc-view esc-saved esc-saved-agent">{head}{transcript}</div>') + HIDE_ORPHAN
        text = plain_tail(saved_text(self.feed.items, self.speaker))
        plain = f"{a.name} · {harness}{held_text}" + (f" · {ended}" if ended else "") + (
            f"\n{review_title(a)}: " + "; ".join(reviewed) if reviewed else "") + ("\n" + text if text else "")
        return {"text/plain": plain, "text/html": html}

    def __repr__(self) -> str:
        body = render_items(self.feed.items, self.speaker)
        return status_line(self.agent) + ("\n" + body if body else "")


class TurnView(ConversationView):
    """The items of one turn (its prompt, replies, tool calls, cards), live, with its
    status and Stop. When the turn ends, its cell's output becomes static: the companion
    output is replaced by the finished turn (escaped HTML and the whole plain text) and
    the widget closes — a saved notebook, nbconvert and GitHub show the turn.

    ``cell``: the id of the notebook cell that shows it (:func:`current_cell`); a new
    TurnView of the same cell (the cell was run again, its old output is gone) closes
    this one."""

    def __init__(self, turn: Turn, *, cell: str | None = None) -> None:
        self.turn = turn
        super().__init__(turn.agent, kind="turn", accept=self._accept,
                         speaker=turn.agent.harness.harness.speaker or turn.agent.name)
        self.cell = cell
        self.actions.update(stop=self._act_stop)
        shown_in_cell(self, cell)
        turn.add_done_callback(self._ended)

    def _accept(self, item: Item) -> bool:
        return any(i is item for i in reversed(self.turn.items))

    def _act_stop(self, _msg: dict) -> None:
        if self.agent.turns.current is self.turn and not self.turn.done:
            self.agent.cancel()

    def _ended(self, _turn: Turn) -> None:
        self.push([], 0, True)
        if self._companion is not None and not self.closed:
            self.update_companion(final=True)
            # closed a moment later: a front-end still creating the model would report it failed
            asyncio.get_running_loop().call_later(CLOSE_AFTER, self.close)

    def head(self) -> dict[str, Any]:
        t = self.turn
        status = t.status
        tone = {"queued": "pending", "running": "in_progress", "end_turn": "completed", "done": "completed",
                "cancelled": "cancelled", "failed": "failed"}.get(status, "idle")
        words = {"queued": "queued", "running": "working…", "end_turn": "done", "cancelled": "stopped",
                 "failed": "failed"}.get(status, status)
        if status == "running" and self.agent.status in BUSY and self.agent.turns.current is t:
            words, tone = status_text(self.agent.status), STATUS_TONE[self.agent.status]  # a card waits: say so
            doing = activity_words(self.agent)
            if doing is not None:  # thinking, running a tool, stalled for 74 s…
                words, tone = doing[0], doing[1]
        if t.error is not None:
            words = f"failed: {t.error}"
        return {"name": self.agent.name, "status": status, "status_text": words, "tone": tone,
                "can": {"stop": not t.done and status == "running"}, "took": t.duration}

    def companion_bundle(self, final: bool = False) -> dict[str, str]:
        """The turn's saved form, ``{"text/plain": str, "text/html": str}``. Before the
        end (``final`` False): no text, and HTML naming the agent and the prompt. ``final``:
        the finished turn — ``text/plain`` its text (``repr``; of a long turn the end, :func:`plain_tail`: the
        HTML holds it whole), ``text/html`` one
        self-contained element (:func:`~.front.static_page`: the stylesheet inlined) holding
        its head (name, how it ended) and every item to the last chunk, without buttons,
        then :data:`~.front.HIDE_ORPHAN`. Deterministic: no duration, no path of ours."""
        if not final:
            return {"text/plain": "",  # the widget's own text/plain follows
                    "text/html": f'<div class="esc-saved" style="font-size:12px;color:var(--jp-ui-font-color1,#333)">'
                                 f'<b>{esc(self.agent.name)}</b>, prompted: '
                                 f'“{esc(_cut(_prompt_text(self.turn), 200))}” '
                                 f'— the turn shows here once it has ended (in JupyterLab or Notebook 7)</div>'
                                 f'{HIDE_ORPHAN}'}
        head = self.head()  # how long it took is left out: a saved form is the same on every run
        body = (f'<div class="esc-view esc-turn esc-saved"><div class="esc-head"><div class="esc-head-row">'
                f'<div class="esc-head-main"><b>{esc(self.agent.name)}</b> '
                f'<span class="esc-status esc-st-{esc(head["tone"])}">● {esc(head["status_text"])}</span>'
                f'</div></div></div>'
                f'<div class="esc-transcript esc-static-transcript">{self.static_body()}</div></div>')
        head_line, _sep, rest = repr(self).partition("\n")
        return {"text/plain": head_line + ("\n" + plain_tail(rest) if rest else ""),
                "text/html": static_page(body) + HIDE_ORPHAN}

    def __repr__(self) -> str:
        body = render_items(self.feed.items, self.speaker)
        return f"{self.turn.agent.name}: turn {self.turn.status}" + ("\n" + body if body else "")


def current_cell() -> str | None:
    """The id of the notebook cell being run, or None (see :func:`.views.current_run`)."""
    return current_run()[0]
