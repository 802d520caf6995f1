"""Huge payloads do not hold the loop (issue 32, finding B), over real pipes with the hostile agent
of ``tests/adversarial/hostile.py``: a line over the wire's cap is refused unread — a request answered
with a JSON-RPC error, a notification dropped, one ``[info]`` line in the conversation each — and the
agent goes on; a 3.3 MB ``run_code`` reaches the kernel's MCP server and its card shows the whole code,
its hidden characters marked, drawn in pieces (a real kernel).

Each test measures the longest gap of a 5 ms ticker on the loop and asserts a generous bound (2 s,
where the cap's absence held it 10 s for a 40 MB line and the per-character marking ~7 s for a
3.3 MB run): the figures against the idle loop's jitter are ``benchmarks/loop_stall.py --kernels
hostile``'s."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest
from scripted_agent import run

HOSTILE = Path(__file__).resolve().parent / "hostile.py"
GAP_BOUND = 2.0
"""Seconds the loop may stop at most in these tests (generous: a loaded 2-core machine)."""


class Ticker:
    """A 5 ms task on the running loop: :attr:`longest` is the longest it woke late (seconds)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.task = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.005)
            self.longest = max(self.longest, time.perf_counter() - before - 0.005)

    def stop(self) -> float:
        self.task.cancel()
        return self.longest


def _agent(tmp_path: Path):
    import hostile  # beside this test (tests/adversarial is on the path of its tests)

    from escouade_nb.engine.agent import Agent
    from escouade_nb.manifest import HarnessRef, load_manifest

    manifest = hostile.install(tmp_path / "plugins")
    loaded = load_manifest(manifest)
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return Agent(HarnessRef(manifest=loaded, harness=loaded.contributes.harnesses[0], path=manifest, source="extra"),
                 program=sys.executable, cwd=ws)


def _notices(agent) -> list[str]:
    from escouade_nb.core.conversation import Notice

    return [f"[{n.level}] {n.text}" for n in agent.conversation.items if isinstance(n, Notice)]


def test_a_40_mb_request_is_refused_unread_and_the_agent_goes_on(tmp_path, monkeypatch):
    from escouade_nb.wire import transport

    monkeypatch.setenv("ESCOUADE_NB_TRANSCRIPTS_DIR", str(tmp_path / "transcripts"))
    parsed: list[int] = []
    decode = transport.LineTransport._decode
    monkeypatch.setattr(transport.LineTransport, "_decode", lambda self, line: parsed.append(len(line)) or
                        decode(self, line))

    async def go():
        agent = _agent(tmp_path)
        try:
            await agent.ready()
            ticker = Ticker()
            turn = await asyncio.wait_for(agent.send("ask 40000000"), 60)
            longest = ticker.stop()
            assert turn.text.startswith("answered: error -32600: message refused: "), turn.text  # the agent told
            refused = [n for n in _notices(agent) if "refused" in n]
            assert refused == ["[info] A message of 40.0 MB from the agent was refused: over the cap of 8 MiB "
                               "(session/request_permission, answered with an error); nothing of it was read."]
            from escouade_nb.core.conversation import Permission

            assert not [i for i in agent.conversation.items if isinstance(i, Permission)]  # no card
            assert agent.status == "idle" and agent.alive  # and it goes on
            assert max(parsed) < transport.MAX_LINE_BYTES  # never parsed
            assert agent.transport._framing.pending == 0
            again = await asyncio.wait_for(agent.send("say 100"), 30)
            assert again.text == "x" * 100
            assert longest < GAP_BOUND, f"the loop stopped {longest:.2f} s"
            path = agent.transcript.path
        finally:
            await agent.close()
        lines = path.read_text().splitlines()
        assert max(len(line) for line in lines) < 1 << 20  # the refused line is not on record either
        records = [json.loads(line) for line in lines]
        assert any(r.get("event") == "notice" and "40.0 MB" in (r.get("data") or {}).get("text", "")
                   for r in records)

    run(go(), timeout=120)


def test_a_notification_over_the_cap_is_dropped_and_said(tmp_path, monkeypatch):
    monkeypatch.setenv("ESCOUADE_NB_TRANSCRIPTS_DIR", str(tmp_path / "transcripts"))

    async def go():
        agent = _agent(tmp_path)
        try:
            await agent.ready()
            turn = await asyncio.wait_for(agent.send("say 9000000"), 60)
            assert turn.stop_reason == "end_turn" and turn.text == ""
            assert [n for n in _notices(agent) if "refused" in n] == [
                "[info] A message of 9.0 MB from the agent was refused: over the cap of 8 MiB "
                "(session/update); nothing of it was read."]
            assert agent.status == "idle" and agent.alive
        finally:
            await agent.close()

    run(go(), timeout=120)


