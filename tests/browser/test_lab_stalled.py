"""A stalled agent seen in a real JupyterLab (issue 36.2), as a person sees it.

The shipped fake agent's ``go silent`` writes one chunk and then nothing at all. With
``a.stall_after = 1`` the agent's head says what it does ("writing"), then "stalled for N s"
(its own colour class), the squad's row says it too, Stop is at hand, and — notifications on
(the squad's toggle), the page hidden — one notification says the agent has stalled. Stop clears
it: the head says idle, and the conversation keeps how long it was quiet (a notice).
Notifications are recorded by wrapping ``window.Notification`` (as the attention suite does).
"""

from __future__ import annotations

import pytest
from browser_waits import until
from test_lab_budget_attention import HIDE, RECORD_NOTIFICATIONS

pytestmark = pytest.mark.browser


def test_stalled_appears_in_the_head_and_the_squad_and_clears_on_stop(nb):
    nb.lab_page.context.grant_permissions(["notifications"], origin=nb.lab.url)
    nb.open(["%load_ext escouade_nb", f"a = %escouade fake --cwd {nb.work} --as a", "a.stall_after = 1",
             "%escouade squad"])
    for i in range(4):
        nb.run_cell(i)
    view = nb.agent_view(1)
    nb.wait_status(view, "idle")
    squad = nb.output(3).locator(".esc-view.esc-squad")
    squad.wait_for()
    page = nb.page
    page.evaluate(RECORD_NOTIFICATIONS)
    toggle = squad.locator(".esc-notify")
    if toggle.inner_text() != "notify: on":
        toggle.click()
        until(lambda: toggle.inner_text() == "notify: on", "notifications turned on")
    try:
        page.evaluate(HIDE, True)
        nb.send(view, "go silent", key="Enter")
        head = view.locator(".esc-head .esc-head-main .esc-status")
        until(lambda: nb.status(view).startswith("● stalled for "), "the head says stalled", 60)
        assert "esc-st-stalled" in head.get_attribute("class")
        row = squad.locator("tr[data-agent='a'] .esc-status")
        until(lambda: row.inner_text().startswith("● stalled for "), "the squad's row says stalled", 30)
        until(lambda: "a has stalled: no update for a while" in page.evaluate("() => window.__notes"),
              "a notification says it stalled", 30)
        assert page.evaluate("() => window.__notes").count("a has stalled: no update for a while") == 1
        nb.shot(view, "stalled-head")
        stop = nb.stop_button(view)
        assert stop.is_visible()
        stop.click()
        nb.wait_status(view, "idle", timeout=60)
        until(lambda: row.inner_text() == "● idle", "the squad's row clears", 30)
        transcript = view.locator(".esc-transcript")
        until(lambda: "No update from the agent for" in transcript.inner_text(), "the stall on record", 30)
        assert "(stalled)" in transcript.inner_text()
    finally:
        page.evaluate(HIDE, False)
        page.evaluate("() => localStorage.setItem('escouade_nb.notify', 'off')")
    assert not nb.errors, nb.errors
