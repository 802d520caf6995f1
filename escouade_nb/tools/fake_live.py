"""The fake agent's words for the kernel's live-notebook tools (server ``escouade``): it
reads the open notebook, inserts, edits, deletes and runs its cells through the same MCP
calls as :mod:`.fake_mcp` (a permission asked of the client first, as claude-agent does).

Each at the start of a line (case-insensitive):

``live cells``                      ``notebook_cells`` with ``source="live"`` (a line of its own)
``insert cell [after ID] SOURCE``   ``insert_cell`` of SOURCE (the rest of the prompt, fences
                                    stripped), after cell ID or at the end
``insert markdown cell [after ID] TEXT``  the same, ``cell_type="markdown"``
``edit cell ID SOURCE``             reads the live cells, then ``edit_cell`` of ID with the
                                    ``sha256`` it read as ``base_sha256``
``delete cell ID``                  reads the live cells, then ``delete_cell`` of ID likewise
``execute cell ID``                 ``execute_cell`` of ID (a card asks to run it)
"""

from __future__ import annotations

import json
import re
from typing import Any

from .fake_session import _Turn

_FLAGS = re.IGNORECASE | re.MULTILINE
LIVE_CELLS_RE = re.compile(r"^[ \t]*(?:read[ \t]+)?live[ \t]+cells[ \t]*[.!?]?[ \t]*$", _FLAGS)
INSERT_RE = re.compile(r"^[ \t]*insert[ \t]+(markdown[ \t]+|code[ \t]+)?cell(?:[ \t]+after[ \t]+(\S+))?[ \t:]*(.*)",
                       _FLAGS | re.DOTALL)
EDIT_RE = re.compile(r"^[ \t]*edit[ \t]+cell[ \t]+(\S+)[ \t:]*(.*)", _FLAGS | re.DOTALL)
DELETE_RE = re.compile(r"^[ \t]*delete[ \t]+cell[ \t]+(\S+)", _FLAGS)
EXECUTE_RE = re.compile(r"^[ \t]*execute[ \t]+cell[ \t]+(\S+)", _FLAGS)


class LiveCellWords:
    """Mixed into :class:`~.fake_mcp.McpTools`: ``_dispatch_live`` answers the words above
    (``None`` when none is there). Uses the host's ``_mcp_call``, ``_mcp_result`` and
    ``_strip_fence`` and its ``KERNEL_SERVER``."""

    KERNEL_SERVER: str

    async def _mcp_call(self, turn: _Turn, server: str, tool: str, arguments: dict[str, Any]) -> str:
        raise NotImplementedError

    async def _mcp_result(self, turn: _Turn, server: str, tool: str,
                          arguments: dict[str, Any]) -> tuple[str, bool] | str:
        raise NotImplementedError

    @staticmethod
    def _strip_fence(code: str) -> str:
        raise NotImplementedError

    async def _dispatch_live(self, turn: _Turn, text: str) -> str | None:
        server = self.KERNEL_SERVER
        m = INSERT_RE.search(text)
        if m:
            kind = "markdown" if (m.group(1) or "").strip().lower() == "markdown" else "code"
            return await self._mcp_call(turn, server, "insert_cell", {
                "source": self._strip_fence(m.group(3)), "cell_type": kind, "after_cell_id": m.group(2)})
        m = EDIT_RE.search(text)
        if m:
            return await self._change_read_cell(turn, "edit_cell", m.group(1),
                                                {"source": self._strip_fence(m.group(2))})
        m = DELETE_RE.search(text)
        if m:
            return await self._change_read_cell(turn, "delete_cell", m.group(1), {})
        m = EXECUTE_RE.search(text)
        if m:
            return await self._mcp_call(turn, server, "execute_cell", {"cell_id": m.group(1)})
        if LIVE_CELLS_RE.search(text):
            return await self._mcp_call(turn, server, "notebook_cells", {"source": "live"})
        return None

    async def _change_read_cell(self, turn: _Turn, tool: str, cell_id: str, fields: dict[str, Any]) -> str:
        """Read the live cells, then call ``tool`` on ``cell_id`` naming the hash read."""
        server = self.KERNEL_SERVER
        got = await self._mcp_result(turn, server, "notebook_cells", {"source": "live"})
        if isinstance(got, str):
            return got
        text, failed = got
        if failed:
            await turn.say(f"mcp__{server}__notebook_cells failed: {text}")
            return "end_turn"
        try:
            # the JSON leads the text; a notice, or the names of image blocks, may follow it
            cells = json.JSONDecoder().raw_decode(text.lstrip())[0].get("cells") or []
        except (ValueError, AttributeError):
            cells = []
        base = next((c.get("sha256") for c in cells if isinstance(c, dict) and c.get("id") == cell_id), None)
        if not isinstance(base, str):
            await turn.say(f"The open notebook has no cell {cell_id!r}; I changed nothing.")
            return "end_turn"
        return await self._mcp_call(turn, server, tool, {"cell_id": cell_id, **fields, "base_sha256": base})
