"""Steering in a real JupyterLab, as a person does it: while a slow reply streams, Enter
queues; the queued list's Edit (Enter saves) and Drop; Ctrl+Enter sends now — the turn
is stopped, its text kept, the steered prompt shown "steered" and run before the queued
one; then the *Steer now* button does the same."""

from __future__ import annotations

from test_lab import open_agent, prompts, replies
from browser_waits import until

SLOW = "stream 400 of 10 at 5/s"  # ~80 s unless stopped


def test_steer_now_ctrl_enter_and_the_queued_list(nb):
    view = open_agent(nb)
    nb.send(view, SLOW, typed=False, key="Enter")
    replies(view).last.wait_for()
    until(lambda: len(replies(view).last.inner_text()) > 30, "the slow reply streams")
    steer = view.locator(".esc-composer .esc-steer")
    until(lambda: steer.is_visible(), "Steer now is offered while the turn runs")

    # -- Enter queues, as before: two prompts; one edited, one dropped
    nb.send(view, "hello first", typed=False, key="Enter")
    nb.send(view, "hello second", typed=False, key="Enter")
    rows = view.locator(".esc-queued .esc-queued-item")
    until(lambda: rows.count() == 2, "two queued prompts listed")
    assert "hello first" in rows.nth(0).inner_text() and "queued" in rows.nth(0).inner_text()
    rows.nth(0).get_by_role("button", name="Edit").click()
    box = view.locator(".esc-queued .esc-queued-edit")
    box.fill("hello changed")
    box.press("Enter")
    until(lambda: "hello changed" in rows.nth(0).inner_text(), "the edit reached the queue")
    rows.nth(1).get_by_role("button", name="Drop").click()
    until(lambda: rows.count() == 1, "the dropped prompt left the list")

    assert "Ctrl+Enter" in view.locator("textarea.esc-box").get_attribute("placeholder")
    nb.shot(view, "steer-queued")
    # -- Ctrl+Enter: now. The running turn stops (its text stays), the steered prompt runs first
    before = replies(view).last.inner_text()
    nb.send(view, "hello steered", typed=False, key="Control+Enter")
    steered = prompts(view).filter(has_text="hello steered")
    steered.wait_for(timeout=30_000)
    assert "steered" in steered.locator(".esc-who").inner_text()
    prompts(view).filter(has_text="hello changed").wait_for(timeout=30_000)  # the queued one, after it
    texts = prompts(view).locator(".esc-user-text").all_inner_texts()
    assert [t for t in texts if "hello" in t][0] == "hello steered", texts
    assert before[:30] in view.locator(".esc-transcript").inner_text()  # nothing the stopped turn wrote is lost
    nb.wait_status(view, "idle", timeout=60)
    assert rows.count() == 0 and not steer.is_visible()
    assert "hello second" not in view.locator(".esc-transcript").inner_text()

    # -- the Steer now button does the same
    nb.send(view, SLOW, typed=False, key="Enter")
    until(lambda: steer.is_visible(), "Steer now is offered again")
    view.locator("textarea.esc-box").fill("hello by button")
    steer.click()
    prompts(view).filter(has_text="hello by button").wait_for(timeout=30_000)
    nb.wait_status(view, "idle", timeout=60)
    assert prompts(view).filter(has_text="hello by button").locator(".esc-steered").count() == 1
    nb.shot(view, "steered")
