"""A model of the user's life, kernel part (issue 34): seeded random walks of what people and
agents do — send, queue, steer, answer a card (twice, as two tabs would), rewind, let the agent
die, close it, resume it, restart the kernel — in a real kernel, the shipped ``fake`` agent over
real pipes, the clicks sent as the ``comm_msg`` a browser sends. After each step the invariants:

1. the saved form (the agent view's companion output, as a front-end holds it after every
   ``display_data`` / ``update_display_data`` it was sent) reads as the live view's text, and
   holds every prompt the user sent;
2. every card is answered at most once (one answer on the wire per request, one answer event
   per card) and the record says by whom;
3. the transcript rebuilds the same conversation (its replay renders as the live one);
4. no agent process is left beyond the one the model says runs.

``ESCOUADE_WALK_SEED`` (default :data:`SEED`) and ``ESCOUADE_WALKS`` (default :data:`WALKS`)
pick the walks; each prints its seed and steps. ``ESCOUADE_WALK_SHRINK=1`` shrinks a failing
walk (:func:`shrink`: steps dropped while the same invariant still breaks) and prints the
shortest sequence, to keep below as an example (``KEPT``). The page's part (tabs closed and
reopened, saves, Ctrl+Z, Keep and Reject) is ``tests/browser/test_lab_user_walks.py``.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from deadlines import wait_until
from kernel_client import Kernel, act, buttons_of, kernel_with_env
from walks import kind_of, seed_and_walks, shrink, shrinking, walk_length

pytestmark = pytest.mark.kernel

SEED = 3434  # its two walks take 10 of the 12 kinds of step
WALKS = 2
STEPS = 7
NAME = "walker"

SETUP = """
%load_ext escouade_nb
import asyncio, json, collections
from escouade_nb.widgets import views_of
from escouade_nb.widgets.agent_view import AgentView
from escouade_nb.core.render_text import render_items, answer_label
from escouade_nb.core.conversation import Conversation, Permission
from escouade_nb.core.adapters import adapt as _adapt
from escouade_nb.wire import transcript as _tr

async def walk_until(pred, what, timeout=60, every=0.02):
    end = asyncio.get_running_loop().time() + timeout
    while not pred():
        if asyncio.get_running_loop().time() > end:
            raise AssertionError('timed out waiting for ' + what)
        await asyncio.sleep(every)

async def walk_card(agent):
    while (card := await agent.next_permission(timeout=60)).answered:
        pass
    view = views_of(agent)[0]
    print(json.dumps([view.model_id, view.card_html(card)]))
    return card

def walk_record(agent):
    '''What the transcript says: its replay rendered, and the answers on the wire per request.'''
    agent.transcript.flush()
    records = _tr.history(agent.transcript.path)
    conv = Conversation()
    _tr.replay(iter(records), conv, adapt=lambda u: _adapt(agent.harness.short_id, conv, u))
    segment, asked, replies, events = 0, set(), collections.Counter(), []
    for r in records:
        if r.kind == 'header' or (r.kind == 'event' and r.event in ('resume', _tr.SEGMENT_EVENT)):
            segment += 1
        msg = r.msg if isinstance(r.msg, dict) else {}
        if r.kind == 'in' and msg.get('method') == 'session/request_permission':
            asked.add((segment, msg.get('id')))
        if r.kind == 'out' and 'method' not in msg and (segment, msg.get('id')) in asked:
            replies[repr((segment, msg.get('id')))] += 1
        if r.kind == 'event' and r.event == _tr.ANSWER_EVENT:
            events.append((r.data or {}).get('answered_by'))
    return render_items(conv.items), dict(replies), events

def walk_check(agent):
    fresh = AgentView(agent)
    try:
        saved = fresh.companion_bundle()['text/plain']
    finally:
        fresh.close()
    replayed, replies, events = walk_record(agent)
    cards = [answer_label(i) for i in agent.conversation.items if isinstance(i, Permission)]
    print(json.dumps({'saved': saved, 'live': render_items(agent.conversation.items), 'replayed': replayed,
                      'replies': replies, 'answer_events': events, 'cards': cards,
                      'pending': len(agent.pending_cards), 'status': str(agent.status), 'pid': agent.pid,
                      'alive': agent.alive}))
