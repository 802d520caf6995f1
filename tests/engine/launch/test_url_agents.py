"""Remote agents by URL (issue 35, part 3): ``Squad.connect(NAME, ws://…, token_file=…)``
against a real ``escouade-acp-serve`` (uvicorn + websockets, started here on 127.0.0.1)
serving the shipped fake agent, one process per connection (``tests/acp_servers.py``).

A prompt answered and a card allowed over the WebSocket; the kernel's tools carried over the same
connection (the server runs the agent under the relay): from a kernel, ``df`` listed and code
run behind one card, before and after a drop that withdrew a pending ``run_code`` card (a server
``--no-relay``: said in one line); the token never on a command line
nor in the record; a wrong token, a token file too open, an ``http://`` URL each one line;
and a connection dropped mid-turn by the server (restarted on the same port): the pending
card answered cancelled saying so, the turn failed saying so, the agent reconnected (the
conversation says "Reconnected"), and each message in the conversation once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from acp_clients import AGENT_CMD
from acp_servers import acp_server
from deadlines import run, until
from kernel_client import KERNEL_TOOLS_SETUP, kernel_with_env, wait_for

from escouade_nb.core.conversation import Message, Notice
from escouade_nb.core.status import AgentStatus
from escouade_nb.engine.squad import Squad, SquadError
from escouade_nb.widgets.agent_view import status_line
from escouade_nb.wire.errors import AgentError


@pytest.fixture
def served(tmp_path):
    with acp_server(tmp_path, AGENT_CMD) as server:
        yield server


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (the server's agents)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def _messages(agent, role: str) -> list[str]:
    return [i.text for i in agent.conversation.items if isinstance(i, Message) and i.role == role]


def _notices(agent) -> list[str]:
    return [i.text for i in agent.conversation.items if isinstance(i, Notice)]


def test_a_remote_agent_answers_asks_and_closes(served, tmp_path):
    token = served.token_file.read_text().strip()

    async def scenario() -> None:
        squad = Squad()
        agent = squad.connect("far", served.url, token_file=served.token_file, harness="fake", cwd=tmp_path,
                              kernel_tools=True)
        try:
            await agent.ready()
            # outside a kernel: offered only when asked (kernel_tools=True), over the connection
            assert agent.kernel_tools_state[0] in ("offered", "connected"), agent.kernel_tools_state
            assert agent.kernel_tools_state[1].startswith("over the agent's own ACP connection")
            assert agent.place == f"at 127.0.0.1:{served.port}"
            head = status_line(agent)  # the view's head and its text say where it runs, never the token's file
            assert f"at 127.0.0.1:{served.port}" in head and str(served.token_file) not in head, head
            assert len(_children(served.process.pid)) == 1  # its one agent process, there
            turn = agent.send("run make")
            card = await agent.next_permission(timeout=60)
            assert card.choose(card.first_of("allow_once"))
            await turn
            assert any("Ran `make`" in text for text in _messages(agent, "agent"))
            assert token not in " ".join(agent.argv())  # the token's file is named, never the token
            transcript = agent.transcript.path
        finally:
            await agent.close()
        assert agent.status is AgentStatus.CLOSED
        await until(lambda: not _children(served.process.pid), 30, "the server's agent process to end")
        assert token not in transcript.read_text()

    run(scenario, timeout=180)


def test_wrong_token_loose_file_and_http_are_refused_in_one_line(served, tmp_path):
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token-at-all-0123\n")
    wrong.chmod(0o600)
    loose = tmp_path / "loose"
    loose.write_text(served.token_file.read_text())
    loose.chmod(0o644)

    async def scenario() -> None:
        squad = Squad()
        with pytest.raises(SquadError, match=r"mode 0644: make it 0600"):
            squad.connect("loose", served.url, token_file=loose, harness="fake", cwd=tmp_path)
        with pytest.raises(SquadError, match=r"http:// \(ACP's Streamable HTTP\) is not spoken yet"):
            squad.connect("web", served.url.replace("ws://", "http://"), token_file=served.token_file,
                          harness="fake", cwd=tmp_path)
        with pytest.raises(SquadError, match=r"connect: sandbox is not for an agent reached by URL"):
            squad.connect("boxed", served.url, token_file=served.token_file, harness="fake", cwd=tmp_path,
                          sandbox=True)
        agent = squad.connect("wrong", served.url, token_file=wrong, harness="fake", cwd=tmp_path)
        try:
            with pytest.raises(AgentError):
                await agent.ready()
            assert "refused the connection (wrong or missing token)" in (agent.exit.stderr_tail if agent.exit else "")
            assert agent.status is AgentStatus.EXITED
            assert not _children(served.process.pid)  # refused before any agent process started
        finally:
            await agent.close()

    run(scenario, timeout=180)


def test_a_connection_dropped_mid_turn_is_recovered(served, tmp_path):
    async def scenario() -> None:
        squad = Squad()
        agent = squad.connect("far", served.url, token_file=served.token_file, harness="fake", cwd=tmp_path)
        try:
            await agent.ready()
            hello = agent.send("hello before")
            await hello
            turn = agent.send("run make")
            card = await agent.next_permission(timeout=60)
            served.restart()  # every connection dropped by the server; it listens again on the same port
            with pytest.raises(AgentError, match=rf"connection to 127.0.0.1:{served.port} was lost during the turn"):
                await turn
            assert "connection lost, reconnecting" in status_line(agent) or agent.status is not AgentStatus.EXITED
            meanwhile = agent.send("hello meanwhile")  # sent while it reconnects: it waits, then goes
            assert card.permission.state == "cancelled" and card.permission.answered_by == "connection lost"
            await until(lambda: any(n.startswith("Reconnected to 127.0.0.1") for n in _notices(agent)), 120,
                        "the agent to reconnect")
            assert any(f"connection to 127.0.0.1:{served.port} was lost" in n for n in _notices(agent))
            assert "You said: hello meanwhile" in (await meanwhile).text
            await agent.ready()
            again = agent.send("hello after")
            await again
            users = _messages(agent, "user")
            assert users.count("hello before") == 1 and users.count("run make") == 1 \
                and users.count("hello after") == 1 and users.count("hello meanwhile") == 1, users
            said = _messages(agent, "agent")
            assert sum("You said: hello before" in t for t in said) == 1, said
            assert sum("You said: hello after" in t for t in said) == 1, said
            assert len(_children(served.process.pid)) == 1  # the new connection's one process
        finally:
            await agent.close()

    run(scenario, timeout=240)


def test_an_agent_by_url_of_no_named_harness_is_resumed_the_same_way(served, tmp_path):
    async def scenario() -> None:
        agent = Squad().connect("far-resumed", served.url, token_file=served.token_file, cwd=tmp_path)
        try:
            await agent.ready()
            assert agent.harness.harness.display_name == "ACP agent by URL"
            await agent.send("hello first")
            transcript = agent.transcript.path
        finally:
            await agent.close()
        again = Squad().resume("far-resumed", str(transcript))  # a new kernel's squad: from the record
        try:
            assert again.place == f"at 127.0.0.1:{served.port}"
            assert again.status is not AgentStatus.HARNESS_MISSING, again.status
            await again.ready()
            turn = await again.send("hello second")
            assert "You said: hello second" in turn.text
            assert _messages(again, "user").count("hello first") == 1  # the record's, once
        finally:
            await again.close()

    run(scenario, timeout=180)


def test_an_agent_that_crashes_there_is_said_exited_not_reconnected(served, tmp_path):
    async def scenario() -> None:
        agent = Squad().connect("far-crash", served.url, token_file=served.token_file, harness="fake", cwd=tmp_path)
        try:
            await agent.ready()
            with pytest.raises(AgentError):
                await agent.send("crash")
            assert agent.status is AgentStatus.EXITED and not agent.reconnect_pending
            assert f"the agent at 127.0.0.1:{served.port} ended: the agent exited with code 3" in agent.exit.stderr_tail
            assert not any("reconnecting" in n for n in _notices(agent))
        finally:
            await agent.close()

    run(scenario, timeout=180)


def test_a_server_that_runs_its_agent_without_the_relay_is_said_in_one_line(tmp_path):
    with acp_server(tmp_path, AGENT_CMD, flags=["--no-relay"]) as served:
        async def scenario() -> None:
            agent = Squad().connect("alone", served.url, token_file=served.token_file, harness="fake", cwd=tmp_path,
                                    kernel_tools=True)
            try:
                await agent.ready()
                assert agent.kernel_tools_state[0] == "not offered", agent.kernel_tools_state
                said = [n for n in _notices(agent) if "kernel's tools" in n]
                assert len(said) == 1 and "--no-relay" in said[0], said
                assert "You said: hi" in (await agent.send("hi")).text  # the agent runs, alone
            finally:
                await agent.close()

        run(scenario, timeout=180)


def _kernel_tools_turn(k, name: str) -> None:
    """Agent ``name`` by URL (ready) lists ``df`` through the kernel's tools carried over its
    connection, then runs code behind exactly one card (allowed), in this kernel's namespace."""
    wait_for(k, f"{name}.kernel_tools_state[0] == 'connected'", timeout=60)
    state = json.loads(k.run(f"print(json.dumps({name}.kernel_tools_state))").text)
    assert state[1].startswith("over the agent's own ACP connection"), state
    out = k.run(f"r = await {name}.send('variables')\nprint(r.text)", timeout=90).text
    assert "df" in out and "DataFrame" in out, out
    k.run(f"t = {name}.send('run code url_total = df.revenue.sum()\\nprint(\"total:\", url_total)')\n"
          f"card = await next_open({name})", timeout=90)
    out = k.run(f"print(card.request.title, '|', len({name}.pending_cards), '|', 'url_total' in globals())").text
    assert out.strip() == "Run code in the kernel | 1 | False", out
    out = k.run("card.choose('run')\nr = await t\nprint(r.text)\nprint(url_total)", timeout=90).text
    assert "total: 134.5" in out and out.strip().splitlines()[-1] == "134.5", out
    k.run("del url_total")


