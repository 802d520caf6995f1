"""A real ``escouade-acp-serve`` (uvicorn + websockets) started by a test, on 127.0.0.1.

:func:`acp_server` starts it in its own process group serving ``argv`` (a stdio ACP agent,
one process per connection) with a fresh 0600 token file, waits for the line that names
its URL, and stops it at the end (SIGTERM: its connections closed, their agents ended;
SIGKILL after a grace). :meth:`Served.restart` stops it and starts it again on the same
port: a real dropped connection, from the server's side."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from deadlines import wait_until

SERVE = [str(Path(sys.executable).with_name("escouade-acp-serve"))]


class Served:
    """One server: ``url`` (``ws://127.0.0.1:PORT/``), ``token_file``, ``process``."""

    def __init__(self, folder: Path, argv: Sequence[str], env: Mapping[str, str] | None = None,
                 flags: Sequence[str] = ()) -> None:
        self.folder, self.argv, self.env = folder, list(argv), None if env is None else dict(env)
        self.flags = list(flags)
        self.token_file = folder / "token"
        self.port = 0
        self.url = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self) -> None:
        self.runs += 1
        err = self.folder / f"serve-{self.runs}.err"
        with open(err, "wb") as out:
            self.process = subprocess.Popen(
                [*SERVE, *self.flags, "--port", str(self.port), "--token-file", str(self.token_file), "--",
                 *self.argv],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out, start_new_session=True,
                env=self.env)
        found: list[str] = []

        def listening() -> bool:
            assert self.process is not None and self.process.poll() is None, err.read_text()
            found[:] = re.findall(r"listening on (ws://\S+)", err.read_text())
            return bool(found)

        wait_until(listening, 60, "escouade-acp-serve's listening line")
        self.url = found[0]
        self.port = int(self.url.rsplit(":", 1)[1].strip("/"))

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    def restart(self) -> None:
        """Stop (every connection dropped by the server) and start again on the same port."""
        self.stop()
        self.start()

    def stderr(self) -> str:
        return "".join(p.read_text() for p in sorted(self.folder.glob("serve-*.err")))


@contextlib.contextmanager
def acp_server(folder: Path, argv: Sequence[str], env: Mapping[str, str] | None = None,
               flags: Sequence[str] = ()) -> Iterator[Served]:
    """A running ``escouade-acp-serve`` of ``argv`` (see the module; ``env``: its environment, which
    its agents inherit; default this process's; ``flags``: more of its options, such as
    ``--no-relay``), stopped at the end."""
    served = Served(folder, argv, env, flags)
    served.start()
    try:
        yield served
    finally:
        served.stop()
