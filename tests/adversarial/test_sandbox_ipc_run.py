"""What a sandboxed agent's process shares with the host besides files and the network (issue 32,
red team RT-15 and RT-2): the host's System V IPC objects (no IPC namespace: the sandbox listed and
removed the host's message queues) and the unix sockets under ``/run`` (docker's, dbus's, munge's,
a Jupyter started with ``--sock``). The sandbox has its own IPC namespace and hides ``/run``."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from escouade_nb.engine.launch.sandbox import Sandbox

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("ipcmk") is None,
                                reason="bubblewrap or util-linux's ipcmk is not installed")

PROBE = r"""
import socket, subprocess, sys
queue, path = sys.argv[1], sys.argv[2]
seen = subprocess.run(["ipcs", "-q"], capture_output=True, text=True).stdout
print("QUEUE_SEEN" if queue in seen.split() else "QUEUE_NOT_SEEN")
removed = subprocess.run(["ipcrm", "-q", queue], capture_output=True).returncode == 0
print("QUEUE_REMOVED" if removed else "QUEUE_KEPT")
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(path)
    print("SOCKET_REACHED")
except OSError as exc:
    print("SOCKET_REFUSED", exc.errno)
"""


def _inside(folder: Path, *args: str) -> str:
    binds = asyncio.run(Sandbox(offline=True).binds([sys.executable], folder=folder, env=dict(os.environ)))
    done = subprocess.run(binds.argv([sys.executable, "-c", PROBE, *args]), capture_output=True, text=True,
                          timeout=60)
    return done.stdout + done.stderr


@pytest.fixture
def run_socket():
    """A unix socket listening in a test-private folder of ``/run``."""
    folder = Path(tempfile.mkdtemp(prefix="escouade-test-", dir="/run"))
    path = folder / "service.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)
    yield path
    server.close()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def queue():
    """A System V message queue of the host's (``ipcmk -Q``), removed after."""
    made = subprocess.run(["ipcmk", "-Q"], capture_output=True, text=True, check=True).stdout
    qid = made.split(":")[-1].strip()
    yield qid
    subprocess.run(["ipcrm", "-q", qid], capture_output=True)


def test_a_sandboxed_process_sees_no_host_ipc_and_reaches_no_socket_under_run(tmp_path, queue, run_socket):
    probe = socket.socket(socket.AF_UNIX)
    probe.connect(str(run_socket))  # reachable from outside
    probe.close()
    out = _inside(tmp_path, queue, str(run_socket))
    assert "QUEUE_NOT_SEEN" in out and "QUEUE_KEPT" in out, out
    assert "SOCKET_REFUSED" in out, out
    assert queue in subprocess.run(["ipcs", "-q"], capture_output=True, text=True).stdout.split()
