"""ipywidgets views of an agent: its transcript, messages, tool calls, plan, cards.

Views subscribe to the agent's :class:`~escouade_nb.core.conversation.Conversation` and
never speak ACP. Model changes only mark views dirty; a :class:`Throttle` per agent
redraws at most ``RENDERS_PER_SECOND`` times a second, each distinct redraw once per
flush. A streaming agent message keeps its settled paragraphs in frozen HTML widgets and
re-sends only the paragraph still growing, so a long reply is not re-sent on every
chunk. Every view's ``repr`` is a deterministic plain-text render of what it shows.

Views let go: each keeps the :class:`~escouade_nb.core.observers.Subscription` tokens of
what it listens to (:class:`Releasing`), and its ``close()`` ends them, drops its pending
redraws and closes every widget below it (ipywidgets' ``Box.close()`` closes only the box,
and a child left open stays in ipywidgets' registry with the callbacks that hold the view).
"""

from __future__ import annotations

import asyncio
import functools
import json
import weakref
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import ipywidgets as w

from ..core import forms
from ..core.conversation import (Change, Compaction, Conversation, Item, Message, Notice, Permission, Plan, Question, Subagent,
                                 ToolCall, Unknown)
from ..core.observers import Subscription
from ..core.plans import visible_text
from ..core.render_text import answer_label, compaction_head, render_item, render_items, subagent_head, subagent_text
from .render import block_html, esc, markdown, plan_html, pre, split_frozen, tool_body_html, tool_header_html

RENDERS_PER_SECOND = 20

log = logging.getLogger(__name__)


