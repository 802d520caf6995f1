"""Budgets and attention in a real JupyterLab (issue 24.4, 24.5), used as a person uses them.

The budget card: the shipped fake agent reports 1,200 tokens a turn; with ``set_budget(tokens=1000)`` a
prompt typed in the view ends with the card pinned by the prompt box (its words say "Budget reached",
its buttons Continue and Stop), the head saying the spend against the budget; Continue re-arms it.

Attention: chromium's notification permission is granted to the page's origin (``BrowserContext
.grant_permissions``); the page is made hidden by redefining ``document.hidden`` /
``document.visibilityState`` and dispatching ``visibilitychange`` (Playwright has no visibility
emulation); ``window.Notification`` is wrapped to record what is shown. An agent waiting for you
counts in the tab's title, "(1) …", and one that finishes while the page is hidden too; showing the
page again drops the finished one. The squad view's notify toggle turns notifications on (off by default).
In the squad view, ``n`` focuses the next agent waiting and brings its view in sight.
"""

from __future__ import annotations

import re

import pytest
from browser_waits import until


pytestmark = pytest.mark.browser


HIDE = """hidden => {
  Object.defineProperty(document, 'hidden', {configurable: true, get: () => hidden});
  Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => hidden ? 'hidden' : 'visible'});
  document.dispatchEvent(new Event('visibilitychange'));
}"""

RECORD_NOTIFICATIONS = """() => {
  if (window.__notes) return;
  window.__notes = [];
  const Real = window.Notification;
  window.Notification = class extends Real {
    constructor(title, options) { super(title, options); window.__notes.push((options || {}).body); }
  };
}"""


def title(nb) -> str:
    return nb.page.evaluate("() => document.title")


def test_the_budget_card_pinned_in_the_view_and_continue_rearms(nb):
    nb.open(["%load_ext escouade_nb", f"a = %escouade fake --cwd {nb.work} --as a", "a.set_budget(tokens=1000)"])
    for i in range(3):
        nb.run_cell(i)
    view = nb.agent_view(1)
    nb.wait_status(view, "idle")
    nb.send(view, "hello", key="Enter")
    pins = view.locator(".esc-pins")
    pins.get_by_text("Budget reached: 1,200 of 1,000 tokens", exact=False).wait_for(timeout=20_000)
    nb.wait_status(view, "waiting")
    labels = [b.inner_text().strip() for b in pins.locator("button").all() if b.is_visible()]
    assert any(lb.startswith("Continue (another 1,000 tokens)") for lb in labels), labels
    assert any(lb.startswith("Stop (send nothing)") for lb in labels), labels  # the turn has ended
    budget = view.locator(".esc-head .esc-budget")
    assert budget.inner_text() == "budget 1,200 of 1,000 tokens" and "esc-over" in budget.get_attribute("class")
    nb.shot(view, "budget-card")
    pins.locator("button", has_text="Continue").first.click()
    until(lambda: view.locator(".esc-head .esc-budget").inner_text() == "budget 1,200 of 2,200 tokens",
               "the head re-armed")
    nb.wait_status(view, "idle")
    assert "Allowed by you: Continue" in view.locator(".esc-transcript").inner_text()
    assert not nb.errors, nb.errors


def test_title_count_notifications_and_the_jump_key(nb):
    (nb.work / "notes.txt").write_text("Buy milk.\n")
    nb.lab_page.context.grant_permissions(["notifications"], origin=nb.lab.url)
    nb.open(["%load_ext escouade_nb", f"a = %escouade fake --cwd {nb.work} --as a",
             f"b = %escouade fake --cwd {nb.work} --as b", "%escouade squad"])
    for i in range(4):
        nb.run_cell(i)
    va, vb = nb.agent_view(1), nb.agent_view(2)
    nb.wait_status(va, "idle")
    nb.wait_status(vb, "idle")
    squad = nb.output(3).locator(".esc-view.esc-squad")
    squad.wait_for()
    page = nb.page
    page.evaluate(RECORD_NOTIFICATIONS)
    bare = title(nb)
    assert not re.match(r"^\(\d+\) ", bare)
    toggle = squad.locator(".esc-notify")
    assert toggle.inner_text() == "notify: off"  # off by default
    toggle.click()
    until(lambda: toggle.inner_text() == "notify: on", "notifications turned on")
    try:
        page.evaluate(HIDE, True)
        nb.send(va, "run make deploy", key="Enter")  # a waits for you
        until(lambda: title(nb) == f"(1) {bare}", "the title counts a waiting")
        nb.send(vb, "slow", key="Enter")  # b works for 5 s, then finishes while the page is hidden
        nb.wait_status(vb, "writing")  # its ticks: what it does now (agent.activity)
        nb.wait_status(vb, "idle", timeout=30)
        until(lambda: title(nb) == f"(2) {bare}", "the title counts b finished while hidden")
        notes = page.evaluate("() => window.__notes")
        assert "a waits for you" in notes and "b finished" in notes, notes
        page.evaluate(HIDE, False)  # seen: the finished one is no longer counted
        until(lambda: title(nb) == f"(1) {bare}", "the count once the page is shown")
        # two waiting: n in the squad view goes to a, then b, then a again
        nb.send(vb, "Please edit notes.txt", key="Enter")
        nb.wait_status(vb, "waiting")
        until(lambda: title(nb) == f"(2) {bare}", "two waiting")
        squad.locator(".esc-head b").click()  # the squad view has the focus (not a text box)
        cells = nb.panel.locator(".jp-Cell").count()
        jumped = []
        for _ in range(3):
            previous = jumped[-1] if jumped else None
            page.keyboard.press("n")
            # one row jumped to, another than the last (the agents alternate), and focused: the next n is its
            agent = until(lambda previous=previous: (row := squad.locator("tr.esc-jumped")).count() == 1
                          and (a := row.get_attribute("data-agent")) != previous and a, "a row jumped to")
            jumped.append(agent)
            until(lambda agent=agent: page.evaluate("() => document.activeElement && document.activeElement.dataset"
                                                    ".agent") == agent, f"{agent}'s row focused")
        assert jumped == ["a", "b", "a"], jumped
        until(lambda: va.evaluate("v => { const r = v.getBoundingClientRect(); return r.top < innerHeight && r.bottom > 0; }"),
                   "a's view in sight", 5)
        assert nb.page.evaluate("() => document.activeElement && document.activeElement.dataset.agent") == "a"
        # the notebook's own shortcuts did not take n (no cell added)
        assert nb.panel.locator(".jp-Cell").count() == cells
    finally:
        page.evaluate(HIDE, False)
        page.evaluate("() => localStorage.setItem('escouade_nb.notify', 'off')")
    assert not nb.errors, nb.errors
