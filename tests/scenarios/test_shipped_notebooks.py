"""The shipped notebooks as a newcomer meets them (issue 26, item 11): on GitHub, in
nbconvert, in the demo's JupyterLab. Fast, no kernel: they read the committed files.

- Their saved outputs hold no absolute path of the machine that ran them and no transient
  state ("turn queued", "version: reading…"): ``scripts/run-notebooks.py`` writes them so;
  this scan fails naming the notebook, the cell and the word.
- The demo's environment (``scripts/demo.sh``: the project and its ``lab`` extra) has every
  module the notebooks import.
- The README lists every shipped notebook; docs/fake-agent.md the fake agent's words.
- The script itself, on a small notebook (one kernel).
"""

from __future__ import annotations

import ast
import html
import importlib.metadata
import json
import os
import re
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
WIDGET = "application/vnd.jupyter.widget-view+json"

# Transient words a committed notebook may keep, as (notebook, cell id, word): none. An entry
# that no longer occurs fails, so the list stays exact.
KNOWN: list[tuple[str, str, str]] = []

TRANSIENT = re.compile(r"\bqueued\b|reading…|starting…|working…|waiting for you|Error displaying widget", re.I)


def machine_paths() -> re.Pattern:
    """Absolute paths that say which machine ran a notebook."""
    here = {os.path.expanduser("~"), sys.prefix, str(ROOT), tempfile.gettempdir()} - {"", "/"}
    return re.compile("|".join(
        [r"(?<![\w.~>-])/(?:tmp|home|root|work|Users|private|var/folders|mnt|srv)(?![\w.-])",
         r"[\w.-]*venv[\w.-]*/(?:bin|lib)/", r"site-packages",
         *(re.escape(p) + r"(?![\w.-])" for p in sorted(here, key=len, reverse=True))]))


def visible_text(value: str, mime: str) -> str:
    """What a reader sees of an output's value: for HTML, its text (no styles, no tags)."""
    if mime != "text/html":
        return value
    value = re.sub(r"(?is)<(style|script)\b.*?</\1\s*>", " ", value)
    return html.unescape(re.sub(r"(?s)<[^>]*>", " ", value))


def findings(path: Path) -> list[tuple[str, str, str, str]]:
    """(notebook, cell id, what was found, an excerpt) for each path or transient word
    in ``path``'s saved outputs."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    paths = machine_paths()
    found = []
    for index, cell in enumerate(nb["cells"]):
        cell_id = cell.get("id") or f"#{index}"
        for out in cell.get("outputs", []):
            values = []
            if "text" in out:
                values.append(("text/plain", "".join(out["text"])))
            for mime, value in (out.get("data") or {}).items():
                if mime != WIDGET and (isinstance(value, (str, list))):
                    values.append((mime, value if isinstance(value, str) else "".join(value)))
            for mime, value in values:
                text = visible_text(value, mime)
                for match in [*paths.finditer(text), *TRANSIENT.finditer(text)]:
                    excerpt = text[max(0, match.start() - 40):match.end() + 40].replace("\n", "⏎")
                    found.append((path.name, cell_id, match.group(0), excerpt))
    return found


def test_the_scan_names_the_notebook_the_cell_and_the_word(tmp_path):
    """The scan itself: a path or a transient word a reader would see is found; the same
    words in a stylesheet or a class name are not."""
    cells = [
        {"cell_type": "code", "id": "a", "metadata": {}, "source": "", "execution_count": 1, "outputs": [
            {"output_type": "stream", "name": "stdout", "text": ["new file /tmp/escouade-x-1/notes.txt\n"]}]},
        {"cell_type": "code", "id": "b", "metadata": {}, "source": "", "execution_count": 2, "outputs": [
            {"output_type": "display_data", "metadata": {}, "data": {
                "text/html": '<style>.esc-queued::after{content:"waiting for you"}</style>'
                             '<div class="esc-queued">fake · version: reading&hellip;</div>',
                "text/plain": f"{sys.prefix}/bin/escouade-fake-agent", WIDGET: {"model_id": "queued"}}}]},
        {"cell_type": "code", "id": "c", "metadata": {}, "source": "", "execution_count": 3, "outputs": [
            {"output_type": "display_data", "metadata": {}, "data": {
                "text/html": "<div>&lt;workspace&gt;/notes.txt · &lt;venv&gt;/bin/escouade-fake-agent 0.1.0</div>",
                "text/plain": "fake: turn end_turn"}}]},
    ]
    nb = tmp_path / "x.ipynb"
    nb.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    got = {(cell, word) for _, cell, word, _ in findings(nb)}
    assert ("a", "/tmp") in got
    assert ("b", "reading…") in got
    assert any(cell == "b" and word.startswith("/") and word != "/tmp" or cell == "b" and sys.prefix.startswith(word)
               for cell, word in got), got
    assert not any(word in ("queued", "waiting for you") for _, word in got), got
    assert not any(cell == "c" for cell, _ in got), got


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_a_committed_notebook_holds_no_machine_path_or_transient_state(path):
    found = findings(path)
    known = {(n, c, w) for n, c, w in KNOWN if n == path.name}
    left = [f for f in found if f[:3] not in known]
    assert not left, "\n".join(f"{n}, cell {c}: {w!r} in …{e}…" for n, c, w, e in left) + (
        "\n(python scripts/run-notebooks.py writes the notebooks' outputs neutral and finished)")
    gone = known - {f[:3] for f in found}
    assert not gone, f"no longer found, remove from KNOWN: {sorted(gone)}"


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def test_the_demo_environment_has_every_module_the_notebooks_import():
    """scripts/demo.sh installs the project with its ``lab`` extra: every module a shipped
    notebook imports is the standard library's, ours, or from one of those requirements."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert '-e ".[lab]"' in (ROOT / "scripts" / "demo.sh").read_text()
    allowed = _requirement_names(project["dependencies"] + project["optional-dependencies"]["lab"])
    installed = importlib.metadata.packages_distributions()
    missing = []
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            for line in "".join(cell["source"]).splitlines():
                match = re.match(r"\s*(?:from\s+([\w.]+)\s+import\b|import\s+([\w., ]+?)(?:\s+as\s+\w+)?\s*(?:#|$))",
                                 line)
                if not match:
                    continue
                for module in (match.group(1) or match.group(2)).split(","):
                    top = module.strip().split(".")[0]
                    if top in sys.stdlib_module_names or top == "escouade_nb":
                        continue
                    dists = {d.lower().replace("_", "-") for d in installed.get(top, [])}
                    if not dists & allowed:
                        missing.append(f"{path.name}: {top} (from {sorted(dists) or 'nothing installed'})")
    assert not missing, "not installed by the demo (pyproject's lab extra): " + "; ".join(missing)


