"""A conversation as the front-end's items: what each item shows (escaped HTML) and the
ops that bring a view from what it has to what the conversation holds.

An item is ``[key, html, meta]``; ``meta`` holds ``c`` (its class: ``msg``, ``tool``,
``card``, ``plan``, ``note``, ``sub``), ``p`` (1 while it waits for the user: the
front-end pins it), ``t`` (its one-line title, for the pin), ``h`` (1: drawn inside another
item, so not shown on its own — a permission inside its tool call's card).

Ops (applied in order by ``widgets/escouade.js``):

- ``["it", key, html, meta]`` — the item whole: replaced where it is, or appended;
- ``["tx", key, text]`` — text appended to a streaming message's tail (shown as text);
- ``["fz", key, html, n]`` — rendered blocks appended to a message, and the first ``n``
  UTF-16 units of its tail dropped (the raw text they replace);
- ``["ex", key, html]`` — non-text blocks (an image…) appended after a message's text.

A streaming agent message sends each settled part once, as HTML, and only the part still
growing as raw text, so a reply costs about its own size whatever its length (a 60 KB
code block is sent as text while it grows and highlighted once, when it closes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..core import forms
from ..core.conversation import (Change, Compaction, Conversation, Item, Message, Notice, Permission, Plan, Question,
                                 Subagent, ToolCall, Unknown)
from ..core.plans import QUESTION_OPEN, visible_text
from ..core.render_text import answer_label, compaction_head, render_item, subagent_head
from ..wire.transcript import BUDGET_ORIGIN as BUDGET
from .render import (NotDrawnYet, asked_body_html, block_html, draw_later, esc, markdown, plan_html, pre, saved_form,
                     split_frozen, task_html, tool_body_html, tool_header_html)

log = logging.getLogger(__name__)

_NO_OPS: list = []
"""The empty ops of a nudge (never extended: :meth:`.front.Outbox.push` adds only non-empty ops)."""

FREEZE_BUDGET = 6 * 1024
"""Characters of markdown one message renders per batch (about 2 ms): a burst bigger
than this is rendered over several batches, so none holds the kernel's loop for long."""


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (what a JavaScript string counts; a lone
    surrogate, sent as U+FFFD, counts one)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def not_drawn(item: Item, exc: Exception) -> str:
    """What shows in place of an item that could not be drawn: why, and its raw form."""
    import dataclasses
    import json

    try:
        raw = json.dumps({k: v for k, v in dataclasses.asdict(item).items() if k != "conversation"},
                         default=str, indent=1)[:4000]
    except Exception:
        raw = repr(item)[:4000]
    return (f'<div class="esc-notice esc-lvl-error">This {esc(type(item).__name__.lower())} could not be drawn '
            f'({esc(type(exc).__name__)}: {esc(exc)}).<details><summary>raw</summary>{pre(raw)}</details></div>')


def item_html(key: str, html: str, meta: dict[str, Any]) -> str:
    """An item as the front-end wraps it (``widgets/escouade.js`` builds the same element):
    for a subagent's nested items and for static copies."""
    return (f'<div class="esc-item esc-i-{esc(meta.get("c", "x"))}" data-key="{esc(key)}"'
            f'{" hidden" if meta.get("h") else ""}>{html}</div>')


def rewound_badge(item: Item) -> str:
    return '<span class="esc-badge esc-rewound-badge" title="A rewind undid this turn">rewound</span>' \
        if item.rewound else ""


def _who(answered_by: str | None) -> str:
    """Who answered, in the card's words: a rule plugin without its " via Escouade"."""
    who = answered_by or ""
    return who[:-len(" via Escouade")] if who.endswith(" via Escouade") else who


def _chosen_kind(perm: Permission) -> str:
    """The kind of the option chosen on ``perm`` (``""`` when none was)."""
    return str((perm.chosen or {}).get("kind", ""))


def _rejected(perm: Permission) -> bool:
    return perm.denied or _chosen_kind(perm).startswith("reject")


def tool_status(call: ToolCall, perm: Permission | None) -> tuple[str | None, str | None]:
    """(word, tone) a tool card shows when its permission says more than the agent's
    status: a call that failed because it was refused says who refused it ("rejected by
    you", "refused by Team rules"), a plan sent back says so, an allowed one whose status
    is still ``pending`` (no update since: a card of ours, an agent that sent none) says
    "allowed"; (None, None) otherwise."""
    if perm is None:
        return None, None
    if perm.state == "pending":
        return ("deciding…", "pending") if perm.deciding else ("waiting for you", "waiting")
    if perm.plan is not None and not _chosen_kind(perm).startswith("allow") and perm.state != "cancelled":
        return "sent back", "info"
    if perm.state == "cancelled" and call.shown_status in ("pending", "in_progress", "cancelled", "failed"):
        return "cancelled", "cancelled"
    if _rejected(perm) and call.shown_status in ("failed", "pending", "in_progress", "cancelled"):
        who = _who(perm.answered_by)
        return ("rejected by you" if who == "you" else f"refused by {who}" if who else "refused"), "refused"
    if perm.state == "selected" and call.shown_status == "pending":  # answered: never "pending" above "Allowed"
        return "allowed", "completed"
    return None, None


