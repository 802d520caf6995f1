"""The product in a real kernel: magics, views, clicks, cancel, crash, shutdown."""

import json
import re
import time

import pytest

from kernel_client import Kernel, act, buttons_of, process_alive, wait_for

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
               "turn = demo.send('edit notes.txt')\ncard = await demo.next_permission(timeout=60)")
    # the card is in the view: its buttons are what the front-end shows
    wait_for(kernel, "views_of(demo)[0].feed.find(views_of(demo)[0].feed.key(card.permission)) is not None")
    info = json.loads(kernel.run("view = views_of(demo)[0]\n"
                                 "print(json.dumps([view.model_id, view.card_html(card)]))").text)
    model_id, buttons = info[0], {b["label"]: b for b in buttons_of(info[1])}
    assert list(buttons) == ["Allow once", "Always allow", "Reject"]
    press = buttons["Allow once"]
    act(kernel, model_id, {"act": press["act"], "key": press["key"], "value": press["value"]})  # the user clicks
    wait_for(kernel, "turn.done")
    out = kernel.run("r = await turn\nprint(r.stop_reason, '|', r.text)\n"
                     "print([m['result'] for m in sent if 'result' in m and 'outcome' in (m['result'] or {})])\n"
                     "print(card.label)\nprint('buttons left:', 'data-act' in view.card_html(card))\n"
                     "print(open('notes.txt').read())").text
    assert "end_turn | Edited notes.txt." in out
    assert ("[{'outcome': {'optionId': 'allow-once', 'outcome': 'selected'}, '_meta': {'escouade': {'by': 'you'}}}]"
            in out)
    assert "Allowed once by you" in out
    assert "buttons left: False" in out  # the answered card shows its answer, no buttons
    assert "Edited by the fake agent." in out
    # a second click (a stale page) sends nothing more
    press = buttons["Reject"]
    act(kernel, model_id, {"act": press["act"], "key": press["key"], "value": press["value"]})
    time.sleep(0.3)
    again = kernel.run("print(len([m for m in sent if 'result' in m and 'outcome' in (m['result'] or {})]))").text
    assert again.strip() == "1"


def test_cancel_while_card_pending(kernel):
    kernel.run("demo = %escouade fake --as canceller\nawait demo.ready()\n"
               "sent = []\ndemo.transport.observers.append(lambda d, m: d == 'out' and sent.append(m))\n"
               "turn = demo.send('run npm test')\ncard = await demo.next_permission(timeout=60)")
    wait_for(kernel, "views_of(demo)[0].feed.find(views_of(demo)[0].feed.key(card.permission)) is not None")
    kernel.run("view = views_of(demo)[0]")
    assert kernel.run("print(view.head()['can']['stop'])").text.strip() == "True"
    stop_id = kernel.run("print(view.model_id)").text.strip()
    act(kernel, stop_id, {"act": "stop"})  # the user presses Stop
    wait_for(kernel, "turn.done")
    out = kernel.run(
        "r = await turn\nprint('stop:', r.stop_reason)\n"
        "print('methods:', [m.get('method') for m in sent if 'method' in m])\n"
        "print('answers:', [m['result'] for m in sent if 'result' in m and 'outcome' in (m['result'] or {})])\n"
        "await asyncio.sleep(0.2)\n"
        "print('card:', card.label, 'data-act' in view.card_html(card))\n"
        "print('tool:', r.tool_calls[0].shown_status)").text
    assert "stop: cancelled" in out
    assert "'session/cancel'" in out
    assert "answers: [{'outcome': {'outcome': 'cancelled'}}]" in out
    assert "card: Cancelled (you stopped the turn) False" in out  # no button left
    assert "tool: failed" in out  # the agent's own update after the cancel is applied


def test_prompts_are_queued_not_lost(kernel):
    out = kernel.run("demo = %escouade fake --as queue\nawait demo.ready()\n"
                     "t1 = demo.send('slow'); t2 = demo.send('hello one'); t3 = demo.send('hello two')\n"
                     "import time\nend = time.monotonic() + 30\n"
                     "while demo.status != 'working' and time.monotonic() < end:\n    await asyncio.sleep(0.02)\n"
                     "demo.cancel()\n"
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
                     "%escouade stop stopper\nimport time\nend = time.monotonic() + 30\n"
                     "while demo.status != 'closed' and time.monotonic() < end:\n    await asyncio.sleep(0.02)\n"
                     "print(demo.status)").text
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
    deadline = time.monotonic() + 30
    while (process_alive(a) or process_alive(b)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not process_alive(a) and not process_alive(b)


def test_mode_dropdown_plan_card_and_question_form(kernel):
    kernel.run("demo = %escouade fake --as dials\nawait demo.ready()\nawait asyncio.sleep(0.3)\n"
               "view = views_of(demo)[0]")
    head = json.loads(kernel.run("print(json.dumps([view.model_id, view.head()['controls']]))").text)
    model_id = head[0]
    ids = {c["key"]: [o[1] for o in c["options"]] for c in head[1]}
    assert list(ids) == ["escouade_mode", "agent_mode", "config:sandbox", "config:model", "config:verbose"]
    modes = ids["escouade_mode"]
    assert modes == ["default", "acceptEdits", "bypassPermissions", "readOnly"]
    act(kernel, model_id, {"act": "set", "key": "escouade_mode", "value": "acceptEdits"})  # the user picks a mode
    wait_for(kernel, "demo.escouade_mode == 'acceptEdits' and demo.conversation.current_mode_id == 'accept-edits'")
    assert "full-access" in ids["config:sandbox"]
    act(kernel, model_id, {"act": "set", "key": "config:sandbox", "value": "full-access"})
    wait_for(kernel, "next(o for o in demo.conversation.config_options if o['id'] == 'sandbox')['currentValue']"
                     " == 'full-access'")
    # a plan to approve: the card's Approve button
    kernel.run("turn = demo.send('present plan')\ncard = await demo.next_permission(timeout=60)")
    wait_for(kernel, "view.feed.find(view.feed.key(card.permission)) is not None")
    buttons = {b["label"]: b for b in buttons_of(json.loads(kernel.run(
        "print(json.dumps(view.card_html(card)))").text))}
    assert list(buttons) == ["Approve", "Keep planning"]
    act(kernel, model_id, {"act": buttons["Approve"]["act"], "key": buttons["Approve"]["key"]})
    wait_for(kernel, "turn.done")
    assert "Plan approved" in kernel.run("print((await turn).text, card.label)").text
    # a question: fill the form as a person would, then Submit
    kernel.run("turn = demo.send('ask me')\nq = await demo.next_question(timeout=60)")
    wait_for(kernel, "view.feed.find(view.feed.key(q.question)) is not None")
    html = json.loads(kernel.run("print(json.dumps(view.card_html(q)))").text)
    assert all(f'data-field="{name}"' in html for name in ("database", "replicas", "note"))
    submit = next(b for b in buttons_of(html) if b["label"] == "Submit")
    # what the front-end collects: the choice's index, the text typed (untouched fields not sent)
    act(kernel, model_id, {"act": submit["act"], "key": submit["key"],
                           "fields": {"database": "0", "replicas": "4", "note": "be quick"}})
    wait_for(kernel, "turn.done")
    out = kernel.run("print((await turn).text)").text
    assert out.strip() == "You chose: database=postgres, note=be quick, replicas=4"  # migrate untouched: not sent
