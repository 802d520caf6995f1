"""A run left running as a task is on record to its end (issue 36): the shipped ``fake`` agent in a
real kernel starts two long runs (``run long code``), cancels one (``cancel task``) and closes with
the other still running. The transcript has each card's ``running`` result with its task id, then
its end (how it ran, its output, ``task_end``); the journal has a ``Stop`` line per task; a resume in
a new kernel puts the whole result on the card's call."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from deadlines import wait_until
from kernel_client import fake_with_tools, scratch_kernel, start_task

pytestmark = pytest.mark.kernel

CANCELLED = "import time\nprint('first', flush=True)\nwhile True: time.sleep(0.05)"
LEFT = "import time\nprint('second', flush=True)\nwhile True: time.sleep(0.05)"


def _records(tmp: Path) -> list[dict]:
    (path,) = (tmp / "transcripts").glob("tasks-*.jsonl")
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [r["data"] for r in lines if r.get("kind") == "event" and r.get("event") == "kernel_tool"]


def test_a_tasks_end_is_on_record_cancelled_or_ended_with_its_session(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "plugins").mkdir()
    first = scratch_kernel(tmp_path)
    try:
        fake_with_tools(first, "tasks")
        ids = []
        for code in (CANCELLED, LEFT):
            task_id, out = start_task(first, code)
            assert "mcp__escouade__run_code returned: task_id: task-" in out, out
            ids.append(task_id)
        out = first.run(f"print((await a.send('cancel task {ids[0]}')).text)", timeout=120).text
        assert f"task {ids[0]} (run_code): cancelled by the agent (task_cancel)" in out
        first.run("await a.close()", allow_error=True, timeout=120)  # the second task still running
        # its run is interrupted as the session closes, and its end written (before the kernel is shut down)
        wait_until(lambda: sum(p.read_text().count('"task_end"') for p in (tmp_path / "transcripts").glob("tasks-*.jsonl"))
                   == 2, 60, "the second task's end")  # the raw text: a line may be half written
    finally:
        first.shutdown()

    records = _records(tmp_path)
    cards = [r["call"] for r in records if r["phase"] == "card"]
    assert len(cards) == 2
    results = [r for r in records if r["phase"] == "result"]
    running = [(r["call"], r["status"], r.get("task_id")) for r in results if r["status"] == "running"]
    assert running == [(cards[0], "running", ids[0]), (cards[1], "running", ids[1])]
    ends = {r["task_id"]: r for r in results if "task_end" in r}
    assert (ends[ids[0]]["call"], ends[ids[0]]["status"], ends[ids[0]]["task_end"]) == (cards[0], "error", "cancelled")
    assert ends[ids[0]]["output"].startswith("stdout:\nfirst\nerror:\n") and "KeyboardInterrupt" in ends[ids[0]]["output"]
    assert "interrupted by the agent (task_cancel)" in ends[ids[0]]["output"]
    assert (ends[ids[1]]["call"], ends[ids[1]]["task_end"]) == (cards[1], "ended")
    assert "interrupted by the agent's session closing" in ends[ids[1]]["output"]

    journal = [json.loads(line) for line in (tmp_path / "journal" / "kernel-tools.jsonl").read_text().splitlines()]
    stops = [(e["text"], e.get("requestId")) for e in journal if e["kind"] == "Stop"]
    assert sorted(stops) == sorted([(f"task {ids[0]} of run_code cancelled by the agent (task_cancel)", cards[0]),
                                    (f"task {ids[1]} of run_code ended: the agent's session closed", cards[1])])
    assert [(e["verdict"], e["by"]) for e in journal if e["kind"] == "Answer" and "run_code" in e["tool"]] == \
        [("allowed", "you"), ("allowed", "you")]

    second = scratch_kernel(tmp_path)
    try:
        second.run("%load_ext escouade_nb\na = %escouade resume tasks", timeout=120)
        got = second.run(
            "c = [i for i in a.conversation.items if type(i).__name__ == 'Permission' "
            "and i.request.title == 'Run code in the kernel']\n"
            "for i in c:\n"
            "    print(repr([b['content']['text'][:40] for b in i.tool_call.content if b.get('type') == 'content']))\n"
            "    print(i.tool_call.kernel_run['status'])").text.splitlines()
        assert got[1] == "error" and got[3] == "error"  # each run ended (interrupted): not "running"
        assert "'stdout:\\nfirst\\nerror:" in got[0] and "'stdout:\\nsecond\\nerror:" in got[2]
    finally:
        second.shutdown()


def test_a_task_whose_kernel_died_says_so_on_resume(tmp_path):
    """The kernel killed while a task runs: no end line was written; a resume in a new kernel
    says the run has no end on record (never "running")."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "plugins").mkdir()
    first = scratch_kernel(tmp_path)
    try:
        fake_with_tools(first, "died")
        task_id, _ = start_task(first, LEFT)
        os.kill(first.pid, signal.SIGKILL)  # nothing more is written
        first.km.provisioner.process.wait(timeout=60)
    finally:
        first.shutdown()
    second = scratch_kernel(tmp_path)
    try:
        second.run("%load_ext escouade_nb\nfrom escouade_nb.core.render_text import render_items\n"
                   "a = %escouade resume died", timeout=120)
        text = second.run("print(render_items(a.conversation.items))").text
        assert f"task {task_id}: no end on record" in text, text
        assert "running as a task" not in text, text
    finally:
        second.shutdown()
