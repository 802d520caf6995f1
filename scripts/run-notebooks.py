#!/usr/bin/env python3
"""Execute the shipped notebooks and write their outputs back, deterministic and
machine-independent (issue 26, item 11).

    python scripts/run-notebooks.py                  # every notebooks/*.ipynb
    python scripts/run-notebooks.py notebooks/01-quickstart.ipynb …
    python scripts/run-notebooks.py --check          # run, write nothing, exit 1 if a notebook would change

Run it with the project's environment (``.venv/bin/python``, or any with ``.[test]``
installed): its ``bin`` goes first on ``PATH`` so the notebooks find ``escouade-fake-agent``.

Each notebook runs with nbclient in a temporary copy (the kernel's working folder), with
escouade_nb's config, transcripts, journal, accounts and MCP settings in a temporary
folder (nothing lands in ``~/.jupyter`` or in the checkout; the user's plugins and MCP
servers are not seen). What a newcomer sees on GitHub
must be the *finished* forms, so:

- the outputs a view replaces after its cell has ended (the saved form of a ``%%escouade``
  turn, a listing whose versions arrive later: ``update_display_data`` from an earlier cell,
  which nbclient drops) are applied where they belong;
- after the last cell the script waits until every agent's turns have ended and the views
  have sent their last forms, then stops the kernel;
- machine-specific text is made neutral: first the rules of ``notebooks/nbval-sanitize.cfg``
  (scratch folders become ``<workspace>``, clock times ``HH:MM:SS``…), then this environment's
  folder (``<venv>``), the checkout (``<repo>``), the user's home (``~``) — escaped in HTML;
- no execution timestamps, no widget state, the cells' ids kept, widget model ids derived
  from the notebook, the cell and the output (a saved model id points at no model anyway), no saved form's
  ``escouade_nb`` metadata (the view's id and the form's version, which only the kernel that made them reads).

A cell whose saved outputs differ from what it displayed first gets the tag
``nbval-ignore-output``: nbval compares a fresh run's *first* displays (it drops every
update), so it cannot compare a finished form. The other cells of the notebook are still
compared. ``tests/scenarios/test_shipped_notebooks.py`` fails on any absolute path or
transient word left in a committed notebook.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient.exceptions import CellExecutionError
from nbval.plugin import get_sanitize_patterns

from escouade_nb.tools.finished_forms import FinishedForms

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SANITIZE = NOTEBOOKS / "nbval-sanitize.cfg"
IGNORE_TAG = "nbval-ignore-output"  # nbval's cell tag for NBVAL_IGNORE_OUTPUT
WIDGET = "application/vnd.jupyter.widget-view+json"

# Run after the last cell (not saved): every agent's turns end, then the views' last forms
# (sent when a turn ends; a turn view closes CLOSE_AFTER later) reach us.
FINISH = """\
import sys as _esc_sys
if "escouade_nb" in _esc_sys.modules:  # a notebook that loaded it
    import asyncio as _esc_asyncio
    from escouade_nb import get_squad as _esc_get_squad
    from escouade_nb.widgets.agent_view import CLOSE_AFTER as _esc_close_after
    _esc_agents = list(_esc_get_squad().agents.values())
    _esc_tasks = [t for _a in _esc_agents for t in _a.turns.tasks]
    if _esc_tasks:
        await _esc_asyncio.wait(_esc_tasks, timeout=120)
    if _esc_agents:
        await _esc_asyncio.sleep(_esc_close_after + 0.5)
