"""Remote agents by URL: the kernel's end of an ACP WebSocket, as a local stdio program.

``%escouade connect NAME ws://HOST:PORT/`` runs this module as the agent's launcher
(:func:`launcher`): ``python -m escouade_nb.wire.url_bridge --token-file FILE URL --
WHAT``. It carries ACP's stdio framing (one JSON object per line, both ways) over one
WebSocket to an agent served elsewhere (``escouade-acp-serve``, or any server of ACP over
WebSocket: one JSON-RPC message per text frame), so the kernel speaks to it exactly as to
a local agent — the same session, cards, journal and record (``wire/session.py``): no
second copy of the session logic. Its end is the connection's end: the kernel sees the
agent exit with :data:`LOST` when the connection dropped (and reconnects,
``engine/reconnect.py``), :data:`REFUSED` when the server refused us, :data:`UNREACHABLE`
when nothing answered, always with one line on stderr naming ``HOST:PORT`` (never the token).

What it refuses of the server (the agent is untrusted): a redirect (to any place), a
frame over :data:`~.transport.MAX_LINE_BYTES` (the connection is closed, code 1009, and
the carrier exits with :data:`REFUSED`: no reconnection to be fed the same again),
a binary frame and a text frame that is not one JSON object (dropped, said on stderr).
The token is read from a file of mode 0600 (:func:`read_token`: a looser mode is
refused) and sent as ``Authorization: Bearer`` on the handshake; it is never on a
command line. ``WHAT`` (after ``--``): the program the user says is served there, kept
on the command line for the record and the head; unused here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from .._errors import EscouadeError
from .transport import MAX_LINE_BYTES

LOST = 75
"""Exit code: the connection dropped (EX_TEMPFAIL): the kernel may reconnect."""
REFUSED = 77
"""Exit code: the server refused the handshake (a wrong token: 401, 403, another status; a redirect)."""
UNREACHABLE = 69
"""Exit code: nothing answered at the URL (EX_UNAVAILABLE)."""
EXITED = 70
"""Exit code: the agent there ended by itself (the server closed with :data:`AGENT_ENDED`):
the kernel says so, as of a local agent's exit, and does not reconnect."""
AGENT_ENDED = 4000
"""The WebSocket close code ``escouade-acp-serve`` ends a connection with when its agent
ended by itself (the reason says its exit code)."""
USAGE = 64
"""Exit code: a bad URL or token file (said before any connection)."""

SCHEMES = ("ws", "wss")


class RemoteError(EscouadeError):
    """A URL or token file that cannot be used (one line, naming what to fix)."""


