"""escouade_nb in a real JupyterLab, used the way a person uses it: type a prompt and
press Enter, click a card's button by the prompt box, press Stop or Escape, scroll up
while a reply streams, reload the page, reopen a saved notebook — and check what the
page shows (the DOM of ``widgets/escouade.js``: ``.esc-view``, ``.esc-scroll``,
``.esc-pins``, ``textarea.esc-box``…)."""

from __future__ import annotations

import os
import re
import time

import pytest
from browser_waits import REVEAL, frames, steady, until


def start_cells(nb, *more: str) -> list[str]:
    return ["%load_ext escouade_nb", f"demo = %escouade fake --cwd {nb.work}", *more]


def open_agent(nb, *more: str):
    """Open a notebook whose cells load the extension and start the fake agent; run
    those two cells; return the agent view under cell 1."""
    nb.open(start_cells(nb, *more))
    nb.run_cell(0)
    nb.run_cell(1)
    view = nb.agent_view(1)
    nb.wait_status(view, "idle")
    return view


def replies(view):
    """The agent's messages in the view's transcript."""
    return view.locator(".esc-transcript .esc-msg.esc-agent")


def prompts(view):
    return view.locator(".esc-transcript .esc-msg.esc-user")


def pins(view):
    return view.locator(".esc-pins")


SCROLL_STATE = """v => { const s = v.querySelector('.esc-scroll');
  return {top: s.scrollTop, height: s.scrollHeight, client: s.clientHeight,
          gap: s.scrollHeight - s.scrollTop - s.clientHeight}; }"""

# Every element of a view that scrolls (overflow auto/scroll with more content than room).
SCROLLERS = """v => [v, ...v.querySelectorAll('*')].filter(e => {
  const cs = getComputedStyle(e);
  return (/(auto|scroll)/.test(cs.overflowY) && e.scrollHeight > e.clientHeight + 1)
      || (/(auto|scroll)/.test(cs.overflowX) && e.scrollWidth > e.clientWidth + 1);
}).map(e => e.className)"""


# The view and its parts that are wider than their box (what overflows horizontally), and
# the elements sticking out of the view's right edge.
WIDER = """v => { const right = v.getBoundingClientRect().right + 1;
  const out = [v, ...v.querySelectorAll('.esc-head, .esc-head-row, .esc-head-side, .esc-scroll, .esc-composer')]
    .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => `${e.className}: ${e.scrollWidth} > ${e.clientWidth}`);
  for (const e of v.querySelectorAll('.esc-head *')) {
    const r = e.getBoundingClientRect();
    if (r.width && r.right > right) out.push(`${e.tagName.toLowerCase()}.${e.className}: right ${Math.round(r.right)} > ${Math.round(right)}`);
  }
  return out.slice(0, 8); }"""


def focused_box(view) -> bool:
    return view.evaluate("v => document.activeElement === v.querySelector('textarea.esc-box')")


def visible_turn(nb, cell: int):
    """The one turn shown under a ``%%escouade`` cell: the live view, or once the turn
    ended, its static copy (the widget closes ~1.5 s later)."""
    return nb.output(cell).locator(".esc-turn:visible")


def wait_static_turn(nb, cell: int, timeout: float = 15):
    """The turn's cell output became static: the finished turn, no widget left."""
    out = nb.output(cell)
    until(lambda: out.locator(".esc-saved.esc-turn").count() == 1 and out.locator(".esc-root:not(.esc-static)").count() == 0,
               "the turn's output made static", timeout)
    return out.locator(".esc-saved.esc-turn")


# --------------------------------------------------------------------------- the prompt box, following a reply

def test_prompt_box_streams_the_reply(nb):
    """Enter sends, Shift+Enter adds a line, the focus comes back to the box; the reply
    streams; a ``%%escouade`` cell's turn shows under it and in the agent's view."""
    view = open_agent(nb, "%%escouade fake\nAnd hello from a cell", "%%escouade fake\nslow")
    box = view.locator("textarea.esc-box")
    assert "Enter sends" in box.get_attribute("placeholder")
    # Shift+Enter: a new line in the box, nothing sent (and the notebook does not run the cell)
    box.click()
    box.press_sequentially("Hello from", delay=5)
    box.press("Shift+Enter")
    box.press_sequentially("the browser", delay=5)
    assert box.input_value() == "Hello from\nthe browser"
    assert prompts(view).count() == 0
    box.press("Enter")
    reply = replies(view).last
    reply.get_by_text("You said: Hello from", exact=False).wait_for()
    # had Shift+Enter sent or run anything, it would show by now (the kernel answered since)
    assert prompts(view).count() == 1, "Shift+Enter sent nothing"
    assert nb.cell(2).locator(".jp-OutputArea-output").count() == 0  # Shift+Enter did not run the next cell
    assert box.input_value() == ""
    assert focused_box(view), "the focus is back in the prompt box after sending"
    assert "Hello! I am the fake agent." in reply.inner_text()
    said = prompts(view).last
    assert said.locator(".esc-who").inner_text() == "you"
    assert said.locator(".esc-user-text").inner_text() == "Hello from\nthe browser"
    nb.wait_status(view, "idle")
    # the Send button sends too, and gives the focus back to the box
    nb.send(view, "Second hello")
    replies(view).last.get_by_text("You said: Second hello").wait_for()
    assert focused_box(view)
    nb.wait_status(view, "idle")
    # the next cell sends its text as a prompt; the turn shows under that cell, and in the agent's view
    nb.run_cell(2)
    turn = visible_turn(nb, 2)
    turn.get_by_text("You said: And hello from a cell").first.wait_for()
    view.get_by_text("You said: And hello from a cell").wait_for()
    nb.wait_status(view, "idle")
    static = wait_static_turn(nb, 2)
    assert "And hello from a cell" in static.inner_text()
    assert "done" in static.locator(".esc-status").first.inner_text()
    nb.shot(view, "agent-view")
    # a %%escouade cell's view has its status and a Stop
    nb.run_cell(3)
    turn = nb.output(3).locator(".esc-view.esc-turn:not(.esc-saved)")
    turn.get_by_text("tick 3", exact=False).wait_for()
    assert "writing" in turn.locator(".esc-head .esc-status").inner_text()  # what it does now (agent.activity)
    turn.locator(".esc-head .esc-stop").click()
    static = wait_static_turn(nb, 3)
    assert "stopped" in static.locator(".esc-status").first.inner_text()
    assert "tick 50" not in static.inner_text()
    nb.wait_status(view, "idle")
    assert not [e for e in nb.errors if "escouade" in e.lower()], nb.errors


