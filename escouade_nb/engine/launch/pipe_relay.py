"""The relay: the kernel's MCP server carried over an agent's own stdio, on the far side of a launcher.

Stdlib-only, Python 3.8+, and never installed there: the launcher's command line holds a small
bootstrap (:data:`~.relayed.BOOTSTRAP`, run by ``python3 -c``) that reads this file's source
from its stdin first (``<length>\\n<source>``, written by the kernel before any ACP,
:attr:`~escouade_nb.wire.session.AgentSession.preamble`) and runs it. Nothing is needed on the
other side but ``python3``: a container or a Slurm allocation has no escouade_nb.

What it does (``main_relay``):

* writes ``{"method": "_escouade/relay"}`` first on stdout (the kernel learns that a relay runs);
* starts the agent (the rest of its argv) as its child, in its own process group, its stdin and
  stdout pipes of the relay's, its stderr the launcher's;
* the agent's own traffic is untouched byte for byte, both ways, with three exceptions, each
  known from the code that made it: the kernel's ``session/new``, ``session/load``,
  ``session/resume`` and ``session/fork`` have each ``mcpServers`` entry of ``"type": "acp"``
  rewritten into a stdio entry whose command is this very relay (``python3 RELAY --mcp SOCKET
  SERVER_ID``, the file written in a 0700 folder of its own, the socket mode 0600) — unless the
  agent's ``initialize`` answer said ``mcpCapabilities.acp: true`` (it speaks MCP-over-ACP
  itself: nothing rewritten); the kernel's answers to the relay's own requests (ids
  ``escouade-relay-<nonce>-N``) never reach the agent; the kernel's ``mcp/message``
  notifications for a connection of the relay go to that connection;
* each MCP client that connects to the socket (the agent's stdio child) gets a connection:
  ``mcp/connect {serverId}``, then each of its MCP messages as ``mcp/message {connectionId,
  method, params}`` (a request as a request, answered back under the client's own id; a
  notification as a notification; its ``notifications/cancelled`` of a call as ACP's ``$/cancel_request``
  of the ``mcp/message`` that carries it), ``mcp/disconnect`` when it ends — on the same stdout, one
  line each, never inside one of the agent's lines;
* dies with the pipe: end of input (or SIGHUP, SIGTERM, its stdout gone) ends the agent — end of input
  given, then SIGTERM to its group after 2 s, SIGKILL 3 s later — and removes its folder; on Linux the
  agent also gets SIGKILL if the relay itself is killed outright (``PR_SET_PDEATHSIG``).
"""

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