def _answer_tone(perm: Permission) -> str:
    if perm.state == "cancelled":
        return "cancelled"
    return "refused" if _rejected(perm) else "completed"


UNANSWERED = "unanswered when this was saved"
"""What a static copy (a saved form) says of a card still waiting when it was drawn: once
its kernel is gone nobody is asked any more (no "waiting for you", no "deciding…")."""


def _unanswered() -> str:
    return f'<div class="esc-answer esc-ans-cancelled">– {UNANSWERED}</div>'


class Feed:
    """The items of one conversation as the front-end shows them, kept in step.

    ``accept(item)`` filters which items appear (a turn's view shows its own);
    ``speaker`` names the agent in cards; ``interactive`` False makes a static copy (a
    saved form): cards without their buttons and fields, every message drawn whole as it
    is now (no part kept back as a growing tail or for a later batch); ``prefix`` starts
    every key (a subagent's feed).
    ``on_ops(ops, size, urgent)`` is nudged when something changed, the session's state
    too (the view collects with :meth:`ops`, and its head, when its batch leaves)."""

    def __init__(self, conversation: Conversation, *, speaker: str = "agent",
                 accept: Callable[[Item], bool] | None = None, interactive: bool = True,
                 prefix: str = "") -> None:
        self.conversation = conversation
        self.speaker = speaker
        self.accept = accept or (lambda item: True)
        self.interactive = interactive
        self.prefix = prefix
        self.items: list[Item] = []  # shown, in order (hidden ones too)
        self._keys: dict[str, Item] = {}
        self._stream: dict[str, list[int]] = {}  # message key -> [frozen_upto, sent_upto, blocks shown]
        self._dirty: dict[str, Item] = {}
        self._perm_of: dict[int, Permission] = {}  # id(tool call) -> its permission (latest)
        self._nested: dict[str, Feed] = {}  # subagent key -> its conversation's feed
        self._owner: dict[str, str] = {}  # subagent key -> the key of the item that draws it
        self._form_errors: dict[str, str] = {}
        self._pending = 0
        self._behind: set[str] = set()  # messages drawn in part (a burst): more to freeze
        self._seen: dict[str, int] = {}  # message key -> its parts counted so far (the nudge's size)
        self.on_ops: Callable[[list, int, bool], None] | None = None
        self.whole: dict[Message, tuple[int, str]] | None = None
        """A static copy's drawn messages (message -> (its version, HTML)), shared by the
        static copies a view makes one after another: a message is rendered again only
        once it changed (set by the view; None: no reuse)."""
        self._sub = conversation.subscribe(self._on_changes)
        for item in list(conversation.items):
            if self.accept(item):
                self._add(item)

    def close(self) -> None:
        self._sub.close()
        for feed in self._nested.values():
            feed.close()
        self._nested.clear()
        self.on_ops = None

    # -- keys -------------------------------------------------------------------------------------
    def key(self, item: Item) -> str:
        return self.prefix + item.key

    def find(self, key: str) -> Item | None:
        """The item (of this conversation or a nested subagent's) a front-end key names."""
        item = self._keys.get(key)
        if item is not None:
            return item
        for feed in self._nested.values():
            item = feed.find(key)
            if item is not None:
                return item
        return None

    def _owner_of(self, item: Item) -> Feed | None:
        """The feed that shows ``item``: this one, or a nested subagent's (None: not shown)."""
        if self._keys.get(self.key(item)) is item:
            return self
        for feed in self._nested.values():
            owner = feed._owner_of(item)
            if owner is not None:
                return owner
        return None

    def key_of(self, item: Item) -> str | None:
        """The front-end key of ``item`` here or in a nested subagent's feed (None if not shown)."""
        owner = self._owner_of(item)
        return owner.key(item) if owner is not None else None

    def waiting(self) -> bool:
        """Whether a card of this feed (or of a nested subagent's) waits for the user."""
        return any(isinstance(i, (Permission, Question)) and i.state == "pending" for i in self.items) or any(
            f.waiting() for f in self._nested.values())

    def _nested_waiting(self, subs: list[Subagent]) -> bool:
        return any(self._nested[self.key(s)].waiting() for s in subs if self.key(s) in self._nested)

    # -- following the conversation ------------------------------------------------------------------
    def _add(self, item: Item) -> None:
        self.items.append(item)
        self._keys[self.key(item)] = item
        if isinstance(item, Permission) and item.tool_call is not None:
            self._perm_of[id(item.tool_call)] = item

    def _on_changes(self, changes: list[Change]) -> None:
        if len(changes) == 1:
            change = changes[0]
            msg = change.item
            if change.kind == "updated" and type(msg) is Message:  # the hot path: one more chunk of a message
                key = self.prefix + msg.key
                if key not in self._keys:
                    return
                self._dirty[key] = msg
                on_ops = self.on_ops
                if on_ops is not None:
                    on_ops(_NO_OPS, self._grown(key, msg), False)
                return
        urgent = state = False
        for change in changes:
            item = change.item
            if item is None:
                state = state or change.kind == "state"  # modes, options, commands, title, usage: the head
                continue
            key = self.key(item)
            if change.kind == "added":
                if not self.accept(item):
                    continue
                self._add(item)
                urgent = True
            elif key not in self._keys:
                continue
            if isinstance(item, (Permission, Question)):
                urgent = True
            self._dirty[key] = item
            if isinstance(item, Message):
                self._pending += self._grown(key, item)
            if isinstance(item, Permission) and item.tool_call is not None:
                call_key = self.key(item.tool_call)
                if call_key in self._keys:
                    self._dirty[call_key] = item.tool_call
            if isinstance(item, Message) and item.closed:
                urgent = urgent or item.role == "thought"
        if (self._dirty or state) and self.on_ops is not None:
            pending, self._pending = self._pending, 0
            self.on_ops([], pending, urgent or state)  # a nudge: the view collects when its batch leaves

    def _grown(self, key: str, msg: Message) -> int:
        """Characters a streaming message gained since the last change seen (the new
        parts' text only: ``Message.text`` is a join), the size a nudge announces."""
        if key not in self._stream:
            return 0
        parts = msg.parts
        n = len(parts)
        seen = self._seen.get(key, n)
        self._seen[key] = n
        if n - seen == 1:  # the hot path: one chunk more (no slice, no generator per chunk)
            return len(parts[-1])
        return sum(map(len, parts[seen:])) if n > seen else 0

    def _nested_changed(self, sub_key: str) -> None:
        owner = self._owner.get(sub_key)
        item = self._keys.get(owner) if owner else None
        if owner and item is not None:
            self._dirty[owner] = item
            if self.on_ops is not None:
                self.on_ops([], 0, True)

    def ops(self) -> tuple[list, int, bool]:
        """(ops, their size in characters, more to do) since the last call: items drawn
        anew, text appended, blocks frozen. ``more`` is true when a message is behind
        (more settled markdown than :data:`FREEZE_BUDGET`): call again soon."""
        ops: list = []
        size = 0
        more = False
        dirty, self._dirty = self._dirty, {}
        for key, item in dirty.items():
            try:
                item_ops, item_size, behind = self._item_ops(key, item)
            except Exception as exc:  # drawn as "not drawn"; the batch goes on
                log.warning("item %s not drawn", key, exc_info=True)
                self._stream.pop(key, None)
                item_ops, item_size, behind = [["it", key, not_drawn(item, exc), {"c": "note"}]], 0, False
            ops.extend(item_ops)
            size += item_size
            if behind:
                self._dirty[key] = item
                more = True
        for feed in self._nested.values():  # a nested conversation redraws its owner (see render)
            feed._dirty.clear()
        return ops, size, more

    def _item_ops(self, key: str, item: Item) -> tuple[list, int, bool]:
        """(ops, size, behind) that bring one item up to date: text appended to a streaming
        thought or reply, settled blocks frozen, or the item drawn whole."""
        if isinstance(item, Message) and item.role == "thought" and key in self._stream and not item.closed:
            sent = self._stream[key][1]
            text = item.text
            if len(text) >= sent:
                self._stream[key][1] = len(text)
                return ([["tx", key, text[sent:]]] if len(text) > sent else []), len(text) - sent, False
        if isinstance(item, Message) and item.role == "agent" and key in self._stream and not item.rewound:
            stream_ops, behind = self._stream_ops(key, item)
            if stream_ops is not None:
                return stream_ops, sum(len(o[2]) for o in stream_ops), behind
        html, meta = self.render(item)
        behind = key in self._behind  # drawn in part (a burst): the next batches freeze the rest
        self._behind.discard(key)
        return [["it", key, html, meta]], len(html), behind

    # -- streaming messages --------------------------------------------------------------------------
    def _stream_ops(self, key: str, msg: Message) -> tuple[list | None, bool]:
        """The ops that bring a streaming agent message up to date, or (None, False) when
        it must be drawn whole (its text changed before what was sent, non-text blocks)."""
        state = self._stream[key]
        frozen, sent = state[0], state[1]
        raw = msg.text
        if QUESTION_OPEN in raw:
            return None, False
        text = raw
        if len(text) < sent or len(msg.blocks) < state[2]:
            return None, False
        # text[:frozen] is settled and ends outside a fence: only what follows is scanned (a
        # long reply is not read whole at every batch)
        settled = len(text) if msg.closed else frozen + split_frozen(text[frozen:])
        cut_at, behind = settled, False
        if settled - frozen > FREEZE_BUDGET:
            budget_cut = frozen + split_frozen(text[frozen:frozen + FREEZE_BUDGET])  # at a line end inside it
            if frozen < budget_cut < settled:
                cut_at, behind = budget_cut, True
        # the front-end's tail always holds text[frozen:sent] as raw text, its blocks text[:frozen]
        ops: list = []
        if cut_at > frozen:
            dropped = utf16_len(text[frozen:min(sent, cut_at)]) if sent > frozen else 0
            ops.append(["fz", key, markdown(text[frozen:cut_at]), dropped])
            state[0] = frozen = cut_at
            state[1] = sent = max(sent, cut_at)  # settled text not sent yet goes as HTML only
        if not behind and len(text) > sent:  # behind: the rest waits for the next batches' blocks
            ops.append(["tx", key, text[sent:]])
            state[1] = len(text)
        if len(msg.blocks) > state[2]:  # non-text blocks (an image…) after the text: each sent once
            ops.append(["ex", key, "".join(block_html(b) for b in msg.blocks[state[2]:])])
            state[2] = len(msg.blocks)
        return ops, behind

    # -- what an item shows ------------------------------------------------------------------------------
    def snapshot_items(self) -> list:
        """Every item as ``[key, html, meta]`` (a late view's state); streaming messages
        restart from what is settled."""
        out = []
        for item in self.items:
            html, meta = self.render(item)
            out.append([self.key(item), html, meta])
        return out

    def render(self, item: Item) -> tuple[str, dict[str, Any]]:
        """(HTML, meta) of ``item`` as the front-end shows it now; an item that cannot be
        drawn (an agent's value no renderer expected) shows why, and its raw form."""
        try:
            if self.interactive:
                html, meta = self._render(item)
            else:
                with saved_form():  # a long code or input by its start, length and SHA-256
                    html, meta = self._render(item)
            return (f'<div class="esc-rewound">{html}</div>' if item.rewound and html else html), meta
        except NotDrawnYet as pending:  # a long text, drawn in pieces: the card says so, with no button meanwhile
            draw_later(pending, lambda: self.conversation.touch(item))
            waiting = isinstance(item, (ToolCall, Permission)) and self._waits(item)
            return (f'<div class="esc-card esc-drawing"><div class="esc-tool-header"><b>Drawing '
                    f'{len(pending.text):,} characters of {esc(pending.kind)}…</b></div><div class="esc-dim">shown '
                    f'whole in a moment; nothing can be answered before</div></div>',
                    {"c": "card", "p": 1 if waiting else 0, "t": "being drawn"})
        except Exception as exc:  # one item must not take the view down
            log.warning("item %s not drawn", item.key, exc_info=True)
            return not_drawn(item, exc), {"c": "note"}

    def _waits(self, item: ToolCall | Permission) -> bool:
        """Whether ``item`` (a tool call, a permission) holds a card waiting for the user."""
        perm = item if isinstance(item, Permission) else self._perm_of.get(id(item))
        return perm is not None and perm.state == "pending" and self.interactive

    def _render(self, item: Item) -> tuple[str, dict[str, Any]]:
        if isinstance(item, Message):
            return self._message(item)
        if isinstance(item, ToolCall):
            return self._tool(item)
        if isinstance(item, Permission):
            call = item.tool_call
            if call is not None and self.key(call) in self._keys and self._perm_of.get(id(call)) is item:
                return "", {"c": "perm", "h": 1}
            return self._standalone_permission(item)
        if isinstance(item, Question):
            return self._question(item)
        if isinstance(item, Plan):
            return plan_html(item), {"c": "plan"}
        if isinstance(item, Subagent):
            html = self._subagent(item, self.key(item))
            return html, {"c": "sub", "p": 1 if self._nested_waiting([item]) else 0, "t": item.name}
        return self._note(item), {"c": "note"}

    def _message(self, msg: Message) -> tuple[str, dict[str, Any]]:
        key = self.key(msg)
        if not self.interactive and msg.role != "user":
            return self._message_whole(msg)
        if msg.role == "user":
            extra = "".join(block_html(b) for b in msg.blocks)
            who = 'you <span class="esc-steered">· steered</span>' if msg.steered else "you"
            return (f'<div class="esc-msg esc-user"><div class="esc-who">{who}</div>{rewound_badge(msg)}'
                    f'<div class="esc-user-text">{esc(msg.text)}</div>{extra}{self._rewind_here(msg)}</div>',
                    {"c": "msg"})
        if msg.role == "thought":
            if msg.closed:
                took = getattr(msg, "duration", None)
                head = (f"{self.speaker} thought for {round(took)} s" if took and took >= 1 else
                        f"{self.speaker} thought for under a second" if took is not None else f"{self.speaker} thought")
                self._stream.pop(key, None)
            else:
                head = f"{self.speaker} thinks…"
                self._stream[key] = [0, len(msg.text), 0]
            return (f'<details class="esc-thought"><summary>{esc(head)}</summary>'
                    f'<div class="esc-thought-text esc-tail">{esc(msg.text)}</div></details>', {"c": "msg"})
        text = msg.text
        if QUESTION_OPEN in text:
            self._stream.pop(key, None)
            extra = "".join(block_html(b) for b in msg.blocks)
            return (f'<div class="esc-msg esc-agent"><div class="esc-blocks">{markdown(visible_text(text))}</div>'
                    f'<div class="esc-tail"></div><div class="esc-extra">{extra}</div></div>', {"c": "msg"})
        state = self._stream.get(key)
        if state is None or len(text) < state[1]:  # drawn the first time: what is settled as blocks
            settled = len(text) if msg.closed else split_frozen(text)
            cut_at = split_frozen(text[:FREEZE_BUDGET]) if settled > FREEZE_BUDGET else settled
            if 0 < cut_at < settled:  # a burst came before the first batch: a budget's worth now, the rest next
                state = self._stream[key] = [cut_at, cut_at, len(msg.blocks)]
                self._behind.add(key)
            else:
                state = self._stream[key] = [settled, len(text), len(msg.blocks)]
        frozen, sent, shown = state  # a late view gets what the others have: blocks text[:frozen], tail up to sent
        blocks = markdown(text[:frozen]) if frozen else ""
        extra = "".join(block_html(b) for b in msg.blocks[:shown])
        return (f'<div class="esc-msg esc-agent"><div class="esc-blocks">{blocks}</div>'
                f'<div class="esc-tail">{esc(text[frozen:sent])}</div><div class="esc-extra">{extra}</div></div>',
                {"c": "msg"})

    def _message_whole(self, msg: Message) -> tuple[str, dict[str, Any]]:
        """An agent's reply or thought as a static copy shows it: all its text rendered
        (a message cut by the turn's end included), no "thinks…", no duration."""
        cached = self.whole.get(msg) if self.whole is not None else None
        if cached is not None and cached[0] == msg.version:
            return cached[1], {"c": "msg"}
        html = self._message_whole_html(msg)
        if self.whole is not None:
            self.whole[msg] = (msg.version, html)
        return html, {"c": "msg"}

    def _message_whole_html(self, msg: Message) -> str:
        extra = "".join(block_html(b) for b in msg.blocks)
        if msg.role == "thought":  # how long it took is left out: a saved form is the same on every run
            return (f'<details class="esc-thought"><summary>{esc(self.speaker)} thought</summary>'
                    f'<div class="esc-thought-text">{esc(msg.text)}</div></details>')
        return (f'<div class="esc-msg esc-agent"><div class="esc-blocks">{markdown(visible_text(msg.text))}</div>'
                f'<div class="esc-extra">{extra}</div></div>')

    def _rewind_here(self, msg: Message) -> str:
        """*Rewind to here* on a prompt whose turn has a checkpoint (engine/review/checkpoints.py),
        behind a confirm step (a ``details``: the question and its Rewind button)."""
        if not self.interactive or not getattr(msg, "checkpointed", False) or msg.rewound:
            return ""
        return (f'<details class="esc-rewind"><summary title="Put the agent\'s folder back as it was before this '
                f'turn, and go on from there">Rewind to here</summary><div class="esc-rewind-ask">Put the '
                f'agent\'s folder back as it was before this turn and go on from here? This turn and the later '
                f'ones stay shown, marked rewound. <button class="esc-btn esc-reject" data-act="rewind" '
                f'data-key="{esc(self.key(msg))}">Rewind</button></div></details>')

    def _buttons(self, perm: Permission) -> str:
        if not self.interactive:
            return ""
        out = []
        for option in perm.options:
            kind = str(option.get("kind", ""))
            tone = "allow" if kind.startswith("allow") else "reject" if kind.startswith("reject") else "other"
            out.append(f'<button class="esc-btn esc-{tone}" data-act="choose" data-key="{esc(self.key(perm))}" '
                       f'data-value="{esc(option.get("optionId"))}" title="{esc(kind)}">'
                       f'{esc(option.get("name") or option.get("optionId"))}</button>')
        return f'<div class="esc-actions">{"".join(out)}</div>'

    def _ask(self, perm: Permission) -> str:
        """The permission part of a card: the question and the agent's options while
        pending; one line saying who answered once settled."""
        if perm.state != "pending":
            tone = _answer_tone(perm)
            mark = {"completed": "✓", "refused": "✕", "cancelled": "–"}[tone]
            return f'<div class="esc-answer esc-ans-{tone}">{mark} {esc(answer_label(perm))}</div>'
        if not self.interactive:  # a saved form: nobody is asked any more
            return (f'<div class="esc-ask"><div class="esc-ask-q"><b>{esc(self.speaker)}</b> asked permission</div>'
                    f'{_unanswered()}</div>')
        deciding = (' <span class="esc-dim">deciding… (rule plugins are answering)</span>'
                    if perm.deciding else f' <span class="esc-dim">— {esc(perm.note)}</span>' if perm.note else "")
        who = f'<b>{esc(self.speaker)}</b> asks permission'
        if perm.tool_call is not None and perm.tool_call.origin == BUDGET:  # made by the budget, whatever an id says
            who = '<b>The budget</b> is spent: go on?'
        return (f'<div class="esc-ask" data-key="{esc(self.key(perm))}"><div class="esc-ask-q">'
                f'{who}{deciding}</div>{self._buttons(perm)}</div>')

    def _plan_ask(self, perm: Permission) -> str:
        body = f'<div class="esc-plan-text">{markdown(perm.plan or "")}</div>'
        if perm.state != "pending":
            tone = _answer_tone(perm) if perm.state == "cancelled" else (
                "completed" if _chosen_kind(perm).startswith("allow") else "info")
            return (f'<details class="esc-plan-done"><summary class="esc-answer esc-ans-{tone}">'
                    f'{esc(answer_label(perm))}</summary>{body}</details>')
        controls = ""
        if self.interactive:
            k = esc(self.key(perm))
            controls = (f'<textarea class="esc-feedback" data-field="feedback" rows="2" '
                        f'placeholder="What should change? (sent to the agent as is)"></textarea>'
                        f'<div class="esc-actions"><button class="esc-btn esc-allow" data-act="approve" data-key="{k}">'
                        f'Approve</button><button class="esc-btn esc-other" data-act="keep" data-key="{k}">'
                        f'Keep planning</button></div>')
        else:
            controls = _unanswered()
        return (f'<div class="esc-ask" data-key="{esc(self.key(perm))}"><div class="esc-ask-q">'
                f'<b>{esc(self.speaker)}</b> presents a plan</div>{body}{controls}</div>')

    def _tool(self, call: ToolCall) -> tuple[str, dict[str, Any]]:
        perm = self._perm_of.get(id(call))
        if perm is not None and self.key(perm) not in self._keys:
            perm = None
        word, tone = tool_status(call, perm)
        pending = perm is not None and perm.state == "pending"
        if pending and not self.interactive:
            word, tone = "unanswered", "cancelled"
        if perm is not None and perm.plan is not None:
            body = ""  # the plan is the card: not its raw input again
            ask = self._plan_ask(perm)
        elif perm is not None:
            asked = perm.request or call
            body = asked_body_html(call, asked, perm.state != "pending")
            ask = self._ask(perm)
            if word and perm.state != "pending" and answer_label(perm).casefold() == word.casefold():
                ask = ""  # the head's "rejected by you" says all the answer line would
        else:  # no card shown here: what its card asked (if it had one), then what it did
            body = asked_body_html(call, call.asked, True) if call.asked is not None else tool_body_html(call)
            ask = ""
        if call.kernel_task is not None:  # a run_code left running as a task: its state, output, Interrupt
            body += task_html(call.kernel_task, self.key(call) if self.interactive else None)
        nested = "".join(self._subagent(sub, self.key(call)) for sub in call.subagents)
        pending = pending or self._nested_waiting(call.subagents)  # a subagent's card is pinned with its parent call
        cls = "esc-card esc-tool" + (" esc-pending" if pending and self.interactive else "")
        shown = perm.request if perm is not None else call.asked
        html = f'<div class="{cls}">{tool_header_html(call, word, tone, shown)}{body}{ask}{nested}</div>'
        return html, {"c": "tool", "p": 1 if pending else 0, "t": (shown or call).title or "a tool call"}

    def _standalone_permission(self, perm: Permission) -> tuple[str, dict[str, Any]]:
        call = perm.tool_call
        asked = perm.request or call
        title = (asked.title if asked else None) or "a tool"
        pending = perm.state == "pending"
        if perm.plan is not None:
            ask = self._plan_ask(perm)
            head = ""
        else:
            ask = self._ask(perm)
            if call is not None:
                status = tool_status(call, perm) if self.interactive or not pending else ("unanswered", "cancelled")
                head = tool_header_html(call, *status, asked) + asked_body_html(call, asked or call, not pending)
            else:
                head = f'<div class="esc-tool-header"><b>{esc(title)}</b></div>'
        cls = "esc-card esc-permission" + (" esc-pending" if pending and self.interactive else "")
        return f'<div class="{cls}">{head}{ask}</div>', {"c": "card", "p": 1 if pending else 0, "t": title}

    def _question(self, q: Question) -> tuple[str, dict[str, Any]]:
        key = esc(self.key(q))
        link = ""
        if q.url:
            link = (f'<div><a href="{esc(q.url)}" target="_blank" rel="noopener noreferrer">{esc(q.url)}</a></div>'
                    if q.url.startswith(("https://", "http://")) else pre(q.url))
        head = f'<div class="esc-ask-q"><b>{esc(self.speaker)}</b> asks: {esc(q.message)}</div>{link}'
        if q.state != "pending":
            lines = render_item(q).splitlines()
            answer = "✓ answered" if q.state == "accept" and q.answer else (
                esc(lines[-1].strip()) if lines else esc(q.state))
            fields = ""
            if q.answer:
                fields = "".join(f'<div><span class="esc-dim">{esc(forms.field_label(q.schema, k) if q.schema else k)}'
                                 f'</span>: {esc(v)}</div>' for k, v in q.answer.items())
                fields = f'<div class="esc-form-answer">{fields}</div>'
            tone = "completed" if q.state == "accept" else "cancelled"
            return (f'<div class="esc-card esc-question">{head}<div class="esc-answer esc-ans-{tone}">{answer}</div>'
                    f'{fields}</div>', {"c": "card"})
        try:
            body = self._form(q) if self.interactive else _unanswered()
        except Exception as exc:  # a schema no form can show: it can still be declined
            log.warning("form of %s not drawn", q.key, exc_info=True)
            acts = "".join(f'<button class="esc-btn esc-other" data-act="{a}" data-key="{key}">{t}</button>'
                           for a, t in (("decline", "Decline"), ("cancel_q", "Cancel")))
            body = (f'<div class="esc-error">The form could not be drawn ({esc(type(exc).__name__)}: {esc(exc)}).'
                    f'</div><div class="esc-actions">{acts}</div>')
        error = self._form_errors.get(self.key(q))
        err = f'<div class="esc-error">{esc(error)}</div>' if error else ""
        return (f'<div class="esc-card esc-question{" esc-pending" if self.interactive else ""}" data-key="{key}">'
                f'<div class="esc-ask" data-key="{key}">{head}{body}{err}</div></div>',
                {"c": "card", "p": 1, "t": q.message or "a question"})

    def _form(self, q: Question) -> str:
        key = esc(self.key(q))
        rows = []
        if q.mode == "form":
            specs = dict((q.schema or {}).get("properties") or {})
            required = set(forms.required(q.schema))
            for name, spec in specs.items():
                rows.append(_field_html(name, spec, name in required))
            buttons = [("answer", "Submit", "allow"), ("decline", "Decline", "other"), ("cancel_q", "Cancel", "other")]
        elif q.mode == "url":
            buttons = [("answer", "Done", "allow"), ("decline", "Decline", "other"), ("cancel_q", "Cancel", "other")]
        else:
            for item in q.questions:
                spec = {"title": item.get("question"), "type": "string"}
                if item.get("options"):
                    spec["enum"] = list(item["options"])
                rows.append(_field_html(str(item.get("id")), spec, False))
            buttons = [("answer", "Send", "allow")]
        acts = "".join(f'<button class="esc-btn esc-{tone}" data-act="{act}" data-key="{key}">{label}</button>'
                       for act, label, tone in buttons)
        return f'<div class="esc-form">{"".join(rows)}</div><div class="esc-actions">{acts}</div>'

    def _subagent(self, sub: Subagent, owner_key: str) -> str:
        skey = self.key(sub)
        feed = self._nested.get(skey)
        if feed is None:
            feed = self._nested[skey] = Feed(sub.conversation, speaker=f"{self.speaker} › {sub.name}",
                                             interactive=self.interactive, prefix=skey + "/")
            feed.on_ops = lambda *_a, k=skey: self._nested_changed(k)
        self._owner[skey] = owner_key
        inner = "".join(item_html(k, h, m) for k, h, m in feed.snapshot_items())
        return (f'<div class="esc-subagent"><div class="esc-sub-head">{esc(subagent_head(sub))}</div>'
                f'{inner}</div>')

    def _note(self, item: Item) -> str:
        if isinstance(item, Notice):
            detail = pre(item.detail) if item.detail else ""
            who = f'{esc(self.speaker)} · {esc(item.severity)}: ' if item.origin == "agent" else ""
            level = item.level if item.level in ("info", "warning", "error") else "info"
            return f'<div class="esc-notice esc-lvl-{level}">{who}<b>{esc(item.text)}</b>{detail}</div>'
        if isinstance(item, Compaction):
            summary = (f'<details><summary>summary</summary>{pre(item.summary_text)}</details>'
                       if item.summary_text else "")
            status = item.status if item.status in ("in_progress", "completed", "failed", "cancelled") else "other"
            return (f'<div class="esc-compaction esc-cst-{status}"><b>{esc(compaction_head(item))}</b>'
                    f'{summary}{pre(item.error) if item.error else ""}</div>')
        if isinstance(item, Unknown):
            import json

            return (f'<div class="esc-notice esc-dim">Unknown update <code>{esc(item.raw.get("sessionUpdate", "?"))}'
                    f'</code>: {esc(item.reason)}<details><summary>raw</summary>'
                    f'{pre(json.dumps(item.raw, indent=1, default=str)[:2000])}</details></div>')
        return pre(render_item(item, self.speaker))

    # -- answers from the front-end -------------------------------------------------------------------------
    def form_error(self, q: Question, message: str | None) -> None:
        """Show (or clear, with None) an error under question ``q``'s form — in the feed
        that shows it (a subagent's question in its nested feed, which redraws its owner)."""
        owner = self._owner_of(q) or self
        key = owner.key(q)
        if message is None:
            owner._form_errors.pop(key, None)
        else:
            owner._form_errors[key] = message
        owner._dirty[key] = q
        if owner.on_ops is not None:
            owner.on_ops([], 0, True)


