"""A run left running as a task, seen in a real JupyterLab (issue 36), as a person sees it.

The shipped fake agent's ``run long code`` asks to run code that prints a line every 50 ms; you
allow it on its card; the agent's answer comes after 2 s (the run goes on as a task). The card's
tool call says "running as a task", its last lines grow as the run prints (20 at most), and its
**Interrupt** stops the run: the card says "task interrupted by you", no button is left, and the
run's whole result (its ``KeyboardInterrupt``) is on the card, once.
"""

from __future__ import annotations

import pytest
from browser_waits import until

pytestmark = pytest.mark.browser

CODE = "import time\nfor i in range(100000):\n    print('line', i, flush=True)\n    time.sleep(0.05)"
CONNECTED = """import asyncio
async with asyncio.timeout(60):
    while a.kernel_tools_state[0] != 'connected':
        await asyncio.sleep(0.05)"""


def test_a_tasks_output_streams_in_its_card_and_interrupt_stops_it(nb):
    nb.open(["%load_ext escouade_nb", f"a = %escouade fake --cwd {nb.work} --as a", CONNECTED])
    for i in range(3):
        nb.run_cell(i)
    view = nb.agent_view(1)
    nb.wait_status(view, "idle")
    nb.send(view, "run long code\n" + CODE, typed=False)
    pin = view.locator(".esc-pins .esc-pin")
    pin.wait_for()
    pin.locator('button[data-act="choose"][data-value="run"]').click()
    task = view.locator(".esc-transcript .esc-task")
    until(lambda: task.count() == 1 and "running as a task" in task.inner_text(), "the card says it runs as a task",
          60)
    out = task.locator(".esc-task-out")

    def last() -> int:
        lines = out.inner_text().strip().splitlines() if out.count() else []
        return int(lines[-1].split()[-1]) if lines and lines[-1].startswith("line ") else -1

    until(lambda: last() >= 5, "the run's output shows in the card", 60)
    seen = last()
    until(lambda: last() >= seen + 20, "the output grows as the run prints", 60)
    assert len(out.inner_text().strip().splitlines()) <= 20  # its last lines only
    assert "running as a task" in task.inner_text()
    nb.shot(view, "task-running")
    task.locator("button", has_text="Interrupt").click()
    until(lambda: "task interrupted by you" in task.inner_text(), "the card says the task was interrupted", 60)
    assert task.locator("button").count() == 0
    card = view.locator(".esc-transcript .esc-card.esc-tool:has(.esc-task)")
    until(lambda: "(interrupted by the user (Interrupt in the agent's view))" in card.inner_text(),
          "the run's whole result on the card: its KeyboardInterrupt", 30)
    assert "KeyboardInterrupt" in card.inner_text() and out.count() == 0  # its lines once, in the result
    nb.shot(view, "task-interrupted")
    assert not nb.errors, nb.errors
