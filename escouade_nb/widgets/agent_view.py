"""The live view of one agent (header, transcript, prompt box) and of one turn."""

from __future__ import annotations

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
                                         on_choose_factory=_chooser(agent), items=list(agent.conversation.items))
        self.prompt = w.Textarea(placeholder=f"Message {agent.name}…", layout=w.Layout(width="100%", height="60px"))
        self.send_button = w.Button(description="Send", button_style="primary", layout=w.Layout(width="auto"))
        self.send_button.on_click(lambda _b: self._send_prompt())
        self.children = [w.HBox([self.header, self.stop_button], layout=w.Layout(justify_content="space-between")),
                         self.transcript, w.HBox([self.prompt, self.send_button])]
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
                                         items=list(turn.items))
        self.children = [self.transcript]

    def _accept(self, item: Item) -> bool:
        return any(i is item for i in reversed(self.turn.items))

    def __repr__(self) -> str:
        return f"{self.turn.agent.name}: turn {self.turn.status}" + (
            "\n" + repr(self.transcript) if self.transcript.items else "")
