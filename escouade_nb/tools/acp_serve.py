"""``escouade-acp-serve``: serve a stdio ACP agent over WebSocket, for ``%escouade connect``.

``escouade-acp-serve [--host 127.0.0.1] [--port 8765] --token-file FILE [--no-relay] -- PROGRAM ARGS``
listens on ``ws://HOST:PORT/`` (loopback by default: reach it from elsewhere through your
own tunnel, or say ``--host`` knowingly) under uvicorn (which the kernel's MCP server
already brings), and for each WebSocket connection that carries ``Authorization: Bearer
TOKEN`` (the file's content, compared in constant time) starts ``PROGRAM ARGS`` in its
own process group and carries each text frame to its stdin as one line, each line of its
stdout back as one text frame (its stderr goes to this server's). A wrong or missing token
gets HTTP 401 before any process starts; a plain HTTP request 426 (upgrade to WebSocket).

Each agent runs under the relay (:mod:`escouade_nb.engine.launch.pipe_relay`, the launchers'
own: this Python's ``-c`` bootstrap, the relay's source written first on its stdin), which
gives it a stdio MCP server and carries its MCP messages as ``mcp/message`` on the agent's own
stdout: the kernel's tools reach it over the same WebSocket (no port, no token of the kernel's
server). ``--no-relay`` runs ``PROGRAM ARGS`` alone (the kernel then says it gave no tools).

One agent process per connection: it dies with the connection (its stdin closed, then its
group SIGTERM, then SIGKILL), nothing of it is left behind. A dropped connection's session
lives on in the agent's own store: the kernel reconnects and sends ``session/load`` (or
``session/resume``), as the agent offers. Why not keep the process for a reconnect: the
dropped connection's in-flight requests and answers are lost either way, and a process
that outlives its client is one nobody may be left to end.

The token file: read at start, refused when its mode is looser than 0600; when it does
not exist it is made (0600, 32 random bytes, URL-safe) and its path said on stderr — the
token itself is never printed nor put on a command line. On start the server prints
``escouade-acp-serve: listening on ws://HOST:PORT/`` on stderr (the real port when
``--port 0``).

Why not the SDK's own ASGI server (``acp.http.AcpServer``): it binds each connection to an
in-process ``Agent`` object (typed calls), so serving a stdio agent through it would
re-encode every message through the SDK's models, dropping what they do not know; this
server carries the agent's lines as they are.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import ipaddress
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..wire.transport import MAX_LINE_BYTES
from ..wire.url_bridge import AGENT_ENDED, RemoteError, read_token

EOF_GRACE = 2.0
"""Seconds the agent has to exit once its connection ended and its stdin is closed."""


def ensure_token(path: Path) -> str:
    """The token in ``path``, made there (mode 0600, never printed) when the file does not
    exist. :class:`RemoteError` on a looser mode or an unreadable file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_token(path)
    except OSError as exc:
        raise RemoteError(f"token file {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(32) + "\n")
    print(f"escouade-acp-serve: a new token was written to {path} (mode 0600)", file=sys.stderr, flush=True)
    return read_token(path)


def _bearer(scope: dict[str, Any]) -> bytes:
    for key, value in scope.get("headers", []):
        if key.lower() == b"authorization" and value[:7].lower() == b"bearer ":
            return bytes(value[7:].strip())
    return b""


def relayed(argv: Sequence[str]) -> tuple[list[str], bytes]:
    """``(command line, preamble)`` that run ``argv`` under the relay
    (:mod:`escouade_nb.engine.launch.pipe_relay`), as a launcher's far side runs it: this
    Python's ``-c`` bootstrap, fed the relay's source on stdin before any ACP. The relay gives
    the agent a stdio MCP server and carries its messages as ``mcp/message`` on the agent's
    own stdout: the kernel's tools reach it over the same WebSocket (no port, no token).
    ``OSError`` if the relay's source cannot be read."""
    # the launchers' own bootstrap and relay (engine/launch/launcher.py, pipe_relay.py), not a copy
    from ..engine import RELAY_BOOTSTRAP, relay_preamble

    return [sys.executable, "-c", RELAY_BOOTSTRAP, *argv], relay_preamble()


class Serve:
    """The ASGI app: one agent process per authorised WebSocket connection; ``relay``: each
    runs under the relay (:func:`relayed`), so the kernel's tools reach it over the connection."""

    def __init__(self, argv: Sequence[str], token: str, relay: bool = True) -> None:
        self.argv = list(argv)
        self.preamble = b""
        if relay:
            self.argv, self.preamble = relayed(argv)
        self._token = token.encode("utf-8")
        self.processes: set[asyncio.subprocess.Process] = set()

    def authorised(self, scope: dict[str, Any]) -> bool:
        return hmac.compare_digest(_bearer(scope), self._token)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] == "http":
            status, text = (426, b"upgrade to WebSocket\n") if self.authorised(scope) else (401, b"unauthorized\n")
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": text})
            return
        if scope["type"] != "websocket":
            return
        if (await receive())["type"] != "websocket.connect":
            return
        if not self.authorised(scope):
            await send({"type": "websocket.http.response.start", "status": 401,
                        "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
            await send({"type": "websocket.http.response.body", "body": b"unauthorized\n"})
            return
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
                limit=MAX_LINE_BYTES + 1)
        except OSError as exc:
            print(f"escouade-acp-serve: cannot start {self.argv[0]}: {exc}", file=sys.stderr, flush=True)
            await send({"type": "websocket.close", "code": 1011, "reason": "the agent could not start"})
            return
        self.processes.add(process)
        if self.preamble:  # the relay's source, before any ACP: what its bootstrap reads first
            assert process.stdin is not None
            process.stdin.write(self.preamble)
        await send({"type": "websocket.accept"})
        try:
            await self._carry(process, receive, send)
        finally:
            await self._end(process)
            self.processes.discard(process)

    async def _carry(self, process: asyncio.subprocess.Process, receive: Any, send: Any) -> None:
        assert process.stdin is not None and process.stdout is not None
        stdin, stdout = process.stdin, process.stdout

        async def down() -> None:  # the agent's lines → text frames
            while True:
                try:
                    line = await stdout.readline()
                except ValueError:  # a line over the cap: the connection ends (the client would refuse it too)
                    return
                if not line:
                    return
                line = line.strip()
                if line:
                    await send({"type": "websocket.send", "text": line.decode("utf-8", "replace")})

        async def up() -> None:  # text frames → the agent's lines
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    return
                text = message.get("text")
                if text is None or "\n" in text:
                    continue  # a binary frame, or a frame that is not one line: not ACP over WebSocket
                stdin.write(text.encode("utf-8") + b"\n")
                await stdin.drain()

        tasks = [asyncio.ensure_future(down()), asyncio.ensure_future(up())]
        agent_ended = False
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            agent_ended = tasks[0].done() and not tasks[1].done()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if agent_ended:  # the agent ended first (or wrote a line over the cap): close the connection, saying so
            try:
                code = await asyncio.wait_for(process.wait(), EOF_GRACE)
            except TimeoutError:
                code = None
            reason = f"the agent exited with code {code}" if code is not None else "the agent closed its output"
            try:
                await send({"type": "websocket.close", "code": AGENT_ENDED, "reason": reason})
            except Exception:
                pass

    async def _end(self, process: asyncio.subprocess.Process) -> None:
        """Close its stdin, :data:`EOF_GRACE` seconds to exit, then SIGTERM, then SIGKILL to its group."""
        if process.stdin is not None:
            process.stdin.close()
        for sig, wait in ((None, EOF_GRACE), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
            if sig is not None:
                try:
                    os.killpg(process.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                await asyncio.wait_for(process.wait(), wait)
                break
            except TimeoutError:
                continue
        try:
            os.killpg(process.pid, signal.SIGKILL)  # what it left running in its group
        except (ProcessLookupError, PermissionError):
            pass

    def kill_all(self) -> None:
        for process in list(self.processes):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if "--" not in words or words.index("--") == len(words) - 1:
        print("usage: escouade-acp-serve [--host 127.0.0.1] [--port 8765] --token-file FILE [--no-relay] -- "
              "PROGRAM [ARGS…]",
              file=sys.stderr)
        return 2
    cut = words.index("--")
    parser = argparse.ArgumentParser(prog="escouade-acp-serve",
                                     description="Serve a stdio ACP agent over WebSocket (one process per connection)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    parser.add_argument("--port", type=int, default=8765, help="TCP port (0: any free one; default 8765)")
    parser.add_argument("--token-file", required=True, help="the bearer token's file (mode 0600; made if missing)")
    parser.add_argument("--no-relay", action="store_true",
                        help="run the agent alone, not under the relay that carries the kernel's tools over the "
                             "connection (the agent then gets no kernel tools)")
    args = parser.parse_args(words[:cut])
    try:
        token = ensure_token(Path(args.token_file).expanduser())
    except RemoteError as exc:
        print(f"escouade-acp-serve: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    try:
        app = Serve(words[cut + 1:], token, relay=not args.no_relay)
    except OSError as exc:
        print(f"escouade-acp-serve: the relay's source cannot be read ({exc}): use --no-relay", file=sys.stderr)
        return 2
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        print(f"escouade-acp-serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(app, lifespan="off", log_level="warning", ws="websockets-sansio",
                            ws_max_size=MAX_LINE_BYTES, ws_ping_interval=20, ws_ping_timeout=60)
    server = uvicorn.Server(config)
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    if not ipaddress.ip_address(host).is_loopback:
        print(f"escouade-acp-serve: warning: listening beyond this machine ({shown}) on clear-text ws://: the "
              "token and every message cross the network readable; carry it through ssh or a TLS proxy instead",
              file=sys.stderr, flush=True)
    print(f"escouade-acp-serve: listening on ws://{shown}:{port}/", file=sys.stderr, flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        app.kill_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
