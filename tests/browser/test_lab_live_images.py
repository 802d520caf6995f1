"""Images in the kernel's live read, in a real JupyterLab with the extension installed with the
package: a cell displays a small PNG (``IPython.display.Image``); ``notebook_cells(source="live")``
through the ``mcp`` SDK's client answers the text, naming that image in that cell's outputs and
in its ``images`` list, then the image as MCP image content (``image/png``, the very bytes the
cell displayed)."""

from __future__ import annotations

import base64
import json

from test_lab_live_cells import SETUP, Mcp
from png_files import png

SHOW = f"""import base64
from IPython.display import Image, display
display(Image(data=base64.b64decode({base64.b64encode(png(3, 3)).decode()!r})))"""

ONE_PAGE = """import asyncio
pages = notebook_pages.start_in_kernel(get_ipython())
pages.ping()
async with asyncio.timeout(45):
    while not pages.pages:
        await asyncio.sleep(0.05)
print("PAGES", len(pages.pages))"""


def test_a_displayed_png_comes_back_as_image_content(nb):
    nb.open([SETUP, SHOW, ONE_PAGE])
    nb.run_cell(0)
    out = nb.output(0).inner_text()
    lines = dict(line.split(" ", 1) for line in out.splitlines() if line[:4] in ("URL ", "TOKE"))
    nb.run_cell(1)
    nb.page.locator(".jp-OutputArea-output img").first.wait_for(timeout=30_000)
    nb.run_cell(2)
    assert "PAGES 1" in nb.output(2).inner_text()
    mcp = Mcp(lines["URL"], lines["TOKEN"])
    try:
        got = mcp.call("notebook_cells", source="live")
        assert not got["is_error"], got["text"]
        answer = json.loads(got["text"])
        cell = answer["cells"][1]
        assert "[image/png, " in cell["outputs"] and "image 1 of this answer, attached after the text]" in \
            cell["outputs"]
        assert [(i["cell_id"], i["index"], i["mime_type"]) for i in answer["images"]] == \
            [(cell["id"], 2, "image/png")]
        assert [i["mime_type"] for i in got["images"]] == ["image/png"]
        assert base64.b64decode(got["images"][0]["data"]) == png(3, 3)
        assert got["images"][0]["data"][10:50] not in cell["outputs"]  # (the source holds it: the cell made it)
    finally:
        mcp.close()
