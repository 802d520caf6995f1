"""The broker's added latency: 1,000 permission decisions with 3 fast rule plugins.

    python benchmarks/broker_latency.py [--decisions 1000] [--plugins 3] [--sizes 100,100000]

Three real plugin processes (a few lines of Python that answer ``allow`` at once) are
started by the host, as the squad does. Then, in the same run:

* **plugin round trip** — ``permissions/decide`` sent straight to one plugin over its
  pipes and answered: the plugins' own answer time, as the host sees it;
* **per plugin, in the broker** — each plugin's delay inside the broker's decisions;
* **broker: card settled** — from the policy being called with a card to the card's
  answer (normalising the request, asking the 3 plugins at once, merging: an ``allow``
  waits for all three, since a denial would win);
* **broker: policy returned** — the same, plus the journal (3 JSON lines).

The difference between the broker's figures and the plugin round trip is what the
broker adds. ``--sizes`` repeats the broker's figures with the request's command that
many characters long (rule plugins get every field whole: a 100 KB field is sent, and
read by each plugin, whole), and prints each against the first as a ratio. Not a test:
it prints a table.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from escouade_nb.core.conversation import Permission, ToolCall
from escouade_nb.permissions import Journal, PluginStates, RulePlugins
from escouade_nb.manifest.project import Project

PLUGIN = '''import json, sys
for raw in sys.stdin:
    msg = json.loads(raw)
    if msg.get("method") == "initialize":
        result = {"protocolVersion": 1, "capabilities": {}}
    elif msg.get("method") == "shutdown":
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": None}), flush=True)
        break
    else:
        result = {"decision": "allow"}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
'''

OPTIONS = [{"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
           {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"}]


class Card:
    def __init__(self, n: int, project: Project, size: int = 0) -> None:
        command = f"npm test -- --shard {n}"
        if size:
            command = (command + " # " + "x" * size)[:size]
        self.tool_call = ToolCall(f"t{n}", tool_call_id=f"c{n}", title=f"Run npm test {n}", kind="execute",
                                  raw_input={"command": command})
        self.permission = Permission(f"p{n}", tool_call=self.tool_call, options=list(OPTIONS))
        self.options = self.permission.options

        class _Agent:
            name = "bench"
            cwd = project.folder
            harness = None

        self.agent = _Agent()
        self.agent.project = project
        self.settled_at: float | None = None

    def choose(self, option: str, by: str = "you", message: str | None = None, reply: str | None = None) -> bool:
        if self.permission.state != "pending":
            return False
        self.permission.state = "selected"
        self.permission.option_id = option
        self.settled_at = time.perf_counter()
        return True

    def deny(self, by: str = "you", message: str | None = None, reply: str | None = None) -> bool:
        return self.choose("reject-once", by, message, reply)  # the seam's refusal (reject_once is offered)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def main(decisions: int, plugins: int, sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory(prefix="escouade-bench-") as tmp:
        root = Path(tmp)
        for i in range(plugins):
            folder = root / "plugins" / f"fast{i}"
            folder.mkdir(parents=True)
            (folder / "plugin.py").write_text(PLUGIN)
            (folder / "escouade-plugin.json").write_text(json.dumps({
                "id": f"bench.fast{i}", "name": f"Fast {i}", "permissions": {"decide": True},
                "program": {"python": "plugin.py"}}))
        rules = RulePlugins(journal=Journal(root / "journal"), states=PluginStates(root / "config.json"),
                            extra_dirs=sorted((root / "plugins").iterdir()))
        rules.start_soon()
        procs = [rules.host.processes[f"bench.fast{i}"] for i in range(plugins)]
        for p in procs:
            await asyncio.wait_for(p.wait_ready(), 30)
        project = Project.for_folder(root)
        try:
            params = {"request": {"id": "r", "kind": "command", "tool": "Bash", "input": {"command": "npm test"}},
                      "project": project.wire(), "agent": {"id": "a", "name": "bench"}}
            for _ in range(50):  # warm up
                await procs[0].call("permissions/decide", params)
                await rules.broker(Card(0, project))
            direct = []
            for _ in range(decisions):
                t0 = time.perf_counter()
                await procs[0].call("permissions/decide", params)
                direct.append((time.perf_counter() - t0) * 1000)
            by_size = {}
            for size in [0, *sizes]:
                settled, total, per_plugin = [], [], []
                for n in range(decisions):
                    card = Card(n, project, size)
                    t0 = time.perf_counter()
                    await rules.broker(card)
                    t1 = time.perf_counter()
                    assert card.permission.option_id == "allow-once", card.permission.state
                    settled.append((card.settled_at - t0) * 1000)
                    total.append((t1 - t0) * 1000)
                    per_plugin.extend(a.delay_ms for a in rules.broker.history[-1].answers.values())
                by_size[size] = (settled, total, per_plugin)
            settled, total, per_plugin = by_size.pop(0)
        finally:
            await rules.aclose()

    rows = [
        ("plugin round trip (direct call)", direct),
        (f"per plugin, in the broker ({plugins} at once)", per_plugin),
        ("broker: card settled", settled),
        ("broker: policy returned (+ journal)", total),
    ]
    print(f"{decisions} decisions, {plugins} fast plugins (allow), Python {sys.version.split()[0]}")
    print(f"{'':44} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for label, values in rows:
        print(f"{label:44} {pct(values, .5):8.3f} {pct(values, .99):8.3f} {statistics.fmean(values):8.3f}")
    print(f"{'broker adds (settled − round trip), p50/p99':44} {pct(settled, .5) - pct(direct, .5):8.3f} "
          f"{pct(settled, .99) - pct(direct, .99):8.3f}")
    if by_size:
        base = sizes[0]
        print(f"\nthe command {', '.join(f'{s:,}' for s in sizes)} characters long (sent whole to each plugin)")
        print(f"{'':44} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'p50 ×':>7}")
        for size, (s_settled, s_total, s_per) in by_size.items():
            for label, values in ((f"{size:,} chars: per plugin", s_per), (f"{size:,} chars: card settled", s_settled),
                                  (f"{size:,} chars: policy returned", s_total)):
                ratio = pct(values, .5) / pct({"per": by_size[base][2], "car": by_size[base][0],
                                               "pol": by_size[base][1]}[label.split(": ")[1][:3]], .5)
                print(f"{label:44} {pct(values, .5):8.3f} {pct(values, .99):8.3f} {statistics.fmean(values):8.3f} "
                      f"{ratio:7.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decisions", type=int, default=1000)
    ap.add_argument("--plugins", type=int, default=3)
    ap.add_argument("--sizes", default="", help="command lengths to compare, e.g. 100,100000 (first: the base)")
    args = ap.parse_args()
    asyncio.run(main(args.decisions, args.plugins, [int(x) for x in args.sizes.split(",") if x]))
