"""A hostile agent sandboxed on the far side of a launcher (``--sandbox --via``: bwrap there, inside
the launcher's command; ``engine/launch/sandbox.py`` ``far_command``), through a real single-node
Slurm on this host (``srun``: the far side is this machine, so what it shares with the kernel is
there to attack): from inside it tries to list the far side's Jupyter runtime folder
(``$JUPYTER_RUNTIME_DIR``, which ``srun`` carries), to connect to a unix socket under ``/run`` and
to write outside its folder. Each fails; the guarantee is written in docs/security.md (``--sandbox
--via``)."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import pytest

from deadlines import run
from escouade_nb.engine.squad import Squad
from sandbox_attacks import UnixListener, seen_in
from scripted_agent import P_INIT, P_NEW, P_PROMPT

ATTACKS = str(Path(__file__).resolve().parent / "sandbox_attacks.py")


@pytest.fixture
def outside():
    """Folders outside /tmp (its /tmp is its own): a Jupyter runtime folder with a connection file, a
    folder to write in (both under /var/tmp) and a unix socket's folder under /run; removed after."""
    runtime = Path(tempfile.mkdtemp(prefix="escouade-far-runtime-", dir="/var/tmp"))
    (runtime / "kernel-far.json").write_text(json.dumps({"key": "secret"}))
    other = Path(tempfile.mkdtemp(prefix="escouade-far-other-", dir="/var/tmp"))
    sockets = Path(tempfile.mkdtemp(prefix="escouade-far-", dir="/run"))
    try:
        yield runtime, other, sockets
    finally:
        for folder in (runtime, other, sockets):
            shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.timeout(400)
def test_a_far_sandboxed_agent_reaches_no_runtime_folder_socket_or_other_folder(script, tmp_path, monkeypatch,
                                                                                 slurm_cluster, outside):
    runtime, other, sockets = outside
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))  # srun carries it to the far side
    listener = UnixListener(sockets / "s.sock")
    try:
        with socket.socket(socket.AF_UNIX) as s:  # reachable from outside the sandbox
            s.connect(str(sockets / "s.sock"))
        spec = {"runtime": str(runtime), "connection": str(runtime / "kernel-far.json"),
                "socket": str(sockets / "s.sock"), "writes": [str(other / "planted"), str(tmp_path / "own")]}
        steps = f"!> {json.dumps({'run': [sys.executable, ATTACKS, json.dumps(spec)]})}"
        s = script(f"{P_INIT}\n{P_NEW}\n{P_PROMPT}\n{steps}\n"
                   'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}', ws=tmp_path)
        s.install(tmp_path / "plugins")

        async def go():
            squad = Squad()
            try:
                agent = squad.start(s.ref.harness.id, cwd=s.ws, via=slurm_cluster.launcher, sandbox=True, fs=True)
                await asyncio.wait_for(agent.ready(), 120)
                await asyncio.wait_for(agent.send("go").wait(), 120)
                text = "\n".join(getattr(i, "text", "") for i in agent.conversation.items)
                await agent.close()
                return text
            finally:
                await squad.aclose()
        text = run(go(), timeout=300)
    finally:
        listener.close()
    seen = seen_in(text)
    assert seen["runtime"] == [] and seen["connection"] == "ENOENT", seen  # hidden: an empty folder
    assert seen["socket"] in ("ENOENT", "ECONNREFUSED"), seen  # /run is an empty tmpfs there
    assert seen["writes"] == {str(other / "planted"): "EROFS", str(tmp_path / "own"): "written"}, seen
    assert not (other / "planted").exists() and (tmp_path / "own").exists()
