"""A goose-shaped scripted ACP agent, so the seed's Goose manifest is exercised end to end.

Goose itself is on none of the registries this project may use (not on PyPI, not on npm),
so this stand-in speaks goose's ACP wire as goose 1.5x does (``goose acp``):

* ``initialize``: ``agentInfo`` goose, ``loadSession``, one auth method (``goose-provider``);
* ``session/new``: the answer carries ``models`` (``currentModelId`` + ``availableModels``),
  the unstable model state, and no ``modes``; ``session/set_model`` switches it;
* a tool call is announced by ``tool_call`` with a title only (``Shell``, ``Write``),
  status ``pending``, no ``kind``; in approve mode a ``session/request_permission`` follows
  whose ``toolCall`` repeats title, ``kind: other``, ``rawInput``; its options are, in this
  order, ``allow_always``, ``allow_once``, ``reject_once``, ``reject_always``, each with
  optionId = name = kind;
* the result is a ``tool_call_update`` with text content and ``locations`` — never a diff;
* it sends goose's vendor notifications (``_goose/…``) besides ``session/update``;
* files: through the client's ``fs/write_text_file`` when the client offered it, else
  written by itself (goose's own developer tools);
* a declined tool is reported ``failed`` and the model is asked again (the turn goes on);
  a cancelled permission or ``session/cancel`` ends the turn ``cancelled``;
* steering as goose's source has it (``_goose/unstable/session/steer``, not advertised): a
  turn names its run in a ``session_info_update`` whose ``_meta.goose.activeRunId`` is the
  run id (``null`` at its end); ``{sessionId, expectedRunId, prompt}`` is refused with
  ``invalid_params`` unless that run is active, else queued (a ``session_info_update``
  ``_meta.goose.queuedSteer``) and answered ``{runId, messageId}``; before its next model
  call the turn takes it as a user message, echoed as a ``user_message_chunk`` with
  ``_meta.goose.steer``.

The model is the suite's scripted model server, reached like goose's OpenAI provider:
``OPENAI_HOST`` (+ ``OPENAI_BASE_PATH``, default ``v1/chat/completions``), model
``GOOSE_MODEL``. ``GOOSE_MODE`` picks ``approve`` (default here), ``smart_approve`` or
``auto``. ``--version`` prints ``goose 1.57.0``. Raw JSON-RPC over stdio, no SDK: the wire
is exactly what is written here.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import urllib.request
import uuid
from pathlib import Path
from typing import Any

VERSION = "1.57.0"
MODELS = ["fake-model", "fake-model-large"]
TOOLS = [
    {"type": "function", "function": {
        "name": "developer__shell", "description": "Run a shell command",
        "parameters": {"type": "object", "required": ["command"],
                       "properties": {"command": {"type": "string"}}}}},
    {"type": "function", "function": {
        "name": "developer__write", "description": "Write a file",
        "parameters": {"type": "object", "required": ["path", "content"],
                       "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}},
]
TITLES = {"developer__shell": "Shell", "developer__write": "Write"}


class RpcError(Exception):
    """An error answer with a JSON-RPC ``code`` (``-32602``: invalid params, as goose's)."""

    def __init__(self, code: int, data: Any) -> None:
        super().__init__(str(data))
        self.code, self.data = code, data


class GooseLike:
    def __init__(self) -> None:
        self._out = threading.Lock()
        self._next_id = 0
        self._waiting: dict[int, queue.Queue] = {}
        self.client_caps: dict[str, Any] = {}
        self.sessions: dict[str, dict[str, Any]] = {}

    # -- wire -------------------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        with self._out:
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
            sys.stdout.flush()

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"method": method, "params": params})

    def update(self, sid: str, update: dict[str, Any]) -> None:
        self.notify("session/update", {"sessionId": sid, "update": update})

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Call the client and wait for its answer (``{"result": …}`` or ``{"error": …}``)."""
        with self._out:
            self._next_id += 1
            rid = self._next_id
        box: queue.Queue = queue.Queue()
        self._waiting[rid] = box
        self.send({"id": rid, "method": method, "params": params})
        return box.get()

    def serve(self) -> None:
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "method" not in msg:  # an answer to one of our requests
                box = self._waiting.pop(msg.get("id"), None)
                if box is not None:
                    box.put(msg)
                continue
            method, params, rid = msg["method"], msg.get("params") or {}, msg.get("id")
            if method == "session/prompt":  # long: its own thread, answers come meanwhile
                threading.Thread(target=self._answer, args=(rid, self.prompt, params), daemon=True).start()
            elif method == "session/cancel":
                s = self.sessions.get(params.get("sessionId"))
                if s:
                    s["cancelled"].set()
            else:
                self._answer(rid, getattr(self, "on_" + method.replace("/", "_"), None), params)

    def _answer(self, rid: Any, handler: Any, params: dict[str, Any]) -> None:
        if handler is None:
            if rid is not None:
                self.send({"id": rid, "error": {"code": -32601, "message": "Method not found"}})
            return
        try:
            result = handler(params)
        except RpcError as exc:
            if rid is not None:
                self.send({"id": rid, "error": {"code": exc.code, "message": "Invalid params", "data": exc.data}})
            return
        except Exception as exc:
            if rid is not None:
                self.send({"id": rid, "error": {"code": -32603, "message": "Internal error", "data": str(exc)}})
            return
        if rid is not None:
            self.send({"id": rid, "result": result})

    # -- ACP methods ------------------------------------------------------------------
    def on_initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        self.client_caps = params.get("clientCapabilities") or {}
        return {"protocolVersion": params.get("protocolVersion", 1),
                "agentCapabilities": {"loadSession": True,
                                      "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
                                      "mcpCapabilities": {"http": True, "sse": False}},
                "authMethods": [{"id": "goose-provider", "name": "Configure Provider",
                                 "description": "Run `goose configure` to set up your AI provider and API key"}],
                "agentInfo": {"name": "goose", "version": VERSION}}

    def on_session_new(self, params: dict[str, Any]) -> dict[str, Any]:
        sid = uuid.uuid4().hex[:16]
        model = os.environ.get("GOOSE_MODEL", MODELS[0])
        self.sessions[sid] = {"cwd": params.get("cwd") or os.getcwd(), "model": model, "messages": [],
                              "cancelled": threading.Event(), "run": None, "steers": queue.Queue()}
        return {"sessionId": sid,
                "models": {"currentModelId": model,
                           "availableModels": [{"modelId": m, "name": m} for m in MODELS]}}

    def on_session_set_model(self, params: dict[str, Any]) -> dict[str, Any]:
        s = self.sessions[params["sessionId"]]
        s["model"] = params["modelId"]
        return {}

    # -- a turn -----------------------------------------------------------------------
    def _model(self, s: dict[str, Any]) -> dict[str, Any]:
        host = os.environ.get("OPENAI_HOST", "")
        if not host.startswith(("http://127.0.0.1", "http://localhost")):
            raise RuntimeError("OPENAI_HOST must be a loopback URL for this test agent")
        path = os.environ.get("OPENAI_BASE_PATH", "v1/chat/completions").lstrip("/")
        body = json.dumps({"model": s["model"], "messages": s["messages"], "tools": TOOLS, "stream": False}).encode()
        req = urllib.request.Request(f"{host.rstrip('/')}/{path}", data=body,
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer fake"})
        with urllib.request.urlopen(req, timeout=30) as resp:  # loopback only, checked above
            return json.loads(resp.read())["choices"][0]["message"]

    def on__goose_unstable_session_steer(self, params: dict[str, Any]) -> dict[str, Any]:
        s = self.sessions.get(params.get("sessionId"))
        if s is None:
            raise RpcError(-32602, "Session not found")
        if not params.get("expectedRunId"):
            raise RpcError(-32602, "expectedRunId must not be empty")
        if s["run"] is None:
            raise RpcError(-32602, "no active run to steer")
        if s["run"] != params["expectedRunId"]:
            raise RpcError(-32602, {"message": "expected active run id differs", "expectedRunId": params["expectedRunId"],
                                    "actualRunId": s["run"]})
        mid = "msg_" + uuid.uuid4().hex[:8]
        text = "\n".join(b.get("text", "") for b in params.get("prompt", []) if b.get("type") == "text")
        s["steers"].put((mid, text))
        self.update(params["sessionId"], {"sessionUpdate": "session_info_update",
                                          "_meta": {"goose": {"queuedSteer": {"messageId": mid, "runId": s["run"]}}}})
        return {"runId": s["run"], "messageId": mid}

    def _run_id(self, sid: str, run: str | None) -> None:
        self.sessions[sid]["run"] = run
        self.update(sid, {"sessionUpdate": "session_info_update", "_meta": {"goose": {"activeRunId": run}}})

    def prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        sid = params["sessionId"]
        self._run_id(sid, "run_" + uuid.uuid4().hex)
        try:
            return self._turn(sid, params)
        finally:
            self._run_id(sid, None)

    def _turn(self, sid: str, params: dict[str, Any]) -> dict[str, Any]:
        s = self.sessions[sid]
        s["cancelled"].clear()
        text = "\n".join(b.get("text", "") for b in params.get("prompt", []) if b.get("type") == "text")
        s["messages"].append({"role": "user", "content": text})
        self.notify("_goose/session/working", {"sessionId": sid, "working": True})
        for _ in range(5):
            if s["cancelled"].is_set():
                return {"stopReason": "cancelled"}
            while not s["steers"].empty():  # a steer is taken before the next model call
                mid, steer = s["steers"].get()
                s["messages"].append({"role": "user", "content": steer})
                self.update(sid, {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": steer},
                                  "_meta": {"goose": {"steer": True, "messageId": mid}}})
            message = self._model(s)
            s["messages"].append({k: v for k, v in message.items() if v is not None})
            calls = message.get("tool_calls") or []
            if message.get("content"):
                self.update(sid, {"sessionUpdate": "agent_message_chunk",
                                  "content": {"type": "text", "text": message["content"]}})
            if not calls:
                break
            for call in calls:
                outcome = self._tool(sid, s, call)
                if outcome == "cancelled":
                    return {"stopReason": "cancelled"}
        self.notify("_goose/session/working", {"sessionId": sid, "working": False})
        return {"stopReason": "cancelled" if s["cancelled"].is_set() else "end_turn"}

    def _tool(self, sid: str, s: dict[str, Any], call: dict[str, Any]) -> str:
        name = call["function"]["name"]
        args = json.loads(call["function"].get("arguments") or "{}")
        tcid = call.get("id") or uuid.uuid4().hex
        title = TITLES.get(name, name)
        self.update(sid, {"sessionUpdate": "tool_call", "toolCallId": tcid, "title": title, "status": "pending"})
        mode = os.environ.get("GOOSE_MODE", "approve")
        allowed = True
        if mode in ("approve", "smart_approve"):
            answer = self.request("session/request_permission", {
                "sessionId": sid,
                "toolCall": {"toolCallId": tcid, "title": title, "kind": "other", "status": "pending",
                             "rawInput": args},
                "options": [{"optionId": k, "name": k, "kind": k}
                            for k in ("allow_always", "allow_once", "reject_once", "reject_always")]})
            outcome = (answer.get("result") or {}).get("outcome") or {}
            if outcome.get("outcome") != "selected":
                self.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": tcid, "status": "failed"})
                return "cancelled"
            allowed = outcome.get("optionId", "").startswith("allow")
        if not allowed:
            result, status, locations = "The user has declined to run this tool.", "failed", []
        elif name == "developer__shell":
            proc = subprocess.run(args.get("command", ""), shell=True, cwd=s["cwd"], capture_output=True,
                                  text=True, timeout=30)
            result = proc.stdout + proc.stderr
            status, locations = ("completed" if proc.returncode == 0 else "failed"), []
        elif name == "developer__write":
            path = Path(args["path"])
            path = path if path.is_absolute() else Path(s["cwd"]) / path
            if (self.client_caps.get("fs") or {}).get("writeTextFile"):
                answer = self.request("fs/write_text_file", {"sessionId": sid, "path": str(path),
                                                             "content": args.get("content", "")})
                ok = "error" not in answer
                result = f"Wrote {path}" if ok else f"Could not write {path}: {answer['error'].get('message')}"
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(args.get("content", ""))
                ok, result = True, f"Wrote {path}"
            status, locations = ("completed" if ok else "failed"), [{"path": str(path), "line": 1}]
        else:
            result, status, locations = f"unknown tool {name}", "failed", []
        update = {"sessionUpdate": "tool_call_update", "toolCallId": tcid, "status": status,
                  "content": [{"type": "content", "content": {"type": "text", "text": result}}]}
        if locations:
            update["locations"] = locations
        self.update(sid, update)
        s["messages"].append({"role": "tool", "tool_call_id": tcid, "content": result})
        return status


def main(argv: list[str]) -> int:
    if "--version" in argv or "-V" in argv:
        print(f"goose {VERSION}")
        return 0
    if not argv or argv[0] != "acp":
        print("usage: goose acp   (a scripted stand-in for goose's ACP server)", file=sys.stderr)
        return 2
    GooseLike().serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