@pytest.mark.kernel
def test_a_3_mb_run_code_card_shows_all_of_it_marked_without_holding_the_loop(tmp_path):
    """A real kernel: the hostile agent calls the kernel's MCP server's ``run_code`` with 3.3 MB of code
    whose last line hides a right-to-left override and a zero-width space; the card shows the whole
    code (its last line, its size), the two characters marked and counted, and the loop kept turning."""
    import hostile
    from kernel_client import kernel_with_env, wait_for

    hostile.install(tmp_path / "plugins")
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {"ESCOUADE_NB_PLUGINS_DIR": str(tmp_path / "plugins"), "ESCOUADE_NB_CONFIG_DIR": str(tmp_path / "config"),
           "ESCOUADE_NB_TRANSCRIPTS_DIR": str(tmp_path / "transcripts"),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    code = hostile.code_of(3_300_000, hidden=True)
    k = kernel_with_env(ws, env)
    try:
        k.run("%load_ext escouade_nb\nimport asyncio, time\nfrom escouade_nb.widgets import views_of\n"
              "h = %escouade hostile --as h\nawait h.ready()")
        k.run("_gap = [0.0]\nasync def _tick():\n    while True:\n        t = time.perf_counter()\n"
              "        await asyncio.sleep(0.005)\n        _gap[0] = max(_gap[0], time.perf_counter() - t - 0.005)\n"
              "_ticker = asyncio.ensure_future(_tick())\n"
              "t = h.send('runcode 3300000 hidden')\ncard = await h.next_permission(timeout=60)")
        wait_for(k, "'Drawing' not in views_of(h)[0].card_html(card)", timeout=30)
        out = k.run("html = views_of(h)[0].card_html(card)\n"
                    "print(len(card.request.raw_input['code']), 'x = 1  # ' in html, html.count('esc-hidden-char'),"
                    " 'esc-allow' in html)\n"
                    "print(html[html.index('the whole code'):html.index('the whole code') + 200])").text
        first, size_line = out.splitlines()[:2]
        assert first == f"{len(code)} True 2 True"  # whole, both characters marked, its buttons
        lines = code.count("\n")
        assert f"{lines:,} lines, {len(code):,} characters · " in size_line and "2 invisible" in size_line
        k.run("card.choose('dont-run')\nr = await t\n_ticker.cancel()")
        gap = float(k.run("print(_gap[0])").text)
        assert gap < GAP_BOUND, f"the loop stopped {gap:.2f} s"
        k.run("await h.close()")
    finally:
        k.shutdown()


def test_a_refused_lines_envelope_is_read_from_its_ends_only():
    """The ``id`` and ``method`` of a line over the cap, from its first and last bytes (never parsed whole),
    at either end; a response has no method (it stops the agent instead); ends built to be slow are read
    in bounded time."""
    from escouade_nb.wire.framing import HEAD_KEPT, TAIL_KEPT, LineBuffer, Skipped, envelope

    def refused(message: dict) -> Skipped:
        buf = LineBuffer(max_line=100, report_at_end=True)
        data = json.dumps(message).encode()
        out = [e for i in range(0, len(data), 37) for e in buf.feed(data[i:i + 37])] + buf.feed(b"\n")
        (skipped,) = out
        assert skipped.size == len(data) and len(skipped.head) <= HEAD_KEPT and len(skipped.tail) <= TAIL_KEPT
        return skipped

    pad = {"x": "y" * 100_000, "id": 99, "method": "nested/not/this"}
    assert envelope(refused({"jsonrpc": "2.0", "id": 5, "method": "session/request_permission", "params": pad})) \
        == {"method": "session/request_permission", "id": 5}
    assert envelope(refused({"jsonrpc": "2.0", "params": pad, "method": "m", "id": "a,\"b"})) == {"method": "m",
                                                                                                  "id": "a,\"b"}
    assert envelope(refused({"jsonrpc": "2.0", "id": 7, "result": pad})) == {"id": 7}
    started = time.perf_counter()
    for head, tail in [(b"{" + b'"k":1,' * 20_000, b',"k":1' * 700 + b"}"), (b'{"x":' + b"[" * 70_000, b"]}"),
                       (b"{" + b'"a":[' * 10, b',"\\' * 1400 + b"}")]:
        assert envelope(Skipped("long", 10 ** 8, head[:HEAD_KEPT], tail[-TAIL_KEPT:])) == {}
    assert time.perf_counter() - started < 1.0