HELLO = "_escouade/relay"
SETUP = ("session/new", "session/load", "session/resume", "session/fork")
EOF_GRACE, TERM_GRACE, CONNECT_TIMEOUT = 2.0, 3.0, 60.0


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Relay:
    def __init__(self, command, source):
        self.command = command
        self.prefix = f"escouade-relay-{os.urandom(8).hex()}-"
        self.ids = itertools.count(1)
        self.lock = threading.Lock()  # one line at a time on stdout
        self.waiting = {}  # our request id -> callback(answer)
        self.connections = {}  # connectionId -> (socket, its lock)
        self.native = False
        self.initialize_ids = set()
        self.folder = tempfile.mkdtemp(prefix="escouade-relay-")  # mode 0700
        self.script = os.path.join(self.folder, "relay.py")
        fd = os.open(self.script, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        _write_all(fd, source)
        os.close(fd)
        self.socket_path = os.path.join(self.folder, "mcp.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.listener.bind(self.socket_path)
        finally:
            os.umask(old)
        self.listener.listen(8)
        self.agent: Any = None  # its subprocess.Popen, once started
        self.ending = False

    # -- out: one whole line at a time ----------------------------------------------------------
    def emit(self, message):
        self.raw((json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8"))

    def raw(self, data):
        with self.lock:
            _write_all(1, data)

    def request(self, method, params, callback):
        rid = self.prefix + str(next(self.ids))
        self.waiting[rid] = callback
        self.emit({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    # -- the kernel -> the agent --------------------------------------------------------------
    def from_kernel(self):
        source = sys.stdin.buffer  # the bootstrap's reader: what it buffered past the source is here
        sink = self.agent.stdin
        try:
            for line in iter(source.readline, b""):
                line = self.kernel_line(line)
                if line is None:
                    continue
                sink.write(line)
                sink.flush()
        except (OSError, ValueError):
            pass
        finally:
            try:
                sink.close()
            except OSError:
                pass
        self.end(EOF_GRACE)

    def kernel_line(self, line):
        """The line to give the agent (None: it was the relay's)."""
        prefix = self.prefix.encode()
        if prefix in line or b'"mcp/message"' in line:
            message = _parse(line)
            if isinstance(message, dict):
                rid = message.get("id")
                if "method" not in message and isinstance(rid, str) and rid.startswith(self.prefix):
                    callback = self.waiting.pop(rid, None)
                    if callback is not None:
                        callback(message)
                    return None
                params = message.get("params")
                if message.get("method") == "mcp/message" and "id" not in message and isinstance(params, dict) \
                        and params.get("connectionId") in self.connections:
                    inner = {"jsonrpc": "2.0", "method": params.get("method")}
                    if "params" in params:
                        inner["params"] = params["params"]
                    self.to_client(params["connectionId"], inner)
                    return None
        if b'"initialize"' in line:
            message = _parse(line)
            if isinstance(message, dict) and message.get("method") == "initialize" and "id" in message:
                self.initialize_ids.add(json.dumps(message["id"]))
        if not self.native and b'"acp"' in line:
            message = _parse(line)
            if isinstance(message, dict) and message.get("method") in SETUP and isinstance(message.get("params"), dict):
                servers = message["params"].get("mcpServers")
                if isinstance(servers, list) and any(isinstance(s, dict) and s.get("type") == "acp" for s in servers):
                    message["params"]["mcpServers"] = [self.stdio_entry(s) if isinstance(s, dict)
                                                       and s.get("type") == "acp" else s for s in servers]
                    return (json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")
        return line

    def stdio_entry(self, entry):
        return {"name": str(entry.get("name", "")), "command": sys.executable or "python3",
                "args": [self.script, "--mcp", self.socket_path, str(entry.get("serverId", ""))], "env": []}

    # -- the agent -> the kernel --------------------------------------------------------------
    def from_agent(self):
        source = self.agent.stdout
        try:
            for line in iter(source.readline, b""):
                if self.initialize_ids and b'"mcpCapabilities"' in line:
                    message = _parse(line)
                    if isinstance(message, dict) and json.dumps(message.get("id")) in self.initialize_ids:
                        caps = ((message.get("result") or {}).get("agentCapabilities") or {}).get("mcpCapabilities")
                        self.native = isinstance(caps, dict) and caps.get("acp") is True
                self.raw(line)
        except OSError:  # our stdout is gone (the launcher's pipe): the agent ends with it
            self.end(0.0, 1.0)

    # -- the agent's MCP clients (its stdio child, connected to the socket) --------------------
    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve_client, args=(client,), daemon=True).start()

    def serve_client(self, client):
        reader = client.makefile("rb")
        hello = _parse(reader.readline())
        server_id = hello.get("serverId") if isinstance(hello, dict) else None
        answered = threading.Event()
        got = {}

        def connected(answer):
            got.update(answer)
            answered.set()
        self.request("mcp/connect", {"serverId": server_id}, connected)
        connection_id = (got.get("result") or {}).get("connectionId") if answered.wait(CONNECT_TIMEOUT) else None
        if not isinstance(connection_id, str):
            sys.stderr.write(f"escouade relay: mcp/connect refused: {json.dumps(got.get('error'))[:300]}\n")
            client.close()
            return
        self.connections[connection_id] = (client, threading.Lock())
        asked: dict = {}  # the client's request id (JSON) -> our mcp/message request's id
        try:
            for line in iter(reader.readline, b""):
                message = _parse(line)
                if not isinstance(message, dict) or not isinstance(message.get("method"), str):
                    continue  # not JSON, or an answer to a server request (the kernel's tools send none)
                params = {"connectionId": connection_id, "method": message["method"]}
                if "params" in message:
                    params["params"] = message["params"]
                if "id" in message:
                    ours = self.request("mcp/message", params, lambda answer, rid=message["id"],
                                        cid=connection_id: (asked.pop(json.dumps(rid), None),
                                                            self.answer(cid, rid, answer)))
                    asked[json.dumps(message["id"])] = ours
                elif message["method"] == "notifications/cancelled" and isinstance(message.get("params"), dict) \
                        and json.dumps(message["params"].get("requestId")) in asked:
                    # the client gave up on a call: ACP's own cancel of the mcp/message that carries it
                    self.emit({"jsonrpc": "2.0", "method": "$/cancel_request",
                               "params": {"requestId": asked.pop(json.dumps(message["params"]["requestId"]))}})
                else:
                    self.emit({"jsonrpc": "2.0", "method": "mcp/message", "params": params})
        except OSError:
            pass
        finally:
            self.connections.pop(connection_id, None)
            if not self.ending:
                self.request("mcp/disconnect", {"connectionId": connection_id}, lambda answer: None)
            client.close()

    def answer(self, connection_id, rid, answer):
        reply = {"jsonrpc": "2.0", "id": rid}
        if "error" in answer:
            reply["error"] = answer["error"]
        else:
            reply["result"] = answer.get("result") if isinstance(answer.get("result"), dict) else {}
        self.to_client(connection_id, reply)

    def to_client(self, connection_id, message):
        found = self.connections.get(connection_id)
        if found is None:
            return
        client, lock = found
        with lock:
            try:
                client.sendall((json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8"))
            except OSError:
                pass

    # -- life and death ------------------------------------------------------------------------
    def end(self, grace, term_grace=TERM_GRACE):
        """End the agent: its stdin closed already, ``grace`` s, then SIGTERM to its group, ``term_grace`` s,
        then SIGKILL."""
        self.ending = True
        agent = self.agent
        deadline = time.monotonic() + grace
        while agent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        for sig, wait in ((signal.SIGTERM, term_grace), (signal.SIGKILL, 0)):
            if agent.poll() is not None:
                break
            try:
                os.killpg(agent.pid, sig)
            except OSError:
                pass
            deadline = time.monotonic() + wait
            while agent.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)

    def run(self):
        self.emit({"jsonrpc": "2.0", "method": HELLO, "params": {"protocol": 1, "python": sys.version.split()[0]}})
        try:
            self.agent = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          start_new_session=True, preexec_fn=_die_with_parent)
        except OSError as exc:
            sys.stderr.write(f"escouade relay: could not start {self.command[:1]}: {exc}\n")
            shutil.rmtree(self.folder, ignore_errors=True)
            return 127

        def ended_by_signal(signum, frame):  # the launcher's group is ending: the agent's too, at once
            threading.Thread(target=self.end, args=(0.0, 1.0), daemon=True).start()
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, ended_by_signal)
        for target in (self.from_kernel, self.accept):
            threading.Thread(target=target, daemon=True).start()
        out = threading.Thread(target=self.from_agent, daemon=True)
        out.start()
        code = self.agent.wait()
        out.join(5)
        self.ending = True
        try:
            self.listener.close()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
        return code if code >= 0 else 128 - code


def _die_with_parent():
    """In the agent's child before its exec (Linux): SIGKILL when the relay dies, however it dies."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except Exception:
            pass


def _parse(line):
    try:
        return json.loads(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def main_mcp(socket_path, server_id):
    """The agent's stdio MCP server entry: its stdin and stdout carried to the relay's socket."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(socket_path)
    client.sendall((json.dumps({"serverId": server_id}) + "\n").encode("utf-8"))

    def down():
        while True:
            data = client.recv(65536)
            if not data:
                os._exit(0)
            _write_all(1, data)
    threading.Thread(target=down, daemon=True).start()
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        client.sendall(data)
    client.shutdown(socket.SHUT_WR)
    time.sleep(1.0)  # the last answers, if any, before the process ends
    return 0


def main_relay(argv, source):
    if not argv:
        sys.stderr.write("escouade relay: no agent command\n")
        return 2
    return Relay(list(argv), source).run()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--mcp":
        sys.exit(main_mcp(sys.argv[2], sys.argv[3]))
    sys.stderr.write("usage: relay.py --mcp SOCKET SERVER_ID\n")
    sys.exit(2)
elif __name__ == "__escouade_relay__":
    _code = main_relay(sys.argv[1:], globals()["RELAY_SOURCE"])  # given by the bootstrap
    sys.stderr.flush()
    # not sys.exit: the interpreter's shutdown would wait for stdin's lock, held by the daemon thread reading it,
    # and abort (SIGABRT, "could not acquire lock for <stdin> at interpreter shutdown"): the agent's exit code lost
    os._exit(_code)
