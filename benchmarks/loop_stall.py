"""Loop stalls in a real kernel: how long the kernel's event loop stops turning during each
step a user takes, against the ticker's own jitter on the idle kernel of the same run.

    python benchmarks/loop_stall.py                     # this checkout, 3 runs (a fresh kernel each)
    python benchmarks/loop_stall.py --tree /tmp/base    # another tree of the package (PYTHONPATH)
    python benchmarks/loop_stall.py --runs 5 --where    # also: where the loop was when it stalled
    python benchmarks/loop_stall.py --json out.json     # the figures, for RESULTS.md
    python benchmarks/loop_stall.py --kernels agents,no-ext   # some of the kernels only

In the kernel, a task wakes every 5 ms and records how late it woke (its lateness: a
stall of the loop). A watchdog thread samples the main thread's stack while the ticker is
more than 20 ms late, so ``--where`` tells which line of code held the loop (each sample
is ~5 ms of stall; the first 20 ms of a stall are not sampled, so it under-counts). Each
step is measured from just before its first cell until a wait after its last one
(background work, such as versions read after ``%escouade``, counts).

Columns: the longest stall of the step; the longest "after 1st cell", counting only the
ticker's sleeps begun once the step's first cell had returned (the loop's own work, not
the user's synchronous cell, e.g. ten ``%escouade`` magics in one cell); the longest full
(generation 2) garbage collection in the step, from ``gc.callbacks`` (it holds the GIL:
the loop cannot turn while it runs, whichever thread triggered it).

Steps, in fresh kernels per run (so that each "first" is one: no version read yet):
the idle kernel (jitter, in each); in the ``load-ext`` kernel, ``%load_ext escouade_nb`` (its cell,
then its worker thread's imports until done), the first ``%escouade fake`` and the first kernel tool
call (every other kernel waits for that thread before its idle step); ``%escouade`` (first, then again); in the second,
``%escouade`` with stand-ins of the 8 released agents on the PATH, each answering
``--version`` in 0.5 s; in the third, ``%escouade fake`` (the first start, until ready);
``%escouade fake --sandbox`` (a second agent under bubblewrap: its state folders made and the
worktree read in a thread, bwrap spawned as an async subprocess, pasta attached to its network; until
ready — needs ``bwrap`` and ``pasta``);
a 2,000-chunk reply with its turn view displayed (the agent's view is displayed too); a
prompt with a 3 MiB text file attached; starting 10 more agents; ``%escouade squad`` with
the 11; a 2,000-chunk reply with 3 squad views displayed; in the fourth, without ``%load_ext``, the
first ``get_squad()`` (its cell loads the engine and the MCP server's side) and the first
agent's start (the kernel's MCP server's first start); in a fifth (``--kernels sandbox``), a first
start, then the same second start without and with ``--sandbox`` (its own network: pasta); in a
sixth (``hostile``), a hostile agent's largest payloads, its view displayed
(``tests/adversarial/hostile.py``): a 40 MB permission request line, one just under the wire's cap, a
3.3 MB ``run_code`` through the kernel's MCP server (each card answered "no" from code as soon as it
is handed out). Each step also has its time until its last cell returned ("until its last cell": for
a start, until ready). Nothing is asserted: figures only.

``--tree`` runs the kernel with ``PYTHONPATH=TREE``, in this same venv; a tree older than
the ``tools/`` layout (its console script is ``escouade_nb.fake_agent``) gets an
``escouade-fake-agent`` shim on the PATH that runs ``python -m escouade_nb.fake_agent``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))  # the real-kernel driver used by the tests

TARGET_MS = 50.0

KERNEL_SETUP = r'''
import asyncio, collections, gc, json, sys, threading, time

class _LoopStalls:
    """A 5 ms ticker on this loop and a watchdog thread sampling where the loop is stuck."""

    def __init__(self):
        self.ticks = []      # (perf_counter at wake-up, lateness in s)
        self.samples = []    # (perf_counter, [(file, line, function) innermost first])
        self.last = time.perf_counter()
        self.main = threading.main_thread().ident
        self.gcs = []        # (perf_counter at its end, seconds): full (generation 2) collections
        self._gc_start = 0.0
        gc.callbacks.append(self._gc)
        self.task = asyncio.get_running_loop().create_task(self._tick())
        threading.Thread(target=self._watch, name="stall-watchdog", daemon=True).start()

    def _gc(self, phase, info):
        if info["generation"] == 2:
            if phase == "start":
                self._gc_start = time.perf_counter()
            else:
                self.gcs.append((time.perf_counter(), time.perf_counter() - self._gc_start))

    async def _tick(self):
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            self.ticks.append((now, now - before - 0.005))
            self.last = now

    def _watch(self):
        while True:
            time.sleep(0.005)
            now = time.perf_counter()
            if now - self.last > 0.02:
                frame = sys._current_frames().get(self.main)
                stack = []
                while frame is not None and len(stack) < 80:
                    stack.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
                    frame = frame.f_back
                self.samples.append((now, stack))

    def report(self, t0, t1, after=None):
        late = sorted(l for t, l in self.ticks if t0 <= t <= t1)
        if not late:
            return {"max_ms": None, "p99_ms": None, "after_ms": None, "ticks": 0, "where": []}
        # ticks whose sleep began once the first measured cell had returned: the loop's own work
        bg = [l for t, l in self.ticks if t0 <= t <= t1 and after is not None and t - l - 0.005 >= after]
        p99 = late[min(len(late) - 1, int(round(0.99 * (len(late) - 1))))]
        ours, anywhere, chains = collections.Counter(), collections.Counter(), collections.Counter()
        for t, stack in self.samples:
            if not t0 <= t <= t1:
                continue
            mine = [f for f in stack if "/escouade_nb/" in f[0]]
            if mine:
                f = mine[0]
                ours[f"{f[0].split('/escouade_nb/')[-1]}:{f[1]} {f[2]}"] += 1
            if stack:
                f = stack[0]
                anywhere[f"{f[0].rsplit('/', 1)[-1]}:{f[1]} {f[2]}"] += 1
                upto = next((i for i, g in enumerate(stack) if "/escouade_nb/" in g[0]), 5)
                chains[" < ".join(f"{g[0].rsplit('/', 1)[-1]}:{g[1]} {g[2]}" for g in stack[:upto + 1])] += 1
        return {"max_ms": late[-1] * 1e3, "p99_ms": p99 * 1e3, "ticks": len(late),
                "after_ms": max(bg) * 1e3 if bg else None,
                "gc2_ms": max((d * 1e3 for t, d in self.gcs if t0 <= t <= t1), default=0.0),
                "where": [[k, v * 5] for k, v in ours.most_common(6)],
                "innermost": [[k, v * 5] for k, v in anywhere.most_common(4)],
                "chains": [[k, v * 5] for k, v in chains.most_common(4)]}

_stalls = _LoopStalls()
'''

IDLE = "idle kernel (ticker jitter)"
SANDBOXED = "%escouade fake --sandbox (bwrap, pasta attached, until ready)"
PLAIN = "%escouade fake (a second start, not sandboxed, until ready)"
# Fresh kernels per run, so that each "first" is a first (versions not read yet). Each step:
# (name, setup cells not measured, measured cells, seconds waited after them)
LISTING_KERNEL: list[tuple[str, list[str], list[str], float]] = [
    (IDLE, [], [], 2.0),
    ("%escouade (first)", [], ["%escouade"], 3.0),
    ("%escouade (again)", [], ["%escouade"], 1.0),
]
INSTALLED_SLEEP = 0.5
"""Seconds the stand-ins of the released agents take to answer ``--version`` (a Node CLI's start)."""
INSTALLED_KERNEL: list[tuple[str, list[str], list[str], float]] = [
    (IDLE, [], [], 2.0),
    (f"%escouade (first), 8 more installed ({INSTALLED_SLEEP:g} s --version)", [], ["%escouade"], 5.0),
]
AGENTS_KERNEL: list[tuple[str, list[str], list[str], float]] = [
    (IDLE, [], [], 2.0),
    ("%escouade fake (first start, until ready)", [], ["a = %escouade fake --as bench", "await a.ready()"], 1.0),
    (SANDBOXED, [], ["b = %escouade fake --as boxed --sandbox", "await b.ready()"], 1.0),
    ("2,000-chunk reply, its turn view displayed", [],
     ["t = a.send('chunks 2000')\nfrom escouade_nb.widgets import TurnView\ndisplay(TurnView(t))", "r = await t"],
     0.5),
    ("a prompt with a 3 MiB text file attached", ["open('big.txt', 'w').write(('x' * 99 + '\\n') * 31457)"],
     ["t = a.send('hello', attach=['big.txt'])", "r = await t"], 0.5),
    ("start 10 more agents (until ready)", [],
     ["agents = [get_ipython().run_line_magic('escouade', f'fake --as sq{i}') for i in range(10)]",
      "await asyncio.gather(*(x.ready() for x in agents))"], 0.5),
    ("%escouade squad with 11 agents", [], ["%escouade squad"], 1.0),
    ("2,000-chunk reply, 3 squad views displayed", ["%escouade squad", "%escouade squad"],
     ["t = a.send('chunks 2000')", "r = await t"], 0.5),
]
SANDBOX_KERNEL: list[tuple[str, list[str], list[str], float]] = [
    (IDLE, [], [], 2.0),
    ("%escouade fake (first start, until ready)", [], ["a = %escouade fake --as bench", "await a.ready()"], 1.0),
    (PLAIN, [], ["c = %escouade fake --as plain", "await c.ready()"], 1.0),
    (SANDBOXED, [], ["b = %escouade fake --as boxed --sandbox", "await b.ready()"], 1.0),
]
"""The same start with and without the sandbox, in one kernel: each a second agent (the first
paid the imports and the MCP server's start); the sandboxed one with its own network
(``--unshare-net``, pasta attached through bwrap's info and block pipes)."""
NO_EXT_KERNEL: list[tuple[str, list[str], list[str], float]] = [
    (IDLE, [], [], 2.0),
    ("no %load_ext: first get_squad() (the cell's imports)", [],
     ["from escouade_nb import get_squad\nsquad = get_squad()"], 0.5),
    ("no %load_ext: first agent, the MCP server's first start", [],
     ["a = squad.start('fake', name='bench')", "await a.ready()"], 1.0),
]
"""A kernel where escouade is used from code, without ``%load_ext escouade_nb``."""
_ANSWER_ALL = ("while not t.done:  # whatever card comes (none when the line is refused): answered no\n"
               "    try:\n"
               "        c = await h.next_permission(timeout=0.5)\n"
               "    except Exception:\n"
               "        continue\n"
               "    c.choose('reject_once')\n"
               "r = await t")
UNDER_CAP = 8 * 1024 * 1024 - 1024
HOSTILE_KERNEL: list[tuple[str, list[str], list[str], float]] = [
    (IDLE, [], [], 2.0),
    ("hostile agent: a 40 MB permission request", ["h = %escouade hostile --as h\nawait h.ready()"],
     ["t = h.send('ask 40000000')", _ANSWER_ALL], 1.0),
    (f"hostile agent: a {UNDER_CAP / 1e6:.1f} MB permission request (just under the cap)", [],
     [f"t = h.send('ask {UNDER_CAP}')", _ANSWER_ALL], 1.0),
    ("hostile agent: a 3.3 MB run_code (its card)", [], ["t = h.send('runcode 3300000')", _ANSWER_ALL], 1.0),
]
"""A hostile agent's largest payloads (issue 32), its view displayed: ``tests/adversarial/hostile.py``."""
_LOADED = ("import escouade_nb.magics as _m  # %load_ext's thread (issue 37) done; a tree without one: nothing\n"
           "await asyncio.to_thread(getattr(_m, 'loaded', lambda: None))")
LOAD_EXT_KERNEL: list[tuple[str, list[str], list[str], float]] = [
    (IDLE, [], [], 2.0),
    ("%load_ext escouade_nb (its cell)", [], ["%load_ext escouade_nb"], 0.0),
    ("%load_ext escouade_nb: its thread's imports, until done", [], [_LOADED], 0.5),
    ("%escouade fake (first start, until ready)", [], ["a = %escouade fake --as bench", "await a.ready()"], 1.0),
    ("first kernel tool call (the agent's inspect_variable)", ["x = 41"],
     ["t = a.send('inspect x')", "r = await t\nassert 'x: int' in r.text, r.text"], 1.0),
]
"""``%load_ext escouade_nb`` measured (issue 37): its cell (the loop held while it runs), then its
worker thread's imports until they are done (the loop's stalls meanwhile), the first agent's start,
the first call of a kernel tool (the fake agent's ``inspect x``: the MCP server's first request)."""
KERNELS = {"load-ext": LOAD_EXT_KERNEL, "listing": LISTING_KERNEL, "installed": INSTALLED_KERNEL,
           "agents": AGENTS_KERNEL, "no-ext": NO_EXT_KERNEL, "sandbox": SANDBOX_KERNEL, "hostile": HOSTILE_KERNEL}
STEPS = list({step[0]: step for step in LISTING_KERNEL + LOAD_EXT_KERNEL[1:] + INSTALLED_KERNEL[1:] + AGENTS_KERNEL[1:]
              + NO_EXT_KERNEL[1:] + SANDBOX_KERNEL[1:] + HOSTILE_KERNEL[1:]}.values())


def _released_programs() -> list[str]:
    """The program names of the shipped harnesses other than ``fake``."""
    names = set()
    for manifest in (ROOT / "plugins").glob("*/escouade-plugin.json"):
        for harness in (json.loads(manifest.read_text()).get("contributes") or {}).get("harnesses", []):
            if harness.get("id") != "fake":
                names.update((harness.get("locate") or {}).get("names", [])[:1])
    return sorted(names)


@contextmanager
def _environment(tree: Path | None, installed: bool = False):
    """The kernel's environment: scratch folders for everything the package writes,
    an empty user plugins folder, and the tree under test. ``installed``: stand-ins of
    the released agents on the PATH, whose ``--version`` takes :data:`INSTALLED_SLEEP` s."""
    saved = dict(os.environ)
    scratch = Path(tempfile.mkdtemp(prefix="escouade-loop-stall-"))
    for var, sub in (("ESCOUADE_NB_TRANSCRIPTS_DIR", "transcripts"), ("ESCOUADE_NB_PLUGINS_DIR", "plugins"),
                     ("ESCOUADE_NB_JOURNAL_DIR", "journal"), ("ESCOUADE_NB_CONFIG_DIR", "config"),
                     ("ESCOUADE_NB_ACCOUNTS_DIR", "accounts")):
        (scratch / sub).mkdir()
        os.environ[var] = str(scratch / sub)
    scripts = Path(sys.executable).parent
    os.environ["PATH"] = f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}"
    if tree is not None:
        os.environ["PYTHONPATH"] = str(tree)
        if (tree / "escouade_nb" / "fake_agent.py").exists():  # before the tools/ layout
            shim = scratch / "bin" / "escouade-fake-agent"
            shim.parent.mkdir()
            shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m escouade_nb.fake_agent "$@"\n')
            shim.chmod(0o755)
            os.environ["PATH"] = f"{shim.parent}{os.pathsep}{os.environ['PATH']}"
    if installed:
        bin_dir = scratch / "released"
        bin_dir.mkdir()
        for name in _released_programs():
            prog = bin_dir / name
            prog.write_text(f'#!/bin/sh\nsleep {INSTALLED_SLEEP}\necho "{name} 1.0.0"\n')
            prog.chmod(0o755)
        os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    try:
        yield scratch
    finally:
        os.environ.clear()
        os.environ.update(saved)