def on_loop(fn: Callable) -> Callable:
    """Bind a widget callback to the event loop that builds the view (the kernel's).

    JupyterLab ≥ 4.6 may send widget messages over a kernel subshell, and ipykernel then
    runs the callback on that subshell's thread and loop. Agents live on the kernel's main
    loop, so the callback is handed to it with ``call_soon_threadsafe``; on that loop
    already, it runs at once. Outside any loop (a plain script) ``fn`` is returned as is."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return fn

    def call(*args, **kwargs):
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is loop:
            fn(*args, **kwargs)
        else:
            loop.call_soon_threadsafe(functools.partial(fn, *args, **kwargs))
    return call


class FullText:
    """Mixin for displayed views: their ``text/plain`` is the whole plain-text repr
    (ipywidgets cuts it at 110 characters), for nbval, nbconvert and text frontends."""

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle:
            bundle["text/plain"] = repr(self)
        return bundle


class Throttle:
    """Coalesces redraws: ``request(fn)`` runs each distinct ``fn`` once, at most
    ``RENDERS_PER_SECOND`` times a second, on the running loop (immediately when no
    loop runs, e.g. in a plain script or a synchronous test).

    Requests are keyed by ``fn`` itself: a bound method is a fresh object at every
    ``self.refresh``, but bound methods of one object and function compare (and hash)
    equal, so 2,000 requests between two flushes run it once. ``cancel(fn)`` drops a
    pending request (a closed view's)."""

    def __init__(self, rate: float = RENDERS_PER_SECOND) -> None:
        self.interval = 1.0 / rate
        self._pending: dict[Callable[[], None], None] = {}  # an ordered set: first request first
        self._handle: asyncio.TimerHandle | None = None
        self._last = 0.0
        self.flushes = 0

    def request(self, fn: Callable[[], None]) -> None:
        self._pending.setdefault(fn, None)
        if self._handle is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        delay = max(0.0, self._last + self.interval - loop.time())
        self._handle = loop.call_later(delay, self.flush)

    def cancel(self, fn: Callable[[], None]) -> None:
        """Forget a pending request of ``fn`` (nothing if there is none)."""
        self._pending.pop(fn, None)
        if not self._pending and self._handle is not None:
            self._handle.cancel()
            self._handle = None

    @property
    def pending(self) -> int:
        """How many distinct redraws wait for the next flush."""
        return len(self._pending)

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        pending, self._pending = self._pending, {}
        try:
            self._last = asyncio.get_running_loop().time()
        except RuntimeError:
            pass
        self.flushes += 1
        for fn in pending:
            try:
                fn()
            except Exception:  # one failing view does not stop the others' redraws
                log.exception("a view's redraw failed")


def close_tree(widget: w.Widget) -> None:
    """Close ``widget`` and every widget below it (children, layout, style). A
    :class:`Releasing` view below is closed through its own ``close()``."""
    if isinstance(widget, Releasing):
        widget.close()
        return
    for child in tuple(getattr(widget, "children", None) or ()):
        if isinstance(child, w.Widget):
            close_tree(child)
    _close_parts(widget)
    widget.close()


def _close_parts(widget: w.Widget) -> None:
    """A widget's own layout and style are widgets too (made when it opened)."""
    for part in ("layout", "style"):
        value = getattr(widget, part, None)
        if isinstance(value, w.Widget):
            value.close()


class Releasing:
    """Mixin for a view (before the ipywidgets base): ``hold(token)`` keeps a
    subscription's token (a :class:`~escouade_nb.core.observers.Subscription`, or any
    call that ends one), ``redraws_on(throttle, fn)`` a redraw it may request;
    ``close()`` ends the subscriptions, drops the pending redraws, closes every widget
    below and then the view itself. Closing twice is a no-op; ``closed`` tells."""

    def hold(self, token: Subscription | Callable[[], object]) -> Subscription | Callable[[], object]:
        self.__dict__.setdefault("_held", []).append(token)
        return token

    def redraws_on(self, throttle: Throttle, fn: Callable[[], None]) -> None:
        self.__dict__.setdefault("_redraws", []).append((throttle, fn))

    @property
    def closed(self) -> bool:
        return self.__dict__.get("_closed", False)

    def close(self) -> None:
        if self.__dict__.get("_closed"):
            return
        self.__dict__["_closed"] = True
        for token in self.__dict__.pop("_held", ()):
            token()
        for throttle, fn in self.__dict__.pop("_redraws", ()):
            throttle.cancel(fn)
        try:
            self.release()
        except Exception:  # e.g. closed by ipywidgets' __del__ after a failed __init__
            log.exception("closing %s", type(self).__name__)
        for child in tuple(getattr(self, "children", None) or ()):
            if isinstance(child, w.Widget):
                close_tree(child)
        _close_parts(self)
        super().close()

    def release(self) -> None:
        """What a view lets go of besides its tokens and children (overridden)."""


_cells: dict[str, tuple[object, list[weakref.ref]]] = {}
"""cell id -> (the run of that cell that showed them, weak references to its views)."""


def current_run() -> tuple[str | None, object]:
    """(cell id, run) of the notebook cell being run: JupyterLab and Notebook 7 send the
    cell's id in the execute request's metadata; the run is that request's ``msg_id``.
    ``(None, None)`` in a script or a frontend that does not say."""
    try:
        from IPython import get_ipython
        kernel = getattr(get_ipython(), "kernel", None)
        parent = kernel.get_parent() if kernel is not None else None
    except Exception:
        return None, None
    cell = ((parent or {}).get("metadata") or {}).get("cellId")
    if not isinstance(cell, str) or not cell:
        return None, None
    return cell, ((parent or {}).get("header") or {}).get("msg_id")


def shown_in_cell(view: Releasing, cell: str | None, run: object = None) -> None:
    """``view`` is shown by notebook cell ``cell`` in its run ``run``: when the cell runs
    again (another run; ``run`` None counts as a new one each time), the views it showed
    before are closed — their output is gone, they must not stay subscribed. A view
    closed otherwise drops out by itself (weak references)."""
    if cell is None:
        return
    before, refs = _cells.get(cell, (None, []))
    if run is None or run != before:
        for ref in refs:
            old = ref()
            if old is not None and old is not view:
                old.close()
        refs = []
    refs = [r for r in refs if r() is not None] + [weakref.ref(view)]
    _cells[cell] = (run if run is not None else object(), refs)


class Tasks:
    """The owner of tasks a view starts: kept until done (asyncio keeps only a weak
    reference to a task), an error logged, ``cancel()`` ends those still running."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task] = set()

    def start(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: a task failed", self.name, exc_info=task.exception())

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def __len__(self) -> int:
        return len(self._tasks)


clicks = Tasks("widget clicks")
"""The owner of what a click starts on an agent (restart, stop, sign in, a mode, an
option, a model): operations of the agent, not of the view, so closing the view that was
clicked does not cancel them (a restart cut in the middle would leave the agent half
started). They are kept here until done; the agent's own ``close()`` ends what they wait
for, and at kernel exit the squad kills every agent process."""


class ItemView(Releasing, w.VBox):
    """Base of the per-item views: ``redraw()`` brings the widget up to the item;
    ``close()`` closes its buttons and fields with it."""

    def __init__(self, item: Item, speaker: str = "agent", **kwargs) -> None:
        super().__init__(**kwargs)
        self.layout.flex = "0 0 auto"  # never squeezed by a long transcript: its buttons stay clickable
        self.item = item
        self.speaker = speaker
        self.drawn_version = -1

    def redraw(self) -> None:
        if self.item.version != self.drawn_version:
            self.drawn_version = self.item.version
            self.draw()

    def draw(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def behind(self) -> bool:
        """More to draw than one redraw does (see :class:`MessageView`)."""
        return False

    def __repr__(self) -> str:
        return render_item(self.item, self.speaker)


FREEZE_BUDGET = 6 * 1024
"""Characters of markdown a message view renders into frozen paragraphs per redraw (about
2 ms): a reply that arrives faster is frozen over several redraws, so no redraw holds
the kernel's loop for long (an 80 KB burst rendered at once took 25 ms per view)."""


class MessageView(ItemView):
    """An agent message as markdown (settled paragraphs frozen), a user message as
    text, a thought collapsed. ``redraw()`` returns False while it is behind (more
    settled text than :data:`FREEZE_BUDGET` came since the last redraw): call it again."""

    def __init__(self, item: Message, speaker: str = "agent") -> None:
        super().__init__(item, speaker, layout=w.Layout(margin="2px 0"))
        self.add_class(f"escouade-message-{item.role}")
        self._frozen_upto = 0
        self._behind = False
        self._tail = w.HTML()
        if item.role == "thought":
            self._body = w.VBox([self._tail])
            self._accordion = w.Accordion(children=[self._body], titles=(f"{speaker} thinks…",), selected_index=None)
            self.children = [self._accordion]
        else:
            self._body = w.VBox([self._tail])
            self.children = [self._body]
        self.redraw()

    def draw(self) -> None:
        msg: Message = self.item
        text = msg.text
        extra = "".join(block_html(b) for b in msg.blocks)
        if msg.role == "user":
            self._tail.value = (f'<div style="background:var(--jp-layout-color2,#eef2f6);border-radius:6px;'
                                f'padding:4px 8px;white-space:pre-wrap"><b>you</b>: {esc(text)}</div>{extra}')
            return
        if msg.role == "thought":
            self._tail.value = f'<div style="color:#6e7781;white-space:pre-wrap;font-style:italic">{esc(text)}</div>'
            return
        text = visible_text(text)
        cut_at = len(text) if msg.closed else split_frozen(text)
        self._behind = cut_at - self._frozen_upto > FREEZE_BUDGET
        if self._behind:  # freeze a budget's worth, at a point that renders the same whatever follows
            cut_at = split_frozen(text[:self._frozen_upto + FREEZE_BUDGET])
            if cut_at <= self._frozen_upto:  # no safe point in the budget (one huge line): take it whole
                cut_at = len(text) if msg.closed else split_frozen(text)
                self._behind = False
        if cut_at > self._frozen_upto:
            frozen = w.HTML(markdown(text[self._frozen_upto:cut_at]))
            self._frozen_upto = cut_at
            self._body.children = (*self._body.children[:-1], frozen, self._tail)
        tail = text[self._frozen_upto:]
        if self._behind:  # the rest shows as it is frozen, a budget a redraw (never re-sent whole)
            self._tail.value = extra
        else:
            self._tail.value = (markdown(tail) if tail else "") + extra

    @property
    def behind(self) -> bool:
        return self._behind

    def redraw(self) -> bool:
        if self.item.version != self.drawn_version or self._behind:
            self.drawn_version = self.item.version
            self.draw()
        return not self._behind


class ToolCallView(ItemView):
    """A tool call card: status, title, kind, input, output, diff; below it, the nested
    conversation of each subagent the call started (``nest(subagent)`` makes its view)."""

    def __init__(self, item: ToolCall, speaker: str = "agent",
                 nest: Callable[[Subagent], ItemView] | None = None) -> None:
        super().__init__(item, speaker, layout=w.Layout(border="1px solid #d0d7de", padding="4px", margin="2px 0"))
        self.add_class("escouade-tool-call")
        self._html = w.HTML()
        self._nest = nest
        self.nested: dict[str, ItemView] = {}  # subagent key -> its view
        self.children = [self._html]
        self.redraw()

    def draw(self) -> None:
        self._html.value = tool_header_html(self.item) + tool_body_html(self.item)
        if self._nest is not None and len(self.nested) < len(self.item.subagents):
            for sub in self.item.subagents:
                if sub.key not in self.nested:
                    self.nested[sub.key] = self._nest(sub)
            self.children = [self._html, *self.nested.values()]
        for view in self.nested.values():
            view.redraw()


class SubagentView(ItemView):
    """A subagent (ACP child session) as an indented block: its head line (name, state,
    description), then its own conversation (a :class:`TranscriptView` of it, with its
    cards answerable here; their speaker is "parent › child")."""

    def __init__(self, item: Subagent, speaker: str, throttle: Throttle, on_choose_factory, handlers=None) -> None:
        super().__init__(item, speaker, layout=w.Layout(margin="4px 0 2px 20px", padding="0 0 0 6px",
                                                        border_left="3px solid #8250df"))
        self.add_class("escouade-subagent")
        self._head = w.HTML()
        self.transcript = TranscriptView(item.conversation, throttle, speaker=f"{speaker} › {item.name}",
                                         on_choose_factory=on_choose_factory, items=list(item.conversation.items),
                                         handlers=handlers)
        self.transcript.layout.max_height = None
        self.children = [self._head, self.transcript]
        self.redraw()

    def draw(self) -> None:
        self._head.value = f'<div style="color:#8250df"><b>{esc(subagent_head(self.item))}</b></div>'

    def __repr__(self) -> str:
        return subagent_text(self.item, self.speaker)


class PermissionView(ItemView):
    """A permission card: what the agent wants, one button per option the agent
    offered (its own names), then who answered. ``on_choose(option_id)`` is the click."""

    def __init__(self, item: Permission, speaker: str = "agent",
                 on_choose: Callable[[str], None] | None = None) -> None:
        super().__init__(item, speaker, layout=w.Layout(border="2px solid #bf8700", padding="6px", margin="4px 0"))
        self.add_class("escouade-permission")
        self._on_choose = on_choose
        self._head = w.HTML()
        self.buttons = []
        for option in item.options:
            kind = option.get("kind", "")
            button = w.Button(description=str(option.get("name") or option.get("optionId")),
                              button_style="success" if kind.startswith("allow") else
                              "danger" if kind.startswith("reject") else "",
                              tooltip=f"{option.get('optionId')} ({kind})",
                              layout=w.Layout(width="auto"))
            button.on_click(on_loop(lambda _b, oid=option.get("optionId"): self._click(oid)))
            self.buttons.append(button)
        self._answer = w.HTML()
        self.children = [self._head, w.HBox(self.buttons), self._answer]
        self.redraw()

    def _click(self, option_id: str) -> None:
        if self.item.state == "pending" and self._on_choose is not None:
            self._on_choose(option_id)

    def draw(self) -> None:
        perm: Permission = self.item
        call = perm.tool_call
        title = (call.title if call else None) or "a tool"
        body = tool_body_html(call) if call is not None else ""
        self._head.value = (f'<div><b>{esc(self.speaker)}</b> asks permission: <b>{esc(title)}</b>'
                            f'{" <i>(" + esc(call.kind) + ")</i>" if call and call.kind else ""}</div>{body}')
        settled = perm.state != "pending"
        for b in self.buttons:
            b.disabled = settled
        if settled:
            self.layout.border = "1px solid #d0d7de"
            self._answer.value = f'<div class="escouade-answer"><b>{esc(answer_label(perm))}</b></div>'
        elif perm.deciding:
            self.layout.border = "1px dashed #d0d7de"
            self._answer.value = '<div class="escouade-answer" style="color:#8a8a8a">Deciding…</div>'
        else:
            self.layout.border = "2px solid #bf8700"
            self._answer.value = '<div class="escouade-answer" style="color:#bf8700">Waiting for you</div>'


class PlanApprovalView(ItemView):
    """A plan to approve (ExitPlanMode): the plan's markdown, Approve, and Keep planning
    with free-text feedback. ``on_approve()`` / ``on_keep_planning(feedback)``."""

    def __init__(self, item: Permission, speaker: str = "agent", on_approve: Callable[[], None] | None = None,
                 on_keep_planning: Callable[[str], None] | None = None) -> None:
        super().__init__(item, speaker, layout=w.Layout(border="2px solid #8250df", padding="6px", margin="4px 0"))
        self.add_class("escouade-plan-approval")
        self._plan = w.HTML()
        self.approve_button = w.Button(description="Approve", button_style="success", layout=w.Layout(width="auto"))
        self.keep_button = w.Button(description="Keep planning", layout=w.Layout(width="auto"))
        self.feedback = w.Textarea(placeholder="What should change? (sent to the agent as is)",
                                   layout=w.Layout(width="100%", height="48px"))
        self.approve_button.on_click(on_loop(
            lambda _b: on_approve and self.item.state == "pending" and on_approve()))
        self.keep_button.on_click(on_loop(
            lambda _b: on_keep_planning and self.item.state == "pending" and on_keep_planning(self.feedback.value)))
        self._answer = w.HTML()
        self.children = [self._plan, self.feedback, w.HBox([self.approve_button, self.keep_button]), self._answer]
        self.redraw()

    def draw(self) -> None:
        perm: Permission = self.item
        self._plan.value = (f'<div><b>{esc(self.speaker)}</b> presents a plan:</div>'
                            f'<div class="escouade-plan-text">{markdown(perm.plan or "")}</div>')
        settled = perm.state != "pending"
        for control in (self.approve_button, self.keep_button, self.feedback):
            control.disabled = settled
        self._answer.value = (f'<div class="escouade-answer"><b>{esc(answer_label(perm))}</b></div>' if settled
                              else '<div class="escouade-answer" style="color:#8250df">Waiting for you</div>')


def _choices(spec: dict) -> list[tuple[str, Any]]:
    """(label, value) of an enum (``enum`` with ``enumNames``, or ``oneOf``/``anyOf`` consts)."""
    if spec.get("enum"):
        values = list(spec["enum"])
        titles = spec.get("enumNames") or []
        return list(zip(map(str, titles), values)) if len(titles) == len(values) else [(str(v), v) for v in values]
    consts = [o for o in spec.get("oneOf") or spec.get("anyOf") or [] if isinstance(o, dict) and "const" in o]
    return [(str(o.get("title", o["const"])), o["const"]) for o in consts]


_PLACEHOLDER = {"integer": "an integer", "number": "a number", "email": "name@example.com", "uri": "https://…",
                "date": "YYYY-MM-DD", "date-time": "YYYY-MM-DDThh:mm:ssZ"}


def _field_widget(name: str, spec: dict, required: bool) -> w.Widget:
    """The widget of one form field, showing the schema's ``default`` when it has one and
    nothing otherwise (no invented value): a dropdown with no choice made, yes/no
    buttons with none pressed, an empty text box (numbers are typed, then parsed as the
    schema's type: ``integer`` or ``number``)."""
    label = (spec.get("title") or name) + (" *" if required else "")
    kind = spec.get("type", "string")
    style = {"description_width": "initial"}
    choices = _choices(spec)
    if choices:
        default = spec.get("default")
        return w.Dropdown(options=choices, value=default if default in [v for _, v in choices] else None,
                          description=label, style=style)
    if kind == "array":
        options = _choices(spec.get("items") or {})
        values = [v for _, v in options]
        return w.SelectMultiple(options=options, value=tuple(v for v in spec.get("default") or () if v in values),
                                description=label, style=style)
    if kind == "boolean":
        default = spec.get("default")
        return w.ToggleButtons(options=[("yes", True), ("no", False)],
                               value=default if isinstance(default, bool) else None, description=label, style=style)
    default = spec.get("default")
    return w.Text(value="" if default is None else str(default), description=label, style=style,
                  placeholder=str(spec.get("description") or _PLACEHOLDER.get(spec.get("format") or kind, "")),
                  layout=w.Layout(width="95%"))


class QuestionView(ItemView):
    """A question card. Form mode: a form generated from the requested JSON schema
    (strings, numbers, integers, booleans, enums, multi-selects; required fields marked)
    with Submit / Decline / Cancel. Submit is off while a required field is empty; the
    answer holds only the fields the user filled in (touched) — and a required field
    showing the schema's default — never invented values; it is validated against the
    schema (:meth:`QuestionCard.accept`), an error shown under the form. URL mode: the
    link and Done. Text questions: one field per question (a dropdown when options are
    given) and Send."""

    def __init__(self, item: Question, speaker: str = "agent",
                 on_answer: Callable[[str, dict | None], None] | None = None) -> None:
        super().__init__(item, speaker, layout=w.Layout(border="2px solid #1f6feb", padding="6px", margin="4px 0"))
        self.add_class("escouade-question")
        self._on_answer = on_answer
        self._head = w.HTML()
        self.inputs: dict[str, w.Widget] = {}
        self.touched: set[str] = set()
        self._specs: dict[str, dict] = dict((item.schema or {}).get("properties") or {})
        self._required = [f for f in forms.required(item.schema) if f in self._specs]
        for name, spec in self._specs.items():
            self.inputs[name] = _field_widget(name, spec, name in self._required)
            self.inputs[name].observe(functools.partial(self._touch, name), names="value")
        for q in item.questions:
            if q.get("options"):
                self.inputs[q["id"]] = w.Dropdown(options=q["options"], description=q["question"],
                                                  style={"description_width": "initial"})
            else:
                self.inputs[q["id"]] = w.Text(description=q["question"], style={"description_width": "initial"},
                                              layout=w.Layout(width="95%"))
        if item.mode == "url":
            self.submit = w.Button(description="Done", button_style="primary", layout=w.Layout(width="auto"))
        else:
            self.submit = w.Button(description="Send" if item.mode == "text" else "Submit", button_style="primary",
                                   layout=w.Layout(width="auto"))
        self.decline_button = w.Button(description="Decline", layout=w.Layout(width="auto"))
        self.cancel_button = w.Button(description="Cancel", layout=w.Layout(width="auto"))
        self.submit.on_click(on_loop(lambda _b: self._answer("accept")))
        self.decline_button.on_click(on_loop(lambda _b: self._answer("decline")))
        self.cancel_button.on_click(on_loop(lambda _b: self._answer("cancel")))
        self._status = w.HTML()
        buttons = [self.submit] if item.mode == "text" else [self.submit, self.decline_button, self.cancel_button]
        self.children = [self._head, *self.inputs.values(), w.HBox(buttons), self._status]
        self.redraw()

    def _touch(self, name: str, _change: Any = None) -> None:
        self.touched.add(name)
        self._show_missing()

    def _given(self, name: str) -> bool:
        """Whether the form gives a value for field ``name``: touched (or required and
        showing the schema's default) and not empty."""
        if name not in self.touched and not (name in self._required and "default" in self._specs[name]):
            return False
        return self.inputs[name].value not in (None, "")

    def missing(self) -> list[str]:
        """The required fields of a form with no value yet (Submit is off meanwhile)."""
        return [name for name in self._required if not self._given(name)]

    def _show_missing(self) -> None:
        if self.item.state != "pending" or self.item.mode != "form":
            return
        missing = self.missing()
        self.submit.disabled = bool(missing)
        labels = ", ".join(forms.field_label(self.item.schema, name) for name in missing)
        self._status.value = f'<div style="color:#8a8a8a">To fill in: {esc(labels)}</div>' if missing else ""

    def values(self) -> dict:
        """The answer: in form mode the fields given (see :meth:`_given`), each as its
        schema's type (``ValueError`` naming a field whose text is not one); in text mode
        every answer."""
        out = {}
        for name, widget in self.inputs.items():
            if self.item.mode == "form" and not self._given(name):
                continue
            value = widget.value
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(widget, w.Text) and self.item.mode == "form":
                value = forms.parse_text(name, self._specs[name], value)
            out[name] = value
        return out

    def _answer(self, action: str) -> None:
        if self.item.state != "pending" or self._on_answer is None:
            return
        try:
            self._on_answer(action, self.values() if action == "accept" else None)
        except ValueError as exc:  # not what the schema asks for: said under the form, nothing sent
            self._status.value = f'<div style="color:#cf222e">{esc(exc)}</div>'

    def draw(self) -> None:
        q: Question = self.item
        link = (f'<div><a href="{esc(q.url)}" target="_blank" rel="noopener noreferrer">{esc(q.url)}</a></div>'
                if q.url and q.url.startswith(("https://", "http://")) else (pre(q.url) if q.url else ""))
        self._head.value = f'<div><b>{esc(self.speaker)}</b> asks: {esc(q.message)}</div>{link}'
        settled = q.state != "pending"
        for control in (*self.inputs.values(), self.submit, self.decline_button, self.cancel_button):
            control.disabled = settled
        self._show_missing()
        if settled:
            self._status.value = f'<div class="escouade-answer"><b>{esc(render_item(q).splitlines()[-1].strip())}</b></div>'


class _HTMLItemView(ItemView):
    """An item drawn as one HTML widget: subclasses give ``html()``."""

    def __init__(self, item: Item, speaker: str = "agent") -> None:
        super().__init__(item, speaker, layout=w.Layout(margin="2px 0"))
        self._html = w.HTML()
        self.children = [self._html]
        self.redraw()

    def html(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def draw(self) -> None:
        self._html.value = self.html()


class PlanView(_HTMLItemView):
    def html(self) -> str:
        return plan_html(self.item)


class NoticeView(_HTMLItemView):
    """A notice (the client's, or the agent's with its severity), a compaction boundary
    (its summary folded under it), or an update this client does not know (shown raw)."""

    def html(self) -> str:
        item = self.item
        if isinstance(item, Notice):
            color = {"error": "#cf222e", "warning": "#bf8700"}.get(item.level, "#57606a")
            detail = pre(item.detail) if item.detail else ""
            who = (f'{esc(self.speaker)} · {esc(item.severity)}: ') if item.origin == "agent" else ""
            return f'<div style="color:{color}">{who}<b>{esc(item.text)}</b></div>{detail}'
        if isinstance(item, Compaction):
            color = "#cf222e" if item.status == "failed" else "#57606a"
            line = (f'<div style="color:{color};border-top:1px dashed #8a8a8a;margin-top:6px;padding-top:2px">'
                    f'<b>{esc(compaction_head(item))}</b></div>')
            summary = (f'<details><summary>summary</summary>{pre(item.summary_text)}</details>'
                       if item.summary_text else "")
            return line + summary + (pre(item.error) if item.error else "")
        if isinstance(item, Unknown):
            return (f'<div style="color:#8a8a8a">Unknown update '
                    f'<code>{esc(item.raw.get("sessionUpdate", "?"))}</code>: {esc(item.reason)}</div>'
                    + pre(json.dumps(item.raw, indent=1, default=str)[:2000]))
        return pre(render_item(item, self.speaker))


def view_for(item: Item, speaker: str, on_choose_factory, handlers=None,
             nest: Callable[[Subagent], ItemView] | None = None) -> ItemView:
    if isinstance(item, Permission) and item.plan is not None and handlers is not None:
        return PlanApprovalView(item, speaker, *handlers.plan(item))
    if isinstance(item, Question) and handlers is not None:
        return QuestionView(item, speaker, handlers.question(item))
    if isinstance(item, Message):
        return MessageView(item, speaker)
    if isinstance(item, ToolCall):
        return ToolCallView(item, speaker, nest)
    if isinstance(item, Subagent) and nest is not None:  # one no tool call of the parent runs
        return nest(item)
    if isinstance(item, Permission):
        return PermissionView(item, speaker, on_choose_factory(item))
    if isinstance(item, Plan):
        return PlanView(item, speaker)
    return NoticeView(item, speaker)


class TranscriptView(Releasing, w.VBox):
    """The items of a conversation, kept up to date through ``throttle``. ``accept``
    filters which new items appear (a turn's view shows only its own)."""

    def __init__(self, conversation: Conversation, throttle: Throttle, *, speaker: str = "agent",
                 accept: Callable[[Item], bool] | None = None,
                 on_choose_factory: Callable[[Permission], Callable[[str], None] | None] = lambda p: None,
                 items: list[Item] | None = None, handlers=None) -> None:
        super().__init__(layout=w.Layout(max_height="600px", overflow="auto"))
        self.add_class("escouade-transcript")
        self.conversation = conversation
        self.throttle = throttle
        self.speaker = speaker
        self._accept = accept or (lambda item: True)
        self._factory = on_choose_factory
        self._handlers = handlers
        self._views: dict[str, ItemView] = {}
        self._order: list[ItemView] = []
        self._new: list[Item] = list(items if items is not None else [])
        self._dirty: set[str] = set()
        self.hold(conversation.subscribe(self._on_changes))
        self.redraws_on(throttle, self._flush)
        self._flush()

    def _on_changes(self, changes: list[Change]) -> None:
        for change in changes:
            item = change.item
            if item is None:
                continue
            if change.kind == "added":
                if self._accept(item):
                    self._new.append(item)
            elif item.key in self._views:
                self._dirty.add(item.key)
        if self._new or self._dirty:
            self.throttle.request(self._flush)

    def _flush(self) -> None:
        if self.closed:
            return
        later: set[str] = set()  # views behind: the rest at the next flush, not in this one
        if self._new:
            fresh = [view_for(i, self.speaker, self._factory, self._handlers, self._nest) for i in self._new]
            self._new = []
            for v in fresh:
                self._views[v.item.key] = v
                if v.behind:  # drawn in part when made
                    later.add(v.item.key)
            self._order.extend(fresh)
            self.children = tuple(self._order)
        dirty, self._dirty = self._dirty - later, set()
        for key in dirty:
            if self._views[key].redraw() is False:
                later.add(key)
        self._dirty |= later
        if self._dirty:
            self.throttle.request(self._flush)

    def _nest(self, sub: Subagent) -> ItemView:
        return SubagentView(sub, self.speaker, self.throttle, self._factory, self._handlers)

    def view_of(self, item: Item) -> ItemView:
        """The view drawn for ``item``; ``KeyError`` if not drawn (yet)."""
        return self._views[item.key]

    @property
    def items(self) -> list[Item]:
        return [v.item for v in self._order]

    def release(self) -> None:
        self._new = []
        self._dirty = set()

    def __repr__(self) -> str:
        return render_items(self.items, self.speaker)
