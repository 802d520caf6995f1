"""Steering from the view and the magics in a real kernel, against the shipped fake agent
(which has no steering extension: the running turn is stopped and a steered prompt
follows): the queue's Edit and Drop and *Steer now* sent as the front-end sends them,
``%%escouade NAME --steer``, "steered" in the text and the saved form, and after a resume
in a second kernel."""

import json

import pytest

from kernel_client import act, scratch_kernel, wait_for

pytestmark = pytest.mark.kernel

SLOW = "stream 400 of 10 at 5/s"  # ~80 s unless stopped: the steer comes while it runs


def test_steer_now_and_the_queue_from_the_view_then_the_magic_and_a_resume(tmp_path):
    for folder in ("ws", "plugins"):
        (tmp_path / folder).mkdir()
    kernel = scratch_kernel(tmp_path)
    try:
        kernel.run("%load_ext escouade_nb\nimport json\nfrom escouade_nb.widgets import views_of\n"
                   "from escouade_nb.core.render_text import render_items\n"
                   "a = %escouade fake --as steerer\nawait a.ready()")
        kernel.run(f"turn = a.send({SLOW!r})\none = a.send('hello one')\ntwo = a.send('hello two')")
        wait_for(kernel, "len(turn.text) > 20")
        wait_for(kernel, "len(views_of(a)) == 1 and views_of(a)[0].head()['steer']")
        head = json.loads(kernel.run("view = views_of(a)[0]\nprint(json.dumps(view.head()['queued']))").text)
        assert [q["text"] for q in head] == ["hello one", "hello two"] and not any(q["steered"] for q in head)
        model_id = kernel.run("print(view.model_id)").text.strip()

        act(kernel, model_id, {"act": "queued", "value": "edit", "key": str(head[0]["id"]), "text": "hello changed"})
        act(kernel, model_id, {"act": "queued", "value": "drop", "key": str(head[1]["id"])})
        wait_for(kernel, "two.status == 'dropped' and [t.id for t in a.queued] == [one.id]")
        assert kernel.run("print(one.prompt[0]['text'])").text.strip() == "hello changed"

        act(kernel, model_id, {"act": "steer", "text": "hello steered"})  # Steer now (Ctrl+Enter)
        wait_for(kernel, "one.done", timeout=30)
        out = kernel.run("print(turn.stop_reason)\nprint(render_items(a.conversation.items))").text
        lines = [ln for ln in out.splitlines() if ln.startswith(("you", "cancelled", "[info]"))]
        assert lines[0] == "cancelled"
        assert lines[1:] == ["you: " + SLOW, "[info] Stopped by you", "you (steered): hello steered",
                             "you: hello changed"], out
        assert "hello two" not in out

        # the magic: %%escouade NAME --steer, while a turn runs
        kernel.run(f"turn2 = a.send({SLOW!r})")
        wait_for(kernel, "len(turn2.text) > 20")
        shown = kernel.run("%%escouade steerer --steer\nhello from the magic")
        assert shown.error is None, shown.text
        wait_for(kernel, "turn2.done and not a.turns.current and not a.queued", timeout=30)
        text = kernel.run("print(render_items(a.conversation.items))").text
        assert "you (steered): hello from the magic" in text and turn_count(text) == 5
        saved = kernel.run("print(view.static_body())").text
        assert saved.count("· steered") == 2  # the saved form says it too
        bad = kernel.run("%%escouade steerer --steer --with x\nhi")
        assert "--steer sends the cell's text alone" in bad.text
        kernel.run("await a.close()")
    finally:
        kernel.shutdown()

    again = scratch_kernel(tmp_path)  # a new kernel: resumed from the transcript
    try:
        again.run("%load_ext escouade_nb\nfrom escouade_nb.core.render_text import render_items\n"
                  "a = %escouade resume steerer")
        text = again.run("print(render_items(a.conversation.items))").text
        assert "you (steered): hello steered" in text and "you (steered): hello from the magic" in text
        assert "you: hello changed" in text and "hello two" not in text
    finally:
        again.shutdown()


def turn_count(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.startswith("you"))
