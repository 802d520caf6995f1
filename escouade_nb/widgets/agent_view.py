"""The live view of one agent (header, transcript, prompt box) and of one turn."""

from __future__ import annotations

import asyncio
import itertools
import weakref
from collections.abc import Callable

import ipywidgets as w

from ..agent import Agent, Turn
from ..conversation import Item, Permission
from .render import esc
from .views import PermissionView, Throttle, TranscriptView

_serials = itertools.count()

STATUS_TEXT = {
    "starting": "starting…", "idle": "idle", "working": "working…", "waiting": "waiting for you",
    "exited": "exited", "closed": "closed", "failed": "failed to start",
}
STATUS_COLOR = {"waiting": "#bf8700", "exited": "#cf222e", "failed": "#cf222e", "working": "#1f6feb"}

_throttles: weakref.WeakKeyDictionary[Agent, Throttle] = weakref.WeakKeyDictionary()
_views: weakref.WeakKeyDictionary[Agent, weakref.WeakSet] = weakref.WeakKeyDictionary()


def views_of(agent: Agent) -> list[AgentView]:
    """The live :class:`AgentView` s shown for ``agent`` (oldest first)."""
    return sorted(_views.get(agent, ()), key=lambda v: v._serial)


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
    """Run a coroutine from a widget callback on the running loop, keeping a reference."""
    task = asyncio.get_running_loop().create_task(coro)
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


_tasks: set = set()


class ControlsView(w.HBox):
    """The agent's dials: Escouade's mode, the agent's own mode, its config options
    (select, grouped select, boolean) and the model. Changing one calls the agent at
    once; the agent's own updates redraw them."""

    def __init__(self, agent: Agent, throttle: Throttle) -> None:
        super().__init__(layout=w.Layout(flex_flow="row wrap"))
        self.add_class("escouade-controls")
        self.agent = agent
        self.throttle = throttle
        self.controls: dict[str, w.Widget] = {}
        agent.conversation.subscribe(self._on_changes)
        agent.on_status.append(lambda _a: self.throttle.request(self.rebuild))
        self.rebuild()

    def _on_changes(self, changes) -> None:
        if any(c.kind == "state" and c.name in ("mode", "config_options", "models") for c in changes):
            self.throttle.request(self.rebuild)

    def _dropdown(self, key: str, label: str, options: list[tuple[str, str]], value, on_change) -> None:
        values = [v for _, v in options]
        dd = w.Dropdown(options=options, value=value if value in values else None, description=label,
                        style={"description_width": "initial"}, layout=w.Layout(width="auto"))
        dd.observe(lambda ch: ch["new"] is not None and ch["new"] != value and on_change(ch["new"]), names="value")
        self.controls[key] = dd

    def rebuild(self) -> None:
        a = self.agent
        conv = a.conversation
        for old in self.controls.values():
            old.close()
        self.controls = {}
        modes = a.escouade_modes()
        if len(modes) > 1:
            self._dropdown("escouade_mode", "Mode", [(_mode_label(m, text), m) for m, text in modes.items()],
                           a.escouade_mode, lambda m: _run(a.set_escouade_mode(m)))
        has_mode_option = any(o.get("category") == "mode" for o in conv.config_options)
        if conv.modes and not has_mode_option:
            choices = [(m.get("name") or m.get("id"), m.get("id")) for m in conv.modes.get("availableModes") or []]
            self._dropdown("agent_mode", "Agent mode", choices, conv.current_mode_id, lambda m: _run(a.set_mode(m)))
        for option in conv.config_options:
            oid = option.get("id")
            if option.get("type") == "boolean":
                box = w.Checkbox(value=bool(option.get("currentValue")), description=option.get("name") or oid,
                                 indent=False, layout=w.Layout(width="auto"))
                current = bool(option.get("currentValue"))
                box.observe(lambda ch, oid=oid, current=current: ch["new"] != current and _run(
                    a.set_config_option(oid, bool(ch["new"]))), names="value")
                self.controls[f"config:{oid}"] = box
            elif option.get("type") == "select":
                from ..agent import _flatten_options
                pairs = [(label, value) for value, label in _flatten_options(option.get("options") or [])]
                self._dropdown(f"config:{oid}", option.get("name") or oid, pairs, option.get("currentValue"),
                               lambda v, oid=oid: _run(a.set_config_option(oid, v)))
        has_model_option = any(o.get("category") == "model" for o in conv.config_options)
        if not has_model_option:
            current, choices = a.model_choices()
            if choices:
                self._dropdown("model", "Model", [(label, mid) for mid, label in choices], current,
                               lambda m: _run(a.set_model(m)))
        disabled = a.status in ("exited", "closed", "failed", "starting")
        for control in self.controls.values():
            control.disabled = disabled
        self.children = tuple(self.controls.values())

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


