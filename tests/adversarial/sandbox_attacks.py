"""A hostile sandboxed agent's reach, probed from inside (``python sandbox_attacks.py SPEC``,
run by the agent itself: a scripted agent's ``run`` step), and the test side's helpers
(a real kernel in a private runtime folder, a unix socket, an HTTP server on the host's
loopback, a signed ``execute_request``).

Run as a program, it tries each attack the spec names (JSON in ``argv[1]``) and prints one
line ``ATTACKS={json}``: what it saw, never raising. Keys (all optional):

* ``runtime``: a folder to list (Jupyter's runtime folder); ``connection``: a
  ``kernel-*.json`` to read;
* ``kernel``: ``{"ip", "shell_port", "key", "signature_scheme", "marker"}``: a plain TCP
  connect to the kernel's shell port, then an ``execute_request`` signed with the key
  (jupyter_client's ``Session``) whose code (``code``, default: one that writes ``marker``)
  runs; the reply waited for up to
  ``wait`` seconds (default 3);
* ``refused_port`` / ``own_port``: TCP ports of the host's 127.0.0.1 to connect to
  (``own_port`` also gets an HTTP GET: its status line);
* ``list_tokens``: a folder whose files are each read; ``files``: paths to read (token
  files); ``socket``: a unix socket to connect to;
* ``writes``: paths to append to (``.git/config``, ``.git/hooks/pre-commit``);
  ``admin_writes``: names to append to in the admin folder of the git worktree it runs in
  (``commondir``, ``gitdir``, ``HEAD``).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PREFIX = "ATTACKS="


def _error(exc: BaseException) -> str:
    code = getattr(exc, "errno", None)
    return errno.errorcode.get(code, type(exc).__name__) if isinstance(code, int) else type(exc).__name__


def _connect(port: int, timeout: float = 3.0) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return "connected"
    except OSError as exc:
        return _error(exc)


def _http_status(port: int) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            return s.recv(64).decode("latin-1").split("\r\n", 1)[0]
    except OSError as exc:
        return _error(exc)


def signed_execute(ip: str, shell_port: int, key: str, scheme: str, code: str, wait: float) -> str:
    """Send ``code`` as an ``execute_request`` signed with ``key`` to the shell port; the
    reply's status (``ok``…), or ``no reply`` after ``wait`` seconds."""
    import zmq
    from jupyter_client.session import Session

    session = Session(key=key.encode(), signature_scheme=scheme, username="attacker")
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.linger = 0
    try:
        sock.connect(f"tcp://{ip}:{shell_port}")
        session.send(sock, "execute_request", {"code": code, "silent": False, "store_history": False,
                                               "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
        if sock.poll(int(wait * 1000)):
            _, reply = session.feed_identities(sock.recv_multipart())
            return str(session.deserialize(reply)["content"].get("status"))
        return "no reply"
    finally:
        sock.close(0)
        context.term()


def attack(spec: dict[str, Any]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    if "runtime" in spec:
        try:
            seen["runtime"] = sorted(os.listdir(spec["runtime"]))
        except OSError as exc:
            seen["runtime"] = _error(exc)
    if "connection" in spec:
        try:
            seen["connection"] = "read" if json.loads(Path(spec["connection"]).read_text()).get("key") else "empty"
        except (OSError, ValueError) as exc:
            seen["connection"] = _error(exc)
    kernel = spec.get("kernel")
    if kernel:
        seen["shell_connect"] = _connect(kernel["shell_port"])
        code = kernel.get("code") or f"open({kernel['marker']!r}, 'w').write('ran')"
        try:
            seen["execute"] = signed_execute(kernel["ip"], kernel["shell_port"], kernel["key"],
                                             kernel.get("signature_scheme", "hmac-sha256"), code,
                                             float(spec.get("wait", 3)))
        except Exception as exc:
            seen["execute"] = _error(exc)
    if "refused_port" in spec:
        seen["refused_port"] = _connect(spec["refused_port"])
    if "own_port" in spec:
        seen["own_port"] = _http_status(spec["own_port"])
    if "list_tokens" in spec:  # a folder: each file in it read
        try:
            names = sorted(os.listdir(spec["list_tokens"]))
            seen["tokens"] = {}
            for name in names:
                try:
                    seen["tokens"][name] = "read" if (Path(spec["list_tokens"]) / name).read_text() else "empty"
                except OSError as exc:
                    seen["tokens"][name] = _error(exc)
        except OSError as exc:
            seen["tokens"] = _error(exc)
    for path in spec.get("files", []):
        try:
            seen.setdefault("files", {})[path] = "read" if Path(path).read_text() else "empty"
        except OSError as exc:
            seen.setdefault("files", {})[path] = _error(exc)
    if "socket" in spec:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(3)
                s.connect(spec["socket"])
                seen["socket"] = "connected"
        except OSError as exc:
            seen["socket"] = _error(exc)
    for path in spec.get("writes", []):
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as fh:
                fh.write("\n# written by a sandboxed agent\n")
            seen.setdefault("writes", {})[path] = "written"
        except OSError as exc:
            seen.setdefault("writes", {})[path] = _error(exc)
    if "admin_writes" in spec:  # names in the admin folder its own .git file points at (a git worktree)
        line = Path(".git").read_text().strip()
        admin = (Path.cwd() / line.split(":", 1)[1].strip()).resolve()
        seen["admin"] = str(admin)
        for name in spec["admin_writes"]:
            try:
                with open(admin / name, "a", encoding="utf-8") as fh:
                    fh.write("\n")
                seen.setdefault("admin_writes", {})[name] = "written"
            except OSError as exc:
                seen.setdefault("admin_writes", {})[name] = _error(exc)
    return seen


def seen_in(text: str) -> dict[str, Any]:
    """The ``ATTACKS=`` line's JSON in ``text`` (what the agent said); KeyError if absent."""
    for line in text.splitlines():
        at = line.find(PREFIX)
        if at >= 0:
            return json.loads(line[at + len(PREFIX):])
    raise KeyError(f"no {PREFIX} line in: {text[-2000:]}")


# -- the test side --------------------------------------------------------------------------------


class HttpServer:
    """An HTTP server on the host's 127.0.0.1 (a thread); ``port``; :meth:`close`."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"host loopback\n")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class UnixListener:
    """A unix socket listening at ``path`` (accepting in a thread); :meth:`close`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(4)
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
                conn.close()
            except OSError:
                continue

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


def wait_for(check: Any, timeout: float, what: str) -> Any:
    """``check()`` until it returns a true value (polled every 0.05 s) or ``timeout``
    seconds: AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


if __name__ == "__main__":
    print(PREFIX + json.dumps(attack(json.loads(sys.argv[1]))), flush=True)
