"""The notebook views' cost in real kernels, for two trees of the package in the same run
(issue 16: one model per view, batched custom messages, against today's views).

    python benchmarks/views.py --base /tmp/esc-base               # the tree under test: this checkout
    python benchmarks/views.py --base /tmp/esc-base --tree /other  # another tree under test
    python benchmarks/views.py --base /tmp/esc-base --quick        # 1 run each, shorter streams (a smoke test)
    python benchmarks/views.py ... --runs 5 --json benchmarks/out/views.json --write   # --write: RESULTS.md

Make the baseline with ``git worktree add /tmp/esc-base 8addebc`` (today's views). Each tree
runs in kernels of this venv's Python with ``PYTHONPATH=TREE`` (so ``import escouade_nb``
is that tree's), their cwd, HOME and every folder the package writes in a scratch
tempdir. Both trees use THIS checkout's fake agent (``escouade_nb/tools/fake_agent.py``,
copied to the scratch folder and put first on the PATH as ``escouade-fake-agent``), so the
baseline gets the ``stream`` scenarios too, and a user plugin ``blast`` (``blast_agent.py``).

Only public calls drive the views: ``%load_ext escouade_nb``, ``a = %escouade fake --cwd D``,
``%%escouade NAME``, ``%escouade squad``, ``%escouade blast`` (a user plugin),
``agent.send`` / ``await turn``, ``turn.text``, ``agent.ready``, ``agent.status``,
``agent.conversation.items`` (counted), ``next_permission``, ``card.choose``, and for the
agents without a view ``get_squad().start("fake", cwd=D)``. Nothing of the views' inside.

Per run and tree, three fresh kernels:
  K1 (no view): an agent without a view: CPU of a fast stream, memory of short turns,
     ingest of the blast agent (and the bare SDK, in the same kernel).
  K2 (views): (a) a paced prose reply, (b) a 60 KB code block, (c) models opened by one
     edit turn, by one ``%%escouade`` cell, by ``%escouade squad`` with 10 agents,
     (d) memory of short turns with the view, (f) ingest with the view and the bare SDK.
  K3 (agent view + squad view): (e) CPU of a fast stream, with 1 then 10 agents in the squad.
Comm traffic counts every iopub comm_open, comm_msg and comm_close from the cell sending the
prompt until 1 s after it returned (the last redraws); a message's size is the JSON of its
header, parent_header, metadata and content plus its buffers' bytes (about its websocket frame).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))  # the real-kernel driver used by the tests
sys.path.insert(0, str(HERE))

SECTION = "## Views (issue 16)"

FULL = dict(runs=3, prose=(1000, 20, 100), code=(60000, 400), code_slow=(60000, 100), cpu_chunks=2000,
            cpu_rate=1000, mem_turns=500, ingest=20000, squad=10)
QUICK = dict(runs=1, prose=(200, 20, 100), code=(6000, 400), code_slow=None, cpu_chunks=500,
             cpu_rate=1000, mem_turns=100, ingest=5000, squad=10)

KERNEL_SETUP = r'''
%load_ext escouade_nb
import asyncio, gc, json, os, statistics, subprocess, sys, time, tracemalloc
from escouade_nb import get_squad

async def _settle(*agents):
    for x in agents:
        await x.ready()
    await asyncio.sleep(0.3)

async def _idle(x, timeout=30):
    t0 = time.monotonic()
    while str(getattr(x.status, "value", x.status)) != "idle":
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{x.name} is {x.status}")
        await asyncio.sleep(0.02)

async def _memory(x, turns):
    """tracemalloc: bytes still allocated after ``turns`` short turns (gc'd), items added."""
    n0 = len(x.conversation.items)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for _ in range(turns):
        await x.send("hello")
    await asyncio.sleep(0.5)  # the last redraw
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    print("RESULT", json.dumps({"bytes": used, "items": len(x.conversation.items) - n0}))

async def _ingest_sdk3(n, argv):
    return statistics.median([await ingest_sdk(n, argv, None) for _ in range(3)])

async def _ingest(x, n):
    t0 = time.perf_counter()
    await x.send(f"blast {n}")
    return time.perf_counter() - t0
'''


# -- the kernel, read the way a frontend reads it ----------------------------------------------
class Kernel:
    def __init__(self, cwd: Path) -> None:
        from kernel_client import Kernel as _K

        self.k = _K(cwd)
        self.kc = self.k.kc

    @property
    def pid(self) -> int:
        return self.k.pid

    def cpu(self) -> float:
        """The kernel process's CPU seconds: the sum over its threads of
        ``/proc/PID/task/TID/schedstat`` (ns on a CPU), else utime+stime of
        ``/proc/PID/stat`` (10 ms ticks: too coarse for a 0.1 s turn)."""
        try:
            return sum(int((t / "schedstat").read_text().split()[0])
                       for t in Path(f"/proc/{self.pid}/task").iterdir()) / 1e9
        except (OSError, ValueError, IndexError):
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def size(self, msg: dict) -> int:
        pack = self.kc.session.pack
        n = sum(len(pack(msg.get(part) or {})) for part in ("header", "parent_header", "metadata", "content"))
        for buf in msg.get("buffers") or []:
            n += memoryview(buf).nbytes
        return n

    def comm(self, msg: dict, at: float) -> dict:
        c = {"type": msg["msg_type"], "bytes": self.size(msg), "at": at}
        if msg["msg_type"] == "comm_open":  # which model: for the views' authors
            state = ((msg["content"].get("data") or {}).get("state") or {})
            c["model"] = state.get("_model_name") or msg["content"].get("target_name")
        return c

    def run(self, code: str, timeout: float = 300, after: float = 0.0) -> tuple[str, list[dict]]:
        """Execute ``code``; (its text output, the comm messages from now until ``after`` s
        after the cell's end, whatever their parent). Raises on an error in the cell."""
        self.sent = time.monotonic()
        res = self.k.run(code, timeout=timeout, allow_error=True)  # the tests' client: it keeps every comm message
        comms = res.comms + (self.k.drain_iopub(after).comms if after > 0 else [])
        if res.error:
            raise RuntimeError(f"cell failed: {res.error}\n{res.text[-2000:]}\n--- cell:\n{code}")
        return res.text, [self.comm(msg, at) for at, msg in comms]

    def result(self, code: str, **kw: Any) -> tuple[Any, list[dict]]:
        text, comms = self.run(code, **kw)
        return json.loads(text.rsplit("RESULT", 1)[1].strip().splitlines()[0]), comms

    def drain(self, seconds: float = 0.5) -> None:
        self.run("pass", after=seconds)

    def shutdown(self) -> None:
        try:
            self.k.run("await asyncio.gather(*(x.close() for x in list(get_squad().agents.values())), "
                       "return_exceptions=True)", allow_error=True, timeout=60)
        except Exception:
            pass
        self.k.shutdown()


def opens(comms: list[dict]) -> int:
    return sum(c["type"] == "comm_open" for c in comms)


def models(comms: list[dict]) -> str:
    """The models opened, counted by name ("HTMLModel×3, …")."""
    import collections

    counted = collections.Counter(c.get("model") for c in comms if c["type"] == "comm_open")
    return ", ".join(f"{name}×{n}" for name, n in counted.most_common())


def total(comms: list[dict]) -> int:
    return sum(c["bytes"] for c in comms)


# -- the environment of one tree --------------------------------------------------------------
@contextmanager
def environment(tree: Path):
    """Scratch folders (HOME, the package's folders), ``PYTHONPATH=tree``, this checkout's
    fake agent and the blast agent first on the PATH, a user plugin for ``blast``."""
    from loop_stall import _environment

    with _environment(tree) as scratch:
        home = scratch / "home"
        home.mkdir()
        os.environ["HOME"] = str(home)
        os.environ["IPYTHONDIR"] = str(home / ".ipython")
        os.environ.pop("JUPYTER_RUNTIME_DIR", None)
        bin_dir = scratch / "views-bin"
        bin_dir.mkdir()
        shutil.copy(ROOT / "escouade_nb" / "tools" / "fake_agent.py", bin_dir / "fake_agent.py")
        shutil.copy(HERE / "blast_agent.py", bin_dir / "blast_agent.py")
        for name, script in (("escouade-fake-agent", "fake_agent.py"), ("escouade-blast-agent", "blast_agent.py")):
            shim = bin_dir / name
            version = 'case "$1" in --version) echo "escouade-blast-agent 1.0.0"; exit 0;; esac\n' \
                if "blast" in name else ""
            # this checkout's fake agent as a module (it imports its package's fake_words)
            run = (f'"{sys.executable}" "{bin_dir / script}"' if "blast" in name else
                   f'"{sys.executable}" -c "import sys; sys.path.insert(0, {str(ROOT)!r}); '
                   f'from escouade_nb.tools.fake_agent import main; sys.exit(main())"')
            shim.write_text(f'#!/bin/sh\n{version}exec {run} "$@"\n')
            shim.chmod(0o755)
        os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
        plugin = Path(os.environ["ESCOUADE_NB_PLUGINS_DIR"]) / "blast"
        plugin.mkdir(parents=True)
        manifest = json.loads((ROOT / "plugins" / "fake" / "escouade-plugin.json").read_text())
        manifest.update(id="bench.blast", name="Blast agent", description={"en": "benchmarks/blast_agent.py"})
        manifest["contributes"]["harnesses"] = [{
            "id": "blast", "name": "Blast", "speaker": "Blast", "locate": {"names": ["escouade-blast-agent"]},
            "versionArgs": ["--version"], "tested": {"oldest": "1.0.0", "newest": "1.0.0"},
            "install": {"unix": "benchmarks/blast_agent.py", "windows": "benchmarks/blast_agent.py"},
            "acp": {"args": [], "fs": False}}]
        (plugin / "escouade-plugin.json").write_text(json.dumps(manifest, indent=1))
        yield scratch, [sys.executable, str(bin_dir / "blast_agent.py")]


def new_kernel(scratch: Path, label: str) -> tuple[Kernel, Path]:
    ws = scratch / f"ws-{label}"
    ws.mkdir()
    k = Kernel(ws)
    k.run(KERNEL_SETUP + "\n" + (HERE / "sdk_ingest.py").read_text(), timeout=120)  # ingest_sdk(), as run.py has it
    return k, ws


def folder(ws: Path, name: str) -> str:
    d = ws / name
    d.mkdir(exist_ok=True)
    return str(d)


def cpu_turn(k: Kernel, agent: str, chunks: int, rate: int) -> float:
    """Kernel CPU seconds per chunk across one ``stream`` turn (+1 s for the last redraws)."""
    k.drain(0.3)
    c0 = k.cpu()
    k.run(f"await {agent}.send('stream {chunks} of 20 at {rate}/s')", after=1.0)
    return (k.cpu() - c0) / chunks


# -- one run of one tree ------------------------------------------------------------------------
def one_run(tree: Path, cfg: dict, first: bool, r: dict[str, float]) -> None:
    """Fill ``r`` (what was measured stays there if a cell fails)."""
    with environment(tree) as (scratch, blast):
        # K1: no view
        k, ws = new_kernel(scratch, "noview")
        try:
            k.run(f"x = get_squad().start('fake', cwd={folder(ws, 'x')!r})\nawait _settle(x)\n"
                  "await x.send('hello')", timeout=120)
            r["e_cpu_noview"] = cpu_turn(k, "x", cfg["cpu_chunks"], cfg["cpu_rate"])
            mem, _ = k.result(f"await _memory(x, {cfg['mem_turns']})")
            r["d_mem_noview"] = mem["bytes"] / 2**20 / mem["items"] * 1000
            k.run(f"bx = get_squad().start('blast', cwd={folder(ws, 'bx')!r})\nawait _settle(bx)\n"
                  "await bx.send('blast 100')", timeout=120)
            n = cfg["ingest"]
            sdk, _ = k.result(f"print('RESULT', await _ingest_sdk3({n}, {blast!r}))")
            ours, _ = k.result(f"print('RESULT', await _ingest(bx, {n}))")
            r["f_ingest_noview"] = n / ours
            r["f_ingest_sdk_k1"] = n / sdk
        finally:
            k.shutdown()
        # K2: views
        k, ws = new_kernel(scratch, "views")
        try:
            started = 0
            k.run(f"a = %escouade fake --cwd {folder(ws, 'a')}\nawait _settle(a)", timeout=120)
            started += 1
            k.drain(0.5)
            n, w, rate = cfg["prose"]
            text, comms = k.run(f"t = a.send('stream {n} of {w} at {rate}/s')\nawait t\nprint('LEN', len(t.text))",
                                after=1.0)
            length = int(text.rsplit("LEN", 1)[1].split()[0])
            r["a_bytes_per_text"] = total(comms) / length
            r["a_msgs"] = len(comms)
            for key, spec in (("b", cfg["code"]), ("b_slow", cfg["code_slow"] if first else None)):
                if spec is None:
                    continue
                size, rate = spec
                name = key.replace("_", "")
                k.run(f"{name} = %escouade fake --cwd {folder(ws, name)}\nawait _settle({name})", timeout=120)
                started += 1
                k.drain(0.5)
                text, comms = k.run(f"t = {name}.send('stream code {size} at {rate}/s')\nawait t\n"
                                    "print('LEN', len(t.text))", after=1.0, timeout=600)
                length = int(text.rsplit("LEN", 1)[1].split()[0])
                r[f"{key}_bytes"] = total(comms)
                r[f"{key}_ratio"] = total(comms) / length
            k.run(f"c = %escouade fake --cwd {folder(ws, 'c')}\nawait _settle(c)\nawait c.send('hello')", timeout=120)
            started += 1
            k.drain(1.0)
            _, comms = k.run("t = c.send('edit notes.txt')\ncard = await c.next_permission(timeout=30)\n"
                             "card.choose('allow_once')\nawait t", after=1.0)
            r["c_turn_opens"] = opens(comms)
            r["c_turn_models"] = models(comms)
            name = k.run("print('NAME', c.name)")[0].rsplit("NAME", 1)[1].strip()
            k.drain(0.5)
            _, comms1 = k.run(f"%%escouade {name}\nedit notes.txt")
            _, comms2 = k.run("card = await c.next_permission(timeout=30)\ncard.choose('allow_once')\n"
                              "await asyncio.sleep(0.1)\nawait _idle(c)", after=1.0)
            r["c_cell_opens"] = opens(comms1) + opens(comms2)
            r["c_cell_models"] = models(comms1 + comms2)
            k.run(f"m = %escouade fake --cwd {folder(ws, 'm')}\nawait _settle(m)\nawait m.send('hello')", timeout=120)
            started += 1
            k.drain(1.0)
            mem, _ = k.result(f"await _memory(m, {cfg['mem_turns']})", after=1.0)
            r["d_mem_view"] = mem["bytes"] / 2**20 / mem["items"] * 1000
            k.run(f"bl = %escouade blast --cwd {folder(ws, 'bl')}\nawait _settle(bl)\nawait bl.send('blast 100')",
                  timeout=120)
            started += 1
            k.drain(1.0)
            n = cfg["ingest"]
            sdk, _ = k.result(f"print('RESULT', await _ingest_sdk3({n}, {blast!r}))")
            ours, comms = k.result(f"print('RESULT', await _ingest(bl, {n}))", after=1.0)
            r["f_ingest_view"] = n / ours
            r["f_ingest_sdk"] = n / sdk
            r["f_ratio"] = r["f_ingest_view"] / r["f_ingest_sdk"]
            if comms:  # until the view's last message reached the client (the cell's start: when it was sent)
                r["f_ingest_shown"] = n / (comms[-1]["at"] - k.sent)
                r["f_ratio_shown"] = r["f_ingest_shown"] / r["f_ingest_sdk"]
            more = cfg["squad"] - started
            for i in range(max(0, more)):
                (ws / f"s{i}").mkdir(exist_ok=True)
            if more > 0:
                k.run(f"more = [get_ipython().run_line_magic('escouade', f'fake --cwd {ws}/s{{i}}') "
                      f"for i in range({more})]\nawait _settle(*more)", timeout=300)
            k.drain(1.0)
            count = k.result("print('RESULT', len(get_squad().agents))")[0]
            _, comms = k.run("%escouade squad", after=1.0)
            r["c_squad_opens"] = opens(comms)
            r["c_squad_models"] = models(comms)
            r["c_squad_agents"] = count
        finally:
            k.shutdown()
        # K3: an agent view and a squad view
        k, ws = new_kernel(scratch, "squad")
        try:
            k.run(f"v = %escouade fake --cwd {folder(ws, 'v')}\nawait _settle(v)", timeout=120)
            k.run("%escouade squad")
            k.run("await v.send('hello')")
            r["e_cpu_view"] = cpu_turn(k, "v", cfg["cpu_chunks"], cfg["cpu_rate"])
            for i in range(cfg["squad"] - 1):
                (ws / f"s{i}").mkdir()
            k.run(f"more = [get_ipython().run_line_magic('escouade', f'fake --cwd {ws}/s{{i}}') "
                  f"for i in range({cfg['squad'] - 1})]\nawait _settle(*more)", timeout=300)
            k.run("await v.send('hello')")
            r["e_cpu_squad10"] = cpu_turn(k, "v", cfg["cpu_chunks"], cfg["cpu_rate"])
        finally:
            k.shutdown()
    r["e_ratio_view"] = r["e_cpu_view"] / r["e_cpu_noview"]
    r["e_ratio_squad10"] = r["e_cpu_squad10"] / r["e_cpu_noview"]


# -- the table ----------------------------------------------------------------------------------
def fmt(values: list[float], unit: str = "", digits: int = 2) -> str:
    if not values:
        return "—"
    med = statistics.median(values)
    s = f"{med:,.{digits}f}{unit}"
    if len(values) > 1:
        s += f" [{min(values):,.{digits}f}–{max(values):,.{digits}f}]"
    return s


def build_rows(test: list[dict], base: list[dict], cfg: dict) -> list[tuple[str, str, str, str, str]]:
    def col(runs: list[dict], key: str, scale: float = 1.0) -> list[float]:
        return [r[key] * scale for r in runs if isinstance(r.get(key), (int, float))]

    n, w, rate = cfg["prose"]
    size, crate = cfg["code"]
    rows = []

    def add(label: str, key: str, goal: str, unit: str = "", digits: int = 2, scale: float = 1.0,
            ok: Any = None) -> None:
        t, b = col(test, key, scale), col(base, key, scale)
        ratio = f"{statistics.median(t) / statistics.median(b):.2f}×" if t and b and statistics.median(b) else "—"
        mark = ""
        if ok is not None and t:
            mark = " ✓" if ok(statistics.median(t)) else " ✗"
        rows.append((label, fmt(t, unit, digits), fmt(b, unit, digits), ratio, goal + mark))

    add(f"(a) comm bytes per text byte, {n} chunks of {w} at {rate}/s", "a_bytes_per_text", "≤ 1.5 (today 21.5)",
        ok=lambda v: v <= 1.5)
    add("(a) comm messages in that turn", "a_msgs", "", digits=0)
    add(f"(b) comm bytes, a {size // 1000} KB code block at {crate}/s", "b_bytes", "≤ 1.5× its size",
        " KB", 0, 1e-3)
    add(f"(b) …÷ the block's size ({crate}/s)", "b_ratio", "≤ 1.5 (today 19.2 MB)", "×", ok=lambda v: v <= 1.5)
    if cfg["code_slow"]:
        s2, r2 = cfg["code_slow"]
        add(f"(b) comm bytes, a {s2 // 1000} KB code block at {r2}/s (first run)", "b_slow_bytes",
            "≤ 1.5× its size", " KB", 0, 1e-3)
        add(f"(b) …÷ the block's size ({r2}/s)", "b_slow_ratio", "≤ 1.5 (today 19.2 MB)", "×",
            ok=lambda v: v <= 1.5)
    add("(c) comm_open in one edit turn (reply, tool call, permission card)", "c_turn_opens",
        "0 per turn (today ~46)", digits=0, ok=lambda v: v == 0)
    add("(c) comm_open for one `%%escouade` edit cell (its turn view, answered)", "c_cell_opens",
        "1 (the view; today 96)", digits=0, ok=lambda v: v <= 1)
    add(f"(c) comm_open for `%escouade squad` with {cfg['squad']} agents", "c_squad_opens",
        "1 (today 172)", digits=0, ok=lambda v: v <= 1)
    add("(d) kernel memory per 1,000 items, view displayed", "d_mem_view", "≤ 3 MiB (today 23.75)", " MiB",
        ok=lambda v: v <= 3)
    add("(d) kernel memory per 1,000 items, no view", "d_mem_noview", "", " MiB")
    add(f"(e) kernel CPU per chunk, no view ({cfg['cpu_chunks']} at {cfg['cpu_rate']}/s)", "e_cpu_noview", "",
        " µs", 0, 1e6)
    add("(e) kernel CPU per chunk, agent view + squad view", "e_cpu_view", "", " µs", 0, 1e6)
    add("(e) …÷ no view", "e_ratio_view", "≤ 1.3 (today 2.3)", "×", ok=lambda v: v <= 1.3)
    add(f"(e) kernel CPU per chunk, agent view + squad view of {cfg['squad']} agents", "e_cpu_squad10", "",
        " µs", 0, 1e6)
    add("(e) …÷ no view", "e_ratio_squad10", "≤ 1.3 (today 6)", "×", ok=lambda v: v <= 1.3)
    add(f"(f) ingest, {cfg['ingest']} updates, view displayed", "f_ingest_view", "", "/s", 0)
    add("(f) ingest, bare SDK in the same kernel", "f_ingest_sdk", "", "/s", 0)
    add("(f) …view ÷ bare SDK", "f_ratio", "≥ 2 (today 1.04)", "×", ok=lambda v: v >= 2)
    add("(f) ingest, view displayed, until its last comm message reached the client", "f_ingest_shown", "",
        "/s", 0)
    add("(f) …÷ bare SDK", "f_ratio_shown", "≥ 2 (today 1.04)", "×", ok=lambda v: v >= 2)
    add("(f) ingest, no view (agent of K1)", "f_ingest_noview", "", "/s", 0)
    return rows


def table(rows, test_label: str, base_label: str) -> str:
    out = [f"| measure | {test_label} | {base_label} | ratio | goal (issue 16) |", "| --- | --- | --- | --- | --- |"]
    out += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows]
    return "\n".join(out)


def write_section(body: str) -> None:
    path = HERE / "RESULTS.md"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    start = text.find(SECTION)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + body.rstrip("\n") + "\n"
    else:
        end = text.find("\n## ", start + len(SECTION))
        rest = text[end + 1:] if end >= 0 else ""
        text = text[:start] + body.rstrip("\n") + "\n" + ("\n" + rest if rest else "")
    path.write_text(text, encoding="utf-8")
    print(f"wrote the section {SECTION!r} of {path}")


def describe(tree: Path) -> str:
    import subprocess

    try:
        rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--", "escouade_nb", "widgets"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return str(tree)
    return f"`{tree}` ({rev}{' + edits' if dirty else ''})"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", type=Path, default=ROOT, help="the tree under test (default: this checkout)")
    p.add_argument("--base", type=Path, help="the baseline tree (a worktree of today's views)")
    p.add_argument("--runs", type=int, help="runs per tree (default 3; --quick: 1)")
    p.add_argument("--quick", action="store_true", help="1 run each, shorter streams (a smoke test)")
    p.add_argument("--json", type=Path, help="write the raw figures there")
    p.add_argument("--write", action="store_true", help="write the table into benchmarks/RESULTS.md")
    p.add_argument("--from-json", type=Path, help="no run: the table of a --json file (with --write: RESULTS.md)")
    args = p.parse_args(argv)
    if args.from_json:
        return render(json.loads(args.from_json.read_text()), args.write)
    if args.base is None:
        p.error("--base is required (a tree of today's views, e.g. git worktree add /tmp/esc-base 8addebc)")
    cfg = dict(QUICK if args.quick else FULL)
    if args.runs:
        cfg["runs"] = args.runs
    trees = {"test": args.tree.resolve(), "base": args.base.resolve()}
    for tree in trees.values():
        if not (tree / "escouade_nb" / "__init__.py").exists():
            p.error(f"{tree} is not a tree of the package")
    results: dict[str, list[dict]] = {"test": [], "base": []}
    labels = {"test": f"under test: {describe(trees['test'])}", "base": f"baseline: {describe(trees['base'])}"}
    started = time.monotonic()
    for i in range(cfg["runs"]):
        for label in ("base", "test"):  # interleaved, so drift on the machine hits both
            t0 = time.monotonic()
            r: dict[str, Any] = {}
            results[label].append(r)
            try:
                one_run(trees[label], cfg, i == 0, r)
            except Exception as exc:  # one tree's failure does not hide the other's figures
                r["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            print(f"run {i + 1}/{cfg['runs']} {label}: {time.monotonic() - t0:.0f} s "
                  f"{json.dumps({k: round(v, 6) if isinstance(v, float) else v for k, v in r.items()})}",
                  file=sys.stderr, flush=True)
    seconds = time.monotonic() - started
    cmd = "python benchmarks/views.py --base " + str(args.base) + (" --quick" if args.quick else "") + \
        (f" --tree {args.tree}" if args.tree.resolve() != ROOT else "") + \
        (f" --runs {args.runs}" if args.runs else "") + " --write"
    data = {"cfg": cfg, "trees": {k: str(v) for k, v in trees.items()}, "labels": labels, "results": results,
            "seconds": seconds, "command": cmd}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=1))
    return render(data, args.write)


def render(data: dict, write: bool) -> int:
    """Print the table of one run's figures (``data`` as written by --json); ``write``: into RESULTS.md."""
    import datetime
    import platform

    cfg, results = data["cfg"], data["results"]
    labels = data.get("labels") or {k: f"{k}: {v}" for k, v in data["trees"].items()}
    body = table(build_rows(results["test"], results["base"], cfg), labels["test"], labels["base"])
    seen = [(label, key, r[key]) for label in ("test", "base") for r in results[label][:1]
            for key in ("c_turn_models", "c_cell_models", "c_squad_models") if r.get(key)]
    if seen:
        body += "\n\nModels opened (first run): " + "; ".join(
            f"{label} {key[2:-7]}: {names}" for label, key, names in seen) + "."
    errors = [f"{label} run {i + 1}: {r['error']}" for label in ("test", "base")
              for i, r in enumerate(results[label]) if r.get("error")]
    if errors:
        body += "\n\nFailed runs (their figures up to the failure are kept):\n" + "\n".join(f"- {e}" for e in errors)
    print(body)
    if write:
        text = (f"{SECTION}\n\n"
                f"{datetime.date.today().isoformat()}. Command: `{data.get('command', 'python benchmarks/views.py')}` "
                f"({data.get('seconds', 0):.0f} s; {cfg['runs']} run(s) per tree, interleaved; {platform.machine()}, "
                f"{os.cpu_count()} cores, Python {platform.python_version()}). Median [min–max] over the runs; "
                "ratio = under test ÷ baseline. Real kernels (`jupyter_client`), `PYTHONPATH` = the tree, scratch "
                "cwd and HOME; both trees use this checkout's fake agent. See `benchmarks/views.py`'s docstring "
                "for what each figure is.\n\n"
                f"{body}\n\n" + NOTES)
        write_section(text)
    return 0


NOTES = """Notes
- *comm bytes*: every iopub `comm_open`, `comm_msg` and `comm_close` from the cell that sends the prompt
  (`t = a.send(...)`, `await t`) until 1 s after it returned; a message is the JSON of its header,
  parent_header, metadata and content plus its binary buffers (about its websocket frame). Divided by
  `len(t.text)`. The prose is `stream N of W at R/s` of the fake agent (words, a blank line every ~400
  characters); the code block is `stream code N at R/s` (one fenced python block, ~20-byte chunks). The
  60 KB block is measured at 400 chunks/s in every run (7.5 s) and at 100/s (a model's pace, 30 s) in the
  first run only. The fake agent's prose is drawn from ~220 words (zlib: ~2.8×; this README: 2.4×), its code
  from three function shapes with varied names, numbers and comments (zlib: ~4.9×; `engine/agent.py`: 3.3×):
  a view that compresses its batches does somewhat better on this code block than on real code.
- *widget models*: `comm_open` counted in the same window. The edit turn is the fake agent's `edit notes.txt`
  (a reply, one `edit` tool call with a diff, a permission card answered from code with
  `card.choose("allow_once")`): the fake agent has no scenario with two tool calls in one turn. The
  `%%escouade` figure is the cell plus the cell answering its card. The squad figure is the `%escouade squad`
  cell in a kernel with 10 agents (each with its view already displayed).
- *memory*: `tracemalloc` in the kernel, started after a `gc.collect()`, read after N short turns
  (`hello`: a prompt and an 8-chunk reply, so 2 items a turn), 0.5 s and another `gc.collect()`; bytes
  still allocated ÷ the items added to `agent.conversation.items`, per 1,000. "No view": an agent started
  with `get_squad().start("fake")` (no view at all) in another kernel.
- *CPU*: the kernel process's CPU time (the sum of its threads' `/proc/PID/task/TID/schedstat`, in ns;
  `/proc/PID/stat`'s 10 ms ticks are too coarse for a 0.1–0.3 s figure) across a
  `stream 2000 of 20 at 1000/s` turn plus 1 s, ÷ 2,000. "agent view + squad view": an agent displayed with
  `%escouade fake` and one `%escouade squad` (1 agent, then 10 agents, each with its own view, one streaming).
- *ingest*: run.py's approach inside the kernel: `benchmarks/blast_agent.py` (pre-serialised lines) as a user
  plugin harness `blast` displayed with `%escouade blast`, timed from `send` until `await` returns (the
  view's last redraw after the turn's end is not in the time), and also until the view's last comm message
  reached the client (timed from the cell's `execute_request`); the bare SDK (`acp.spawn_agent_process`, a
  no-op client) timed in the same kernel (median of 3 there: it varies 3× from one kernel to the next).
"""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
