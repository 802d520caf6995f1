"""escouade_nb benchmarks: each figure is a ratio against a baseline measured in the same run.

    python benchmarks/run.py                 # all, prints a table, writes benchmarks/RESULTS.md
    python benchmarks/run.py ingest comm     # some of: ingest comm broker responsiveness scale loop imports
                                             #          mcp worktree weight ingest_kernel relay places
                                             #          run_thread

Nothing here is asserted: these are measurements, not tests. Timings on a 2-core machine
are noisy; each timed figure is the median of several runs where that is cheap.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))  # the real-kernel driver used by the tests

os.environ.setdefault("ESCOUADE_NB_TRANSCRIPTS_DIR", tempfile.mkdtemp(prefix="escouade-bench-transcripts-"))

ROWS: list[tuple[str, str, str, str]] = []  # (benchmark, measured, baseline, ratio)


def row(name: str, measured: str, baseline: str, ratio: str) -> None:
    ROWS.append((name, measured, baseline, ratio))
    print(f"{name:<44} {measured:<30} {baseline:<30} {ratio}", flush=True)


def fake_program() -> str:
    from escouade_nb.manifest import discover, locate_program

    return locate_program(discover().find("fake").harness)


# -- 1. ingest ------------------------------------------------------------------------------
BLAST = [sys.executable, str(HERE / "blast_agent.py")]


async def _ingest_sdk(n: int) -> float:
    from sdk_ingest import ingest_sdk  # beside this script; views.py runs the same text in kernels

    return await ingest_sdk(n, BLAST, tempfile.gettempdir())


async def _ingest_ours(n: int) -> float:
    from escouade_nb.engine.agent import Agent
    from escouade_nb.manifest import HarnessRef, Harness, Manifest
    from escouade_nb.widgets import AgentView

    ref = HarnessRef(manifest=Manifest(id="bench", name="bench"),
                     harness=Harness(id="blast", name="Blast", acp={"args": BLAST[1:], "fs": False}),
                     path=HERE / "blast_agent.py", source="extra")
    agent = Agent(ref, program=BLAST[0], cwd=tempfile.mkdtemp(), record=True)
    await agent.ready()
    view = AgentView(agent)  # the whole client: fold, transcript, its view's batches (no comms outside a kernel)
    t0 = time.perf_counter()
    await agent.send(f"blast {n}")
    view.outbox.flush()
    elapsed = time.perf_counter() - t0
    await agent.close()
    return elapsed


def bench_ingest(n: int = 20_000, runs: int = 3) -> None:
    sdk = statistics.median(asyncio.run(_ingest_sdk(n)) for _ in range(runs))
    ours = statistics.median(asyncio.run(_ingest_ours(n)) for _ in range(runs))
    row(f"ingest: {n} session/update, notif/s", f"{n / ours:,.0f}/s (whole client)",
        f"{n / sdk:,.0f}/s (bare SDK, no-op handler)", f"{(n / ours) / (n / sdk):.2f}× of the SDK's rate")


# -- 2. comm traffic ------------------------------------------------------------------------
def bench_comm(chunks: int = 5000, width: int = 20) -> None:
    from kernel_client import Kernel

    k = Kernel(Path(tempfile.mkdtemp()))
    try:
        k.run("%load_ext escouade_nb\nimport asyncio\na = %escouade fake\nawait a.ready()\nawait asyncio.sleep(0.5)")
        res = k.run(f"r = await a.send('chunks {chunks} of {width}')\nawait asyncio.sleep(0.3)\nprint(len(r.text))")
        late = k.drain_iopub(0.5)
        text = int(res.text.strip())
        msgs, nbytes = res.comm_msgs + late.comm_msgs, res.comm_bytes + late.comm_bytes
        naive = k.run(f"import ipywidgets as w\nh = w.HTML()\nfor i in range(500):\n    h.value += 'x' * {width}\n")
        naive_msgs, naive_bytes = naive.comm_msgs, naive.comm_bytes
        k.run("await a.close()", allow_error=True)
    finally:
        k.shutdown()
    per_text = nbytes / text
    naive_per_text = naive_bytes / (500 * width)
    row(f"comm: {text // 1000} KB reply in {chunks} chunks", f"{msgs} msgs, {nbytes / 1e3:,.0f} KB = "
        f"{per_text:.2f} B/text B", f"naive value+= (500 chunks): {naive_per_text:.0f} B/text B",
        f"{naive_per_text / per_text:,.0f}× fewer bytes; target ≤ 3 B/text B")
    row("comm: messages per chunk", f"{msgs / chunks:.4f}", f"naive: {naive_msgs / 500:.2f}", "")


# -- 3. broker ------------------------------------------------------------------------------
def bench_broker() -> None:
    script = HERE / "broker_latency.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        row("broker decision latency", "failed", (out.stderr.strip().splitlines() or [""])[-1][:60], "")
        return
    lines = {line[:44].strip(): line[44:].split() for line in out.stdout.splitlines()}
    direct = lines["plugin round trip (direct call)"]
    settled = lines["broker: card settled"]
    row("broker: 1,000 decisions, 3 fast plugins, p50", f"{float(settled[0]):.2f} ms until the card is answered",
        f"{float(direct[0]):.2f} ms a plugin's own round trip", f"+{float(settled[0]) - float(direct[0]):.2f} ms")
    row("broker: 1,000 decisions, 3 fast plugins, p99", f"{float(settled[1]):.2f} ms",
        f"{float(direct[1]):.2f} ms", f"+{float(settled[1]) - float(direct[1]):.2f} ms")


# -- 4. kernel responsiveness ----------------------------------------------------------------
def _round_trips(k, n: int = 60) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        k.run("1")
        times.append(time.perf_counter() - t0)
    return times


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def bench_responsiveness(agents: int = 10) -> None:
    from kernel_client import Kernel

    k = Kernel(Path(tempfile.mkdtemp()))
    try:
        k.run("%load_ext escouade_nb\nimport asyncio")
        idle = _round_trips(k)
        k.run(f"agents = [get_ipython().run_line_magic('escouade', 'fake') for _ in range({agents})]\n"
              "await asyncio.gather(*(a.ready() for a in agents))\n"
              "async def flat_out(a):\n    while True:\n        await a.send('chunks 5000')\n"
              "tasks = [asyncio.ensure_future(flat_out(a)) for a in agents]\nawait asyncio.sleep(1)")
        busy = _round_trips(k)
        k.drain_iopub(0.2)
        k.run("for t in tasks: t.cancel()\nfor a in agents: a.cancel()\nawait asyncio.sleep(1)\n"
              "async def paced(a):\n    while True:\n        await a.send('slow')\n"  # 10 chunks/s each, like a model
              "tasks = [asyncio.ensure_future(paced(a)) for a in agents]\nawait asyncio.sleep(1)",
              allow_error=True, timeout=120)
        paced = _round_trips(k)
        k.drain_iopub(0.2)
        k.run("for t in tasks: t.cancel()\nfor a in agents: a.cancel()\n"
              "await asyncio.gather(*(a.close() for a in agents))", allow_error=True, timeout=120)
    finally:
        k.shutdown()
    row(f"kernel: trivial cell, p50, {agents} agents flat out", f"{_pct(busy, 50) * 1e3:.1f} ms",
        f"{_pct(idle, 50) * 1e3:.1f} ms idle", f"{_pct(busy, 50) / _pct(idle, 50):.1f}×")
    row(f"kernel: trivial cell, p99, {agents} agents flat out", f"{_pct(busy, 99) * 1e3:.1f} ms",
        f"{_pct(idle, 99) * 1e3:.1f} ms idle", f"{_pct(busy, 99) / _pct(idle, 99):.1f}×")
    row(f"kernel: trivial cell, p50, {agents} agents at 10 chunks/s", f"{_pct(paced, 50) * 1e3:.1f} ms",
        f"{_pct(idle, 50) * 1e3:.1f} ms idle", f"{_pct(paced, 50) / _pct(idle, 50):.1f}×")
    row(f"kernel: trivial cell, p99, {agents} agents at 10 chunks/s", f"{_pct(paced, 99) * 1e3:.1f} ms",
        f"{_pct(idle, 99) * 1e3:.1f} ms idle", f"{_pct(paced, 99) / _pct(idle, 99):.1f}×")


# -- 5. scale ------------------------------------------------------------------------------------
def bench_scale(n: int = 50) -> None:
    from kernel_client import Kernel

    k = Kernel(Path(tempfile.mkdtemp()))
    try:
        k.run("%load_ext escouade_nb\nimport asyncio, time, resource\n"
              "def rss():\n    return int(open('/proc/self/statm').read().split()[1]) * 4096\n"
              "a0 = get_ipython().run_line_magic('escouade', 'fake')\nawait a0.ready()\nawait a0.send('hello')\n"
              "base = rss()")
        out = k.run(f"t0 = time.perf_counter()\n"
                    f"agents = [get_ipython().run_line_magic('escouade', 'fake') for _ in range({n})]\n"
                    "await asyncio.gather(*(a.ready() for a in agents))\nstart = time.perf_counter() - t0\n"
                    "t1 = time.perf_counter()\nturns = await asyncio.gather(*(a.send('hello') for a in agents))\n"
                    "answer = time.perf_counter() - t1\nimport gc; gc.collect()\n"
                    "print('RESULT', start, answer, (rss() - base) / len(agents), "
                    "sum(t.stop_reason == 'end_turn' for t in turns))",
                    timeout=600).text.split("RESULT")[-1].split()
        one = k.run("t0 = time.perf_counter()\nx = get_ipython().run_line_magic('escouade', 'fake')\nawait x.ready()\n"
                    "print('RESULT', time.perf_counter() - t0)").text.split("RESULT")[-1].split()
        k.run("await asyncio.gather(*(a.close() for a in [*agents, a0, x]))", allow_error=True, timeout=300)
    finally:
        k.shutdown()
    start, answer, per_agent, ok = float(out[0]), float(out[1]), float(out[2]), int(out[3])
    row(f"scale: start {n} fake agents", f"{start:.1f} s", f"one agent: {float(one[0]):.2f} s",
        f"{start / float(one[0]):.1f}× one start ({start / n:.2f} s each)")
    row(f"scale: {n} agents answer a prompt", f"{answer:.2f} s, {ok}/{n} end_turn", "", "")
    row("scale: kernel memory per agent", f"{per_agent / 2**20:.2f} MiB", "", "")


# -- 6. loop stalls, 7. import time (scripts of their own, run here for the table) ------------------
def _script_json(script: str, *args: str, timeout: float = 1800) -> dict:
    with tempfile.TemporaryDirectory(prefix="escouade-bench-") as tmp:
        out_file = Path(tmp) / "out.json"
        out = subprocess.run([sys.executable, str(HERE / script), *args, "--json", str(out_file)],
                             capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError((out.stderr.strip().splitlines() or ["failed"])[-1])
        return json.loads(out_file.read_text())


def bench_loop(runs: int = 3) -> None:
    from loop_stall import IDLE, STEPS, TARGET_MS

    summary = _script_json("loop_stall.py", "--runs", str(runs))["summary"]
    idle = summary[IDLE]
    for name, *_ in STEPS[1:]:
        s = summary[name]
        ok = "✓" if s["max_median"] is not None and s["max_median"] <= TARGET_MS else "✗"
        row(f"loop stall: {name}", f"{s['max_median']:,.0f} ms longest, p99 {s['p99_median']:,.0f} ms",
            f"idle jitter {idle['max_median']:,.0f} ms longest", f"{ok} target ≤ {TARGET_MS:.0f} ms")


def bench_imports(runs: int = 10) -> None:
    results = _script_json("import_time.py", "--runs", str(runs))["results"]
    (base_name, base), *rest = results.items()
    for name, r in rest:
        loads = ", ".join(k for k in ("acp", "ipywidgets", "engine") if r[k]) or "no SDK, widgets or engine"
        row(f"{name}", f"{r['median_ms']:.0f} ms, {r['modules']} modules ({loads})",
            f"{base_name.split(' (')[0]}: {base['median_ms']:.0f} ms", f"{r['median_ms'] / base['median_ms']:.1f}×")


def bench_mcp(calls: int = 300, kernels: int = 3) -> None:
    out = _script_json("mcp_roundtrip.py", "--calls", str(calls), "--kernels", str(kernels))
    trips, cost = out["roundtrip"], out["cost"]
    sdk, raw, floor, small = trips["sdk"], trips["raw"], trips["floor"], trips["small"]
    for p in ("p50", "p99"):
        row(f"mcp: inspect_variable round trip, {p}", f"{sdk[p + '_ms']:.2f} ms (SDK client)",
            f"{floor[p + '_ms']:.2f} ms bare authorised GET", f"+{sdk[p + '_ms'] - floor[p + '_ms']:.2f} ms "
            f"(raw POST: {raw[p + '_ms']:.2f} ms)")
    work, session = trips["df_work_ms"], trips["small_session"]
    row("mcp: tools/call, raw POST, p50 (an int)", f"{small['p50_ms']:.2f} ms",
        f"{floor['p50_ms']:.2f} ms bare authorised GET", f"{small['p50_ms'] / floor['p50_ms']:.1f}× (target ≤ 2×)")
    row("mcp: tools/call, raw POST, p50 (a 1000×5 DataFrame)", f"{raw['p50_ms']:.2f} ms, of which "
        f"{work:.2f} ms the tool's own work", f"{floor['p50_ms']:.2f} ms bare authorised GET",
        f"{raw['p50_ms'] / floor['p50_ms']:.1f}×; {(raw['p50_ms'] - work) / floor['p50_ms']:.1f}× beyond its work")
    row("mcp: tools/call of an int, the SDK's session (progress asked)", f"{session['p50_ms']:.2f} ms",
        f"{small['p50_ms']:.2f} ms answered directly", f"{session['p50_ms'] / small['p50_ms']:.1f}×")
    row("mcp: server start, fresh kernel", f"{cost['import_s']:.2f} s imports + {cost['start_s'] * 1e3:.0f} ms start",
        f"%load_ext escouade_nb: {cost['load_ext_s']:.2f} s", f"longest loop stall {cost['stall_s'] * 1e3:.0f} ms")
    row("mcp: kernel RSS with the server", f"{cost['rss_after_mib']:.1f} MiB, +{cost['modules']:.0f} modules",
        f"{cost['rss_before_mib']:.1f} MiB without", f"+{cost['rss_added_mib']:.1f} MiB")
    row(f"mcp: idle kernel CPU over {cost['idle_s']:g} s", f"{cost['idle_cpu_with_s']:.3f} s with the server",
        f"{cost['idle_cpu_without_s']:.3f} s without", "")


def bench_worktree(files: int = 10_000, runs: int = 7) -> None:
    out = _script_json("worktree_add.py", "--files", str(files), "--runs", str(runs))
    row(f"worktree: create, {out['files']} files", f"{out['ours_ms']:.0f} ms (Worktree.create)",
        f"{out['bare_ms']:.0f} ms git worktree add alone", f"{out['overhead'] * 100:+.1f}%")


def bench_saved_forms(chunks: int = 10_000) -> None:
    out = _script_json("saved_form_cost.py", "--chunks", str(chunks))
    mb = chunks * 100 / 1e6
    for label, what in (("ext", "extension present"), ("plain", "no extension (display updates)")):
        long, short = out[f"{label}_long"], out[f"{label}_short"]
        row(f"saved form: one more turn, {what}", f"{long:,} B after a {mb:g} MB thread",
            f"{short:,} B after a short one", f"{long / short:.2f}×" + ("; target ≤ 2×" if label == "ext" else ""))
    row(f"saved form: .ipynb of a {mb:g} MB thread (nbclient)", f"{out['ipynb']:,} B",
        f"{out['conversation']:,} B of conversation text", f"{out['ipynb'] / out['conversation']:.2f}×; target ≤ 1.5×")


def bench_weight(turns: int = 5, idle: int = 3) -> None:
    out = _script_json("view_weight.py", "--turns", str(turns), "--idle", str(idle))
    ext, plain = out["ext"][0], out["plain"][0]
    row("front-end: an idle agent view's comm_open, no extension", f"{plain['idle_open']:,.0f} B (packed module)",
        f"{ext['idle_open']:,.0f} B with the extension (light module)",
        f"{plain['idle_open'] / ext['idle_open']:.1f}× (target ≤ 64 KB)")
    row("front-end: a turn view's comm_open, no extension", f"{plain['turn_open']:,.0f} B",
        f"{ext['turn_open']:,.0f} B with the extension", f"{plain['turn_open'] / ext['turn_open']:.1f}×")


def bench_ingest_kernel(rounds: int = 3) -> None:
    out = _script_json("ingest_view.py", "--rounds", str(rounds))
    rates, cpu = out["rates"], out["cpu_us"]
    sdk = statistics.median(rates["sdk"])
    for key, label in (("view", "agent view displayed"), ("noview", "no view")):
        rate = statistics.median(rates[key])
        row(f"ingest in a kernel, {out['n']} updates, {label}", f"{rate:,.0f}/s, "
            f"{statistics.median(cpu[key]):.1f} µs CPU each", f"{sdk:,.0f}/s bare SDK, "
            f"{statistics.median(cpu['sdk']):.1f} µs CPU each", f"{rate / sdk:.2f}× the SDK's rate"
            + (" (target ≥ 2×)" if key == "view" else ""))


def bench_relay(calls: int = 300) -> None:
    out = _script_json("relay_roundtrip.py", "--calls", str(calls))
    relay, local = out["relay"], out["local"]
    row("relay: run_code round trip, p50", f"{relay['p50_ms']:.2f} ms over the agent's pipe",
        f"{local['p50_ms']:.2f} ms local agent (HTTP)", f"{out['ratio_p50']:.2f}× (target ≤ 1.5×)")
    row("relay: run_code round trip, p99", f"{relay['p99_ms']:.2f} ms over the agent's pipe",
        f"{local['p99_ms']:.2f} ms local agent (HTTP)", f"{relay['p99_ms'] / local['p99_ms']:.2f}×")


def bench_run_thread(seconds: float = 3.0, rounds: int = 3) -> None:
    """The kernel's loop during a long synchronous run_code (run_thread_loop.py), against an awaiting run."""
    out = _script_json("run_thread_loop.py", "--seconds", str(seconds), "--rounds", str(rounds))
    base = out["baseline: awaiting run (on the loop)"]
    for name, got in out.items():
        if name.startswith("baseline"):
            continue
        row(f"run_code {seconds:g} s: {name[:40]}", f"{got['longest']:.1f} ms longest stall",
            f"{base['longest']:.1f} ms awaiting run", f"{got['longest'] / max(base['longest'], 0.001):.1f}×")


