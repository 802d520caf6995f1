"""The page's longest main-thread stall while 3 agents stream 2,000 chunks each, their views
displayed, in a real JupyterLab driven by headless chromium — against the same measure, in the
same run, for another tree of the package (default: the views as they were before the
anywidget front-end, commit 8addebc, checked out in a temporary worktree).

    python benchmarks/page_stall.py                   # this checkout vs the baseline, 3 runs each
    python benchmarks/page_stall.py --base /tmp/tree  # another baseline tree (PYTHONPATH of the kernel)
    python benchmarks/page_stall.py --runs 1
    python benchmarks/page_stall.py --pace 100          # a fast model's pace (20 s a run)

In the page, a PerformanceObserver records long tasks (≥ 50 ms, the browser's own measure) and a
requestAnimationFrame loop records the longest gap between frames; both from the prompt's
sending to the end of the three turns plus 2 s. Needs what the browser suite needs
(``bash scripts/ci-browser.sh .venv``). Nothing is asserted: figures only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASE_COMMIT = "8addebc"


def _conftest():
    spec = importlib.util.spec_from_file_location("browser_conftest", ROOT / "tests" / "browser" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CELLS = [
    "%load_ext escouade_nb",
    "import os, tempfile\nw = tempfile.mkdtemp(prefix='escouade-stall-')\n"
    "a1 = %escouade fake --as a1 --cwd {w}\n",
    "a2 = %escouade fake --as a2 --cwd {w}\n",
    "a3 = %escouade fake --as a3 --cwd {w}\n",
    "await a1.ready(); await a2.ready(); await a3.ready()\nprint('ready')",
]
def run_cell(prompt: str) -> str:
    return (f"import asyncio\nturns = [a.send({prompt!r}) for a in (a1, a2, a3)]\n"
            "await asyncio.gather(*turns)\nprint('streamed', [t.stop_reason for t in turns])")

PROBE = """() => {
  window.__stall = {long: 0, gap: 0, count: 0};
  new PerformanceObserver((list) => { for (const e of list.getEntries()) {
    window.__stall.long = Math.max(window.__stall.long, e.duration); window.__stall.count++; } })
    .observe({type: "longtask", buffered: false});
  let last = performance.now();
  const tick = (t) => { window.__stall.gap = Math.max(window.__stall.gap, t - last); last = t;
    if (!window.__stall.stop) requestAnimationFrame(tick); };
  requestAnimationFrame(tick);
}"""


def measure(conftest, browser, tree: Path, runs: int, prompt: str) -> list[dict]:
    out = []
    for n in range(runs):
        base = Path(tempfile.mkdtemp(prefix="escouade-page-stall-"))
        lab = conftest.Lab(base)
        env_py = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = str(tree)  # the server's environment: its kernels import this tree
        try:
            lab.start()
        finally:
            if env_py is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = env_py
        try:
            import nbformat

            nb = nbformat.v4.new_notebook()
            nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
            nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS + [run_cell(prompt)]]
            nbformat.write(nb, str(lab.root / "stall.ipynb"))
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.goto(f"{lab.url}/lab/tree/stall.ipynb?token={conftest.TOKEN}")
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell", timeout=120_000)
            page.locator(".jp-Notebook .jp-Cell").nth(len(CELLS)).wait_for(timeout=120_000)
            deadline = time.monotonic() + 60
            while not (lab.sessions_for("stall.ipynb") and
                       lab.sessions_for("stall.ipynb")[0]["kernel"]["execution_state"] == "idle"):
                if time.monotonic() > deadline:
                    raise RuntimeError("kernel not idle")
                time.sleep(0.3)
            cells = page.locator(".jp-Notebook .jp-Cell")
            for i in range(len(CELLS)):
                cells.nth(i).locator(".jp-InputArea-editor").click()
                page.keyboard.press("Shift+Enter")
            cells.nth(len(CELLS) - 1).locator(".jp-OutputArea", has_text="ready").wait_for(timeout=120_000)
            page.wait_for_timeout(1500)
            page.evaluate(PROBE)
            cells.nth(len(CELLS)).locator(".jp-InputArea-editor").click()
            page.keyboard.press("Shift+Enter")
            cells.nth(len(CELLS)).locator(".jp-OutputArea", has_text="streamed").wait_for(timeout=180_000)
            page.wait_for_timeout(2000)
            figures = page.evaluate("() => { window.__stall.stop = true; return window.__stall; }")
            out.append(figures)
            print(f"  {tree.name or tree}: run {n + 1}: longest task {figures['long']:.0f} ms "
                  f"({figures['count']} long tasks), longest frame gap {figures['gap']:.0f} ms", file=sys.stderr)
            context.close()
        finally:
            lab.shutdown_sessions("stall.ipynb")
            lab.stop()
    return out


def summary(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows]
    return f"{statistics.median(values):.0f} ms [{min(values):.0f}–{max(values):.0f}]"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", type=Path, default=ROOT)
    p.add_argument("--base", type=Path, help=f"the baseline tree (default: a worktree of {BASE_COMMIT})")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json", type=Path)
    p.add_argument("--pace", type=int, default=0,
                   help="chunks a second per agent (the fake's 'stream' scenario); 0: as fast as it can")
    args = p.parse_args()
    conftest = _conftest()
    reason = conftest.missing()
    if reason:
        print(f"page_stall: {reason}", file=sys.stderr)
        return 2
    base = args.base
    made = None
    if base is None:
        made = Path(tempfile.mkdtemp(prefix="escouade-base-")) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(made), BASE_COMMIT],
                       check=True, capture_output=True)
        base = made
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=conftest.CHROMIUM, headless=True, args=conftest.CHROMIUM_ARGS)
            try:
                prompt = f"stream 2000 of 20 at {args.pace}/s" if args.pace else "chunks 2000 of 20"
                new = measure(conftest, browser, args.tree, args.runs, prompt)
                old = measure(conftest, browser, base, args.runs, prompt)
            finally:
                browser.close()
    finally:
        if made is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(made)], capture_output=True)
    pace = f"{args.pace} chunks/s each" if args.pace else "as fast as the agent writes"
    print(f"| measure (3 agents × 2,000 chunks, {pace}, views displayed) | this tree | baseline (same run) | goal |")
    print("| --- | --- | --- | --- |")
    print(f"| longest long task in the page | {summary(new, 'long')} | {summary(old, 'long')} | ≤ 100 ms |")
    print(f"| longest gap between frames | {summary(new, 'gap')} | {summary(old, 'gap')} | |")
    if args.json:
        args.json.write_text(json.dumps({"tree": new, "base": old}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