def status_line(agent: Agent) -> str:
    status = STATUS_TEXT.get(agent.status, agent.status)
    if agent.status == "exited" and agent.exit is not None:
        status += f" (code {agent.exit.code})"
    return f"{agent.name} · {agent.harness.harness.display_name} · {status}"


class AgentView(w.VBox):
    """Header (name, harness, status, Stop), the transcript, a prompt box with Send."""

    def __init__(self, agent: Agent) -> None:
        super().__init__(layout=w.Layout(border="1px solid #d0d7de", padding="6px"))
        self.add_class("escouade-agent")
        self.agent = agent
        self.throttle = throttle_for(agent)
        speaker = agent.harness.harness.speaker or agent.harness.harness.display_name
        self.header = w.HTML()
        self.header.add_class("escouade-status")
        self.stop_button = w.Button(description="Stop", icon="stop", tooltip="Cancel the running turn",
                                    layout=w.Layout(width="auto"))
        self.stop_button.on_click(lambda _b: agent.cancel())
        self.transcript = TranscriptView(agent.conversation, self.throttle, speaker=speaker,
                                         on_choose_factory=_chooser(agent), items=list(agent.conversation.items),
                                         handlers=CardHandlers(agent))
        self.controls = ControlsView(agent, self.throttle)
        self.prompt = w.Textarea(placeholder=f"Message {agent.name}…", layout=w.Layout(width="100%", height="60px"))
        self.send_button = w.Button(description="Send", button_style="primary", layout=w.Layout(width="auto"))
        self.send_button.on_click(lambda _b: self._send_prompt())
        self.children = [w.HBox([self.header, self.stop_button], layout=w.Layout(justify_content="space-between")),
                         self.controls, self.transcript, w.HBox([self.prompt, self.send_button])]
        agent.on_status.append(self._on_status)
        self._serial = next(_serials)
        _views.setdefault(agent, weakref.WeakSet()).add(self)
        self._draw_header()

    def card_view(self, card) -> PermissionView:
        """The view of a :class:`~escouade_nb.agent.PermissionCard` (or Permission) in
        this transcript; ``KeyError`` until the throttled redraw has drawn it."""
        perm = getattr(card, "permission", card)
        return self.transcript.view_of(perm)

    def _send_prompt(self) -> None:
        text = self.prompt.value.strip()
        if text:
            self.prompt.value = ""
            self.agent.send(text)

    def _on_status(self, agent: Agent) -> None:
        self.throttle.request(self._draw_header)

    def _draw_header(self) -> None:
        a = self.agent
        color = STATUS_COLOR.get(a.status, "#57606a")
        self.header.value = (f'<b>{esc(a.name)}</b> <span style="color:#57606a">· '
                             f'{esc(a.harness.harness.display_name)} · {esc(str(a.cwd))}</span> '
                             f'<span style="color:{color};font-weight:600">{esc(STATUS_TEXT.get(a.status, a.status))}'
                             f'</span>')
        running = a.status in ("working", "waiting")
        self.stop_button.disabled = not running
        self.send_button.disabled = a.status in ("exited", "closed", "failed")

    def __repr__(self) -> str:
        body = repr(self.transcript)
        return status_line(self.agent) + ("\n" + body if body else "")


class TurnView(w.VBox):
    """The items of one turn (its prompt, replies, tool calls, cards), live."""

    def __init__(self, turn: Turn) -> None:
        super().__init__()
        self.add_class("escouade-turn")
        self.turn = turn
        agent = turn.agent
        self.transcript = TranscriptView(agent.conversation, throttle_for(agent),
                                         speaker=agent.harness.harness.speaker or agent.name,
                                         accept=self._accept, on_choose_factory=_chooser(agent),
                                         items=list(turn.items), handlers=CardHandlers(agent))
        self.children = [self.transcript]

    def _accept(self, item: Item) -> bool:
        return any(i is item for i in reversed(self.turn.items))

    def __repr__(self) -> str:
        return f"{self.turn.agent.name}: turn {self.turn.status}" + (
            "\n" + repr(self.transcript) if self.transcript.items else "")
