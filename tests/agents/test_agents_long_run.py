"""Released agents start a long run in the kernel and come back for its result (issue 36), through
the product, in a real kernel, offline (the scripted model's ``ESC-MCP <tool> <json>`` marker).

Turn 1: the model calls ``run_code`` with ``wait`` 5 s on code that runs ``ESCOUADE_LONG_RUN_SECONDS``
(default 15; the issue's figure is 180: ``ESCOUADE_LONG_RUN_SECONDS=180``); one card, clicked Run; the
call answers after ~5 s with a ``task_id``, and the turn ends while the code goes on (no tool call
held open: the agent's tool call is completed, the kernel idle). Between the turns the kernel runs
cells. Once the run has ended (its end on record), turn 2: the model calls ``task_status`` of that
id and the result (``done``, its output) reaches its final text.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from kernel_client import act, buttons_of, wait_for
from model_server import FINAL_PREFIX
from test_agents import TURN_TIMEOUT
from test_agents_kernel_tools import agent_in_kernel

pytestmark = pytest.mark.agents

LONG_AGENTS = ["codex", "gemini"]
SECONDS = int(os.environ.get("ESCOUADE_LONG_RUN_SECONDS", "15"))
WAIT = 5
CODE = f"import time\nfor _i in range({SECONDS}):\n    time.sleep(1)\nlong_run_done = {SECONDS}\nprint('slept', {SECONDS})"


@pytest.fixture(scope="module", params=LONG_AGENTS)
def agent(request, model_server, tmp_path_factory):
    yield from agent_in_kernel(request.param, model_server, tmp_path_factory)


@pytest.mark.timeout(SECONDS + 4 * TURN_TIMEOUT + 120)
def test_a_long_run_left_as_a_task_and_its_result_fetched_in_a_later_turn(agent, model_server):
    harness, kernel = agent
    wait_for(kernel, "a.kernel_tools_state[0] == 'connected'", timeout=60)
    prompt = "ESC-MCP run_code " + json.dumps({"code": CODE, "wait": WAIT}) + " Start this long run."
    t0 = time.monotonic()
    out = kernel.run(f"t = a.send({prompt!r})\ncard = await next_open(a, {TURN_TIMEOUT})\n"
                     "print('CARD', json.dumps({'title': card.request.title, 'raw': card.request.raw_input,\n"
                     "  'pending': len(a.pending_cards)}))", timeout=TURN_TIMEOUT + 30)
    card = json.loads(out.text.split("CARD", 1)[1])
    assert (card["title"], card["raw"], card["pending"]) == ("Run code in the kernel", {"code": CODE}, 1), card
    wait_for(kernel, "views_of(a)[0].feed.find(views_of(a)[0].feed.key(card.permission)) is not None")
    model_id, html = json.loads(kernel.run("_v = views_of(a)[0]\n"
                                           "print(json.dumps([_v.model_id, _v.card_html(card)]))").text)
    run_button = next(b for b in buttons_of(html) if b["label"] == "Run")
    act(kernel, model_id, {"act": "choose", "key": run_button["key"], "value": run_button["value"]})
    wait_for(kernel, "t.done", timeout=TURN_TIMEOUT + WAIT)
    first = json.loads(kernel.run(
        "r = await t\nprint('R', json.dumps({'stop': r.stop_reason, 'text': r.text,\n"
        "  'open': [c.title for c in a.conversation.tool_calls.values() if c.shown_status in ('pending', "
        "'in_progress')], 'done': 'long_run_done' in globals()}))").text.split("R", 1)[1])
    turn_one = time.monotonic() - t0
    print(f"\n{harness}: turn 1 ended after {turn_one:.1f} s (run of {SECONDS} s): {first['text'][:300]!r}")
    assert first["stop"] == "end_turn", first
    # the model reads the text, or (codex) the structured content: the task id either way
    assert f"{FINAL_PREFIX} run_code returned:" in first["text"] and "running" in first["text"], first
    assert first["open"] == [] and not first["done"]  # no tool call held open; the code still runs
    task_id = re.search(r"task-[0-9a-f]{16}", first["text"]).group(0)  # what the model read
    assert kernel.run("print('the kernel is free')").text == "the kernel is free\n"
    wait_for(kernel, "'long_run_done' in globals()", timeout=SECONDS + 60)  # the run ended by itself
    t1 = time.monotonic()
    prompt = "ESC-MCP task_status " + json.dumps({"task_id": task_id}) + " Fetch the long run's result."
    second = json.loads(kernel.run(
        f"r = await a.send({prompt!r})\n"
        "print('R', json.dumps({'stop': r.stop_reason, 'text': r.text, 'pending': len(a.pending_cards)}))",
        timeout=TURN_TIMEOUT + 30).text.split("R", 1)[1])
    print(f"{harness}: turn 2 after the run's end, {time.monotonic() - t1:.1f} s: {second['text'][:300]!r}")
    assert second["stop"] == "end_turn" and second["pending"] == 0, second
    assert f"{FINAL_PREFIX} task_status returned:" in second["text"], second
    assert f"task {task_id} (run_code): done" in second["text"] or \
        (f'"task_id":"{task_id}"' in second["text"] and '"status":"done"' in second["text"]), second
    assert "slept" in second["text"], second
