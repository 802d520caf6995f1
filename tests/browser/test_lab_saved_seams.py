"""The saved form at every save, whatever the page's history (issue 34, finding 1), in a real JupyterLab and
Notebook 7 with the fake agent. JupyterLab: a prompt; the notebook's tab closed and reopened while the kernel
runs, then a card answered and another prompt; the page reloaded, another prompt; a second browser tab of the same
notebook, a prompt sent there — each save (from the first tab) writes the agent's companion output as the live
view is; then the kernel shut down: the file keeps the last true form. Notebook 7: a prompt, its tab closed and
opened again, another prompt, saved. (JupyterLab routes a display update only to the outputs its current page
displayed: without escouade_nb's extension writing the form into the document, the file kept the form of the
moment the tab closed.)"""

from __future__ import annotations

import nbformat

from browser_waits import until
from test_lab import open_agent, pins, replies, reopen, save, start_cells


def saved_agent_form(nb) -> tuple[str, str]:
    """(text/plain, text/html) of the agent view's companion output in the saved file (cell 1)."""
    book = nbformat.read(str(nb.lab.root / nb.path), as_version=4)
    for out in book.cells[1].get("outputs", []):
        html = out.get("data", {}).get("text/html", "")
        if "esc-saved-agent" in html:
            return out["data"].get("text/plain", ""), html
    raise AssertionError(f"no agent companion in the saved cell: {book.cells[1].get('outputs')}")


def says(nb, *words: str) -> bool:
    plain, html = saved_agent_form(nb)
    return all(w in plain and w in html for w in words)


def turn(nb, view, prompt: str, reply: str) -> None:
    nb.send(view, prompt, key="Enter")
    replies(view).get_by_text(reply, exact=False).wait_for(timeout=60_000)
    nb.wait_status(view, "idle", timeout=60)


def answer_card(nb, view) -> None:
    """A permission card (the fake agent's edit of notes.txt), allowed once in the view."""
    nb.send(view, "Please edit notes.txt", key="Enter")
    pins(view).locator("button[data-act]", has_text="Allow once").click(timeout=60_000)
    replies(view).get_by_text("Edited notes.txt.").wait_for(timeout=60_000)
    nb.wait_status(view, "idle", timeout=60)


def saved_until_true(nb, *words: str) -> None:
    """Save (as a person would, once more if the view's late redraw made it dirty) until the file's form
    says ``words`` — within 60 s: the page writes a redraw COMPANION_WAIT after a status change."""
    def saved_true() -> bool:
        save(nb)
        return says(nb, *words)

    until(saved_true, f"the saved form says {words}", 60)


def test_saved_form_after_tab_closed_and_reopened_and_a_reload(nb):
    (nb.work / "notes.txt").write_text("Buy milk.\n")
    view = open_agent(nb)
    turn(nb, view, "Prompt before the close", "You said: Prompt before the close")
    saved_until_true(nb, "Prompt before the close")
    nb.lab_page.close_documents()  # the tab closed; the kernel goes on
    reopen(nb)
    view = nb.agent_view(1)
    replies(view).get_by_text("You said: Prompt before the close").wait_for(timeout=60_000)
    answer_card(nb, view)
    turn(nb, view, "Prompt after the reopen", "You said: Prompt after the reopen")
    saved_until_true(nb, "Prompt after the reopen", "Edited notes.txt.")
    plain, _html = saved_agent_form(nb)
    assert "unanswered when this was saved" not in plain, plain[-800:]
    # a reload of the page: the document comes from the file, the kernel's views go on
    nb.lab_page.load()
    reopen(nb)
    view = nb.agent_view(1)
    turn(nb, view, "Prompt after the reload", "You said: Prompt after the reload")
    saved_until_true(nb, "Prompt after the reload", "Prompt after the reopen", "Edited notes.txt.")
    # a second browser tab of the same notebook (its own document): a prompt sent there, saved from the first
    second = nb.lab_page.second_tab(nb.path, "saved-seams-second")
    there = second.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell").nth(1).locator(
        ".esc-view.esc-agent")
    there.wait_for(timeout=120_000)
    turn(nb, there, "Prompt from a second tab", "You said: Prompt from a second tab")
    saved_until_true(nb, "Prompt from a second tab", "Prompt after the reload")
    second.close()
    # the kernel shut down after the save: the file keeps the last true form
    nb.lab_page.close_documents()
    nb.lab.shutdown_sessions(nb.path)
    until(lambda: not nb.lab.sessions_for(nb.path), "kernel shut down")
    assert says(nb, "Prompt after the reload", "Prompt after the reopen")
    assert "%escouade resume fake" in saved_agent_form(nb)[1]


def test_saved_form_after_tab_closed_and_reopened_in_notebook_7(nb):
    nb.write(start_cells(nb))
    seven = nb.in_notebook_7()
    seven.run_cell(0)
    seven.run_cell(1)
    view = seven.agent_view(1)
    seven.wait_status(view, "idle")
    turn(seven, view, "Prompt before the close", "You said: Prompt before the close")

    def saved_true(page, *words: str) -> bool:
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        return says(nb, *words)

    until(lambda: saved_true(seven.page, "Prompt before the close"), "saved before the close", 60)
    seven.page.close()  # Notebook 7's tab closed; the kernel goes on
    seven = nb.in_notebook_7()
    try:
        view = seven.agent_view(1)
        replies(view).get_by_text("You said: Prompt before the close").wait_for(timeout=60_000)
        turn(seven, view, "Prompt after the reopen", "You said: Prompt after the reopen")
        until(lambda: saved_true(seven.page, "Prompt before the close", "Prompt after the reopen"),
              "the saved form says the prompt sent after the reopen", 60)
    finally:
        seven.page.close()
