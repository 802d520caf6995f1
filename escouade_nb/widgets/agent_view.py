"""The live view of one agent (header, transcript, prompt box) and of one turn.

The module's registries hold no view alive: ``_throttles`` maps an agent (weakly) to
its throttle, which holds a view only while one of its redraws is pending (a closed view
drops its own); ``_views`` maps an agent (weakly) to a weak set of its open views (a
view leaves it when closed); the tasks clicks start belong to :data:`.views.clicks`.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable

import ipywidgets as w

from ..core.conversation import Item, Permission
from ..core.status import BUSY, CAN_RESTART, CAN_SEND, CONTROLS_OFF, AgentStatus
from ..engine.agent import Agent, AuthRequired, Turn
from .render import esc
from .views import current_run, shown_in_cell, FullText, PermissionView, Releasing, Throttle, TranscriptView, clicks, close_tree, on_loop

_serials = itertools.count()

STATUS_TEXT = {s.value: s.text for s in AgentStatus}
"""The words shown for each status (from :attr:`AgentStatus.text`)."""
STATUS_COLOR = {AgentStatus.WAITING: "#bf8700", AgentStatus.EXITED: "#cf222e", AgentStatus.FAILED: "#cf222e",
                AgentStatus.WORKING: "#1f6feb"}


def status_text(status: str) -> str:
    """The words shown for ``status`` (the status itself if unknown)."""
    return STATUS_TEXT.get(status, str(status))


_throttles: weakref.WeakKeyDictionary[Agent, Throttle] = weakref.WeakKeyDictionary()
_views: weakref.WeakKeyDictionary[Agent, weakref.WeakSet] = weakref.WeakKeyDictionary()


def views_of(agent: Agent) -> list[AgentView]:
    """The open :class:`AgentView` s shown for ``agent`` (oldest first)."""
    return sorted((v for v in _views.get(agent, ()) if not v.closed), key=lambda v: v._serial)


def throttle_for(agent: Agent) -> Throttle:
    """One throttle per agent, shared by all its views (≤ 20 redraws a second)."""
    t = _throttles.get(agent)
    if t is None:
        t = _throttles[agent] = Throttle()
    return t


class CardHandlers:
    """What the buttons of plan and question cards do, for one agent."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def _card(self, perm: Permission):
        return next((c for c in self.agent.pending_cards if c.permission is perm), None)

    def plan(self, perm: Permission):
        def approve() -> None:
            card = self._card(perm)
            if card is not None:
                card.approve()

        def keep_planning(feedback: str) -> None:
            card = self._card(perm)
            if card is not None:
                card.keep_planning(feedback)
        return approve, keep_planning

    def question(self, question):
        def answer(action: str, content) -> None:
            card = next((c for c in self.agent.pending_questions if c.question is question), None)
            if card is None:
                return
            if action == "accept":
                card.accept(content)
            elif action == "decline":
                card.decline()
            else:
                card.cancel()
        return answer


def _run(coro) -> None:
    """Run a coroutine from a widget callback on the running loop; its owner is
    :data:`.views.clicks` (an operation of the agent, not cancelled with the view)."""
    clicks.start(coro)


