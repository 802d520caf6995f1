"""A run left running as a task, in the agent's view (issue 36): the shipped ``fake`` agent in a real
kernel starts a long run (``run long code``); its card's tool call says it runs as a task, with the
last lines it printed (growing, bounded) and an Interrupt button; the view's own message path
(``act``, what the button's click sends) stops it; the view, its saved form, the transcript, the
journal and the agent's ``task_status`` say "interrupted by you" (the user), not "cancelled by the
agent". The saved form of a task still running says so: "running as a task when saved"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_client import fake_with_tools, scratch_kernel, start_task, wait_for

pytestmark = pytest.mark.kernel

LONG = "import time\nfor i in range(100000):\n    print('line', i, flush=True)\n    time.sleep(0.05)"


def test_a_task_shows_its_output_in_the_view_and_its_interrupt_stops_it(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "plugins").mkdir()
    k = scratch_kernel(tmp_path)
    try:
        fake_with_tools(k, "taskview", also="from escouade_nb.widgets.agent_view import AgentView\n")
        k.run("v = AgentView(a)")
        task_id, out = start_task(k, LONG)
        assert "task_id: task-" in out, out
        k.run("call = [i for i in a.conversation.items if type(i).__name__ == 'Permission' "
              "and i.request.title == 'Run code in the kernel'][0].tool_call\n"
              "def last(): return int(call.kernel_task['output'].splitlines()[-1].split()[-1])")
        wait_for(k, "call.kernel_task and call.kernel_task['state'] == 'running' and last() >= 3", timeout=60)
        first = int(k.run("print(last())").text)
        wait_for(k, f"last() >= {first + 25}", timeout=60)  # it grows as the run prints, in the same card
        drawn = k.run("html = v.feed.render(call)[0]\nprint(html)").text
        assert "running as a task" in drawn and 'data-act="interrupt_task"' in drawn and task_id in drawn
        assert k.run("print(len(call.kernel_task['output'].splitlines()), call.kernel_task['cut'] > 0)").text.split() \
            == ["20", "True"]  # the last lines only
        saved = k.run("b = v.companion_bundle()\nprint(b['text/plain'][-3000:])\n"
                      "print('BUTTON' if 'interrupt_task' in b['text/html'] else 'NONE', "
                      "'when saved' in b['text/html'])").text
        assert f"task {task_id}: running as a task when saved" in saved, saved
        assert saved.rstrip().endswith("NONE True")

        k.run("v.act({'k': 'act', 'act': 'interrupt_task', 'key': v.feed.key(call)})")  # the button's message
        wait_for(k, "call.kernel_task['state'] == 'interrupted'", timeout=60)
        drawn = k.run("print(v.feed.render(call)[0])").text
        assert "task interrupted by you" in drawn and "interrupt_task" not in drawn
        assert "KeyboardInterrupt" in drawn
        wait_for(k, "'interrupted by you' in v.companion_bundle()['text/plain']", timeout=30)
        status = k.run(f"print((await a.send('task status {task_id}')).text)", timeout=120).text
        assert f"task {task_id} (run_code): interrupted by the user (Interrupt in the agent's view)" in status
        k.run("await a.close()", allow_error=True, timeout=120)
    finally:
        k.shutdown()

    (path,) = (tmp_path / "transcripts").glob("taskview-*.jsonl")
    records = [json.loads(line)["data"] for line in path.read_text(encoding="utf-8").splitlines()
               if json.loads(line).get("event") == "kernel_tool"]
    (end,) = [r for r in records if r.get("task_end")]
    assert (end["task_id"], end["task_end"], end.get("task_by"), end["status"]) == (task_id, "interrupted", "you",
                                                                                     "error")
    resumed = scratch_kernel(tmp_path)  # a resume draws how it ended
    try:
        resumed.run("%load_ext escouade_nb\nfrom escouade_nb.widgets.agent_view import AgentView\n"
                    "a = %escouade resume taskview\nv = AgentView(a)", timeout=120)
        saved = resumed.run("print(v.companion_bundle()['text/plain'])").text
        assert f"task {task_id}: interrupted by you" in saved and "running as a task" not in saved, saved
    finally:
        resumed.shutdown()
    journal = [json.loads(line) for line in (tmp_path / "journal" / "kernel-tools.jsonl").read_text().splitlines()]
    assert [e["text"] for e in journal if e["kind"] == "Stop"] == \
        [f"task {task_id} of run_code interrupted by you (Interrupt in the agent's view)"]
