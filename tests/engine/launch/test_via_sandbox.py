"""``--sandbox`` with a launcher (``--via``): bwrap runs on the far side, inside the launcher's
command (after the far wrapper), never around the local launcher (``engine/launch/sandbox.py``
:func:`far_command`, ``engine/launch/far_side.py``). Against a real podman container with
bubblewrap in its image (``tests/remote_places.py``: ``podman_sandbox_box``) and this host through a
single-node Slurm (``srun``) or a real sshd on 127.0.0.1 (``ssh``; bwrap installed here): the scripted agent
there writes inside its folder; its hostile writes outside it fail (the container's own ``/etc``:
read-only) or land in its private ``/tmp`` (beside its folder on the shared mount: nothing there). Where the far side has no bwrap (the plain test image) the start is
refused in one line naming the place, and where bwrap is there but cannot make a sandbox (podman's
default, ``/proc`` masked) too; nothing runs there."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from deadlines import run
from escouade_nb.engine.agent import protections
from escouade_nb.engine.squad import Squad
from escouade_nb.wire.errors import AgentError
from scripted_agent import P_INIT, P_NEW, P_PROMPT


def own_commands(*argvs: list[str]) -> str:
    steps = "\n".join(f"!> {json.dumps({'run': argv})}" for argv in argvs)
    return f"{P_INIT}\n{P_NEW}\n{P_PROMPT}\n{steps}\n" + 'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'


def said(agent) -> str:
    return "\n".join(getattr(i, "text", "") for i in agent.conversation.items)


def test_the_far_command_is_the_local_profile_with_far_paths():
    """Pure: the prelude makes the state folders, then bwrap with the local builder's profile."""
    from escouade_nb.engine.launch.sandbox import FAR_PRELUDE, far_command

    argv = far_command(["agent", "--acp"], folder="/w", home="/home/u", state_folders=["~/.agent", "${NOPE}"],
                       also=["/data"], run_dirs=["/run"])
    assert argv[:5] == ["sh", "-c", FAR_PRELUDE, "escouade_nb", "1"] and argv[5] == "/home/u/.agent"
    bwrap = argv[6:]
    assert bwrap[:9] == ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs"]
    assert ["--bind", "/w", "/w"] == bwrap[bwrap.index("/w") - 1:bwrap.index("/w") + 2]
    assert "--unshare-user" in bwrap and "--cap-drop" in bwrap and "--unshare-net" not in bwrap
    assert ["--tmpfs", "/run"] == bwrap[bwrap.index("/run") - 1:bwrap.index("/run") + 1]
    assert bwrap[-3:] == ["--", "agent", "--acp"]
    offline = far_command(["agent"], folder="/w", home=None, offline=True)
    assert "--unshare-net" in offline and offline[4] == "0"
    # a program in a venv made under /tmp (CI's): its prefix read where it exists, over the private /tmp
    under = far_command(["/tmp/ci-venv/bin/agent"], folder="/w", home=None)
    assert ["--ro-bind-try", "/tmp/ci-venv", "/tmp/ci-venv"] == \
        under[under.index("/tmp/ci-venv") - 1:under.index("/tmp/ci-venv") + 2]


def test_sandbox_ports_with_a_launcher_are_refused_in_one_line(script, tmp_path, monkeypatch):
    """No pasta runs over there: a port rule would be a claim only."""
    from escouade_nb.engine.squad import SquadError

    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    s = script(own_commands(["true"]))
    s.install(tmp_path / "plugins")

    async def go():
        squad = Squad()
        try:
            with pytest.raises(SquadError) as caught:
                squad.start(s.ref.harness.id, cwd=s.ws, via=["ssh", "somewhere"], sandbox_ports=[11434])
            return str(caught.value), dict(squad.agents)
        finally:
            await squad.aclose()
    message, agents = run(go())
    assert message.startswith("--sandbox-port cannot be used with --via ssh somewhere") and "\n" not in message
    assert agents == {}


