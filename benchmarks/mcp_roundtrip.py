"""The kernel's MCP server in a real kernel: a tool call's round trip, and what the server
costs the kernel.

    python benchmarks/mcp_roundtrip.py                           # 300 calls, 3 fresh kernels
    python benchmarks/mcp_roundtrip.py --calls 500 --kernels 5 --json out.json

Round trip (one kernel; the client is this process, as an agent is another process): the
kernel holds a 1,000 × 5 pandas DataFrame and runs ``KernelServer.shared()``; then, in
rounds so that each kind sees the same noise, (1) ``call_tool("inspect_variable", df)``
with the ``mcp`` SDK's ``ClientSession`` over its streamable-HTTP client, (2) the same
``tools/call`` POSTed raw with httpx2 (the MCP server without the SDK's client), (3) the
baseline: a bare authorised HTTP GET of an unrouted path of the same server (uvicorn, the
bearer check and Starlette's 404: the HTTP floor), (4) the raw ``tools/call`` of an int (``small = 41``:
the same path with next to no work in the tool, the DataFrame's is pandas formatting its head), (5) the same
call of an int asking for progress (``_meta.progressToken``): the SDK's session answers it, the road every call
took before the gate answered the read tools itself (``DirectCalls``); and, in the kernel, the DataFrame tool's
own work (``summarize`` + ``summary_text``, median of 60). p50/p99 of each, after 20 warm-up rounds;
the SDK client's first call of the process is reported apart.

Cost (``--kernels`` fresh kernels, each: ``%load_ext escouade_nb`` first, as a user has):
the kernel's RSS and module count before and after ``await KernelServer.shared()``; the
time of that first start, split into the imports (``mcp``, uvicorn; in a worker thread)
and the start itself; the longest stall of the kernel's loop meanwhile (a 5 ms ticker);
the kernel's CPU time over 5 s idle, without then with the server (uvicorn wakes every
0.1 s). Baseline for the time: ``%load_ext escouade_nb`` in the same kernel.
Nothing is asserted: figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))  # the real-kernel driver used by the tests

SERVE = r'''
import numpy as np, pandas as pd
from escouade_nb.kernel_mcp.server import KernelServer
df = pd.DataFrame(np.random.default_rng(0).normal(size=(1000, 5)), columns=list("abcde"))
small = 41
class _Owner:
    name = "bench"
    async def ask_run_code(self, code):
        return None
_server = await KernelServer.shared()
_grant = _server.grant(_Owner())
print("URL", _server.url)
print("TOKEN", _grant.token)
import time as _time
from escouade_nb.core import variables as _v
_work = []
for _ in range(60):  # the DataFrame's tool's own work (pandas formatting its head), as its reader thread does it
    _t = _time.perf_counter()
    _v.summary_text(_v.summarize("df", df, rows=5))
    _work.append(_time.perf_counter() - _t)
print("WORK", sorted(_work)[30])
'''

COST = r'''
import asyncio, json, os, sys, time
def _rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
def _cpu():
    t = os.times()
    return t.user + t.system
async def _idle_cpu(seconds):
    c0 = _cpu()
    await asyncio.sleep(seconds)
    return _cpu() - c0
class _Ticker:
    def __init__(self):
        self.worst = 0.0
        self.task = asyncio.get_running_loop().create_task(self.run())
    async def run(self):
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            self.worst = max(self.worst, time.perf_counter() - t - 0.005)
_out = {"idle_cpu_without": await _idle_cpu(IDLE)}
import escouade_nb.kernel_mcp.server as _ks
_rss0, _mods0 = _rss(), len(sys.modules)
_ticker = _Ticker()
await asyncio.sleep(0.1)
_ticker.worst = 0.0
_t0 = time.perf_counter()
await asyncio.to_thread(_ks.import_server_side)
_t1 = time.perf_counter()
_server = await _ks.KernelServer.shared()
_t2 = time.perf_counter()
await asyncio.sleep(0.2)
_ticker.task.cancel()
_out.update(import_s=_t1 - _t0, start_s=_t2 - _t1, stall_s=_ticker.worst, rss_before=_rss0, rss_after=_rss(),
            modules=len(sys.modules) - _mods0)
_out["idle_cpu_with"] = await _idle_cpu(IDLE)
await _ks.KernelServer.close_shared()
print("RESULT", json.dumps(_out))
'''


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def _stats(samples: list[float]) -> dict:
    return {"p50_ms": _pct(samples, 50) * 1e3, "p99_ms": _pct(samples, 99) * 1e3, "n": len(samples)}


async def _round_trips(url: str, token: str, calls: int, warmup: int = 20) -> dict:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    auth = {"Authorization": f"Bearer {token}"}
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    floor_url = url.rsplit("/", 1)[0] + "/bench-floor"
    sdk, raw, floor, small, session_path = [], [], [], [], []
    async with httpx2.AsyncClient(headers=auth, timeout=60) as http, \
            httpx2.AsyncClient(headers=auth, timeout=60) as bare:
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                t = time.perf_counter()
                await session.call_tool("inspect_variable", {"name": "df"})
                first_call = time.perf_counter() - t
                # a raw MCP session of its own, for the POSTs without the SDK's client
                init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                   "clientInfo": {"name": "bench", "version": "0"}}}
                answer = await bare.post(url, json=init, headers=accept)
                session_headers = {**accept, "Mcp-Session-Id": answer.headers["mcp-session-id"],
                                   "MCP-Protocol-Version": "2025-06-18"}
                await bare.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                headers=session_headers)
                call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                        "params": {"name": "inspect_variable", "arguments": {"name": "df"}}}
                call_small = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                              "params": {"name": "inspect_variable", "arguments": {"name": "small"}}}
                # the same call asking for progress: the SDK's session answers it (DirectCalls takes no _meta)
                call_session = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                "params": {"name": "inspect_variable", "arguments": {"name": "small"},
                                           "_meta": {"progressToken": 1}}}
                for i in range(warmup + calls):
                    t0 = time.perf_counter()
                    result = await session.call_tool("inspect_variable", {"name": "df"})
                    t1 = time.perf_counter()
                    answer = await bare.post(url, json=call, headers=session_headers)
                    t2 = time.perf_counter()
                    status = (await bare.get(floor_url)).status_code
                    t3 = time.perf_counter()
                    answer_small = await bare.post(url, json=call_small, headers=session_headers)
                    t4 = time.perf_counter()
                    answer_session = await bare.post(url, json=call_session, headers=session_headers)
                    t5 = time.perf_counter()
                    if result.is_error or answer.status_code != 200 or status != 404 or "41" not in answer_small.text \
                            or "41" not in answer_session.text:
                        raise RuntimeError(f"unexpected answers: {result.is_error}, {answer.status_code}, {status}")
                    if i >= warmup:
                        sdk.append(t1 - t0)
                        raw.append(t2 - t1)
                        floor.append(t3 - t2)
                        small.append(t4 - t3)
                        session_path.append(t5 - t4)
    return {"sdk": _stats(sdk), "raw": _stats(raw), "floor": _stats(floor), "small": _stats(small),
            "small_session": _stats(session_path),
            "first_call_s": first_call,
            "result_chars": len(result.content[0].text)}


def roundtrip(calls: int) -> dict:
    from kernel_client import Kernel

    k = Kernel(Path(tempfile.mkdtemp(prefix="escouade-bench-mcp-")))
    try:
        out = k.run(SERVE, timeout=120).text
        lines = dict(line.split(" ", 1) for line in out.splitlines() if line.startswith(("URL ", "TOKEN ", "WORK ")))
        trips = asyncio.run(_round_trips(lines["URL"], lines["TOKEN"], calls))
        trips["df_work_ms"] = float(lines["WORK"]) * 1e3
        return trips
    finally:
        k.shutdown()


def cost(kernels: int, idle: float = 5.0) -> dict:
    from kernel_client import Kernel

    runs = []
    for _ in range(kernels):
        k = Kernel(Path(tempfile.mkdtemp(prefix="escouade-bench-mcp-")))
        try:
            t0 = time.perf_counter()
            k.run("%load_ext escouade_nb")
            load_ext = time.perf_counter() - t0
            k.run("import asyncio, escouade_nb.magics as _m  # its thread done (issue 37): not in the idle CPU\n"
                  "await asyncio.to_thread(getattr(_m, 'loaded', lambda: None))", timeout=300)
            text = k.run(COST.replace("IDLE", repr(idle)), timeout=180).text
            result = json.loads(text.split("RESULT", 1)[1])
            result["load_ext_s"] = load_ext
            runs.append(result)
        finally:
            k.shutdown()

    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    return {"kernels": kernels, "idle_s": idle, "import_s": med("import_s"), "start_s": med("start_s"),
            "stall_s": max(r["stall_s"] for r in runs), "load_ext_s": med("load_ext_s"),
            "rss_before_mib": med("rss_before") / 2**20, "rss_after_mib": med("rss_after") / 2**20,
            "rss_added_mib": statistics.median((r["rss_after"] - r["rss_before"]) / 2**20 for r in runs),
            "modules": med("modules"), "idle_cpu_without_s": med("idle_cpu_without"),
            "idle_cpu_with_s": med("idle_cpu_with"), "runs": runs}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--kernels", type=int, default=3)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    trips = roundtrip(args.calls)
    costs = cost(args.kernels)
    for name, label in (("sdk", "SDK call_tool(inspect_variable)"), ("raw", "raw POST tools/call"),
                        ("small", "raw POST tools/call of an int"),
                        ("small_session", "the same, through the SDK's session"),
                        ("floor", "bare authorised GET (baseline)")):
        s = trips[name]
        print(f"{label:<34} p50 {s['p50_ms']:6.2f} ms   p99 {s['p99_ms']:6.2f} ms   ({s['n']} calls)")
    print(f"{'the DataFrame tool own work':<34} {trips['df_work_ms']:.2f} ms (pandas formatting its head)")
    print(f"{'first SDK call of the process':<34} {trips['first_call_s']:.2f} s")
    print(f"{'server start, fresh kernel':<34} imports {costs['import_s']:.2f} s"
          f" + start {costs['start_s'] * 1e3:.0f} ms (longest loop stall {costs['stall_s'] * 1e3:.0f} ms);"
          f" %load_ext escouade_nb {costs['load_ext_s']:.2f} s")
    print(f"{'kernel RSS':<34} {costs['rss_before_mib']:.1f} MiB -> {costs['rss_after_mib']:.1f} MiB "
          f"(+{costs['rss_added_mib']:.1f} MiB, +{costs['modules']:.0f} modules)")
    idle = f"idle kernel CPU over {costs['idle_s']:g} s"
    print(f"{idle:<34} {costs['idle_cpu_without_s']:.3f} s without, "
          f"{costs['idle_cpu_with_s']:.3f} s with the server")
    if args.json:
        args.json.write_text(json.dumps({"roundtrip": trips, "cost": costs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
