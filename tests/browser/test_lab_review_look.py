"""The look of the review of an agent's changes in JupyterLab: the bar inside a pending cell, its Keep /
Reject and the toolbar's "N changes pending review / Keep all / Reject all" read at ≥ 4.5:1 (WCAG, computed
from the page) in JupyterLab Light and Dark, Keep and Reject are not drawn disabled; in an 800 px window the
toolbar's item stays in the toolbar (or its "more" menu) and covers no cell; a source too large for the page is
refused as too large, the limit named."""

from __future__ import annotations

import json

from test_lab import CONTRAST, set_theme
from test_lab_cell_edits import BARS, REVIEWED, sha
from test_lab_live_cells import PANEL, Mcp
from browser_waits import until

LOOK_GROUPS = {
    "bar title": ".escouade-review-title",
    "bar buttons": ".escouade-review button",
    "bar diff": ".escouade-review-diff > div",
    "toolbar text": ".escouade-review-count",
    "toolbar buttons": ".escouade-review-all button",
}

# where the toolbar's item is, the first cell's box and what the page shows at points inside that cell
PLACE = f"""() => {{
  const panel = {PANEL};
  const item = document.querySelector('.escouade-review-all');
  const box = e => {{ const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }};
  const first = panel.content.widgets[0].node;
  const [l, t, r, b] = box(first);
  const points = [[l + 4, t + 4], [(l + r) / 2, t + 4], [r - 4, t + 4], [(l + r) / 2, (t + b) / 2]];
  return {{
    inToolbar: !!item && !!item.closest('.jp-Toolbar'),
    inPopup: !!item && !!item.closest('.jp-Toolbar-responsive-popup'),
    visible: !!item && item.getClientRects().length > 0,
    item: item ? box(item) : null,
    toolbar: box(panel.toolbar.node),
    cell: [l, t, r, b],
    covered: points.map(([x, y]) => document.elementFromPoint(x, y)).filter(e => !e || !first.contains(e))
      .map(e => (e ? e.className : 'nothing').toString().slice(0, 60)),
  }};
}}"""


def overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def well_placed(place: dict) -> bool:
    """The review item in the toolbar (over no cell, within the bar) or in its "more" menu."""
    if not (place["inToolbar"] or place["inPopup"]) or place["covered"]:
        return False
    return not place["visible"] or (not overlaps(place["item"], place["cell"])
                                    and place["item"][1] >= place["toolbar"][1] - 1
                                    and place["item"][3] <= place["toolbar"][3] + 1)


def check_look(nb, theme: str) -> None:
    found = nb.page.evaluate(CONTRAST, [nb.panel.element_handle(), LOOK_GROUPS])
    print(f"\nreview contrast ({theme}):")
    low = []
    for name, pairs in found.items():
        assert pairs, f"{theme}: nothing found for {name} ({LOOK_GROUPS[name]})"
        worst = min(pairs)
        print(f"  {name:<16} min {worst[0]:5.2f}:1 ({worst[1]!r}) over {len(pairs)}")
        low += [(name, r, t) for r, t in pairs if r < 4.5]
    assert not low, f"{theme}: text under 4.5:1: {low}"
    # Keep and Reject are live buttons, drawn so: enabled, not faded; Keep (the accept action) is not Reject
    looks = nb.page.evaluate("""() => [...document.querySelectorAll('.escouade-review button')].map(b =>
        [b.textContent, b.disabled, getComputedStyle(b).opacity, getComputedStyle(b).color])""")
    assert {name for name, *_ in looks} == {"Keep", "Reject"}, looks
    assert all(not disabled and opacity == "1" for _, disabled, opacity, _c in looks), looks
    keep = {c for name, _d, _o, c in looks if name == "Keep"}
    reject = {c for name, _d, _o, c in looks if name == "Reject"}
    assert keep.isdisjoint(reject), f"Keep is drawn as the accept action, not as Reject: {looks}"


