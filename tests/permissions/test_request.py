"""The request rule plugins receive: tool names (per shipped harness manifest), kind
families, every field whole (and what is cut past the request's limit), reserved
requests, the wire shape."""

from __future__ import annotations

from pathlib import Path

import json

import pytest

from escouade_nb.core.conversation import ToolCall
from escouade_nb.manifest import MANIFEST_FILENAME, SHIPPED_PLUGINS_DIR, load_manifest
from escouade_nb.permissions.request import (
    FAMILIES,
    MAX_REQUEST,
    AgentInfo,
    DecideParams,
    ProjectInfo,
    RequestInfo,
    family_of,
    fit_params,
    normalise,
    target_of,
    too_large,
)
from escouade_nb.manifest.project import Project


def call(**kw) -> ToolCall:
    return ToolCall("tool-1", tool_call_id="c1", **kw)


def shipped_harnesses():
    out = []
    for path in sorted(SHIPPED_PLUGINS_DIR.glob(f"*/{MANIFEST_FILENAME}")):
        manifest = load_manifest(path)
        for h in manifest.described_harnesses():
            out.append(pytest.param(h, id=h.id))
    return out


HARNESSES = shipped_harnesses()
WITH_TOOLS = [p for p in HARNESSES if p.values[0].acp.tools]


def test_the_manifests_we_ship_are_covered():
    ids = {p.values[0].id for p in HARNESSES}
    assert {"goose", "fake"} <= ids
    assert "goose" in {p.values[0].id for p in WITH_TOOLS}


@pytest.mark.parametrize("harness", WITH_TOOLS)
def test_tools_map_from_meta_and_title(harness):
    """Every entry of the harness's acp.tools map, named in _meta.<agent>.toolCall.toolName
    or as the title before "·", gives the Claude Code name and its family."""
    tools = harness.acp.tools
    for agent_name, claude_name in tools.items():
        for c in (call(title="something else", kind="other", meta={harness.id: {"toolCall": {"toolName": agent_name}}}),
                  call(title=f"{agent_name} · with some detail", kind="other")):
            n = normalise(c, tools)
            assert n.tool == claude_name, (agent_name, c.title)
            assert n.kind == family_of(claude_name)
            assert n.agent_tool == agent_name


@pytest.mark.parametrize("harness", HARNESSES)
@pytest.mark.parametrize("acp_kind, raw, content, expected", [
    ("execute", {"command": "ls -la"}, [], "Bash"),
    ("edit", None, [{"type": "diff", "path": "/w/new.txt", "newText": "x"}], "Write"),
    ("edit", None, [{"type": "diff", "path": "/w/old.txt", "oldText": "a", "newText": "b"}], "Edit"),
    ("edit", {"file_path": "/w/a", "old_string": "a", "new_string": "b"}, [], "Edit"),
    ("edit", {"file_path": "/w/a", "content": "b"}, [], "Write"),
    ("read", {"file_path": "/w/a"}, [], "Read"),
    ("search", {"pattern": "def \\w+\\("}, [], "Grep"),
    ("search", {"pattern": "foo.*bar"}, [], "Grep"),
    ("search", {"pattern": "**/*.py"}, [], "Glob"),
    ("fetch", {"url": "https://example.org"}, [], "WebFetch"),
    ("fetch", {"query": "acp protocol"}, [], "WebSearch"),
    ("delete", {"path": "/w/a"}, [], "Edit"),
    ("think", {}, [], "Tool"),
    (None, {}, [], "Tool"),
])
def test_kind_table_for_unmapped_names(harness, acp_kind, raw, content, expected):
    """A name the harness's map does not know falls back to the ACP kind."""
    c = call(title="Doing a thing", kind=acp_kind, raw_input=raw, content=content,
             meta={harness.id: {"toolCall": {"toolName": "no_such_tool_xyz"}}})
    n = normalise(c, harness.acp.tools)
    assert n.tool == (expected if expected != "Tool" else "no_such_tool_xyz")
    n2 = normalise(call(title="Doing a thing", kind=acp_kind, raw_input=raw, content=content), harness.acp.tools)
    assert n2.tool == expected
    assert n2.kind == family_of(expected)


