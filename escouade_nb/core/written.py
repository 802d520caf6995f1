"""What each agent wrote in a notebook: the cells an agent changed and the user kept, read
from their provenance (a kept cell's metadata ``"escouade": {"agent", "harness",
"session", "turn", "at"}``, written by the page on Keep; and the code an agent ran in it,
``ran``: ``{agent, harness, session, turn, at, code, execution_count}``, when there is
one; a cell an agent only ran, ``escouade`` holding ``ran`` alone, was not written by it
and is not listed). Pure: the caller reads the file (in a thread) or asks the
page; untrusted values are kept to known fields of known types, cut.

:func:`written_rows` gives the rows, :class:`Written` holds them with where they were
read (its ``text/html`` is ``widgets/tables.py``'s, registered by type name).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PROVENANCE", "UNTRUSTED", "COLUMNS", "Written", "written_rows", "provenance_of"]

PROVENANCE = "escouade"
"""The metadata key of a kept cell's provenance."""
UNTRUSTED = ("{where}: this notebook is not trusted here (Jupyter does not know its signature: it was not saved "
             "by you in this Jupyter), so what follows is only what the file claims, not a record")
"""The line :class:`Written` shows first for a saved file Jupyter does not trust."""
COLUMNS = ("agent", "harness", "session", "turn", "at", "cell", "first line", "ran")
"""The columns of :class:`Written`'s table, in order."""
FIELD_MAX = 200
"""Characters kept of each text field (the first line: :data:`LINE_MAX`)."""
LINE_MAX = 120
RAN_MAX = 2000
"""Characters kept of the code an agent ran in the cell."""


def _text(value: Any, limit: int = FIELD_MAX) -> str | None:
    if isinstance(value, str):
        return value[:limit]
    return None


def _source(value: Any) -> str:
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) else ""


def _ran(by: Mapping[str, Any]) -> str | None:
    """The code an agent ran in the cell, when the provenance says one: ``ran`` as text
    or as ``{"code": …}`` (or ``code``)."""
    ran = by.get("ran", by.get("code"))
    if isinstance(ran, Mapping):
        ran = ran.get("code", ran.get("source"))
    return _text(_source(ran), RAN_MAX) or None


def provenance_of(cell: Mapping[str, Any]) -> dict[str, Any] | None:
    """A cell's provenance (nbformat's ``metadata.escouade``, or ``escouade`` beside the
    cell as the page sends it), its known fields of known types: ``{"agent", "harness",
    "session", "turn", "at", "ran", "changed_by_user"}`` (``None`` for a field absent or of
    another type; ``changed_by_user``: a bool, the user changed the cell after the agent);
    ``None`` when the cell has none or names no agent."""
    meta = cell.get("metadata")
    by = meta.get(PROVENANCE) if isinstance(meta, Mapping) else None
    if not isinstance(by, Mapping):
        by = cell.get(PROVENANCE)
    if not isinstance(by, Mapping) or not _text(by.get("agent")):
        return None
    turn = by.get("turn")
    return {"agent": _text(by.get("agent")), "harness": _text(by.get("harness")),
            "session": _text(by.get("session")),
            "turn": turn if isinstance(turn, int) and not isinstance(turn, bool) else None,
            "at": _text(by.get("at"), 40), "ran": _ran(by), "changed_by_user": by.get("changed_by_user") is True}


def written_rows(cells: Iterable[Any]) -> list[dict[str, Any]]:
    """The rows of the cells that carry an agent's provenance, grouped by agent (agents in
    the order of their first cell, cells in notebook order): ``{"agent", "harness",
    "session", "turn", "at", "cell" (its id, or None), "index" (1-based position),
    "first line" (of its source, cut), "ran" (code, or None), "changed_by_user" (bool: the
    user changed the cell after the agent, so not all its lines are the agent's)}``. A cell still pending
    review is left out (not kept yet), as is anything that is not a cell object."""
    found: dict[str, list[dict[str, Any]]] = {}
    for index, cell in enumerate(cells, start=1):
        if not isinstance(cell, Mapping):
            continue
        by = provenance_of(cell)
        meta = cell.get("metadata")
        pending = cell.get("pending") or (meta.get("escouade_pending") if isinstance(meta, Mapping) else None)
        if by is None or pending:
            continue
        lines = _source(cell.get("source")).strip().splitlines()
        first = lines[0][:LINE_MAX] if lines else ""
        found.setdefault(by["agent"], []).append(
            {**{k: by[k] for k in ("agent", "harness", "session", "turn", "at")}, "cell": _text(cell.get("id")),
             "index": index, "first line": first, "ran": by["ran"], "changed_by_user": by["changed_by_user"]})
    return [row for rows in found.values() for row in rows]


@dataclass
class Written:
    """What each agent wrote in one notebook: ``where`` (the file read, or the page),
    ``rows`` (:func:`written_rows`), ``error`` (one line: why nothing could be read, else
    ``None``). Its ``text/plain`` is a table by agent; its HTML is
    ``widgets.tables.written_html`` (registered by name)."""

    where: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    trusted: bool | None = None
    """Whether Jupyter trusts the saved file read (its signature known to this Jupyter's
    notary: the user saved it here); ``False``: written by someone else, its provenance is
    only what that file claims; ``None``: not checked (the open page's cells)."""

    @property
    def agents(self) -> list[str]:
        """The agents that wrote kept cells, in the order of their first one."""
        return list(dict.fromkeys(r["agent"] for r in self.rows))

    def __repr__(self) -> str:
        if self.error is not None:
            return f"escouade written: {self.error}"
        if self.trusted is False:
            return UNTRUSTED.format(where=self.where) + "\n" + self._rows_text()
        return self._rows_text()

    def _rows_text(self) -> str:
        if not self.rows:
            return f"{self.where}: no cell kept from an agent (no cell has escouade provenance)"
        lines = [f"{self.where}: {len(self.rows)} cell(s) kept from {len(self.agents)} agent(s)"]
        for agent in self.agents:
            lines.append(f"{agent}:")
            for r in (r for r in self.rows if r["agent"] == agent):
                lines.append(f"  cell {r['index']} ({r['cell'] or 'no id'}) · {r['harness'] or '?'} · session "
                             f"{r['session'] or '?'} · turn {r['turn'] if r['turn'] is not None else '?'} · "
                             f"{r['at'] or '?'}: {r['first line']}" + (" · ran code" if r["ran"] else "")
                             + (" · then changed by the user" if r["changed_by_user"] else ""))
        return "\n".join(lines)