def bench_places(agents: int = 20) -> None:
    """Agents started elsewhere (launcher_starts.py): N through each launcher against N local ones."""
    out = _script_json("launcher_starts.py", "--agents", str(agents))
    local = out["results"].get("local")
    for name, got in out["results"].items():
        if name == "local" or local is None:
            continue
        row(f"places: start {agents} agents via {name.split()[0]}", f"{got['seconds']:.2f} s",
            f"{agents} local: {local['seconds']:.2f} s", f"{got['seconds'] / local['seconds']:.1f}× the local start")
        row(f"places: client memory per agent via {name.split()[0]}", f"{got['rss_per_agent'] / 2**20:.2f} MiB",
            f"local: {local['rss_per_agent'] / 2**20:.2f} MiB", "")
    for name, why in out["skipped"].items():
        row(f"places: via {name.split()[0]}", "skipped", why[:30], "")


BENCHES = {"ingest": bench_ingest, "comm": bench_comm, "broker": bench_broker,
           "responsiveness": bench_responsiveness, "scale": bench_scale, "loop": bench_loop,
           "imports": bench_imports, "mcp": bench_mcp, "worktree": bench_worktree, "weight": bench_weight,
           "ingest_kernel": bench_ingest_kernel, "saved": bench_saved_forms, "relay": bench_relay,
           "places": bench_places, "run_thread": bench_run_thread}


