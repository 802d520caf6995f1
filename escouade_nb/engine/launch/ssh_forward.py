"""The kernel's MCP server for an agent run through ``ssh`` (``--via "ssh …"``): a reverse
forward, :class:`ReverseForward`.

``127.0.0.1`` on the agent's host is not this kernel's, so the launcher's ``ssh`` gets
``-R 127.0.0.1:0:127.0.0.1:PORT`` (PORT: the kernel's loopback server,
:mod:`...kernel_mcp.http`): sshd listens on a port it picks on the remote host's loopback and
carries each connection made there back through the connection to the kernel's server.
The ``escouade`` entry of ``session/new`` then names that remote end,
``http://127.0.0.1:N/mcp``, with the grant's bearer token in its ``headers`` — the token
travels inside the ACP message on the connection's stdin, never in an argv on either side
(the ``-R`` words hold two ports and no secret).

How N is learnt: ``ssh`` says ``Allocated port N for remote forward to 127.0.0.1:PORT`` on
its stderr: at log level INFO on a connection of its own, at VERBOSE when it shares a master
connection (``ControlMaster``/``ControlPath``, which users of two-factor logins rely on:
measured with OpenSSH 9.2). :func:`forward_argv` therefore puts ``-o LogLevel=VERBOSE``
before the user's own options (the first value given wins; a ``-q`` or ``-v`` given in
``--via`` still sets its own level, and ``-q`` silences the line). VERBOSE adds a few lines of
ssh's own to the agent's stderr ("Authenticated to …", "Transferred: …" at the end). The
session's stderr drain hands each chunk to :meth:`ReverseForward.feed` (no extra reader,
nothing waits on the loop); the entry waits for the line at most :data:`FORWARD_TIMEOUT` s.
sshd answers the forward before it opens the session's channel, so the line is written
before the agent's first byte reaches us.

When the server forbids forwarding (``AllowTcpForwarding no`` or ``local``,
``PermitListen none``, ``DisableForwarding yes``), ``ssh`` says ``… remote port forwarding
failed for listen port 0`` (``Warning:``, or ``mux_client_forward: forwarding request
failed:`` through a master connection) and goes on (``-o ExitOnForwardFailure=no``, so that
a user's ``ExitOnForwardFailure yes`` does not end the agent): the agent runs without the
kernel's tools and its conversation says why in one line (:class:`ForwardFailed`).

Each process has its own forward: Restart starts a new ``ssh`` (a new remote port) and a
new grant (a new token); the old token gets 401 from the kernel's server.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

from ..._errors import EscouadeError
from .launcher import is_ssh

__all__ = ["FORWARD_TIMEOUT", "ForwardFailed", "ReverseForward", "forward_argv"]

FORWARD_TIMEOUT = 10.0
"""Seconds the ``escouade`` entry waits for ``ssh`` to report the forward's remote port,
counted from ``session/new``'s preparation: the agent has answered ``initialize`` by then,
so the line, written before the agent's first byte, is already in the stderr pipe; the wait
only lets the drain read it. Only a silenced ``ssh`` makes it run out."""

_ALLOCATED = re.compile(rb"Allocated port (\d+) for remote forward to ([^\s]+):(\d+)")
_REFUSED = re.compile(rb"remote port forwarding failed for listen (?:port \d+|path \S+)")
_MAX_LINE = 4096  # a stderr line longer than this is not ssh's: only its tail is kept for matching


class ForwardFailed(EscouadeError):
    """The reverse forward to the kernel's MCP server could not be made; the message is one
    line saying why (the server forbids it, or ``ssh`` never reported its port)."""


def forward_argv(argv: Sequence[str], local_port: int) -> list[str]:
    """``argv`` (a whole command line whose program is ``ssh``) with the reverse forward to
    ``127.0.0.1:local_port`` asked for: ``ssh -o LogLevel=VERBOSE -o ExitOnForwardFailure=no
    -R 127.0.0.1:0:127.0.0.1:local_port <the rest as it was>``. ``ValueError`` when the
    program is not ``ssh`` or the port is not 1–65535."""
    if not is_ssh(argv):
        raise ValueError(f"not an ssh command line: {list(argv)[:1]}")
    if not 0 < int(local_port) < 65536:
        raise ValueError(f"not a TCP port: {local_port!r}")
    return [argv[0], "-o", "LogLevel=VERBOSE", "-o", "ExitOnForwardFailure=no",
            "-R", f"127.0.0.1:0:127.0.0.1:{int(local_port)}", *argv[1:]]


class ReverseForward:
    """The reverse forward of one agent process's ``ssh`` to ``127.0.0.1:local_port``.

    ``remote_port`` (int, once ``ssh`` reported it), ``failed`` (the one-line reason, once
    known); :meth:`feed` takes the process's stderr as it is read; :meth:`port` waits."""

    def __init__(self, local_port: int) -> None:
        self.local_port = int(local_port)
        self.remote_port: int | None = None
        self.failed: str | None = None
        self._partial = b""
        self._known = asyncio.Event()

    def argv(self, argv: Sequence[str]) -> list[str]:
        """:func:`forward_argv` of ``argv`` for this forward."""
        return forward_argv(argv, self.local_port)

    def feed(self, chunk: bytes) -> None:
        """One chunk of ``ssh``'s stderr (bytes, any split): each whole line is matched.
        Never raises; once the outcome is known, later chunks are ignored."""
        if self._known.is_set():
            return
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()[-_MAX_LINE:]
        for line in lines:
            self._line(line)
            if self._known.is_set():
                return

    def _line(self, line: bytes) -> None:
        found = _ALLOCATED.search(line)
        if found is not None and int(found.group(3)) == self.local_port \
                and found.group(2) in (b"127.0.0.1", b"localhost"):
            self.remote_port = int(found.group(1))
            self._known.set()
        elif _REFUSED.search(line) is not None:
            self.failed = ("the ssh server refused the reverse forward (-R) to this kernel's MCP server: its "
                           "sshd_config forbids it (AllowTcpForwarding, PermitListen or DisableForwarding)")
            self._known.set()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:N/mcp``: the kernel's server as the agent's host reaches it.
        ``RuntimeError`` before the port is known."""
        if self.remote_port is None:
            raise RuntimeError("the reverse forward's remote port is not known yet")
        return f"http://127.0.0.1:{self.remote_port}/mcp"

    async def port(self, timeout: float = FORWARD_TIMEOUT) -> int:
        """The remote port, once ``ssh`` reported it (at most ``timeout`` s). Raises
        :class:`ForwardFailed` (one line) when the server refused the forward or ``ssh``
        said nothing in time."""
        try:
            await asyncio.wait_for(self._known.wait(), timeout)
        except TimeoutError:
            raise ForwardFailed(f"ssh did not report the reverse forward's remote port within {timeout:g} s "
                                f"(is it quiet? -q in --via hides the line 'Allocated port N')") from None
        if self.failed is not None:
            raise ForwardFailed(self.failed)
        assert self.remote_port is not None
        return self.remote_port
