"""Every launcher that carries stdin and stdout, for real (``tests/remote_places.py``): a podman
container (``podman exec -i NAME``), the same container through the real ``docker`` client and
podman's Docker-API service (``docker exec -i NAME``), a single-node Slurm on 127.0.0.1 (``srun -N1
--unbuffered``). Through each, ``Squad.start(…, via=…)`` locates the program and reads its version on
the far side, the scripted agent starts there, answers a prompt (saying where it ran) and ends with
Stop; a stubborn agent (it ignores end of input and SIGTERM, with a child in its group) is ended on
the far side by Stop and by the local launcher killed; an unreachable place (a container not running,
an allocation refused, a host that does not answer) fails the start in one line, nothing left behind
on either side. ``ssh`` has its own file (``test_via_ssh.py``); Kubernetes cannot run here:
``kubectl exec -i POD --`` rides the same prefix code and is not tested against a cluster."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import pytest

from deadlines import run, until, wait_until
from escouade_nb.engine.squad import Squad
from escouade_nb.wire.errors import AgentError
from remote_places import Box, Cluster
from scripted_agent import P_INIT, P_NEW, P_PROMPT, alive

PLACES = ["podman", "docker", "srun"]

WHERE = ("test -e /run/.containerenv && echo in-a-container || echo on-the-host; "
         "echo job=${SLURM_JOB_ID:-none}")
WORKS = (f"{P_INIT}\n{P_NEW}\n{P_PROMPT}\n!> {json.dumps({'run': ['sh', '-c', WHERE]})}\n"
         'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}')
STUBBORN = (f"{P_INIT}\n{P_NEW}\n"
            '!> {"ignore_sigterm": true}\n'
            '!> {"spawn": ["sh", "-c", "exec sleep 600"]}\n'
            '!> {"hang": true}')
"""An agent that ignores stdin's end and SIGTERM, with a child in its process group."""


@pytest.fixture
def place(request, monkeypatch, tmp_path):
    """``(launcher argv, a function giving what of ours still runs on the far side)`` for the
    place named by the test's parameter; the scripted harness installed for the squad."""
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    kind = request.param
    if kind == "srun":
        cluster: Cluster = request.getfixturevalue("slurm_cluster")

        def far_left(scenario: str) -> list[str]:
            mine = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout.splitlines()
            return [line for line in mine if scenario in line and "srun" not in line] + cluster.jobs()
        return kind, cluster.launcher, far_left
    box: Box = request.getfixturevalue("docker_box" if kind == "docker" else "podman_box")
    for key, value in box.env.items():
        monkeypatch.setenv(key, value)

    def in_box(scenario: str) -> list[str]:
        return [line for line in box.ps() if scenario in line or "sleep 600" in line]
    return kind, box.launcher, in_box