def form_values(q: Question, fields: dict[str, Any]) -> dict[str, Any]:
    """The answer to question ``q`` from the front-end's ``fields`` (name -> the text
    typed, the index of the choice made, a list of indexes, or a bool), each as its
    schema's type. Fields the user did not give are left out (never invented);
    ``ValueError`` naming a field whose text is not of its type."""
    out: dict[str, Any] = {}
    if q.mode == "form":
        specs = dict((q.schema or {}).get("properties") or {})
    else:
        specs = {str(i.get("id")): ({"type": "string", "enum": list(i["options"])} if i.get("options")
                                    else {"type": "string"}) for i in q.questions}
    for name, value in (fields or {}).items():
        spec = specs.get(name)
        if spec is None:
            continue
        choices = _choices(spec)
        if spec.get("type") == "array":
            options = _choices(spec.get("items") or {})
            out[name] = [options[int(i)][1] for i in value or [] if 0 <= int(i) < len(options)]
        elif choices:
            if value in (None, ""):
                continue
            index = int(value)
            if 0 <= index < len(choices):
                out[name] = choices[index][1]
        elif spec.get("type") == "boolean":
            if value in ("yes", True):
                out[name] = True
            elif value in ("no", False):
                out[name] = False
        elif q.mode == "form":
            if value in (None, ""):
                continue
            out[name] = forms.parse_text(name, spec, str(value))
        else:
            out[name] = str(value)
    return out


