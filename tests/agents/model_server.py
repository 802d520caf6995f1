"""A scripted model server for the agent suite: real agents talk to it instead of a model.

It binds 127.0.0.1 on a free port (never another address) and speaks the four API
styles the released ACP agents use:

* OpenAI chat completions ``POST …/chat/completions`` (SSE with ``tool_calls``, or JSON);
* OpenAI Responses ``POST …/responses`` (SSE with ``function_call`` items);
* Anthropic Messages ``POST …/messages`` (SSE with ``tool_use``) and ``…/messages/count_tokens``;
* Gemini ``POST …/models/M:streamGenerateContent?alt=sse`` / ``:generateContent`` /
  ``:countTokens`` (``functionCall`` parts);

plus ``GET …/models`` listings. It decides statelessly from each request:

* the prompt holds a marker, ``ESC-SHELL`` (run the shell command :data:`SHELL_COMMAND`),
  ``ESC-WRITE <absolute path>`` (write :data:`WRITE_TEXT` to that file) or
  ``ESC-MCP <tool> <json object>`` (call the offered MCP tool whose name ends with
  ``<tool>`` — gemini's ``mcp_escouade_inspect_variable``, claude's
  ``mcp__escouade__inspect_variable``, codex's Responses ``namespace`` tool ``mcp__escouade``
  with its inner function ``inspect_variable``, or mistral-vibe's ``run_typescript`` calling
  ``tools.mcp_escouade.inspect_variable`` — with those arguments); the last marker in
  the conversation counts;
* if no tool result follows that marker yet, the reply is one tool call, with a tool
  picked from the tools the agent itself offered (its shell tool, its write tool, or the
  MCP tool) and arguments built from that tool's JSON schema (or given, for ``ESC-MCP``);
* if a tool result follows it, the reply is the final text ``ESC-DONE …`` (for ``ESC-MCP``:
  ``ESC-DONE <tool> returned: `` and the first lines of the result, so a test sees that the
  result reached the model);
* a request without tools (titles, summaries) gets a short text; a structured-output
  request (a JSON schema asked for) gets a minimal instance of that schema.

Every request is logged (``server.requests``: method, path, client address, style,
what was answered), so a test can check that the agent's model traffic came here.
Run ``python model_server.py`` to try it by hand (prints the port).
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

SHELL_COMMAND = "echo hello-from-agent | tee out.txt"
WRITE_TEXT = "written by the agent\n"
FINAL_PREFIX = "ESC-DONE"
MODEL = "fake-model"

SHELL_TOOLS = ["mcp__acp__Bash", "Bash", "bash", "Shell", "shell", "exec_command", "run_shell_command",
               "execute", "developer__shell", "run_command", "local_shell"]
WRITE_TOOLS = ["mcp__acp__Write", "Write", "WriteFile", "write_file", "write", "write_text_file",
               "developer__write", "create_file"]
NS = "::"
"""Joins a Responses API ``namespace`` tool's name and an inner function's name in the
tool table (``mcp__escouade::inspect_variable``): the call names both (codex's MCP tools)."""
RESULT_LINES = 4
"""How many lines of an MCP tool's result the final text repeats."""
CODE_TOOL = "run_typescript"
"""mistral-vibe's sandbox tool: for ``ESC-MCP`` when no MCP tool is offered by name, the
reply is one ``run_typescript`` call whose ``main`` returns ``tools.mcp_escouade.<tool>(args)``."""


# --------------------------------------------------------------------------------------
# What to answer


@dataclass
class Decision:
    kind: str  # "tool", "text"
    text: str = ""
    tool: str = ""
    args: dict[str, Any] = field(default_factory=dict)


def minimal_instance(schema: Any, defs: dict[str, Any] | None = None, depth: int = 0) -> Any:
    """The smallest value matching a JSON schema (OpenAPI/Gemini upper-case types too):
    required properties only, first enum value, empty arrays, zeros and "x"."""
    if not isinstance(schema, dict) or depth > 20:
        return {}
    defs = defs if defs is not None else {**schema.get("$defs", {}), **schema.get("definitions", {})}
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return minimal_instance(defs.get(name, {}), defs, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema and schema["default"] is not None:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            options = [s for s in schema[key] if not (isinstance(s, dict) and s.get("type") == "null")]
            return minimal_instance((options or schema[key])[0], defs, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if str(k).lower() != "null"), "null")
    kind = str(kind or ("object" if "properties" in schema else "string")).lower()
    if kind == "object":
        props = schema.get("properties", {}) or {}
        required = schema.get("required") or []
        return {name: minimal_instance(props.get(name, {}), defs, depth + 1) for name in required}
    if kind == "array":
        n = int(schema.get("minItems", 0) or 0)
        return [minimal_instance(schema.get("items", {}), defs, depth + 1) for _ in range(n)]
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)  # scores and counts often start at 1
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    n = int(schema.get("minLength", 0) or 0)
    return "x" * max(n, 1)


