"""Images in ``notebook_cells(source="live")`` and ``execute_cell`` through the kernel's MCP
server (plain asyncio, the ``mcp`` SDK's client) with a channel of our own standing for the
page: a PNG or JPEG output comes back as MCP image content (its MIME type, its base64 data)
after the text, which says which cell it belongs to; one over the size cap, or beyond the
count of one answer, is named with its size only; data that is no valid base64, or not the
image its MIME type says, is refused (named, not attached). The owner's record (``tool_done``,
``ran_cell``) gets the text and how many images, never their data."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from escouade_nb.core.output_images import MAX_IMAGE_BYTES, MAX_IMAGES
from escouade_nb.kernel_mcp.server import KernelServer
from png_files import png


PNG = base64.b64encode(png()).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\x00" * 60 + b"\xff\xd9").decode()


def display(mime: str, data: Any, text: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"output_type": "display_data", "data": {mime: data}, "metadata": {}}
    if text is not None:
        out["data"]["text/plain"] = text
    return out


class Page:
    def __init__(self, cells: list[dict[str, Any]], ran: list[dict[str, Any]] | None = None) -> None:
        self.cells = cells
        self.ran = ran or []

    async def live_cells(self) -> dict[str, Any]:
        return {"path": "work/nb.ipynb", "client": "tab-1", "cells": self.cells}

    async def change_cell(self, op: str, fields: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("no change here")

    async def settle_cell(self, cell_id: str, keep: bool) -> dict[str, Any]:
        raise AssertionError("no change here")

    def running(self) -> str | None:
        return None

    async def cell_to_run(self, cell_id: str) -> dict[str, Any]:
        source = "show()"
        return {"source": source, "sha256": hashlib.sha256(source.encode()).hexdigest(), "pending": False}

    async def run_cell(self, cell_id: str, base: str, by: dict[str, Any]) -> dict[str, Any]:
        return {"execution_count": 5, "outputs": self.ran}


class Owner:
    name = "test owner"

    def __init__(self) -> None:
        self.done: list[tuple[str, str, str]] = []
        self.ran: list[str] = []

    async def ask_run_code(self, code: str) -> None:
        raise AssertionError("no run_code here")

    async def allow_read(self, tool: str, arguments: dict) -> None:
        return None

    async def ask_execute_cell(self, cell_id: str, source: str, pending: bool) -> None:
        return None

    def tool_done(self, tool: str, arguments: dict, status: str, text: str) -> None:
        self.done.append((tool, status, text))

    def ran_cell(self, cell_id: str, source: str, text: str, failed: bool) -> None:
        self.ran.append(text)

    tell: str | None = None

    def notice(self) -> str | None:
        told, self.tell = self.tell, None
        return told


@asynccontextmanager
async def client(url: str, token: str):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def serve(page: Page, body) -> None:
    async def main() -> None:
        server = await KernelServer(namespace={}, live=page).start()
        try:
            owner = Owner()
            async with client(server.url, server.grant(owner).token) as session:
                await body(session, owner)
        finally:
            await server.aclose()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_live_read_attaches_each_image_after_the_text_saying_its_cell():
    big = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * MAX_IMAGE_BYTES).decode()
    cells = [
        {"id": "plot", "cell_type": "code", "source": "plot()", "execution_count": 1,
         "outputs": [{"output_type": "stream", "name": "stdout", "text": "drawn\n"},
                     display("image/png", PNG[:30] + "\n" + PNG[30:], "<Figure size 2x2>")]},
        {"id": "photo", "cell_type": "code", "source": "photo()", "execution_count": 2,
         "outputs": [display("image/jpeg", JPEG)]},
        {"id": "huge", "cell_type": "code", "source": "huge()", "execution_count": 3,
         "outputs": [display("image/png", big), display("image/png", {"not_sent": "too large", "bytes": 3_400_000})]},
        {"id": "bad", "cell_type": "code", "source": "bad()", "execution_count": 4,
         "outputs": [display("image/png", "not base64 at all!"), display("image/png", JPEG)]},
    ]

    async def body(session: ClientSession, owner: Owner) -> None:
        got = await session.call_tool("notebook_cells", {"source": "live"})
        assert not got.is_error
        text, *images = got.content
        assert text.type == "text" and [i.type for i in images] == ["image", "image"]
        assert (images[0].mime_type, images[0].data) == ("image/png", PNG)  # line breaks gone
        assert (images[1].mime_type, images[1].data) == ("image/jpeg", JPEG)
        assert base64.b64decode(images[0].data) == png()
        answer = json.loads(text.text)
        assert [(i["image"], i["cell_id"], i["index"], i["mime_type"]) for i in answer["images"]] == \
            [(1, "plot", 1, "image/png"), (2, "photo", 2, "image/jpeg")]
        by_id = {c["id"]: c["outputs"] for c in answer["cells"]}
        assert by_id["plot"].startswith("drawn\n<Figure size 2x2>\n[image/png, ")
        assert "image 1 of this answer, attached after the text]" in by_id["plot"]
        assert "image 2 of this answer" in by_id["photo"]
        assert "[image/png, 1.0 MB: over the 1.0 MB of one image, not attached]" in by_id["huge"]
        assert "[image/png, 3.4 MB: over the 1.0 MB of one image, not attached]" in by_id["huge"]
        assert "[image/png: refused, the page sent no valid base64]" in by_id["bad"]
        assert "[image/png: refused, the data is no PNG image]" in by_id["bad"]
        assert PNG[40:80] not in text.text  # the data only as image content
        tool, status, told = owner.done[-1]
        assert (tool, status) == ("notebook_cells", "ok") and told.endswith("\n[2 images attached]")
        assert PNG[40:80] not in told and JPEG[20:60] not in told

    serve(Page(cells), body)


def test_images_beyond_the_count_of_one_answer_are_named_only():
    cells = [{"id": f"c{n}", "cell_type": "code", "source": "", "execution_count": n,
              "outputs": [display("image/png", PNG)]} for n in range(MAX_IMAGES + 2)]

    async def body(session: ClientSession, owner: Owner) -> None:
        got = await session.call_tool("notebook_cells", {"source": "live"})
        assert [c.type for c in got.content] == ["text"] + ["image"] * MAX_IMAGES
        answer = json.loads(got.content[0].text)
        assert [i["cell_id"] for i in answer["images"]] == [f"c{n}" for n in range(MAX_IMAGES)]
        for cell in answer["cells"][MAX_IMAGES:]:
            assert f"beyond the {MAX_IMAGES} images of one answer, not attached]" in cell["outputs"]

    serve(Page(cells), body)


def test_a_read_without_images_stays_one_text():
    cells = [{"id": "t", "cell_type": "code", "source": "1", "execution_count": 1,
              "outputs": [{"output_type": "execute_result", "data": {"text/plain": "1"}}]}]

    async def body(session: ClientSession, owner: Owner) -> None:
        got = await session.call_tool("notebook_cells", {"source": "live"})
        assert [c.type for c in got.content] == ["text"] and "images" not in json.loads(got.content[0].text)

    serve(Page(cells), body)


def test_execute_cell_answers_its_images_after_the_text():
    ran = [display("image/png", PNG, "<IPython.core.display.Image object>"),
           display("image/png", "@@@@")]

    async def body(session: ClientSession, owner: Owner) -> None:
        owner.tell = "[escouade_nb notice] The user rejected your change"
        got = await session.call_tool("execute_cell", {"cell_id": "show"})
        assert not got.is_error
        text, *images = got.content
        assert [(i.type, i.mime_type, i.data) for i in images] == [("image", "image/png", PNG)]
        assert text.text.startswith("cell show ran in the notebook [5]:\n<IPython.core.display.Image object>\n")
        assert "image 1 of this answer, attached after the text]" in text.text
        assert "[image/png: refused, the page sent no valid base64]" in text.text
        assert "(1 image of this cell's outputs attached after this text, in order)" in text.text
        assert text.text.endswith("\n\n[escouade_nb notice] The user rejected your change")  # in the text block
        assert owner.ran and PNG[20:60] not in owner.ran[-1]
        tool, status, told = owner.done[-1]
        assert (tool, status) == ("execute_cell", "ok") and told.endswith("[1 image attached]")

    serve(Page([], ran), body)


def test_the_fake_agent_edits_a_cell_of_a_notebook_with_images(tmp_path):
    """The fake agent reads the hash from the live read's text (the image blocks after it are
    named ``[image]`` in what it reads) and its edit names it."""
    from acp_clients import RecordingClient
    from test_fake_agent_live_words import say
    from deadlines import run
    from test_kernel_server import fake_agent, http_entry
    from test_live_cell_edits import Owner2, Page as EditPage, sha

    async def main() -> None:
        page = EditPage()
        page.cells[0]["outputs"] = [display("image/png", PNG)]
        page.cells[0]["execution_count"] = 1
        server = await KernelServer(namespace={}, live=page).start()
        client = RecordingClient("allow-once")
        try:
            async with fake_agent(client, tmp_path, [http_entry(server, server.grant(Owner2()))]) as (conn, sid, _):
                page.before = "df = load()"
                text = await say(conn, sid, client, "edit cell a1\ndf = load('2024')")
                assert "pending review" in text, text
                assert page.ops[-1][1]["base"] == sha("df = load()")
        finally:
            await server.aclose()

    run(main())
