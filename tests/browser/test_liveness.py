"""What the agent view tells the truth about: a view whose kernel is gone (restarted, shut
down, died) says so, says how to bring the agent back and offers nothing that cannot act;
the view fits the notebook's window, its head and its prompt box on screen together; it
keeps following the conversation across a window resize; a closed agent's box says why it
takes no prompt."""

from __future__ import annotations

from test_lab import SCROLL_STATE, open_agent, pins, replies, set_theme
from browser_waits import frames, steady, until

# The view's head and prompt box against what the notebook shows of the page (its scroll
# area, inside the window): both in sight together once the view's top is at the top.
IN_SIGHT = """v => {
  const outer = v.closest('.jp-WindowedPanel-outer') || document.scrollingElement;
  v.scrollIntoView({block: 'start'});
  const o = outer.getBoundingClientRect();
  const top = Math.max(o.top, 0), bottom = Math.min(o.bottom, window.innerHeight);
  const r = (s) => v.querySelector(s).getBoundingClientRect();
  const head = r('.esc-head'), box = r('.esc-composer');
  return {head: head.top >= top - 1 && head.bottom <= bottom + 1, box: box.top >= top - 1 && box.bottom <= bottom + 1,
          view: Math.round(v.getBoundingClientRect().height), room: Math.round(bottom - top)};
}"""

# The controls of a view that could still be used ("new ↓" only scrolls the view).
LIVE_CONTROLS = """v => [...v.querySelectorAll('button, textarea, select, input')]
  .filter(e => !e.disabled && e.getClientRects().length && !e.matches('.esc-new'))
  .map(e => (e.innerText || e.getAttribute('aria-label') || e.tagName).trim().slice(0, 30))"""


def following(nb, view, what: str) -> None:
    """At the end of the transcript, and no "new ↓" offered (nothing was missed)."""
    until(lambda: view.evaluate(SCROLL_STATE)["gap"] < 8, f"{what}: at the end of the transcript", 5)
    state = steady(nb.page, lambda: view.evaluate(SCROLL_STATE), what)  # a late scroll or frame shows here
    assert state["gap"] < 8, f"{what}: the view left the end: {state}"
    assert view.locator(".esc-new").is_hidden(), f"{what}: {view.locator('.esc-new').inner_text()!r} offered"


def test_view_fits_the_window_follows_across_resizes_and_a_closed_box_says_why(nb):
    """Item 10 of issue 26. The view's head (Stop, Mode) and its prompt box are on screen
    together, the transcript scrolling between them, at 1000 px and in a short window; a
    window resize (narrower, shorter, back) keeps a following view at the end with no
    "new ↓", and the next reply is not counted as new; a closed agent's box is disabled
    and says why."""
    page = nb.page
    view = open_agent(nb)
    nb.send(view, "chunks 150", key="Enter")
    replies(view).last.get_by_text("00149", exact=False).wait_for()
    nb.wait_status(view, "idle")
    try:
        for size in ({"width": 1200, "height": 1000}, {"width": 1200, "height": 620}, {"width": 700, "height": 760}):
            page.set_viewport_size(size)
            following(nb, view, f"resized to {size}")
            sight = view.evaluate(IN_SIGHT)
            assert sight["head"] and sight["box"], f"head and prompt box on screen together at {size}: {sight}"
            assert sight["view"] >= 0.8 * sight["room"], f"a long transcript fills the room at {size}: {sight}"
            if size["width"] == 700:
                nb.shot(view, "agent-view-short-narrow")
        # a reply while following, after the resizes: still at its end, nothing counted as new
        nb.send(view, "Hello after the resizes", key="Enter")
        replies(view).last.get_by_text("You said: Hello after the resizes").wait_for()
        nb.wait_status(view, "idle")
        following(nb, view, "the reply after the resizes")
        # resized while a reply streams
        nb.send(view, "slow", key="Enter")
        replies(view).last.get_by_text("tick 3", exact=False).wait_for()
        page.set_viewport_size({"width": 1200, "height": 900})
        replies(view).last.get_by_text("tick 12", exact=False).wait_for()
        following(nb, view, "resized while streaming")
        nb.stop_button(view).click()
        nb.wait_status(view, "idle", timeout=10)
    finally:
        page.set_viewport_size({"width": 1200, "height": 900})

    # a closed agent: its box takes nothing and says why
    view.locator(".esc-head .esc-menu > summary").click()
    view.locator(".esc-menu-item", has_text="Stop agent…").click()
    view.locator(".esc-confirm button", has_text="Stop agent").click()
    nb.wait_status(view, "closed")
    box = view.locator("textarea.esc-box")
    until(lambda: box.is_disabled(), "the closed agent's box disabled", 5)
    hint = box.get_attribute("placeholder") or ""
    assert "closed" in hint and "Restart" in hint, hint
    assert view.locator(".esc-composer .esc-send").is_disabled()
    nb.shot(view, "agent-view-closed")


