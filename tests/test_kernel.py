"""The product in a real kernel: magics, views, clicks, cancel, crash, shutdown."""

import json
import re
import time

import pytest

from kernel_client import Kernel, process_alive, wait_for

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel(tmp_path_factory.mktemp("ws"))
    k.run("%load_ext escouade_nb\nimport asyncio, json\nfrom escouade_nb.widgets import views_of")
    yield k
    k.run("from escouade_nb import get_squad\nfor a in list(get_squad().agents.values()):\n    await a.close()",
          allow_error=True)
    k.shutdown()


def test_listing_and_usage_errors(kernel):
    out = kernel.run("%escouade").text  # at once: the versions are read in the background
    assert re.search(r"fake\s+Fake\s+\S*escouade-fake-agent (0\.1\.0|\(version: reading…\))", out)
    out = kernel.run("from escouade_nb import get_squad\nprint(await get_squad().listing().wait())").text
    assert re.search(r"fake\s+Fake\s+\S*escouade-fake-agent 0\.1\.0", out)  # once read
    assert re.search(r"goose\s+Goose\s+not found on PATH", out)
    bad = kernel.run("%escouade fake --nope")
    assert bad.error is None and "escouade: unrecognized arguments: --nope" in bad.text and "usage:" in bad.text
    missing = kernel.run("%escouade goose")
    assert missing.error is None
    assert "no program named goose on PATH. Install it with: curl -fsSL" in missing.text
    unknown = kernel.run("%escouade nosuch")
    assert "unknown harness 'nosuch'" in unknown.text and "fake" in unknown.text


def test_click_message_answers_the_agent(kernel):
    kernel.run("demo = %escouade fake --as clicker\nawait demo.ready()\n"
               "sent = []\ndemo.transport.observers.append(lambda d, m: d == 'out' and sent.append(m))\n"
               "turn = demo.send('edit notes.txt')\ncard = await demo.next_permission(timeout=10)")
    # the card's view exists once the throttled redraw ran
    wait_for(kernel, "card.permission.key in views_of(demo)[0].transcript._views")
    ids = kernel.run("pv = views_of(demo)[0].card_view(card)\n"
                     "print(json.dumps({b.description: b.model_id for b in pv.buttons}))").text
    buttons = json.loads(ids)
    assert list(buttons) == ["Allow once", "Always allow", "Reject"]
    kernel.click(buttons["Allow once"])
    wait_for(kernel, "turn.done")
    out = kernel.run("r = await turn\nprint(r.stop_reason, '|', r.text)\n"
                     "print([m['result'] for m in sent if 'result' in m and 'outcome' in (m['result'] or {})])\n"
                     "print(card.label)\nprint([b.disabled for b in pv.buttons])\n"
                     "print(open('notes.txt').read())").text
    assert "end_turn | Edited notes.txt." in out
    assert ("[{'outcome': {'optionId': 'allow-once', 'outcome': 'selected'}, '_meta': {'escouade': {'by': 'you'}}}]"
            in out)
    assert "Allowed once by you" in out
    assert "[True, True, True]" in out
    assert "Edited by the fake agent." in out
    # a second click sends nothing more
    kernel.click(buttons["Reject"])
    time.sleep(0.3)
    again = kernel.run("print(len([m for m in sent if 'result' in m and 'outcome' in (m['result'] or {})]))").text
    assert again.strip() == "1"