def _arg_value(name: str, prop: dict[str, Any], scenario: str, path: str | None) -> Any:
    """The argument ``name`` of the chosen tool, by its name and schema type."""
    lname = name.lower()
    kind = str(prop.get("type", "")).lower() if isinstance(prop, dict) else ""
    if scenario == "shell":
        if lname in ("command", "cmd", "commandline", "command_line", "script"):
            return ["/bin/sh", "-c", SHELL_COMMAND] if kind == "array" else SHELL_COMMAND
        if lname in ("description", "justification", "reason"):
            return "Write a greeting to out.txt"
        if lname == "sandbox_permissions":
            return "require_escalated"  # codex asks the user only for escalated commands
        if lname in ("workdir", "cwd", "dir_path", "directory"):
            return None  # leave the agent's default folder
    else:
        if lname in ("path", "file_path", "filepath", "absolute_path", "filename", "file", "target_file"):
            return path
        if lname in ("content", "contents", "text", "file_text", "new_content", "data"):
            return WRITE_TEXT
        if lname in ("description", "justification", "reason"):
            return "Write hello.txt"
        if lname in ("mode",):
            return minimal_instance(prop)
    return ...  # not known: filled from the schema if required


def tool_arguments(schema: dict[str, Any] | None, scenario: str, path: str | None) -> dict[str, Any]:
    schema = _normalise_schema(schema or {})
    props = schema.get("properties", {}) or {}
    required = set(schema.get("required") or [])
    args: dict[str, Any] = {}
    for name, prop in props.items():
        value = _arg_value(name, prop if isinstance(prop, dict) else {}, scenario, path)
        if value is ... or value is None:
            if name in required:
                args[name] = minimal_instance(prop, {**schema.get("$defs", {}), **schema.get("definitions", {})})
            continue
        args[name] = value
    return args


def _normalise_schema(schema: Any) -> dict[str, Any]:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return {}
    return schema if isinstance(schema, dict) else {}


def pick_tool(tools: dict[str, dict[str, Any]], scenario: str) -> str | None:
    wanted = SHELL_TOOLS if scenario == "shell" else WRITE_TOOLS
    for name in wanted:
        if name in tools:
            return name
    for name in tools:  # e.g. "developer__shell", "mcp__server__write_file"
        tail = re.split(r"__|\.|/", name)[-1]
        if tail in wanted:
            return name
    if scenario == "write":  # no write tool offered (codex): write with the shell
        return pick_tool(tools, "shell")
    return None


_MARKER = re.compile(r"ESC-(SHELL|WRITE|MCP)(?:[ \t]+(\S+))?")


def pick_mcp_tool(tools: dict[str, dict[str, Any]], wanted: str) -> str | None:
    """The offered tool whose name ends with ``wanted`` (``mcp__S__T``, ``mcp_S_T``,
    ``S_T``, ``S__T``, a namespace's ``S::T``, a bare ``T``); one of the server
    ``escouade`` first."""
    found = [n for n in tools if n == wanted or n.endswith(("_" + wanted, NS + wanted, "/" + wanted, "." + wanted))]
    found.sort(key=lambda n: "escouade" not in n)
    return found[0] if found else None