@pytest.mark.parametrize("name, server, expected", [
    ("mcp__github__create_issue", None, "mcp__github__create_issue"),
    ("github__create_issue", None, "mcp__github__create_issue"),
    ("create_issue", "github", "mcp__github__create_issue"),
    ("mcp__acp__Bash", None, "Bash"),
    ("mcp__acp__Write", None, "Write"),
    ("Bash", None, "Bash"),
    ("WebSearch", None, "WebSearch"),
])
def test_mcp_and_claude_names(name, server, expected):
    holder = {"toolName": name} | ({"mcpServer": server} if server else {})
    n = normalise(call(title="x", kind="other", meta={"someAgent": {"toolCall": holder}}))
    assert n.tool == expected
    assert n.kind == ("mcp" if expected.startswith("mcp__") else family_of(expected))


def test_other_meta_shapes_and_the_unstable_name():
    assert normalise(call(kind="other", meta={"claudeCode": {"toolName": "Bash"}})).tool == "Bash"
    assert normalise(call(kind="other", meta={"tool_name": "bash"}), {"bash": "Bash"}).tool == "Bash"
    assert normalise(call(kind="other", extra={"name": "shell"}), {"shell": "Bash"}).tool == "Bash"
    # a whole title that is a tool name counts; a sentence does not
    assert normalise(call(title="bash", kind="execute"), {"bash": "Bash"}).tool == "Bash"
    assert normalise(call(title="Run some thing", kind="other")).tool == "Tool"


@pytest.mark.parametrize("tool, family", [
    ("Bash", "command"), ("Edit", "edit"), ("Write", "edit"), ("MultiEdit", "edit"), ("NotebookEdit", "edit"),
    ("Read", "read"), ("Grep", "read"), ("Glob", "read"), ("LS", "read"), ("WebFetch", "fetch"),
    ("WebSearch", "fetch"), ("mcp__x__y", "mcp"), ("Task", "tool"), ("TodoWrite", "tool"), ("Whatever", "tool"),
])
def test_families(tool, family):
    assert family_of(tool) == family
    assert set(FAMILIES.values()) == {"command", "edit", "read", "fetch"}


@pytest.mark.parametrize("c, reserved", [
    (call(title="exit_plan_mode", kind="switch_mode", raw_input={"plan": "1. x"}), "plan"),
    (call(title="Ready to code?", kind="other", meta={"claudeCode": {"toolName": "ExitPlanMode"}}), "plan"),
    (call(title="exit_plan_mode · plan", kind="other"), "plan"),
    (call(title="q", kind="other", meta={"codex": {"toolCall": {"toolName": "request_user_input"}}}), "question"),
    (call(title="q", kind="other", meta={"claudeCode": {"toolName": "AskUserQuestion"}}), "question"),
    (call(title="Run ls", kind="execute", raw_input={"command": "ls"}), None),
])
def test_plans_and_questions_are_reserved(c, reserved):
    assert normalise(c, {"request_user_input": "AskUserQuestion"}).reserved == reserved


def test_input_whole_and_commands_as_text():
    long = "x" * 70_000
    n = normalise(call(kind="edit", raw_input={"file_path": "/a", "content": long, "nested": [{"t": long}]}))
    assert n.input == {"file_path": "/a", "content": long, "nested": [{"t": long}]}  # nothing cut here
    cmd = "echo " + "y" * 70_000 + " && rm -rf /"
    assert normalise(call(kind="execute", raw_input={"command": cmd})).input["command"] == cmd
    # an argv list becomes the command string Claude Code's Bash takes
    argv = normalise(call(kind="execute", raw_input={"command": ["/bin/bash", "-lc", "npm test && ls"]}))
    assert argv.input["command"] == "npm test && ls"
    assert normalise(call(kind="execute", raw_input={"cmd": ["git", "commit", "-m", "a b"]})).input == {
        "command": "git commit -m 'a b'"}
    # no rawInput: the input comes from the diff
    n = normalise(call(kind="edit", content=[{"type": "diff", "path": "/w/n.txt", "newText": "hello"}]))
    assert n.tool == "Write" and n.input == {"file_path": "/w/n.txt", "content": "hello"}
    assert n.target == "/w/n.txt"