def test_follow_the_reply_queue_and_stop(nb):
    """One notebook, one agent, as a person goes: a long transcript; a slow reply stays in
    sight (stick to the bottom); scrolled up, nothing yanks and "new text ↓" brings it
    back; one scroll region; a prompt sent while busy shows as queued until it runs;
    Stop (the button, then Escape) cancels a slow turn; a card stays answerable by the
    prompt box however long the transcript; an 800 px window with the file browser open."""
    (nb.work / "notes.txt").write_text("".join(f"- line {i}\n" for i in range(1, 9)))
    view = open_agent(nb)
    nb.send(view, "chunks 150", key="Enter")
    replies(view).last.get_by_text("00149", exact=False).wait_for()
    nb.wait_status(view, "idle")
    state = view.evaluate(SCROLL_STATE)
    assert state["height"] > state["client"] + 200, f"the transcript must be taller than its box: {state}"
    assert state["gap"] < 8, f"at the bottom after the reply: {state}"

    # -- stick to the bottom while a reply streams
    nb.send(view, "slow", key="Enter")
    replies(view).last.get_by_text("tick 3", exact=False).wait_for()
    reply = replies(view).nth(replies(view).count() - 1)  # this reply (not the next one)
    gaps = []
    for n in (6, 9, 12):
        reply.get_by_text(f"tick {n} ", exact=False).wait_for()
        gaps.append(view.evaluate(SCROLL_STATE)["gap"])
    assert max(gaps) < 8, f"the view followed the reply to the bottom: gaps {gaps}"
    assert view.evaluate(SCROLLERS) == ["esc-scroll"], "one scroll region: the transcript"
    assert nb.output(1).evaluate("o => o.scrollHeight <= o.clientHeight + 1 || "
                                 "!/(auto|scroll)/.test(getComputedStyle(o).overflowY)"), "no scroll around the view"

    # -- a prompt sent while busy shows as queued
    nb.send(view, "Hello while busy", key="Enter")
    queued = view.locator(".esc-queued .esc-queued-item")
    queued.wait_for()
    assert "queued" in queued.inner_text() and "Hello while busy" in queued.inner_text()

    # -- the user scrolls up: no yank; "new text ↓" brings the end back
    scroll = view.locator(".esc-scroll")
    scroll.hover()
    nb.page.mouse.wheel(0, -600)
    until(lambda: view.evaluate(SCROLL_STATE)["gap"] > 300, "scrolled up")
    top = view.evaluate(SCROLL_STATE)["top"]
    shown = reply.inner_text()
    until(lambda: reply.inner_text() != shown, "more ticks", 5)
    frames(nb.page)  # the frame that revealed them would have scrolled
    assert abs(view.evaluate(SCROLL_STATE)["top"] - top) <= 2, "the view did not move while the user reads above"
    new = view.locator(".esc-new")
    new.wait_for()
    assert re.fullmatch(r"(\d+ new|new text) ↓", new.inner_text()), new.inner_text()
    nb.shot(view, "new-below")
    new.click()
    until(lambda: view.evaluate(SCROLL_STATE)["gap"] < 8, "back at the bottom")
    assert new.is_hidden()

    # -- Stop (the head's button) cancels the slow turn; the queued prompt then runs
    stop = nb.stop_button(view)
    assert stop.is_visible() and stop.is_enabled()
    stop.click()
    replies(view).get_by_text("You said: Hello while busy").wait_for(timeout=15_000)  # the slow turn ended
    assert queued.count() == 0, "the queued prompt left the queue when it ran"
    nb.wait_status(view, "idle")
    stop_text = steady(nb.page, reply.inner_text, "the stopped reply")
    ticks = re.findall(r"tick (\d+)", stop_text)
    assert ticks and int(ticks[-1]) < 50, stop_text
    frames(nb.page, REVEAL)
    assert reply.inner_text() == stop_text, "nothing more after Stop"
    stopped = view.locator(".esc-transcript .esc-item", has_text=re.compile(r"^\W*stopped by you", re.I))
    assert stopped.count() == 1, "the stopped turn is marked stopped"

    # -- Escape in the box stops a turn too
    nb.send(view, "slow", key="Enter")
    reply = replies(view).last
    reply.get_by_text("tick 3", exact=False).wait_for()
    assert focused_box(view)
    view.locator("textarea.esc-box").press("Escape")
    nb.wait_status(view, "idle", timeout=10)
    shown = steady(nb.page, reply.inner_text, "the stopped reply")
    frames(nb.page, REVEAL)
    assert reply.inner_text() == shown and "tick 50" not in shown, shown

    # -- a card in a long transcript: answered from the pin by the prompt box
    nb.send(view, "Please edit notes.txt", key="Enter")
    allow = pins(view).locator("button", has_text="Allow once")
    allow.click(timeout=10_000)
    view.locator(".esc-transcript .esc-answer", has_text="Allowed once by you").wait_for()
    nb.wait_status(view, "idle")


def test_narrow_window_with_the_file_browser(nb):
    """An 800 px window with the file browser open: the head's controls wrap, Stop and ⋯
    in sight and whole, nothing wider than the view."""
    view = open_agent(nb)
    page = nb.page
    try:
        page.set_viewport_size({"width": 800, "height": 900})
        page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:activate')")
        page.locator("#filebrowser").wait_for()
        nb.send(view, "slow", key="Enter")
        nb.stop_button(view).wait_for()
        steady(page, view.bounding_box, "the view's box", n=2)
        vbox = view.bounding_box()
        for what in (nb.stop_button(view), view.locator(".esc-head .esc-menu > summary"),
                     view.locator(".esc-head .esc-status"), view.locator(".esc-composer .esc-send")):
            assert what.is_visible(), what
            b = what.bounding_box()
            assert b["x"] >= vbox["x"] - 1 and b["x"] + b["width"] <= vbox["x"] + vbox["width"] + 1, (what, b, vbox)
        nb.shot(view, "narrow-800-filebrowser")
        assert nb.stop_button(view).inner_text().strip() == "■ Stop"  # not cut
        overflow = view.evaluate(WIDER)
        assert overflow == [], f"wider than the view ({view.evaluate('v => v.clientWidth')} px): {overflow}"
    finally:
        page.set_viewport_size({"width": 1200, "height": 900})
        page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
        if nb.stop_button(view).count():
            nb.stop_button(view).click()
            nb.wait_status(view, "idle", timeout=10)


# --------------------------------------------------------------------------- cards

