"""Import time of the package, as a kernel (``import escouade_nb``) and a rule plugin
process (``import escouade_nb.plugin_sdk``) pay it, in fresh interpreters.

    python benchmarks/import_time.py                     # this checkout
    python benchmarks/import_time.py --tree /tmp/base    # another tree of the package (PYTHONPATH)
    python benchmarks/import_time.py --runs 10 --json out.json

Each figure is the median (and min–max) of ``--runs`` fresh interpreters, each timing
the ``import`` statement itself (interpreter start excluded), plus how many modules it
loaded and whether the ACP SDK, ipywidgets or the engine came with it. The baseline,
measured in the same run, is ``from pydantic import BaseModel`` (what the plugin SDK's wire
models need at least).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = r"""
import sys, time, json
before = set(sys.modules)
t0 = time.perf_counter()
{statement}
elapsed = time.perf_counter() - t0
loaded = set(sys.modules) - before
print(json.dumps({{"ms": elapsed * 1e3, "modules": len(loaded),
                  "acp": any(m == "acp" or m.startswith("acp.") for m in loaded),
                  "ipywidgets": any(m.split(".")[0] == "ipywidgets" for m in loaded),
                  "engine": any(m.startswith(("escouade_nb.engine", "escouade_nb.agent")) for m in loaded),
                  "file": getattr(sys.modules.get("{module}"), "__file__", None)}}))
"""

MODULES = [("from pydantic import BaseModel (baseline)", "from pydantic import BaseModel", "pydantic"),
           ("import escouade_nb", "import escouade_nb", "escouade_nb"),
           ("import escouade_nb.plugin_sdk", "import escouade_nb.plugin_sdk", "escouade_nb.plugin_sdk")]


def measure(statement: str, module: str, runs: int, tree: Path | None) -> dict:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    else:
        env.pop("PYTHONPATH", None)
    samples = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", PROBE.format(statement=statement, module=module)],
                             capture_output=True, text=True, env=env, cwd="/", timeout=120)
        if out.returncode != 0:
            raise RuntimeError(out.stderr.strip().splitlines()[-1])
        samples.append(json.loads(out.stdout))
    ms = [s["ms"] for s in samples]
    last = samples[-1]
    return {"ms": ms, "median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms),
            "modules": last["modules"], "acp": last["acp"], "ipywidgets": last["ipywidgets"],
            "engine": last["engine"], "file": last["file"]}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", type=Path, help="the package tree to measure (default: the installed checkout)")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    tree = args.tree.resolve() if args.tree else None
    results = {name: measure(statement, module, args.runs, tree) for name, statement, module in MODULES}
    print(f"tree: {tree or ROOT}; median of {args.runs} fresh interpreters (min–max)")
    for name, r in results.items():
        loads = ", ".join(k for k in ("acp", "ipywidgets", "engine") if r[k]) or "none of acp/ipywidgets/engine"
        print(f"{name:<42} {r['median_ms']:7.1f} ms ({r['min_ms']:.1f}–{r['max_ms']:.1f})  "
              f"{r['modules']:4d} modules; loads {loads}; {r['file']}")
    if args.json:
        args.json.write_text(json.dumps({"tree": str(tree or ROOT), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