def _start(s, launcher: list[str]):
    async def go():
        squad = Squad()
        try:
            agent = squad.start(s.ref.harness.id, cwd=s.ws, via=launcher, sandbox=True, fs=True)
            try:
                await asyncio.wait_for(agent.ready(), 120)
            except AgentError:
                return agent.error, agent.status, said(agent)
            await asyncio.wait_for(agent.send("go").wait(), 120)
            text = said(agent) + "\nPROTECTIONS " + json.dumps(protections(agent))
            await agent.close()
            return None, agent.status, text
        finally:
            await squad.aclose()
    return run(go(), timeout=280)


@pytest.fixture(params=["podman", "srun", "ssh"])
def sandbox_place(request, tmp_path_factory):
    """``(launcher, does the far side have this file)``: a container with bubblewrap, or this host
    through a single-node Slurm or a real sshd on 127.0.0.1 (bwrap installed here)."""
    if request.param == "srun":
        yield request.getfixturevalue("slurm_cluster").launcher, os.path.exists
    elif request.param == "ssh":
        from ssh_servers import sshd

        with sshd(tmp_path_factory.mktemp("sshd")) as launcher:
            yield launcher, os.path.exists
    else:
        box = request.getfixturevalue("podman_sandbox_box")
        yield box.launcher, lambda path: box.exec("test", "-e", path).returncode == 0


@pytest.mark.timeout(400)
def test_a_sandboxed_agent_over_there_writes_in_its_folder_and_nowhere_else(script, tmp_path, monkeypatch,
                                                                              sandbox_place):
    launcher, far_has = sandbox_place
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    escaped = tmp_path.parent / f"escaped-{tmp_path.name}.txt"  # the same mount, beside its folder
    etc = f"/etc/escouade-escaped-{tmp_path.name}"
    s = script(own_commands(
        ["sh", "-c", "echo inside > inside.txt && echo wrote-inside"],
        ["sh", "-c", f"echo out > {escaped} && echo wrote-private-tmp"],
        ["sh", "-c", f"echo out > {etc} || echo refused-etc"],
        ["sh", "-c", "ps -eo args"]), ws=tmp_path)
    s.install(tmp_path / "plugins")
    error, status, text = _start(s, launcher)
    assert error is None, error
    assert f"Sandboxed over there (bwrap in {' '.join(launcher)})" in text and "far side's own" in text, text
    assert "wrote-inside" in text and (tmp_path / "inside.txt").read_text() == "inside\n"
    assert "wrote-private-tmp" in text and not escaped.exists(), text  # its /tmp is its own: not the mount's
    assert "refused-etc" in text and "Read-only file system" in text and not far_has(etc), text
    seen = text.split("COMMAND", 1)[1].split("\n\n", 1)[0]  # its own pid namespace: bwrap, the agent, sh, ps
    assert seen.lstrip().startswith("bwrap --ro-bind") and "sleep infinity" not in seen and "slurmstepd" not in seen
    held = dict(json.loads(text.rsplit("PROTECTIONS ", 1)[1]))  # the head's tooltip claims no more than holds
    assert "Sandboxed over there" in held["sandboxed"] and "not cut" in held["sandboxed"], held
    assert status == "closed"
    s.assert_ok()


def test_no_bwrap_on_the_far_side_refuses_in_one_line_naming_the_place(script, tmp_path, monkeypatch, podman_box):
    """The plain test image has no bubblewrap: refused before the agent runs there."""
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    s = script(own_commands(["true"]))
    s.install(tmp_path / "plugins")
    error, status, text = _start(s, podman_box.launcher)
    where = " ".join(podman_box.launcher)
    assert error == f"--sandbox: no bwrap in {where}; install bubblewrap there or drop --sandbox", error
    assert status == "failed" and error in text and not s.log.exists()


def test_a_bwrap_that_cannot_sandbox_there_refuses_in_one_line(script, tmp_path, monkeypatch, podman_masked_box):
    """bwrap in a container as podman makes it by default (``/proc`` masked): its own line, said."""
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    s = script(own_commands(["true"]))
    s.install(tmp_path / "plugins")
    error, status, _ = _start(s, podman_masked_box.launcher)
    where = " ".join(podman_masked_box.launcher)
    assert error.startswith(f"--sandbox: bwrap cannot sandbox in {where} (bwrap: ") and "\n" not in error, error
    assert "unmask=/proc/*" in error and status == "failed" and not s.log.exists()
