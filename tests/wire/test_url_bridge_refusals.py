"""The URL carrier (``escouade_nb.wire.url_bridge``, a remote agent's launcher) against a
server that is not to be trusted: a real ``websockets`` server started here on 127.0.0.1
that redirects to another host, sends a frame over the 8 MiB cap, a binary frame, a frame
that is not JSON, a JSON frame spread on several lines. The carrier runs as the real
subprocess the kernel starts; each refusal is one line on its stderr naming HOST:PORT, and
what it passes on is one JSON object per line."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from deadlines import run

from escouade_nb.wire.transport import MAX_LINE_BYTES
from escouade_nb.wire.url_bridge import REFUSED


def _token(tmp_path):
    path = tmp_path / "token"
    path.write_text("s3cret-s3cret-s3cret\n")
    path.chmod(0o600)
    return path


async def _carrier(url: str, token_file, send: bytes = b"") -> tuple[int, bytes, str]:
    """Run the carrier to its end; ``send`` on its stdin (kept open until it exits)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "escouade_nb.wire.url_bridge", "--token-file", str(token_file), url, "--", "x",
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdin is not None
    process.stdin.write(send)
    await process.stdin.drain()
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode, out, err.decode()


def test_a_redirect_is_refused(tmp_path):
    from websockets.asyncio.server import serve
    from websockets.datastructures import Headers
    from websockets.http11 import Response

    def redirect(connection, request):
        return Response(302, "Found", Headers({"Location": "ws://198.51.100.7:9/", "Content-Length": "0"}), b"")

    async def scenario():
        async with serve(lambda ws: ws.wait_closed(), "127.0.0.1", 0, process_request=redirect) as server:
            port = server.sockets[0].getsockname()[1]
            return port, await _carrier(f"ws://127.0.0.1:{port}/", _token(tmp_path))

    port, (code, out, err) = run(scenario)
    assert code == REFUSED and out == b""
    assert f"127.0.0.1:{port}: the server redirected to ws://198.51.100.7:9/: refused" in err, err
    assert "s3cret" not in err


def test_garbage_is_dropped_and_an_oversized_frame_ends_the_connection(tmp_path):
    from websockets.asyncio.server import serve

    got: list[str] = []

    async def handler(ws):
        got.append(await ws.recv())  # our line, as one text frame (the token came in the handshake)
        got.append(ws.request.headers.get("Authorization", ""))
        await ws.send(b"\x00binary")
        await ws.send("not json\nat all")
        await ws.send('{\n "jsonrpc": "2.0",\n "method": "session/update"\n}')
        await ws.send('{"jsonrpc":"2.0","id":1,"result":{}}')
        await ws.send("x" * (MAX_LINE_BYTES + 10))  # over the cap: the carrier closes the connection
        await ws.wait_closed()

    async def scenario():
        async with serve(handler, "127.0.0.1", 0, max_size=None) as server:
            port = server.sockets[0].getsockname()[1]
            return port, await _carrier(f"ws://127.0.0.1:{port}/", _token(tmp_path),
                                        b'{"jsonrpc":"2.0","id":"escouade-1","method":"initialize"}\n')

    port, (code, out, err) = run(scenario)
    assert got == ['{"jsonrpc":"2.0","id":"escouade-1","method":"initialize"}', "Bearer s3cret-s3cret-s3cret"]
    lines = out.decode().splitlines()
    assert [json.loads(line) for line in lines] == [{"jsonrpc": "2.0", "method": "session/update"},
                                                   {"jsonrpc": "2.0", "id": 1, "result": {}}]
    assert "dropped a binary frame" in err and "dropped a frame that is not JSON" in err, err
    assert code == REFUSED and f"127.0.0.1:{port} sent a message over {MAX_LINE_BYTES} bytes: refused" in err, err


def test_a_token_file_under_home_is_read_and_a_short_token_refused(tmp_path, monkeypatch):
    """``--token-file ~/…`` as the docs write it (a magic has no shell to expand ``~``), and a
    guessable token refused in one line on either side."""
    from escouade_nb.wire.url_bridge import RemoteError, launcher, read_token

    monkeypatch.setenv("HOME", str(tmp_path))
    token = tmp_path / ".escouade-token"
    token.write_text("x" * 43 + "\n")
    token.chmod(0o600)
    assert read_token("~/.escouade-token") == "x" * 43
    assert launcher("ws://127.0.0.1:9/", "~/.escouade-token")[4] == str(token)
    token.write_text("a\n")
    with pytest.raises(RemoteError, match="1-character token: use 16 or more"):
        read_token("~/.escouade-token")
