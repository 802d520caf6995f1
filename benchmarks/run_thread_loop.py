"""The kernel's loop during a long synchronous ``run_code`` (issue 36): is it free?

    python benchmarks/run_thread_loop.py                  # 3 s per run, 3 rounds
    python benchmarks/run_thread_loop.py --seconds 10 --rounds 5 --json out.json

One process, one loop: the kernel's MCP server (``KernelServer(namespace=...)``), the ``mcp``
SDK's client over real HTTP on loopback, and a ticker task that wakes every 5 ms and records
how late it woke (a stall of the loop). Each round calls ``run_code`` with, in turn:

* baseline: ``await asyncio.sleep(T)`` — code that awaits: it runs on the loop and leaves it
  free by construction (the ticker's jitter with the same HTTP traffic);
* a synchronous run that sleeps: ``time.sleep(0.02)`` in a loop for T s (runs in its own thread);
* a synchronous CPU-bound run: a pure-Python counting loop for T s (its own thread: it shares
  the GIL with the loop; the interpreter hands the GIL over every 5 ms, ``sys.getswitchinterval``);
* the same CPU-bound code held on the loop (one ``await asyncio.sleep(0)`` first puts it on the
  loop, as every ``run_code`` ran before issue 36): the loop is blocked for T s.

Figures: the ticker's longest lateness and its p99 during each run, against the baseline's;
and the GIL's cost to the code: the CPU-bound run's count in its thread against the same
code's count on the loop (1.0: no cost). Nothing is asserted: figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests"), str(HERE.parent / "tests" / "kernel_mcp")]  # the tests' SDK client helper

CASES = {
    "baseline: awaiting run (on the loop)": "import asyncio\nawait asyncio.sleep(T)",
    "synchronous run, sleeping (its thread)": "import time\nt0 = time.monotonic()\n"
                                              "while time.monotonic() - t0 < T:\n    time.sleep(0.02)",
    "synchronous run, CPU-bound (its thread)": "import time\ncount = 0\nt0 = time.monotonic()\n"
                                               "while time.monotonic() - t0 < T:\n    count += 1\ncount",
    "CPU-bound held on the loop (before issue 36)": "import asyncio, time\nawait asyncio.sleep(0)\ncount = 0\n"
                                                    "t0 = time.monotonic()\nwhile time.monotonic() - t0 < T:\n"
                                                    "    count += 1\ncount",
}


class Owner:
    name = "bench"

    async def ask_run_code(self, code: str) -> None:
        return None


async def ticked(job) -> tuple[list[float], object]:
    lates: list[float] = []
    stop = asyncio.Event()

    async def tick() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            lates.append(time.perf_counter() - t - 0.005)

    ticker = asyncio.ensure_future(tick())
    try:
        result = await job
    finally:
        stop.set()
        await ticker
    return lates, result


async def main(seconds: float, rounds: int) -> dict[str, dict[str, float]]:
    from test_kernel_server import mcp_client, text_of

    from escouade_nb.kernel_mcp.server import KernelServer

    server = await KernelServer(namespace={}).start()
    figures: dict[str, dict[str, list[float]]] = {name: {"longest": [], "p99": [], "count": []} for name in CASES}
    try:
        async with mcp_client(server.url, server.grant(Owner()).token) as session:
            await session.call_tool("run_code", {"code": "1"})  # warm
            for _ in range(rounds):
                for name, code in CASES.items():
                    lates, got = await ticked(session.call_tool("run_code", {"code": code.replace("T", str(seconds))}))
                    lates.sort()
                    figures[name]["longest"].append(lates[-1] * 1000)
                    figures[name]["p99"].append(lates[int(len(lates) * 0.99)] * 1000)
                    text = text_of(got)
                    if "result:" in text:
                        figures[name]["count"].append(float(text.split("result:\n")[1].split()[0]))
    finally:
        await server.aclose()
    return {name: {k: statistics.median(v) for k, v in f.items() if v} for name, f in figures.items()}


def report(out: dict[str, dict[str, float]], seconds: float) -> None:
    base = out["baseline: awaiting run (on the loop)"]
    print(f"{'run_code of ' + format(seconds, 'g') + ' s':<48} {'longest stall':>14} {'p99':>9}  vs baseline")
    for name, f in out.items():
        print(f"{name:<48} {f['longest']:>11.1f} ms {f['p99']:>6.1f} ms  "
              f"{f['longest'] / max(base['longest'], 0.001):.1f}× longest, "
              f"{f['p99'] / max(base['p99'], 0.001):.1f}× p99")
    thread = out["synchronous run, CPU-bound (its thread)"].get("count")
    held = out["CPU-bound held on the loop (before issue 36)"].get("count")
    if thread and held:
        print(f"GIL's cost to the code: {thread:,.0f} counts in its thread vs {held:,.0f} on the loop "
              f"= {thread / held:.2f}× the speed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = asyncio.run(main(args.seconds, args.rounds))
    report(result, args.seconds)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
