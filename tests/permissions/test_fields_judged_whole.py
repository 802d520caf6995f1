"""Rule plugins judge every field whole (issue 21, item 4): a real plugin process written
with the SDK (``tests/fixtures/plugins/pure``: allows code only without ``open(``) is
sent the whole ``run_code`` code and the whole Bash command, told their sizes; a request
too large for the pipe is cut, marked, and never allowed by a plugin: the user decides,
and the card and the journal say why."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from fixtures.plugins.cards import HERE, Card, make_rules
from deadlines import run

from escouade_nb.core.conversation import ToolCall
from escouade_nb.manifest.project import Project
from escouade_nb.permissions import request as request_module

FIXTURES = str(HERE)
PURE = "test.fixture.pure"
LIMIT = getattr(request_module, "MAX_REQUEST", 4 * 1024 * 1024)


pytestmark = pytest.mark.usefixtures("no_orphan_plugins")  # tests/conftest.py


def run_code_card(code: str, project: Project) -> Card:
    """The card of a ``run_code`` call as the kernel's server makes it (engine/kernel_access.py)."""
    call = ToolCall("t1", tool_call_id="c1", title="Run code in the kernel", kind="execute", raw_input={"code": code})
    call.mcp = ("escouade", "run_code")
    return Card(project=project, tool_call=call)


def bash_card(command: str, project: Project) -> Card:
    return Card(project=project, tool_call=ToolCall("t1", tool_call_id="c1", title="Run a command", kind="execute",
                                                    raw_input={"command": command}))


async def decide(tmp_path: Path, cards_of, *plugins: str):
    rules = make_rules(tmp_path, *plugins, budget=30)  # what the plugin sees, not how fast it answers
    rules.start_soon()
    for pid in [f"test.fixture.{p}" for p in plugins]:
        await asyncio.wait_for(rules.host.processes[pid].wait_ready(), 60)
    project = Project.for_folder(tmp_path)
    try:
        cards = []
        for make in cards_of:
            card = make(project)
            await rules.broker(card)
            cards.append(card)
        return cards, rules
    finally:
        await rules.aclose()


def lines(rules, plugin: str) -> list[str]:
    return [re.sub(r"^\d\d:\d\d:\d\d  ", "", e.text()) for e in rules.journal.entries(plugin, "Decision")]


@pytest.mark.parametrize("card_of, pad", [(run_code_card, 2100), (bash_card, 2100), (bash_card, 70_000)],
                         ids=["run_code", "Bash", "Bash-past-64KiB"])
def test_a_rule_plugin_sees_open_placed_after_2100_characters(tmp_path: Path, card_of, pad):
    """The issue's case: `open(` after 2,100 `#`; a command was cut at 65,536 characters: past that too."""
    hidden_text = "#" * pad + '\nopen("x","w")'
    (hidden, clean), rules = run(decide(tmp_path, [lambda p: card_of(hidden_text, p),
                                                   lambda p: card_of("#" * pad + "\nx = 1", p)], "pure"))
    # the plugin saw the open( (it was cut away before: the plugin allowed it and the file was written)
    assert hidden.choices == [("reject-once", "Fixture pure via Escouade", "open( is not pure")]
    # the same length without open( is allowed: the plugin judged all of it
    assert len(clean.choices) == 1 and clean.choices[0][0] == "allow-once"
    assert clean.choices[0][2].startswith(f"saw {pad + 6} characters;")


@pytest.mark.parametrize("card_of, key", [(run_code_card, "input.code"), (bash_card, "input.command")],
                         ids=["run_code", "Bash"])
def test_a_rule_plugin_is_told_the_size_of_every_field(tmp_path: Path, card_of, key):
    text = "#" * 100_000 + "\nx = 1"
    (card,), rules = run(decide(tmp_path, [lambda p: card_of(text, p)], "pure"))
    (option, by, message), = card.choices
    assert option == "allow-once"
    assert message == f"saw {len(text)} characters; sizes {json.dumps({key: len(text)})}; truncated []"


def test_a_request_over_the_limit_is_not_allowed_by_a_plugin_the_user_decides_and_is_told_why(tmp_path: Path):
    big = "x = 1\n" * (LIMIT // 6 + 1000) + 'open("x","w")'  # the open( is past the limit: cut away
    assert len(big) > LIMIT
    (card,), rules = run(decide(tmp_path, [lambda p: run_code_card(big, p)], "pure"))
    # the plugin allowed what it got (it is naive) — and its allowance was not honoured
    assert card.choices == [] and card.state == "pending"
    why = f"too large for rule plugins to judge whole: input.code ({len(big):,} characters)"
    assert card.permission.note == why  # what the card shows the user
    decision = rules.broker.history[-1]
    assert decision.truncated == ["input.code"] and decision.applied is False
    answer = decision.answers[PURE]
    assert answer.outcome == "allow" and '"truncated": ["input.code"]' not in answer.message  # a list, as sent
    assert answer.message.endswith('truncated ["input.code"]')
    assert f'"input.code": {len(big)}' in answer.message  # the whole size, though the text was cut
    line, = lines(rules, PURE)
    assert line.startswith("Decision  allowed mcp__escouade__run_code x = 1 x = 1")
    assert line.endswith(f"— not applied: {why}; the user is asked")


def test_a_denial_on_a_cut_request_still_wins(tmp_path: Path):
    big = 'open("x","w")\n' + "x = 1\n" * (LIMIT // 6 + 1000)
    (card,), rules = run(decide(tmp_path, [lambda p: bash_card(big, p)], "pure"))
    assert card.choices == [("reject-once", "Fixture pure via Escouade", "open( is not pure")]
    assert rules.broker.history[-1].truncated == ["input.command"]


def test_the_card_waiting_for_you_says_why_no_rule_plugin_could_allow_it():
    from escouade_nb.core.conversation import Conversation
    from escouade_nb.core.render_text import render_item
    from escouade_nb.widgets.feed import Feed

    conv = Conversation()
    perm = conv.add_permission({"toolCallId": "c1", "title": "Run code in the kernel", "kind": "execute",
                                "rawInput": {"code": "x"}}, [{"optionId": "run", "name": "Run", "kind": "allow_once"}])
    why = "too large for rule plugins to judge whole: input.code (5,000,000 characters)"
    perm.note = why
    conv.set_deciding(perm, True)
    conv.set_deciding(perm, False)  # what the card desk does once the policies are done
    assert render_item(perm).endswith(f"[Run] ({why})")
    html = json.dumps(Feed(conv).snapshot_items(), ensure_ascii=False)  # the card: the tool call with its ask
    assert f"— {why}" in html