def mcp_arguments(text: str, at: int) -> dict[str, Any]:
    """The JSON object after an ``ESC-MCP <tool>`` marker ending at ``at`` ({} if none)."""
    rest = text[at:].lstrip()
    try:
        value, _ = json.JSONDecoder().raw_decode(rest)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def first_lines(result: str, n: int = RESULT_LINES) -> str:
    """The first ``n`` lines of a tool result's text with content, wrapper tags dropped
    (gemini wraps MCP results in ``<untrusted_context …>``)."""
    lines = [line.strip() for line in result.splitlines()]
    lines = [line for line in lines if line and not re.fullmatch(r"</?[\w-]+(\s[^>]*)?>", line)]
    return "\n".join(lines[:n])


def decide(texts: list[tuple[str, str]], tools: dict[str, dict[str, Any]], wants_schema: Any = None) -> Decision:
    """``texts``: the conversation as (kind, text) in order, kind ``user`` (text the
    user or agent framework sent) or ``result`` (a tool result). ``tools``: name -> JSON
    schema of its parameters."""
    if wants_schema is not None:
        return Decision("text", json.dumps(minimal_instance(_normalise_schema(wants_schema))))
    marker_at, marker = -1, None
    for i, (kind, text) in enumerate(texts):
        if kind != "user":
            continue
        for m in _MARKER.finditer(text):
            marker_at, marker = i, m
    if marker is None:
        return Decision("text", "Scripted reply.")
    if not tools:
        return Decision("text", "Scripted title")
    results = [text for kind, text in texts[marker_at + 1:] if kind == "result"]
    scenario = marker.group(1).lower()
    if scenario == "mcp":
        wanted = marker.group(2) or ""
        if results:
            return Decision("text", f"{FINAL_PREFIX} {wanted} returned: {first_lines(results[0])}")
        name = pick_mcp_tool(tools, wanted)
        if name is None and CODE_TOOL in tools:
            # mistral-vibe 3.x offers MCP tools only as functions of its TypeScript sandbox
            # (connector group ``mcp_<server>``, listed in its system prompt)
            args = json.dumps(mcp_arguments(texts[marker_at][1], marker.end()))
            return Decision("tool", tool=CODE_TOOL, args={
                "code": f"async function main() {{\n  return await tools.mcp_escouade.{wanted}({args});\n}}"})
        if name is None:
            return Decision("text", f"{FINAL_PREFIX}: no MCP tool {wanted} offered.")
        return Decision("tool", tool=name, args=mcp_arguments(texts[marker_at][1], marker.end()))
    if results:
        return Decision("text", f"{FINAL_PREFIX} after the {scenario} tool.")
    path = marker.group(2)
    name = pick_tool(tools, scenario)
    if name is None:
        return Decision("text", f"{FINAL_PREFIX}: no {scenario} tool offered.")
    if scenario == "write" and name not in WRITE_TOOLS and re.split(r"__|\.|/", name)[-1] not in WRITE_TOOLS:
        # no write tool offered (codex): write the file with the shell tool
        args = tool_arguments(tools[name], "shell", None)
        line = f"printf '%s\\n' '{WRITE_TEXT.strip()}' > {path}"
        for key in ("command", "cmd"):
            if key in args:
                args[key] = ["/bin/sh", "-c", line] if isinstance(args[key], list) else line
        return Decision("tool", tool=name, args=args)
    return Decision("tool", tool=name, args=tool_arguments(tools[name], scenario, path))


# --------------------------------------------------------------------------------------
# Reading the request of each API style


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text_of(c) for c in content)
    if isinstance(content, dict):
        for key in ("text", "content", "input_text", "output"):
            if key in content and isinstance(content[key], (str, list)):
                return _text_of(content[key])
    return ""


def read_openai_chat(body: dict[str, Any]):
    texts: list[tuple[str, str]] = []
    for m in body.get("messages", []):
        role = m.get("role")
        if role == "tool" or role == "function":
            texts.append(("result", _text_of(m.get("content"))))
        elif role in ("user", "system", "developer"):
            texts.append(("user", _text_of(m.get("content"))))
        else:
            texts.append(("assistant", _text_of(m.get("content"))))
    tools = {}
    for t in body.get("tools") or []:
        fn = t.get("function") or t
        if fn.get("name"):
            tools[fn["name"]] = fn.get("parameters") or {}
    schema = None
    rf = body.get("response_format") or {}
    if rf.get("type") == "json_schema":
        schema = (rf.get("json_schema") or {}).get("schema", {})
    elif rf.get("type") == "json_object":
        schema = {"type": "object"}
    return texts, tools, schema


