"""The transcript is the record (issue 26, items 4–6): a resume rebuilds exactly what the
live view showed — every card with who answered it (you, a rule plugin's name, the kernel's
``run_code`` card), the client's notices, each agent process's own tool calls even when a
new process reuses the ids of the one before (the shipped fake restarts them per process) —
any number of times, across kernel restarts. Real kernels, the shipped ``fake`` agent, its
real MCP calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_client import Kernel, kernel_with_env, wait_for

pytestmark = pytest.mark.kernel

SETUP = ("%load_ext escouade_nb\n"
         "import json\n"
         "from escouade_nb.core.render_text import render_items, answer_label\n"
         "from escouade_nb.widgets.agent_view import AgentView\n"
         "async def answer(agent, prompt, option, **how):\n"
         "    t = agent.send(prompt)\n"
         "    while (card := await agent.next_permission(timeout=20)).answered:\n"
         "        pass\n"
         "    card.choose(option, **how)\n"
         "    return await t\n")
# what the conversation shows, as text and as the agent view's items, the first N items
SHOWN = ("print(json.dumps({'text': [render_items([i]) for i in a.conversation.items[:N]],"
         " 'view': AgentView(a).state()['items'][:N],"
         " 'cards': [answer_label(i) for i in a.conversation.items[:N] if type(i).__name__ == 'Permission'],"
         " 'n': len(a.conversation.items)}))")


def _kernel(tmp: Path) -> Kernel:
    env = {"ESCOUADE_NB_PLUGINS_DIR": str(tmp / "plugins"), "ESCOUADE_NB_CONFIG_DIR": str(tmp / "config"),
           "ESCOUADE_NB_TRANSCRIPTS_DIR": str(tmp / "transcripts"), "ESCOUADE_NB_JOURNAL_DIR": str(tmp / "journal")}
    return kernel_with_env(tmp / "ws", env)


def _shown(kernel: Kernel, n: int | None = None) -> dict:
    return json.loads(kernel.run(SHOWN.replace("N", "None" if n is None else str(n))).text.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def rounds(tmp_path_factory):
    """Kernel 1: an edit allowed by you, a command allowed by a rule plugin's answer, a
    ``run_code`` card allowed by you, a restart (a notice; the new process reuses the
    session and tool call ids), an edit of another file. Kernel 2: resumed, then a new
    turn (ids reused again). Kernel 3: resumed again. What each showed."""
    tmp = tmp_path_factory.mktemp("resume-record")
    for folder in ("ws", "plugins"):
        (tmp / folder).mkdir()
    (tmp / "ws" / "notes.txt").write_text("notes\n")
    (tmp / "ws" / "cellcard.txt").write_text("card\n")
    seen: dict = {}
    first = _kernel(tmp)
    try:
        first.run(SETUP + "a = %escouade fake --as rt\nawait a.ready()")
        wait_for(first, "a.kernel_tools_state[0] == 'connected'", timeout=30)
        first.run("await answer(a, 'edit notes.txt', 'allow-once')")
        first.run("await answer(a, 'run ls -la', 'allow-once', by='Team rules via Escouade', message='ls reads')")
        first.run("await answer(a, 'run code x = 6 * 7', 'run')")
        first.run("await a.restart()\nawait answer(a, 'edit cellcard.txt', 'allow-once')")
        seen["live1"] = _shown(first)
    finally:
        first.shutdown()
    second = _kernel(tmp)
    try:
        second.run(SETUP + "a = %escouade resume rt")
        seen["resumed1"] = _shown(second, seen["live1"]["n"])
        second.run("await a.ready()\nawait answer(a, 'edit notes.txt again', 'allow-once')")
        seen["live2"] = _shown(second)
    finally:
        second.shutdown()
    third = _kernel(tmp)
    try:
        third.run(SETUP + "a = %escouade resume rt")
        seen["resumed2"] = _shown(third, seen["live2"]["n"])
    finally:
        third.shutdown()
    return seen


def test_every_card_says_who_answered_it_live(rounds):
    assert rounds["live1"]["cards"] == ["Allowed once by you", "Allowed by Team rules via Escouade — ls reads",
                                        "Allowed by you: Run", "Allowed once by you"]
    text = "\n".join(rounds["live1"]["text"])
    assert "Edit notes.txt" in text and "Edit cellcard.txt" in text
    assert "Restarted: a new process and a new session." in text


def test_a_resume_rebuilds_what_was_live(rounds):
    for key in ("text", "cards", "view"):
        assert rounds["resumed1"][key] == rounds["live1"][key], key


def test_a_second_resume_after_a_turn_with_reused_ids_rebuilds_what_was_live(rounds):
    assert rounds["live2"]["cards"][:4] == rounds["live1"]["cards"]
    assert rounds["live2"]["cards"][4:] == ["Allowed once by you"]
    for key in ("text", "cards", "view"):
        assert rounds["resumed2"][key] == rounds["live2"][key], key
