"""``%%escouade a,b`` in JupyterLab, as a person sees it: the turns side by side (each card
answered in its column, its status said once), the comparison frozen when they end (a merge
after it said as such), then the notebook saved, its kernel shut down, reopened — the
finished turns and the comparison still there, no "model not found"; light, dark, narrow."""

from __future__ import annotations

import re

from test_lab import comparison_rows, reopen, save, set_theme, widgets_tried
from browser_waits import until

MODEL_NOT_FOUND = """() => [...document.querySelectorAll('.jp-OutputArea-output')]
    .filter(e => /model not found|Error displaying widget/i.test(e.innerText) && e.getClientRects().length
                 && getComputedStyle(e).visibility !== 'hidden')
    .map(e => e.innerText.slice(0, 80))"""

PINNED_NOTE = """v => { const c = v.querySelector('.esc-item.esc-pinned > .esc-card');
  return c ? getComputedStyle(c, '::after').content : null; }"""


def side_by_side(columns) -> bool:
    box = [columns.nth(i).bounding_box() for i in (0, 1)]
    return box[0]["x"] + box[0]["width"] <= box[1]["x"] + 1 and abs(box[0]["width"] - box[1]["width"]) < 2


def stacked(columns, what: str) -> None:
    """Wait (10 s at most) until the second column is laid out under the first."""
    def under() -> bool:
        box = [columns.nth(i).bounding_box() for i in (0, 1)]
        return box[1]["y"] >= box[0]["y"] + box[0]["height"] - 1

    until(under, what, 10)


