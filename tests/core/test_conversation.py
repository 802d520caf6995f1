"""Unit tests of the sans-I/O conversation fold (``escouade_nb.core.conversation``) and of the
plain-text renders (``escouade_nb.core.render_text``). No processes, no event loop."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from acp import helpers as acp_helpers
from acp import schema as acp_schema

from escouade_nb.core.conversation import (
    Change,
    Conversation,
    Message,
    Notice,
    Permission,
    Plan,
    ToolCall,
    Unknown,
)
from escouade_nb.core.render_text import diff_lines, render_item, render_items

# -- wire builders -------------------------------------------------------------------


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def chunk(role: str, t: str | dict[str, Any], message_id: str | None = None, **extra: Any) -> dict[str, Any]:
    kind = {"user": "user_message_chunk", "agent": "agent_message_chunk", "thought": "agent_thought_chunk"}[role]
    update: dict[str, Any] = {"sessionUpdate": kind, "content": text(t) if isinstance(t, str) else t}
    if message_id is not None:
        update["messageId"] = message_id
    update.update(extra)
    return update


def tool_call(tcid: str, title: str = "Read file", **fields: Any) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call", "toolCallId": tcid, "title": title, **fields}


def tool_update(tcid: str, **fields: Any) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call_update", "toolCallId": tcid, **fields}


def entry(content: str, status: str = "pending", priority: str = "medium") -> dict[str, Any]:
    return {"content": content, "priority": priority, "status": status}


def kinds(changes: list[Change]) -> list[tuple[str, str | None]]:
    """(kind, item key or state name) of each change."""
    return [(c.kind, c.item.key if c.item is not None else c.name) for c in changes]


OPTIONS = [
    {"optionId": "allow", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]


@pytest.fixture
def conv() -> Conversation:
    return Conversation()


# -- the test vocabulary is what the SDK's schema accepts ------------------------------


@pytest.mark.parametrize(
    "update",
    [
        chunk("agent", "x", "m1"),
        tool_call("t1", kind="read", status="pending", rawInput={"path": "a"}, _meta={"v": 1}),
        tool_update("t1", status="completed"),
        {"sessionUpdate": "plan", "entries": [entry("a")]},
        {"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "p", "entries": [entry("a")]}},
        {"sessionUpdate": "plan_update", "plan": {"type": "markdown", "planId": "p", "content": "# P"}},
        {"sessionUpdate": "plan_removed", "planId": "p"},
        {"sessionUpdate": "available_commands_update", "availableCommands": [{"name": "n", "description": "d"}]},
        {"sessionUpdate": "current_mode_update", "currentModeId": "ask"},
        {"sessionUpdate": "config_option_update", "configOptions": []},
        {"sessionUpdate": "session_info_update", "title": "T"},
        {"sessionUpdate": "usage_update", "used": 1, "size": 2},
    ],
)
def test_builders_match_the_sdk_schema(update: dict[str, Any]) -> None:
    acp_schema.SessionNotification.model_validate({"sessionId": "s", "update": update})


# -- message chunks --------------------------------------------------------------------


def test_consecutive_agent_chunks_merge_into_one_message(conv: Conversation) -> None:
    first = conv.apply(chunk("agent", "Hel"))
    second = conv.apply(chunk("agent", "lo "))
    third = conv.apply(chunk("agent", "world"))
    assert len(conv.items) == 1
    msg = conv.items[0]
    assert isinstance(msg, Message)
    assert msg.role == "agent"
    assert msg.text == "Hello world"
    assert msg.parts == ["Hel", "lo ", "world"]
    assert msg.message_id is None
    assert msg.closed is False
    assert kinds(first) == [("added", msg.key)]
    assert kinds(second) == [("updated", msg.key)]
    assert kinds(third) == [("updated", msg.key)]
    assert msg.version == 3


@pytest.mark.parametrize("role", ["user", "agent", "thought"])
def test_each_chunk_kind_gives_its_role(conv: Conversation, role: str) -> None:
    conv.apply(chunk(role, "a"))
    conv.apply(chunk(role, "b"))
    (msg,) = conv.items
    assert isinstance(msg, Message)
    assert msg.role == role
    assert msg.text == "ab"
    assert msg.key.startswith(role + "-")


def test_a_different_role_starts_a_new_message(conv: Conversation) -> None:
    conv.apply(chunk("thought", "hmm"))
    conv.apply(chunk("agent", "answer"))
    conv.apply(chunk("thought", " again"))
    roles = [(m.role, m.text) for m in conv.items]  # type: ignore[attr-defined]
    assert roles == [("thought", "hmm"), ("agent", "answer"), ("thought", " again")]


def test_same_message_id_merges_even_when_not_last(conv: Conversation) -> None:
    conv.apply(chunk("agent", "one ", "m1"))
    conv.apply(tool_call("t1"))  # closes m1
    changes = conv.apply(chunk("agent", "two", "m1"))
    assert len(conv.items) == 2
    msg, call = conv.items
    assert isinstance(msg, Message) and isinstance(call, ToolCall)
    assert msg.text == "one two"
    assert msg.message_id == "m1"
    assert kinds(changes) == [("updated", msg.key)]


def test_a_new_message_id_starts_a_new_message(conv: Conversation) -> None:
    conv.apply(chunk("agent", "a", "m1"))
    changes = conv.apply(chunk("agent", "b", "m2"))
    conv.apply(chunk("agent", "c", "m1"))
    conv.apply(chunk("agent", "d", "m2"))
    assert [(m.message_id, m.text) for m in conv.items] == [("m1", "ac"), ("m2", "bd")]  # type: ignore[attr-defined]
    assert kinds(changes) == [("added", conv.items[1].key)]


def test_message_ids_are_per_role(conv: Conversation) -> None:
    conv.apply(chunk("thought", "think", "x"))
    conv.apply(chunk("agent", "say", "x"))
    assert [(m.role, m.text) for m in conv.items] == [("thought", "think"), ("agent", "say")]  # type: ignore[attr-defined]


def test_a_chunk_with_an_id_does_not_join_an_anonymous_message(conv: Conversation) -> None:
    conv.apply(chunk("agent", "anon"))
    conv.apply(chunk("agent", "named", "m1"))
    assert [(m.message_id, m.text) for m in conv.items] == [(None, "anon"), ("m1", "named")]  # type: ignore[attr-defined]


def test_a_chunk_without_id_joins_the_last_open_message_of_its_role(conv: Conversation) -> None:
    conv.apply(chunk("agent", "named ", "m1"))
    conv.apply(chunk("agent", "tail"))
    (msg,) = conv.items
    assert isinstance(msg, Message)
    assert msg.text == "named tail"
    assert msg.message_id == "m1"


def test_a_chunk_without_id_does_not_join_a_message_of_another_role(conv: Conversation) -> None:
    conv.apply(chunk("agent", "a"))
    conv.apply(chunk("user", "u"))
    conv.apply(chunk("agent", "b"))
    assert [(m.role, m.text) for m in conv.items] == [("agent", "a"), ("user", "u"), ("agent", "b")]  # type: ignore[attr-defined]


def test_an_item_in_between_closes_the_message(conv: Conversation) -> None:
    conv.apply(chunk("agent", "before"))
    msg = conv.items[0]
    v = msg.version
    changes = conv.apply(tool_call("t1"))
    assert isinstance(msg, Message)
    assert msg.closed is True
    assert msg.version == v + 1
    call = conv.tool_calls["t1"]
    assert kinds(changes) == [("updated", msg.key), ("added", call.key)]
    conv.apply(chunk("agent", "after"))
    assert [type(i).__name__ for i in conv.items] == ["Message", "ToolCall", "Message"]
    assert conv.items[0].text == "before"  # type: ignore[attr-defined]
    assert conv.items[2].text == "after"  # type: ignore[attr-defined]
    assert conv.items[2].closed is False  # type: ignore[attr-defined]


def test_a_closed_message_is_not_closed_again(conv: Conversation) -> None:
    conv.apply(chunk("agent", "x"))
    conv.apply(tool_call("t1"))
    changes = conv.apply(tool_call("t2"))
    assert kinds(changes) == [("added", conv.tool_calls["t2"].key)]


def test_non_text_blocks_are_kept_as_wire_dicts(conv: Conversation) -> None:
    image = {"type": "image", "data": "aGk=", "mimeType": "image/png", "_meta": {"k": "v"}}
    link = {"type": "resource_link", "uri": "file:///a.py", "name": "a.py"}
    resource = {"type": "resource", "resource": {"uri": "file:///b", "text": "B"}}
    audio = {"type": "audio", "data": "AA==", "mimeType": "audio/wav"}
    conv.apply(chunk("agent", "see "))
    conv.apply(chunk("agent", image))
    conv.apply(chunk("agent", "and"))
    conv.apply(chunk("agent", link))
    conv.apply(chunk("agent", resource))
    conv.apply(chunk("agent", audio))
    (msg,) = conv.items
    assert isinstance(msg, Message)
    assert msg.text == "see and"
    assert msg.blocks == [image, link, resource, audio]
    assert msg.blocks[0]["_meta"] == {"k": "v"}


def test_close_messages_freezes_open_messages(conv: Conversation) -> None:
    conv.apply(chunk("thought", "t"))
    conv.apply(chunk("agent", "a"))
    seen: list[list[Change]] = []
    conv.subscribe(seen.append)
    conv.close_messages()
    assert all(m.closed for m in conv.items)  # type: ignore[attr-defined]
    assert seen == [[Change("updated", conv.items[0]), Change("updated", conv.items[1])]]
    conv.close_messages()  # nothing left to close: no event
    assert len(seen) == 1
    conv.apply(chunk("agent", "b"))
    assert len(conv.items) == 3
    assert conv.items[2].text == "b"  # type: ignore[attr-defined]


def test_add_user_message_is_closed_and_splits_blocks(conv: Conversation) -> None:
    link = {"type": "resource_link", "uri": "file:///x", "name": "x"}
    msg = conv.add_user_message([text("fix "), link, text("this")])
    assert conv.items == [msg]
    assert msg.role == "user"
    assert msg.closed is True
    assert msg.text == "fix this"
    assert msg.blocks == [link]
    conv.apply(chunk("user", "replayed"))  # a closed message is not extended
    assert len(conv.items) == 2
    assert conv.items[1].text == "replayed"  # type: ignore[attr-defined]


def test_a_message_knows_when_its_first_and_latest_chunks_came(conv: Conversation, monkeypatch) -> None:
    import time

    now = iter([100.0, 101.5, 103.0, 104.0])
    monkeypatch.setattr(time, "monotonic", lambda: next(now))  # the fold reads the clock once a chunk
    conv.clock = time.monotonic
    conv.apply(chunk("thought", "Let me "))
    (thought,) = conv.items
    assert (thought.first_at, thought.last_at, thought.duration) == (100.0, 100.0, 0.0)
    conv.apply(chunk("thought", "think."))
    conv.apply({"sessionUpdate": "agent_thought_chunk", "content": {"type": "image", "mimeType": "image/png",
                                                                     "data": "AA=="}})
    assert (thought.first_at, thought.last_at, thought.duration) == (100.0, 103.0, 3.0)  # "thought for 3 s"
    conv.apply(chunk("agent", "42"))
    assert conv.items[1].first_at == 104.0 and thought.last_at == 103.0  # another message: its own times
    user = conv.add_user_message([text("q")])  # built otherwise: no times
    assert (user.first_at, user.last_at, user.duration) == (None, None, None)
    assert Message("m").duration is None


def test_a_replayed_message_keeps_its_transcripts_times() -> None:
    import time

    from escouade_nb.wire.transcript import Record, replay

    def rec(t: float, update: dict[str, Any]) -> Record:
        return Record(t=t, kind="in", msg={"jsonrpc": "2.0", "method": "session/update",
                                           "params": {"sessionId": "s1", "update": update}})
    conv = Conversation()
    replay(iter([rec(1000.0, chunk("thought", "hm")), rec(1004.5, chunk("thought", " ok")),
                 rec(1005.0, chunk("agent", "done"))]), conv)
    thought, reply = conv.items
    assert thought.duration == pytest.approx(4.5) and reply.duration == 0.0
    assert conv.clock is time.monotonic  # the live clock again after the replay


def test_add_user_message_closes_the_previous_agent_message_only_at_close(conv: Conversation) -> None:
    conv.apply(chunk("agent", "a"))
    conv.add_user_message([text("q")])
    conv.apply(chunk("agent", "b"))
    assert [(m.role, m.text) for m in conv.items] == [("agent", "a"), ("user", "q"), ("agent", "b")]  # type: ignore[attr-defined]


# -- tool calls ------------------------------------------------------------------------


def test_tool_call_fields(conv: Conversation) -> None:
    content = [{"type": "content", "content": text("reading")}]
    locations = [{"path": "/w/a.py", "line": 3}]
    changes = conv.apply(tool_call("t1", "Read a.py", kind="read", status="pending", content=content,
                                   locations=locations, rawInput={"path": "/w/a.py"}))
    call = conv.tool_calls["t1"]
    assert conv.items == [call]
    assert kinds(changes) == [("added", call.key)]
    assert call.tool_call_id == "t1"
    assert call.title == "Read a.py"
    assert call.kind == "read"
    assert call.status == "pending"
    assert call.shown_status == "pending"
    assert call.content == content
    assert call.locations == locations
    assert call.raw_input == {"path": "/w/a.py"}
    assert call.raw_output is None
    assert call.placeholder is False
    assert call.version == 1


def test_tool_call_update_merges_fields_and_keeps_absent_ones(conv: Conversation) -> None:
    content = [{"type": "content", "content": text("x")}]
    locations = [{"path": "/a"}]
    conv.apply(tool_call("t1", "Run", kind="execute", status="pending", content=content, locations=locations,
                         rawInput={"command": "ls"}))
    call = conv.tool_calls["t1"]
    changes = conv.apply(tool_update("t1", status="in_progress"))
    assert kinds(changes) == [("updated", call.key)]
    assert (call.title, call.kind, call.status) == ("Run", "execute", "in_progress")
    assert call.content == content  # absent: left alone
    assert call.locations == locations
    assert call.raw_input == {"command": "ls"}
    conv.apply(tool_update("t1", status="completed", title="Run ls", rawOutput={"exit": 0}))
    assert (call.title, call.status, call.raw_output) == ("Run ls", "completed", {"exit": 0})
    assert call.version == 3
    assert len(conv.items) == 1


def test_tool_call_update_replaces_content_and_locations(conv: Conversation) -> None:
    conv.apply(tool_call("t1", content=[{"type": "content", "content": text("a")}], locations=[{"path": "/a"}]))
    new_content = [{"type": "diff", "path": "/b", "oldText": "1", "newText": "2"},
                   {"type": "terminal", "terminalId": "term-1"}]
    conv.apply(tool_update("t1", content=new_content, locations=[{"path": "/b", "line": 1}]))
    call = conv.tool_calls["t1"]
    assert call.content == new_content
    assert call.locations == [{"path": "/b", "line": 1}]
    assert call.diffs == [new_content[0]]
    conv.apply(tool_update("t1", content=[], locations=[]))
    assert call.content == []
    assert call.locations == []
    conv.apply(tool_update("t1", content=None))  # explicit null empties too
    assert call.content == []


def test_content_list_is_copied_not_aliased(conv: Conversation) -> None:
    content = [{"type": "content", "content": text("a")}]
    conv.apply(tool_call("t1", content=content))
    content.append({"type": "terminal", "terminalId": "x"})
    assert len(conv.tool_calls["t1"].content) == 1


def test_update_for_unknown_id_creates_a_placeholder_then_tool_call_fills_it(conv: Conversation) -> None:
    changes = conv.apply(tool_update("t9", status="in_progress"))
    call = conv.tool_calls["t9"]
    assert conv.items == [call]
    assert kinds(changes) == [("added", call.key)]
    assert call.placeholder is True
    assert call.title is None
    assert call.status == "in_progress"
    changes = conv.apply(tool_call("t9", "Edit x", kind="edit"))
    assert kinds(changes) == [("updated", call.key)]
    assert conv.items == [call]
    assert call.placeholder is False
    assert (call.title, call.kind, call.status) == ("Edit x", "edit", "in_progress")
    conv.apply(tool_update("t9", status="completed"))
    assert call.placeholder is False  # an update does not make it a placeholder again


def test_same_id_announced_twice_is_one_item(conv: Conversation) -> None:
    conv.apply(tool_call("t1", "First", status="pending"))
    changes = conv.apply(tool_call("t1", "Second", kind="edit"))
    assert len(conv.items) == 1
    call = conv.items[0]
    assert isinstance(call, ToolCall)
    assert kinds(changes) == [("updated", call.key)]
    assert (call.title, call.kind, call.status) == ("Second", "edit", "pending")
    assert list(conv.tool_calls) == ["t1"]


def test_raw_input_output_meta_and_unmodelled_fields_are_kept(conv: Conversation) -> None:
    raw_input = {"path": "/a", "nested": {"list": [1, 2]}}
    conv.apply(tool_call("t1", rawInput=raw_input, _meta={"vendor": {"x": 1}}, name="read_file"))
    call = conv.tool_calls["t1"]
    assert call.raw_input == raw_input
    assert call.meta == {"vendor": {"x": 1}}
    assert call.extra == {"name": "read_file"}
    conv.apply(tool_update("t1", rawOutput="done", _meta={"vendor": {"x": 2}}))
    assert call.raw_output == "done"
    assert call.meta == {"vendor": {"x": 2}}
    assert call.extra == {"name": "read_file"}


def test_tool_call_content_items_keep_unknown_fields(conv: Conversation) -> None:
    diff = {"type": "diff", "path": "/a", "oldText": None, "newText": "x\n", "_meta": {"lang": "py"}}
    conv.apply(tool_call("t1", content=[diff]))
    assert conv.tool_calls["t1"].content[0]["_meta"] == {"lang": "py"}
    assert conv.tool_calls["t1"].content[0]["oldText"] is None


def test_tool_calls_keep_transcript_order(conv: Conversation) -> None:
    conv.apply(tool_call("a"))
    conv.apply(tool_call("b"))
    conv.apply(tool_update("a", status="completed"))
    assert [i.tool_call_id for i in conv.items] == ["a", "b"]  # type: ignore[attr-defined]


def test_shown_status_defaults_to_pending(conv: Conversation) -> None:
    conv.apply(tool_update("t1"))
    call = conv.tool_calls["t1"]
    assert call.status is None
    assert call.shown_status == "pending"


# -- plans -----------------------------------------------------------------------------


def test_plan_replaces_entries_in_one_item(conv: Conversation) -> None:
    first = conv.apply({"sessionUpdate": "plan", "entries": [entry("a"), entry("b")]})
    plan = conv.plan
    assert isinstance(plan, Plan)
    assert kinds(first) == [("added", plan.key)]
    second = conv.apply({"sessionUpdate": "plan", "entries": [entry("a", "completed"), entry("c", "in_progress")]})
    assert kinds(second) == [("updated", plan.key)]
    assert conv.items == [plan]
    assert conv.plan is plan
    assert plan.entries == [entry("a", "completed"), entry("c", "in_progress")]
    assert plan.version == 2
    assert plan.removed is False


def test_plan_stays_where_it_first_appeared(conv: Conversation) -> None:
    conv.apply({"sessionUpdate": "plan", "entries": [entry("a")]})
    conv.apply(chunk("agent", "working"))
    conv.apply({"sessionUpdate": "plan", "entries": [entry("a", "completed")]})
    assert [type(i).__name__ for i in conv.items] == ["Plan", "Message"]
    assert conv.items[0].entries[0]["status"] == "completed"  # type: ignore[attr-defined]


def test_plan_update_items_markdown_and_removed(conv: Conversation) -> None:
    conv.apply({"sessionUpdate": "plan_update",
                "plan": {"type": "items", "planId": "p1", "entries": [entry("x")]}})
    plan = conv.plan
    assert plan is not None
    assert (plan.plan_id, plan.entries, plan.markdown) == ("p1", [entry("x")], None)
    conv.apply({"sessionUpdate": "plan_update",
                "plan": {"type": "markdown", "planId": "p1", "content": "# Plan\n- step"}})
    assert conv.plan is plan
    assert plan.markdown == "# Plan\n- step"
    assert plan.entries == []
    changes = conv.apply({"sessionUpdate": "plan_removed", "planId": "p1"})
    assert plan.removed is True
    assert kinds(changes) == [("updated", plan.key)]
    assert conv.apply({"sessionUpdate": "plan_removed", "planId": "p1"}) == []  # already removed
    conv.apply({"sessionUpdate": "plan", "entries": [entry("new")]})
    assert conv.plan is not plan
    assert [type(i).__name__ for i in conv.items] == ["Plan", "Plan"]
    assert conv.plan.entries == [entry("new")]  # type: ignore[union-attr]


def test_plan_removed_without_a_plan_changes_nothing(conv: Conversation) -> None:
    assert conv.apply({"sessionUpdate": "plan_removed", "planId": "p"}) == []
    assert conv.items == []


# -- session state ---------------------------------------------------------------------


def test_available_commands_update(conv: Conversation) -> None:
    cmds = [{"name": "init", "description": "make AGENTS.md", "input": {"hint": "where"}}]
    changes = conv.apply({"sessionUpdate": "available_commands_update", "availableCommands": cmds})
    assert changes == [Change("state", name="commands")]
    assert conv.commands == cmds
    assert conv.items == []


def test_current_mode_update_without_and_with_modes(conv: Conversation) -> None:
    changes = conv.apply({"sessionUpdate": "current_mode_update", "currentModeId": "ask"})
    assert changes == [Change("state", name="mode")]
    assert conv.current_mode_id == "ask"
    assert conv.modes is None
    modes = {"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}]}
    conv.set_session_state(modes=modes)
    conv.apply({"sessionUpdate": "current_mode_update", "currentModeId": "code"})
    assert conv.current_mode_id == "code"
    assert conv.modes is not None
    assert conv.modes["currentModeId"] == "code"
    assert conv.modes["availableModes"] == modes["availableModes"]
    assert modes["currentModeId"] == "ask"  # the caller's dict is not mutated


def test_config_option_update_replaces_the_options(conv: Conversation) -> None:
    opt = {"id": "model", "name": "Model", "type": "select", "currentValue": "a",
           "options": [{"value": "a", "name": "A"}, {"value": "b", "name": "B"}]}
    conv.set_session_state(config_options=[opt])
    new = dict(opt, currentValue="b")
    changes = conv.apply({"sessionUpdate": "config_option_update", "configOptions": [new]})
    assert changes == [Change("state", name="config_options")]
    assert conv.config_options == [new]


def test_session_info_update(conv: Conversation) -> None:
    changes = conv.apply({"sessionUpdate": "session_info_update", "title": "Fix bug"})
    assert changes == [Change("state", name="info")]
    assert (conv.title, conv.updated_at) == ("Fix bug", None)
    conv.apply({"sessionUpdate": "session_info_update", "updatedAt": "2026-01-02T03:04:05Z"})
    assert (conv.title, conv.updated_at) == ("Fix bug", "2026-01-02T03:04:05Z")  # title left alone


def test_usage_update(conv: Conversation) -> None:
    changes = conv.apply({"sessionUpdate": "usage_update", "used": 1200, "size": 200000,
                          "cost": {"amount": 0.25, "currency": "USD"}})
    assert changes == [Change("state", name="usage")]
    assert conv.usage == {"used": 1200, "size": 200000, "cost": {"amount": 0.25, "currency": "USD"}}
    conv.apply({"sessionUpdate": "usage_update", "used": 1500, "size": 200000})
    assert conv.usage == {"used": 1500, "size": 200000}


def test_set_session_state_emits_state_changes(conv: Conversation) -> None:
    seen: list[list[Change]] = []
    conv.subscribe(seen.append)
    conv.set_session_state(modes={"currentModeId": "m", "availableModes": []}, config_options=[])
    assert seen == [[Change("state", name="mode"), Change("state", name="config_options")]]
    assert conv.current_mode_id == "m"
    conv.set_session_state()
    assert len(seen) == 1  # nothing given, nothing emitted


def test_state_updates_add_no_items_and_do_not_close_messages(conv: Conversation) -> None:
    conv.apply(chunk("agent", "a"))
    conv.apply({"sessionUpdate": "usage_update", "used": 1, "size": 2})
    conv.apply({"sessionUpdate": "session_info_update", "title": "T"})
    conv.apply(chunk("agent", "b"))
    assert len(conv.items) == 1
    assert conv.items[0].text == "ab"  # type: ignore[attr-defined]


# -- what the schema does not know -------------------------------------------------------


def test_unknown_update_kind_is_kept_raw(conv: Conversation) -> None:
    raw = {"sessionUpdate": "compaction_update", "status": "started", "_meta": {"a": 1}}
    snapshot = copy.deepcopy(raw)
    changes = conv.apply(raw)
    (item,) = conv.items
    assert isinstance(item, Unknown)
    assert item.raw == snapshot
    assert "compaction_update" in item.reason
    assert not item.reason.startswith(":")
    assert kinds(changes) == [("added", item.key)]


def test_known_kind_with_unknown_content_type_is_kept_raw(conv: Conversation) -> None:
    raw = chunk("agent", {"type": "video", "uri": "file:///v.mp4"})
    conv.apply(raw)
    (item,) = conv.items
    assert isinstance(item, Unknown)
    assert item.raw == raw
    assert "video" in item.reason
    assert item.reason.startswith("agent_message_chunk.content")


def test_known_kind_missing_a_required_field_is_kept_raw(conv: Conversation) -> None:
    conv.apply({"sessionUpdate": "tool_call", "toolCallId": "t1"})  # no title
    (item,) = conv.items
    assert isinstance(item, Unknown)
    assert "title" in item.reason
    assert conv.tool_calls == {}


@pytest.mark.parametrize("raw", [{}, {"content": text("x")}, {"sessionUpdate": None}, {"sessionUpdate": 5}])
def test_updates_without_a_usable_kind_are_kept(conv: Conversation, raw: dict[str, Any]) -> None:
    changes = conv.apply(raw)
    (item,) = conv.items
    assert isinstance(item, Unknown)
    assert item.raw == raw
    assert item.reason
    assert kinds(changes) == [("added", item.key)]


@pytest.mark.parametrize("value", [None, 42, "agent_message_chunk", [1, 2]])
def test_non_object_updates_are_kept(conv: Conversation, value: Any) -> None:
    conv.apply(value)  # type: ignore[arg-type]
    (item,) = conv.items
    assert isinstance(item, Unknown)
    assert item.raw == {"value": value}
    assert item.reason


def test_unknown_items_close_the_message_and_the_fold_goes_on(conv: Conversation) -> None:
    conv.apply(chunk("agent", "a"))
    conv.apply({"sessionUpdate": "new_thing"})
    conv.apply(chunk("agent", "b"))
    assert [type(i).__name__ for i in conv.items] == ["Message", "Unknown", "Message"]
    assert conv.items[0].closed is True  # type: ignore[attr-defined]


def test_unknown_extra_fields_on_known_chunk_are_accepted(conv: Conversation) -> None:
    conv.apply(chunk("agent", "hi", futureField={"x": 1}, _meta={"trace": "t"}))
    (msg,) = conv.items
    assert isinstance(msg, Message)
    assert msg.text == "hi"


def test_updates_before_any_user_message(conv: Conversation) -> None:
    conv.apply({"sessionUpdate": "available_commands_update", "availableCommands": []})
    conv.apply(chunk("user", "replayed prompt"))
    conv.apply(tool_update("t1", status="completed"))
    conv.apply({"sessionUpdate": "plan", "entries": [entry("a")]})
    assert [type(i).__name__ for i in conv.items] == ["Message", "ToolCall", "Plan"]
    conv.add_user_message([text("now")])
    assert conv.items[-1].text == "now"  # type: ignore[attr-defined]


# -- permissions ------------------------------------------------------------------------


def test_permission_for_an_unknown_tool_call_creates_a_placeholder(conv: Conversation) -> None:
    seen: list[list[Change]] = []
    conv.subscribe(seen.append)
    perm = conv.add_permission({"toolCallId": "t5", "title": "rm -rf build", "kind": "execute"}, OPTIONS)
    call = conv.tool_calls["t5"]
    assert conv.items == [call, perm]
    assert isinstance(perm, Permission)
    assert perm.tool_call is call
    assert call.placeholder is True
    assert (call.title, call.kind) == ("rm -rf build", "execute")
    assert perm.options == OPTIONS
    assert perm.options is not OPTIONS
    assert perm.state == "pending"
    assert perm.chosen is None
    assert seen == [[Change("added", call), Change("added", perm)]]
    conv.apply(tool_call("t5", "Run rm", status="pending"))
    assert call.placeholder is False
    assert len(conv.items) == 2


def test_permission_for_a_known_tool_call_updates_it(conv: Conversation) -> None:
    conv.apply(chunk("agent", "I will edit"))
    conv.apply(tool_call("t1", "Edit a.py", kind="edit", status="pending"))
    call = conv.tool_calls["t1"]
    v = call.version
    diff = [{"type": "diff", "path": "/a.py", "oldText": "a", "newText": "b"}]
    perm = conv.add_permission({"toolCallId": "t1", "content": diff}, OPTIONS)
    assert conv.items[1:] == [call, perm]
    assert len(conv.tool_calls) == 1
    assert perm.tool_call is call
    assert call.content == diff
    assert call.title == "Edit a.py"
    assert call.placeholder is False
    assert call.version == v + 1


def test_resolve_permission_settles_once(conv: Conversation) -> None:
    perm = conv.add_permission({"toolCallId": "t1"}, OPTIONS)
    seen: list[list[Change]] = []
    conv.subscribe(seen.append)
    v = perm.version
    assert conv.resolve_permission(perm, "selected", "always", answered_by="you", message="ok") is True
    assert (perm.state, perm.option_id, perm.answered_by, perm.message) == ("selected", "always", "you", "ok")
    assert perm.chosen == OPTIONS[1]
    assert perm.version == v + 1
    assert seen == [[Change("updated", perm)]]
    assert conv.resolve_permission(perm, "cancelled") is False
    assert conv.resolve_permission(perm, "selected", "reject") is False
    assert perm.state == "selected"
    assert perm.option_id == "always"
    assert perm.version == v + 1
    assert len(seen) == 1


def test_resolve_permission_cancelled(conv: Conversation) -> None:
    perm = conv.add_permission({"toolCallId": "t1"}, OPTIONS)
    assert conv.resolve_permission(perm, "cancelled", answered_by="turn stopped") is True
    assert perm.state == "cancelled"
    assert perm.option_id is None
    assert perm.chosen is None


# -- cancellation -----------------------------------------------------------------------


def test_cancel_unfinished_marks_only_unfinished_calls(conv: Conversation) -> None:
    conv.apply(tool_call("pending", status="pending"))
    conv.apply(tool_call("running", status="in_progress"))
    conv.apply(tool_call("nostatus"))
    conv.apply(tool_call("done", status="completed"))
    conv.apply(tool_call("failed", status="failed"))
    seen: list[list[Change]] = []
    conv.subscribe(seen.append)
    conv.cancel_unfinished()
    shown = {tcid: call.shown_status for tcid, call in conv.tool_calls.items()}
    assert shown == {"pending": "cancelled", "running": "cancelled", "nostatus": "cancelled",
                     "done": "completed", "failed": "failed"}
    assert [c.item.tool_call_id for c in seen[0]] == ["pending", "running", "nostatus"]  # type: ignore[union-attr]
    assert all(c.kind == "updated" for c in seen[0])
    conv.cancel_unfinished()  # already marked: no second event
    assert len(seen) == 1


def test_a_later_agent_status_still_shows_after_cancel(conv: Conversation) -> None:
    conv.apply(tool_call("t1", status="in_progress"))
    conv.apply(tool_call("t2", status="pending"))
    conv.cancel_unfinished()
    call = conv.tool_calls["t1"]
    assert call.cancelled is True
    conv.apply(tool_update("t1", status="failed"))
    assert call.shown_status == "failed"
    conv.apply(tool_update("t2", status="completed"))
    assert conv.tool_calls["t2"].shown_status == "completed"


def test_an_unfinished_status_after_cancel_still_shows_cancelled(conv: Conversation) -> None:
    conv.apply(tool_call("t1", status="pending"))
    conv.cancel_unfinished()
    conv.apply(tool_update("t1", status="in_progress"))
    assert conv.tool_calls["t1"].shown_status == "cancelled"


# -- subscribers, versions, keys ---------------------------------------------------------


def test_subscribers_receive_the_change_lists(conv: Conversation) -> None:
    a: list[list[Change]] = []
    b: list[list[Change]] = []
    conv.subscribe(a.append)
    conv.subscribe(b.append)
    returned = conv.apply(chunk("agent", "x"))
    assert a == [returned]
    assert b == [returned]
    assert a[0][0].item is conv.items[0]


def test_a_subscriber_without_chunks_hears_everything_but_a_message_growing(conv: Conversation) -> None:
    """``subscribe(fn, chunks=False)``: the next chunk of a message already there (most of a
    streamed reply) is not told to ``fn``; a message added, closed, a tool call, the state are."""
    every: list[list[Change]] = []
    cold: list[list[Change]] = []
    conv.subscribe(every.append)
    conv.subscribe(cold.append, chunks=False)
    added = conv.apply(chunk("agent", "Hel"))
    grown = [conv.apply(chunk("agent", "lo")), conv.apply(chunk("agent", {"type": "image", "mimeType": "image/png",
                                                                          "data": ""}))]
    conv.apply(chunk("agent", ""))  # an empty chunk: no change at all
    call = conv.apply(tool_call("t1"))  # closes the message: both hear it
    by_id = conv.apply(chunk("thought", "a", "m1"))
    grown.append(conv.apply(chunk("thought", "b", "m1")))
    mode = conv.apply({"sessionUpdate": "current_mode_update", "currentModeId": "ask"})
    msg = conv.items[0]
    assert [kinds(g) for g in grown] == [[("updated", msg.key)], [("updated", msg.key)],
                                         [("updated", conv.items[2].key)]]
    assert every == [added, *grown[:2], call, by_id, grown[2], mode]
    assert cold == [added, call, by_id, mode]
    assert kinds(call) == [("updated", msg.key), ("added", conv.items[1].key)]


def test_a_failing_subscriber_does_not_break_the_fold(conv: Conversation, caplog: pytest.LogCaptureFixture) -> None:
    got: list[list[Change]] = []

    def broken(changes: list[Change]) -> None:
        raise RuntimeError("view bug")

    conv.subscribe(broken)
    conv.subscribe(got.append)
    changes = conv.apply(chunk("agent", "x"))
    conv.apply(chunk("agent", "y"))
    assert got == [changes, [Change("updated", conv.items[0])]]
    assert conv.items[0].text == "xy"  # type: ignore[attr-defined]
    assert "conversation: a subscriber failed" in caplog.text


def test_unsubscribe(conv: Conversation) -> None:
    got: list[list[Change]] = []
    unsubscribe = conv.subscribe(got.append)
    conv.apply(chunk("agent", "x"))
    unsubscribe()
    conv.apply(chunk("agent", "y"))
    unsubscribe()  # twice is harmless
    assert len(got) == 1


def test_a_fold_without_changes_emits_nothing(conv: Conversation) -> None:
    got: list[list[Change]] = []
    conv.subscribe(got.append)
    conv.apply({"sessionUpdate": "plan_removed", "planId": "nothing"})
    conv.cancel_unfinished()
    conv.close_messages()
    assert got == []


def test_version_grows_on_every_change(conv: Conversation) -> None:
    conv.apply(tool_call("t1", status="pending"))
    call = conv.tool_calls["t1"]
    versions = [call.version]
    for update in (tool_update("t1", status="in_progress"), tool_update("t1", content=[]),
                   tool_update("t1", status="completed")):
        conv.apply(update)
        versions.append(call.version)
    conv.apply(tool_update("other"))  # another item: this one does not move
    versions.append(call.version)
    assert versions == [1, 2, 3, 4, 4]


def test_keys_are_unique(conv: Conversation) -> None:
    conv.apply(chunk("agent", "a"))
    conv.apply(tool_call("t1"))
    conv.apply(chunk("agent", "b"))
    conv.apply({"sessionUpdate": "plan", "entries": []})
    conv.add_permission({"toolCallId": "t1"}, OPTIONS)
    conv.add_notice("agent exited", level="error", detail="code 3")
    conv.apply({"sessionUpdate": "zzz"})
    keys = [i.key for i in conv.items]
    assert len(keys) == len(set(keys)) == 7


def test_add_notice(conv: Conversation) -> None:
    conv.apply(chunk("agent", "a"))
    notice = conv.add_notice("agent exited", level="error", detail="exit code 3")
    assert isinstance(notice, Notice)
    assert conv.items[-1] is notice
    assert conv.items[0].closed is True  # type: ignore[attr-defined]
    assert (notice.level, notice.text, notice.detail) == ("error", "agent exited", "exit code 3")


# -- SDK models as input -------------------------------------------------------------------


def test_sdk_models_are_accepted(conv: Conversation) -> None:
    conv.apply(acp_helpers.update_user_message_text("question"))
    conv.apply(acp_helpers.update_agent_thought_text("thinking"))
    conv.apply(acp_helpers.update_agent_message_text("Hel"))
    conv.apply(acp_helpers.update_agent_message_text("lo"))
    conv.apply(acp_helpers.start_tool_call("t1", "Edit a.py", kind="edit", status="pending",
                                           content=[acp_helpers.tool_diff_content("/a.py", "new\n", "old\n")],
                                           raw_input={"path": "/a.py"}))
    conv.apply(acp_helpers.update_tool_call("t1", status="completed"))
    conv.apply(acp_helpers.update_plan([acp_helpers.plan_entry("step", status="in_progress")]))
    conv.apply(acp_helpers.update_current_mode("code"))
    conv.apply(acp_schema.UsageUpdate(session_update="usage_update", used=5, size=10))
    assert [type(i).__name__ for i in conv.items] == ["Message", "Message", "Message", "ToolCall", "Plan"]
    assert [(m.role, m.text) for m in conv.items[:3]] == [  # type: ignore[attr-defined]
        ("user", "question"), ("thought", "thinking"), ("agent", "Hello")]
    call = conv.tool_calls["t1"]
    assert (call.title, call.kind, call.status) == ("Edit a.py", "edit", "completed")
    assert call.content == [{"type": "diff", "path": "/a.py", "oldText": "old\n", "newText": "new\n"}]
    assert call.raw_input == {"path": "/a.py"}
    assert conv.plan is not None
    assert conv.plan.entries == [{"content": "step", "priority": "medium", "status": "in_progress"}]
    assert conv.current_mode_id == "code"
    assert conv.usage == {"used": 5, "size": 10}


def test_sdk_model_update_leaves_absent_fields_alone(conv: Conversation) -> None:
    conv.apply(tool_call("t1", "T", content=[{"type": "terminal", "terminalId": "x"}], locations=[{"path": "/p"}]))
    conv.apply(acp_helpers.update_tool_call("t1", status="in_progress"))  # None fields are not sent
    call = conv.tool_calls["t1"]
    assert call.content == [{"type": "terminal", "terminalId": "x"}]
    assert call.locations == [{"path": "/p"}]
    assert call.title == "T"


# -- plain-text renders ----------------------------------------------------------------------


def test_render_messages(conv: Conversation) -> None:
    conv.add_user_message([text("hi"), {"type": "resource_link", "uri": "file:///a.py", "name": "a.py"}])
    conv.apply(chunk("thought", "hmm"))
    conv.apply(tool_call("t0"))
    conv.apply(chunk("agent", "Hello"))
    conv.apply(chunk("agent", {"type": "image", "data": "AA==", "mimeType": "image/png"}))
    user, thought, _, agent = conv.items
    assert render_item(user) == "you: hi [link a.py <file:///a.py>]"
    assert render_item(thought, "fake") == "(fake thinks) hmm"
    assert render_item(agent, "fake") == "fake: Hello [image image/png, 1 B]"
    assert render_item(agent) == "agent: Hello [image image/png, 1 B]"


def test_render_tool_call_with_new_file_diff(conv: Conversation) -> None:
    conv.apply(tool_call("t1", "Write hello.py", kind="edit", status="completed",
                         rawInput={"command": "cat > hello.py"},
                         content=[{"type": "diff", "path": "hello.py", "oldText": None,
                                   "newText": "a = 1\nb = 2\n"}]))
    assert render_item(conv.tool_calls["t1"]) == (
        "[tool] Write hello.py (edit, completed)\n"
        "  input: cat > hello.py\n"
        "  new file hello.py\n"
        "  +a = 1\n"
        "  +b = 2"
    )


def test_render_cancelled_placeholder_tool_call(conv: Conversation) -> None:
    conv.apply(tool_update("t7", rawInput={"b": 1, "a": [1]}))
    conv.cancel_unfinished()
    assert render_item(conv.tool_calls["t7"]) == (
        '[tool] t7 (other, cancelled)\n  input: {\n    "a": [\n      1\n    ],\n    "b": 1\n  }'
    )


def test_render_permission_plan_notice_unknown(conv: Conversation) -> None:
    perm = conv.add_permission({"toolCallId": "t1", "title": "Run ls"}, OPTIONS)
    assert render_item(perm) == "[permission] Run ls: [Allow once] [Always allow] [Reject]"
    conv.resolve_permission(perm, "selected", "allow", answered_by="you")
    assert render_item(perm) == "[permission] Run ls: Allowed once by you"
    conv.apply({"sessionUpdate": "plan", "entries": [entry("read", "completed"), entry("edit", "in_progress"),
                                                     entry("test")]})
    assert render_item(conv.plan) == "[plan]\n  [x] read\n  [~] edit\n  [ ] test"  # type: ignore[arg-type]
    conv.apply({"sessionUpdate": "plan_update", "plan": {"type": "markdown", "planId": "p", "content": "1. a"}})
    conv.apply({"sessionUpdate": "plan_removed", "planId": "p"})
    assert render_item(conv.plan) == "[plan] (removed)\n  1. a"  # type: ignore[arg-type]
    notice = conv.add_notice("agent exited", level="warning", detail="code 3\nsignal none")
    assert render_item(notice) == "[warning] agent exited\n  code 3\n  signal none"
    conv.apply({"sessionUpdate": "mystery"})
    unknown = conv.items[-1]
    assert render_item(unknown).startswith("[unknown update mystery] ")
    assert "mystery" in render_item(unknown)[len("[unknown update mystery] "):]


def test_render_is_deterministic(conv: Conversation) -> None:
    def build() -> str:
        c = Conversation()
        c.add_user_message([text("go")])
        c.apply(chunk("agent", "ok"))
        c.apply(tool_call("t1", "Edit", kind="edit", rawInput={"z": 1, "a": 2},
                          content=[{"type": "diff", "path": "f", "oldText": "1\n2\n", "newText": "1\n3\n"}]))
        return render_items(c.items, "fake")

    first = build()
    assert first == build()
    assert first.splitlines()[:2] == ["you: go", "fake: ok"]
    assert "  diff f" in first.splitlines()


def test_diff_lines_new_file_adds_every_line() -> None:
    assert diff_lines(None, "one\ntwo\nthree\n", "f.py") == [("+", "one"), ("+", "two"), ("+", "three")]
    assert diff_lines(None, "") == []


def test_diff_lines_change() -> None:
    assert diff_lines("a\nb\nc\n", "a\nB\nc\n") == [
        ("@", "@@ -1,3 +1,3 @@"),
        (" ", "a"),
        ("-", "b"),
        ("+", "B"),
        (" ", "c"),
    ]
    assert diff_lines("same\n", "same\n") == []
    assert diff_lines("gone\n", "") == [("@", "@@ -1 +0,0 @@"), ("-", "gone")]