@pytest.mark.kernel
@pytest.mark.timeout(420)
def test_an_agent_by_url_gets_the_kernels_tools_over_its_connection_again_after_a_drop(served, tmp_path):
    """The kernel's tools over the same WebSocket (the server runs the agent under the relay):
    ``df`` listed, code run behind one card; a run_code card pending when the connection drops
    is withdrawn (nothing runs); after the reconnection the tools are offered again and work."""
    (tmp_path / "ws").mkdir()
    env = {"ESCOUADE_NB_PLUGINS_DIR": str(tmp_path / "plugins"), "ESCOUADE_NB_CONFIG_DIR": str(tmp_path / "config"),
           "ESCOUADE_NB_TRANSCRIPTS_DIR": str(tmp_path / "transcripts")}
    k = kernel_with_env(tmp_path / "ws", env)
    try:
        k.run(KERNEL_TOOLS_SETUP)
        k.run(f"u = %escouade connect far {served.url} --token-file {served.token_file} --harness fake\n"
              "await u.ready()", timeout=90)
        sent = k.run("print([l for l in u.transcript.path.read_text().splitlines() if 'session/new' in l][0])").text
        assert '"type":"acp"' in sent.replace(" ", "") and "Bearer" not in sent and "http://" not in sent, sent
        _kernel_tools_turn(k, "u")
        # a run_code card pending when the connection drops: withdrawn, nothing runs
        k.run("t = u.send('run code dropped = 1')\ncard = await next_open(u)", timeout=90)
        served.restart()
        wait_for(k, "card.answered and t.done", timeout=60)
        wait_for(k, "any(i.text.startswith('Reconnected to 127.0.0.1') for i in u.conversation.items "
                    "if type(i).__name__ == 'Notice')", timeout=120)
        k.run("await u.ready()", timeout=60)
        _kernel_tools_turn(k, "u")  # offered again on the reopened session
        out = k.run("print('dropped' in globals(), card.permission.state)").text
        assert out.split()[0] == "False", out
        notices = json.loads(k.run("print(json.dumps([i.text for i in u.conversation.items "
                                   "if type(i).__name__ == 'Notice' and 'kernel' in i.text]))").text)
        assert not any("were not given" in n for n in notices), notices
    finally:
        try:
            k.run("await u.close()", allow_error=True, timeout=60)
        finally:
            k.shutdown()
