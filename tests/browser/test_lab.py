"""escouade_nb in a real JupyterLab, used the way a person uses it: type a prompt and
press Send, click a permission card's button, press Stop — and check what the page shows."""

from __future__ import annotations

import re
import time



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


def test_prompt_box_streams_the_reply(nb):
    view = open_agent(nb, "%%escouade fake\nAnd hello from a cell")
    nb.send(view, "Hello from the browser")
    reply = view.locator(".escouade-message-agent").last
    reply.get_by_text("You said: Hello from the browser").wait_for()
    assert "Hello! I am the fake agent." in reply.inner_text()
    assert "you: Hello from the browser" in view.locator(".escouade-message-user").last.inner_text()
    nb.wait_status(view, "idle")
    # the next cell sends its text as a prompt; the turn shows under that cell, and in the agent's view
    nb.run_cell(2)
    turn = nb.output(2).locator(".escouade-turn")
    turn.get_by_text("You said: And hello from a cell").wait_for()
    assert "you: And hello from a cell" in turn.inner_text()
    view.get_by_text("You said: And hello from a cell").wait_for()
    nb.wait_status(view, "idle")
    nb.shot(view, "agent-view")


def test_permission_card_allow_once(nb):
    (nb.work / "notes.txt").write_text("Buy milk.\n")
    view = open_agent(nb)
    nb.send(view, "Please edit notes.txt")
    card = view.locator(".escouade-permission")
    card.get_by_text("Waiting for you").wait_for()
    nb.wait_status(view, "waiting for you")
    assert "asks permission: Edit notes.txt" in card.inner_text()
    diff = card.locator(".escouade-diff")
    assert diff.locator(".escouade-diff-ctx").all_inner_texts() == [" Buy milk."]
    assert diff.locator(".escouade-diff-add").all_inner_texts() == ["+Edited by the fake agent."]
    buttons = card.locator("button")
    assert buttons.all_inner_texts() == ["Allow once", "Always allow", "Reject"]
    nb.shot(view, "permission-card")
    card.locator("button", has_text="Allow once").click()
    card.locator(".escouade-answer", has_text="Allowed once by you").wait_for()
    for b in buttons.all():
        assert b.is_disabled()
    view.locator(".escouade-message-agent", has_text="Edited notes.txt.").wait_for()
    assert "completed" in view.locator(".escouade-tool-call .escouade-tool-header").last.inner_text()
    nb.wait_status(view, "idle")
    assert (nb.work / "notes.txt").read_text() == "Buy milk.\nEdited by the fake agent.\n"
    nb.shot(view, "permission-card-answered")


def test_card_buttons_reachable_in_a_long_transcript(nb):
    """Once the transcript reaches its max height, item views must not shrink: a card's own
    text would cover its buttons (item views are flex: 0 0 auto)."""
    (nb.work / "notes.txt").write_text("".join(f"- line {i}\n" for i in range(1, 9)))
    view = open_agent(nb)
    nb.send(view, "Please edit notes.txt")
    card = view.locator(".escouade-permission")
    card.get_by_text("Waiting for you").wait_for()
    try:
        card.locator("button", has_text="Allow once").click(timeout=3000)
    finally:
        nb.shot(view, "long-transcript")
    card.locator(".escouade-answer", has_text="Allowed once by you").wait_for(timeout=5000)


def test_stop_during_a_slow_turn(nb):
    view = open_agent(nb)
    nb.send(view, "slow")
    reply = view.locator(".escouade-message-agent").last
    reply.get_by_text("tick 5", exact=False).wait_for()
    nb.wait_status(view, "working")
    stop = nb.stop_button(view)
    assert stop.is_enabled()
    stop.click()
    nb.wait_status(view, "idle", timeout=10)
    assert stop.is_disabled()
    shown = reply.inner_text()
    time.sleep(1.0)  # the agent stopped: nothing more arrives
    assert reply.inner_text() == shown
    ticks = shown.split()
    assert "50" not in ticks and len(ticks) < 2 * 50, shown


