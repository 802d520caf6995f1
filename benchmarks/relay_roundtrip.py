"""A ``run_code`` round trip through the relay (the kernel's tools over the agent's own pipe) against the
same call made the way a local agent makes it (the kernel server's streamable HTTP), in the same run.

    python benchmarks/relay_roundtrip.py                 # 300 calls of each kind
    python benchmarks/relay_roundtrip.py --calls 500 --json out.json

One process plays the kernel: the kernel's MCP server (``KernelServer``) with a grant whose owner allows
every run at once (the card is not what is measured), its MCP-over-ACP channel answering the relay's
``mcp/*`` lines. The agent is a small program of this file run under the relay (its source sent over the
pipe, as for any launcher) through a command prefix (``sh -c 'exec "$@"' sh``: the launcher's cost is not
measured, only the relay's). It is given two servers in ``session/new``: the channel's ``acp`` entry, which
the relay rewrites into its stdio endpoint, and the kernel server's HTTP entry with its token. With the
``mcp`` SDK's own client on both, in alternating rounds after 20 warm-up rounds, it times
``tools/call run_code {"code": "x = 1"}``: relay (SDK stdio client → the relay's socket → the relay → the
pipe → the channel → the server's loop) vs local (SDK streamable-HTTP client → uvicorn → the server's
loop). Figures only (p50, p99, the ratio of the p50s; target ≤ 1.5×).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path

AGENT = r'''
import asyncio, json, sys, time
from contextlib import AsyncExitStack
import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

CALLS, WARMUP = int(sys.argv[1]), 20

async def main():
    line = sys.stdin.readline()
    request = json.loads(line)
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {"sessionId": "bench"}}) + "\n")
    sys.stdout.flush()
    stdio, http = request["params"]["mcpServers"]
    headers = {h["name"]: h["value"] for h in http["headers"]}
    async with AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(stdio_client(StdioServerParameters(
            command=stdio["command"], args=stdio["args"])))
        relayed = await stack.enter_async_context(ClientSession(read, write))
        await relayed.initialize()
        client = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=60))
        read, write, *_ = await stack.enter_async_context(streamable_http_client(http["url"], http_client=client))
        local = await stack.enter_async_context(ClientSession(read, write))
        await local.initialize()
        times = {"relay": [], "local": []}
        for i in range(WARMUP + CALLS):
            for kind, session in (("relay", relayed), ("local", local)):
                t = time.perf_counter()
                result = await session.call_tool("run_code", {"code": "x = 1"})
                spent = time.perf_counter() - t
                if result.is_error:
                    raise RuntimeError(f"{kind}: {result.content}")
                if i >= WARMUP:
                    times[kind].append(spent)
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "method": "_bench/result", "params": times}) + "\n")
    sys.stdout.flush()

asyncio.run(main())
'''


class _Owner:
    name = "bench"

    async def ask_run_code(self, code: str) -> None:
        return None


async def measure(calls: int) -> dict:
    from escouade_nb.engine.launch.launcher import relay_command, relay_preamble
    from escouade_nb.kernel_mcp.acp_channel import ChannelError
    from escouade_nb.kernel_mcp.server import KernelServer

    server = await KernelServer(namespace={}).start()
    grant = server.grant(_Owner())
    channel = server.channel(grant)
    with tempfile.TemporaryDirectory() as scratch:
        agent = Path(scratch) / "agent.py"
        agent.write_text(AGENT)
        argv = ["sh", "-c", 'exec "$@"', "sh", *relay_command([sys.executable, str(agent), str(calls)])]
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, limit=1 << 24)
        assert proc.stdin is not None and proc.stdout is not None
        lock = asyncio.Lock()

        async def send(message: dict) -> None:
            async with lock:
                proc.stdin.write((json.dumps(message) + "\n").encode())
                await proc.stdin.drain()

        async def answer(message: dict) -> None:
            params = message.get("params")
            try:
                result = await channel.handle(message["method"], params, request="id" in message)
                reply = {"jsonrpc": "2.0", "id": message.get("id"), "result": result or {}}
            except Exception as exc:
                error = exc.error() if isinstance(exc, ChannelError) else {"code": -32603, "message": str(exc)}
                reply = {"jsonrpc": "2.0", "id": message.get("id"), "error": error}
            if "id" in message:
                await send(reply)

        proc.stdin.write(relay_preamble())
        await send({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": scratch, "mcpServers": [
            channel.entry("escouade"),
            {"type": "http", "name": "local", "url": server.url,
             "headers": [{"name": "Authorization", "value": grant.authorization}]}]}})
        tasks: set[asyncio.Task] = set()
        result = None
        try:
            while result is None:
                line = await asyncio.wait_for(proc.stdout.readline(), 600)
                if not line:
                    raise RuntimeError(f"the relay ended (exit {await proc.wait()})")
                message = json.loads(line)
                if message.get("method") in ("mcp/connect", "mcp/message", "mcp/disconnect"):
                    task = asyncio.ensure_future(answer(message))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                elif message.get("method") == "_bench/result":
                    result = message["params"]
        finally:
            proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
            await channel.aclose()
            await server.aclose()
    return result


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    times = asyncio.run(measure(args.calls))
    out = {kind: {"p50_ms": _pct(v, 50) * 1e3, "p99_ms": _pct(v, 99) * 1e3,
                  "mean_ms": statistics.fmean(v) * 1e3, "n": len(v)} for kind, v in times.items()}
    out["ratio_p50"] = out["relay"]["p50_ms"] / out["local"]["p50_ms"]
    print(f"run_code round trip, p50: relay {out['relay']['p50_ms']:.2f} ms, local (HTTP) "
          f"{out['local']['p50_ms']:.2f} ms: {out['ratio_p50']:.2f}× (target ≤ 1.5×); p99 "
          f"{out['relay']['p99_ms']:.2f} / {out['local']['p99_ms']:.2f} ms")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
