"""Saved forms in a real JupyterLab: a notebook with an agent view, a long ``%%escouade``
turn, the squad and the journal is run, saved, its kernel shut down, reopened — what a
person sees then (and nbconvert, for a viewer without a kernel)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_lab import open_agent, reopen, save, set_theme, wait_static_turn, widgets_tried
from browser_waits import until

STALE = ("turn queued", "starting…", "working…", "reading…", "thinks…", "Error displaying widget", "model not found")


def companions_final(nb) -> bool:
    """The saved forms the page holds (hidden while live) say what the test reads after the reload."""
    def text(i: int, css: str) -> str:
        found = nb.output(i).locator(css)
        return (found.first.text_content() or "") if found.count() else ""

    agent, turn, squad = text(1, ".esc-saved-agent"), text(2, ".esc-saved.esc-turn"), text(3, ".esc-saved-squad")
    return ("00399 x" in agent and "chunks 400" in agent and "● done" in turn and "fake" in squad
            and text(4, ".esc-saved-journal") != "" and not any(w in t for w in STALE for t in (agent, turn, squad)))


def test_saved_forms_after_save_shutdown_reload(nb):
    open_agent(nb, "%%escouade fake\nchunks 400", "%escouade squad", "%escouade journal")
    nb.run_cell(2)
    wait_static_turn(nb, 2, timeout=60)
    nb.run_cell(3)
    nb.run_cell(4)
    until(lambda: companions_final(nb), "the companions redrawn as last seen (COMPANION_WAIT after a change)")
    save(nb)
    nb.lab_page.close_documents()
    nb.lab.shutdown_sessions(nb.path)
    until(lambda: not nb.lab.sessions_for(nb.path), "kernel shut down")
    reopen(nb)
    page = nb.page
    turn = nb.output(2).locator(".esc-saved.esc-turn")
    turn.wait_for()
    last = turn.get_by_text("00399 x", exact=False)
    last.scroll_into_view_if_needed()
    assert last.is_visible() and "● done" in turn.inner_text()  # the reply's last chunk, on screen
    agent = nb.output(1).locator(".esc-saved-agent")
    agent.wait_for()
    text = agent.inner_text()
    assert "%escouade resume fake" in text and "chunks 400" in text and "00399 x" in text, text[:300]
    squad = nb.output(3).locator(".esc-saved-squad")
    assert squad.locator("td", has_text="fake").count() >= 1 and "ago" not in squad.inner_text()
    # laid out as live, not as JupyterLab lays out an HTML table (equal columns, cells right-aligned,
    # a number cut in two: "1200/20000" over "0")
    cells = squad.locator("td").evaluate_all("""tds => tds.map(td => { const r = document.createRange();
        r.selectNodeContents(td);
        return {text: td.innerText, align: getComputedStyle(td).textAlign,
                lines: new Set([...r.getClientRects()].map(x => Math.round(x.top))).size}; })""")
    assert all(c["align"] in ("left", "start") for c in cells), cells
    assert [c["lines"] for c in cells if c["text"].startswith("1200/")] == [1], cells
    assert "Journal" in nb.output(4).locator(".esc-saved-journal").inner_text()
    widgets_tried(page)
    shown = page.evaluate("""() => [...document.querySelectorAll('.jp-OutputArea-output')]
        .filter(e => e.getClientRects().length && getComputedStyle(e).visibility !== 'hidden')
        .map(e => e.innerText)""")
    for word in STALE:
        assert not any(word in s for s in shown), (word, [s[:80] for s in shown if word in s])
    nb.shot(nb.output(1), "saved-agent-light")
    last.scroll_into_view_if_needed()
    nb.shot(nb.panel.locator(".jp-Notebook"), "saved-forms-light")
    try:
        set_theme(nb, "JupyterLab Dark")
        nb.shot(nb.output(1), "saved-agent-dark")
        nb.output(3).scroll_into_view_if_needed()
        nb.shot(nb.panel.locator(".jp-Notebook"), "saved-forms-dark")
    finally:
        set_theme(nb, "JupyterLab Light")
    # the saved file through nbconvert (a viewer without a kernel)
    path = nb.lab.root / nb.path
    done = subprocess.run([str(Path(sys.executable).parent / "jupyter-nbconvert"), "--to", "html", str(path),
                           "--output-dir", str(nb.work)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    html = (nb.work / (Path(nb.path).stem + ".html")).read_text(encoding="utf-8")
    assert "00399 x" in html and "%escouade resume fake" in html and "The squad as last drawn" in html
    assert "turn queued" not in html and "starting…" not in html