class ControlsView(Releasing, w.HBox):
    """The agent's dials: Escouade's mode, the agent's own mode, its config options
    (select, grouped select, boolean) and the model. Changing one calls the agent at
    once; the agent's own updates move them. A dial whose choices did not change is
    updated in place (same widget), so a frontend never loses the one it holds."""

    def __init__(self, agent: Agent, throttle: Throttle) -> None:
        super().__init__(layout=w.Layout(flex_flow="row wrap"))
        self.add_class("escouade-controls")
        self.agent = agent
        self.throttle = throttle
        self.controls: dict[str, w.Widget] = {}
        self._shapes: dict[str, tuple] = {}
        self._syncing = False
        self.hold(agent.conversation.subscribe(self._on_changes))
        self.hold(agent.on_status.subscribe(self._on_status))
        self.redraws_on(throttle, self.rebuild)
        self.rebuild()

    def _on_status(self, _agent: Agent) -> None:
        self.throttle.request(self.rebuild)

    def _on_changes(self, changes) -> None:
        if any(c.kind == "state" and c.name in ("mode", "config_options", "models") for c in changes):
            self.throttle.request(self.rebuild)

    def _wanted(self) -> dict[str, tuple]:
        """key -> (kind, label, options, value, setter) for every dial to show now."""
        from ..engine.controls import flatten_options
        a = self.agent
        conv = a.conversation
        out: dict[str, tuple] = {}
        modes = a.escouade_modes()
        if len(modes) > 1:
            out["escouade_mode"] = ("select", "Mode", tuple((_mode_label(m, t), m) for m, t in modes.items()),
                                    a.escouade_mode, a.set_escouade_mode)
        if conv.modes and not any(o.get("category") == "mode" for o in conv.config_options):
            choices = tuple((m.get("name") or m.get("id"), m.get("id")) for m in conv.modes.get("availableModes") or [])
            out["agent_mode"] = ("select", "Agent mode", choices, conv.current_mode_id, a.set_mode)
        for option in conv.config_options:
            oid = option.get("id")
            setter = (lambda v, oid=oid: a.set_config_option(oid, v))
            if option.get("type") == "boolean":
                out[f"config:{oid}"] = ("bool", option.get("name") or oid, (), bool(option.get("currentValue")), setter)
            elif option.get("type") == "select":
                pairs = tuple((label, value) for value, label in flatten_options(option.get("options") or []))
                out[f"config:{oid}"] = ("select", option.get("name") or oid, pairs, option.get("currentValue"), setter)
        if not any(o.get("category") == "model" for o in conv.config_options):
            current, choices = a.model_choices()
            if choices:
                out["model"] = ("select", "Model", tuple((label, mid) for mid, label in choices), current, a.set_model)
        return out

    def rebuild(self) -> None:
        if self.closed:
            return
        wanted = self._wanted()
        disabled = self.agent.status in CONTROLS_OFF
        controls: dict[str, w.Widget] = {}
        self._syncing = True
        try:
            for key, (kind, label, options, value, setter) in wanted.items():
                shape = (kind, label, options)
                widget = self.controls.get(key)
                if widget is None or self._shapes.get(key) != shape:
                    if widget is not None:
                        close_tree(widget)
                    widget = self._make(key, kind, label, options)
                    self._shapes[key] = shape
                if kind == "select":
                    widget.value = value if value in [v for _, v in options] else None
                else:
                    widget.value = bool(value)
                widget.disabled = disabled
                controls[key] = widget
            for key, widget in self.controls.items():
                if key not in controls:
                    close_tree(widget)
                    self._shapes.pop(key, None)
        finally:
            self._syncing = False
        self.controls = controls
        if tuple(self.children) != tuple(controls.values()):
            self.children = tuple(controls.values())

    def _make(self, key: str, kind: str, label: str, options: tuple) -> w.Widget:
        if kind == "bool":
            widget = w.Checkbox(description=label, indent=False, layout=w.Layout(width="auto"))
        else:
            widget = w.Dropdown(options=list(options), value=None, description=label,
                                style={"description_width": "initial"}, layout=w.Layout(width="auto"))
        widget.observe(on_loop(lambda ch, key=key: self._changed(key, ch["new"])), names="value")
        return widget

    def _changed(self, key: str, value) -> None:
        if self._syncing or value is None:
            return
        entry = self._wanted().get(key)
        if entry is None or entry[3] == value:
            return
        _run(entry[4](value))

    def __repr__(self) -> str:
        return " ".join(f"{getattr(c, 'description', k)}={c.value!r}" for k, c in self.controls.items())


def _mode_label(mode: str, meaning: str, width: int = 70) -> str:
    label = f"{mode} — {meaning}" if meaning and meaning != mode else mode
    return label if len(label) <= width else label[:width - 1] + "…"


def _chooser(agent: Agent) -> Callable[[Permission], Callable[[str], None]]:
    def factory(perm: Permission) -> Callable[[str], None]:
        def choose(option_id: str) -> None:
            for card in agent.pending_cards:
                if card.permission is perm:
                    card.choose(option_id, by="you")
                    return
        return choose
    return factory


_KERNEL_TOOLS = {
    "pending": ("kernel tools…", "The kernel's MCP server is being started for this agent"),
    "offered": ("kernel tools offered", "The agent was given the kernel's MCP server; it has not connected yet"),
    "connected": ("kernel tools ✓", "The agent is connected to the kernel's MCP server (variables, cells, "
                                    "run_code behind a card)"),
    "not offered": ("no kernel tools", ""),
}


def _kernel_tools_badge(agent: Agent) -> str:
    """What the agent has of the kernel's MCP server, with the reason as a tooltip."""
    state, why = agent.kernel_tools_state
    if state == "off":
        return ""
    label, tip = _KERNEL_TOOLS.get(state, (state, ""))
    return (f' <span class="escouade-kernel-tools" title="{esc(why or tip)}" style="color:#57606a">· '
            f'{esc(label)}</span>')