def test_the_readme_lists_every_shipped_notebook_and_the_fake_agents_words():
    """A line per notebook (a link to it), and every scenario of the fake agent's
    docstring table (its words: kernel tools, terminals, files…) in "The fake agent's words"."""
    readme = (ROOT / "README.md").read_text()
    absent = [p.stem for p in NOTEBOOKS
              if not re.search(rf"^- \[`{re.escape(p.stem)}`\]\(notebooks/{re.escape(p.name)}\) — \S", readme, re.M)]
    assert not absent, f"README.md has no line for: {absent}"
    doc = ast.get_docstring(ast.parse((ROOT / "escouade_nb" / "tools" / "fake_agent.py").read_text()))
    section = (ROOT / "docs" / "fake-agent.md").read_text()  # the fake's words moved out of the README (issue 22)
    spans = re.findall(r"`([^`]+)`", section)
    words = [re.match(r"[a-z][a-z ]*[a-z]|[a-z]", row).group(0)  # its leading words, before N, CMD, VAR…
             for row in re.findall(r"^``(.+?)``", re.split(r"^=+ +=+$", doc, flags=re.M)[1], re.M)]
    assert len(words) > 20, words
    missing = [w for w in words if not any(all(part in span for part in w.split()) for span in spans)]
    assert not missing, f"the fake's words not in docs/fake-agent.md, \"The fake agent's words\": {missing}"


@pytest.mark.kernel
def test_the_notebook_script_saves_finished_forms_without_machine_paths(tmp_path):
    """scripts/run-notebooks.py on a small notebook (one real kernel): a display replaced
    after its cell ended is saved in its last form and its cell tagged for nbval; a scratch
    folder and the notebook's own folder become placeholders; no execution timestamps."""
    import importlib.util

    import nbformat

    spec = importlib.util.spec_from_file_location("run_notebooks", ROOT / "scripts" / "run-notebooks.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    late = ('import asyncio\nfrom IPython.display import display\n'
            'h = display({"text/plain": "turn queued"}, raw=True, display_id=True)\n'
            'timer = asyncio.get_running_loop().call_later(\n'
            '    0.3, lambda: h.update({"text/plain": "turn done"}, raw=True))')
    # the update arrives while this next cell runs (as a turn's end does)
    paths = ('import os, tempfile\nawait asyncio.sleep(0.6)\n'
             'print(tempfile.mkdtemp(prefix="escouade-probe-"), os.getcwd())')
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(late, id="late"),
                                         nbformat.v4.new_code_cell(paths, id="paths")])
    path = tmp_path / "probe.ipynb"
    nbformat.write(nb, path)
    saved = nbformat.reads(script.run(path, timeout=60)[0], as_version=4)
    first, second = saved.cells
    assert [o.data["text/plain"] for o in first.outputs] == ["turn done"]
    assert first.metadata.get("tags") == ["nbval-ignore-output"]
    assert second.outputs[0].text == "<workspace> <notebook folder>\n"
    assert "tags" not in second.metadata and all("execution" not in c.metadata for c in saved.cells)
    written = tmp_path / "saved.ipynb"
    written.write_text(nbformat.writes(saved))
    assert findings(written) == []
