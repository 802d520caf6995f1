"""``escouade-mcp-bridge``: the kernel's MCP server for agents that speak MCP over stdio
only. The agent spawns it (an ``mcpServers`` stdio entry); it relays each JSON-RPC line
read on stdin as one HTTP POST to the streamable-HTTP endpoint, and writes each message
of the answers as one line on stdout.

Environment: ``ESCOUADE_MCP_URL`` (``http://127.0.0.1:PORT/mcp``) and
``ESCOUADE_MCP_TOKEN_FILE``, the path of a file holding the bearer token (sent as
``Authorization: Bearer …``; surrounding whitespace ignored). The kernel writes that file
mode 0600 in a private 0700 folder and deletes it when the grant ends: the token is in no
argv and no environment value, so an agent that copies its ``mcpServers`` onto a command
line shows only the path. ``ESCOUADE_MCP_TOKEN`` (the token itself) is still read when no
file is named, for a bridge started by hand; an unreadable file is an error (exit 2).

What it does, per the MCP streamable-HTTP transport: ``Accept: application/json,
text/event-stream``; the ``Mcp-Session-Id`` the server returns is sent back on every
later request, and ``MCP-Protocol-Version`` is the one the ``initialize`` result named;
an answer is JSON, an SSE stream (its ``data:`` events) or 202 (a notification). The
``initialize`` request, notifications and responses are posted in the order read;
other requests each in a thread of their own (a ``run_code`` waiting for its permission
card does not hold up a ``ping``). Each line written is one whole message, under a lock.
An HTTP error or an unreachable server answers the request with a JSON-RPC error for
its id. Server-initiated messages on the GET stream are not relayed (the kernel's tools
need none). Standard library only: it starts in an interpreter's time.

:class:`McpHttpClient` is the one MCP-over-HTTP client of the package's programs (the
fake agent uses it too).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

from .._errors import EscouadeError

__all__ = ["URL_ENV", "TOKEN_ENV", "TOKEN_FILE_ENV", "McpHttpClient", "McpHttpError", "McpRpcError", "main"]

PROGRAM = "escouade-mcp-bridge"
URL_ENV = "ESCOUADE_MCP_URL"
TOKEN_ENV = "ESCOUADE_MCP_TOKEN"
TOKEN_FILE_ENV = "ESCOUADE_MCP_TOKEN_FILE"
ACCEPT = "application/json, text/event-stream"
TIMEOUT = 3600.0
"""Seconds a request may wait for its answer (a run_code waits for the user's click)."""
CLIENT_PROTOCOL = "2025-06-18"
"""The MCP revision :meth:`McpHttpClient.initialize` asks for."""
HTTP_ERROR = -32000
USAGE = (f"usage: {PROGRAM} [--version]\n\nRelays MCP JSON-RPC lines between stdio and the streamable-HTTP server "
         f"named by ${URL_ENV} (bearer token in the file named by ${TOKEN_FILE_ENV}, "
         f"else in ${TOKEN_ENV}).")


class McpHttpError(EscouadeError):
    """A POST that got no MCP answer: an HTTP error status (``status``, the ``body``
    text) or no connection (``status`` None)."""

    def __init__(self, message: str, status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body

    def rpc_error(self) -> dict[str, Any]:
        """The JSON-RPC error object to answer with: the server's own when its body
        was one, else ``-32000`` with this message (``data.status``: the HTTP status)."""
        try:
            sent = json.loads(self.body) if self.body else None
        except ValueError:
            sent = None
        if isinstance(sent, dict) and isinstance(sent.get("error"), dict) and "message" in sent["error"]:
            return sent["error"]
        return {"code": HTTP_ERROR, "message": str(self), "data": {"status": self.status}}


class McpRpcError(EscouadeError):
    """A JSON-RPC error answer (``code``, ``message``, ``data``)."""

    def __init__(self, error: Mapping[str, Any]) -> None:
        self.code = error.get("code")
        self.message = str(error.get("message", ""))
        self.data = error.get("data")
        super().__init__(f"{self.message} (code {self.code})")


def _sse_messages(stream: Any, want: Any) -> Iterator[dict[str, Any]]:
    """The JSON messages of an SSE body, until the answer to request ``want`` (or the end).
    Events without data (priming, keep-alive) are skipped."""
    data: list[str] = []
    while True:
        raw = stream.readline()
        if not raw:
            break
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.startswith(":"):
            continue
        if line:
            field, _, value = line.partition(":")
            if field == "data":
                data.append(value[1:] if value.startswith(" ") else value)
            continue
        if data:
            message = json.loads("\n".join(data))
            data = []
            yield message
            if want is not None and isinstance(message, dict) and message.get("id") == want and (
                    "result" in message or "error" in message):
                return
    if data:
        yield json.loads("\n".join(data))


class McpHttpClient:
    """JSON-RPC over MCP's streamable HTTP, with ``urllib`` (no proxy: the server is the
    kernel's). Thread-safe: requests may be posted from several threads at once.

    ``post(message)`` sends one message and returns the messages of its answer (``[]``
    for 202); ``request(method, params)`` returns the result of a request or raises
    :class:`McpRpcError`; ``notify``; ``initialize()`` does the handshake. Every HTTP
    failure raises :class:`McpHttpError`. ``close()`` ends the MCP session (DELETE)."""

    def __init__(self, url: str, headers: Mapping[str, str] | None = None, *, timeout: float = TIMEOUT) -> None:
        self.url = url
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._ids = 0
        self._lock = threading.Lock()

    def _request_headers(self) -> dict[str, str]:
        headers = {**self.headers, "Accept": ACCEPT, "Content-Type": "application/json"}
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.protocol_version:
            headers["MCP-Protocol-Version"] = self.protocol_version
        return headers

    def post(self, message: Mapping[str, Any]) -> list[dict[str, Any]]:
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        req = urllib.request.Request(self.url, data=body, headers=self._request_headers(), method="POST")
        try:
            resp = self._opener.open(req, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            text = _read_text(exc)
            raise McpHttpError(f"HTTP {exc.code} from the MCP server at {self.url}: {text[:300] or exc.reason}",
                               status=exc.code, body=text) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise McpHttpError(f"the MCP server at {self.url} is unreachable: {reason}") from None
        with resp:
            session = resp.headers.get("Mcp-Session-Id")
            if session:
                self.session_id = session
            if resp.status == 202:
                return []
            kind = (resp.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            try:
                if kind == "text/event-stream":
                    messages = list(_sse_messages(resp, message.get("id")))
                else:
                    text = resp.read().decode("utf-8")
                    parsed = json.loads(text) if text.strip() else []
                    messages = parsed if isinstance(parsed, list) else [parsed]
            except (ValueError, OSError) as exc:
                raise McpHttpError(f"unreadable answer from the MCP server at {self.url}: {exc}",
                                   status=resp.status) from None
        if message.get("method") == "initialize":
            for m in messages:
                if isinstance(m, dict) and m.get("id") == message.get("id") and isinstance(m.get("result"), dict):
                    version = m["result"].get("protocolVersion")
                    if isinstance(version, str):
                        self.protocol_version = version
        return messages

    def request(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        with self._lock:
            self._ids += 1
            rid = self._ids
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = dict(params)
        for answer in self.post(message):
            if isinstance(answer, dict) and answer.get("id") == rid:
                if "error" in answer:
                    raise McpRpcError(answer["error"] if isinstance(answer["error"], dict) else {})
                return answer.get("result")
        raise McpHttpError(f"the MCP server at {self.url} sent no answer to {method}")

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        self.post(message)

    def initialize(self, client_name: str, client_version: str) -> dict[str, Any]:
        """``initialize`` then ``notifications/initialized``; the initialize result."""
        result = self.request("initialize", {"protocolVersion": CLIENT_PROTOCOL, "capabilities": {},
                                             "clientInfo": {"name": client_name, "version": client_version}})
        self.notify("notifications/initialized")
        return result or {}

    def close(self) -> None:
        """End the MCP session (DELETE with its id), best effort, 2 s at most."""
        if not self.session_id:
            return
        req = urllib.request.Request(self.url, headers=self._request_headers(), method="DELETE")
        try:
            self._opener.open(req, timeout=2).close()
        except (urllib.error.URLError, OSError):
            pass
        self.session_id = None


def _read_text(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read().decode("utf-8", "replace")
    except Exception:
        return ""


class _Relay:
    """stdin lines -> POSTs; answers -> stdout lines."""

    def __init__(self, client: McpHttpClient, out: Any) -> None:
        self.client = client
        self.out = out
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def write(self, message: Any) -> None:
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n"
        with self.lock:
            self.out.write(line.encode("utf-8"))
            self.out.flush()

    def relay(self, message: Any) -> None:
        is_request = isinstance(message, dict) and "method" in message and "id" in message
        try:
            answers = self.client.post(message)
        except McpHttpError as exc:
            if is_request:
                self.write({"jsonrpc": "2.0", "id": message["id"], "error": exc.rpc_error()})
            else:
                sys.stderr.write(f"{PROGRAM}: {exc}\n")
            return
        except Exception as exc:  # a bug must still answer the request
            if is_request:
                self.write({"jsonrpc": "2.0", "id": message["id"],
                            "error": {"code": HTTP_ERROR, "message": f"{PROGRAM}: {type(exc).__name__}: {exc}"}})
            return
        for answer in answers:
            self.write(answer)

    def line(self, raw: bytes) -> None:
        text = raw.strip()
        if not text:
            return
        try:
            message = json.loads(text)
        except ValueError as exc:
            self.write({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": f"Parse error: {exc}"}})
            return
        parallel = isinstance(message, dict) and "id" in message and "method" in message \
            and message.get("method") != "initialize"
        if parallel:
            thread = threading.Thread(target=self.relay, args=(message,), daemon=True,
                                      name=f"mcp-bridge {message.get('method')}")
            self.threads = [t for t in self.threads if t.is_alive()]
            self.threads.append(thread)
            thread.start()
        else:
            self.relay(message)

    def run(self, stdin: Any) -> None:
        for raw in iter(stdin.readline, b""):
            self.line(raw)
        for thread in self.threads:  # the agent closed stdin: finish briefly, end the session
            thread.join(timeout=2)
        self.client.close()


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``escouade-mcp-bridge``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--version" in args or "-V" in args:
        from escouade_nb._version import __version__

        print(f"{PROGRAM} {__version__}")
        return 0
    if "--help" in args or "-h" in args or args:
        print(USAGE)
        return 0 if ("--help" in args or "-h" in args) else 2
    url = os.environ.get(URL_ENV, "").strip()
    if not url:
        sys.stderr.write(f"{PROGRAM}: ${URL_ENV} is not set (the kernel's MCP server URL)\n")
        return 2
    token_file = os.environ.get(TOKEN_FILE_ENV, "")
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as f:
                token = f.read(4096).strip()
        except OSError as exc:
            sys.stderr.write(f"{PROGRAM}: cannot read the token file ${TOKEN_FILE_ENV}: {exc.strerror or exc}\n")
            return 2
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    relay = _Relay(McpHttpClient(url, headers), sys.stdout.buffer)
    try:
        relay.run(sys.stdin.buffer)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