def _add_dirs_text(agent: Agent) -> str:
    """`` · + DIR, DIR`` for the session's additional directories (``--add-dir``), or ``""``."""
    dirs = getattr(agent, "add_dirs", None)
    return f" · + {', '.join(map(str, dirs))}" if dirs else ""


def status_line(agent: Agent) -> str:
    status = status_text(agent.status)
    if agent.status == AgentStatus.EXITED and agent.exit is not None:
        status += f" (code {agent.exit.code})"
    where = f" · via {' '.join(agent.via)}" if agent.via else ""
    if getattr(agent, "worktree", None) is not None:
        where += f" · {agent.worktree.header_text()}"
    where += _add_dirs_text(agent)
    return f"{agent.name} · {agent.harness.harness.display_name}{where} · {status}"


class AgentView(FullText, Releasing, w.VBox):
    """Header (name, harness, status, Stop), the transcript, a prompt box with Send.
    ``close()`` lets go of the agent: its subscriptions, its redraws, every widget."""

    def __init__(self, agent: Agent) -> None:
        super().__init__(layout=w.Layout(border="1px solid #d0d7de", padding="6px"))
        self.add_class("escouade-agent")
        self.agent = agent
        self.throttle = throttle_for(agent)
        speaker = agent.harness.harness.speaker or agent.harness.harness.display_name
        self.header = w.HTML()
        self.header.add_class("escouade-status")
        self.stop_button = w.Button(description="Stop", icon="stop", tooltip="Cancel the running turn",
                                    layout=w.Layout(width="auto", flex="0 0 auto"))
        self.stop_button.on_click(on_loop(lambda _b: agent.cancel()))
        self.stop_button.add_class("escouade-stop")
        self.restart_button = w.Button(description="Restart", icon="refresh",
                                       tooltip="Start a new process and session for this agent",
                                       layout=w.Layout(width="auto", flex="0 0 auto"))
        self.restart_button.on_click(on_loop(lambda _b: _run(agent.restart())))
        self.restart_button.add_class("escouade-restart")
        self.sign_in = w.HBox()
        self.transcript = TranscriptView(agent.conversation, self.throttle, speaker=speaker,
                                         on_choose_factory=_chooser(agent), items=list(agent.conversation.items),
                                         handlers=CardHandlers(agent))
        self.controls = ControlsView(agent, self.throttle)
        self.prompt = w.Textarea(placeholder=f"Message {agent.name}…",
                                 layout=w.Layout(width="auto", flex="1 1 auto", height="60px"))
        self.send_button = w.Button(description="Send", button_style="primary",
                                    layout=w.Layout(width="auto", flex="0 0 auto"))
        self.send_button.on_click(on_loop(lambda _b: self._send_prompt()))
        self.send_button.add_class("escouade-send")
        self.prompt.add_class("escouade-prompt")
        self.children = [w.HBox([self.header, w.HBox([self.stop_button, self.restart_button])],
                                layout=w.Layout(justify_content="space-between")),
                         self.controls, self.sign_in, self.transcript, w.HBox([self.prompt, self.send_button])]
        self.hold(agent.on_status.subscribe(self._on_status))
        self.redraws_on(self.throttle, self._draw_header)
        self._serial = next(_serials)
        _views.setdefault(agent, weakref.WeakSet()).add(self)
        self._draw_header()

    def release(self) -> None:
        views = _views.get(self.agent)
        if views is not None:
            views.discard(self)

    def card_view(self, card) -> PermissionView:
        """The view of a :class:`~escouade_nb.agent.PermissionCard` (or Permission) in
        this transcript; ``KeyError`` until the throttled redraw has drawn it."""
        perm = getattr(card, "permission", card)
        return self.transcript.view_of(perm)

    def _send_prompt(self) -> None:
        text = self.prompt.value.strip()
        if text:
            self.prompt.value = ""
            turn = self.agent.send(text)
            turn.add_done_callback(lambda _t: self._keep_refused(turn, text))

    def _keep_refused(self, turn: Turn, text: str) -> None:
        """A prompt the agent would not take until you sign in goes back in the input."""
        if isinstance(turn.error, AuthRequired) and not self.closed and not self.prompt.value:
            self.prompt.value = text

    def _on_status(self, agent: Agent) -> None:
        self.throttle.request(self._draw_header)

    def _draw_header(self) -> None:
        if self.closed:
            return
        a = self.agent
        color = STATUS_COLOR.get(a.status, "#57606a")
        where = f" · via {' '.join(a.via)}" if a.via else ""
        if getattr(a, "worktree", None) is not None:  # its branch and diff stat (redrawn when re-counted)
            where += f" · {a.worktree.header_text()}"
        where += _add_dirs_text(a)
        self.header.value = (f'<b>{esc(a.name)}</b> <span style="color:#57606a">· '
                             f'{esc(a.harness.harness.display_name)} · {esc(str(a.cwd))}{esc(where)}</span> '
                             f'<span style="color:{color};font-weight:600">{esc(status_text(a.status))}'
                             f'</span>{_kernel_tools_badge(a)}')
        self.stop_button.disabled = a.status not in BUSY
        self.send_button.disabled = a.status not in CAN_SEND
        self.restart_button.disabled = a.status not in CAN_RESTART
        self.restart_button.layout.display = "" if a.status in CAN_RESTART else "none"
        # the sign-in row: the methods while the agent asks, the input box while a terminal sign-in runs
        wanted = "input" if getattr(a, "sign_in_job", None) is not None else \
            "methods" if a.status == AgentStatus.SIGN_IN else None
        if wanted != getattr(self, "_sign_in_shown", None):
            self._sign_in_shown = wanted
            old, self.sign_in.children = self.sign_in.children, ()
            for b in old:
                close_tree(b)
            if wanted == "methods":
                buttons = []
                for method in a.auth_methods:
                    terminal = method.get("type") == "terminal"  # runs the agent's own program, args in the tip
                    tip = " ".join(filter(None, [method.get("description"), "(runs in a terminal: "
                                                 + " ".join(method.get("args") or []) + ")" if terminal else ""]))
                    b = w.Button(description=f"Sign in: {method.get('name') or method.get('id')}"
                                             + (" (terminal)" if terminal else ""),
                                 tooltip=tip, layout=w.Layout(width="auto"))
                    b.on_click(on_loop(lambda _b, mid=method.get("id"): _run(a.authenticate(mid))))
                    buttons.append(b)
                self.sign_in.children = buttons
            elif wanted == "input":
                box = w.Text(placeholder="answer the sign-in program (its stdin)", layout=w.Layout(width="320px"))
                send = w.Button(description="Send", layout=w.Layout(width="auto"),
                                tooltip="Write this line to the sign-in program's stdin")

                def answer(_b=None) -> None:
                    text, box.value = box.value, ""
                    _run(a.sign_in_input(text))

                send.on_click(on_loop(answer))
                self.sign_in_box, self.sign_in_send = box, send
                self.sign_in.children = [box, send]
        retry = getattr(a, "sign_in_retry", None)  # a terminal sign-in sent the refused prompt again
        if retry is not None and retry is not getattr(self, "_retry_seen", None):
            self._retry_seen = retry
            sent = "".join(b.get("text", "") for b in retry.prompt if b.get("type") == "text")
            if self.prompt.value.strip() == sent.strip():
                self.prompt.value = ""  # kept when it was refused; sent now: not twice

    def __repr__(self) -> str:
        body = repr(self.transcript)
        return status_line(self.agent) + ("\n" + body if body else "")