def _choices(spec: dict) -> list[tuple[str, Any]]:
    """(label, value) of an enum (``enum`` with ``enumNames``, or ``oneOf``/``anyOf`` consts)."""
    if spec.get("enum"):
        values = list(spec["enum"])
        titles = spec.get("enumNames") or []
        if len(titles) == len(values):
            return list(zip(map(str, titles), values, strict=True))
        return [(str(v), v) for v in values]
    consts = [o for o in spec.get("oneOf") or spec.get("anyOf") or [] if isinstance(o, dict) and "const" in o]
    return [(str(o.get("title", o["const"])), o["const"]) for o in consts]


_PLACEHOLDER = {"integer": "an integer", "number": "a number", "email": "name@example.com", "uri": "https://…",
                "date": "YYYY-MM-DD", "date-time": "YYYY-MM-DDThh:mm:ssZ"}


def _field_html(name: str, spec: dict, required: bool) -> str:
    """One form field, showing the schema's ``default`` when it has one and nothing
    otherwise (no invented value): a menu with no choice made, yes/no with none picked,
    an empty text box. ``data-required`` marks what Submit waits for; ``data-default``
    a required field's shown default, which counts as given (an optional field counts only
    once touched: no value the user did not give is sent)."""
    label = esc((spec.get("title") or name) + (" *" if required else ""))
    attrs = f'data-field="{esc(name)}"' + (' data-required="1"' if required else "")
    default = spec.get("default")
    kind = spec.get("type", "string")
    choices = _choices(spec)
    help_ = f'<span class="esc-dim esc-small">{esc(spec["description"])}</span>' if spec.get("description") else ""
    if kind == "array":
        options = _choices(spec.get("items") or {})
        chosen = set(map(str, default or ()))
        opts = "".join(f'<option value="{i}"{" selected" if str(v) in chosen else ""}>{esc(label_)}</option>'
                       for i, (label_, v) in enumerate(options))
        extra = ' data-default="1"' if default and required else ""
        return (f'<label class="esc-field"><span>{label}</span><select multiple {attrs}{extra}>{opts}</select>'
                f'{help_}</label>')
    if choices:
        index = next((i for i, (_l, v) in enumerate(choices) if v == default), None)
        opts = '<option value="">—</option>' + "".join(
            f'<option value="{i}"{" selected" if i == index else ""}>{esc(label_)}</option>'
            for i, (label_, _v) in enumerate(choices))
        extra = ' data-default="1"' if index is not None and required else ""
        return f'<label class="esc-field"><span>{label}</span><select {attrs}{extra}>{opts}</select>{help_}</label>'
    if kind == "boolean":
        value = "yes" if default is True else "no" if default is False else ""
        opts = "".join(f'<option value="{v}"{" selected" if v == value else ""}>{t}</option>'
                       for v, t in (("", "—"), ("yes", "yes"), ("no", "no")))
        extra = ' data-default="1"' if value and required else ""
        return f'<label class="esc-field"><span>{label}</span><select {attrs}{extra}>{opts}</select>{help_}</label>'
    placeholder = esc(spec.get("description") or _PLACEHOLDER.get(spec.get("format") or kind, ""))
    value = "" if default is None else esc(default)
    extra = ' data-default="1"' if default is not None and required else ""
    return (f'<label class="esc-field"><span>{label}</span><input type="text" {attrs}{extra} value="{value}" '
            f'placeholder="{placeholder}"></label>')