def test_side_by_side_turns_live_then_saved_without_their_kernel(nb):
    repo = nb.work / "proj"
    nb.open(["%load_ext escouade_nb",
             "import subprocess\nfrom pathlib import Path\n"
             f"repo = Path({str(repo)!r})\nrepo.mkdir()\n"
             "(repo / 'notes.txt').write_text('Buy milk.\\n')\n"
             "git = ['git', '-c', 'user.name=You', '-c', 'user.email=you@example.com']\n"
             "for args in (['init', '-q', '-b', 'main'], ['add', 'notes.txt'], ['commit', '-qm', 'base']):\n"
             "    subprocess.run([*git, *args], cwd=repo, check=True)",
             "a = %escouade fake --cwd {repo} --as a --worktree",
             "b = %escouade fake --cwd {repo} --as b --worktree",
             "%%escouade a,b\nPlease edit notes.txt",
             "%escouade merge a"])
    for i in range(4):
        nb.run_cell(i)
    for i in (2, 3):
        nb.wait_status(nb.agent_view(i), "idle")
    nb.run_cell(4)
    compare = nb.output(4).locator(".esc-view.esc-compare:not(.esc-saved)")
    columns = compare.locator(".esc-view.esc-turn")
    columns.nth(1).wait_for()
    assert columns.count() == 2
    heads = compare.locator(".escouade-compare-head")
    table = compare.locator("table.escouade-comparison")
    for i, name in enumerate("ab"):  # every card answerable in its own column, under whose it is
        col = columns.nth(i)
        pin = col.locator(".esc-pins .esc-pin")
        pin.wait_for()
        assert pin.locator(".esc-pin-title").inner_text() == "Edit notes.txt"
        assert heads.nth(i).inner_text() == f"{name} · Fake · worktree escouade/{name} (off main) · no changes"
        # one status, said once and the same everywhere: the turn's head and the table's row
        until(lambda: "waiting for you" in col.locator(".esc-head .esc-status").inner_text(),  # noqa: B023 (called now)
                   "turn head says waiting")
        note = col.evaluate(PINNED_NOTE)  # the card in the transcript says where to answer it: just below
        assert note and "answer it below this turn" in note and "prompt box" not in note, note
    until(lambda: [r[1] for r in comparison_rows(table)[1:]] == ["waiting for you"] * 2, "rows say waiting")
    assert compare.locator(".esc-compare-state").inner_text() == ""  # not frozen yet
    nb.shot(compare, "orchestration-pending")
    for col in (columns.nth(0), columns.nth(1)):
        col.locator(".esc-pins button", has_text="Allow once").click()
        col.locator(".esc-transcript .esc-answer", has_text="Allowed once by you").wait_for()
    for col in (columns.nth(0), columns.nth(1)):
        col.locator(".esc-msg.esc-agent", has_text="Edited notes.txt.").wait_for()
    compare.locator(".esc-compare-state", has_text="as the turns ended").wait_for(timeout=20_000)
    head, *rows = comparison_rows(table)
    assert head == ["agent", "stop", "agent time", "waited for you", "tokens", "cost", "files changed", "tool calls",
                    "cards"]
    assert [r[0] for r in rows] == ["a", "b"]
    for r in rows:
        assert r[1] == "end_turn" and re.fullmatch(r"\d+\.\d s", r[2]) and re.fullmatch(r"\d+\.\d s", r[3]), r
        assert r[4:] == ["+1200 (1200/200000)", "0.004 USD", "1 file changed, +1 -0 (notes.txt)", "1",
                         "Allowed once by you"], r
    assert side_by_side(columns)
    nb.shot(compare, "orchestration")
    # a merge afterwards: the row keeps what the turn did; the change is said under the table
    nb.run_cell(5)
    compare.locator(".esc-compare-since", has_text="a: merged into main since").wait_for(timeout=20_000)
    assert comparison_rows(table)[1][6] == "1 file changed, +1 -0 (notes.txt)"
    page = nb.page
    try:  # a narrow window: the second column goes under the first; the table scrolls in its box
        page.set_viewport_size({"width": 640, "height": 1600})
        stacked(columns, "the live table's columns stacked")
        wrap = compare.locator(".esc-compare-table")
        scroll = wrap.evaluate("b => [b.scrollWidth, b.clientWidth, getComputedStyle(b).overflowX]")
        assert scroll[0] <= scroll[1] or scroll[2] == "auto", scroll
        nb.shot(compare, "orchestration-narrow")
    finally:
        page.set_viewport_size({"width": 1200, "height": 900})

    # saved, the kernel shut down, reopened: the record, without any widget
    save(nb)
    nb.lab_page.close_documents()
    nb.lab.shutdown_sessions(nb.path)
    until(lambda: not nb.lab.sessions_for(nb.path), "kernel shut down", timeout=30)
    reopen(nb)
    static = nb.output(4).locator(".esc-saved.esc-compare")
    static.wait_for(timeout=20_000)
    assert static.is_visible()
    text = static.inner_text()
    assert text.count("Edited notes.txt.") == 2 and text.count("Please edit notes.txt") == 2, text
    assert "turn queued" not in text and "waiting for you" not in text.replace("waiting for you\t", "")
    saved_cols = static.locator(".esc-compare-col")
    assert saved_cols.count() == 2 and side_by_side(saved_cols)
    assert [saved_cols.nth(i).locator(".escouade-compare-head").inner_text() for i in (0, 1)] == [
        "a · Fake · worktree escouade/a (off main)", "b · Fake · worktree escouade/b (off main)"]
    head, *rows = comparison_rows(static.locator("table.escouade-comparison"))
    assert [r[6] for r in rows] == ["1 file changed, +1 -0 (notes.txt)"] * 2  # as the turns ended
    assert static.locator(".esc-compare-since").inner_text() == "a: merged into main since"
    assert static.locator("button").count() == 0
    widgets_tried(page)
    assert page.evaluate(MODEL_NOT_FOUND) == []
    nb.shot(static, "orchestration-saved")
    try:
        set_theme(nb, "JupyterLab Dark")
        nb.shot(static, "orchestration-saved-dark")
        page.set_viewport_size({"width": 640, "height": 1600})
        stacked(saved_cols, "the saved table's columns stacked")
        nb.shot(static, "orchestration-saved-narrow-dark")
    finally:
        page.set_viewport_size({"width": 1200, "height": 900})
        set_theme(nb, "JupyterLab Light")
