"""A hostile agent under ``--sandbox`` (engine/launch/sandbox.py), started by the squad as any agent
is (the real bwrap, the real pasta attached through bwrap's info and block pipes), running
its own commands (the scripted agent's ``run`` step: tests/adversarial/sandbox_attacks.py)
against what the kernel's machine holds: a live Jupyter kernel's connection file and shell
port, another loopback port, the kernel's MCP server, the token files, a unix socket under
``$XDG_RUNTIME_DIR``, its folder's ``.git`` files."""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sandbox_attacks import HttpServer, UnixListener, seen_in, signed_execute, wait_for
from scripted_agent import refused_start
from deadlines import run

from escouade_nb.engine.squad import Squad

pytestmark = [pytest.mark.kernel,  # the machine fixture's live Jupyter kernel
              pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("pasta") is None,
                                 reason="bubblewrap or passt's pasta is not installed (apt-get install bubblewrap passt)")]

ATTACKS = str(Path(__file__).resolve().parent / "sandbox_attacks.py")


def attack_run(spec: dict, cwd: str = "$WS") -> str:
    """A scripted agent's run: the prelude (any MCP servers), its own command (the attacks),
    the turn's end."""
    from scripted_agent import P_INIT
    return "\n".join([
        P_INIT,
        f'C> {{"jsonrpc":"2.0","id":1,"method":"session/new","params":{{"cwd":"{cwd}","mcpServers":"$ANY"}}}}',
        'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}',
        'C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1",'
        '"prompt":[{"type":"text","text":"go"}]}}',
        f"!> {json.dumps({'run': [sys.executable, ATTACKS, json.dumps(spec)]})}",
        'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'])


def said(agent) -> str:
    return "\n".join(getattr(i, "text", "") for i in agent.conversation.items if type(i).__name__ == "Message")


async def one_turn(**start) -> str:
    """The scripted agent ``boxed`` started (``start``: the squad's), its turn ``go``: what it
    said; the squad closed."""
    squad = Squad()
    try:
        agent = squad.start("boxed", **start)
        await agent.ready()
        await agent.send("go")
        return said(agent)
    finally:
        await asyncio.gather(*(a.close() for a in squad.agents.values()))
        await squad.aclose()


