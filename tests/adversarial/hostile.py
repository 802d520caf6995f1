#!/usr/bin/env python3
"""A hostile ACP agent that sends its largest payloads (issue 32, finding B): standard library only,
so that what is measured is the client. A program (its harness: :func:`install`), used by
``tests/adversarial/test_payloads_*.py`` and ``benchmarks/loop_stall.py``'s ``hostile`` kernel.

It answers ``initialize`` (HTTP MCP servers taken) and ``session/new`` (keeps the ``escouade`` entry:
its URL and headers), then plays each prompt's words (the prompt's whole text):

``ask BYTES``
    one ``session/request_permission`` line of about BYTES bytes (its ``rawInput.command`` is a
    shell line padded to that size), written in one go; it waits for its answer (a card's, or the
    client's error for a line over its cap) and says ``answered: …``.
``say BYTES``
    one ``agent_message_chunk`` notification of about BYTES bytes (no answer to wait for).
``runcode CHARS`` / ``runcode CHARS hidden``
    calls the kernel's MCP server's ``run_code`` with CHARS characters of code (:func:`code_of`:
    comment lines, then ``x = 1``; with ``hidden``, its last line hides a right-to-left override and
    a zero-width space), over HTTP with the entry's headers; says the result's first line.

Each turn ends ``end_turn``. Anything else on its stdin is read and ignored."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def install(plugins: Path, name: str = "hostile") -> Path:
    """Write the harness of this agent in a plugin folder (``ESCOUADE_NB_PLUGINS_DIR``); its path."""
    folder = plugins / name
    folder.mkdir(parents=True, exist_ok=True)
    manifest = folder / "escouade-plugin.json"
    manifest.write_text(json.dumps({
        "id": f"test.{name}", "name": "Hostile payloads",
        "contributes": {"harnesses": [{"id": name, "name": "Hostile payloads", "locate": {"names": ["python3"]},
                                       "acp": {"args": [str(HERE)]}}]}}))
    return manifest


def code_of(chars: int, hidden: bool = False) -> str:
    """``chars`` characters of Python: comment lines, then ``x = 1`` (what a card must show whole);
    ``hidden``: the last line is ``x = 1  # \u202e\u200b`` (an override and a zero-width space)."""
    tail = "\nx = 1  # \u202e\u200b\n" if hidden else "\nx = 1\n"
    line = "# " + "padding " * 9 + "\n"
    body = line * ((chars - len(tail)) // len(line) + 1)
    return body[:chars - len(tail)] + tail


class Agent:
    def __init__(self) -> None:
        self.out = sys.stdout.buffer
        self.ids = 1000
        self.mcp: dict[str, Any] | None = None
        self.session = "hostile"

    def write(self, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message, separators=(",", ":")).encode()
        self.out.write(data + b"\n")
        self.out.flush()

    def say(self, text: str) -> None:
        self.write({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": self.session, "update": {
            "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})

    def wait_for(self, rpc_id: int) -> dict[str, Any]:
        for raw in sys.stdin.buffer:
            msg = json.loads(raw)
            if msg.get("id") == rpc_id and "method" not in msg:
                return msg
        raise SystemExit(0)

    def ask(self, size: int) -> str:
        self.ids += 1
        head = {"jsonrpc": "2.0", "id": self.ids, "method": "session/request_permission", "params": {
            "sessionId": self.session, "toolCall": {"toolCallId": f"big-{self.ids}", "title": "Run a command",
                                                    "kind": "execute", "status": "pending",
                                                    "rawInput": {"command": "@PAD@"}},
            "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "no", "name": "Reject", "kind": "reject_once"}]}}
        frame = json.dumps(head, separators=(",", ":")).encode()
        pad = max(0, size - len(frame))
        command = b"echo " + b"a" * max(0, pad - 5)
        self.write(frame.replace(b"@PAD@", command))
        answer = self.wait_for(self.ids)
        if "error" in answer:
            return f"error {answer['error'].get('code')}: {answer['error'].get('message')}"
        return json.dumps(answer.get("result"))[:200]

    def run_code(self, chars: int, hidden: bool = False) -> str:
        if self.mcp is None:
            return "no kernel server"
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   **{h["name"]: h["value"] for h in self.mcp.get("headers") or []}}

        def post(body: dict[str, Any]) -> tuple[dict[str, Any] | None, Any]:
            req = urllib.request.Request(self.mcp["url"], json.dumps(body).encode(), headers=dict(headers))
            with urllib.request.urlopen(req, timeout=120) as resp:
                text = resp.read().decode()
                sid = resp.headers.get("mcp-session-id")
            data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")] or [text]
            return (json.loads(data[-1]) if data[-1].strip() else None), sid

        _, sid = post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "hostile", "version": "1"}}})
        if sid:
            headers["mcp-session-id"] = sid
        post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        result, _ = post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                          "params": {"name": "run_code", "arguments": {"code": code_of(chars, hidden)}}})
        content = ((result or {}).get("result") or {}).get("content") or [{}]
        return str(content[0].get("text", ""))[:200]

    def prompt(self, text: str) -> None:
        word, _, rest = text.strip().partition(" ")
        if word == "ask":
            self.say(f"answered: {self.ask(int(rest))}")
        elif word == "say":
            self.say("x" * int(rest))
        elif word == "runcode":
            size, _, flag = rest.partition(" ")
            try:
                self.say(f"run_code: {(self.run_code(int(size), flag == 'hidden').splitlines() or [''])[0]}")
            except Exception as exc:
                self.say(f"run_code failed: {exc}")
        else:
            self.say(f"unknown words: {text[:80]}")

    def serve(self) -> None:
        for raw in sys.stdin.buffer:
            msg = json.loads(raw)
            method, rid = msg.get("method"), msg.get("id")
            if method == "initialize":
                result: Any = {"protocolVersion": 1, "agentCapabilities": {"mcpCapabilities": {"http": True}},
                               "authMethods": []}
            elif method == "session/new":
                servers = msg["params"].get("mcpServers") or []
                self.mcp = next((s for s in servers if s.get("name") == "escouade" and s.get("url")), None)
                result = {"sessionId": self.session}
            elif method == "session/prompt":
                blocks = msg["params"].get("prompt") or []
                texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
                self.prompt(texts[-1] if texts else "")  # the user's words come last (context first)
                result = {"stopReason": "end_turn"}
            elif rid is None or method is None:
                continue
            else:
                self.write({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": str(method)}})
                continue
            self.write({"jsonrpc": "2.0", "id": rid, "result": result})


if __name__ == "__main__":
    Agent().serve()