def test_targets():
    assert target_of("Bash", {"command": "rm  -rf\nbuild"}) == "rm -rf build"
    assert target_of("WebFetch", {"url": "https://x"}) == "https://x"
    assert target_of("mcp__s__t", {"repo": "a/b"}) == "a/b"
    assert len(target_of("Bash", {"command": "x" * 500})) == 120


def test_wire_is_the_seed_shape(tmp_path: Path):
    project = Project.for_folder(tmp_path)
    params = DecideParams(request=RequestInfo(id="req_perm", kind="command", tool="Bash",
                                              input={"command": "rm -rf build", "description": None}),
                          project=ProjectInfo(**project.wire()), agent=AgentInfo(id="5b7d", name="demo"))
    wire = params.wire()
    assert wire == {
        "request": {"id": "req_perm", "kind": "command", "tool": "Bash",
                    "input": {"command": "rm -rf build", "description": None},
                    # the documented extra fields (what the ACP tool call says), after the seed's
                    "acpKind": None, "title": None, "locations": [], "diffPaths": [], "notebooks": [],
                    # and what tells a rule it judges every field whole (set as sent: fit_params)
                    "sizes": {}, "truncated": []},
        "project": {"id": project.id, "name": tmp_path.name, "private": False},
        "agent": {"id": "5b7d", "name": "demo"},
    }
    assert "ticket" not in wire  # absent outside a ticket, never null


def wire_of(input: dict, **request) -> dict:
    return DecideParams(request=RequestInfo(id="r", kind="tool", tool="Write", input=input, **request),
                        agent=AgentInfo(id="a", name="n")).wire()


def test_a_request_under_the_limit_goes_whole_with_its_sizes():
    text = "é" * 300_000 + "\nopen('x')"
    fitted = fit_params(wire_of({"file_path": "/a", "content": text, "edits": [{"new_string": "b"}], "n": 3}))
    request = fitted.params["request"]
    assert request["input"]["content"] == text and request["truncated"] == [] and fitted.whole
    assert request["sizes"] == {"input.file_path": 2, "input.content": len(text), "input.edits[0].new_string": 1}
    assert json.loads(fitted.data) == fitted.params  # what is sent, encoded once
    assert too_large(fitted) is None


def test_a_request_over_the_limit_has_its_longest_texts_cut_and_marked():
    limit = 10_000
    fitted = fit_params(wire_of({"file_path": "/a", "content": "x" * 50_000, "old": "\x00" * 3000, "new": "y" * 900},
                                title="Write /a"), limit)
    assert len(fitted.data) <= limit
    request = json.loads(fitted.data)["request"]
    assert request["truncated"] == ["input.content", "input.old"] == fitted.truncated
    # the short fields stay whole; the cut ones say so, and their whole sizes are told
    assert request["input"]["file_path"] == "/a" and request["input"]["new"] == "y" * 900
    assert request["title"] == "Write /a"
    assert request["input"]["content"].endswith(" more characters)")
    assert request["sizes"]["input.content"] == 50_000 and request["sizes"]["input.old"] == 3000
    assert too_large(fitted) == ("too large for rule plugins to judge whole: input.content (50,000 characters), "
                                 "input.old (3,000 characters)")


def test_an_input_whose_shape_is_over_the_limit_is_left_out_whole():
    fitted = fit_params(wire_of({f"k{i}": "v" for i in range(5000)}), 10_000)
    request = json.loads(fitted.data)["request"]
    assert len(fitted.data) <= 10_000
    assert request["input"] == {} and request["truncated"] == ["input"] and request["sizes"] == {"input": 5000}


def test_the_limit_fits_the_line_both_sides_read():
    from escouade_nb.permissions.protocol import MAX_LINE

    envelope = len(b'{"jsonrpc":"2.0","id":18446744073709551616,"method":"permissions/decide","params":}')
    assert MAX_REQUEST + envelope <= MAX_LINE
