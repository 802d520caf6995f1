"""Ingest in a real kernel, side by side in one kernel: the blast agent's ``session/update``
notifications per second with the agent view displayed (``%escouade blast``), without a view
(``get_squad().start("blast")``), and the bare ACP SDK client (a no-op handler) — issue 23's
goal: with the view, ≥ 2× the SDK.

    python benchmarks/ingest_view.py                   # 3 rounds of each, n = 20,000
    python benchmarks/ingest_view.py --tree /tmp/before   # another tree (its kernel's PYTHONPATH)
    python benchmarks/ingest_view.py --profile 15      # also: the kernel's top functions (cProfile)
                                                       # during one ingest with the view

The three are interleaved round by round in the same kernel (the SDK's rate varies from one
kernel to the next); each figure is the median. "view, shown": until the view's last comm
message reached the client (from the cell's execute_request), i.e. the view caught up. Also the
kernel process's CPU time per update (``views.Kernel.cpu``: its threads' schedstat), which a
loaded machine disturbs far less than the rates (the view's includes the 1 s after the turn).
Machinery (kernel, scratch environment, blast agent as a user plugin) from ``views.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from views import environment, folder, new_kernel  # noqa: E402  (views puts tests/ on the path)

PROFILE = r'''
import cProfile, pstats, io
_p = cProfile.Profile()
_p.enable()
await _ingest(bl, {n})
_p.disable()
_s = io.StringIO()
pstats.Stats(_p, stream=_s).sort_stats("tottime").print_stats({top})
print(_s.getvalue())
'''


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tree", type=Path, default=HERE.parent, help="the package's tree (PYTHONPATH of the kernel)")
    ap.add_argument("--profile", type=int, default=0, help="print the kernel's top N functions by own time")
    ap.add_argument("--json", type=Path, help="write the figures there (rates per s, CPU in µs per update)")
    args = ap.parse_args(argv)
    n = args.n
    rates: dict[str, list[float]] = {"view": [], "shown": [], "noview": [], "sdk": []}
    cpu: dict[str, list[float]] = {"view": [], "noview": [], "sdk": []}  # kernel CPU µs per update
    with environment(args.tree) as (scratch, blast):
        k, ws = new_kernel(scratch, "ingest")
        try:
            k.run(f"bl = %escouade blast --cwd {folder(ws, 'bl')}\nawait _settle(bl)\nawait bl.send('blast 100')",
                  timeout=120, after=1.0)
            k.run(f"bx = get_squad().start('blast', cwd={folder(ws, 'bx')!r})\nawait _settle(bx)\n"
                  "await bx.send('blast 100')", timeout=120)
            for _ in range(args.rounds):
                c0 = k.cpu()
                sdk, _ = k.result(f"print('RESULT', await ingest_sdk({n}, {blast!r}, None))")
                cpu["sdk"].append((k.cpu() - c0) / n * 1e6)
                rates["sdk"].append(n / sdk)
                c0 = k.cpu()
                ours, comms = k.result(f"print('RESULT', await _ingest(bl, {n}))", after=1.0)
                cpu["view"].append((k.cpu() - c0) / n * 1e6)
                rates["view"].append(n / ours)
                if comms:
                    rates["shown"].append(n / (comms[-1]["at"] - k.sent))
                c0 = k.cpu()
                bare, _ = k.result(f"print('RESULT', await _ingest(bx, {n}))")
                cpu["noview"].append((k.cpu() - c0) / n * 1e6)
                rates["noview"].append(n / bare)
            if args.profile:
                text, _ = k.run(PROFILE.format(n=n, top=args.profile), after=1.0)
                print(text)
        finally:
            k.shutdown()
    med = {key: statistics.median(v) for key, v in rates.items() if v}
    print(f"| ingest, {n} updates (median of {args.rounds}, one kernel) | updates/s | ÷ bare SDK "
          "| kernel CPU per update (incl. 1 s after, for the view) | SDK's CPU ÷ this |")
    print("| --- | --- | --- | --- | --- |")
    for key, label in (("view", "agent view displayed (until the turn's end)"),
                       ("shown", "agent view displayed (until its last comm message)"),
                       ("noview", "no view"), ("sdk", "bare SDK client (no-op handler)")):
        if key in med:
            spread = f"[{min(rates[key]):,.0f}–{max(rates[key]):,.0f}]"
            c = statistics.median(cpu[key]) if cpu.get(key) else None
            cpu_cols = f"{c:.1f} µs | {statistics.median(cpu['sdk']) / c:.2f}×" if c else " | "
            print(f"| {label} | {med[key]:,.0f}/s {spread} | {med[key] / med['sdk']:.2f}× | {cpu_cols} |")
    if args.json:
        args.json.write_text(json.dumps({"n": n, "rounds": args.rounds, "rates": rates, "cpu_us": cpu}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