class TurnView(FullText, Releasing, w.VBox):
    """The items of one turn (its prompt, replies, tool calls, cards), live.

    ``cell``: the id of the notebook cell that shows it (:func:`current_cell`); a new
    TurnView of the same cell (the cell was run again, its old output is gone) closes
    this one, so a re-run ``%%escouade`` cell does not leave a view listening forever."""

    def __init__(self, turn: Turn, *, cell: str | None = None) -> None:
        super().__init__()
        self.add_class("escouade-turn")
        self.turn = turn
        self.cell = cell
        agent = turn.agent
        self.transcript = TranscriptView(agent.conversation, throttle_for(agent),
                                         speaker=agent.harness.harness.speaker or agent.name,
                                         accept=self._accept, on_choose_factory=_chooser(agent),
                                         items=list(turn.items), handlers=CardHandlers(agent))
        self.children = [self.transcript]
        shown_in_cell(self, cell)

    def _accept(self, item: Item) -> bool:
        return any(i is item for i in reversed(self.turn.items))

    def __repr__(self) -> str:
        return f"{self.turn.agent.name}: turn {self.turn.status}" + (
            "\n" + repr(self.transcript) if self.transcript.items else "")


def current_cell() -> str | None:
    """The id of the notebook cell being run, or None (see :func:`.views.current_run`)."""
    return current_run()[0]