"""


@dataclass
class Walk:
    """One walk's world: the kernel, what the model says is true, what the front-end holds."""

    tmp: Path
    env: dict[str, str]
    mine: Callable[[str], set[int]]
    kernel: Kernel | None = None
    prompts: list[str] = field(default_factory=list)  # what the user sent, in order
    agent_open: bool = False  # an Agent object ``a`` that is not closed
    dead: bool = False  # its process crashed: a person clicks the view's Restart before the next prompt
    n: int = 0

    # -- the world ---------------------------------------------------------------------------------
    def start_kernel(self) -> None:
        self.kernel = kernel_with_env(self.tmp / "ws", self.env)
        self.kernel.run(SETUP, timeout=120)

    def run(self, code: str, timeout: float = 120) -> str:
        assert self.kernel is not None
        return self.kernel.run(code, timeout=timeout).text

    def companion(self) -> str | None:
        """The text/plain of the newest companion of the agent's view the front-end holds."""
        assert self.kernel is not None
        found = [d for d in self.kernel.displays.values() if d.get("text/plain", "").startswith(f"{NAME} · ")]
        return found[-1]["text/plain"] if found else None

    def close_all(self) -> None:
        if self.kernel is not None:
            try:
                self.kernel.run("from escouade_nb import get_squad\nfor x in list(get_squad().agents.values()):\n"
                                "    await x.close()", allow_error=True)
            finally:
                self.kernel.shutdown()
                self.kernel = None

    # -- the steps: what people and agents do ------------------------------------------------------
    def prompt(self, words: str) -> str:
        self.n += 1
        text = f"{words} (step {self.n})"
        self.prompts.append(text)
        return text

    def live(self) -> None:
        """The agent's process runs: after a crash, the view's Restart clicked (as a person does)."""
        if not self.dead:
            return
        assert self.kernel is not None
        model_id = json.loads(self.run("print(json.dumps(views_of(a)[0].model_id))").strip().splitlines()[-1])
        act(self.kernel, model_id, {"act": "restart", "key": None, "value": None})
        self.run("await walk_until(lambda: a.alive and a.status == 'idle', 'the agent restarted')\nawait a.ready()")
        self.dead = False

    def step_send(self) -> None:
        self.live()
        self.run(f"await a.send({self.prompt('chunks 3')!r})")

    def step_queue(self) -> None:
        self.live()
        one, two = self.prompt("chunks 2"), self.prompt("chunks 4")
        self.run(f"t1 = a.send({one!r})\nt2 = a.send({two!r})\nawait t1\nawait t2")

    def _steer(self, first: str, poll: float = 0.02) -> None:
        self.live()
        slow, steer = self.prompt("slow"), self.prompt("chunks 1")
        self.run(f"t = a.send({slow!r})\nawait walk_until(lambda: {first}, 'the turn runs', every={poll})\n"
                 f"s = a.steer({steer!r})\nawait t\nawait s")

    def step_steer(self) -> None:  # while the reply streams
        self._steer("a.turns.current is t and 'tick 1' in render_items(a.conversation.items)")

    def step_steer_early(self) -> None:  # the moment the turn works (shown, its prompt not sent yet): Ctrl+Enter at once
        self._steer("a.turns.current is t and a.status == 'working'", poll=0)

    def _card(self, label: str, clicks: int) -> None:
        self.live()
        prompt = self.prompt("edit notes.txt")
        out = self.run(f"t = a.send({prompt!r})\ncard = await walk_card(a)")
        model_id, html = json.loads(out.strip().splitlines()[-1])
        button = {b["label"]: b for b in buttons_of(html)}[label]
        assert self.kernel is not None
        for _ in range(clicks):  # a second click: another tab of the notebook answering the same card
            act(self.kernel, model_id, {"act": "choose", "key": button["key"], "value": button["value"]})
        self.run("await t")

    def step_allow(self) -> None:
        self._card("Allow once", 1)

    def step_deny(self) -> None:
        self._card("Reject", 1)

    def step_allow_twice(self) -> None:
        self._card("Allow once", 2)

    def step_rewind(self) -> None:
        self.live()
        self.run("if a.checkpoints:\n    await a.rewind(a.checkpoints[-1])")

    def step_crash(self) -> None:  # the agent dies mid-turn; the next send starts it again
        out = self.run(f"try:\n    await a.send({self.prompt('crash')!r})\nexcept Exception as e:\n"
                       f"    print('ENDED', type(e).__name__)")
        assert "ENDED AgentExited" in out, f"the crash did not end the turn: {out}"
        self.dead = True

    def step_close(self) -> None:  # the view's Close clicked
        assert self.kernel is not None
        model_id = json.loads(self.run("print(json.dumps(views_of(a)[0].model_id))").strip().splitlines()[-1])
        act(self.kernel, model_id, {"act": "close_agent", "key": None, "value": None})
        if not self.dead:
            self.run("await walk_until(lambda: str(a.status) == 'closed', 'the agent closed')")
        else:  # a crashed agent's close keeps its status (exited: what ended it); a close again joins the click's
            self.run("await a.close()\nassert str(a.status) in ('exited', 'failed', 'closed'), a.status")
        self.agent_open = self.dead = False

    def step_resume(self) -> None:
        if self.agent_open:
            self.run("await a.close()")
        self.run(f"a = %escouade resume {NAME}\nawait a.ready()")
        self.agent_open, self.dead = True, False

    def step_restart_kernel(self) -> None:
        assert self.kernel is not None
        self.kernel.shutdown()
        self.kernel = None
        self.start_kernel()
        self.run(f"a = %escouade resume {NAME}\nawait a.ready()")
        self.agent_open, self.dead = True, False

    # -- the invariants ------------------------------------------------------------------------------
    def check(self) -> None:
        if not self.agent_open:
            left = self.mine("escouade-fake-agent")
            assert not left, f"invariant 4: agent processes left after the agent was closed: {left}"
            return
        seen: dict = {}

        def settled() -> bool:
            seen.update(json.loads(self.run("walk_check(a)").strip().splitlines()[-1]))
            return self.companion() == seen["saved"]

        try:
            wait_until(settled, timeout=30, what="the saved form to follow the live view", every=0.2)
        except AssertionError:
            raise AssertionError(f"invariant 1: the saved form is not the live view's text:\n--- saved\n"
                                 f"{self.companion()}\n--- live\n{seen.get('saved')}") from None
        saved = self.companion() or ""
        missing = [p for p in self.prompts if p not in saved]
        assert not missing, f"invariant 1: prompts sent and missing from the saved form: {missing}"
        assert all(n == 1 for n in seen["replies"].values()), f"invariant 2: a card answered twice: {seen['replies']}"
        answered = [c for c in seen["cards"] if c and "by " in c]
        assert len(answered) == len(seen["cards"]) - seen["pending"], f"invariant 2: cards: {seen['cards']}"
        assert len(seen["answer_events"]) == len(answered) and all(seen["answer_events"]), \
            f"invariant 2: answer events {seen['answer_events']} for cards {seen['cards']}"
        assert seen["replayed"] == seen["live"], (f"invariant 3: the transcript rebuilds another conversation:\n"
                                                  f"--- replayed\n{seen['replayed']}\n--- live\n{seen['live']}")
        running = self.mine("escouade-fake-agent")
        expected = {seen["pid"]} if seen["alive"] and seen["pid"] else set()
        assert running <= expected | set(), f"invariant 4: agent processes {running}, the agent's: {expected}"

    # -- a walk --------------------------------------------------------------------------------------
    def play(self, steps: list[str]) -> None:
        """Start the kernel and the agent, then each step and the invariants after it."""
        (self.tmp / "ws").mkdir(exist_ok=True)
        (self.tmp / "ws" / "notes.txt").write_text("notes\n")
        self.start_kernel()
        self.run(f"a = %escouade fake --as {NAME}\nawait a.ready()")
        self.agent_open = True
        self.check()
        for step in steps:
            getattr(self, f"step_{step}")()
            self.check()