def one_run(tree: Path | None, kernels: list[str]) -> dict[str, list[dict]]:
    """Each kernel named once: {step: [report per kernel that has the step]}."""
    from kernel_client import Kernel

    results: dict[str, list[dict]] = {}
    for kernel in kernels:
        steps = KERNELS[kernel]
        with _environment(tree, installed=steps is INSTALLED_KERNEL) as scratch:
            ws = scratch / "ws"
            ws.mkdir()
            if steps is HOSTILE_KERNEL:
                from adversarial.hostile import install  # tests/ is on the path

                install(scratch / "plugins")
            k = Kernel(ws)
            try:
                loads = steps not in (NO_EXT_KERNEL, LOAD_EXT_KERNEL)
                k.run(("%load_ext escouade_nb\n" if loads else "") + KERNEL_SETUP)
                if loads:
                    k.run(_LOADED, timeout=300)
                k.run("await asyncio.sleep(0.5)")  # the ticker settles
                for name, setup, cells, wait in steps:
                    for cell in setup:
                        k.run(cell, timeout=300)
                    k.run("await asyncio.sleep(0.2)\n_t0 = time.perf_counter()\n_t_first = None")
                    for i, cell in enumerate(cells):
                        k.run(cell + ("\n_t_first = time.perf_counter()" if i == 0 else "")
                              + ("\n_t_end = time.perf_counter()" if i == len(cells) - 1 else ""), timeout=300)
                    k.run(f"await asyncio.sleep({wait})")
                    out = k.run("print('REPORT', json.dumps({**_stalls.report(_t0, time.perf_counter(), _t_first), "
                                "'cells_ms': (_t_end - _t0) * 1e3 if _t_first is not None else None}))").text
                    results.setdefault(name, []).append(json.loads(out.split("REPORT", 1)[1]))
                k.run("from escouade_nb import get_squad\n"
                      "await asyncio.gather(*(x.close() for x in get_squad().agents.values()))",
                      allow_error=True, timeout=120)
            finally:
                k.shutdown()
    return results


