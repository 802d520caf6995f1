"""The relay (``escouade_nb/engine/launch/pipe_relay.py``) as the far side of a launcher runs it, with real
processes and pipes, no kernel: its source read from its stdin first, then the agent's traffic passed
untouched both ways (lines that are not JSON, non-ASCII, a line of 1 MiB) but for the ``acp`` entry it
rewrites; and it dies with the pipe whatever the agent does — an agent that ignores end of input, SIGTERM and
SIGHUP is killed once the pipe closes, and a relay killed outright (SIGKILL: nothing of its own runs) takes
its agent with it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

from deadlines import wait_until

from escouade_nb.engine.launch.launcher import relay_command, relay_preamble

STUBBORN = ["sh", "-c", 'echo "$$"; trap "" TERM HUP INT; exec sleep 600']
"""An agent that says its pid, then ignores end of input, SIGTERM, SIGHUP and SIGINT (an exec keeps ignored
signals ignored)."""


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start(command: list[str], scratch: Path) -> tuple[subprocess.Popen, int]:
    relay = subprocess.Popen(relay_command(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={**os.environ, "TMPDIR": str(scratch)})  # its folder there, even when killed
    assert relay.stdin is not None and relay.stdout is not None
    relay.stdin.write(relay_preamble())
    relay.stdin.flush()
    hello = json.loads(relay.stdout.readline())
    assert hello["method"] == "_escouade/relay" and "absent" not in hello["params"], hello
    return relay, int(relay.stdout.readline())


def test_the_agents_traffic_passes_untouched_but_the_acp_entry(tmp_path):
    relay = subprocess.Popen(relay_command(["cat"]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={**os.environ, "TMPDIR": str(tmp_path)})
    new = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": [
        {"type": "acp", "name": "escouade", "serverId": "escouade-abc"},
        {"type": "http", "name": "mine", "url": "http://x/mcp", "headers": []}]}}
    lines = [b"not json at all \xff\xfe\n", '{"jsonrpc":"2.0","method":"x","params":{"t":"été ☃"}}\n'.encode(),
             b'{"a":"' + b"z" * (1 << 20) + b'"}\n', b'{"id": 7, "result": {"acp": "no"} }\n']
    out, _ = relay.communicate(relay_preamble() + b"".join(lines) + json.dumps(new).encode() + b"\n", timeout=60)
    hello, *rest = out.splitlines(keepends=True)
    assert json.loads(hello)["method"] == "_escouade/relay"
    assert rest[:4] == lines  # byte for byte
    rewritten = json.loads(rest[4])["params"]["mcpServers"]
    assert rewritten[1] == new["params"]["mcpServers"][1]
    assert set(rewritten[0]) == {"name", "command", "args", "env"} and rewritten[0]["name"] == "escouade"
    assert rewritten[0]["args"][1:] == ["--mcp", rewritten[0]["args"][2], "escouade-abc"] and rewritten[0]["env"] == []
    folder = os.path.dirname(rewritten[0]["args"][0])
    assert folder.startswith(str(tmp_path)) and not os.path.exists(folder)  # removed when the agent ended
    assert relay.returncode == 0


def test_an_agent_that_ignores_the_end_of_its_input_and_sigterm_is_killed_when_the_pipe_closes(tmp_path):
    relay, agent = _start(STUBBORN, tmp_path)
    try:
        assert _alive(agent)
        relay.stdin.close()  # the launcher's pipe closed (Stop, Restart, kernel shutdown, a dropped connection)
        relay.wait(timeout=60)
        wait_until(lambda: not _alive(agent), timeout=30, what="the stubborn agent killed")
    finally:
        relay.kill()
        if _alive(agent):
            os.kill(agent, signal.SIGKILL)


def test_a_relay_killed_outright_takes_its_agent_with_it(tmp_path):
    relay, agent = _start(STUBBORN, tmp_path)
    try:
        relay.kill()  # SIGKILL: the relay runs nothing more
        relay.wait(timeout=30)
        wait_until(lambda: not _alive(agent), timeout=30, what="the agent gone with its relay")
    finally:
        if _alive(agent):
            os.kill(agent, signal.SIGKILL)


def test_the_relays_mcp_endpoint_speaks_mcp_over_acp_on_the_pipe_and_keeps_its_answers_from_the_agent(tmp_path):
    """``cat`` as the agent echoes all it is given: what the relay keeps from the agent never shows up."""
    relay = subprocess.Popen(relay_command(["cat"]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={**os.environ, "TMPDIR": str(tmp_path)})
    assert relay.stdin is not None and relay.stdout is not None

    def send(message: dict) -> None:
        relay.stdin.write(json.dumps(message).encode() + b"\n")
        relay.stdin.flush()

    def read() -> dict:
        return json.loads(relay.stdout.readline())

    try:
        relay.stdin.write(relay_preamble())
        assert read()["method"] == "_escouade/relay"
        send({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": [
            {"type": "acp", "name": "escouade", "serverId": "escouade-abc"}]}})
        entry = read()["params"]["mcpServers"][0]  # echoed by cat, rewritten
        endpoint = socket.socket(socket.AF_UNIX)
        endpoint.connect(entry["args"][2])  # what the agent's stdio child does
        stream = endpoint.makefile("rwb")
        stream.write(b'{"serverId": "escouade-abc"}\n')
        stream.flush()
        connect = read()
        assert connect["method"] == "mcp/connect" and connect["params"] == {"serverId": "escouade-abc"}
        send({"jsonrpc": "2.0", "id": connect["id"], "result": {"connectionId": "c1"}})
        stream.write(b'{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "run_code"}}\n')
        stream.flush()
        call = read()
        assert call["method"] == "mcp/message" and call["id"] != 9 and call["params"] == {
            "connectionId": "c1", "method": "tools/call", "params": {"name": "run_code"}}
        stream.write(b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}\n')
        stream.flush()
        assert read() == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": call["id"]}}
        send({"jsonrpc": "2.0", "id": call["id"], "error": {"code": -32800, "message": "request cancelled"}})
        assert json.loads(stream.readline()) == {"jsonrpc": "2.0", "id": 9,
                                                 "error": {"code": -32800, "message": "request cancelled"}}
        send({"jsonrpc": "2.0", "method": "mcp/message", "params": {"connectionId": "c1", "method": "notifications/x"}})
        assert json.loads(stream.readline()) == {"jsonrpc": "2.0", "method": "notifications/x"}
        send({"jsonrpc": "2.0", "method": "after"})  # the next line cat echoes: nothing of the relay's came before
        assert read() == {"jsonrpc": "2.0", "method": "after"}
        stream.close()  # the agent's MCP client ended
        endpoint.close()
        disconnect = read()
        assert disconnect["method"] == "mcp/disconnect" and disconnect["params"] == {"connectionId": "c1"}
    finally:
        relay.stdin.close()
        relay.wait(timeout=60)
