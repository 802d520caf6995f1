"""Bytes of comm per view with and without escouade_nb's JupyterLab extension, side by side in
the same run (issue 23, "the front-end's weight"), in real kernels.

    python benchmarks/view_weight.py              # 1 run
    python benchmarks/view_weight.py --runs 3 --turns 20 --idle 10

Two fresh kernels of this checkout, the same cells in each: K-ext gets, right after
``%load_ext escouade_nb``, the hello a notebook page with the extension sends (a ``comm_open`` on
``escouade_nb.notebook`` from the client: ``{"v": 1, "client", "hello": {"path", "panel"}}``,
exactly the page's message), so its views carry the light module; K-plain gets none (VS Code,
Colab, nbclient, a page without the extension), so its views carry ``escouade.js`` and
``escouade.css`` in their model (anywidget's per-model module). Measured per kernel:

- ``%escouade fake``: the agent view's ``comm_open`` bytes;
- N ``%%escouade`` cells (``stream 360 of 5 at 1000/s``: ~1.8 KB of text each): every iopub comm
  message from each cell to 1 s after it (opens, ops, closes), ÷ the turns' text bytes;
- M idle agent views (``%escouade fake --as aI``): their ``comm_open`` bytes, per view.

"beyond its content" = a view's ``comm_open`` (the module, the traits): what a view costs before
the first byte of its conversation. Sizes: the JSON of a message's header, parent_header,
metadata and content plus its buffers (about its websocket frame), as in views.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from views import environment, folder, new_kernel, total  # noqa: E402  (views puts tests/ on the path)

HELLO_TARGET = "escouade_nb.notebook"


def say_hello(k) -> None:
    """The page's hello, as escouade_nb's extension sends it (a comm of the page's own)."""
    kc = k.kc
    msg = kc.session.msg("comm_open", {"comm_id": uuid.uuid4().hex, "target_name": HELLO_TARGET,
                                       "data": {"v": 1, "client": "bench-page",
                                                "hello": {"path": "bench.ipynb", "panel": "p1"}}})
    kc.shell_channel.send(msg)


def one_kernel(scratch: Path, label: str, hello: bool, turns: int, idle: int) -> dict:
    k, ws = new_kernel(scratch, label)
    try:
        if hello:
            say_hello(k)
            k.drain(0.5)
            known, _ = k.result("from escouade_nb.widgets import front\n"
                                "print('RESULT', json.dumps(front.extension_present()))")
            assert known, "the kernel did not take the page's hello"
        w = folder(ws, "w")
        _, comms = k.run(f"a = %escouade fake --cwd {w}\nawait a.ready()", after=0.5)
        agent_open = sum(c["bytes"] for c in comms if c["type"] == "comm_open")
        cell_bytes, text = 0, 0
        opens = []
        for _ in range(turns):
            _, comms = k.run("%%escouade fake\nstream 360 of 5 at 1000/s", after=1.0)
            cell_bytes += total(comms)
            opens += [c["bytes"] for c in comms if c["type"] == "comm_open"]
            text += 360 * 5  # the fake agent's `stream N of W`: N chunks of W characters (ASCII)
        idle_opens = []
        for i in range(idle):
            _, comms = k.run(f"a{i} = %escouade fake --as idle{i} --cwd {w}\nawait a{i}.ready()", after=0.3)
            idle_opens += [c["bytes"] for c in comms if c["type"] == "comm_open"]
        return {"agent_open": agent_open, "turn_open": statistics.median(opens) if opens else 0,
                "turns_bytes": cell_bytes, "turns_text": text, "idle_open": statistics.median(idle_opens),
                "idle_total": sum(idle_opens)}
    finally:
        k.shutdown()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--idle", type=int, default=10)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    res: dict[str, list[dict]] = {"ext": [], "plain": []}
    with environment(HERE.parent) as (scratch, _blast):
        for r in range(args.runs):
            for label, hello in (("ext", True), ("plain", False)):
                res[label].append(one_kernel(scratch, f"{label}{r}", hello, args.turns, args.idle))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))

    def med(label: str, key: str) -> float:
        return statistics.median(x[key] for x in res[label])

    rows = [
        ("agent view (`%escouade fake`): its comm_open", "agent_open", 1, "B"),
        ("a `%%escouade` cell's turn view: its comm_open (median)", "turn_open", 1, "B"),
        (f"an idle agent view: its comm_open (median of {args.idle})", "idle_open", 1, "B"),
        (f"{args.idle} idle agent views: their comm_opens", "idle_total", 1, "B"),
        (f"{args.turns} turns as `%%escouade` cells: all their comm messages", "turns_bytes", 1, "B"),
    ]
    print(f"| measure (median of {args.runs}) | extension present (hello) | without (anywidget's module) | ratio |")
    print("| --- | --- | --- | --- |")
    for name, key, _, _unit in rows:
        e, p = med("ext", key), med("plain", key)
        print(f"| {name} | {e:,.0f} B | {p:,.0f} B | {e / p:.3f}× |")
    for label in ("ext", "plain"):
        print(f"{label}: turns' text {med(label, 'turns_text'):,.0f} B; comm bytes per text byte "
              f"{med(label, 'turns_bytes') / max(1, med(label, 'turns_text')):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
