"""A sandboxed agent's client terminal is held as its process is: the same hidden folders,
the same read-only git files (its client fs too: no hook written for it), and a network of
its own cut the same way — its own network namespace with its own pasta attached (the
declared port reached, another port of the host's loopback refused), ended with the
terminal's process. The attacks run from the terminal (``sandbox_attacks.py``), the
terminal started by the agent (``terminal/create``)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from sandbox_attacks import HttpServer, seen_in, wait_for

from escouade_nb.engine.squad import Squad

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("pasta") is None,
                                reason="bubblewrap or passt's pasta is not installed (apt-get install bubblewrap passt)")

ATTACKS = str(Path(__file__).resolve().parent / "sandbox_attacks.py")


@pytest.fixture
def outside():
    folder = Path(tempfile.mkdtemp(prefix="escouade-terminal-net-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _script(spec: dict) -> str:
    from scripted_agent import P_INIT
    create = {"sessionId": "s1", "command": sys.executable, "args": [ATTACKS, json.dumps(spec)], "cwd": "$WS"}
    return "\n".join([
        P_INIT.replace('"writeTextFile":true}', '"writeTextFile":true},"terminal":true'),
        'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":"$ANY"}}',
        'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}',
        'C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1",'
        '"prompt":[{"type":"text","text":"go"}]}}',
        # the client fs keeps the same git files read-only: no hook written for it
        'A> {"jsonrpc":"2.0","id":149,"method":"fs/write_text_file","params":{"sessionId":"s1",'
        '"path":".git/hooks/pre-commit","content":"#!/bin/sh\\ntouch /var/tmp/pwned\\n"}}',
        'C> {"jsonrpc":"2.0","id":149,"error":{"code":-32602},"result":"$ABSENT"}',
        f'A> {{"jsonrpc":"2.0","id":150,"method":"terminal/create","params":{json.dumps(create)}}}',
        '!> {"expect": {"jsonrpc":"2.0","id":150,"result":{"terminalId":"$ANY"}}, '
        '"capture": {"T": "result.terminalId"}}',
        'A> {"jsonrpc":"2.0","id":151,"method":"terminal/wait_for_exit","params":{"sessionId":"s1","terminalId":"$T"}}',
        'C> {"jsonrpc":"2.0","id":151,"result":"$ANY"}',
        'A> {"jsonrpc":"2.0","id":152,"method":"terminal/output","params":{"sessionId":"s1","terminalId":"$T"}}',
        'C> {"jsonrpc":"2.0","id":152,"result":"$ANY"}',
        'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'])


def test_a_sandboxed_agents_terminal_has_its_own_network_and_its_sandbox(script, tmp_path, outside, monkeypatch,
                                                                          own_processes):
    from scripted_agent import responses_to

    runtime = outside / "runtime"
    runtime.mkdir()
    (runtime / "kernel-1.json").write_text('{"key": "hmac-secret"}\n')
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    declared, other = HttpServer(), HttpServer()
    try:
        ws = tmp_path / "ws"
        ws.mkdir()
        subprocess.run(["git", "init", "-q", str(ws)], check=True)
        spec = {"own_port": declared.port, "refused_port": other.port, "runtime": str(runtime),
                "writes": [str(ws / ".git" / "config"), str(ws / "fine.txt")]}
        s = script(_script(spec), ws=ws, name="boxed")
        s.install_sandboxed(tmp_path / "plugins")

        async def go():
            squad = Squad()
            try:
                agent = squad.start("boxed", cwd=s.ws, sandbox_ports=[declared.port], kernel_tools=False)
                await agent.ready()
                await agent.send("go")
                # the terminal has ended: its pasta with it, the agent's own stays
                await asyncio.to_thread(wait_for, lambda: len(own_processes("--netns-only")) == 1, 10,
                                        "the terminal's pasta to end with it")
                term = agent.session.client.terminals.get("term-1")
                return term.confined
            finally:
                await asyncio.gather(*(a.close() for a in squad.agents.values()))
                await squad.aclose()
        confined = asyncio.run(asyncio.wait_for(go(), 120))
    finally:
        declared.close()
        other.close()
    s.assert_ok()
    (refused,) = responses_to(s.received(), 149)
    assert refused["error"]["data"]["reason"] == "read_only_in_sandbox", refused
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    (output,) = responses_to(s.received(), 152)
    seen = seen_in(output["result"]["output"])
    assert seen["own_port"] == "HTTP/1.0 200 OK", seen  # its own network: pasta, the declared port forwarded
    assert seen["refused_port"] == "ECONNREFUSED", seen  # the host's loopback cut but for it
    assert seen["runtime"] == [], seen  # Jupyter's runtime folder hidden, as from the agent's process
    assert seen["writes"] == {str(ws / ".git" / "config"): "EROFS", str(ws / "fine.txt"): "written"}, seen
    assert "written by a sandboxed agent" not in (ws / ".git" / "config").read_text()
    assert confined is not None and confined.network is not None and confined.network.closed
    wait_for(lambda: not own_processes("--netns-only"), 10, "every pasta to end")
