"""What a turn costs in bytes to the page, long thread or short (issue 34, finding 5): with a page of
escouade_nb's extension known (its hello), one more one-line turn sends about as many bytes on a long
conversation as on a short one — the saved form's redraw carries what changed, not the whole conversation
(main re-sent the whole form, HTML and text, at every status change). A property, counted in a real kernel;
no timing."""

from __future__ import annotations

import time
import uuid

from kernel_client import scratch_kernel

COUNTED = ("comm_open", "comm_msg", "display_data", "update_display_data")

SETTLED = """
import asyncio
from escouade_nb.widgets import agent_view
for _ in range(1200):  # 60 s at most: the turn over, the saved form's redraw (COMPANION_WAIT after it) gone
    views = list(agent_view._views.get(a, ()))
    if a.status == 'idle' and a.turns.current is None and views and all(v._companion_due is None for v in views):
        break
    await asyncio.sleep(0.05)
else:
    raise TimeoutError('the turn and its saved form did not settle within 60 s')
"""


def say_hello(k) -> None:
    """The hello a notebook page with escouade_nb's extension sends on its own comm (labextension/src/index.js)."""
    kc = k.kc
    msg = kc.session.msg("comm_open", {"comm_id": uuid.uuid4().hex, "target_name": "escouade_nb.notebook",
                                       "data": {"v": 1, "client": "test-page",
                                                "hello": {"path": "cost.ipynb", "panel": "p1", "forms": {}}}})
    kc.shell_channel.send(msg)


def bytes_of(k, code: str, timeout: float = 120) -> int:
    """Bytes (packed content) of every view message and display on iopub while ``code`` runs, whatever their
    parent (a redraw's timer is not the cell's)."""
    kc = k.kc
    msg_id = kc.execute(code)
    total, deadline = 0, time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["msg_type"] in COUNTED:
            total += len(kc.session.pack(msg["content"]))
        if msg["msg_type"] == "error" and msg["parent_header"].get("msg_id") == msg_id:
            raise AssertionError(f"cell failed: {msg['content']['ename']}: {msg['content']['evalue']}")
        if (msg["msg_type"] == "status" and msg["parent_header"].get("msg_id") == msg_id
                and msg["content"]["execution_state"] == "idle"):
            return total


def one_more_turn(tmp, long_reply: bool) -> int:
    k = scratch_kernel(tmp)
    try:
        k.run("%load_ext escouade_nb")
        say_hello(k)
        k.run(f"a = %escouade fake --cwd {tmp}\nawait a.ready()")
        k.run("_ = await a.send('chunks 1000 of 100')" if long_reply else "_ = await a.send('a short one')")
        bytes_of(k, SETTLED)  # the thread's own redraws drained
        return bytes_of(k, "_ = await a.send('one more line')\n" + SETTLED)
    finally:
        k.run("await a.close()", allow_error=True)
        k.shutdown()


def test_a_turn_costs_the_same_bytes_on_a_long_thread_as_on_a_short_one(tmp_path) -> None:
    for name in ("short", "long"):
        (tmp_path / name / "ws").mkdir(parents=True)
    short = one_more_turn(tmp_path / "short", long_reply=False)
    long = one_more_turn(tmp_path / "long", long_reply=True)
    # a 100 KB reply behind it: main sent the whole saved form (HTML and text) at each status change
    print(f"one more turn: {long:,} B after a 100 KB reply, {short:,} B after a short one")
    assert long <= 2 * short, (long, short)


def test_a_turn_s_saved_form_holds_its_reply_when_its_cell_ends(tmp_path) -> None:
    """No page (nbclient, VS Code): the saved form's display update with the reply is sent before the cell that
    awaited the turn ends, not a second later — a save, or a kernel shut down, right after the reply keeps it
    (a stranger's review: the form kept only the header after a shutdown within that second)."""
    (tmp_path / "ws").mkdir()
    k = scratch_kernel(tmp_path)
    try:
        k.run(f"%load_ext escouade_nb\na = %escouade fake --cwd {tmp_path}\nawait a.ready()")
        k.run("_ = await a.send('Last words')")  # displays: what a front-end holds once this cell is idle
        forms = [d.get("text/plain", "") for d in k.displays.values() if "Last words" in d.get("text/plain", "")]
        assert any("You said: Last words" in f for f in forms), forms  # the fake agent's reply
    finally:
        k.run("await a.close()", allow_error=True)
        k.shutdown()