def read_responses(body: dict[str, Any]):
    texts: list[tuple[str, str]] = []
    if body.get("instructions"):
        texts.append(("system", str(body["instructions"])))
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items or []:
        kind = item.get("type", "message")
        if kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            texts.append(("result", _text_of(item.get("output"))))
        elif kind == "message":
            role = item.get("role")
            texts.append(("user" if role in ("user", "developer", "system") else "assistant",
                          _text_of(item.get("content"))))
    tools = {}
    for t in body.get("tools") or []:
        if t.get("type") == "function" and t.get("name"):
            tools[t["name"]] = t.get("parameters") or {}
        elif t.get("type") == "namespace" and t.get("name"):  # codex's MCP servers: one namespace each
            for inner in t.get("tools") or []:
                if inner.get("name"):
                    tools[f"{t['name']}{NS}{inner['name']}"] = inner.get("parameters") or {}
    schema = None
    fmt = (body.get("text") or {}).get("format") or {}
    if fmt.get("type") == "json_schema":
        schema = fmt.get("schema", {})
    return texts, tools, schema


def read_anthropic(body: dict[str, Any]):
    texts: list[tuple[str, str]] = []
    for m in body.get("messages", []):
        content = m.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        for b in blocks:
            if b.get("type") == "tool_result":
                texts.append(("result", _text_of(b.get("content"))))
            elif b.get("type") == "text":
                texts.append(("user" if m.get("role") == "user" else "assistant", b.get("text", "")))
    tools = {t["name"]: t.get("input_schema") or {} for t in body.get("tools") or [] if t.get("name")}
    schema = None
    fmt = (body.get("output_format") or {})
    if fmt.get("type") == "json_schema":
        schema = fmt.get("schema", {})
    return texts, tools, schema


def read_gemini(body: dict[str, Any]):
    texts: list[tuple[str, str]] = []
    for c in body.get("contents", []):
        for p in c.get("parts", []):
            if "functionResponse" in p:
                response = p["functionResponse"].get("response")
                output = response.get("output") if isinstance(response, dict) else None
                texts.append(("result", output if isinstance(output, str) else json.dumps(response)))
            elif "text" in p:
                texts.append(("user" if c.get("role") == "user" else "assistant", p["text"]))
    tools = {}
    for t in body.get("tools") or []:
        for fd in t.get("functionDeclarations") or t.get("function_declarations") or []:
            tools[fd["name"]] = fd.get("parametersJsonSchema") or fd.get("parameters") or {}
    cfg = body.get("generationConfig") or {}
    schema = cfg.get("responseJsonSchema") or cfg.get("responseSchema")
    if schema is None and cfg.get("responseMimeType") == "application/json":
        schema = {"type": "object"}
    return texts, tools, schema


# --------------------------------------------------------------------------------------
# Writing the answer of each API style


def _sse(events: list[tuple[str | None, Any]]) -> bytes:
    out = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {payload}\n\n")
    return "".join(out).encode()


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def answer_openai_chat(d: Decision, body: dict[str, Any]) -> tuple[str, bytes]:
    cid, created, model = _id("chatcmpl"), int(time.time()), body.get("model", MODEL)
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    if d.kind == "tool":
        call = {"id": _id("call"), "type": "function",
                "function": {"name": d.tool, "arguments": json.dumps(d.args)}}
        message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": d.text}, "stop"
    if not body.get("stream"):
        return "application/json", json.dumps({
            "id": cid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}).encode()
    base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    if d.kind == "tool":
        call = message["tool_calls"][0]
        args = call["function"]["arguments"]
        half = len(args) // 2
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": call["id"], "type": "function",
             "function": {"name": d.tool, "arguments": args[:half]}}]}, "finish_reason": None}]})
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": args[half:]}}]}, "finish_reason": None}]})
    else:
        words = re.findall(r"\S+\s*", d.text) or [d.text]
        for w in words:
            chunks.append({**base, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]})
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": usage})
    return "text/event-stream", _sse([(None, c) for c in chunks] + [(None, "[DONE]")])