@pytest.fixture
def outside():
    """Scratch outside /tmp (the sandbox's /tmp is its own, which would hide it anyway):
    Jupyter's runtime folder, ``$XDG_RUNTIME_DIR``, the marker files. Removed after."""
    folder = Path(tempfile.mkdtemp(prefix="escouade-sandbox-attack-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def machine(outside, monkeypatch, tmp_path, script, own_processes):
    """The kernel's machine as a hostile agent finds it: a live Jupyter kernel whose
    connection file is in a private runtime folder, ``$XDG_RUNTIME_DIR`` with a listening
    unix socket, an HTTP server on the host's loopback, the scripted harness ``boxed``
    (its own files a state folder) installed; yields a namespace of them."""
    from kernel_client import Kernel

    runtime, xdg = outside / "runtime", outside / "xdg"
    runtime.mkdir()
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    kernel = Kernel(outside, connection_file=runtime / f"kernel-{os.urandom(4).hex()}.json")  # started once more
    km, kc = kernel.km, kernel.kc  # if another worker took one of its ports first
    listener = UnixListener(xdg / "bus")
    http = HttpServer()
    try:
        info = json.loads(Path(km.connection_file).read_text())
        assert Path(km.connection_file).parent == runtime

        class Machine:
            pass
        m = Machine()
        m.km, m.kc, m.info, m.runtime, m.xdg, m.http, m.outside = km, kc, info, runtime, xdg, http, outside
        m.tmp_path, m.script, m.own_processes = tmp_path, script, own_processes
        yield m
    finally:
        http.close()
        listener.close()
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def install(m, spec: dict, ws: Path | None = None, *more: str, cwd: str = "$WS"):
    s = m.script(attack_run(spec, cwd), *more, ws=ws, name="boxed")
    s.install_sandboxed(m.tmp_path / "plugins")
    return s


def kernel_spec(m, marker: Path) -> dict:
    return {"ip": m.info["ip"], "shell_port": m.info["shell_port"], "key": m.info["key"],
            "signature_scheme": m.info["signature_scheme"], "marker": str(marker)}


def test_a_sandboxed_agent_reaches_neither_the_kernel_nor_the_host_loopback_nor_other_tokens(machine):
    m = machine
    # the reach, proved from outside: the key read from the file signs a request the kernel runs
    control = m.outside / "control-marker"
    assert signed_execute(m.info["ip"], m.info["shell_port"], m.info["key"], m.info["signature_scheme"],
                          f"open({str(control)!r}, 'w').write('ran')", wait=30) == "ok"
    wait_for(control.exists, 10, "the control request's marker")
    marker = m.outside / "sandboxed-marker"
    repo_ws = m.tmp_path / "repo"
    repo_ws.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo_ws, check=True)
    (repo_ws / ".git" / "hooks").mkdir(exist_ok=True)

    async def go():
        from escouade_nb.kernel_mcp.server import KernelServer

        server = await KernelServer.shared()
        tokens = await asyncio.to_thread(server.token_files.make_folder)
        other = await asyncio.to_thread(server.token_files.write, "another-agents-token")
        spec = {"runtime": str(m.runtime), "connection": m.km.connection_file, "kernel": kernel_spec(m, marker),
                "refused_port": m.http.port, "own_port": urlsplit(server.url).port, "list_tokens": str(tokens),
                "files": [str(other)], "socket": str(m.xdg / "bus"),
                "writes": [str(repo_ws / ".git" / "config"), str(repo_ws / ".git" / "hooks" / "pre-commit"),
                           str(repo_ws / "allowed.txt")]}
        install(m, spec, ws=repo_ws)
        squad = Squad()
        try:
            agent = squad.start("boxed", cwd=repo_ws, sandbox=True, kernel_tools=True)
            await agent.ready()
            pastas = m.own_processes("--netns-only")
            await agent.send("go")
            return said(agent), pastas, other
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()
            server.token_files.remove("another-agents-token")
    text, pastas, other = run(go())
    seen = seen_in(text)
    print("seen from inside:", json.dumps(seen, indent=1))  # with -s: what a hostile agent reached
    assert seen["runtime"] == [] and seen["connection"] == "ENOENT"  # Jupyter's runtime folder: hidden
    assert seen["shell_connect"] == "ECONNREFUSED" and seen["execute"] == "no reply"  # its loopback is its own
    m.kc.execute("1", reply=True, timeout=30)  # the kernel answers (it got nothing before this)
    assert not marker.exists(), "a sandboxed agent ran code in the kernel through its shell port"
    assert seen["refused_port"] == "ECONNREFUSED"  # another port of the host's loopback
    assert seen["own_port"].startswith("HTTP/1.") and " 401" in seen["own_port"]  # its MCP server: reached
    assert seen["files"] == {str(other): "ENOENT"}  # another agent's token file: absent…
    assert len(seen["tokens"]) == 1 and list(seen["tokens"].values()) == ["read"]  # …its own, readable
    assert seen["socket"] == "ENOENT"  # $XDG_RUNTIME_DIR: hidden, its sockets with it
    writes = seen["writes"]
    assert writes[str(repo_ws / ".git" / "config")] == "EROFS"
    assert writes[str(repo_ws / ".git" / "hooks" / "pre-commit")] == "EROFS"
    assert writes[str(repo_ws / "allowed.txt")] == "written"  # its folder stays its own
    assert "written by a sandboxed agent" not in (repo_ws / ".git" / "config").read_text()
    assert len(pastas) == 1, "the agent's network is pasta's"
    wait_for(lambda: not m.own_processes("--netns-only"), 10, "pasta to end with its agent")


def test_a_sandboxed_worktree_agent_cannot_repoint_the_kernels_git(machine, monkeypatch):
    """The worktree's admin files the kernel made (``commondir``, ``gitdir``) are read-only
    for the agent; its ``HEAD`` and index stay writable (it commits)."""
    m = machine
    for key, value in {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
                       "GIT_COMMITTER_EMAIL": "t@e"}.items():
        monkeypatch.setenv(key, value)
    repo = m.outside / "proj"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "base"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    install(m, {"admin_writes": ["commondir", "gitdir", "HEAD"], "writes": [str(repo / ".git" / "config")]},
            cwd="$ANY")
    seen = seen_in(run(one_turn(cwd=repo, worktree=True, sandbox=True, kernel_tools=False)))
    assert seen["admin_writes"] == {"commondir": "EROFS", "gitdir": "EROFS", "HEAD": "written"}
    assert seen["writes"] == {str(repo / ".git" / "config"): "EROFS"}


def test_its_folder_under_a_hidden_one_keeps_working(machine):
    """Its folder under ``$XDG_RUNTIME_DIR`` (hidden): bound back after the tmpfs, writable;
    the rest of the hidden folder stays hidden."""
    m = machine
    ws = m.xdg / "work"
    ws.mkdir()
    s = install(m, {"writes": [str(ws / "made.txt")], "socket": str(m.xdg / "bus")}, ws)
    seen = seen_in(run(one_turn(cwd=s.ws, sandbox=True, kernel_tools=False)))
    assert seen["writes"] == {str(ws / "made.txt"): "written"} and (ws / "made.txt").exists()
    assert seen["socket"] == "ENOENT"


def test_a_declared_port_is_reached_and_pasta_ends_with_a_restart_and_a_stop(machine):
    m = machine
    declared = HttpServer()
    try:
        from scripted_agent import P_INIT
        spec = {"own_port": declared.port, "refused_port": m.http.port}
        s = install(m, spec, None, "\n".join([
            P_INIT, 'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":"$ANY"}}',
            'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s2"}}']))

        async def go():
            squad = Squad()
            try:
                agent = squad.start("boxed", cwd=s.ws, sandbox_ports=[declared.port], kernel_tools=False)
                assert agent.sandbox is not None and agent.sandbox.ports == (declared.port,)
                await agent.ready()
                first = m.own_processes("--netns-only")
                await agent.send("go")
                text = said(agent)
                await agent.restart()
                await agent.ready()
                second = m.own_processes("--netns-only")
                return text, first, second
            finally:
                await asyncio.gather(*(a.close() for a in squad.agents.values()))
                await squad.aclose()
        text, first, second = run(go())
    finally:
        declared.close()
    seen = seen_in(text)
    assert seen["own_port"] == "HTTP/1.0 200 OK" and seen["refused_port"] == "ECONNREFUSED"
    assert len(first) == 1 and len(second) == 1 and not first & second  # one pasta per process, the old one gone
    wait_for(lambda: not m.own_processes("--netns-only"), 10, "pasta to end with its agent")


def test_pasta_ends_when_its_agent_crashes(machine):
    m = machine
    from scripted_agent import P_INIT
    s = m.script("\n".join([
        P_INIT, 'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":"$ANY"}}',
        'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}', '!> {"sleep": 0.5}', '!> {"exit": 3}']),
        name="boxed")
    s.install_sandboxed(m.tmp_path / "plugins")

    async def go():
        squad = Squad()
        try:
            agent = squad.start("boxed", cwd=s.ws, sandbox=True, kernel_tools=False)
            await agent.ready()
            running = m.own_processes("--netns-only")
            while agent.pid is not None and agent.status.value not in ("failed", "exited"):
                await asyncio.sleep(0.05)  # the agent's own end: no deadline of ours but the run's
            # gone before any close: its end alone ended it
            await asyncio.to_thread(wait_for, lambda: not m.own_processes("--netns-only"), 10, "pasta to end")
            return running, agent.status.value
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()
    running, status = run(go(), timeout=60)
    assert len(running) == 1 and status in ("failed", "exited")
    wait_for(lambda: not m.own_processes("--netns-only"), 10, "pasta to end with its crashed agent")


def test_stop_while_it_starts_ends_its_pasta(machine):
    m = machine
    s = m.script('!> {"hang": true}', name="boxed")  # never answers initialize
    s.install_sandboxed(m.tmp_path / "plugins")

    async def go():
        squad = Squad()
        try:
            agent = squad.start("boxed", cwd=s.ws, sandbox=True, kernel_tools=False)
            running = await asyncio.to_thread(wait_for, lambda: m.own_processes("--netns-only"), 20, "its pasta")
            agent.cancel()  # Stop, while it starts
            while agent.status.value != "closed":
                await asyncio.sleep(0.05)  # the stop's end: the run's deadline bounds it
            await asyncio.to_thread(wait_for, lambda: not m.own_processes("--netns-only")
                                    and not m.own_processes("bwrap"), 10, "its pasta and bwrap to end")
            return running
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()
    assert run(go(), timeout=60)  # it had one (two for a moment: pasta forks as it daemonizes)


def test_without_pasta_the_start_fails_in_one_line_and_nothing_starts(machine, monkeypatch):
    m = machine
    s = install(m, {})
    bin_dir = m.tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(shutil.which("bwrap"), bin_dir / "bwrap")
    monkeypatch.setenv("PATH", str(bin_dir))
    message, agents = run(refused_start("boxed", cwd=s.ws, sandbox=True))
    assert "pasta" in message and "apt-get install passt" in message and "nothing was started" in message
    assert "\n" not in message and not agents
    assert not m.own_processes("bwrap")


def test_a_pasta_that_fails_ends_the_start_in_one_line_and_leaves_nothing(machine, monkeypatch):
    m = machine
    s = install(m, {})
    bin_dir = m.tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pasta"
    fake.write_text("#!/bin/sh\necho \"Couldn't open network namespace\" >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")

    async def go():
        squad = Squad()
        try:
            agent = squad.start("boxed", cwd=s.ws, sandbox=True, kernel_tools=False)
            with pytest.raises(Exception) as caught:
                await agent.ready()
            return str(caught.value)
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()
    message = run(go())
    assert "pasta could not give the agent its network (Couldn't open network namespace)" in message
    assert "\n" not in message
    wait_for(lambda: not m.own_processes("bwrap") and not m.own_processes("script_agent"), 10,
             "no bwrap nor agent left")