def test_cancel_while_card_pending(kernel):
    kernel.run("demo = %escouade fake --as canceller\nawait demo.ready()\n"
               "sent = []\ndemo.transport.observers.append(lambda d, m: d == 'out' and sent.append(m))\n"
               "turn = demo.send('run npm test')\ncard = await demo.next_permission(timeout=10)")
    wait_for(kernel, "card.permission.key in views_of(demo)[0].transcript._views")
    kernel.run("pv = views_of(demo)[0].card_view(card)\nstop = views_of(demo)[0].stop_button")
    stop_id = kernel.run("print(stop.model_id)").text.strip()
    kernel.click(stop_id)  # the user presses Stop
    wait_for(kernel, "turn.done")
    out = kernel.run(
        "r = await turn\nprint('stop:', r.stop_reason)\n"
        "print('methods:', [m.get('method') for m in sent if 'method' in m])\n"
        "print('answers:', [m['result'] for m in sent if 'result' in m and 'outcome' in (m['result'] or {})])\n"
        "await asyncio.sleep(0.2)\n"
        "print('card:', card.label, [b.disabled for b in pv.buttons])\n"
        "print('tool:', r.tool_calls[0].shown_status)").text
    assert "stop: cancelled" in out
    assert "'session/cancel'" in out
    assert "answers: [{'outcome': {'outcome': 'cancelled'}}]" in out
    assert "card: Cancelled (you stopped the turn) [True, True, True]" in out
    assert "tool: failed" in out  # the agent's own update after the cancel is applied


def test_prompts_are_queued_not_lost(kernel):
    out = kernel.run("demo = %escouade fake --as queue\nawait demo.ready()\n"
                     "t1 = demo.send('slow'); t2 = demo.send('hello one'); t3 = demo.send('hello two')\n"
                     "await asyncio.sleep(0.3); demo.cancel()\n"
                     "rs = [await t for t in (t1, t2, t3)]\n"
                     "print([r.stop_reason for r in rs]); print('one' in t2.text, 'two' in t3.text)").text
    assert "['cancelled', 'end_turn', 'end_turn']" in out
    assert "True True" in out


def test_crash_mid_turn(kernel):
    out = kernel.run(
        "demo = %escouade fake --as crasher\nawait demo.ready()\npid = demo.pid\n"
        "turn = demo.send('crash')\n"
        "try:\n    await turn\nexcept Exception as e:\n    print('ERROR', type(e).__name__, e)\n"
        "await asyncio.sleep(0.2)\n"
        "view = views_of(demo)[0]\n"
        "print(repr(view))\nprint('PID', pid)").text
    assert "ERROR AgentExited agent 'crasher' exited with code 3 during the turn" in out
    assert "fake agent: about to crash" in out
    assert "crasher · Fake · exited (code 3)" in out
    assert "[error] Agent exited with code 3" in out
    pid = int(re.search(r"PID (\d+)", out).group(1))
    assert not process_alive(pid)
    # the conversation is still readable, and a new prompt is refused clearly
    refused = kernel.run("t = demo.send('hello')\ntry:\n    await t\nexcept Exception as e:\n    print(e)").text
    assert "agent 'crasher' is exited; the prompt was not sent" in refused


def test_stderr_flood_does_not_stall(kernel):
    out = kernel.run("demo = %escouade fake --as flooder\nr = await demo.send('flood')\nprint(r.text)\n"
                     "print(demo.stderr.total >= 2 * 2**20)", timeout=60).text
    assert "Flooded stderr with 2 MiB.\nTrue" in out


def test_stop_magic_kills_the_group(kernel):
    out = kernel.run("demo = %escouade fake --as stopper\nawait demo.ready()\nprint('PID', demo.pid)\n"
                     "%escouade stop stopper\nawait asyncio.sleep(1)\nprint(demo.status)").text
    pid = int(re.search(r"PID (\d+)", out).group(1))
    assert "stopping stopper" in out and out.strip().endswith("closed")
    assert not process_alive(pid)