def test_permission_card_allow_once(nb):
    """The card waiting for you is pinned by the prompt box and answered there; its place
    in the conversation is one jump away; the diff shows once; answered, it is one line.
    Then: Stop cancels a pending card. And the colours of it all, light and dark."""
    (nb.work / "notes.txt").write_text("Buy milk.\n")
    view = open_agent(nb)
    nb.send(view, "Please edit notes.txt", key="Enter")
    pin = pins(view).locator(".esc-pin")
    pin.wait_for()
    nb.wait_status(view, "waiting for you")
    assert pin.locator(".esc-pin-count").inner_text() == "⚑ waiting for you:"
    assert pin.locator(".esc-pin-title").inner_text() == "Edit notes.txt"
    assert "asks permission" in pin.inner_text()
    buttons = pin.locator("button[data-act]")
    assert buttons.all_inner_texts() == ["Allow once", "Always allow", "Reject"]
    item = view.locator(".esc-transcript .esc-item.esc-pinned")
    assert item.count() == 1 and item.get_attribute("data-p") == "1"
    assert item.locator(".esc-ask").is_hidden()  # its buttons show in the pin only, not twice
    assert "Edit notes.txt" in item.locator(".esc-tool-header").inner_text()
    assert "waiting for you" in item.locator(".esc-tool-header .esc-status").inner_text()
    diff = view.locator(".esc-diff")
    assert diff.count() == 1, "an edit's diff shows once"
    assert diff.locator(".esc-diff-ctx").all_inner_texts() == [" Buy milk."]
    assert diff.locator(".esc-diff-add").all_inner_texts() == ["+Edited by the fake agent."]
    nb.shot(view, "permission-card")
    # "show in conversation ↑": the card comes into the transcript's sight, flashed
    view.evaluate("v => { v.querySelector('.esc-scroll').scrollTop = 0; }")
    pin.locator("button", has_text="show in conversation ↑").click()
    until(lambda: view.evaluate("""v => { const s = v.querySelector('.esc-scroll').getBoundingClientRect();
        const c = v.querySelector('.esc-item.esc-pinned').getBoundingClientRect();
        return c.top >= s.top - 1 && c.top < s.bottom; }"""), "the card in sight after the jump", 3)
    assert "esc-flash" in (item.get_attribute("class") or "")
    buttons.filter(has_text="Allow once").click()
    view.locator(".esc-transcript .esc-answer", has_text="Allowed once by you").wait_for()
    expect_empty(pins(view))
    replies(view).get_by_text("Edited notes.txt.").wait_for()
    card = view.locator(".esc-transcript .esc-card.esc-tool").last
    assert card.locator("button").count() == 0, "an answered card keeps no buttons"
    assert "completed" in card.locator(".esc-tool-header .esc-status").inner_text()
    assert focused_box(view)
    nb.wait_status(view, "idle")
    assert (nb.work / "notes.txt").read_text() == "Buy milk.\nEdited by the fake agent.\n"
    nb.shot(view, "permission-card-answered")

    # Stop cancels the pending card
    nb.send(view, "run make deploy", key="Enter")
    pins(view).locator(".esc-pin-title", has_text="Run make deploy").wait_for()
    nb.stop_button(view).click()
    view.locator(".esc-transcript .esc-answer", has_text="Cancelled (you stopped the turn)").wait_for()
    expect_empty(pins(view))
    nb.shot(view, "stopped-card")
    # JupyterLab ≥ 4.6 may deliver the Stop click on a kernel subshell's thread: the view
    # hands it to the agent's loop (widgets.front.on_loop), so the turn ends at once
    nb.wait_status(view, "idle", timeout=10)
    assert nb.stop_button(view).count() == 0


def expect_empty(locator, timeout: float = 5) -> None:
    until(lambda: locator.evaluate("e => e.children.length === 0"), "empty", timeout)


def test_plan_approval(nb):
    view = open_agent(nb, "%%escouade fake\npresent plan")
    nb.send(view, "present plan", key="Enter")
    pin = pins(view).locator(".esc-pin")
    pin.wait_for()
    assert pin.locator(".esc-plan-text li").all_inner_texts() == ["Read notes.txt", "Add a summary line", "Run the tests"]
    assert view.locator(".esc-plan-text").count() == 2  # the transcript's card (its ask hidden) and the pin
    assert view.locator(".esc-plan-text:visible").count() == 1, "the plan shows once"
    assert "{" not in view.locator(".esc-transcript").inner_text(), "no raw JSON of the plan"
    nb.shot(view, "plan-approval")
    pin.locator("textarea").fill("Add a step: update the README.")
    pin.locator("button", has_text="Keep planning").click()
    replies(view).get_by_text("Feedback received: Add a step: update the README.").wait_for()
    expect_empty(pins(view))
    view.locator(".esc-transcript .esc-answer", has_text="Sent back by you").wait_for()
    head = view.locator(".esc-transcript .esc-tool-header .esc-status").last.inner_text()
    assert "failed" not in head, head
    nb.wait_status(view, "idle")
    # the same plan again, from a cell: approve it in the turn's own pin
    nb.run_cell(2)
    turn = nb.output(2).locator(".esc-view.esc-turn:not(.esc-saved)")
    turn.locator(".esc-pins button", has_text="Approve").click()
    visible_turn(nb, 2).get_by_text("Plan approved; starting with step 1.").first.wait_for()
    static = wait_static_turn(nb, 2)
    assert "Approved by you" in static.inner_text()
    nb.wait_status(view, "idle")


def test_agent_reply_renders_as_text(nb):
    # cell 2 sends a prompt whose card shows the payloads in its title and input
    view = open_agent(nb, f"%%escouade fake\nrun {PAYLOADS[0]} {PAYLOADS[1]}")
    nb.page.evaluate("() => { window.__escouade_pwned = undefined; }")
    nb.send(view, "Show these: " + " ".join(PAYLOADS), typed=False, key="Enter")
    reply = replies(view).last
    reply.get_by_text("You said", exact=False).wait_for()
    nb.wait_status(view, "idle")
    for payload in ("<img src=x onerror=", "<script>window.__escouade_pwned='script'</script>",
                    "[click me](javascript:", '<a href="javascript:', "<svg onload=", "<iframe src="):
        assert payload in reply.inner_text(), payload
    assert "Show these: <img src=x onerror=" in prompts(view).last.inner_text()
    # click where the links would be: nothing runs
    reply.get_by_text("click me", exact=False).click()
    reply.get_by_text("raw link", exact=False).click()

    nb.run_cell(2)
    turn = nb.output(2).locator(".esc-view.esc-turn:not(.esc-saved)")
    pin = turn.locator(".esc-pins .esc-pin")
    pin.wait_for()
    assert "Run <img src=x onerror=" in pin.locator(".esc-pin-title").inner_text()
    assert "<script>" in turn.locator(".esc-transcript .esc-tool").inner_text()
    for where in (view, turn):
        found = where.evaluate(INJECTED)
        assert found == {"bad": [], "handlers": []}, found
    pin.locator("button", has_text="Reject").click()
    static = wait_static_turn(nb, 2)
    assert "I did not run" in static.inner_text()
    assert "rejected by you" in static.inner_text()
    nb.wait_status(view, "idle")
    for where in (view, static):
        found = where.evaluate(INJECTED)
        assert found == {"bad": [], "handlers": []}, found
    assert nb.page.evaluate(JS_URLS) == []
    frames(nb.page)
    assert nb.page.evaluate("() => window.__escouade_pwned === undefined")
    assert not [e for e in nb.errors if "pwned" in e]