"""


def neutralizers(notebook_folder: str) -> list[tuple[re.Pattern, str]]:
    """(pattern, replacement template) pairs, applied in order: this run's and this
    machine's folders (the notebook's temporary folder, the environment, the checkout,
    the home; longest first), then the rules of nbval-sanitize.cfg (as nbval applies them)."""
    folders = {notebook_folder: "<notebook folder>", str(Path(sys.prefix)): "<venv>",
               str(Path(sys.executable).parent): "<venv>/bin", str(ROOT): "<repo>"}
    home = os.path.expanduser("~")
    if home not in ("/", ""):
        folders.setdefault(home, "~")
    rules = [(re.compile(re.escape(path) + r"(?![\w.-])"), name.replace("\\", "\\\\"))
             for path, name in sorted(folders.items(), key=lambda kv: -len(kv[0]))]
    return rules + [(re.compile(rx), rep) for rx, rep in get_sanitize_patterns(SANITIZE.read_text())]


def neutral(text: str, rules, in_html: bool) -> str:
    """``text`` with every rule applied (a placeholder escaped in HTML)."""
    for pattern, replacement in rules:
        text = pattern.sub(html.escape(replacement, quote=False) if in_html else replacement, text)
    return text


def clean(nb, rules, name: str, late: set[int]) -> None:
    """Make ``nb``'s outputs neutral and stable, in place."""
    nb.metadata.pop("widgets", None)
    for index, cell in enumerate(nb.cells):
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        tags = [t for t in cell.metadata.get("tags", []) if t != IGNORE_TAG]
        if index in late and "NBVAL_IGNORE_OUTPUT" not in cell.source:
            tags.append(IGNORE_TAG)
        if tags:
            cell.metadata["tags"] = tags
        else:
            cell.metadata.pop("tags", None)
        for number, out in enumerate(cell.outputs):
            if isinstance(out.get("metadata"), dict):
                out.metadata.pop("escouade_nb", None)  # a live view's id and its form's version: the run's own
            if out.output_type == "stream":
                out.text = neutral(out.text, rules, in_html=False)
            if "data" not in out:
                continue
            for mime, value in list(out.data.items()):
                if mime == WIDGET:
                    seed = f"{name}/{cell.get('id', index)}/{number}".encode()
                    value["model_id"] = hashlib.md5(seed).hexdigest()
                elif isinstance(value, str):
                    out.data[mime] = neutral(value, rules, in_html=mime == "text/html")


def run(path: Path, timeout: int) -> tuple[str, str]:
    """Execute ``path`` in a temporary copy; return (the text it would be saved as, the
    text it has now)."""
    before = path.read_text(encoding="utf-8")
    nb = nbformat.reads(before, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    with tempfile.TemporaryDirectory(prefix="escouade-nbrun-") as scratch:
        folder = Path(scratch) / "notebooks"
        folder.mkdir()
        shutil.copy(path, folder / path.name)
        settings = Path(scratch) / "settings"
        for sub in ("config", "transcripts", "journal", "accounts", "plugins"):
            (settings / sub).mkdir(parents=True)
        # none of the user's settings, plugins (the listing would show them) or MCP servers
        # (a missing mcp.json: none)
        env = {"ESCOUADE_NB_CONFIG_DIR": settings / "config", "ESCOUADE_NB_TRANSCRIPTS_DIR": settings / "transcripts",
               "ESCOUADE_NB_JOURNAL_DIR": settings / "journal", "ESCOUADE_NB_ACCOUNTS_DIR": settings / "accounts",
               "ESCOUADE_NB_PLUGINS_DIR": settings / "plugins", "ESCOUADE_NB_MCP_CONFIG": settings / "no-mcp.json",
               "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
               "PYTHONUNBUFFERED": "1"}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update({k: str(v) for k, v in env.items()})
        try:
            nb.cells.append(nbformat.v4.new_code_cell(FINISH, id="escouade-finish"))
            client = FinishedForms(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                                   store_widget_state=False, resources={"metadata": {"path": str(folder)}})
            client.execute()
            nb.cells.pop()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        clean(nb, neutralizers(str(folder)), path.name, client.late)
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n", before


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a notebook would change")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per cell (default 120)")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOKS.glob("*.ipynb"))
    changed = []
    failed = []
    for path in paths:
        try:
            after, before = run(path.resolve(), args.timeout)
        except CellExecutionError as exc:  # left as it was; the others still run
            failed.append(path)
            print(f"{path}: failed, not written — {str(exc).strip().splitlines()[-1]}", file=sys.stderr)
            continue
        if after != before:
            changed.append(path)
            if not args.check:
                path.write_text(after, encoding="utf-8")
        unwritten = " (not written)" if args.check and after != before else ""
        print(f"{path}: {'changed' if after != before else 'unchanged'}{unwritten}")
    return 1 if failed or (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
