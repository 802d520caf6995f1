"""The HTML of the plain outputs that are tables, not views: the squad's listing
(``%escouade``, :class:`~..engine.squad.Listing`), the rule plugins' listing
(``%escouade plugins``, :class:`~..permissions.broker.PluginsListing`) and a comparison's
rows (:mod:`..engine.compare`). The engine and the permissions keep the data (rows and
fields) and their ``text/plain``; the HTML is built here.

An engine object still shows as HTML when a notebook evaluates it: :func:`register` gives
IPython's ``text/html`` formatter a printer for each type *by name* (the engine is not
imported for it), and ``%load_ext escouade_nb`` calls it. The colours are the views'
(``widgets/escouade.css``'s palette, from JupyterLab's theme variables with fallbacks for
nbconvert, see :func:`~.front.palette_css`): each listing carries its few rules inline, so
a saved notebook shows them without the front-end.
"""

from __future__ import annotations

from html import escape as e
from typing import TYPE_CHECKING, Any

from ..core.written import UNTRUSTED
from ..engine import COLUMNS, READING, SHORT, TIMES, Comparison, comparison_rows, protections
from .front import palette_css

if TYPE_CHECKING:
    from ..core.written import Written
    from ..engine import Listing, Turn
    from ..permissions.broker import PluginsListing


def _listing(body: str) -> str:
    """``body`` in a root its colour rules (inlined with it) scope to; the text keeps the
    notebook's own font."""
    css = palette_css(".esc-listing") + "".join(f".esc-listing .esc-{tone}{{color:var(--esc-{tone})}}"
                                                 for tone in ("bad", "ok", "dim"))
    return f"<div class='esc-listing'><style>{css}</style>{body}</div>"


def _errors(errors: list[str]) -> str:
    items = "".join(f"<li class='esc-bad'>{e(x)}</li>" for x in errors)
    return f"<ul>{items}</ul>" if items else ""


def squad_html(listing: Listing) -> str:
    """``%escouade``'s table: the harnesses found (id, name, program, version, tested),
    the broken manifests, the running agents (name, harness, status, folder, the
    protections in force: sandboxed, private, reviewed, each with its meaning as a title)."""
    rows = "".join(
        f"<tr><td><b>{e(r.ref.short_id)}</b></td><td>{e(r.ref.harness.display_name)}</td>"
        f"<td>{e(r.program or 'not found on PATH')}</td>"
        f"<td>{'<i>reading…</i>' if r.status == READING else e(r.version or '')}</td>"
        f"<td>{'' if r.status == READING else e(r.status)}</td></tr>" for r in listing.rows)
    agents = "".join(f"<tr><td><b>{e(a.name)}</b></td><td>{e(a.harness.short_id)}</td><td>{e(a.status)}</td>"
                     f"<td>{e(str(a.cwd))}</td><td>"
                     + ", ".join(f"<span title='{e(meaning)}'>{e(word)}</span>" for word, meaning in protections(a))
                     + "</td></tr>" for a in listing.agents)
    return _listing(
        f"<b>Harnesses</b><table><tr><th>id</th><th>name</th><th>program</th><th>version</th>"
        f"<th>tested</th></tr>{rows}</table>{_errors(listing.errors)}"
        f"<b>Agents</b>" + (f"<table><tr><th>name</th><th>harness</th><th>status</th><th>folder</th>"
                            f"<th>protections</th></tr>"
                            f"{agents}</table>" if agents else " none running"))


def plugins_html(listing: PluginsListing) -> str:
    """``%escouade plugins``' table: what ``plugins on|off`` did (its note), then each rule
    plugin (plugin, name, whether it decides here and why, its permission, its process),
    the errors and the settings file."""
    p = listing.project
    taken_back = "<span class='esc-bad'>taken back</span>"
    rows = "".join(
        f"<tr><td><b>{e(r.short)}</b></td><td>{e(r.name)}</td>"
        f"<td class='{'esc-ok' if r.on else 'esc-dim'}'><b>{'on' if r.on else 'off'}</b> ({e(r.why)})</td>"
        f"<td>{'granted' if r.granted else taken_back}</td>"
        f"<td>{e(r.process)}</td></tr>" for r in listing.rows)
    note = "".join(f"<div>{e(line)}</div>" for line in (listing.note or "").splitlines())
    return _listing(
        f"{note}<b>Rule plugins</b> for project <b>{e(p.name)}</b> <code>{e(str(p.folder))}</code>"
        f"{' <i>(private)</i>' if p.private else ''}"
        f"<table><tr><th>plugin</th><th>name</th><th>decides here</th><th>permission</th><th>process</th></tr>"
        f"{rows}</table>{_errors(listing.errors)}"
        f"<small>Settings: <code>{e(str(listing.settings))}</code></small>")