def answer_responses(d: Decision, body: dict[str, Any]) -> tuple[str, bytes]:
    rid, model = _id("resp"), body.get("model", MODEL)
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}
    if d.kind == "tool":
        namespace, _, name = d.tool.rpartition(NS)
        item = {"type": "function_call", "id": _id("fc"), "call_id": _id("call"), "name": name,
                **({"namespace": namespace} if namespace else {}),
                "arguments": json.dumps(d.args), "status": "completed"}
    else:
        item = {"type": "message", "id": _id("msg"), "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": d.text, "annotations": []}]}
    response = {"id": rid, "object": "response", "created_at": int(time.time()), "model": model,
                "status": "in_progress", "output": []}
    if not body.get("stream"):
        return "application/json", json.dumps({**response, "status": "completed", "output": [item],
                                               "usage": usage}).encode()
    ev: list[tuple[str, Any]] = [("response.created", {"type": "response.created", "response": response}),
                                 ("response.in_progress", {"type": "response.in_progress", "response": response})]
    if d.kind == "tool":
        added = {**item, "arguments": "", "status": "in_progress"}
        ev += [("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": added}),
               ("response.function_call_arguments.delta", {"type": "response.function_call_arguments.delta",
                                                           "item_id": item["id"], "output_index": 0,
                                                           "delta": item["arguments"]}),
               ("response.function_call_arguments.done", {"type": "response.function_call_arguments.done",
                                                          "item_id": item["id"], "output_index": 0,
                                                          "arguments": item["arguments"]})]
    else:
        added = {**item, "content": [], "status": "in_progress"}
        part = {"type": "output_text", "text": "", "annotations": []}
        ev += [("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": added}),
               ("response.content_part.added", {"type": "response.content_part.added", "item_id": item["id"],
                                                "output_index": 0, "content_index": 0, "part": part})]
        for w in re.findall(r"\S+\s*", d.text) or [d.text]:
            ev.append(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                                                      "output_index": 0, "content_index": 0, "delta": w}))
        ev += [("response.output_text.done", {"type": "response.output_text.done", "item_id": item["id"],
                                              "output_index": 0, "content_index": 0, "text": d.text}),
               ("response.content_part.done", {"type": "response.content_part.done", "item_id": item["id"],
                                               "output_index": 0, "content_index": 0,
                                               "part": {**part, "text": d.text}})]
    ev += [("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
           ("response.completed", {"type": "response.completed",
                                   "response": {**response, "status": "completed", "output": [item], "usage": usage}})]
    return "text/event-stream", _sse(ev)


def answer_anthropic(d: Decision, body: dict[str, Any]) -> tuple[str, bytes]:
    mid, model = _id("msg"), body.get("model", MODEL)
    if d.kind == "tool":
        block = {"type": "tool_use", "id": _id("toolu"), "name": d.tool, "input": d.args}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": d.text}
        stop = "end_turn"
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message = {"id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": usage}
    if not body.get("stream"):
        return "application/json", json.dumps({**message, "content": [block], "stop_reason": stop}).encode()
    ev: list[tuple[str, Any]] = [("message_start", {"type": "message_start", "message": message})]
    if d.kind == "tool":
        ev += [("content_block_start", {"type": "content_block_start", "index": 0,
                                        "content_block": {**block, "input": {}}}),
               ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(d.args)}})]
    else:
        ev.append(("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}}))
        for w in re.findall(r"\S+\s*", d.text) or [d.text]:
            ev.append(("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": w}}))
    ev += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
           ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                              "usage": {"output_tokens": 5}}),
           ("message_stop", {"type": "message_stop"})]
    return "text/event-stream", _sse(ev)


def answer_gemini(d: Decision, body: dict[str, Any], model: str, stream: bool) -> tuple[str, bytes]:
    part = ({"functionCall": {"name": d.tool, "args": d.args}} if d.kind == "tool" else {"text": d.text})
    chunk = {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
             "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
             "modelVersion": model, "responseId": _id("gem")}
    if not stream:
        return "application/json", json.dumps(chunk).encode()
    return "text/event-stream", _sse([(None, chunk)])