def test_the_review_reads_in_light_and_dark_and_its_toolbar_item_covers_no_cell_at_800_px(nb):
    page = nb.page
    nb.open([REVIEWED, "df = 1"])
    nb.run_cell(0)
    out = nb.output(0).inner_text()
    lines = dict(line.split(" ", 1) for line in out.splitlines() if line[:4] in ("URL ", "TOKE"))
    mcp = Mcp(lines["URL"], lines["TOKEN"])
    try:
        load = mcp.live()["cells"][1]
        new = json.loads(mcp.call("insert_cell", source="# Title\nsome *text*", cell_type="markdown",
                                  after_cell_id=load["id"])["text"])
        edited = mcp.call("edit_cell", cell_id=load["id"], source="df = 2\ndf", base_sha256=sha("df = 1"))
        assert not edited["is_error"], edited["text"]
        until(lambda: sorted(page.evaluate(BARS)) == sorted([new["cell_id"], load["id"]]), "both bars")
        until(lambda: "2 changes pending review" in nb.panel.locator(".escouade-review-all").inner_text(),
              "the toolbar counts them")

        # -- light, then dark (the bar's colours follow a live switch)
        check_look(nb, "light")
        nb.shot(nb.panel, "review-light")
        try:
            set_theme(nb, "JupyterLab Dark")
            check_look(nb, "dark")
            nb.shot(nb.panel, "review-dark")
        finally:
            set_theme(nb, "JupyterLab Light")

        # -- an 800 px window: the item is one of the toolbar's (or in its "more" menu), over no cell
        page.set_viewport_size({"width": 800, "height": 700})
        page.evaluate(f"() => {PANEL}.content.scrollToItem ? {PANEL}.content.scrollToItem(0) : undefined")
        # the toolbar lays its items out again (throttled): until the item has a place of its own
        place = until(lambda: (p := page.evaluate(PLACE)) and well_placed(p) and p, "the review item's place at 800 px",
                      10)
        print("\n800 px:", place)
        nb.shot(nb.panel, "review-800")
        assert place["inToolbar"] or place["inPopup"], place
        assert place["covered"] == [], f"the first cell is covered at 800 px: {place}"
        if place["visible"]:
            assert not overlaps(place["item"], place["cell"]), place
            assert place["item"][1] >= place["toolbar"][1] - 1 and place["item"][3] <= place["toolbar"][3] + 1, place
        else:  # in the toolbar's "more" menu: opened, Keep all / Reject all are there
            nb.panel.locator(".jp-Toolbar-responsive-opener").click()
            popup = page.locator(".jp-Toolbar-responsive-popup .escouade-review-all")
            popup.get_by_role("button", name="Keep all").wait_for()
            nb.shot(nb.panel, "review-800-menu")
        page.locator(".escouade-review-all").get_by_role("button", name="Reject all").click()
        until(lambda: page.evaluate(BARS) == [], "nothing pending after Reject all")
        assert not page.locator(".escouade-review-all").first.is_visible()

        # a new change brings the item back; a wide window again shows it in the toolbar itself
        # (the tool's answer: its JSON, then the notice of the Rejects above)
        again = json.JSONDecoder().raw_decode(mcp.call("insert_cell", source="again = 1", after_cell_id=load["id"])["text"])[0]
        until(lambda: page.evaluate(BARS) == [again["cell_id"]], "the new change's bar")
        until(lambda: page.evaluate(PLACE)["inToolbar"], "the item is back in the toolbar (or its menu)")
        page.set_viewport_size({"width": 1200, "height": 900})
        until(lambda: page.evaluate(PLACE)["visible"] and not page.evaluate(PLACE)["inPopup"],
              "in a wide window the item is in the toolbar itself")
        assert "1 change pending review" in nb.panel.locator(".escouade-review-all").inner_text()
    finally:
        page.set_viewport_size({"width": 1200, "height": 900})
        mcp.close()


def test_a_source_too_large_for_the_page_is_refused_as_too_large(nb):
    nb.open([REVIEWED, "df = 1"])
    nb.run_cell(0)
    out = nb.output(0).inner_text()
    lines = dict(line.split(" ", 1) for line in out.splitlines() if line[:4] in ("URL ", "TOKE"))
    mcp = Mcp(lines["URL"], lines["TOKEN"])
    try:
        load = mcp.live()["cells"][1]
        huge = "x" * 1_000_001
        got = mcp.call("insert_cell", source=huge, after_cell_id=load["id"])
        assert got["is_error"], got["text"][:300]
        assert "too large" in got["text"] and "1000001" in got["text"] and "1000000" in got["text"], got["text"]
        assert "cell_type" not in got["text"], got["text"]
        got = mcp.call("edit_cell", cell_id=load["id"], source=huge, base_sha256=sha("df = 1"))
        assert got["is_error"] and "too large" in got["text"] and "1000000" in got["text"], got["text"]
        assert [c["source"] for c in mcp.live()["cells"]][1:] == ["df = 1"], "nothing changed"
        # at the limit it is made
        fits = mcp.call("insert_cell", source="x" * 1_000_000, after_cell_id=load["id"])
        assert not fits["is_error"], fits["text"][:300]
    finally:
        mcp.close()


def test_in_notebook_7_the_toolbar_item_is_one_of_the_toolbars(nb):
    nb.write([REVIEWED, "df = 1"])
    seven = nb.in_notebook_7()
    page = seven.page
    seven.run_cell(0)
    lines = dict(line.split(" ", 1) for line in seven.output(0).inner_text().splitlines()
                 if line[:4] in ("URL ", "TOKE"))
    mcp = Mcp(lines["URL"], lines["TOKEN"])
    try:
        load = mcp.live()["cells"][1]
        new = json.loads(mcp.call("insert_cell", source="seven = 7", after_cell_id=load["id"])["text"])
        until(lambda: page.evaluate(BARS) == [new["cell_id"]], "the bar")
        until(lambda: page.evaluate(PLACE)["visible"], "the toolbar item")
        place = page.evaluate(PLACE)
        assert place["inToolbar"] and place["covered"] == [], place
        assert "1 change pending review" in page.locator(".escouade-review-all").inner_text()
        seven.shot(seven.panel, "review-notebook-7")
        page.locator(".escouade-review-all").get_by_role("button", name="Keep all").click()
        until(lambda: page.evaluate(BARS) == [], "nothing pending after Keep all")
    finally:
        mcp.close()