CHOICES = ("send", "queue", "steer", "steer_early", "allow", "deny", "allow_twice", "rewind", "crash", "close", "resume",
           "restart_kernel")


def draw(rng: random.Random, length: int) -> list[str]:
    """A walk of ``length`` steps; after a close, the next step brings the agent back (resume or
    a kernel restart): a closed agent is not sent prompts."""
    steps: list[str] = []
    for _ in range(length):
        if steps and steps[-1] == "close":
            steps.append(rng.choice(("resume", "restart_kernel")))
        else:
            steps.append(rng.choice(CHOICES))
    return steps


def failure_of(tmp: Path, env: dict[str, str], mine: Callable[[str], set[int]], steps: list[str]) -> str | None:
    """Play ``steps`` in a fresh kernel and folder; the first broken invariant's message, or None."""
    walk = Walk(tmp, env, mine)
    try:
        walk.play(steps)
    except AssertionError as exc:
        return str(exc)
    finally:
        walk.close_all()
    return None




@pytest.fixture
def world(tmp_path, own_processes):
    env = {"ESCOUADE_NB_PLUGINS_DIR": str(tmp_path / "plugins"), "ESCOUADE_NB_CONFIG_DIR": str(tmp_path / "config"),
           "ESCOUADE_NB_TRANSCRIPTS_DIR": str(tmp_path / "transcripts"),
           "ESCOUADE_NB_JOURNAL_DIR": str(tmp_path / "journal"),
           "ESCOUADE_NB_TEST_MARK": os.environ["ESCOUADE_NB_TEST_MARK"]}
    counter = iter(range(10**6))

    def fresh(steps: list[str]) -> str | None:
        folder = tmp_path / f"walk{next(counter)}"
        folder.mkdir()
        return failure_of(folder, {**env, **{k: v.replace(str(tmp_path), str(folder)) for k, v in env.items()}},
                          own_processes, steps)

    return fresh


