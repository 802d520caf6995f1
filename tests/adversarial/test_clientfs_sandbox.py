"""A hostile sandboxed agent asks the client to act for it outside its sandbox (issue 32): the
client file system (``fs/*``) and the client terminals (``terminal/*``) of a ``--sandbox`` agent
reach what its process reaches, no further. Real processes over real pipes (the scripted agent,
``tests/scripted_agent.py``), the real bubblewrap; the agent started by the squad as a user does."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from escouade_nb.engine.squad import Squad
from scripted_agent import END, P_INIT, P_NEW, P_PROMPT, alive, responses_to, until
from deadlines import run

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap is not installed (apt-get install bubblewrap)")

PRELUDE = "\n".join([P_INIT, P_NEW])
PROMPT = P_PROMPT
REFUSED = '{"code":-32602},"result":"$ABSENT"}'


@pytest.fixture
def outside(tmp_path):
    """A scratch folder outside /tmp and outside the agent's folder (/var/tmp/…: the kernel's
    world, which the sandbox shows read-only), removed after."""
    folder = Path(tempfile.mkdtemp(prefix="escouade-clientfs-test-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def boxed(script, tmp_path, monkeypatch):
    """``boxed(*runs, variables=…)``: a scripted harness installed for the squad; its own files
    (scenario, log: under tmp_path, which the sandbox's private /tmp hides) are its manifest's
    state folder."""
    plugins = tmp_path / "plugins"
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))

    def make(*runs, variables=None):
        s = script(*runs, name="boxed", variables=variables)
        s.install_sandboxed(plugins)
        return s
    return make


async def _session(s, body, **start):
    """Start the scripted agent sandboxed, run ``body(agent)``, close everything."""
    squad = Squad()
    try:
        agent = squad.start("boxed", cwd=s.ws, sandbox=True, **start)
        await agent.ready()
        return await body(agent)
    finally:
        await asyncio.gather(*(a.close() for a in squad.agents.values()))
        await squad.aclose()


def _error(s, rpc_id):
    (answer,) = responses_to(s.received(), rpc_id)
    assert "error" in answer, answer
    return answer["error"]


# -- the client file system ------------------------------------------------------------------------


FS = "\n".join([PRELUDE, PROMPT,
    # outside its folder: the kernel's world (/var/tmp), and next to its folder in the kernel's /tmp
    'A> {"jsonrpc":"2.0","id":110,"method":"fs/write_text_file","params":{"sessionId":"s1",'
    '"path":"$OUT/escaped.txt","content":"pwned\\n"}}',
    'C> {"jsonrpc":"2.0","id":110,"error":' + REFUSED,
    'A> {"jsonrpc":"2.0","id":111,"method":"fs/write_text_file","params":{"sessionId":"s1",'
    '"path":"$WS/../next-to-ws.txt","content":"pwned\\n"}}',
    'C> {"jsonrpc":"2.0","id":111,"error":' + REFUSED,
    # a symlink in its folder pointing outside
    'A> {"jsonrpc":"2.0","id":112,"method":"fs/write_text_file","params":{"sessionId":"s1",'
    '"path":"link/through-link.txt","content":"pwned\\n"}}',
    'C> {"jsonrpc":"2.0","id":112,"error":' + REFUSED,
    # inside: written, and read back
    'A> {"jsonrpc":"2.0","id":113,"method":"fs/write_text_file","params":{"sessionId":"s1",'
    '"path":"sub/inside.txt","content":"fine\\n"}}',
    'C> {"jsonrpc":"2.0","id":113,"result":"$ANY","error":"$ABSENT"}',
    'A> {"jsonrpc":"2.0","id":114,"method":"fs/read_text_file","params":{"sessionId":"s1","path":"sub/inside.txt"}}',
    'C> {"jsonrpc":"2.0","id":114,"result":{"content":"fine\\n"},"error":"$ABSENT"}',
    # reads in folders its sandbox hides: Jupyter's runtime folder (connection files), the kernel's /tmp
    'A> {"jsonrpc":"2.0","id":115,"method":"fs/read_text_file","params":{"sessionId":"s1",'
    '"path":"$RUNTIME/kernel-1.json"}}',
    'C> {"jsonrpc":"2.0","id":115,"error":' + REFUSED,
    'A> {"jsonrpc":"2.0","id":116,"method":"fs/read_text_file","params":{"sessionId":"s1",'
    '"path":"$WS/../kernel-secret.txt"}}',
    'C> {"jsonrpc":"2.0","id":116,"error":' + REFUSED,
    # what its process may read, the client reads too: a file of the kernel's world outside /tmp
    'A> {"jsonrpc":"2.0","id":117,"method":"fs/read_text_file","params":{"sessionId":"s1","path":"$OUT/readme.txt"}}',
    'C> {"jsonrpc":"2.0","id":117,"result":{"content":"public\\n"},"error":"$ABSENT"}',
    END])


@needs_bwrap
def test_a_sandboxed_agents_client_fs_writes_only_where_its_process_may_and_reads_nothing_its_sandbox_hides(
        boxed, tmp_path, outside, monkeypatch):
    runtime = outside / "runtime"  # Jupyter's runtime folder, where the kernels' connection files are
    runtime.mkdir()
    (runtime / "kernel-1.json").write_text('{"key": "hmac-secret"}\n')
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    (outside / "readme.txt").write_text("public\n")
    (tmp_path / "kernel-secret.txt").write_text("secret\n")
    s = boxed(FS, variables={"OUT": str(outside), "RUNTIME": str(runtime)})
    (s.ws / "link").symlink_to(outside)

    async def body(agent):
        await agent.send("go")
    run(_session(s, body))
    s.assert_ok()
    assert not (outside / "escaped.txt").exists() and not (tmp_path / "next-to-ws.txt").exists()
    assert not (outside / "through-link.txt").exists()
    assert (s.ws / "sub" / "inside.txt").read_text() == "fine\n"
    for rpc_id in (110, 111, 112):
        error = _error(s, rpc_id)
        assert error["data"]["reason"] == "outside_sandbox" and str(s.ws) in error["data"]["writable"], error
        assert "sandbox" in error["message"] and "nothing was written" in error["message"]
    assert _error(s, 112)["data"]["realPath"] == str(outside / "through-link.txt")
    for rpc_id, folder in ((115, runtime), (116, Path("/tmp"))):
        error = _error(s, rpc_id)
        assert error["data"]["reason"] == "hidden_by_sandbox" and error["data"]["hidden"] == str(folder), error
    assert "hmac-secret" not in json.dumps(s.received()) and '"secret' not in json.dumps(s.received())


# -- the client terminals --------------------------------------------------------------------------


def _create(rpc_id, params, name):
    return "\n".join([
        f'A> {{"jsonrpc":"2.0","id":{rpc_id},"method":"terminal/create","params":{json.dumps(params)}}}',
        f'!> {{"expect": {{"jsonrpc":"2.0","id":{rpc_id},"result":{{"terminalId":"$ANY"}}}}, '
        f'"capture": {{"{name}": "result.terminalId"}}}}'])


def _call(rpc_id, method, terminal, answer='"$ANY"'):
    return "\n".join([
        f'A> {{"jsonrpc":"2.0","id":{rpc_id},"method":"terminal/{method}","params":{{"sessionId":"s1",'
        f'"terminalId":"${terminal}"}}}}',
        f'C> {{"jsonrpc":"2.0","id":{rpc_id},"result":{answer}}}'])


SHELL_LINE = ("echo x > $OUT/escaped.txt; touch $WS/inside.txt && echo touched-inside; "
              "test -e /proc/$KERNEL/environ && echo kernel-visible || echo no-kernel; echo pid=$$")

TERMINALS = "\n".join([
    PRELUDE.replace('"writeTextFile":true}', '"writeTextFile":true},"terminal":true'), PROMPT,
    _create(130, {"sessionId": "s1", "command": SHELL_LINE, "cwd": "$WS"}, "T1"),
    _call(131, "wait_for_exit", "T1", '{"exitCode":0}'),
    _call(132, "output", "T1"),
    # a long one: killed, its whole tree gone
    _create(133, {"sessionId": "s1", "command": "sh", "args": ["-c", "sleep 30 & sleep 31; wait"], "cwd": "$WS"},
            "T2"),
    _call(134, "kill", "T2"),
    _call(135, "wait_for_exit", "T2"),
    _call(136, "release", "T2"),
    # a folder outside what it may write, and a variable bwrap itself would read
    'A> {"jsonrpc":"2.0","id":137,"method":"terminal/create","params":{"sessionId":"s1","command":"true","cwd":"$OUT"}}',
    'C> {"jsonrpc":"2.0","id":137,"error":' + REFUSED,
    'A> {"jsonrpc":"2.0","id":138,"method":"terminal/create","params":{"sessionId":"s1","command":"true",'
    '"env":[{"name":"LD_PRELOAD","value":"$WS/evil.so"}],"cwd":"$WS"}}',
    'C> {"jsonrpc":"2.0","id":138,"error":' + REFUSED,
    END])


@needs_bwrap
def test_a_sandboxed_agents_client_terminals_run_inside_its_sandbox(boxed, outside):
    s = boxed(TERMINALS, variables={"OUT": str(outside), "KERNEL": str(os.getpid())})
    seen = {}

    async def body(agent):
        await agent.send("go")
        terminals = agent.session.client.terminals
        first, sleeper = (terminals.get(f"term-{n}") for n in (1, 2))
        seen.update(first_argv=first.argv, sleeper=sleeper.pid)

        def gone():  # bwrap and the tree inside it (zombies waiting for init are gone)
            return not alive(sleeper.pid) and not [p for p in _processes() if _group_of(p) == sleeper.pid and alive(p)]
        await until(gone, timeout=10, what="the killed terminal's processes to be gone")
    run(_session(s, body))
    s.assert_ok()
    (output,) = responses_to(s.received(), 132)
    text = output["result"]["output"]
    assert "Read-only file system" in text and not (outside / "escaped.txt").exists(), text  # EROFS, said, absent
    assert "touched-inside" in text and (s.ws / "inside.txt").exists(), text
    assert "no-kernel" in text and "kernel-visible" not in text, text  # its own pid namespace
    assert int(text.split("pid=")[1].split()[0]) < 100, text
    assert seen["first_argv"][:2] == ["/bin/sh", "-c"]  # the command as asked: the bwrap around it is ours
    for rpc_id, reason in ((137, "outside_sandbox"), (138, "loader_variable")):
        assert _error(s, rpc_id)["data"]["reason"] == reason


def _processes():
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _group_of(pid):
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None


# -- a terminal sign-in (an auth method of type terminal: the agent's own program, run by the client) --


SIGN_IN = "\n".join([
    'C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}',
    'A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{},"authMethods":['
    '{"id":"login","name":"Log in","type":"terminal","args":["login"]},'
    '{"id":"preload","name":"Log in (fast)","type":"terminal","args":["login"],"env":{"LD_PRELOAD":"$WS/evil.so"}}]}}',
    'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}',
    'A> {"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Authentication required"}}',
    '!> {"quiet": 60}'])


@needs_bwrap
def test_a_sandboxed_agents_terminal_sign_in_runs_in_its_sandbox_and_takes_no_loader_variable(boxed):
    from escouade_nb.engine.agent import AgentError, AuthRequired

    s = boxed(SIGN_IN)

    async def body_after_start(agent):
        signing = asyncio.ensure_future(agent.authenticate("login"))
        await until(lambda: agent.sign_in_job is not None and agent.sign_in_job.running, 60, "the sign-in")
        (term,) = agent.sign_in_job._terminals.terminals
        spawned = Path(f"/proc/{term.pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        await agent.sign_in_input("")
        assert spawned[0] == shutil.which("bwrap").encode() and b"--unshare-pid" in spawned, spawned
        with pytest.raises(AgentError, match="exited with code 3"):
            await signing
        with pytest.raises(AgentError, match="could not start") as refused:
            await agent.authenticate("preload")
        return spawned, str(refused.value)

    async def go():
        squad = Squad()
        try:
            agent = squad.start("boxed", cwd=s.ws, sandbox=True)
            with pytest.raises(AuthRequired):
                await agent.ready()
            return await body_after_start(agent)
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()
    spawned, refused = run(go())
    assert spawned[spawned.index(b"--") + 1:][-1] == b"login"  # the agent's own program, inside
    assert "LD_PRELOAD" in refused


def test_a_hidden_folder_inside_the_agents_folder_stays_hidden_and_one_bound_inside_a_hidden_folder_is_shown(
        tmp_path):
    """The rule the client fs applies (no process needed): its folder is the home that holds
    Jupyter's runtime folder — still hidden, neither read nor written; its folder under the
    kernel's /tmp (hidden) — shown, as the sandbox binds it there."""
    from acp import RequestError

    from escouade_nb.wire.fs import Confinement, FileSystem

    home = tmp_path / "home"
    runtime = home / ".local" / "share" / "jupyter" / "runtime"
    runtime.mkdir(parents=True)
    (runtime / "kernel-1.json").write_text("{}\n")
    (home / "notes.txt").write_text("mine\n")
    fs = FileSystem(home, confinement=Confinement(writable=(home,), hidden=(Path("/tmp"), runtime), shown=(home,)))

    async def go():
        assert (await fs.read_text_file("notes.txt")).content == "mine\n"
        await fs.write_text_file("new.txt", "ok\n")
        for call in (fs.read_text_file(str(runtime / "kernel-1.json")),
                     fs.write_text_file(str(runtime / "kernel-2.json"), "{}")):
            with pytest.raises(RequestError) as refused:
                await call
            assert refused.value.data["reason"] == "hidden_by_sandbox", refused.value.data
    run(go())
    assert (home / "new.txt").exists() and not (runtime / "kernel-2.json").exists()