def test_coalesced_comm_traffic(kernel):
    """A 2,000-chunk reply must not cost one comm message per chunk."""
    kernel.run("demo = %escouade fake --as chunky\nawait demo.ready()\nawait asyncio.sleep(0.5)")
    res = kernel.run("r = await demo.send('chunks 2000')\nawait asyncio.sleep(0.3)\nprint(len(r.text))")
    text_bytes = int(res.text.strip())
    assert text_bytes == 80000
    late = kernel.drain_iopub(0.5)
    msgs = res.comm_msgs + late.comm_msgs
    nbytes = res.comm_bytes + late.comm_bytes
    print(f"2000 chunks, {text_bytes} text bytes: {msgs} comm messages, {nbytes} bytes")
    assert 0 < msgs < 200
    assert nbytes < 4 * text_bytes


def test_kernel_shutdown_leaves_no_agent(tmp_path):
    k = Kernel(tmp_path)
    try:
        out = k.run("%load_ext escouade_nb\na = %escouade fake\nb = %escouade fake\n"
                    "await a.ready(); await b.ready()\nprint('PIDS', a.pid, b.pid, a.name, b.name)").text
        a, b = (int(x) for x in re.search(r"PIDS (\d+) (\d+)", out).groups())
        assert "fake fake-2" in out
        assert process_alive(a) and process_alive(b)
    finally:
        k.shutdown()
    deadline = time.monotonic() + 10
    while (process_alive(a) or process_alive(b)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not process_alive(a) and not process_alive(b)


def test_mode_dropdown_plan_card_and_question_form(kernel):
    from kernel_client import update_message

    kernel.run("demo = %escouade fake --as dials\nawait demo.ready()\nawait asyncio.sleep(0.3)\n"
               "view = views_of(demo)[0]")
    ids = json.loads(kernel.run(
        "print(json.dumps({k: [c.model_id, [o[1] for o in c.options] if hasattr(c, 'options') else None] "
        "for k, c in view.controls.controls.items()}))").text)
    assert list(ids) == ["escouade_mode", "agent_mode", "config:sandbox", "config:model", "config:verbose"]
    mode_id, modes = ids["escouade_mode"]
    assert modes == ["default", "acceptEdits", "bypassPermissions", "readOnly"]
    update_message(kernel, mode_id, {"index": modes.index("acceptEdits")})  # the user picks a mode
    wait_for(kernel, "demo.escouade_mode == 'acceptEdits' and demo.conversation.current_mode_id == 'accept-edits'")
    sandbox_id, values = ids["config:sandbox"]
    update_message(kernel, sandbox_id, {"index": values.index("full-access")})
    wait_for(kernel, "next(o for o in demo.conversation.config_options if o['id'] == 'sandbox')['currentValue']"
                     " == 'full-access'")
    # a plan to approve: the card's Approve button
    kernel.run("turn = demo.send('present plan')\ncard = await demo.next_permission(timeout=10)")
    wait_for(kernel, "card.permission.key in view.transcript._views")
    approve = kernel.run("pv = view.card_view(card)\nprint(type(pv).__name__, pv.approve_button.model_id)").text.split()
    assert approve[0] == "PlanApprovalView"
    kernel.click(approve[1])
    wait_for(kernel, "turn.done")
    assert "Plan approved" in kernel.run("print((await turn).text, card.label)").text
    # a question: fill the form as a person would, then Submit
    kernel.run("turn = demo.send('ask me')\nq = await demo.next_question(timeout=10)")
    wait_for(kernel, "q.question.key in view.transcript._views")
    form = json.loads(kernel.run(
        "qv = view.transcript.view_of(q.question)\n"
        "print(json.dumps({k: w.model_id for k, w in qv.inputs.items()} | {'submit': qv.submit.model_id}))").text)
    update_message(kernel, form["database"], {"index": 0})
    update_message(kernel, form["replicas"], {"value": "4"})  # typed: sent as the schema's integer
    update_message(kernel, form["note"], {"value": "be quick"})
    time.sleep(0.3)
    kernel.click(form["submit"])
    wait_for(kernel, "turn.done")
    out = kernel.run("print((await turn).text)").text
    assert out.strip() == "You chose: database=postgres, note=be quick, replicas=4"  # migrate untouched: not sent