# An agent's reply is text, whatever it contains. Each payload would set the flag if run.
PAYLOADS = [
    '<img src=x onerror="window.__escouade_pwned=\'img\'">',
    "<script>window.__escouade_pwned='script'</script>",
    "[click me](javascript:window.__escouade_pwned='md-link')",
    '<a href="javascript:window.__escouade_pwned=\'a\'">raw link</a>',
    '<svg onload="window.__escouade_pwned=\'svg\'"></svg>',
    '<iframe src="javascript:window.__escouade_pwned=\'iframe\'"></iframe>',
]

INJECTED = """view => {
  const bad = [...view.querySelectorAll('img, script, iframe, object, embed, svg, a[href]')]
      .map(e => e.outerHTML.slice(0, 120));
  const handlers = [...view.querySelectorAll('*')].flatMap(
      e => [...e.attributes].filter(a => /^on/i.test(a.name)).map(a => `${e.tagName} ${a.name}`));
  return {bad, handlers};
}"""

JS_URLS = """() => [...document.querySelectorAll('[href], [src], [action], [formaction], [data]')]
  .filter(e => ['href', 'src', 'action', 'formaction', 'data'].some(
      a => /^\\s*javascript:/i.test(e.getAttribute(a) || '')))
  .map(e => e.outerHTML.slice(0, 120))"""


# --------------------------------------------------------------------------- colours

# the theme's stylesheet is applied: its background colour (--jp-layout-color0) is light or dark
THEME_APPLIED = """light => { const probe = document.createElement('div');
  probe.style.color = 'var(--jp-layout-color0)'; document.body.append(probe);
  const rgb = (getComputedStyle(probe).color.match(/[\\d.]+/g) || []).slice(0, 3).map(Number); probe.remove();
  return rgb.length === 3 && (rgb[0] + rgb[1] + rgb[2]) / 3 > 128 === light; }"""


def set_theme(nb, theme: str) -> None:
    light = "true" if "Light" in theme else "false"
    nb.page.evaluate("t => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", theme)
    nb.page.wait_for_function("l => document.body.dataset.jpThemeLight === l", arg=light, timeout=20_000)
    nb.page.wait_for_function(THEME_APPLIED, arg=light == "true", timeout=20_000)
    frames(nb.page)  # and drawn


# Contrast ratios (WCAG 2 relative luminance) of the view's text against the background
# it is painted on: each colour is resolved by painting it on a 1x1 canvas (any CSS
# colour syntax: color-mix, color(srgb …)); the background is the first non-transparent
# one walking up, translucent ones composited over what is under them.
CONTRAST = """([root, groups]) => {
  const ctx = document.createElement('canvas').getContext('2d', {willReadFrequently: true});
  const rgba = (c) => { ctx.clearRect(0, 0, 1, 1); ctx.fillStyle = '#000'; ctx.fillStyle = c;
                        ctx.fillRect(0, 0, 1, 1); const d = ctx.getImageData(0, 0, 1, 1).data;
                        return [d[0], d[1], d[2], d[3] / 255]; };
  const over = (top, under) => top.slice(0, 3).map((v, i) => v * top[3] + under[i] * (1 - top[3])).concat([1]);
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (getComputedStyle(e).backgroundColor === 'rgba(0, 0, 0, 0)' || c[3] === 0) continue;
      layers.push(c);
      if (c[3] >= 1) break;
    }
    let bg = [255, 255, 255, 1];
    for (const c of layers.reverse()) bg = over(c, bg);
    return bg;
  };
  const lum = (c) => { const [r, g, b] = c.slice(0, 3).map(v => { v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const out = {};
  for (const [name, selector] of Object.entries(groups)) {
    const found = [...root.querySelectorAll(selector)].filter(e => e.getClientRects().length && e.innerText.trim());
    out[name] = found.slice(0, 12).map(e => {
      const bg = background(e);
      const fg = over(rgba(getComputedStyle(e).color), bg);
      const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
      return [Math.round((a + 0.05) / (b + 0.05) * 100) / 100, e.innerText.trim().slice(0, 30)];
    });
  }
  return out;
}"""

CONTRAST_GROUPS = {
    "message text": ".esc-msg.esc-agent .esc-md p, .esc-user-text",
    "dim text": ".esc-dim",
    "diff added": ".esc-diff-add",
    "diff removed": ".esc-diff-del",
    "diff file header": ".esc-diff-head",
    "status words": ".esc-status",
    "buttons": ".esc-btn:not(:disabled), .esc-link, .esc-menu > summary",
    "pin count": ".esc-pin-count",
}


def test_contrast_light_and_dark(nb):
    """Contrast ratios computed from the page (WCAG) for a reply, dim text, a diff, status
    words, the buttons, the pin — ≥ 4.5:1 in JupyterLab Light and in JupyterLab Dark."""
    (nb.work / "notes.txt").write_text("Buy milk.\n")
    view = open_agent(nb)
    nb.send(view, "Hello", key="Enter")
    replies(view).last.get_by_text("You said: Hello").wait_for()
    nb.send(view, "Please edit notes.txt", key="Enter")
    pins(view).locator(".esc-pin button", has_text="Allow once").wait_for()
    check_contrast(nb, view, "light")
    try:
        set_theme(nb, "JupyterLab Dark")
        nb.shot(view, "agent-view-dark")
        check_contrast(nb, view, "dark")
    finally:
        set_theme(nb, "JupyterLab Light")
        nb.stop_button(view).click()
        nb.wait_status(view, "idle", timeout=10)


def check_contrast(nb, view, theme: str) -> None:
    # the fake agent's edits only add lines: a removed row, made from an added one, shows its colours
    view.evaluate("""v => { if (!v.querySelector('.esc-diff-del')) { const a = v.querySelector('.esc-diff-add');
        const d = a.cloneNode(true); d.className = 'esc-diff-del'; d.textContent = '-Buy eggs.'; a.after(d); } }""")
    found = nb.page.evaluate(CONTRAST, [view.element_handle(), CONTRAST_GROUPS])
    print(f"\ncontrast ({theme}):")
    low = []
    for name, pairs in found.items():
        assert pairs, f"{theme}: nothing found for {name} ({CONTRAST_GROUPS[name]})"
        worst = min(pairs)
        print(f"  {name:<17} min {worst[0]:5.2f}:1 ({worst[1]!r}) over {len(pairs)}")
        low += [(name, r, t) for r, t in pairs if r < 4.5]
    assert not low, f"{theme}: text under 4.5:1: {low}"


