"""End to end through a real kernel: a scripted agent started with ``%escouade boxed
--sandbox`` runs, by itself, the connection-file attack on its own kernel (the kernel's
``kernel-*.json`` in Jupyter's runtime folder, an ``execute_request`` signed with its key
sent to its shell port on 127.0.0.1): the file is not there, the port is refused, the
kernel's namespace shows no marker; the kernel's shutdown ends the agent's pasta."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest
from kernel_client import Kernel
from sandbox_attacks import PREFIX, seen_in, signed_execute, wait_for

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("pasta") is None,
                                 reason="bubblewrap or passt's pasta is not installed (apt-get install bubblewrap passt)")]

ATTACKS = str(Path(__file__).resolve().parent / "sandbox_attacks.py")


def RuntimeKernel(cwd: Path, runtime: Path, env: dict[str, str]) -> Kernel:
    """A :class:`kernel_client.Kernel` whose connection file is in ``runtime`` (Jupyter's
    runtime folder, as a notebook server's kernels have it), started with ``env`` added."""
    return Kernel(cwd, {**os.environ, **env}, runtime / f"kernel-{os.urandom(4).hex()}.json")


@pytest.fixture
def outside():
    folder = Path(tempfile.mkdtemp(prefix="escouade-sandbox-kernel-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_sandboxed_agent_cannot_run_code_in_its_kernel_through_the_connection_file(outside, tmp_path, script,
                                                                                     own_processes):
    runtime, xdg, ws = outside / "runtime", outside / "xdg", tmp_path / "ws"
    for folder in (runtime, xdg, ws):
        folder.mkdir(mode=0o700)
    marker = outside / "marker"
    env = {"JUPYTER_RUNTIME_DIR": str(runtime), "XDG_RUNTIME_DIR": str(xdg),
           "ESCOUADE_NB_PLUGINS_DIR": str(tmp_path / "plugins"), "ESCOUADE_NB_CONFIG_DIR": str(tmp_path / "config"),
           "ESCOUADE_NB_JOURNAL_DIR": str(tmp_path / "journal")}
    k = RuntimeKernel(ws, runtime, env)
    try:
        info = json.loads(Path(k.km.connection_file).read_text())
        # the reach, proved from outside: the file's key signs a request the kernel runs
        assert signed_execute(info["ip"], info["shell_port"], info["key"], info["signature_scheme"],
                              "CONTROL = 1", wait=30) == "ok"
        assert k.run("print('CONTROL' in globals())").text.strip() == "True"
        from scripted_agent import P_INIT
        spec = {"runtime": str(runtime), "connection": k.km.connection_file,
                "kernel": {"ip": info["ip"], "shell_port": info["shell_port"], "key": info["key"],
                           "signature_scheme": info["signature_scheme"], "marker": str(marker),
                           "code": f"PWNED = 1; open({str(marker)!r}, 'w').write('ran')"}}
        s = script("\n".join([
            P_INIT,
            'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":"$ANY"}}',
            'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}',
            'C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1",'
            '"prompt":[{"type":"text","text":"go"}]}}',
            f"!> {json.dumps({'run': [sys.executable, ATTACKS, json.dumps(spec)]})}",
            'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}']), ws=ws, name="boxed")
        s.install_sandboxed(tmp_path / "plugins")
        out = k.run("%load_ext escouade_nb\nb = %escouade boxed --sandbox\nawait b.ready()\nawait b.send('go')\n"
                    "print('\\n'.join(getattr(i, 'text', '') for i in b.conversation.items "
                    "if type(i).__name__ == 'Message'))\n"
                    "print('pwned:', 'PWNED' in globals())", timeout=120).text
        assert PREFIX in out, out
        seen = seen_in(out)
        assert seen["runtime"] == [] and seen["connection"] == "ENOENT"
        assert seen["shell_connect"] == "ECONNREFUSED" and seen["execute"] == "no reply"
        assert "pwned: False" in out and not marker.exists()
        assert k.run("print('PWNED' in globals())").text.strip() == "False"  # after the agent's try, still none
        assert len(own_processes("--netns-only")) == 1  # the agent's pasta, until the kernel ends
    finally:
        k.shutdown()
    wait_for(lambda: not own_processes("--netns-only") and not own_processes("bwrap"), 15,
             "the kernel's shutdown to end the agent's bwrap and pasta")


def test_a_kernel_killed_with_sigkill_leaves_no_pasta(outside, tmp_path, own_processes):
    """pasta is the kernel's child under ``setpriv --pdeathsig KILL``: a kernel killed with
    SIGKILL (nothing of ours runs then) takes its agents' pastas with it (on main they
    stayed, idle, until killed by hand)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {"ESCOUADE_NB_PLUGINS_DIR": str(tmp_path / "plugins"), "ESCOUADE_NB_CONFIG_DIR": str(tmp_path / "config"),
           "ESCOUADE_NB_JOURNAL_DIR": str(tmp_path / "journal")}
    k = RuntimeKernel(ws, outside, env)
    try:
        k.run("%load_ext escouade_nb\nf = %escouade fake --sandbox\nawait f.ready()", timeout=120)
        wait_for(lambda: len(own_processes("--netns-only")) == 1, 30, "the fake agent's pasta")
        os.kill(k.km.provisioner.pid, signal.SIGKILL)  # no shutdown hook of the kernel runs
        wait_for(lambda: not own_processes("--netns-only") and not own_processes("bwrap"), 15,
                 "the killed kernel's pasta and bwrap to end with it")
    finally:
        k.shutdown()
