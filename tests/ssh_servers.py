"""A real sshd on 127.0.0.1 for the ``--via "ssh …"`` tests: :func:`sshd`.

Debian's openssh-server with its own host key, config and user key in a temporary folder,
started and stopped by the caller; skipped, with one line, where it is not installed or
cannot start (it needs its privilege-separation folder, ``/run/sshd``, made when missing
and we may). ``scripts/ci-sshd.sh`` installs it in CI.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SSHD = shutil.which("sshd") or next((p for p in ("/usr/sbin/sshd",) if os.path.exists(p)), None)
SSH, KEYGEN = shutil.which("ssh"), shutil.which("ssh-keygen")
PRIVSEP = Path("/run/sshd")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def sshd(folder: Path, config: str = "") -> Iterator[list[str]]:
    """Run an sshd on a free port of 127.0.0.1 with its files in ``folder`` (made), ``config``
    (sshd_config lines, e.g. ``"AllowTcpForwarding no\\n"`` or ``"SetEnv PATH=…\\n"``) added to
    the base config; yield the ``ssh`` launcher argv that logs in to it as this user
    (key only, no prompts, its own known_hosts). Stopped at the end. ``pytest.skip`` when
    there is no sshd/ssh/ssh-keygen or it does not start."""
    if not (SSHD and SSH and KEYGEN):
        pytest.skip("no sshd/ssh/ssh-keygen here (Debian: apt-get install openssh-server)")
    if not PRIVSEP.is_dir():
        try:
            PRIVSEP.mkdir(mode=0o755, parents=True)
        except OSError as exc:
            pytest.skip(f"sshd needs {PRIVSEP}, which cannot be made here: {exc}")
    folder.mkdir(parents=True, exist_ok=True)
    for key in ("host_key", "user_key"):
        subprocess.run([KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key)], check=True)
    (folder / "authorized_keys").write_text((folder / "user_key.pub").read_text())
    port = _free_port()
    (folder / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\nPidFile {folder / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n" + config)
    log = open(folder / "sshd.log", "wb")
    daemon = subprocess.Popen([SSHD, "-D", "-e", "-f", str(folder / "sshd_config")], stdout=log, stderr=log)
    launcher = [SSH, "-p", str(port), "-i", str(folder / "user_key"), "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=no", "-o", f"UserKnownHostsFile={folder / 'known_hosts'}",
                "-o", "LogLevel=ERROR", f"{getpass.getuser()}@127.0.0.1"]
    try:
        deadline = time.monotonic() + 10
        while True:
            probe = subprocess.run([*launcher, "true"], capture_output=True, timeout=10)
            if probe.returncode == 0:
                break
            if daemon.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"sshd did not start: {(folder / 'sshd.log').read_text()[-300:]}"
                            f"{probe.stderr.decode(errors='replace')[-200:]}")
            time.sleep(0.2)
        yield launcher
    finally:
        daemon.terminate()
        try:
            daemon.wait(5)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