def test_stop_cancels_the_pending_card(nb):
    view = open_agent(nb)
    nb.send(view, "run make deploy")
    card = view.locator(".escouade-permission")
    card.get_by_text("Waiting for you").wait_for()
    assert "Run make deploy" in card.inner_text()
    nb.stop_button(view).click()
    card.locator(".escouade-answer", has_text="Cancelled (you stopped the turn)").wait_for()
    for b in card.locator("button").all():
        assert b.is_disabled()
    nb.shot(view, "stopped-card")
    # JupyterLab ≥ 4.6 may deliver the Stop click on a kernel subshell's thread: the view
    # hands it to the agent's loop (widgets.views.on_loop), so the turn ends at once
    nb.wait_status(view, "idle", timeout=10)
    assert nb.stop_button(view).is_disabled()


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


def test_agent_reply_renders_as_text(nb):
    # cell 2 sends a prompt whose card shows the payloads in its title and input
    view = open_agent(nb, f"%%escouade fake\nrun {PAYLOADS[0]} {PAYLOADS[1]}")
    nb.page.evaluate("() => { window.__escouade_pwned = undefined; }")
    nb.send(view, "Show these: " + " ".join(PAYLOADS), typed=False)
    reply = view.locator(".escouade-message-agent").last
    reply.get_by_text("Try ", exact=False).wait_for()
    nb.wait_status(view, "idle")
    for payload in ("<img src=x onerror=", "<script>window.__escouade_pwned='script'</script>",
                    "[click me](javascript:", '<a href="javascript:', "<svg onload=", "<iframe src="):
        assert payload in reply.inner_text(), payload
    assert "you: Show these: <img src=x onerror=" in view.locator(".escouade-message-user").last.inner_text()
    # click where the links would be: nothing runs
    reply.get_by_text("click me", exact=False).click()
    reply.get_by_text("raw link", exact=False).click()

    nb.run_cell(2)
    turn = nb.output(2).locator(".escouade-turn")
    card = turn.locator(".escouade-permission")
    card.get_by_text("Waiting for you").wait_for()
    assert "asks permission: Run <img src=x onerror=" in card.inner_text()
    assert "<script>" in turn.locator(".escouade-tool-call").inner_text()
    card.locator("button", has_text="Reject").click()
    card.locator(".escouade-answer", has_text="by you").wait_for()
    turn.locator(".escouade-message-agent", has_text="I did not run").wait_for()
    nb.wait_status(view, "idle")

    for where in (view, turn):
        found = where.evaluate(INJECTED)
        assert found == {"bad": [], "handlers": []}, found
    assert nb.page.evaluate(JS_URLS) == []
    nb.page.wait_for_timeout(300)
    assert nb.page.evaluate("() => window.__escouade_pwned === undefined")
    assert not [e for e in nb.errors if "pwned" in e]


def dropdown(where, label: str):
    """The <select> of the ipywidgets Dropdown labelled ``label``."""
    return where.locator(".widget-dropdown").filter(
        has=where.page.locator("label", has_text=re.compile(f"^{re.escape(label)}$"))).locator("select")


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
    controls = view.locator(".escouade-controls")
    mode = dropdown(controls, "Mode")
    assert selected(mode).startswith("default")
    pick(mode, "bypassPermissions")
    agent_mode = dropdown(controls, "Agent mode")
    deadline = time.monotonic() + 15
    while selected(agent_mode) != "YOLO":  # the agent confirms its own mode
        assert time.monotonic() < deadline, f"agent mode shows {selected(agent_mode)!r}"
        time.sleep(0.1)
    assert selected(dropdown(controls, "Mode")).startswith("bypassPermissions")
    nb.send(view, "which mode")
    view.locator(".escouade-message-agent", has_text="mode=yolo").wait_for()
    nb.wait_status(view, "idle")
    # the new mode answers the next card by itself
    nb.send(view, "run make deploy")
    card = view.locator(".escouade-permission").last
    card.locator(".escouade-answer", has_text="by the mode").wait_for()
    view.locator(".escouade-message-agent", has_text="Ran make deploy.").wait_for()
    assert "Allowed once by the mode" in card.inner_text()
    nb.shot(controls, "mode-controls")