_NOWRAP = " class='esc-nowrap'"


def comparison_html(source: list[Turn] | Comparison | list[dict[str, str]], *, durations: bool = True) -> str:
    """The rows of ``source`` (turns, a :class:`~..engine.compare.Comparison`, or rows) as
    an escaped HTML table (class ``escouade-comparison``; without the times when
    ``durations`` is false)."""
    rows = comparison_rows(source, durations)
    cols = [c for c in COLUMNS if durations or c not in TIMES]
    head = "".join(f"<th style='text-align:left;padding:0 8px'>{e(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td style='padding:0 8px'{_NOWRAP if c in SHORT else ''}>{e(r[c])}</td>"
                                    for c in cols) + "</tr>" for r in rows)
    return f"<table class='escouade-comparison'><tr>{head}</tr>{body}</table>"


def _code(text: str | None) -> str:
    return f"<code>{e(text)}</code>" if text else ""


def written_html(written: Written) -> str:
    """``%escouade written``'s table (``escouade_nb.written()``): where it was read, then
    per agent the cells kept with their provenance (cell position and id, harness, session,
    turn, time, the source's first line, the code run in it if any); the error in one line
    when nothing could be read."""
    if written.error is not None:
        return _listing(f"<span class='esc-bad'>{e(written.error)}</span>")
    if not written.rows:
        return _listing(f"<code>{e(written.where)}</code>: <span class='esc-dim'>no cell kept from an agent "
                        f"(no cell has escouade provenance)</span>")
    parts = [f"<b>What each agent wrote</b> in <code>{e(written.where)}</code>"]
    if written.trusted is False:  # someone else's file: its provenance is only a claim
        parts.insert(0, f"<div class='esc-bad escouade-written-untrusted'>"
                        f"{e(UNTRUSTED.format(where=written.where))}</div>")
    for agent in written.agents:
        rows = "".join(
            f"<tr data-cell='{e(r['cell'] or '')}'><td>{r['index']}</td><td><code>{e(r['cell'] or '')}</code></td>"
            f"<td>{e(r['harness'] or '')}</td><td><code>{e(r['session'] or '')}</code></td>"
            f"<td>{'' if r['turn'] is None else r['turn']}</td><td{_NOWRAP}>{e(r['at'] or '')}</td>"
            f"<td><code>{e(r['first line'])}</code>"
            f"{' <i>(then changed by the user)</i>' if r.get('changed_by_user') else ''}</td>"
            f"<td>{_code(r['ran'])}</td></tr>"
            for r in written.rows if r["agent"] == agent)
        parts.append(f"<div class='escouade-written-agent' data-agent='{e(agent)}'><b>{e(agent)}</b>"
                     f"<table class='escouade-written'><tr><th>#</th><th>cell</th><th>harness</th><th>session</th>"
                     f"<th>turn</th><th>at</th><th>first line</th><th>ran</th></tr>{rows}</table></div>")
    left = "<style>.esc-listing .escouade-written th,.esc-listing .escouade-written td{text-align:left}</style>"
    return _listing(left + "".join(parts))


PRINTERS: dict[tuple[str, str], Any] = {
    ("escouade_nb.core.written", "Written"): written_html,
    ("escouade_nb.engine.squad", "Listing"): squad_html,
    ("escouade_nb.permissions.broker", "PluginsListing"): plugins_html,
}
"""(module, class name) -> its ``text/html`` printer."""


def register(ipython: Any) -> None:
    """Give ``ipython``'s ``text/html`` formatter the printers of :data:`PRINTERS`, by type
    name (IPython imports nothing for it; a type is matched when an object of it is
    displayed). Idempotent."""
    formatter = ipython.display_formatter.formatters["text/html"]
    for (module, name), printer in PRINTERS.items():
        formatter.for_type_by_name(module, name, printer)