def where(url: str) -> str:
    """``HOST:PORT`` of ``url`` (the default port of its scheme when it has none): what
    the head and the text say of where a remote agent runs (never a token, a path or
    user info)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "wss" else 80)
    host = parts.hostname or "?"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_url(url: str) -> str:
    """``url`` when it is a ``ws://`` or ``wss://`` URL with a host and no user info;
    :class:`RemoteError` (one line) otherwise — ``http://`` (ACP's Streamable HTTP) is not
    spoken yet: the server's WebSocket is."""
    if not isinstance(url, str) or not url:
        raise RemoteError(f"the agent's URL must be a ws:// URL, not {url!r}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise RemoteError(f"the agent's URL {url!r} is not a URL: {exc}") from None
    if parts.scheme in ("http", "https"):
        raise RemoteError(f"{parts.scheme}:// (ACP's Streamable HTTP) is not spoken yet: connect to the server's "
                          f"WebSocket, ws{parts.scheme[4:]}://{parts.netloc}{parts.path or '/'}")
    if parts.scheme not in SCHEMES:
        raise RemoteError(f"the agent's URL must start with ws:// or wss://, not {parts.scheme or url!r}")
    if not parts.hostname:
        raise RemoteError(f"the agent's URL {url!r} names no host")
    if parts.username is not None or parts.password is not None:
        raise RemoteError("the agent's URL must not hold a user or password (the token goes in a 0600 file: "
                          "token_file=…)")
    return url


MIN_TOKEN = 16
"""The shortest bearer token taken (characters), on either side."""


def read_token(path: str | os.PathLike[str]) -> str:
    """The bearer token in the file at ``path`` (stripped). :class:`RemoteError` (one line)
    when it is missing, not a regular file, readable or writable by others than its owner
    (mode looser than 0600), empty or shorter than :data:`MIN_TOKEN` characters (a guessable
    token: ``escouade-acp-serve`` makes 43). ``~`` is the user's home (a magic has no shell)."""
    path = Path(path).expanduser()
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise RemoteError(f"token file {path}: not a regular file")
            if mode & 0o077:
                raise RemoteError(f"token file {path} has mode {stat.S_IMODE(mode):04o}: make it 0600 "
                                  f"(chmod 600 {path}), so only you can read it")
            token = f.read(64 * 1024).decode("utf-8", "replace").strip()
    except OSError as exc:
        raise RemoteError(f"token file {path}: {exc.strerror or exc}") from None
    if not token:
        raise RemoteError(f"token file {path} is empty")
    if len(token) < MIN_TOKEN:
        raise RemoteError(f"token file {path} holds a {len(token)}-character token: use {MIN_TOKEN} or more "
                          f"(python -c 'import secrets; print(secrets.token_urlsafe(32))' > {path})")
    return token


def launcher(url: str, token_file: str | os.PathLike[str]) -> list[str]:
    """The launcher (``via``) of an agent at ``url``: this module run by this Python, the
    token's file (absolute) and the URL; the agent's own words follow ``--``."""
    return [sys.executable, "-m", __name__, "--token-file", str(Path(token_file).expanduser().resolve()),
            check_url(url), "--"]


def url_of(via: Sequence[str]) -> str | None:
    """The URL of a launcher made by :func:`launcher`, else None (another launcher)."""
    via = list(via)
    if len(via) >= 6 and via[1:3] == ["-m", __name__] and via[3] == "--token-file":
        return via[5]
    return None


def _say(text: str) -> None:
    sys.stderr.write(f"escouade url: {text}\n")
    sys.stderr.flush()


async def _carry(url: str, token: str) -> int:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI, SecurityError

    class _NoRedirect(connect):
        def process_redirect(self, exc: Exception) -> Exception | str:
            status = getattr(getattr(exc, "response", None), "status_code", 0)
            if not (isinstance(exc, InvalidStatus) and 300 <= status < 400):
                return exc  # not a redirect: raised as it is
            location = getattr(getattr(exc, "response", None), "headers", {}).get("Location", "?")
            return SecurityError(f"the server redirected to {location}: refused (a remote agent is reached only at "
                                 f"the URL you gave)")

    place = where(url)
    try:
        ws = await _NoRedirect(url, additional_headers={"Authorization": f"Bearer {token}"},
                               max_size=MAX_LINE_BYTES, open_timeout=30, ping_interval=20, ping_timeout=60,
                               compression=None)
    except InvalidStatus as exc:
        status = exc.response.status_code
        why = "wrong or missing token" if status in (401, 403) else f"HTTP {status}"
        _say(f"{place} refused the connection ({why})")
        return REFUSED
    except SecurityError as exc:
        _say(f"{place}: {exc}")
        return REFUSED
    except (InvalidHandshake, InvalidURI) as exc:
        _say(f"{place} did not open a WebSocket: {exc}")
        return REFUSED
    except (OSError, TimeoutError) as exc:
        _say(f"cannot reach {place}: {getattr(exc, 'strerror', None) or exc or type(exc).__name__}")
        return UNREACHABLE

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES + 1)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout.buffer
    ended_by_us = asyncio.Event()

    async def upstream() -> None:  # our lines → text frames; end of input: we closed
        while True:
            try:
                line = await reader.readline()
            except ValueError:  # a line of ours over the cap: cannot happen (the kernel's transport caps it)
                continue
            if not line:
                ended_by_us.set()
                await ws.close()
                return
            line = line.strip()
            if line:
                await ws.send(line.decode("utf-8", "replace"))

    async def downstream() -> None:  # text frames → our lines
        async for frame in ws:
            if isinstance(frame, bytes):
                _say("dropped a binary frame from the server")
                continue
            if "\n" in frame or "\r" in frame:  # one message per line: re-encoded on one line, or dropped
                try:
                    value = json.loads(frame)
                except ValueError:
                    _say("dropped a frame that is not JSON")
                    continue
                frame = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            out.write(frame.encode("utf-8") + b"\n")
            out.flush()

    up = asyncio.ensure_future(upstream())
    try:
        await downstream()
    except ConnectionClosed as exc:
        if exc.sent is not None and exc.sent.code == 1009:  # we closed it: the server's message was over the cap
            _say(f"{place} sent a message over {MAX_LINE_BYTES} bytes: refused, the connection closed")
            return REFUSED
    except BrokenPipeError:  # the kernel went away
        return 0
    finally:
        up.cancel()
    if ended_by_us.is_set():
        return 0
    code, text = ws.close_code, ws.close_reason
    if code == AGENT_ENDED:
        _say(f"the agent at {place} ended: {text or 'no reason given'}")
        return EXITED
    reason = f" (code {code}{': ' + text if text else ''})" if code is not None else ""
    _say(f"the connection to {place} was lost{reason}")
    return LOST


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m escouade_nb.wire.url_bridge --token-file FILE URL [-- WHAT…]``: carry
    stdio over the WebSocket at URL until one side ends. Exit codes: 0 (our input ended),
    :data:`LOST`, :data:`EXITED`, :data:`REFUSED`, :data:`UNREACHABLE`, :data:`USAGE`."""
    words = list(sys.argv[1:] if argv is None else argv)
    if "--" in words:
        words = words[:words.index("--")]
    parser = argparse.ArgumentParser(prog="escouade url", description="ACP stdio over a WebSocket")
    parser.add_argument("--token-file", required=True)
    parser.add_argument("url")
    args = parser.parse_args(words)
    try:
        url = check_url(args.url)
        token = read_token(args.token_file)
    except RemoteError as exc:
        _say(str(exc))
        return USAGE
    try:
        return asyncio.run(_carry(url, token))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