# --------------------------------------------------------------------------- the squad

SETTLE_PROBE = """sq => { window.__settle = null;
  const pending = sq.querySelector('.esc-squad-pending');
  const seen = () => { const card = pending.querySelector('.esc-squad-card');
    if (!card || window.__settle) return;
    const buttons = () => [...pending.querySelectorAll('button[data-act]')];
    const first = buttons().map(b => b.disabled);
    // a key pressed at once is ignored (the settle): "3" would be Reject
    sq.dispatchEvent(new KeyboardEvent('keydown', {key: '3', bubbles: true}));
    window.__settle = {first, agent: card.dataset.agent};
    setTimeout(() => { window.__settle.after = buttons().map(b => b.disabled);
                       window.__settle.still = !!pending.querySelector('.esc-squad-card'); }, 700);
  };
  new MutationObserver(seen).observe(pending, {childList: true, subtree: true}); seen(); }"""


def squad_row(squad, name: str):
    return squad.locator(f".esc-squad-table tbody tr[data-agent='{name}']")


def test_squad_row_actions_and_pending_cards(nb):
    """Two agents and the squad view: Cancel turn on a row; two cards pending across the
    squad, the oldest answered in the squad view (buttons enabled only after the settle),
    the next one with its number key; Stop agent… asks first (Cancel keeps it); Open
    brings the agent's view in sight."""
    (nb.work / "notes.txt").write_text("Buy milk.\n")
    nb.open(["%load_ext escouade_nb", f"a = %escouade fake --cwd {nb.work} --as a",
             f"b = %escouade fake --cwd {nb.work} --as b", "%escouade squad"])
    for i in range(4):
        nb.run_cell(i)
    va, vb = nb.agent_view(1), nb.agent_view(2)
    nb.wait_status(va, "idle")
    nb.wait_status(vb, "idle")
    squad = nb.output(3).locator(".esc-view.esc-squad")
    squad.wait_for()
    assert squad.locator(".esc-squad-table").count() == 1, "one aligned table"
    wrong = []  # what the squad view gets wrong (said at the end: the rest is checked first)
    assert squad.locator(".esc-squad-table thead th").first.inner_text() == "agent"
    # Cancel turn
    nb.send(va, "slow", key="Enter")
    replies(va).last.get_by_text("tick 3", exact=False).wait_for()
    cancel = squad_row(squad, "a").locator("button", has_text="Cancel turn")
    cancel.click()
    nb.wait_status(va, "idle", timeout=10)
    shown = steady(nb.page, replies(va).last.inner_text, "the cancelled reply")
    frames(nb.page, REVEAL)
    assert replies(va).last.inner_text() == shown and "tick 50" not in shown
    until(lambda: squad_row(squad, "a").locator("button", has_text="Cancel turn").count() == 0, "no Cancel turn when idle")
    # two cards pending: the oldest (a's) in the squad view, its buttons after the settle
    squad.evaluate(SETTLE_PROBE)
    nb.send(va, "run make deploy", key="Enter")
    nb.page.wait_for_function("() => window.__settle && window.__settle.after", timeout=15_000)
    settle = nb.page.evaluate("() => window.__settle")
    assert settle["agent"] == "a"
    assert settle["first"] and all(settle["first"]), f"buttons disabled during the settle: {settle}"
    assert settle["after"] and not any(settle["after"]), f"buttons enabled after it: {settle}"
    assert settle["still"], "a number key pressed during the settle did nothing"
    nb.send(vb, "Please edit notes.txt", key="Enter")
    pending = squad.locator(".esc-squad-pending")
    squad.locator(".esc-head").get_by_text("2 waiting for you", exact=False).wait_for()
    cut = squad.evaluate("""sq => { const right = sq.getBoundingClientRect().right;
        return [...sq.querySelectorAll('.esc-row-actions .esc-btn')].filter(b => b.getBoundingClientRect().right > right + 1)
          .map(b => `${b.closest('tr').dataset.agent}: ${b.textContent}`); }""")
    if cut:
        wrong.append(f"row buttons cut at the view's right edge (1200 px window): {cut}")
    try:
        pending.get_by_text("⚑ 2 waiting for you — the oldest, a's:").wait_for(timeout=3000)
    except Exception:
        wrong.append(f"the pending card's count with 2 cards waiting: {pending.locator('.esc-pin-count').inner_text()!r}")
    nb.shot(squad, "squad-pending")
    pending.locator("button", has_text="Allow once").click()
    replies(va).get_by_text("Ran make deploy", exact=False).wait_for()
    pending.get_by_text("⚑ 1 waiting for you, b's:").wait_for()
    pending.locator("button[data-act]:not([disabled])").first.wait_for()  # the settle is over: keys act
    squad.locator(".esc-head").click()  # the squad view has the focus (not a text box)
    nb.page.keyboard.press("1")  # Allow once
    replies(vb).get_by_text("Edited notes.txt.").wait_for()
    assert "Allowed once by you" in vb.locator(".esc-transcript .esc-answer").last.inner_text()
    expect_empty(pending)
    # Stop agent…: confirmed first; Cancel keeps it
    row = squad_row(squad, "b")
    row.locator("button", has_text="Stop agent…").click()
    confirm = squad.locator(".esc-confirm-row")
    confirm.get_by_text("Stop b's process?").wait_for()
    confirm.locator("button", has_text="Cancel").click()
    assert confirm.count() == 0
    frames(nb.page)
    assert "idle" in nb.status(vb)
    row.locator("button", has_text="Stop agent…").click()
    confirm.locator("button", has_text="Stop agent").click()
    until(lambda: re.search(r"exited|closed", nb.status(vb)), "b stopped", 15)
    until(lambda: re.search(r"exited|closed", row.locator(".esc-status").inner_text()), "its row says so", 10)
    assert "idle" in nb.status(va)
    # Open: the agent's one view, brought into sight
    nb.page.evaluate("() => document.querySelector('.jp-WindowedPanel-outer, .jp-Notebook').scrollTop = 1e6")
    squad_row(squad, "a").locator("button", has_text="Open").click()
    until(lambda: va.evaluate("v => { const r = v.getBoundingClientRect(); return r.top < innerHeight && r.bottom > 0; }"),
               "a's view in sight", 5)
    assert squad.locator(".esc-squad-opened .esc-view").count() == 0, "no second copy of a's view"
    nb.shot(squad, "squad")
    assert not wrong, wrong


