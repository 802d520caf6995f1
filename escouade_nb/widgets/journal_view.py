"""The rule plugins' journal as a widget: a plugin menu, a kind menu (``Decision`` by
default) and a text filter over the plain-text lines; new entries appear as they are
written (redrawn at most ``RENDERS_PER_SECOND`` times a second). Its ``repr`` is the
same lines as plain text."""

from __future__ import annotations

from datetime import datetime

import ipywidgets as w

from ..permissions.commands import journal_repr, journal_text
from ..permissions.journal import Entry, Journal
from .render import esc
from .views import FullText, Releasing, Throttle, on_loop

KINDS = ["Decision", "Start", "Crash", "Error", "Output", "Stop"]
ALL = "All"
MAX_SHOWN = 500
_COLOURS = {"allowed": "var(--jp-success-color0, #1b5e20)", "refused": "var(--jp-error-color0, #b71c1c)",
            "did not decide": "var(--jp-warn-color0, #e65100)"}
_DIM = "var(--jp-ui-font-color1, rgba(0,0,0,.87));opacity:.8"  # theme colours only (light, dark)


class JournalView(FullText, Releasing, w.VBox):
    """``JournalView(journal, plugin=None, kind="Decision", text="", since=None, names=None)``:
    ``plugin`` an id (None: all plugins); ``since`` hides older entries; ``names`` maps
    plugin ids to the names shown in the menu. ``close()`` stops listening to the journal
    and closes the menus and the filter."""

    def __init__(self, journal: Journal, plugin: str | None = None, kind: str | None = "Decision",
                 text: str = "", since: datetime | None = None, names: dict[str, str] | None = None) -> None:
        super().__init__(layout=w.Layout(border="1px solid var(--jp-border-color2, #e0e0e0)", padding="6px",
                                         margin="4px 0"))
        self.add_class("escouade-journal")
        self.journal = journal
        self.since = since
        self.names = dict(names or {})
        plugins = sorted(set(journal.plugins()) | ({plugin} if plugin else set()))
        self.plugin_menu = w.Dropdown(options=[("All plugins", "")] + [(self.names.get(p, p), p) for p in plugins],
                                      value=plugin or "", description="Plugin", layout=w.Layout(width="auto"))
        self.kind_menu = w.Dropdown(options=[ALL, *KINDS], value=kind or ALL, description="Show",
                                    layout=w.Layout(width="auto"))
        self.filter = w.Text(value=text, placeholder="filter (e.g. Bash, refused, rm -rf)", description="Filter",
                             continuous_update=True)
        self.body = w.HTML()
        self.count = w.HTML()
        self._throttle = Throttle()
        for control in (self.plugin_menu, self.kind_menu, self.filter):
            control.observe(on_loop(lambda _change: self._throttle.request(self.redraw)), names="value")
        self.hold(journal.subscribe(self._on_entry))
        self.redraws_on(self._throttle, self.redraw)
        self.children = [w.HBox([self.plugin_menu, self.kind_menu, self.filter]), self.body, self.count]
        self.redraw()

    @property
    def plugin(self) -> str | None:
        return self.plugin_menu.value or None

    @property
    def kind(self) -> str | None:
        return None if self.kind_menu.value == ALL else self.kind_menu.value

    def entries(self) -> list[Entry]:
        return self.journal.entries(self.plugin, self.kind, self.filter.value.strip() or None, self.since)

    def _on_entry(self, entry: Entry) -> None:
        if self.closed:
            return
        if entry.plugin not in [v for _, v in self.plugin_menu.options]:
            self.plugin_menu.options = [*self.plugin_menu.options, (self.names.get(entry.plugin, entry.plugin),
                                                                    entry.plugin)]
        self._throttle.request(self.redraw)

    def redraw(self) -> None:
        if self.closed:
            return
        entries = self.entries()
        shown = entries[-MAX_SHOWN:]
        rows = []
        for e in shown:
            colour = _COLOURS.get(e.verdict or "", "var(--jp-ui-font-color1, rgba(0,0,0,.87))")
            who = "" if self.plugin else f"<span style='color:{_DIM}'>{esc(self.names.get(e.plugin, e.plugin))}</span>  "
            rows.append(f"<div style='white-space:pre-wrap;font-family:monospace'>"
                        f"<span style='color:{_DIM}'>{esc(e.clock())}</span>  {who}<b>{esc(e.kind)}</b>  "
                        f"<span style='color:{colour}'>{esc(e.body())}</span></div>")
        self.body.value = "".join(rows) or f"<i style='color:{_DIM}'>No entries.</i>"
        more = f" (the last {MAX_SHOWN} shown)" if len(entries) > MAX_SHOWN else ""
        self.count.value = f"<small style='color:{_DIM}'>{len(entries)} entries{more}</small>"

    def text(self) -> str:
        return journal_text(self.entries(), self.plugin, self.names)

    def __repr__(self) -> str:
        return journal_repr(self.entries(), self.plugin, self.kind, self.names, self.filter.value.strip())
