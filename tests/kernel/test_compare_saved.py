"""What outlasts the live views of ``%%escouade a,b`` (side by side turns and their
comparison), ``%escouade sessions`` and ``%escouade update``: a notebook executed by nbclient
in a real kernel, saved, and read back by nbconvert without any kernel — the record a
person sees on GitHub."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from git_repos import GIT_ENV

pytestmark = pytest.mark.kernel



def _execute(tmp_path: Path, cells: list[str], monkeypatch) -> nbformat.NotebookNode:
    """``cells`` run by nbclient in a fresh kernel (cwd ``tmp_path``), saved to
    ``tmp_path/nb.ipynb`` and read back from the file."""
    from escouade_nb.tools.finished_forms import FinishedForms

    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = FinishedForms(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    return nbformat.read(path, as_version=4)


def _nbconvert(tmp_path: Path, name: str = "nb") -> str:
    done = subprocess.run([str(Path(sys.executable).parent / "jupyter-nbconvert"), "--to", "html", f"{name}.ipynb"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return (tmp_path / f"{name}.html").read_text()


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "proj"
    repo.mkdir()
    (repo / "notes.txt").write_text("Buy milk.\n")
    for args in (["init", "-q", "-b", "main"], ["add", "notes.txt"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env={**GIT_ENV, "PATH": "/usr/bin:/bin"})
    return repo


COMPARE_CELLS = [
    "%load_ext escouade_nb",
    "a = %escouade fake --cwd proj --as a --worktree\nb = %escouade fake --cwd proj --as b --worktree\n"
    "await a.ready(); await b.ready()",
    "%%escouade a,b\nPlease edit notes.txt",
    # answer both cards from code (as a click would), then wait for the turns' end and the re-counted diff stats
    "import asyncio, gc\nfrom escouade_nb.widgets.compare_view import CompareView\n"
    "for x in (a, b):\n    (await x.next_permission(timeout=60)).choose('allow_once')\n"
    "view = next(v for v in gc.get_objects() if isinstance(v, CompareView))\n"
    "import time\nend = time.monotonic() + 60\n"
    "while not (all(t.done for t in view.turns) and repr(view).count('1 file changed') == 2) and time.monotonic() < end:\n"
    "    await asyncio.sleep(0.05)",
    "from escouade_nb.engine.squad import get_squad\nprint(await get_squad().merge('a'))\nawait asyncio.sleep(0.3)",
    "print(repr(view).split('\\n\\n')[-2:])",
]


def _outputs(cell) -> tuple[str, str]:
    """(all text/html, all text/plain) of a cell's saved outputs."""
    htmls, plains = [], []
    for out in cell.outputs:
        data = out.get("data") or {}
        htmls.append(data.get("text/html", ""))
        plains.append(data.get("text/plain", "") if "data" in out else out.get("text", ""))
    return "".join(htmls), "\n".join(plains)


def test_side_by_side_turns_saved_whole_with_their_frozen_comparison(tmp_path, monkeypatch):
    """Item 1: the ``%%escouade a,b`` cell saved by nbclient and read by nbconvert holds the
    finished turns side by side and the comparison (no "turn queued", no widget needed);
    item 8: the comparison froze when the turns ended — a merge afterwards does not turn a's
    "1 file changed" into "none" but is said apart ("merged into main since"); tokens and
    cost are the turn's own; agent time and waiting time are apart."""
    _repo(tmp_path)
    nb = _execute(tmp_path, COMPARE_CELLS, monkeypatch)
    html, plain = _outputs(nb.cells[2])
    assert "turn queued" not in plain and "queued" not in html.replace("esc-queued", "")
    for name in ("a", "b"):  # each finished turn, whole: its prompt, its card and who answered, its reply
        assert f"{name}: turn end_turn" in plain
    assert plain.count("Edited notes.txt.") == 2 and html.count("Edited notes.txt.") == 2
    assert html.count("Allowed once by you") >= 4  # the two cards, and the two rows of the table
    assert "escouade-comparison" in html and "merged into main since" in html
    table = html[html.index("<table class='escouade-comparison'>"):]
    assert str(tmp_path) not in table and "proj.worktrees" not in table  # our own parts: no path of this machine
    # the frozen table: a's files changed at the turn's end, kept after the merge
    rows = [line.split("  ") for line in plain.splitlines() if line.startswith(("a ", "b "))]
    assert len(rows) == 2 and all(any("1 file changed, +1 -0 (notes.txt)" in c for c in r) for r in rows), rows
    assert "a: merged into main since" in plain
    table, since = eval(nb.cells[5].outputs[0]["text"])  # the view's text after the merge: a list
    head, *rows = [[c.strip() for c in line.split("  ") if c.strip()] for line in table.splitlines()]
    assert head[-3:] == ["files changed", "tool calls", "cards"], head
    assert [r[-3] for r in rows] == ["1 file changed, +1 -0 (notes.txt)"] * 2, rows  # not "none": a record
    assert [r[2:4] for r in rows] == [["+1200 (1200/200000)", "0.004 USD"]] * 2, rows  # this turn's tokens, cost
    assert since == "a: merged into main since"
    # nbconvert (GitHub's view) shows the same, without a kernel
    page = _nbconvert(tmp_path)
    assert page.count("Edited notes.txt.") >= 2 and "merged into main since" in page
    assert "turn queued" not in page