# --------------------------------------------------------------------------- reload, save, reopen

def reopen(nb) -> None:
    nb.page.evaluate("p => window.jupyterapp.commands.execute('docmanager:open', {path: p, factory: 'Notebook'})",
                     nb.path)
    nb.cell(0).wait_for(timeout=60_000)


def widgets_tried(page, timeout: float = 30) -> None:
    """Wait until the widget manager has tried to find the models of every widget output of the
    page: none says "Loading widget..." any more (ipywidgets' renderer looks for a model for 2 s,
    then says it is not found, or waits for the manager to be restored and looks again)."""
    until(lambda: not page.evaluate(LOADING_WIDGET), "every widget output tried", timeout)


LOADING_WIDGET = """() => [...document.querySelectorAll('.jp-OutputArea-output')]
  .some(e => (e.textContent || '').includes('Loading widget...'))"""


def save(nb) -> None:
    """Save the notebook and wait until it is saved and clean. A view's output that changes after the save (its
    last ops arriving) makes it dirty again: saved once more then, within one deadline, as a user would."""
    deadline = time.monotonic() + 60
    while True:
        before = nb.lab.api("GET", f"/api/contents/{nb.path}?content=0").get("last_modified")
        nb.page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        until(lambda before=before: nb.lab.api("GET", f"/api/contents/{nb.path}?content=0").get("last_modified")
              != before, "saved")
        try:
            until(lambda: not nb.page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty"),
                  "the notebook is clean", timeout=10)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def test_reload_catches_up_and_keeps_streaming(nb):
    """A second display of the agent joins late and catches up; after a page reload (the
    notebook reopened, the same kernel) the view shows the same conversation and goes on
    streaming."""
    view = open_agent(nb, "from escouade_nb.widgets import AgentView\nAgentView(demo)")
    nb.send(view, "Hello before the reload", key="Enter")
    replies(view).get_by_text("You said: Hello before the reload").wait_for()
    nb.wait_status(view, "idle")
    nb.send(view, "slow", key="Enter")
    replies(view).last.get_by_text("tick 3", exact=False).wait_for()
    nb.run_cell(2)  # the agent shown again, mid-reply
    second = nb.agent_view(2)
    replies(second).get_by_text("You said: Hello before the reload").wait_for()
    replies(second).last.get_by_text("tick 8 ", exact=False).wait_for()
    assert re.findall(r"tick \d+", replies(second).last.inner_text())[:8] == [f"tick {i}" for i in range(1, 9)]
    save(nb)
    nb.lab_page.load()
    reopen(nb)
    view = nb.agent_view(1)
    # the same conversation (a snapshot), then the ticks go on arriving
    prompts(view).filter(has_text="Hello before the reload").wait_for()
    replies(view).get_by_text("You said: Hello before the reload").wait_for()
    reply = replies(view).last
    reply.get_by_text("tick", exact=False).wait_for()
    first = len(re.findall(r"tick \d+", reply.inner_text()))
    # more ticks arrive after the reload — unless the reply ended while the page reloaded (a slow machine)
    until(lambda: len(re.findall(r"tick \d+", reply.inner_text())) > min(first + 3, 49), "more ticks after the reload")
    reply.get_by_text("tick 50", exact=False).wait_for(timeout=15_000)
    nb.wait_status(view, "idle")
    ticks = [int(t) for t in re.findall(r"tick (\d+)", reply.inner_text())]
    assert ticks == list(range(1, 51)), f"every tick once, in order: {ticks}"
    assert view.evaluate(SCROLL_STATE)["gap"] < 8
    second = nb.agent_view(2)  # the second display caught up too
    replies(second).last.get_by_text("tick 50", exact=False).wait_for()
    assert [int(t) for t in re.findall(r"tick (\d+)", replies(second).last.inner_text())] == list(range(1, 51))


def test_saved_notebook_reopened_without_its_kernel(nb):
    """A finished ``%%escouade`` turn stays in the saved notebook as static HTML (its
    messages, the tool call, who answered); the agent view's saved form says how to bring
    it back; no "model not found" anywhere once the kernel is gone."""
    (nb.work / "notes.txt").write_text("Buy milk.\n")
    view = open_agent(nb, "%%escouade fake\nPlease edit notes.txt")
    nb.run_cell(2)
    turn = nb.output(2).locator(".esc-view.esc-turn:not(.esc-saved)")
    turn.locator(".esc-pins button", has_text="Allow once").click()
    static = wait_static_turn(nb, 2)
    nb.wait_status(view, "idle")
    save(nb)
    nb.lab_page.close_documents()
    nb.lab.shutdown_sessions(nb.path)
    until(lambda: not nb.lab.sessions_for(nb.path), "kernel shut down")
    reopen(nb)
    page = nb.page
    static = nb.output(2).locator(".esc-saved.esc-turn")
    static.wait_for()
    text = static.inner_text()
    for words in ("Please edit notes.txt", "Edit notes.txt", "+Edited by the fake agent.", "Allowed once by you",
                  "Edited notes.txt.", "done"):
        assert words in text, (words, text)
    assert static.locator(".esc-diff").count() == 1
    assert static.locator("button").count() == 0
    companion = nb.output(1).locator(".esc-saved")
    companion.wait_for()
    assert companion.is_visible()
    assert "%escouade resume fake" in companion.inner_text()
    widgets_tried(page)
    shown = page.evaluate("""() => [...document.querySelectorAll('.jp-OutputArea-output')]
        .filter(e => /model not found|Error displaying widget/i.test(e.innerText) && e.getClientRects().length
                     && getComputedStyle(e).visibility !== 'hidden')
        .map(e => e.innerText.slice(0, 80))""")
    assert shown == [], f"visible: {shown}"
    nb.shot(nb.panel.locator(".jp-Notebook"), "saved-notebook-reopened")


# --------------------------------------------------------------------------- the other views

def dropdown(where, label: str):
    """The <select> labelled ``label`` (its aria-label)."""
    return where.locator(f"select[aria-label='{label}']")


def pick(select, starts_with: str) -> str:
    """Choose the option whose text starts with ``starts_with``, as a person does."""
    labels = [t.strip() for t in select.locator("option").all_inner_texts()]
    label = next(t for t in labels if t.startswith(starts_with))
    select.select_option(label=label)
    return label


def selected(select) -> str:
    return select.evaluate("s => s.options[s.selectedIndex] ? s.options[s.selectedIndex].text : ''")