# --------------------------------------------------------------------------------------
# The server


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ModelServer._Http

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, ctype: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        if ctype == "text/event-stream":
            self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        entry = self.server.owner._log("GET", self.path, self.client_address[0], "models", None)
        if path.rstrip("/").endswith("/models"):
            if "v1beta" in path:
                data = {"models": [{"name": f"models/{MODEL}", "supportedGenerationMethods": ["generateContent"]}]}
            else:
                data = {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "test",
                                                    "type": "model", "display_name": MODEL}]}
            self._send(200, "application/json", json.dumps(data).encode())
        else:
            entry["answer"] = "404"
            self._send(404, "application/json", b'{"error": {"message": "not found"}}')

    def do_HEAD(self) -> None:
        self._send(200, "text/plain", b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.headers.get("Content-Encoding") in ("gzip",):
            import gzip
            raw = gzip.decompress(raw)
        elif self.headers.get("Content-Encoding") in ("zstd",):
            self._send(415, "application/json", b'{"error": "zstd"}')
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        split = urlsplit(self.path)
        path = split.path
        owner = self.server.owner
        try:
            if path.endswith("/count_tokens"):
                owner._log("POST", self.path, self.client_address[0], "anthropic-count", body, answer="count")
                self._send(200, "application/json", b'{"input_tokens": 10}')
                return
            if ":countTokens" in path:
                owner._log("POST", self.path, self.client_address[0], "gemini-count", body, answer="count")
                self._send(200, "application/json", b'{"totalTokens": 10}')
                return
            if path.endswith("/chat/completions"):
                style, (texts, tools, schema) = "openai-chat", read_openai_chat(body)
            elif path.endswith("/responses"):
                style, (texts, tools, schema) = "openai-responses", read_responses(body)
            elif path.endswith("/messages"):
                style, (texts, tools, schema) = "anthropic", read_anthropic(body)
            elif ":streamGenerateContent" in path or ":generateContent" in path:
                style, (texts, tools, schema) = "gemini", read_gemini(body)
            else:
                owner._log("POST", self.path, self.client_address[0], "unknown", body, answer="404")
                self._send(404, "application/json", b'{"error": {"message": "unknown endpoint"}}')
                return
            d = decide(texts, tools, schema)
            owner._log("POST", self.path, self.client_address[0], style, body,
                       answer=f"tool {d.tool} {json.dumps(d.args)}" if d.kind == "tool" else f"text {d.text[:60]}",
                       tools=sorted(tools), decision=d)
            if style == "openai-chat":
                ctype, data = answer_openai_chat(d, body)
            elif style == "openai-responses":
                ctype, data = answer_responses(d, body)
            elif style == "anthropic":
                ctype, data = answer_anthropic(d, body)
            else:
                model = path.rsplit("/", 1)[-1].split(":", 1)[0]
                stream = ":streamGenerateContent" in path
                if stream and parse_qs(split.query).get("alt") != ["sse"]:
                    ctype, data = answer_gemini(d, body, model, False)
                    data = b"[" + data + b"]"
                else:
                    ctype, data = answer_gemini(d, body, model, stream)
            self._send(200, ctype, data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:  # a bug here must show in the log, not hang the agent
            owner._log("POST", self.path, self.client_address[0], "error", body, answer=f"500 {exc!r}")
            self._send(500, "application/json", json.dumps({"error": {"message": repr(exc)}}).encode())


class ModelServer:
    """``with ModelServer() as server:`` → ``server.url`` (``http://127.0.0.1:PORT``),
    ``server.requests`` (the log)."""

    class _Http(ThreadingHTTPServer):
        daemon_threads = True
        owner: ModelServer

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._http = self._Http(("127.0.0.1", 0), _Handler)
        self._http.owner = self
        self.port = self._http.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread: threading.Thread | None = None

    def _log(self, method: str, path: str, client: str, style: str, body: Any, **extra: Any) -> dict[str, Any]:
        entry = {"time": time.time(), "method": method, "path": path, "client": client, "style": style, "body": body,
                 "model": (body or {}).get("model") if isinstance(body, dict) else None, **extra}
        with self._lock:
            self.requests.append(entry)
        return entry

    def start(self) -> ModelServer:
        self._thread = threading.Thread(target=self._http.serve_forever, name="model-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def since(self, mark: int) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.requests[mark:])

    def mark(self) -> int:
        with self._lock:
            return len(self.requests)


if __name__ == "__main__":
    with ModelServer() as s:
        print(s.url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
