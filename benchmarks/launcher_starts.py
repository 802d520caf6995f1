"""Agents started elsewhere: N agents started at once through each launcher (``podman exec -i``, ``docker exec
-i`` through podman's Docker-API service, ``srun -N1 --unbuffered`` on a single-node Slurm) against N local ones,
in the same run, and the client's memory per agent (this process's RSS: the engine a kernel runs).

    python benchmarks/launcher_starts.py [--agents 20] [--json OUT]

Each start is ``Squad.start(…, via=…)``: the far side probed (the program located, its version read), then the
agent started under the far wrapper, ``initialize`` and ``session/new`` answered; the agents are
``blast_agent.py`` (stdlib only: it runs on the image's own Python). The places are the tests' own
(``tests/remote_places.py``): a place that cannot run here is left out with its one-line reason.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))


def rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def start_all(n: int, via: list[str]) -> tuple[float, float]:
    """Seconds for ``n`` agents to be ready through ``via`` (``[]``: local) and this process's RSS growth
    per agent (bytes), the agents then closed."""
    import gc

    from escouade_nb.engine.squad import Squad

    squad = Squad()
    gc.collect()
    before = rss()
    t0 = time.perf_counter()
    try:
        agents = [squad.start("blast", cwd=os.environ["BENCH_WS"], via=via or None) for _ in range(n)]
        await asyncio.gather(*(a.ready() for a in agents))
        elapsed = time.perf_counter() - t0
        gc.collect()
        per_agent = (rss() - before) / n
        await asyncio.gather(*(a.close() for a in agents))
    finally:
        await squad.aclose()
    return elapsed, per_agent


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    import pytest  # the places skip through pytest.skip: its exception is caught here

    import remote_places

    scratch = Path(tempfile.mkdtemp(prefix="escouade-bench-places-"))
    agent = scratch / "blast_agent.py"
    shutil.copy(HERE / "blast_agent.py", agent)
    (scratch / "ws").mkdir()
    plugins = scratch / "plugins" / "blast"
    plugins.mkdir(parents=True)
    (plugins / "escouade-plugin.json").write_text(json.dumps({
        "id": "dev.escouade_nb.bench.blast", "name": "Blast", "contributes": {"harnesses": [{
            "id": "blast", "name": "Blast", "locate": {"names": ["python3"]},
            "acp": {"args": [str(agent)], "fs": False}}]}}))
    os.environ.update(ESCOUADE_NB_PLUGINS_DIR=str(scratch / "plugins"), BENCH_WS=str(scratch / "ws"),
                      ESCOUADE_NB_TRANSCRIPTS_DIR=str(scratch / "transcripts"),
                      ESCOUADE_NB_MCP_CONFIG=str(scratch / "no-mcp.json"))
    results: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        places: dict[str, list[str]] = {"local": []}
        try:
            box = stack.enter_context(remote_places.podman_container(scratch))
            places["podman exec -i"] = box.launcher
            try:
                docker = stack.enter_context(remote_places.docker_service(box, scratch))
                os.environ.update(docker.env)
                places["docker exec -i"] = docker.launcher
            except pytest.skip.Exception as exc:
                skipped["docker exec -i"] = str(exc)
        except pytest.skip.Exception as exc:
            skipped["podman exec -i"] = str(exc)
        try:
            cluster = stack.enter_context(remote_places.slurm(scratch / "slurm"))
            places["srun -N1 --unbuffered"] = cluster.launcher
        except pytest.skip.Exception as exc:
            skipped["srun -N1 --unbuffered"] = str(exc)
        asyncio.run(start_all(2, []))  # warm: imports, the first discovery
        for name, via in places.items():
            elapsed, per_agent = asyncio.run(start_all(args.agents, via))
            results[name] = {"seconds": elapsed, "rss_per_agent": per_agent}
            print(f"{name:<24} {args.agents} agents ready in {elapsed:6.2f} s, "
                  f"{per_agent / 2**20:5.2f} MiB per agent here", flush=True)
    for name, why in skipped.items():
        print(f"{name:<24} skipped: {why}")
    shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"agents": args.agents, "results": results, "skipped": skipped}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