def summarise(runs: list[dict[str, list[dict]]]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for name, *_ in STEPS:
        reports = [rep for r in runs for rep in r.get(name, [])]
        if not reports:
            continue
        maxes = [rep["max_ms"] for rep in reports if rep["max_ms"] is not None]
        afters = [rep["after_ms"] for rep in reports if rep.get("after_ms") is not None]
        gcs = [rep["gc2_ms"] for rep in reports if rep.get("gc2_ms") is not None]
        p99s = [rep["p99_ms"] for rep in reports if rep["p99_ms"] is not None]
        where: dict[str, int] = {}
        innermost: dict[str, int] = {}
        chains: dict[str, int] = {}
        for rep in reports:
            for k, v in rep.get("chains", []):
                chains[k] = chains.get(k, 0) + v
            for k, v in rep["where"]:
                where[k] = where.get(k, 0) + v
            for k, v in rep.get("innermost", []):
                innermost[k] = innermost.get(k, 0) + v
        cells = [rep["cells_ms"] for rep in reports if rep.get("cells_ms") is not None]
        out[name] = {"max_ms": maxes, "p99_ms": p99s, "after_ms": afters, "gc2_ms": gcs, "cells_ms": cells,
                     "max_median": statistics.median(maxes) if maxes else None,
                     "p99_median": statistics.median(p99s) if p99s else None,
                     "where": sorted(where.items(), key=lambda kv: -kv[1])[:6],
                     "innermost": sorted(innermost.items(), key=lambda kv: -kv[1])[:4],
                     "chains": sorted(chains.items(), key=lambda kv: -kv[1])[:4]}
    return out


def _fmt(values: list[float]) -> str:
    if not values:
        return "—"
    return f"{statistics.median(values):,.0f} ms ({min(values):,.0f}–{max(values):,.0f})"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", type=Path, help="the package tree to measure (default: this checkout)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--where", action="store_true", help="print where the loop was while it stalled")
    p.add_argument("--json", type=Path, help="write the figures there")
    p.add_argument("--kernels", default=",".join(KERNELS),
                   help=f"which fresh kernels to run, comma-separated (default: {','.join(KERNELS)})")
    args = p.parse_args(argv)
    tree = args.tree.resolve() if args.tree else None
    kernels = [k for k in args.kernels.split(",") if k]
    unknown = [k for k in kernels if k not in KERNELS]
    if unknown:
        p.error(f"unknown kernel(s) {', '.join(unknown)}; known: {', '.join(KERNELS)}")
    runs = []
    for i in range(args.runs):
        started = time.monotonic()
        runs.append(one_run(tree, kernels))
        print(f"run {i + 1}/{args.runs}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    summary = summarise(runs)
    jitter = summary[STEPS[0][0]]
    print(f"tree: {tree or ROOT}; {args.runs} runs, each in fresh kernels ({'; '.join(kernels)}); "
          "median (min–max)")
    print(f"{'step':<64} {'until its last cell':<24} {'longest stall':<24} {'after 1st cell':<24} "
          f"{'longest full GC':<22} vs idle jitter")
    for name, *_ in STEPS:
        if name not in summary:
            continue
        s = summary[name]
        ratio = (f"{s['max_median'] / jitter['max_median']:.1f}× idle max" if s["max_median"] and
                 jitter["max_median"] else "")
        flag = "" if s["max_median"] is None or s["max_median"] <= TARGET_MS else f"  > {TARGET_MS:.0f} ms"
        print(f"{name:<64} {_fmt(s['cells_ms']):<24} {_fmt(s['max_ms']):<24} {_fmt(s['after_ms']):<24} "
              f"{_fmt(s['gc2_ms']):<22} {ratio}{flag}")
        if args.where and s["where"] and (s["max_median"] or 0) > TARGET_MS / 2:
            for place, ms in s["where"]:
                print(f"    {ms / len(runs):>7.0f} ms/run in escouade_nb/{place}")
            for place, ms in s["innermost"]:
                print(f"    {ms / len(runs):>7.0f} ms/run innermost {place}")
            for chain, ms in s["chains"]:
                print(f"    {ms / len(runs):>7.0f} ms/run {chain}")
    if args.json:
        args.json.write_text(json.dumps({"tree": str(tree or ROOT), "runs": runs, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
