"""``notebook_cells(source="live")`` through the kernel's MCP server (plain asyncio, the
``mcp`` SDK's client) with a channel of our own standing for the page: the answer is JSON
with each cell's id, type, source, the SHA-256 of its source, execution count and outputs
as text (clipped), in the range asked; a malformed page answer and a server without a
channel are tool errors in one line; the owner is asked with the kernel's notebook path."""

from __future__ import annotations

import asyncio
import hashlib
import json
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from escouade_nb.core.notebook import MAX_OUTPUT
from escouade_nb.kernel_mcp.server import KernelServer, LiveNotebook

CELLS = [
    {"id": "a1", "cell_type": "markdown", "source": "# Sales"},
    {"id": "b2", "cell_type": "code", "source": "x = 'café'\nx", "execution_count": 3,
     "outputs": [{"output_type": "execute_result", "data": {"text/plain": "'café'", "image/png": ""}},
                 {"output_type": "stream", "name": "stdout", "text": "y" * 5000}]},
    {"id": "c3", "cell_type": "code", "source": "typed but not saved", "execution_count": None, "outputs": []},
]


class Page:
    def __init__(self, cells: Any) -> None:
        self.cells = cells
        self.reads = 0

    async def live_cells(self) -> dict[str, Any]:
        self.reads += 1
        return {"path": "work/nb.ipynb", "client": "tab-1", "cells": self.cells}

    async def change_cell(self, op: str, fields: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("no change here")

    async def settle_cell(self, cell_id: str, keep: bool) -> dict[str, Any]:
        raise AssertionError("no change here")


class Owner:
    name = "test owner"

    def __init__(self) -> None:
        self.reads: list[tuple[str, dict]] = []

    async def ask_run_code(self, code: str) -> None:
        return None

    async def allow_read(self, tool: str, arguments: dict) -> None:
        self.reads.append((tool, arguments))


@asynccontextmanager
async def client(url: str, token: str):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def text_of(result: Any) -> str:
    return "\n".join(c.text for c in result.content)


def test_the_live_read_answers_each_cell_with_its_hash():
    async def main() -> None:
        page = Page(CELLS)
        assert isinstance(page, LiveNotebook)
        server = await KernelServer(namespace={"__session__": "/srv/work/nb.ipynb"}, live=page).start()
        try:
            owner = Owner()
            grant = server.grant(owner)
            async with client(server.url, grant.token) as session:
                got = await session.call_tool("notebook_cells", {"source": "live"})
                assert not got.is_error, text_of(got)
                answer = json.loads(text_of(got))
                assert answer["source"] == "live" and answer["notebook"] == "work/nb.ipynb"
                assert answer["cells_in_notebook"] == 3
                cells = answer["cells"]
                assert [(c["index"], c["id"], c["cell_type"]) for c in cells] == \
                    [(1, "a1", "markdown"), (2, "b2", "code"), (3, "c3", "code")]
                for c, sent in zip(cells, CELLS, strict=True):
                    assert c["source"] == sent["source"]
                    assert c["sha256"] == hashlib.sha256(sent["source"].encode("utf-8")).hexdigest()
                assert cells[1]["execution_count"] == 3 and cells[2]["execution_count"] is None
                assert cells[1]["outputs"].startswith("'café'yyy") and "[cut: 5,006 characters in all]" in \
                    cells[1]["outputs"] and len(cells[1]["outputs"]) < MAX_OUTPUT + 60
                assert cells[0]["outputs"] is None and cells[2]["outputs"] is None
                assert owner.reads[-1] == ("notebook_cells", {"start": None, "end": None, "source": "live",
                                                              "path": "/srv/work/nb.ipynb"})
                last = json.loads(text_of(await session.call_tool("notebook_cells", {"source": "live", "start": -1})))
                assert [c["id"] for c in last["cells"]] == ["c3"] and last["cells_in_notebook"] == 3

                page.cells = [{"id": "x", "cell_type": "code", "source": 42}]
                bad = await session.call_tool("notebook_cells", {"source": "live"})
                assert bad.is_error and text_of(bad).endswith("the page sent a cell source that is not text")
        finally:
            await server.aclose()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_server_without_a_channel_says_so_in_one_line():
    async def main() -> None:
        server = await KernelServer(namespace={}).start()
        try:
            grant = server.grant(Owner())
            async with client(server.url, grant.token) as session:
                got = await session.call_tool("notebook_cells", {"source": "live"})
                assert got.is_error and "\n" not in text_of(got).strip()
                assert 'source="live" needs escouade_nb loaded in a kernel' in text_of(got)
                history = await session.call_tool("notebook_cells", {})
                assert not history.is_error
        finally:
            await server.aclose()

    asyncio.run(asyncio.wait_for(main(), 60))
