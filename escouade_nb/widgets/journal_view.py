"""The rule plugins' journal as a view: a plugin menu, a kind menu (``Decision`` by
default) and a text filter over the plain-text lines; new entries appear as they are
written. One widget model (:class:`~.front.FrontView`, drawn by ``widgets/escouade.js``):
the browser sends the filter, Python filters and sends the rows (text only, set with
``textContent``); a new entry that matches is appended, never the whole list again. Its
``repr`` is the same lines as plain text."""

from __future__ import annotations

from datetime import datetime
from types import EllipsisType
from typing import Any

from ..permissions.commands import journal_repr, journal_text
from ..permissions.journal import Entry, Journal
from .front import HIDE_ORPHAN, FrontView, static_page
from .render import esc

KINDS = ["Decision", "Answer", "Start", "Crash", "Error", "Output", "Stop"]
ALL = "All"
MAX_SHOWN = 500
"""The browser shows at most the newest this many entries (the count says how many match)."""


class JournalView(FrontView):
    """``JournalView(journal, plugin=None, kind="Decision", text="", since=None, names=None)``:
    ``plugin`` an id (None: all plugins); ``since`` hides older entries; ``names`` maps
    plugin ids to the names shown in the menu. :meth:`set_filter` is what the menus and the
    text box do; ``close()`` stops listening to the journal."""

    def __init__(self, journal: Journal, plugin: str | None = None, kind: str | None = "Decision",
                 text: str = "", since: datetime | None = None, names: dict[str, str] | None = None) -> None:
        super().__init__(kind="journal")
        self.journal = journal
        self.since = since
        self.names = dict(names or {})
        self.plugin = plugin or None
        self.kind_shown = kind or None
        self.text_filter = text
        self._plugins = sorted(set(journal.plugins()) | ({plugin} if plugin else set()))
        self._count = len(self.entries())
        self.actions["filter"] = self._act_filter
        self.hold(journal.subscribe(self._on_entry))

    # -- the filter ---------------------------------------------------------------------------------
    @property
    def kind_filter(self) -> str | None:
        return self.kind_shown

    def set_filter(self, *, plugin: str | None | EllipsisType = ..., kind: str | None | EllipsisType = ...,
                   text: str | EllipsisType = ...) -> None:
        """Change what is shown (``plugin`` None or ``""``: all plugins; ``kind`` None or
        ``"All"``: every kind) and send the rows anew."""
        if plugin is not ...:
            self.plugin = plugin or None
        if kind is not ...:
            self.kind_shown = None if kind in (None, "", ALL) else kind
        if text is not ...:
            self.text_filter = text or ""
        self._count = len(self.entries())
        self.push([["jr", self.state()]], 0, True)
        self.update_companion_soon()

    def _act_filter(self, msg: dict) -> None:
        plugin = msg.get("plugin")
        kind = msg.get("kind")
        self.set_filter(plugin=str(plugin) if plugin else None, kind=str(kind) if kind else None,
                        text=str(msg.get("text") or ""))

    def entries(self) -> list[Entry]:
        return self.journal.entries(self.plugin, self.kind_shown, self.text_filter.strip() or None, self.since)

    def _matches(self, e: Entry) -> bool:
        if self.plugin and e.plugin != self.plugin:
            return False
        if self.kind_shown and e.kind != self.kind_shown:
            return False
        if self.since is not None and e.time < self.since:
            return False
        needle = self.text_filter.strip().casefold()
        return not needle or needle in e.text().casefold()

    def _row(self, e: Entry) -> dict[str, Any]:
        return {"clock": e.clock(), "plugin": self.names.get(e.plugin, e.plugin), "kind": e.kind, "body": e.body(),
                "verdict": e.verdict or ""}

    def _on_entry(self, entry: Entry) -> None:
        if self.closed:
            return
        if entry.plugin not in self._plugins:
            self._plugins = sorted({*self._plugins, entry.plugin})
            self.push([["jp", self._menu()]], 0, True)
        if self._matches(entry):
            self._count += 1
            self.push([["je", self._row(entry), self._count]], 64, True)
            self.update_companion_soon()

    # -- what the browser gets ------------------------------------------------------------------------
    def _menu(self) -> list[list[str]]:
        return [[self.names.get(p, p), p] for p in self._plugins]

    def state(self) -> dict[str, Any]:
        shown = self.entries()
        return {"plugins": self._menu(), "kinds": [ALL, *KINDS], "plugin": self.plugin or "",
                "kind": self.kind_shown or ALL, "text": self.text_filter, "all_plugins": not self.plugin,
                "rows": [self._row(e) for e in shown[-MAX_SHOWN:]], "count": len(shown), "max": MAX_SHOWN}

    def companion_bundle(self, final: bool = False) -> dict[str, str]:
        """The journal's saved form: the entries shown as last drawn (the filter's, the
        newest :data:`MAX_SHOWN`; redrawn :data:`~.front.COMPANION_WAIT` after a new entry
        or a filter change), as HTML text rows and as ``text/plain`` (the ``repr``)."""
        shown = self.entries()
        rows = "".join(f'<div class="esc-journal-row"><span class="esc-dim">{esc(r["clock"])}  </span>'
                       + (f'<span class="esc-dim">{esc(r["plugin"])}  </span>' if not self.plugin else "")
                       + f'<b>{esc(r["kind"])}  </b><span>{esc(r["body"])}</span></div>'
                       for r in (self._row(e) for e in shown[-MAX_SHOWN:]))
        more = f" (the last {MAX_SHOWN} shown)" if len(shown) > MAX_SHOWN else ""
        who = self.names.get(self.plugin, self.plugin) if self.plugin else "all plugins"
        what = f"{self.kind_shown} entries" if self.kind_shown else "all entries"
        head = (f'<div class="esc-head"><div class="esc-head-main"><b>Journal</b> of {esc(who)} · {esc(what)}'
                + (f" matching “{esc(self.text_filter.strip())}”" if self.text_filter.strip() else "")
                + f' · {len(shown)} entries{esc(more)}</div><div class="esc-dim esc-small">As last drawn (live while '
                f'its kernel runs: <code>%escouade journal</code>).</div></div>')
        html = static_page(f'<div class="esc-view esc-saved esc-saved-journal">{head}<div class="esc-journal-rows">'
                           f'{rows}</div></div>') + HIDE_ORPHAN
        return {"text/plain": repr(self), "text/html": html}

    def text(self) -> str:
        return journal_text(self.entries(), self.plugin, self.names)

    def __repr__(self) -> str:
        return journal_repr(self.entries(), self.plugin, self.kind_shown, self.names, self.text_filter.strip())