def test_mode_dropdown(nb):
    view = open_agent(nb)
    head = view.locator(".esc-head")
    mode = dropdown(head, "Mode")
    assert selected(mode).startswith("default")
    pick(mode, "bypassPermissions")
    head.locator(".esc-menu > summary").click()  # the agent's own mode is in the ⋯ menu
    agent_mode = dropdown(head.locator(".esc-menu-items"), "Agent mode")
    until(lambda: selected(agent_mode) == "YOLO", "the agent confirms its own mode", 15)
    assert selected(dropdown(head, "Mode")).startswith("bypassPermissions")
    items = head.locator(".esc-menu-items")
    assert items.locator(".esc-menu-item", has_text="Restart…").count() == 1
    assert items.locator(".esc-menu-item", has_text="Stop agent…").count() == 1
    nb.shot(head, "mode-controls")
    head.locator(".esc-menu > summary").click()
    nb.send(view, "which mode", key="Enter")
    replies(view).get_by_text("mode=yolo", exact=False).wait_for()
    nb.wait_status(view, "idle")
    # the new mode answers the next card by itself
    nb.send(view, "run make deploy", key="Enter")
    view.locator(".esc-transcript .esc-answer", has_text="by the mode").wait_for()
    replies(view).get_by_text("Ran make deploy.", exact=False).wait_for()
    assert "Allowed once by the mode" in view.locator(".esc-transcript .esc-answer").last.inner_text()
    nb.wait_status(view, "idle")
    # Stop agent… in the menu asks first
    head.locator(".esc-menu > summary").click()
    items.locator(".esc-menu-item", has_text="Stop agent…").click()
    confirm = head.locator(".esc-confirm")
    confirm.get_by_text("Stop fake's process?").wait_for()
    confirm.locator("button", has_text="Cancel").click()
    assert confirm.is_hidden()
    # Restart… asks first too
    if not items.is_visible():
        head.locator(".esc-menu > summary").click()
    items.locator(".esc-menu-item", has_text="Restart…").click()
    confirm.get_by_text("Restart fake?", exact=False).wait_for()
    confirm.locator("button", has_text="Cancel").click()
    assert confirm.is_hidden()
    frames(nb.page)
    assert "idle" in nb.status(view)
    assert replies(view).get_by_text("Ran make deploy.", exact=False).count() == 1  # the conversation is still there


def test_journal_of_a_rule_plugin(nb):
    cells = start_cells(nb, "%escouade journal team-rules")
    cells.insert(1, f"%escouade plugins on team-rules --project {nb.work}")
    nb.open(cells)
    for i in range(3):
        nb.run_cell(i)
    view = nb.agent_view(2)
    nb.wait_status(view, "idle")
    assert "guarded by" in view.locator(".esc-head .esc-rules").inner_text()
    nb.run_cell(3)
    journal = nb.output(3).locator(".esc-view.esc-journal")
    journal.wait_for()
    rows = journal.locator(".esc-journal-rows")
    nb.send(view, "run rm -rf build", key="Enter")
    # settled by the plugin, nothing clicked (the card names it; its exact verb is the views' business)
    view.locator(".esc-transcript .esc-answer", has_text="by Team rules").wait_for()
    replies(view).get_by_text("I did not run rm -rf build", exact=False).wait_for()
    status = view.locator(".esc-transcript .esc-tool-header .esc-status").last.inner_text()
    assert "refused by Team rules" in status and "failed" not in status, status
    nb.wait_status(view, "idle")
    nb.send(view, "run npm test", key="Enter")
    replies(view).get_by_text("Ran npm test", exact=False).wait_for()
    assert "by Team rules" in view.locator(".esc-transcript .esc-answer").last.inner_text()
    nb.wait_status(view, "idle")
    rows.get_by_text("npm test", exact=False).first.wait_for()
    assert "rm -rf build" in rows.inner_text()
    box = journal.locator("input[aria-label='Filter']")
    box.fill("rm -rf")
    until(lambda: "npm test" not in rows.inner_text(), "the journal filtered")
    assert "rm -rf build" in rows.inner_text()
    box.fill("")
    rows.get_by_text("npm test", exact=False).first.wait_for()
    assert "entries" in journal.inner_text()
    box.evaluate("e => e.blur()")  # no focus ring in the picture
    nb.shot(journal, "journal")


RUN_CODE = 'run code\nsales["change"] = sales.q4 - sales.q3\nprint(sales.loc[sales.change < 0, "region"].tolist())'


def test_run_code_card_in_the_kernel(nb):
    """The agent asks to run code in the kernel through its MCP server: one card shows the
    code; Run runs it in the notebook's namespace and the output goes back to the agent."""
    nb.open(["%load_ext escouade_nb",
             'import pandas as pd\nsales = pd.DataFrame({"region": ["north", "south", "east", "west"],\n'
             '                      "q3": [120.0, 95.5, 80.0, 60.0], "q4": [110.0, 101.0, 64.0, 72.5]})',
             f"demo = %escouade fake --cwd {nb.work}",
             "sales"])
    for i in range(3):
        nb.run_cell(i)
    view = nb.agent_view(2)
    nb.wait_status(view, "idle")
    tools = view.locator(".esc-head .esc-tools")
    until(lambda: "kernel tools ✓" in tools.inner_text(), "kernel tools connected", 30)
    box = view.locator("textarea.esc-box")
    box.fill(RUN_CODE)  # several lines (Shift+Enter's), sent with Enter
    box.press("End")
    box.press("Enter")
    pin = pins(view).locator(".esc-pin")
    pin.get_by_text("Run code in the kernel").first.wait_for()
    nb.wait_status(view, "waiting for you")
    assert view.locator(".esc-transcript .esc-item[data-p='1']").count() == 1  # the agent's own request folded into it
    card = view.locator(".esc-transcript .esc-item.esc-pinned")
    text = card.inner_text()
    assert 'sales["change"] = sales.q4 - sales.q3' in text
    assert 'print(sales.loc[sales.change < 0, "region"].tolist())' in text
    buttons = pin.locator("button[data-act]")
    assert buttons.all_inner_texts() == ["Run", "Run without asking again in this session", "Don't run"]
    nb.shot(view, "kernel-tools-pending")
    buttons.filter(has_text=re.compile("^Run$")).click()
    view.locator(".esc-transcript .esc-answer", has_text="Allowed by you: Run").wait_for()
    expect_empty(pins(view))
    replies(view).get_by_text("['north', 'east']", exact=False).wait_for()
    assert "mcp__escouade__run_code returned" in replies(view).last.inner_text()
    nb.wait_status(view, "idle")
    nb.shot(view, "kernel-tools")
    # it ran in the notebook's own namespace: the next cell sees the new column
    nb.run_cell(3)
    nb.output(3).get_by_text("change", exact=False).first.wait_for()
    assert "-16.0" in nb.output(3).inner_text()