def test_plan_approval(nb):
    view = open_agent(nb, "%%escouade fake\npresent plan")
    nb.send(view, "present plan")
    card = view.locator(".escouade-plan-approval")
    card.get_by_text("Waiting for you").wait_for()
    assert card.locator(".escouade-plan-text li").all_inner_texts() == [
        "Read notes.txt", "Add a summary line", "Run the tests"]
    nb.shot(view, "plan-approval")
    card.locator("textarea").fill("Add a step: update the README.")
    nb.page.wait_for_timeout(300)
    card.locator("button", has_text="Keep planning").click()
    view.locator(".escouade-message-agent",
                 has_text="Feedback received: Add a step: update the README.").wait_for()
    assert card.locator("button", has_text="Approve").is_disabled()
    nb.wait_status(view, "idle")
    # the same plan again, from a cell: approve it in the turn's own view
    nb.run_cell(2)
    turn_card = nb.output(2).locator(".escouade-plan-approval")
    turn_card.get_by_text("Waiting for you").wait_for()
    turn_card.locator("button", has_text="Approve").click()
    nb.output(2).locator(".escouade-message-agent", has_text="Plan approved; starting with step 1.").wait_for()
    assert "by you" in turn_card.locator(".escouade-answer").inner_text()
    nb.wait_status(view, "idle")


def test_journal_of_a_rule_plugin(nb):
    cells = start_cells(nb, "%escouade journal team-rules")
    cells.insert(1, f"%escouade plugins on team-rules --project {nb.work}")
    nb.open(cells)
    for i in range(3):
        nb.run_cell(i)
    view = nb.agent_view(2)
    nb.wait_status(view, "idle")
    nb.run_cell(3)
    journal = nb.output(3).locator(".escouade-journal")
    journal.wait_for()
    nb.send(view, "run rm -rf build")
    # settled by the plugin, nothing clicked (the card names it; its exact verb is the views' business)
    view.locator(".escouade-permission .escouade-answer", has_text="by Team rules").wait_for()
    view.locator(".escouade-message-agent", has_text="I did not run rm -rf build").wait_for()
    nb.wait_status(view, "idle")
    nb.send(view, "run npm test")
    view.locator(".escouade-message-agent", has_text="Ran npm test").wait_for()
    assert "by Team rules" in view.locator(".escouade-permission .escouade-answer").last.inner_text()
    nb.wait_status(view, "idle")
    journal.get_by_text("npm test", exact=False).wait_for()
    assert "rm -rf build" in journal.inner_text()
    journal.locator("input[type=text]").fill("rm -rf")
    deadline = time.monotonic() + 10
    while "npm test" in journal.inner_text():
        assert time.monotonic() < deadline, journal.inner_text()
        time.sleep(0.1)
    assert "rm -rf build" in journal.inner_text()
    journal.locator("input[type=text]").fill("")
    journal.get_by_text("npm test", exact=False).wait_for()
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
    header = view.locator(":scope > .widget-hbox").first
    header.locator(".escouade-kernel-tools", has_text="kernel tools ✓").wait_for()
    nb.send(view, RUN_CODE)  # the newlines are typed as Enter: they stay in the box
    card = view.locator(".escouade-permission", has_text="Run code in the kernel")
    card.get_by_text("Waiting for you").wait_for()
    nb.wait_status(view, "waiting for you")
    assert view.locator(".escouade-permission").count() == 1  # the agent's own request folded into it
    text = card.inner_text()
    assert "asks permission: Run code in the kernel" in text
    assert 'sales["change"] = sales.q4 - sales.q3' in text
    assert 'print(sales.loc[sales.change < 0, "region"].tolist())' in text
    buttons = card.locator("button")
    assert buttons.all_inner_texts() == ["Run", "Run without asking again in this session", "Don't run"]
    nb.shot(view, "kernel-tools-pending")
    card.locator("button", has_text=re.compile("^Run$")).click()
    card.locator(".escouade-answer", has_text="Allowed by you: Run").wait_for()
    for b in buttons.all():
        assert b.is_disabled()
    view.locator(".escouade-message-agent", has_text="['north', 'east']").wait_for()
    assert "mcp__escouade__run_code returned" in view.locator(".escouade-message-agent").last.inner_text()
    nb.wait_status(view, "idle")
    assert "kernel tools ✓" in header.inner_text()
    nb.shot(view, "kernel-tools")
    # it ran in the notebook's own namespace: the next cell sees the new column
    nb.run_cell(3)
    nb.output(3).get_by_text("change", exact=False).first.wait_for()
    assert "-16.0" in nb.output(3).inner_text()