def test_a_turn_waiting_for_a_card_is_waiting_in_its_head_and_its_column(tmp_path, monkeypatch):
    """Item 10 (``%%escouade`` cells): while a card waits, the turn's own head, the
    comparison's row and core.status say the same words; the agent time leaves out the
    time the card waited, which is counted apart."""
    from kernel_client import Kernel, wait_for

    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    _repo(tmp_path)
    k = Kernel(tmp_path)
    try:
        k.run(COMPARE_CELLS[0])
        k.run(COMPARE_CELLS[1])
        k.run(COMPARE_CELLS[2])
        k.run("import gc\nfrom escouade_nb.widgets.compare_view import CompareView\n"
              "view = next(v for v in gc.get_objects() if isinstance(v, CompareView))")
        wait_for(k, "a.status == 'waiting' and b.status == 'waiting'", timeout=60)
        out = k.run("import time; time.sleep(0.3)\nfrom escouade_nb.engine.compare import comparison\n"
                    "print(repr(view.views[0].head()['status_text']), repr(comparison(view.turns)[0]['stop']))").text
        assert out.strip() == "'waiting for you' 'waiting for you'", out  # the turn's head, its row: the same
        out = k.run("print(repr(view.head(view.turns[0])))").text  # the column's head: whose, not a second status
        assert out.strip() == "{'name': 'a', 'harness': 'Fake', 'where': ' · worktree escouade/a (off main) · no changes'}"
        k.run("for x in (a, b):\n    (await x.next_permission(timeout=60)).choose('allow_once')\n"
              "await a.turns.current.wait() if a.turns.current else None")
        wait_for(k, "view.comparison.frozen is not None", timeout=60)
        out = k.run("t = view.turns[0]; c = view.comparison\n"
                    "print(c.waiting_time(0) > 0.25, abs(float(c.frozen[0]['agent time'][:-2]) + c.waiting_time(0)"
                    " - t.duration) < 0.11)").text
        assert out.split() == ["True", "True"], out
    finally:
        k.shutdown()


def test_sessions_list_and_update_outcome_saved_without_their_kernel(tmp_path, monkeypatch):
    """The sessions view saves the list as a static table and the update view its outcome as
    text: read back from the saved notebook by nbconvert, with no kernel and nothing transient
    ("asking … for its sessions…", "running…", "version unknown")."""
    import os
    import sysconfig

    from kernel_client import write_updatable_harness

    monkeypatch.setenv("PATH", sysconfig.get_path("scripts") + os.pathsep + os.environ.get("PATH", ""))
    plugins = tmp_path / "plugins"
    write_updatable_harness(plugins)
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
    wait = ("import asyncio, gc\nfrom escouade_nb.widgets.{mod} import {cls}\n"
            "import time\nend = time.monotonic() + 60\n"
            "while not [v for v in gc.get_objects() if isinstance(v, {cls}) and {cond}] and time.monotonic() < end:\n"
            "    await asyncio.sleep(0.05)\nawait asyncio.sleep(0.2)")
    # each waits in its own cell: what comes after a cell has ended reaches nbclient only while a
    # later cell runs (JupyterLab takes it at any time)
    nb = _execute(tmp_path, [
        "%load_ext escouade_nb",
        "f = %escouade fake --as f\nawait f.send('Plan the week')",
        "%escouade sessions f\n" + wait.format(mod="sessions_view", cls="SessionsView", cond="v.page.sessions"),
        "%escouade update updatable --yes\n" + wait.format(mod="update_view", cls="UpdateView",
                                                          cond="v.result and v.before"),
    ], monkeypatch)
    html, plain = _outputs(nb.cells[2])
    assert "<table" in html and "Sessions of f" in html and "Plan the week" in html
    assert plain.lstrip().startswith("Sessions of f:") and "Plan the week" in plain
    assert "asking f for its sessions" not in plain + html
    html, plain = _outputs(nb.cells[3])
    assert "updated; version now: <b>0.1.0</b>" in html and "done" in html
    assert "exit code 0; version now 0.1.0" in plain
    assert "running" not in (html + plain).lower() and "version unknown" not in html + plain
    page = _nbconvert(tmp_path)
    assert "Plan the week" in page and "updated; version now" in page


def test_a_frozen_row_is_the_turn_s_own_when_the_agent_goes_on_at_once(tmp_path, monkeypatch):
    """Item 8: the agent is prompted again before the worktrees' diff stats are re-counted
    (a notebook's next cell): the comparison's row keeps the first turn's tokens, cost and
    files — not the agent's running totals, not the next turn's edit."""
    import asyncio

    from escouade_nb.engine.squad import Squad
    from escouade_nb.widgets.compare_view import CompareView

    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    repo = _repo(tmp_path)

    async def go():
        squad = Squad()
        try:
            for name in ("x", "y"):
                squad.start("fake", cwd=repo, name=name, worktree=True)
            turns = squad.ask_soon(["x", "y"], "hello")
            view = CompareView(turns)
            await asyncio.gather(*(t.wait() for t in turns))
            x = squad.agents["x"]
            edit = x.send("edit notes.txt")  # at once, as the next cell does
            (await x.next_permission(timeout=60)).choose("allow_once")
            await squad.restat_soon([*turns, edit], view.finish)  # the diff stats re-counted only now
            rows = {r["agent"]: r for r in view.comparison.rows(durations=False)}
            assert rows["x"]["tokens"] == "+1200 (1200/200000)" and rows["x"]["cost"] == "0.004 USD", rows
            assert rows["x"]["files changed"] == "none" and rows["x"]["tool calls"] == "0", rows
            assert rows["y"]["files changed"] == "none", rows
            view.close()
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.rules.aclose()

    asyncio.run(asyncio.wait_for(go(), 90))
