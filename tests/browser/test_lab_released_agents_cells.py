"""Released agents change the notebook open in a real JupyterLab, offline, through the scripted
model (tests/agents/model_server.py: ``ESC-MCP <tool> <json>`` makes the model call that tool of
the kernel's server ``escouade`` with those arguments, then end on ``ESC-DONE <tool> returned: …``).

For each agent of ``LIVE_AGENTS`` (installed by ``scripts/install-agents.sh``; skipped with a
one-line reason when it is not): the agent is started from the notebook (its environment points it
at the scripted model, as tests/agents does), the prompt typed in its view asks the model for
``insert_cell`` under the load cell; the cell lands there pending review (``escouade_pending``
naming the agent and its harness), no card waits (escouade_nb allowed the agent's own request: a
change reviewed after), the result ("pending review" with the cell's id) reaches the model, and
the agent holds the change (``agent.pending_edits``).

``test_..._runs_it``: then ``execute_cell`` of that cell, one card clicked *Run*, the output in the
cell and in the model's final text.
"""

from __future__ import annotations

import json

import pytest
from browser_waits import until
from agents.agent_configs import AGENTS, DROP
from agents.model_server import FINAL_PREFIX, ModelServer
from test_lab_live_cells import PANEL


LIVE_AGENTS = ["gemini", "claude-agent"]
TURN = 180  # seconds a turn of a released agent may take on a loaded machine
CELLS = f"() => {PANEL}.content.model.sharedModel.cells.map(c => [c.id, c.getSource(), " \
        "c.getMetadata('escouade_pending') || null])"
CLOSE = "await agent.close()"
SOURCE = "total = sum([120.5, 95.0, 44.0])\nprint('total', total)"


@pytest.fixture(scope="module")
def model_server():
    with ModelServer() as server:
        yield server


def start_agent(nb, model_server, harness: str, tmp_path) -> str:
    """Open a notebook whose first cell starts ``harness`` pointed at the scripted model (its
    environment set in the kernel), run it; its second cell is the load cell, its third says
    ``agent.pending_edits``. Returns the agent's name."""
    spec = AGENTS[harness]
    bin_dir = spec.bin_dir()
    if bin_dir is None:
        pytest.skip(f"{harness} is not installed (scripts/install-agents.sh {harness})")
    env = spec.env(tmp_path / "home", model_server.url)
    name = f"{harness}-lab"
    nb.open([f"import asyncio, json, os\n"
             f"for _k in {DROP!r}:\n    os.environ.pop(_k, None)\n"
             f"os.environ.update(json.loads({json.dumps(env)!r}))\n"
             f"os.environ['PATH'] = {str(bin_dir)!r} + os.pathsep + os.environ['PATH']\n"
             f"%load_ext escouade_nb\n"
             f"agent = %escouade {harness} --cwd {nb.work} --as {name}\n"
             f"await agent.ready()\n"
             f"async with asyncio.timeout(60):  # it connects to the kernel's server during its session's start\n"
             f"    while agent.kernel_tools_state[0] != 'connected':\n"
             f"        await asyncio.sleep(0.1)\n"
             f"print('TOOLS', agent.kernel_tools_state[0])",
             "revenue = [120.5, 95.0, 44.0]",
             "print(agent.pending_edits)", CLOSE])
    nb.run_cell(0, timeout=TURN)
    until(lambda: "TOOLS connected" in nb.output(0).inner_text(), f"{harness} connected to the kernel's server",
          timeout=60)
    return name