@pytest.mark.timeout(600)
def test_random_walks_of_a_users_life(world):
    seed, walks = seed_and_walks(SEED, WALKS)
    length = walk_length(STEPS)
    rng = random.Random(seed)
    print(f"\nuser walks: seed {seed}, {walks} walks of {length} steps "
          "(ESCOUADE_WALK_SEED, ESCOUADE_WALKS, ESCOUADE_WALK_STEPS)")
    for number in range(walks):
        steps = draw(rng, length)
        print(f"walk {number}: {steps}")
        failure = world(steps)
        if failure is None:
            continue
        if shrinking():
            steps = shrink(steps, kind_of(failure), lambda s: world(s))
            print(f"shrunk to {steps}", flush=True)
        pytest.fail(f"seed {seed}, walk {number}, steps {steps}:\n{failure}")


# Walks the random walks found, shrunk (ESCOUADE_WALK_SHRINK=1) and kept: each replays its steps
# through the same machine. A strict xfail names a failure not fixed on this branch yet.
KEPT = [
    pytest.param(["steer_early"], id="a-turn-steered-before-its-prompt-went"),  # seeds 1 and 7: steered while
    # its checkpoint was taken, the turn was stopped unsent (the view showed the prompt, the transcript had none,
    # a session/cancel went for no prompt); now the steer joins the prompt not sent (engine/turns.py, join)
    # seed 3, walk 1: a prompt after a crash, the agent restarted by the view's Restart; then a turn steered
    # while the reply streams: both prompts on record (two kept walks joined: a kernel each costs ~5 s)
    pytest.param(["crash", "deny", "send", "steer"], id="after-a-crash-then-steered-while-streaming"),
]
# seed 21 (steer_early left out), walk 1, ['crash', 'close', ...]: the view's Close of a crashed agent leaves its
# status 'exited' (Agent.close keeps an ended agent's status), a send then refused: the model says so (step_close)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("steps", KEPT)
def test_kept_walk(world, steps):
    failure = world(steps)
    assert failure is None, failure