def comparison_rows(table) -> list[list[str]]:
    """The comparison table as a person reads it: one list of cell texts per row, the header first."""
    return table.evaluate("t => [...t.rows].map(r => [...r.cells].map(c => c.innerText.trim()))")


# ``%%escouade a,b`` (side by side, the comparison, its saved form): test_compare_saved.py


# --------------------------------------------------------------------------- slash commands

def test_slash_commands_offered_as_completions(nb):
    view = open_agent(nb)
    box = view.locator("textarea.esc-box")
    box.click()
    box.press_sequentially("/", delay=5)
    complete = view.locator(".esc-complete")
    complete.wait_for()
    items = complete.locator(".esc-complete-item")
    assert [t.split()[0] for t in items.all_inner_texts()] == ["/plan", "/test"]
    assert "Run the tests" in items.nth(1).inner_text()
    nb.shot(view, "slash-completion")
    box.press_sequentially("t", delay=5)
    assert [t.split()[0] for t in items.all_inner_texts()] == ["/test"]
    box.press("Backspace")
    box.press("ArrowDown")
    assert "/test" in complete.locator(".esc-chosen").inner_text()
    box.press("Enter")  # picks, does not send
    assert box.input_value() == "/test "
    assert complete.is_hidden()
    assert prompts(view).count() == 0
    box.press_sequentially("now", delay=5)
    box.press("Enter")
    prompts(view).filter(has_text="/test now").wait_for()
    nb.wait_status(view, "idle")
    # Escape closes the list (and stops nothing)
    box.press_sequentially("/p", delay=5)
    complete.wait_for()
    box.press("Escape")
    assert complete.is_hidden() and box.input_value() == "/p"


# --------------------------------------------------------------------------- Notebook 7

def test_in_notebook_7(nb):
    """The same server with ``notebook`` 7 installed serves /notebooks/…: the agent view
    renders there, Enter sends, Shift+Enter adds a line."""
    import copy

    import nbformat

    if nb.lab.api("GET", "/api/status") is None:  # pragma: no cover - the server answers
        pytest.skip("no server")
    cells = start_cells(nb)
    book = nbformat.v4.new_notebook()
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    book.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nbformat.write(book, str(nb.lab.root / nb.path))
    page = nb.lab_page.context.new_page()  # the Lab page's login cookie: no token in the address
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"{e}\n{e.stack}"))
    try:
        response = page.goto(f"{nb.lab.url}/notebooks/{nb.path}")
        if response is None or response.status == 404:
            pytest.fail("no Notebook 7 here: /notebooks/ answers 404 (pip install notebook)")
        seven = copy.copy(nb)
        seven.page = page
        seven.cell(len(cells) - 1).wait_for(timeout=60_000)
        assert page.locator("#jp-top-panel, #top-panel-wrapper").count() >= 1
        assert "/lab" not in page.url
        until(lambda: (s := nb.lab.sessions_for(nb.path)) and s[0]["kernel"]["execution_state"] == "idle",
                   "the kernel idle", 60)
        page.locator(".jp-NotebookPanel[data-escouade-client]").wait_for(timeout=30_000)
        seven.run_cell(0)
        seven.run_cell(1)
        view = seven.agent_view(1)
        seven.wait_status(view, "idle")
        box = view.locator("textarea.esc-box")
        box.click()
        box.press_sequentially("Hello from", delay=5)
        box.press("Shift+Enter")
        box.press_sequentially("Notebook 7", delay=5)
        assert box.input_value() == "Hello from\nNotebook 7"
        box.press("Enter")
        replies(view).last.get_by_text("You said: Hello from", exact=False).wait_for()
        assert box.input_value() == "" and focused_box(view)
        seven.wait_status(view, "idle")
        nb.shot(view, "notebook-7")
        # Notebook 7's own page may fail on a settings schema of the suite's Lab settings; ours must not fail
        ours = [e for e in errors if "/static/notebook/" not in e or re.search(r"escouade|anywidget|esc-", e)]
        assert not ours, ours
    finally:
        page.close()


# --------------------------------------------------------------------------- the page under load

STALL_PROBE = """() => { const t0 = performance.now();
  const s = window.__stall = {longest: 0, tasks: 0, gap: 0, frames: 0, run: true, list: []};
  try { new PerformanceObserver(l => { for (const e of l.getEntries()) { s.tasks++; s.longest = Math.max(s.longest, e.duration);
          s.list.push([Math.round(e.startTime - t0), Math.round(e.duration)]); } })
        .observe({type: 'longtask', buffered: false}); } catch (e) { s.noLongtask = String(e); }
  let last = performance.now();
  const frame = (t) => { s.gap = Math.max(s.gap, t - last); last = t; s.frames++; if (s.run) requestAnimationFrame(frame); };
  requestAnimationFrame(frame); }"""

STALL_CHUNKS = 2000
STALL_RATE = int(os.environ.get("ESCOUADE_BROWSER_STALL_RATE", "200"))  # chunks a second per agent


def test_page_stall_with_three_agents_streaming(nb):
    """Three agents stream 2,000 chunks each at once: the page's longest main-thread stall
    (long tasks, and the longest gap between animation frames) is printed, not asserted
    (a shared 2-CPU machine is no place for a timed assertion)."""
    nb.open(["%load_ext escouade_nb"] + [f"{n} = %escouade fake --cwd {nb.work} --as {n}" for n in "abc"])
    for i in range(4):
        nb.run_cell(i)
    views = [nb.agent_view(i) for i in (1, 2, 3)]
    for v in views:
        nb.wait_status(v, "idle")
    prompt = f"stream {STALL_CHUNKS} of 20 at {STALL_RATE}/s"
    for v in views:
        v.locator("textarea.esc-box").fill(prompt)
    nb.page.evaluate(STALL_PROBE)
    started = time.monotonic()
    for v in views:
        v.locator("textarea.esc-box").press("Enter")
    for v in views:
        nb.wait_status(v, "writing")  # streaming: what it does now (agent.activity)
    for v in views:
        nb.wait_status(v, "idle", timeout=120)
    took = time.monotonic() - started
    stall = nb.page.evaluate("() => { window.__stall.run = false; return window.__stall; }")
    sizes = [len(replies(v).last.inner_text()) for v in views]
    print(f"\npage stall, 3 agents x {STALL_CHUNKS} chunks of 20 characters at {STALL_RATE}/s ({took:.1f} s): "
          f"longest long task {stall['longest']:.0f} ms ({stall['tasks']} long tasks), "
          f"longest gap between frames {stall['gap']:.0f} ms over {stall['frames']} frames; replies {sizes} characters; "
          f"long tasks [start ms, duration ms]: {stall['list'][:20]}")
    assert all(s >= STALL_CHUNKS * 20 * 0.95 for s in sizes), sizes  # every reply arrived whole