def main(argv: list[str]) -> int:
    chosen = [a for a in argv if a in BENCHES] or list(BENCHES)
    started = time.time()
    print(f"{'benchmark':<44} {'measured':<30} {'baseline (same run)':<30} ratio")
    for name in chosen:
        try:
            BENCHES[name]()
        except Exception as exc:  # one failing benchmark does not hide the others
            row(name, f"error: {exc!r}"[:80], "", "")
    if chosen == list(BENCHES):
        write_results(time.time() - started)
    return 0


def write_results(seconds: float) -> None:
    date = datetime.date.today().isoformat()
    lines = [f"# Benchmark results ({date})", "",
             f"Command: `python benchmarks/run.py` (all benchmarks, {seconds:.0f} s). Machine: {platform.machine()}, "
             f"{os.cpu_count()} cores, Python {platform.python_version()}. Each figure is set against a baseline "
             "measured in the same run.", "",
             "| benchmark | measured | baseline (same run) | ratio |", "| --- | --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in ROWS]
    results = HERE / "RESULTS.md"
    rest = _after_first_table(results.read_text(encoding="utf-8")) if results.exists() else ""
    results.write_text("\n".join(lines) + "\n" + rest, encoding="utf-8")
    print(f"wrote {HERE / 'RESULTS.md'}")


def _after_first_table(text: str) -> str:
    """What follows the first table of RESULTS.md (notes and sections written by hand are
    kept when the table is rewritten)."""
    lines = text.splitlines(keepends=True)
    seen = False
    for i, line in enumerate(lines):
        if line.startswith("|"):
            seen = True
        elif seen:
            return "".join(lines[i:])
    return ""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
