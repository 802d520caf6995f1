"""agent.activity in a real kernel against the shipped fake agent: ``go silent`` stalls (the
agent's head, its cell's turn view and the squad's row say "stalled for N s", Stop at hand),
the view's Stop clears it and the record keeps how long it was quiet (the saved form, a
resume in a second kernel: the fake sends its usage after a Stop, so that stall ended "then
it sent an update"); ``go quiet N s`` stalls and clears by itself when the agent
speaks again."""

import json

import pytest

from kernel_client import act, scratch_kernel, wait_for

pytestmark = pytest.mark.kernel


def test_stalled_shows_in_the_views_clears_and_stays_on_record(tmp_path):
    for folder in ("ws", "plugins"):
        (tmp_path / folder).mkdir()
    kernel = scratch_kernel(tmp_path)
    try:
        kernel.run("%load_ext escouade_nb\nimport json\nfrom escouade_nb.widgets import views_of\n"
                   "from escouade_nb.widgets.squad_view import agent_row\n"
                   "from escouade_nb.core.render_text import render_items\n"
                   "a = %escouade fake --as quiet\nawait a.ready()")
        bad = kernel.run("a.stall_after = 0", allow_error=True)
        assert bad.error is not None and "stall_after must be a positive number" in bad.error
        kernel.run("a.stall_after = 0.5\nseen = []\n"
                   "a.on_status.subscribe(lambda ag: seen.append(ag.activity.state))\n"
                   "turn = a.send('go quiet 3 s')")
        wait_for(kernel, "turn.done", timeout=90)
        out = json.loads(kernel.run("print(json.dumps([seen, turn.stop_reason, a.activity.state, "
                                    "render_items(a.conversation.items)]))").text)
        seen, stop, now, text = out
        assert stop == "end_turn" and now == "idle"
        assert "stalled" in seen and seen.index("writing") < seen.index("stalled") < len(seen) - 1, seen
        assert "(stalled), then it sent an update" in text and "…and I am back." in text, text

        kernel.run("turn = a.send('go silent')")
        wait_for(kernel, "a.activity.state == 'stalled'", timeout=60)
        wait_for(kernel, "len(views_of(a)) == 1")
        shown = json.loads(kernel.run(
            "h = views_of(a)[0].head()\n"
            "print(json.dumps([h['status_text'], h['tone'], h['activity'], h['can']['stop'], h['steer'], "
            "agent_row(a)['status'], a.activity.since.tzname()]))").text)
        status_text, tone, activity, can_stop, steer, row, tz = shown
        assert status_text.startswith("stalled for ") and tone == "stalled" and activity == "stalled"
        assert can_stop and steer  # Stop and Steer at hand
        assert row.startswith("stalled for ") and tz == "UTC"
        model_id = kernel.run("print(views_of(a)[0].model_id)").text.strip()
        act(kernel, model_id, {"act": "stop"})
        wait_for(kernel, "turn.done", timeout=60)
        out = json.loads(kernel.run("print(json.dumps([turn.stop_reason, a.activity.state, "
                                    "render_items(a.conversation.items), views_of(a)[0].static_body()]))").text)
        stop, now, text, saved = out
        assert stop == "cancelled" and now == "idle"
        # the fake sends its usage after a Stop: the stall ended with that update (what we saw)
        said = [ln for ln in text.splitlines() if "(stalled)" in ln]
        assert len(said) == 2 and said[1].endswith("(stalled), then it sent an update"), text
        assert said[1].removeprefix("[warning] ") in saved  # the saved form keeps it
        kernel.run("await a.close()")
    finally:
        kernel.shutdown()

    again = scratch_kernel(tmp_path)  # a new kernel: resumed from the transcript
    try:
        again.run("%load_ext escouade_nb\nfrom escouade_nb.core.render_text import render_items\n"
                  "a = %escouade resume quiet")
        text = again.run("print(render_items(a.conversation.items))").text
        assert text.count("(stalled), then it sent an update") == 2, text
        assert again.run("print(a.activity.state)").text.strip() == "idle"
    finally:
        again.shutdown()


def test_an_agent_waiting_on_the_kernels_own_run_is_never_stalled(tmp_path):
    """``run code`` approved: the kernel runs the agent's code for 3 s while the agent waits on
    its tool call — the kernel works, not the agent: no *stalled*, no stall on record."""
    for folder in ("ws", "plugins"):
        (tmp_path / folder).mkdir()
    kernel = scratch_kernel(tmp_path)
    try:
        kernel.run("%load_ext escouade_nb\nimport json\nfrom escouade_nb.core.render_text import render_items\n"
                   "a = %escouade fake --as runner\nawait a.ready()\n"
                   "a.stall_after = 0.5\nseen = []\n"
                   "a.on_status.subscribe(lambda ag: seen.append(ag.activity.state))\n"
                   "turn = a.send('run code import time; time.sleep(3); print(\"slept\")')")
        wait_for(kernel, "len(a.pending_cards) == 1", timeout=60)
        kernel.run("c = a.pending_cards[0]\nc.choose(c.first_of('allow_once'))")
        wait_for(kernel, "turn.done", timeout=90)
        seen, text = json.loads(kernel.run("print(json.dumps([seen, render_items(a.conversation.items)]))").text)
        assert "slept" in text, text
        assert "stalled" not in seen, seen
        assert "(stalled)" not in text, text
        kernel.run("await a.close()")
    finally:
        kernel.shutdown()