def kernel_gone(nb, view, name: str, why: str) -> None:
    """The view says its kernel is gone and how to bring the agent back, and nothing in
    it can act any more."""
    gone = view.locator(".esc-gone")
    gone.wait_for(timeout=20_000)
    text = gone.inner_text()
    assert why in text and f"%escouade resume {name}" in text, text
    assert "kernel" in nb.status(view), nb.status(view)
    assert "waiting for you" not in nb.status(view)
    assert view.locator(".esc-head .esc-stop").count() == 0
    until(lambda: view.evaluate(LIVE_CONTROLS) == [], "nothing that can act is enabled", 5)
    assert view.locator("textarea.esc-box").is_disabled()


def test_a_view_whose_kernel_is_gone_says_so(nb):
    """Item 7 of issue 26. A kernel restart with a card pending: the view says the kernel
    is gone and how to bring the agent back, its buttons and box are disabled and a click
    does nothing (no error); the same for a kernel that died (killed) and for a kernel shut
    down from the menu."""
    (nb.work / "notes.txt").write_text("Buy milk.\n")
    page = nb.page
    view = open_agent(nb, "%escouade squad")
    nb.run_cell(2)
    squad = nb.output(2).locator(".esc-view.esc-squad")
    nb.send(view, "Please edit notes.txt", key="Enter")
    allow = pins(view).locator("button", has_text="Allow once")
    allow.wait_for()
    nb.wait_status(view, "waiting for you")
    squad.locator(".esc-squad-pending button", has_text="Allow once").wait_for()
    errors = len(nb.errors)
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.restartKernel()")
    kernel_gone(nb, view, "fake", "restarted")
    # the squad view too: it says so, and none of its buttons (the card's, the rows') is on
    assert "The kernel was restarted" in squad.locator(".esc-gone").inner_text()
    assert squad.evaluate(LIVE_CONTROLS) == []
    card = view.locator(".esc-transcript .esc-item[data-p='1']")
    assert "not answered" in card.locator(".esc-tool-header .esc-status").inner_text()
    nb.shot(view, "kernel-restarted")
    try:
        set_theme(nb, "JupyterLab Dark")
        nb.shot(view, "kernel-restarted-dark")
    finally:
        set_theme(nb, "JupyterLab Light")
    # the card's button does nothing, and says nothing in the console
    view.locator(".esc-transcript button", has_text="Allow once").click(force=True)
    frames(page)  # the click's handler has run
    assert nb.errors[errors:] == [], nb.errors[errors:]
    assert "Allowed" not in view.inner_text()
    assert (nb.work / "notes.txt").read_text() == "Buy milk.\n"

    # a kernel that dies (killed): the server starts a new one
    nb.wait_kernel_idle()
    nb.run_cell(0)
    nb.run_cell(1)
    view = nb.agent_view(1)
    nb.wait_status(view, "idle")
    # killed from inside (its own pid, SIGKILL); the server starts a new one
    page.evaluate("""() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel
        .requestExecute({code: 'import os, signal; os.kill(os.getpid(), signal.SIGKILL)'})""")
    kernel_gone(nb, view, "fake", "died")
    page.locator(".jp-Dialog .jp-mod-accept").click()  # JupyterLab's own "appears to have died"

    # a kernel shut down from the menu
    nb.wait_kernel_idle()
    nb.run_cell(0)
    nb.run_cell(1)
    view = nb.agent_view(1)
    nb.wait_status(view, "idle")
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
    kernel_gone(nb, view, "fake", "shut down")