def comparison_rows(table) -> list[list[str]]:
    """The comparison table as a person reads it: one list of cell texts per row, the header first."""
    return table.evaluate("t => [...t.rows].map(r => [...r.cells].map(c => c.innerText.trim()))")


def test_side_by_side_turns_and_the_comparison_table(nb):
    """Two ``fake`` agents, each in its own worktree of a scratch repository, get one
    prompt (``%%escouade a,b``): their turns side by side, each card answered in its own
    column, then the comparison table (stop reason, the worktree's diff stat, who answered)."""
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
             "%%escouade a,b\nPlease edit notes.txt"])
    for i in range(4):
        nb.run_cell(i)
    for i in (2, 3):
        nb.wait_status(nb.agent_view(i), "idle")
    nb.run_cell(4)
    compare = nb.output(4).locator(".escouade-compare")
    columns = compare.locator(".escouade-turn")
    columns.nth(1).wait_for()
    assert columns.count() == 2
    heads = compare.locator(".escouade-compare-head")
    for i, name in enumerate("ab"):  # every agent's card answerable, side by side, under its name
        card = columns.nth(i).locator(".escouade-permission")
        card.get_by_text("Waiting for you").wait_for()
        assert "asks permission: Edit notes.txt" in card.inner_text()
        assert heads.nth(i).inner_text().startswith(f"{name} · Fake · worktree escouade/{name} (off main)")
    table = compare.locator("table.escouade-comparison")
    table.locator("td", has_text="running").nth(1).wait_for()  # not "queued": the table follows the turns
    nb.shot(compare, "orchestration-pending")
    for col in (columns.nth(0), columns.nth(1)):
        card = col.locator(".escouade-permission")
        card.locator("button", has_text="Allow once").click()
        card.locator(".escouade-answer", has_text="Allowed once by you").wait_for()
    for col in (columns.nth(0), columns.nth(1)):
        col.locator(".escouade-message-agent", has_text="Edited notes.txt.").wait_for()
    table.locator("td", has_text="1 file changed").nth(1).wait_for()  # re-counted once both turns ended
    head, *rows = comparison_rows(table)
    assert head == ["agent", "stop", "duration", "tokens", "cost", "files changed", "tool calls", "cards"]
    assert [r[0] for r in rows] == ["a", "b"]
    for r in rows:
        assert r[1] == "end_turn" and re.fullmatch(r"\d+\.\d s", r[2]), r
        assert r[5:] == ["1 file changed, +1 -0 (notes.txt)", "1", "Allowed once by you"], r
    for name in ("a", "b"):
        assert (nb.work / "proj.worktrees" / name / "notes.txt").read_text() == "Buy milk.\nEdited by the fake agent.\n"
    assert (repo / "notes.txt").read_text() == "Buy milk.\n"  # the main worktree untouched
    box = [columns.nth(i).bounding_box() for i in (0, 1)]
    assert box[0]["x"] + box[0]["width"] <= box[1]["x"] + 1 and abs(box[0]["width"] - box[1]["width"]) < 2, box
    for i, name in enumerate("ab"):
        heads.nth(i).get_by_text(f"worktree escouade/{name} (off main) · 1 file changed, +1 -0 · idle").wait_for()
    nb.shot(compare, "orchestration")
    page = nb.page
    try:  # a narrow window: the second column goes under the first; the table scrolls in its box
        page.set_viewport_size({"width": 640, "height": 1600})  # tall: the whole view in the picture
        page.wait_for_timeout(300)
        box = [columns.nth(i).bounding_box() for i in (0, 1)]
        assert box[1]["y"] >= box[0]["y"] + box[0]["height"] - 1, box
        scroll = table.evaluate("t => { const b = t.closest('.widget-html'); "
                                "return [b.scrollWidth, b.clientWidth, getComputedStyle(b).overflowX]; }")
        assert scroll[0] <= scroll[1] or scroll[2] == "auto", scroll
        nb.shot(compare, "orchestration-narrow")
    finally:
        page.set_viewport_size({"width": 1200, "height": 900})
    for i in (2, 3):
        nb.wait_status(nb.agent_view(i), "idle")