def _local(scenario: str) -> list[int]:
    """Pids of this machine's processes whose command line names ``scenario`` (the launchers'
    included: ``podman exec -i … script_agent.py SCENARIO``)."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [int(line.split(None, 1)[0]) for line in out.splitlines()
            if scenario in line and int(line.split(None, 1)[0]) != os.getpid()]


def said(agent) -> str:
    return "\n".join(getattr(i, "text", "") for i in agent.conversation.items)


async def _started(squad: Squad, s, launcher: list[str]):
    agent = squad.start(s.ref.harness.id, cwd=s.ws, via=launcher, fs=True)
    await asyncio.wait_for(agent.ready(), 120)
    return agent


@pytest.mark.parametrize("place", PLACES, indirect=True)
def test_an_agent_is_found_started_prompted_and_stopped_on_the_far_side(script, place, tmp_path):
    kind, launcher, far_left = place
    s = script(WORKS)
    s.install(tmp_path / "plugins")

    async def go():
        squad = Squad()
        try:
            agent = await _started(squad, s, launcher)
            turn = agent.send("go")
            await asyncio.wait_for(turn.wait(), 120)
            text = said(agent)
            await agent.close()
            return text, agent.status
        finally:
            await squad.aclose()
    text, status = run(go(), timeout=300)
    # located and its version read over there: the image's own Python for a container
    expected = "/usr/bin/python3" if kind != "srun" else "python3"
    assert f"Runs via {' '.join(launcher)}: " in text and expected in text.split("Runs via", 1)[1], text
    assert "[exit 0]" in text
    if kind == "srun":
        assert "on-the-host" in text and "job=none" not in text, text
    else:
        assert "in-a-container" in text, text
    s.assert_ok()
    assert status == "closed"
    wait_until(lambda: not far_left(str(s.scenario)) and not _local(str(s.scenario)), 60,
               "nothing of the agent on either side", every=0.5)


@pytest.mark.parametrize("place", PLACES, indirect=True)
@pytest.mark.parametrize("how", ["stop", "kill -9 the launcher"])
def test_a_stubborn_agent_ends_on_the_far_side_when_stopped_or_its_launcher_is_killed(script, place, tmp_path, how):
    """Stop (end of input, then the local group killed) and a launcher killed outright both end the
    far agent and its child, though it ignores end of input and SIGTERM: the far wrapper's doing
    (``engine/launch/launcher.py``). Not for ``srun`` killed outright: Slurm keeps a step whose
    ``srun`` died by SIGKILL running (its I/O is not closed; the cluster's ``InactiveLimit`` ends it),
    a Slurm behaviour no wrapper sees — the kernel's own death is tested below for every launcher."""
    kind, launcher, far_left = place
    if kind == "srun" and how == "kill -9 the launcher":
        pytest.skip("Slurm keeps the step of an srun killed by SIGKILL (see the docstring)")
    s = script(STUBBORN)
    s.install(tmp_path / "plugins")
    scenario = str(s.scenario)

    async def go():
        squad = Squad()
        try:
            agent = await _started(squad, s, launcher)
            await until(lambda: _spawned(s), 90, "the far agent's child")
            running = await asyncio.to_thread(far_left, scenario)
            assert running, "nothing of the agent on the far side while it runs"
            if how == "stop":
                await agent.close()
            else:
                os.kill(agent.pid, signal.SIGKILL)  # the local launcher only: its pipes close
                await until(lambda: agent.status in ("exited", "failed"), 60, "the agent seen ended")
                await agent.close()
        finally:
            await squad.aclose()
    run(go(), timeout=300)
    wait_until(lambda: not far_left(scenario), 60, f"the far side empty after {how}", every=0.5)
    wait_until(lambda: not _local(scenario), 30, "no launcher left here", every=0.5)


def _spawned(s) -> bool:
    return any(e["line"].startswith("spawned") for e in s.entries("note"))


KERNEL_SIDE = r"""
import asyncio, json, sys
from escouade_nb.engine.squad import Squad
from escouade_nb.wire.errors import AgentError

async def main():
    squad = Squad()
    agent = squad.start(sys.argv[1], cwd=sys.argv[2], via=json.loads(sys.argv[3]), fs=True)
    await agent.ready()
    print(agent.pid, flush=True)
    await asyncio.Event().wait()  # until killed

asyncio.run(main())
"""
"""A kernel's side in a process of its own: a squad that starts the agent through the launcher and
prints the launcher's pid, then waits to be killed."""


@pytest.mark.parametrize("place", PLACES, indirect=True)
def test_the_kernel_killed_ends_the_stubborn_far_agent_and_its_launcher(script, place, tmp_path):
    """The process that started the agent (a kernel) dies by SIGKILL, cleaning nothing: the
    launcher it left gets end of input, and the far side ends the agent and its child; the
    launcher then ends by itself."""
    kind, launcher, far_left = place
    s = script(STUBBORN)
    s.install(tmp_path / "plugins")
    scenario = str(s.scenario)
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL_SIDE, s.ref.harness.id, str(s.ws), json.dumps(launcher)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_until(lambda: _spawned(s) or kernel.poll() is not None, 120, "the far agent's child", every=0.2)
        assert kernel.poll() is None, "the kernel's side ended by itself"
        launcher_pid = int(kernel.stdout.readline())
        assert far_left(scenario) and alive(launcher_pid)
    finally:
        os.kill(kernel.pid, signal.SIGKILL)
        kernel.wait()
        kernel.stdout.close()
    wait_until(lambda: not far_left(scenario), 60, "the far side empty after the kernel died", every=0.5)
    wait_until(lambda: not alive(launcher_pid), 30, "the orphaned launcher ended", every=0.5)


@pytest.fixture
def stopped_box(podman_box):
    """A second container of the session's image, made and stopped (``podman create``: it exists, it
    does not run); removed after."""
    from remote_places import IMAGE, PODMAN

    name = f"{podman_box.name}-stopped"
    made = subprocess.run([PODMAN, "create", "--name", name, "--network", "none", IMAGE, "true"],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    try:
        yield name
    finally:
        subprocess.run([PODMAN, "rm", "-f", name], capture_output=True, timeout=120)


def _refused(s, launcher: list[str]) -> tuple[str, str, str]:
    """Start through ``launcher``, which cannot reach its place: the agent's error, status and conversation."""
    async def go():
        squad = Squad()
        try:
            agent = squad.start(s.ref.harness.id, cwd=s.ws, via=launcher, fs=True)
            with pytest.raises(AgentError):
                await asyncio.wait_for(agent.ready(), 120)
            return agent.error, agent.status, said(agent)
        finally:
            await squad.aclose()
    return run(go(), timeout=200)


def _one_line(error: str, launcher: list[str]) -> None:
    assert error and "\n" not in error and error.startswith(" ".join(launcher) + ": "), error


def test_a_container_that_does_not_run_fails_the_start_in_one_line(script, tmp_path, stopped_box, monkeypatch):
    from remote_places import PODMAN

    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    s = script(WORKS)
    s.install(tmp_path / "plugins")
    for launcher in ([PODMAN, "exec", "-i", stopped_box], [PODMAN, "exec", "-i", "no-such-container-escouade"]):
        error, status, text = _refused(s, launcher)
        _one_line(error, launcher)
        assert status == "failed" and error in text
        assert ("not running" in error or "no such container" in error
                or "state improper" in error), error
    assert not s.log.exists() and not _local(str(s.scenario))  # the agent never ran; nothing left here


def test_an_allocation_refused_fails_the_start_in_one_line_and_nothing_is_queued(script, tmp_path, slurm_cluster,
                                                                                  monkeypatch):
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    s = script(WORKS)
    s.install(tmp_path / "plugins")
    launcher = [*slurm_cluster.launcher, "--partition", "nowhere"]
    error, status, text = _refused(s, launcher)
    _one_line(error, launcher)
    assert "Unable to allocate resources" in error and status == "failed", error
    assert not s.log.exists() and slurm_cluster.jobs() == []


def test_an_unreachable_host_fails_the_start_in_one_line(script, tmp_path, monkeypatch):
    """An ``ssh`` to a port where nothing listens: ssh's own line; no local ``ssh`` left."""
    import shutil
    import socket

    if shutil.which("ssh") is None:
        pytest.skip("no ssh client here (Debian: apt-get install openssh-client)")
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    s = script(WORKS)
    s.install(tmp_path / "plugins")
    launcher = ["ssh", "-p", str(port), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "127.0.0.1"]
    error, status, _ = _refused(s, launcher)
    _one_line(error, launcher)
    assert "Connection refused" in error and status == "failed", error
    assert not _local(str(s.scenario))


def test_a_program_missing_on_the_far_side_is_said_in_one_line(script, tmp_path, podman_box, monkeypatch):
    """The program is looked up over there, not here: a harness whose program the container lacks."""
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    s = script(WORKS)
    manifest = json.loads(s.ref.path.read_text())
    manifest["contributes"]["harnesses"][0]["locate"]["names"] = [os.path.basename(sys.executable) + "-nowhere",
                                                                   "escouade-no-such-program"]
    s.ref.path.write_text(json.dumps(manifest))
    s.install(tmp_path / "plugins")
    error, status, _ = _refused(s, podman_box.launcher)
    _one_line(error, podman_box.launcher)
    assert "no program named" in error and "escouade-no-such-program" in error and status == "failed", error


def test_the_folders_project_file_names_its_launcher(script, tmp_path, podman_box, monkeypatch):
    """``.escouade.yml``'s ``via:``: an agent started in the folder without ``--via`` runs in the container;
    the head and the squad row say so."""
    from escouade_nb.widgets.agent_view import status_line
    from escouade_nb.widgets.squad_view import agent_row

    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    s = script(WORKS)
    s.install(tmp_path / "plugins")
    (s.ws / ".escouade.yml").write_text(f"via: podman exec -i {podman_box.name}\n")

    async def go():
        squad = Squad()
        try:
            agent = squad.start(s.ref.harness.id, cwd=s.ws, fs=True)
            await asyncio.wait_for(agent.ready(), 120)
            await asyncio.wait_for(agent.send("go").wait(), 120)
            seen = list(agent.via), said(agent), status_line(agent), agent_row(agent)["folder"]
            await agent.close()
            return seen
        finally:
            await squad.aclose()
    via, text, head, folder = run(go(), timeout=300)
    assert via == ["podman", "exec", "-i", podman_box.name]
    assert "in-a-container" in text and f"Runs via podman exec -i {podman_box.name}: /usr/bin/python3" in text
    assert f"via podman exec -i {podman_box.name}" in head and folder.endswith(f"via podman exec -i {podman_box.name}")
    s.assert_ok()


@pytest.mark.parametrize("via, why", [
    ("ssh -o ProxyCommand=touch\\ /tmp/x host", "option -o is not allowed"),
    ("ssh -oProxyCommand=x host", "option -oProxyCommand=x is not allowed"),
    ("/usr/bin/ssh host", "must be one of"),
    ("sh -c 'touch /tmp/x'", "must be one of"),
    ("kubectl --kubeconfig ./k exec -i pod --", "kubectl exec"),
    ("kubectl exec -i pod", "must end with --"),
    ("srun --prolog=./x -N1", "option --prolog=./x is not allowed"),
    ("podman exec -i --env A=1 box", "option --env is not allowed"),
    ("podman exec -i", "one host, container or pod"),
])
def test_a_project_file_names_only_the_documented_launcher_forms(tmp_path, via, why):
    """A cloned folder must not run a local command of its own by naming a launcher: refused in one
    line naming the file, nothing started."""
    from escouade_nb.manifest.project import ProjectFileError, project_launcher

    (tmp_path / ".escouade.yml").write_text(json.dumps({"via": via}))
    with pytest.raises(ProjectFileError) as caught:
        project_launcher(tmp_path)
    message = str(caught.value)
    assert why in message and str(tmp_path / ".escouade.yml") in message and "\n" not in message, message


@pytest.mark.parametrize("via", ["ssh -p 2222 -l me host.example", "ssh me@host", "podman exec -i box",
                                 "docker exec -i -w /work -u 1000 box", "kubectl exec -i -n ns -c main pod --",
                                 "srun -N1 --unbuffered", "srun -N 1 -p gpu --gres=gpu:1 -t 60 --unbuffered"])
def test_the_documented_launcher_forms_are_read_from_a_project_file(tmp_path, via):
    import shlex

    from escouade_nb.manifest.project import project_launcher

    (tmp_path / ".escouade.yml").write_text(json.dumps({"via": via}))
    assert project_launcher(tmp_path) == shlex.split(via)


def test_an_account_is_refused_through_a_launcher_that_carries_no_environment(script, tmp_path, monkeypatch):
    """``--account`` points the manifest's ``accountVar`` at a folder of this machine, in the launcher's
    environment: ``podman exec``/``docker exec``/``kubectl exec``/``ssh`` pass none of it, so the agent would
    silently use the far side's default account. Refused in one line, nothing started."""
    from scripted_agent import refused_start

    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    s = script(WORKS)
    manifest = json.loads(s.ref.path.read_text())
    manifest["contributes"]["harnesses"][0]["accountVar"] = "SCRIPT_HOME"
    s.ref.path.write_text(json.dumps(manifest))
    s.install(tmp_path / "plugins")
    message, agents = run(refused_start(s.ref.harness.id, cwd=s.ws, via="podman exec -i box", account="work"))
    assert message.startswith("--account cannot be used with --via podman exec -i box") and "SCRIPT_HOME" in message
    assert "\n" not in message and agents == {} and not s.log.exists()
