"""``--via "ssh …"`` against a real sshd on 127.0.0.1: the agent runs on the "remote" side
of a real SSH connection, and Stop (``close()``) and Restart end it there too — not only
the local ``ssh`` client — even an agent that ignores end of input and SIGTERM, with a
child in its process group (see ``escouade_nb/engine/launch/launcher.py``).

The sshd is Debian's openssh-server, with its own host key, config and user key in a
temporary folder, started and stopped here; the tests are skipped, with one line, where
it is not installed or cannot start (it needs its privilege-separation folder,
``/run/sshd``, made here when missing and we may): ``tests/ssh_servers.py``."""

from __future__ import annotations

import sys
import time

import pytest

from scripted_agent import P_INIT, P_NEW, P_PROMPT, Script, _chunk, alive, run
from ssh_servers import sshd


@pytest.fixture(scope="module")
def ssh_launcher(tmp_path_factory):
    """The ``ssh`` launcher argv to a fresh sshd on 127.0.0.1 (stopped at the end)."""
    with sshd(tmp_path_factory.mktemp("sshd")) as launcher:
        yield launcher


STUBBORN = (f"{P_INIT}\n{P_NEW}\n"
            '!> {"ignore_sigterm": true}\n'
            f'!> {{"spawn": ["{sys.executable}", "-c", "import time; time.sleep(600)"]}}\n'
            '!> {"hang": true}')
"""An agent that ignores stdin's end and SIGTERM, with a child in its process group."""
WORKS = f"{P_INIT}\n{P_NEW}\n{P_PROMPT}\nA> {_chunk('over ssh')}\n" \
        'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'


def _pids(s: Script, run_no: int) -> list[int]:
    """The agent's and its child's pids of run ``run_no`` (the scripted agent logs them)."""
    notes = [e["line"] for e in s.entries("note", run=run_no)]
    return [int(n.split()[-1]) for n in notes if n.startswith(("start pid", "spawned"))]


async def _started(s: Script, run_no: int) -> list[int]:
    """The pids of run ``run_no`` once the agent has spawned its child (all alive)."""
    from scripted_agent import until

    await until(lambda: len(_pids(s, run_no)) == 2, 60, "the agent and its child")
    pids = _pids(s, run_no)
    assert all(alive(p) for p in pids), pids
    return pids


async def _gone(pids: list[int], timeout: float = 15) -> list[int]:
    import asyncio

    deadline = time.monotonic() + timeout
    while [p for p in pids if alive(p)] and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return [p for p in pids if alive(p)]


def test_stop_through_ssh_ends_the_remote_agent(script, ssh_launcher):
    s = script(STUBBORN)

    async def go():
        agent = s.agent(via=ssh_launcher, fs=True)
        try:
            await agent.ready()
            assert agent.argv()[:len(ssh_launcher)] == ssh_launcher
            pids = await _started(s, 0)
        finally:
            await agent.close()  # Stop: the local ssh ends, and so must the remote agent and its child
        assert await _gone(pids) == [], "the remote agent outlived Stop"

    run(go(), timeout=60)


def test_restart_through_ssh_ends_the_remote_agent_and_starts_a_new_one(script, ssh_launcher):
    s = script(STUBBORN, WORKS)

    async def go():
        async with s.running(via=ssh_launcher, fs=True) as agent:
            await agent.ready()
            first = await _started(s, 0)
            await agent.restart()
            assert await _gone(first) == [], "the remote agent outlived Restart"
            assert (await agent.send("go")).text == "over ssh"  # the new one, over ssh, works
            second = _pids(s, 1)
        assert await _gone(second) == []

    run(go(), timeout=90)
    assert s.statuses()[-1]["status"] == "ok"


def test_a_resumed_agent_runs_through_its_launcher_again(script, ssh_launcher):
    """The transcript's header keeps ``via``: after a kernel restart, ``resume`` runs the
    agent on the other side again (it ran locally before: a remote agent's resume must not
    become a local one)."""
    from escouade_nb.engine.agent import Agent

    s = script(WORKS, WORKS)

    async def go():
        async with s.running(via=ssh_launcher, fs=True) as agent:
            assert (await agent.send("go")).text == "over ssh"
            path = agent.transcript.path
        again = Agent.resume(path, s.ref, program=sys.executable, fs=True)
        try:
            assert list(again.via) == ssh_launcher and again.argv()[:len(ssh_launcher)] == ssh_launcher
            again.start()
            assert (await again.send("go")).text == "over ssh"
        finally:
            await again.close()

    run(go(), timeout=90)