def insert_under_the_load_cell(nb, model_server, harness: str, name: str) -> str:
    """The prompt typed in the agent's view; the new cell's id once it is pending under the load cell
    and the model has had the tool's result."""
    page = nb.page
    view = nb.agent_view(0)
    load_id = page.evaluate(CELLS)[1][0]
    mark = model_server.mark()
    prompt = "ESC-MCP insert_cell " + json.dumps({"source": SOURCE, "after_cell_id": load_id}) + \
             " Add a cell under the load cell."
    nb.send(view, prompt, typed=False)
    until(lambda: len(page.evaluate(CELLS)) == 5, f"{harness}'s new cell is in the notebook", timeout=TURN)
    new_id, source, pending = page.evaluate(CELLS)[2]
    assert source == SOURCE, source
    assert pending["change"] == "insert" and pending["agent"] == name, pending
    assert pending["by"]["harness"] == harness and pending["by"]["turn"] == 1, pending
    until(lambda: f"{FINAL_PREFIX} insert_cell returned:" in view.inner_text(), "the result reached the model",
          timeout=TURN)
    text = view.inner_text()
    assert "pending review" in text and new_id in text, text[-2000:]
    assert "Allowed once by escouade_nb" in text or harness == "opencode", "the agent's own request was settled"
    assert any(e["client"] == "127.0.0.1" for e in model_server.since(mark)), "the model traffic came here"

    def held() -> bool:  # asked again until the agent's turn has recorded it
        nb.run_cell(3)
        return f"<PendingEdit insert of cell {new_id} (pending)>" in nb.output(3).inner_text()
    until(held, f"{name}.pending_edits names the new cell", timeout=60)
    return new_id


@pytest.mark.parametrize("harness", LIVE_AGENTS)
def test_a_released_agent_inserts_a_cell_into_the_open_notebook(nb, model_server, harness, tmp_path):
    name = start_agent(nb, model_server, harness, tmp_path)
    try:
        insert_under_the_load_cell(nb, model_server, harness, name)
    finally:
        close_agent(nb)


def close_agent(nb) -> None:
    """Run the notebook's ``await agent.close()`` cell (the agent's processes end with it)."""
    nb.run_cell([c[1] for c in nb.page.evaluate(CELLS)].index(CLOSE), timeout=TURN)


@pytest.mark.parametrize("harness", LIVE_AGENTS)
def test_a_released_agent_inserts_a_cell_and_runs_it(nb, model_server, harness, tmp_path):
    name = start_agent(nb, model_server, harness, tmp_path)
    try:
        run_it(nb, model_server, harness, name)
    finally:
        close_agent(nb)


def run_it(nb, model_server, harness: str, name: str) -> None:
    new_id = insert_under_the_load_cell(nb, model_server, harness, name)
    view = nb.agent_view(0)
    nb.send(view, "ESC-MCP execute_cell " + json.dumps({"cell_id": new_id}) + " Run it.", typed=False)
    pin = view.locator(".esc-pin")  # the card waiting for you, pinned by the prompt box
    pin.wait_for(timeout=TURN * 1000)
    assert pin.count() == 1, "exactly one card"
    assert view.locator(".esc-transcript .esc-item[data-p='1']").count() == 1, "the agent's own request folded into it"
    assert "Run an unreviewed cell in the notebook" in pin.inner_text(), "the card says the cell is pending review"
    # the pin holds the card's question and buttons; the card itself, in the conversation, shows the source
    card = view.locator(".esc-transcript .esc-item.esc-pinned")
    assert SOURCE.splitlines()[0] in card.inner_text(), "the card shows the cell's source"
    pin.get_by_role("button", name="Run", exact=True).click()
    until(lambda: "total 259.5" in nb.output(2).inner_text(), "the output is in the cell", timeout=TURN)
    # its execution count, once the kernel's reply follows the output ("[*]:" until then)
    until(lambda: nb.cell(2).locator(".jp-InputArea-prompt").inner_text().strip()[1:-2].strip().isdigit(),
          "its execution count is set", timeout=TURN)
    until(lambda: f"{FINAL_PREFIX} execute_cell returned:" in view.inner_text(), "the result reached the model",
          timeout=TURN)
    assert "total 259.5" in view.inner_text().split(f"{FINAL_PREFIX} execute_cell returned:", 1)[1]
