"""The public failure cases of ACP clients (F01–F15), each played by a scripted agent
over real pipes against the real :class:`~escouade_nb.engine.agent.Agent`.

The scripted agent (``fixtures/script_agent.py``) fails loudly (exit 99, a stderr
line, a ``fail`` status) when the client writes something the transcript does not
expect, and logs every line the client wrote, so the asserts below about what the
client sent are exact. Transcripts are written in the cases' own notation:

* ``C> {...}``: a message the client must write (a subset match; for a client request
  the id is the client's own and an ``A>`` response to the example id uses it);
* ``C*> {...}``: consecutive ones may arrive in any order;
* ``A> ...``: a line the agent writes as is (``$WS`` and captured values replaced);
  ``A~> ...`` writes it one byte per ``os.write``; consecutive ``A+> ...`` lines go in
  a single write;
* ``E> ...``: a line on the agent's stderr;
* ``!> {...}``: a raw step of the scripted agent (``sleep``, ``quiet``, ``exit``…);
* ``[P]``: the standard prelude (initialize, session/new, the prompt ``go``).
"""

from __future__ import annotations

import asyncio
import base64
import html.parser
import itertools
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from escouade_nb.engine.agent import Agent, AgentError, AgentExited, AuthRequired
from escouade_nb.core.conversation import Notice, Unknown
from escouade_nb.manifest import HarnessRef, load_manifest
from escouade_nb.core.render_text import render_item, render_items
from view_helpers import buttons_of, html_shown, record

SCRIPT_AGENT = Path(__file__).resolve().parent / "fixtures" / "script_agent.py"

INIT = ('C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":'
        '{"fs":{"readTextFile":true,"writeTextFile":true}}}}')
"""The client's initialize, as in the cases' prelude but without ``"terminal": true``:
terminals are checked by F09 only, so that the other cases do not depend on them."""

INIT_RESULT = ('A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false,'
               '"promptCapabilities":{"image":false,"audio":false,"embeddedContext":false}},"authMethods":[]}}')
P_INIT = INIT + "\n" + INIT_RESULT
P_NEW = ('C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}\n'
         'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}')
P_PROMPT = ('C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1",'
            '"prompt":[{"type":"text","text":"go"}]}}')
PRELUDE = "\n".join([P_INIT, P_NEW, P_PROMPT])

_RESPONSE = re.compile(r'^\{"jsonrpc":"2\.0","id":(\d+),"(?:result|error)"')
_serial = itertools.count()


def steps_of(transcript: str) -> list[dict[str, Any]]:
    """The scripted agent's steps for a transcript in the cases' notation."""
    steps: list[dict[str, Any]] = []
    client_ids: set[int] = set()
    group: list[dict[str, Any]] | None = None  # C*> lines in a row
    batch: list[str] | None = None  # A+> lines in a row
    for line in transcript.replace("[P]", PRELUDE).splitlines():
        line = line.strip()
        if not line or line.startswith("--"):
            continue
        tag, _, rest = line.partition("> ")
        if tag != "C*":
            group = None
        if tag != "A+":
            batch = None
        if tag in ("A", "A~", "A+"):
            m = _RESPONSE.match(rest)
            if m and int(m.group(1)) in client_ids:  # a response to a client request: its real id
                rest = rest.replace(f'"id":{m.group(1)},', f'"id":$ID.c{m.group(1)},', 1)
            if tag == "A":
                steps.append({"send": rest})
            elif tag == "A~":
                steps.append({"send_bytewise": rest})
            elif batch is None:
                batch = [rest]
                steps.append({"send_batch": batch})
            else:
                batch.append(rest)
        elif tag in ("C", "C*"):
            want = json.loads(rest)
            name = None
            if "method" in want and "id" in want and want["id"] != "$ABSENT":  # the client picks its own ids
                client_ids.add(want["id"])
                name = f"c{want.pop('id')}"
            if tag == "C":
                steps.append({"expect": want, **({"as": name} if name else {})})
            elif group is None:
                group = [want]
                steps.append({"expect_all": group})
            else:
                group.append(want)
        elif tag == "E":
            steps.append({"stderr": rest + "\n"})
        elif tag == "!":
            steps.append(json.loads(rest))
        else:
            raise ValueError(f"not a transcript line: {line[:80]}")
    return steps


class Script:
    """A scenario for the scripted agent, its harness, and what the client wrote."""

    def __init__(self, tmp_path: Path, *runs: str | list[dict[str, Any]], ws: Path | None = None,
                 forbid: list[dict[str, Any]] | None = None, variables: dict[str, str] | None = None,
                 name: str = "script", acp: dict[str, Any] | None = None) -> None:
        n = next(_serial)
        self.dir = tmp_path / f"script-{n}"
        self.dir.mkdir(parents=True)
        self.ws = (ws or tmp_path / "ws").resolve()
        self.ws.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "log.jsonl"
        self.scenario = self.dir / "scenario.json"
        self.scenario.write_text(json.dumps({
            "log": str(self.log),
            "vars": {"WS": str(self.ws), **(variables or {})},
            "forbid": forbid or [],
            "runs": [steps_of(r) if isinstance(r, str) else r for r in runs],
        }))
        manifest = self.dir / "plugin" / "escouade-plugin.json"
        manifest.parent.mkdir()
        manifest.write_text(json.dumps({
            "id": f"dev.escouade_nb.tests.{name}", "name": "Scripted agent",
            "contributes": {"harnesses": [{
                "id": name, "name": "Scripted", "locate": {"names": ["python3"]},
                "acp": {"args": [str(SCRIPT_AGENT), str(self.scenario)], **(acp or {})}}]}}))
        loaded = load_manifest(manifest)
        self.ref = HarnessRef(manifest=loaded, harness=loaded.contributes.harnesses[0], path=manifest,
                              source="extra")

    def install(self, plugins: Path) -> None:
        """Put the harness in a plugin folder (``$ESCOUADE_NB_PLUGINS_DIR`` of a kernel)."""
        folder = plugins / self.ref.harness.id
        folder.mkdir(parents=True)
        (folder / "escouade-plugin.json").write_text(self.ref.path.read_text())

    def agent(self, **kwargs: Any) -> Agent:
        return Agent(self.ref, program=sys.executable, cwd=self.ws, **kwargs)

    def entries(self, direction: str = "in", run: int | None = None) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        out = []
        for line in self.log.read_text().splitlines():
            entry = json.loads(line)
            if entry["dir"] == direction and (run is None or entry["run"] == run):
                out.append(entry)
        return out

    def received(self, run: int | None = None) -> list[dict[str, Any]]:
        """Every message the client wrote (parsed), in order."""
        return [json.loads(e["line"]) for e in self.entries("in", run)]

    def statuses(self) -> list[dict[str, Any]]:
        path = Path(str(self.log) + ".status")
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def assert_ok(self, runs: int = 1) -> None:
        """Every run played all its steps and nothing failed after."""
        statuses = self.statuses()
        fails = [s for s in statuses if s["status"] != "ok"]
        assert not fails, f"the scripted agent failed: {fails}"
        assert sorted({s["run"] for s in statuses}) == list(range(runs)), statuses


def run(coro, timeout: float = 30):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def until(predicate, timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def responses_to(messages: list[dict[str, Any]], rpc_id: Any) -> list[dict[str, Any]]:
    return [m for m in messages if m.get("id") == rpc_id and "method" not in m]


# -- F01 ----------------------------------------------------------------------------------------
F01 = """
[P]
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"t1","title":"Write notes.txt","kind":"edit","status":"pending"}}}
A> {"jsonrpc":"2.0","id":100,"method":"session/request_permission","params":{"sessionId":"s1","toolCall":{"toolCallId":"t1"},"options":[{"optionId":"ok","name":"Allow once","kind":"allow_once"},{"optionId":"no","name":"Reject","kind":"reject_once"}]}}
-- the test presses Stop
C*> {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}
C*> {"jsonrpc":"2.0","id":100,"result":{"outcome":{"outcome":"cancelled"}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call_update","toolCallId":"t1","status":"failed"}}}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"cancelled"}}
"""

F01_WITHDRAWN = """
[P]
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"t1","title":"Write notes.txt","kind":"edit","status":"pending"}}}
A> {"jsonrpc":"2.0","id":100,"method":"session/request_permission","params":{"sessionId":"s1","toolCall":{"toolCallId":"t1"},"options":[{"optionId":"ok","name":"Allow once","kind":"allow_once"},{"optionId":"no","name":"Reject","kind":"reject_once"}]}}
!> {"sleep": 0.3}
A> {"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":100}}
C> {"jsonrpc":"2.0","id":100}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call_update","toolCallId":"t1","status":"failed"}}}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
"""


def test_F01_pending_permission_is_answered_cancelled_on_stop(tmp_path):
    from escouade_nb.widgets import AgentView

    s = Script(tmp_path, F01)

    async def go():
        agent = s.agent()
        try:
            view = AgentView(agent)
            turn = agent.send("go")
            card = await agent.next_permission(timeout=10)
            await until(lambda: view.feed.find(view.feed.key(card.permission)) is not None, what="the card's view")
            assert [b["label"] for b in buttons_of(view.card_html(card))] == ["Allow once", "Reject"]
            assert view.head()["can"]["stop"]
            stopped = time.time()
            view.act({"k": "act", "act": "stop"})  # the user presses Stop
            await until(lambda: responses_to(s.received(), 100), 1.0, "the answer to 100 within 1 s")
            answered_at = next(e["t"] for e in s.entries() if json.loads(e["line"]).get("id") == 100)
            assert answered_at - stopped < 1.0
            result = await turn
            assert result.stop_reason == "cancelled" and result.cancelled_by_user
            await asyncio.sleep(0.1)
            # the card is inert: no buttons, labelled cancelled; a click (a stale page) sends nothing
            assert card.state == "cancelled" and card.label.startswith("Cancelled")
            html = view.card_html(card)
            assert buttons_of(html) == [] and "esc-ans-cancelled" in html and "Cancelled" in html
            view.press(card, "choose", "ok")
            assert card.choose("ok") is False
            await asyncio.sleep(0.2)
            # the update after the cancel still applies: t1 failed
            assert agent.conversation.tool_calls["t1"].shown_status == "failed"
            assert not agent.pending_cards and not agent.turns.tasks - {asyncio.current_task()}
            assert agent.status == "idle"
        finally:
            await agent.close()
        sent = s.received()
        answers = responses_to(sent, 100)
        assert answers == [{"jsonrpc": "2.0", "id": 100, "result": {"outcome": {"outcome": "cancelled"}}}]
        assert [m["method"] for m in sent if "method" in m].count("session/cancel") == 1
        assert not any(m.get("result", {}).get("outcome", {}).get("outcome") == "selected" for m in sent)

    run(go())
    s.assert_ok()


def test_F01_agent_withdraws_its_request(tmp_path):
    """``$/cancel_request`` from the agent: the client answers 100 (cancelled or
    -32800) and the card closes."""
    s = Script(tmp_path, F01_WITHDRAWN)

    async def go():
        agent = s.agent()
        try:
            turn = agent.send("go")
            card = await agent.next_permission(timeout=10)
            result = await turn
            assert result.stop_reason == "end_turn"
            assert card.state == "cancelled" and "withdrew" in card.label
            assert not agent.pending_cards and agent.status == "idle"
        finally:
            await agent.close()
        answers = responses_to(s.received(), 100)
        assert len(answers) == 1
        answer = answers[0]
        assert (answer.get("result") == {"outcome": {"outcome": "cancelled"}}
                or answer.get("error", {}).get("code") == -32800), answer

    run(go())
    s.assert_ok()


# -- F02 ----------------------------------------------------------------------------------------
def _chunk(text: str, session: str = "s1") -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}},
        ensure_ascii=False, separators=(",", ":"))


F02 = f"""
[P]
A> {_chunk("x" * 200000)}
-- the next line goes one byte per write, so é, 世, 界 and 🚀 are split across reads
A~> {{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s1","update":{{"sessionUpdate":"agent_message_chunk","content":{{"type":"text","text":"héllo 世界 🚀"}}}}}}}}
A> {{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"end_turn"}}}}
C> {{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{{"sessionId":"s1","prompt":[{{"type":"text","text":"again"}}]}}}}
A> {_chunk("fine")}
A> {{"jsonrpc":"2.0","id":3,"result":{{"stopReason":"end_turn"}}}}
"""


def test_F02_long_line_and_split_utf8(tmp_path):
    s = Script(tmp_path, F02)

    async def go():
        agent = s.agent()
        try:
            first = await agent.send("go")
            assert first.stop_reason == "end_turn"
            assert first.text == "x" * 200000 + "héllo 世界 🚀"
            assert "\ufffd" not in first.text
            second = await agent.send("again")  # the connection is still usable
            assert second.stop_reason == "end_turn" and second.text == "fine"
            assert agent.transport.skipped_count == 0
            assert agent.status == "idle" and agent.alive
            assert not [i for i in agent.conversation.items if isinstance(i, Notice)]
        finally:
            await agent.close()

    run(go())
    s.assert_ok()


F02_OVER_CAP = f"""
[P]
A> {_chunk("a little")}
A> {_chunk("y" * (3 << 20))}
!> {{"hang": true}}
"""


def test_F02_line_over_the_cap_is_a_clear_transport_error(tmp_path, monkeypatch):
    """Above the transport's cap (lowered here to 1 MiB) the line cannot be taken:
    the UI says so, the agent is torn down, and the turn fails instead of hanging."""
    from escouade_nb.wire.transport import LineTransport

    monkeypatch.setitem(LineTransport.__init__.__kwdefaults__, "max_line_bytes", 1 << 20)
    s = Script(tmp_path, F02_OVER_CAP)

    async def go():
        agent = s.agent()
        try:
            await agent.ready()
            pid = agent.pid
            turn = agent.send("go")
            with pytest.raises(AgentError) as err:
                await asyncio.wait_for(turn.wait(), 10)
            assert "too long" in str(err.value) or "longer than" in str(err.value)
            assert turn.text == "a little"
            notices = [i for i in agent.conversation.items if isinstance(i, Notice) and i.level == "error"]
            assert any("longer than 1048576 bytes" in n.text for n in notices), notices
            await until(lambda: not alive(pid), 5, "the agent's end")
            assert agent.status in ("exited", "failed")
        finally:
            await agent.close()

    run(go())


# -- F03 ----------------------------------------------------------------------------------------
F03 = """
[P]
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"usage_update","used":0,"size":200000,"cost":{"amount":0,"currency":"USD"}}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"usage_update","used":null,"size":1000000}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"hologram_update","frames":7}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"still here"},"futureField":{"x":1}},"_meta":{"example.org/trace":"abc"}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"hologram","data":"AAAA"}}}}
A> {"jsonrpc":"2.0","method":"_example.org/ping","params":{}}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn","_meta":{"x":1}}}
!> {"quiet": 0.3}
"""


def test_F03_unknown_update_kinds_and_fields_are_kept(tmp_path, caplog):
    import logging

    from escouade_nb.widgets import AgentView

    caplog.set_level(logging.DEBUG)
    s = Script(tmp_path, F03)

    async def go():
        agent = s.agent()
        try:
            view = AgentView(agent)
            result = await agent.send("go")
            assert result.stop_reason == "end_turn"
            assert "still here" in result.text
            conv = agent.conversation
            assert conv.usage == {"used": 0, "size": 200000, "cost": {"amount": 0, "currency": "USD"}}
            unknown = [i for i in conv.items if isinstance(i, Unknown)]
            kinds = [u.raw.get("sessionUpdate") for u in unknown]
            assert kinds == ["usage_update", "hologram_update", "agent_message_chunk"]
            # the unknown content type is a placeholder that names it
            hologram = render_item(unknown[2])
            assert hologram.startswith("[unknown update agent_message_chunk]") and "hologram" in hologram
            assert "futureField" not in render_items(conv.items)
            await asyncio.sleep(0.1)
            assert "still here" in repr(view)
            assert agent.status == "idle" and agent.alive
            assert agent.client.extension_calls == [("example.org/ping", {})]
            await asyncio.sleep(0.4)  # the agent's quiet step
        finally:
            await agent.close()

    run(go())
    s.assert_ok()
    # nothing in reply to any notification: the client wrote the prelude only
    assert [m.get("method") for m in s.received()] == ["initialize", "session/new", "session/prompt"]
    loud = [r for r in caplog.records if r.levelno > logging.DEBUG and r.name.startswith(("escouade_nb", "acp"))]
    assert not loud, [r.getMessage() for r in loud]
    for word in ("hologram", "example.org/ping"):
        assert sum(word in r.getMessage() for r in caplog.records) <= 1


# -- F04 ----------------------------------------------------------------------------------------
def _w3() -> str:
    old = "".join(f"old {n}\n" for n in range(20000))
    new = "".join(f"new {n}\n" for n in range(20000))
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": {
        "sessionUpdate": "tool_call", "toolCallId": "w3", "title": "Rewrite big.txt", "kind": "edit",
        "status": "completed", "content": [{"type": "diff", "path": "$WS/big.txt", "oldText": old, "newText": new}]}}},
        separators=(",", ":"))


F04 = f"""
[P]
A> {{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s1","update":{{"sessionUpdate":"tool_call","toolCallId":"w1","title":"Write hello.py","kind":"edit","status":"pending","locations":[{{"path":"$WS/hello.py"}}],"content":[{{"type":"diff","path":"$WS/hello.py","oldText":null,"newText":"print('hi')\\nprint('bye')\\n"}}]}}}}}}
A> {{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s1","update":{{"sessionUpdate":"tool_call_update","toolCallId":"w1","status":"completed"}}}}}}
A> {{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s1","update":{{"sessionUpdate":"tool_call","toolCallId":"w2","title":"Write notes.md","kind":"edit","status":"completed","content":[{{"type":"diff","path":"$WS/notes.md","newText":"a\\n"}}]}}}}}}
A> {_w3()}
A> {{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"end_turn"}}}}
"""


def test_F04_new_file_diff_renders(tmp_path):
    from escouade_nb.widgets import AgentView

    s = Script(tmp_path, F04)
    ws = s.ws

    async def go():
        agent = s.agent()
        try:
            result = await agent.send("go")
            assert result.stop_reason == "end_turn"
            calls = agent.conversation.tool_calls
            w1, w2, w3 = calls["w1"], calls["w2"], calls["w3"]
            # the status-only update kept w1's diff
            assert w1.status == "completed" and len(w1.diffs) == 1
            assert render_item(w1).splitlines()[1:] == [
                f"  new file {ws}/hello.py", "  +print('hi')", "  +print('bye')"]
            assert render_item(w2).splitlines()[1:] == [f"  new file {ws}/notes.md", "  +a"]
            view = AgentView(agent)
            for call, added in ((w1, 2), (w2, 1)):
                html = view.card_html(call)
                assert html.count('class="esc-diff-add"') == added
                assert 'class="esc-diff-del"' not in html and "new file" in html
            # a huge diff renders fast and is capped
            started = time.perf_counter()
            big = view.card_html(w3)
            text = render_item(w3)
            assert time.perf_counter() - started < 2.0
            rows = len(re.findall(r'class="esc-diff-(?:add|del|hunk|ctx)"', big))
            assert 0 < rows <= 401
            assert re.search(r"… \d+ more lines", big), big[-300:]
            assert len(text) < 5000
        finally:
            await agent.close()

    run(go())
    s.assert_ok()


# -- F05 ----------------------------------------------------------------------------------------
F05 = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false,"promptCapabilities":{"image":false,"audio":false,"embeddedContext":false}},"authMethods":[]}}
C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
-- the next three lines are written with a single os.write()
A+> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"review","description":"Review the current diff","input":null},{"name":"web","description":"Search the web","input":{"hint":"query"}}]}}}
A+> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s9","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"stray"}}}}
A+> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}
!> {"quiet": 0.3}
"""


def test_F05_updates_before_the_session_new_answer_are_buffered(tmp_path):
    s = Script(tmp_path, F05)

    async def go():
        agent = s.agent()
        try:
            await agent.ready()
            assert agent.session_id == "s1"
            conv = agent.conversation
            assert [c["name"] for c in conv.commands] == ["review", "web"]
            assert "stray" not in render_items(conv.items)
            assert not conv.items  # no user-visible error either
            await asyncio.sleep(0.4)
        finally:
            await agent.close()
        # the transcript has the wire traffic; its replay keeps s9's update out too
        again = Agent.resume(agent.transcript.path, s.ref, program=sys.executable)
        assert [c["name"] for c in again.conversation.commands] == ["review", "web"]
        assert "stray" not in render_items(again.conversation.items)

    run(go())
    s.assert_ok()
    assert [m.get("method") for m in s.received()] == ["initialize", "session/new"]


# -- F06 ----------------------------------------------------------------------------------------
F06 = """
[P]
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"b1","title":"sleep 60","kind":"execute","status":"in_progress"}}}
-- the test presses Stop twice in quick succession
C> {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"},"id":"$ABSENT"}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"stopping"}}}}
!> {"sleep": 0.4}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
!> {"quiet": 0.3}
"""


def test_F06_one_session_cancel_and_the_turn_is_cancelled(tmp_path):
    from escouade_nb.widgets import AgentView

    s = Script(tmp_path, F06)

    async def go():
        agent = s.agent()
        try:
            view = AgentView(agent)
            turn = agent.send("go")
            await until(lambda: "b1" in agent.conversation.tool_calls, 10, "b1")
            stopped = time.time()
            view.act({"k": "act", "act": "stop"})
            agent.cancel()  # a double click on Stop
            # at once, b1 is shown cancelled by the client
            assert agent.conversation.tool_calls["b1"].shown_status == "cancelled"
            await until(lambda: any(m.get("method") == "session/cancel" for m in s.received()), 1.0,
                        "session/cancel within 1 s")
            cancel_at = next(e["t"] for e in s.entries() if "session/cancel" in e["line"])
            assert cancel_at - stopped < 1.0
            await until(lambda: "stopping" in turn.text, 5, "the text after the cancel")
            assert not turn.done and agent.status == "working"  # not before the prompt's answer
            result = await turn
            assert result.cancelled_by_user and result.stop_reason == "end_turn"
            assert result.text == "stopping"
            assert agent.status == "idle"
            await asyncio.sleep(0.4)
        finally:
            await agent.close()
        cancels = [m for m in s.received() if m.get("method") == "session/cancel"]
        assert cancels == [{"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}}]

    run(go())
    s.assert_ok()


# -- F07 ----------------------------------------------------------------------------------------
F07 = """
[P]
!> {"stderr_fill": 1048576}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"partial"}}}}
E> fatal: out of cheese
!> {"exit": 3}
"""
F07_AGAIN = f"""
{P_INIT}
{P_NEW}
C> {{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{{"sessionId":"s1","prompt":[{{"type":"text","text":"again"}}]}}}}
A> {_chunk("back")}
A> {{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"end_turn"}}}}
"""


def test_F07_agent_dies_mid_turn_after_flooding_stderr(tmp_path):
    from escouade_nb.widgets import AgentView

    s = Script(tmp_path, F07, F07_AGAIN)

    async def go():
        agent = s.agent()
        try:
            view = AgentView(agent)
            await agent.ready()
            first_pid = agent.pid
            turn = agent.send("go")
            with pytest.raises(AgentExited) as err:
                await asyncio.wait_for(turn.wait(), 20)
            failed_at = time.time()
            exited_at = s.entries("out")[-1]["t"]  # "partial", written just before the exit
            assert failed_at - exited_at < 2.0
            assert err.value.code == 3
            tail = err.value.stderr_tail
            assert tail.endswith("fatal: out of cheese") and len(tail.encode()) <= 64 * 1024
            assert agent.stderr.total > 1 << 20
            assert turn.text == "partial" and turn.status == "failed"
            await asyncio.sleep(0.1)
            shown = repr(view)
            assert "exited" in shown and "partial" in shown and "Agent exited with code 3" in shown
            assert "fatal: out of cheese" in shown
            assert agent.status == "exited" and not alive(first_pid)
            # a new process, a new session: no dead connection reused
            await agent.restart()
            assert agent.pid != first_pid and agent.session_id == "s1"
            again = await agent.send("again")
            assert again.stop_reason == "end_turn" and again.text == "back"
        finally:
            await agent.close()

    run(go())
    statuses = s.statuses()
    assert [(x["run"], x["status"]) for x in statuses] == [(0, "ok"), (1, "ok")]


# -- F08 ----------------------------------------------------------------------------------------
F08 = """
[P]
A> {"jsonrpc":"2.0","id":110,"method":"fs/write_text_file","params":{"sessionId":"s1","path":"$WS/../escape.txt","content":"x"}}
C> {"jsonrpc":"2.0","id":110,"error":{"code":-32602},"result":"$ABSENT"}
A> {"jsonrpc":"2.0","id":111,"method":"fs/write_text_file","params":{"sessionId":"s1","path":"$WS-evil/pwn.txt","content":"x"}}
C> {"jsonrpc":"2.0","id":111,"error":{"code":-32602},"result":"$ABSENT"}
A> {"jsonrpc":"2.0","id":112,"method":"fs/write_text_file","params":{"sessionId":"s1","path":"$WS/link/pwn.txt","content":"x"}}
C> {"jsonrpc":"2.0","id":112,"error":{"code":-32602},"result":"$ABSENT"}
A> {"jsonrpc":"2.0","id":113,"method":"fs/write_text_file","params":{"sessionId":"s1","path":"sub/ok.txt","content":"fine\\n"}}
C> {"jsonrpc":"2.0","id":113,"result":"$ANY","error":"$ABSENT"}
A> {"jsonrpc":"2.0","id":114,"method":"fs/read_text_file","params":{"sessionId":"s1","path":"$OUT/secret.txt"}}
C> {"jsonrpc":"2.0","id":114,"error":{"code":-32602},"result":"$ABSENT"}
A> {"jsonrpc":"2.0","id":115,"method":"fs/write_text_file","params":{"sessionId":"nope","path":"$WS/a.txt","content":"x"}}
C> {"jsonrpc":"2.0","id":115,"error":"$ANY","result":"$ABSENT"}
A> {"jsonrpc":"2.0","id":116,"method":"fs/write_text_file","params":{"sessionId":"s1","path":"../ws-evil/rel.txt","content":"x"}}
C> {"jsonrpc":"2.0","id":116,"error":{"code":-32602},"result":"$ABSENT"}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
"""


def test_F08_fs_writes_are_fenced_to_the_private_project(tmp_path):
    """A private project's folder is a fence: ``..``, a sibling prefix, a symlink out,
    a read outside, another session — refused with an error and no side effect; a
    relative path inside is resolved against the session folder and written."""
    from escouade_nb.manifest.project import Project

    ws = tmp_path / "ws"
    out = tmp_path / "out"
    out.mkdir()
    (out / "secret.txt").write_text("secret\n")
    ws.mkdir()
    (ws / "link").symlink_to(out)
    (tmp_path / "ws-evil").mkdir()
    s = Script(tmp_path, F08, variables={"OUT": str(out)})

    async def go():
        agent = s.agent()
        agent.project = Project.for_folder(ws, private=True)  # as Squad.start(..., private=True) does
        try:
            result = await agent.send("go")
            assert result.stop_reason == "end_turn"
        finally:
            await agent.close()

    run(go())
    s.assert_ok()
    assert not (tmp_path / "escape.txt").exists()
    assert not (tmp_path / "ws-evil" / "pwn.txt").exists() and not (tmp_path / "ws-evil" / "rel.txt").exists()
    assert not (out / "pwn.txt").exists()
    assert not (ws / "a.txt").exists()
    assert (ws / "sub" / "ok.txt").read_bytes() == b"fine\n"
    for rpc_id in range(110, 117):  # exactly one answer each
        assert len(responses_to(s.received(), rpc_id)) == 1, rpc_id


# -- F09 ----------------------------------------------------------------------------------------
F09 = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false,"promptCapabilities":{"image":false,"audio":false,"embeddedContext":false}},"authMethods":[]}}
C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}
C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"go"}]}}
A> {"jsonrpc":"2.0","id":130,"method":"terminal/create","params":{"sessionId":"s1","command":"$PYTHON","args":["-c","import sys; sys.stdout.buffer.write(('é'*3000+'END').encode()); sys.exit(7)"],"env":[],"cwd":"$WS","outputByteLimit":1000}}
!> {"expect": {"jsonrpc":"2.0","id":130,"result":{"terminalId":"$ANY"}}, "capture": {"T1": "result.terminalId"}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"r1","title":"Run the script","kind":"execute","status":"in_progress","content":[{"type":"terminal","terminalId":"$T1"}]}}}
A> {"jsonrpc":"2.0","id":131,"method":"terminal/wait_for_exit","params":{"sessionId":"s1","terminalId":"$T1"}}
C> {"jsonrpc":"2.0","id":131,"result":{"exitCode":7}}
A> {"jsonrpc":"2.0","id":132,"method":"terminal/output","params":{"sessionId":"s1","terminalId":"$T1"}}
C> {"jsonrpc":"2.0","id":132,"result":{"truncated":true,"exitStatus":{"exitCode":7}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call_update","toolCallId":"r1","status":"failed"}}}
A> {"jsonrpc":"2.0","id":133,"method":"terminal/create","params":{"sessionId":"s1","command":"sleep","args":["30"],"cwd":"$WS"}}
!> {"expect": {"jsonrpc":"2.0","id":133,"result":{"terminalId":"$ANY"}}, "capture": {"T2": "result.terminalId"}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"r2","title":"sleep 30","kind":"execute","status":"in_progress","content":[{"type":"terminal","terminalId":"$T2"}]}}}
A> {"jsonrpc":"2.0","id":134,"method":"terminal/kill","params":{"sessionId":"s1","terminalId":"$T2"}}
C> {"jsonrpc":"2.0","id":134,"result":"$ANY"}
A> {"jsonrpc":"2.0","id":135,"method":"terminal/wait_for_exit","params":{"sessionId":"s1","terminalId":"$T2"}}
C> {"jsonrpc":"2.0","id":135,"result":"$ANY"}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call_update","toolCallId":"r2","status":"failed"}}}
A> {"jsonrpc":"2.0","id":136,"method":"terminal/release","params":{"sessionId":"s1","terminalId":"$T1"}}
C> {"jsonrpc":"2.0","id":136,"result":"$ANY"}
A> {"jsonrpc":"2.0","id":137,"method":"terminal/output","params":{"sessionId":"s1","terminalId":"$T1"}}
C> {"jsonrpc":"2.0","id":137,"error":"$ANY","result":"$ABSENT"}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
"""


def test_F09_terminal_output_truncation_and_exit_status(tmp_path):
    from escouade_nb.widgets import AgentView

    s = Script(tmp_path, F09, variables={"PYTHON": sys.executable})

    async def go():
        agent = s.agent()
        try:
            view = AgentView(agent)
            result = await agent.send("go")
            assert result.stop_reason == "end_turn"
            terminals = agent.client.terminals
            sleeper = next(t for t in terminals.terminals if t.command == "sleep")
            assert not alive(sleeper.pid)
            assert sleeper.output_byte_limit <= 1 << 20  # the client's own ceiling when none is asked
            # the tool cards that embed the terminals show how they ended
            calls = agent.conversation.tool_calls
            await asyncio.sleep(0.1)
            drawn = {key: html for key, html, _meta in view.state()["items"]}
            first = drawn[view.feed.key(calls["r1"])]
            assert "END" in first and re.search(r"exit(ed)?( with)?( code)?:? 7\b", first, re.I), first
            second = drawn[view.feed.key(calls["r2"])]
            assert re.search(r"killed by SIG(TERM|KILL)", second), second
        finally:
            await agent.close()
        assert not alive(sleeper.pid)

    run(go())
    s.assert_ok()
    sent = s.received()
    (waited,) = responses_to(sent, 131)
    assert waited["result"].get("exitCode") == 7 and waited["result"].get("signal") is None
    (output,) = responses_to(sent, 132)
    text = output["result"]["output"]
    assert text == "é" * 498 + "END" and len(text.encode()) == 999
    assert output["result"]["truncated"] is True
    assert output["result"]["exitStatus"].get("exitCode") == 7
    (killed,) = responses_to(sent, 135)
    assert killed["result"].get("exitCode") is None and killed["result"].get("signal") in ("SIGKILL", "SIGTERM")
    (gone,) = responses_to(sent, 137)
    assert "error" in gone


# -- F10 ----------------------------------------------------------------------------------------
F10 = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false,"promptCapabilities":{"image":false,"audio":false,"embeddedContext":false}},"authMethods":[]}}
C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1","modes":{"currentModeId":"ask","availableModes":[{"id":"ask","name":"Ask"},{"id":"code","name":"Code"},{"id":"plan","name":"Plan"}]}}}
-- the user picks "Code" in the mode dropdown
C> {"jsonrpc":"2.0","id":2,"method":"session/set_mode","params":{"sessionId":"s1","modeId":"code"}}
!> {"sleep": 0.2}
A> {"jsonrpc":"2.0","id":2,"result":{}}
C> {"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"go"}]}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"current_mode_update","currentModeId":"plan"}}}
A> {"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}
-- the user picks "Ask"; this agent refuses
C> {"jsonrpc":"2.0","id":4,"method":"session/set_mode","params":{"sessionId":"s1","modeId":"ask"}}
A> {"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"Invalid mode"}}
!> {"quiet": 0.3}
"""


def test_F10_mode_switch_is_reflected(tmp_path):
    from escouade_nb.widgets import AgentView

    s = Script(tmp_path, F10)

    async def go():
        agent = s.agent()
        try:
            view = AgentView(agent)
            await agent.ready()
            conv = agent.conversation
            def dropdown() -> dict | None:  # the menu the view's head shows
                return next((c for c in view.head()["controls"] if c["key"] == "agent_mode"), None)
            await until(lambda: dropdown() is not None, 2, "the mode dropdown")
            # exactly the modes the agent advertised, no invented "default"
            assert [value for _, value in dropdown()["options"]] == ["ask", "code", "plan"]
            assert [label for label, _ in dropdown()["options"]] == ["Ask", "Code", "Plan"]
            assert dropdown()["value"] == "ask" and not dropdown()["disabled"]
            view.act({"k": "act", "act": "set", "key": "agent_mode", "value": "code"})  # the user picks Code
            await until(lambda: any(m.get("method") == "session/set_mode" for m in s.received()), 2, "set_mode")
            assert conv.current_mode_id == "code"  # shown at once
            await until(lambda: len(s.entries("out")) >= 3, 2, "the set_mode answer")  # init, new, set_mode
            await asyncio.sleep(0.1)
            assert conv.current_mode_id == "code" and dropdown()["value"] == "code"
            assert not [i for i in conv.items if isinstance(i, Notice)]  # no timeout, no error
            result = await agent.send("go")
            assert result.stop_reason == "end_turn"
            await asyncio.sleep(0.1)
            assert conv.current_mode_id == "plan" and dropdown()["value"] == "plan"  # the agent's own switch
            view.act({"k": "act", "act": "set", "key": "agent_mode", "value": "ask"})  # refused by this agent
            await until(lambda: any(isinstance(i, Notice) for i in conv.items), 2, "the refusal")
            await asyncio.sleep(0.1)
            assert conv.current_mode_id == "plan" and dropdown()["value"] == "plan"
            (notice,) = [i for i in conv.items if isinstance(i, Notice)]
            assert "ask" in notice.text and "Invalid mode" in notice.text
            await asyncio.sleep(0.3)
        finally:
            await agent.close()
        set_modes = [m for m in s.received() if m.get("method") == "session/set_mode"]
        assert [m["params"]["modeId"] for m in set_modes] == ["code", "ask"]  # no echo of the agent's switch

    run(go())
    s.assert_ok()


# -- F11 ----------------------------------------------------------------------------------------
F11_INIT = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{},"authMethods":[{"id":"api-key","name":"Use API key","description":"Reads a key from the environment"},{"id":"browser","name":"Log in with browser","description":null}]}}
C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
A> {"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Authentication required"}}
-- the UI shows both methods; the test picks "api-key"
C> {"jsonrpc":"2.0","id":2,"method":"authenticate","params":{"methodId":"api-key"}}
A> {"jsonrpc":"2.0","id":2,"result":{}}
C> {"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
"""
F11 = F11_INIT + """
A> {"jsonrpc":"2.0","id":3,"result":{"sessionId":"s1"}}
C> {"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"go"}]}}
A> {"jsonrpc":"2.0","id":4,"error":{"code":-32000,"message":"Authentication required"}}
-- the chooser is shown again; the user signs in with the browser, then sends the kept prompt again
C> {"jsonrpc":"2.0","id":5,"method":"authenticate","params":{"methodId":"browser"}}
A> {"jsonrpc":"2.0","id":5,"result":{}}
C> {"jsonrpc":"2.0","id":6,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"go"}]}}
A> {"jsonrpc":"2.0","id":6,"error":{"code":-32603,"message":"Internal error","data":{"reason":"usage limit reached"}}}
!> {"quiet": 0.3}
"""
F11_REFUSED = F11_INIT + """
A> {"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"Authentication required"}}
-- no automatic retry: the user tries the other method, which fails
C> {"jsonrpc":"2.0","id":4,"method":"authenticate","params":{"methodId":"browser"}}
A> {"jsonrpc":"2.0","id":4,"error":{"code":-32001,"message":"Browser login failed"}}
!> {"quiet": 0.5}
"""


def test_F11_auth_required_leads_to_authenticate_and_one_retry(tmp_path):
    from escouade_nb.widgets import AgentView

    s = Script(tmp_path, F11)

    async def go():
        agent = s.agent()
        try:
            view = AgentView(agent)
            with pytest.raises(AuthRequired) as err:
                await agent.ready()
            assert [m["id"] for m in err.value.methods] == ["api-key", "browser"]
            assert [m["id"] for m in agent.auth_methods] == ["api-key", "browser"]
            assert agent.status == "sign-in"
            await asyncio.sleep(0.1)
            assert [m["label"] for m in view.head()["sign_in"]["methods"]] == ["Sign in: Use API key",
                                                                                "Sign in: Log in with browser"]
            await agent.authenticate("api-key")  # session/new is retried once
            assert agent.session_id == "s1" and agent.status == "idle"
            await asyncio.sleep(0.1)
            assert view.head()["sign_in"] is None
            # -32000 for a prompt: the text stays in the input, the chooser is shown
            view.act({"k": "act", "act": "send", "text": "go"})
            assert view.prompt_value == ""  # sent: the box empties
            await until(lambda: agent.status == "sign-in", 5, "the sign-in state")
            await asyncio.sleep(0.1)
            assert view.prompt_value == "go" and view.state()["prompt"] == "go"
            assert len(view.head()["sign_in"]["methods"]) == 2
            await agent.authenticate("browser")  # the session goes on: no new one
            assert agent.session_id == "s1" and agent.status == "idle"
            view.act({"k": "act", "act": "send", "text": view.prompt_value})
            await until(lambda: any(isinstance(i, Notice) and i.level == "error" for i in agent.conversation.items),
                        5, "the usage-limit error")
            await asyncio.sleep(0.1)
            # -32603 with data is an error, not a sign-in prompt
            assert agent.status == "idle" and view.head()["sign_in"] is None
            (error,) = [i for i in agent.conversation.items if isinstance(i, Notice) and i.level == "error"]
            assert "usage limit reached" in error.detail
            await asyncio.sleep(0.3)
        finally:
            await agent.close()

    run(go())
    s.assert_ok()
    methods = [m.get("method") for m in s.received()]
    assert methods == ["initialize", "session/new", "authenticate", "session/new", "session/prompt",
                       "authenticate", "session/prompt"]


def test_F11_no_sign_in_loop(tmp_path):
    s = Script(tmp_path, F11_REFUSED)

    async def go():
        agent = s.agent()
        try:
            with pytest.raises(AuthRequired):
                await agent.ready()
            with pytest.raises(AuthRequired) as again:  # -32000 again: stop, naming the methods
                await agent.authenticate("api-key")
            assert "api-key" in str(again.value) and "browser" in str(again.value)
            with pytest.raises(AgentError) as failed:  # authenticate itself fails
                await agent.authenticate("browser")
            assert "Browser login failed" in str(failed.value)
            assert "api-key" in str(failed.value) and "browser" in str(failed.value)
            assert agent.session_id is None
            await asyncio.sleep(0.6)
        finally:
            await agent.close()

    run(go())
    s.assert_ok()
    assert [m.get("method") for m in s.received()].count("session/new") == 2


# -- F12 ----------------------------------------------------------------------------------------
F12 = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":%s,"agentCapabilities":{},"authMethods":[]}}
-- the agent waits; any further line fails; it expects stdin's end or its end
!> {"wait_eof": 5}
"""


@pytest.mark.parametrize("version", ["2", '"1.0.0"'])
def test_F12_protocol_version_is_checked(tmp_path, version):
    from escouade_nb.widgets import AgentView

    s = Script(tmp_path, F12 % version)

    async def go():
        agent = s.agent()
        try:
            view = AgentView(agent)
            with pytest.raises(AgentError) as err:
                await agent.ready()
            message = str(err.value)
            assert json.loads(version) in (2, "1.0.0")
            assert f"version {json.loads(version)!r}" in message or f"version {json.loads(version)}" in message
            assert "[1]" in message
            pid = agent.pid
            await until(lambda: not alive(pid), 5, "the agent's end")
            assert agent.status == "failed"
            await asyncio.sleep(0.1)
            assert "[1]" in repr(view)  # the notebook shows it
        finally:
            await agent.close()

    run(go())
    assert not [x for x in s.statuses() if x["status"] != "ok"]
    sent = s.received()
    assert [m.get("method") for m in sent] == ["initialize"]  # nothing else, no session/new
    assert sent[0]["params"]["protocolVersion"] == 1


# -- F13 ----------------------------------------------------------------------------------------
F13 = """
[P]
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"working"}}}}
-- the test submits "second" while id 2 is open; a session/prompt now fails the run (the forbid rule)
!> {"sleep": 1.0}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
C> {"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"second"}]}}
A> {"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}
"""
NO_OVERLAP = [{"method": "session/prompt", "while_open": "session/prompt"}]


def test_F13_second_prompt_is_queued_not_sent(tmp_path):
    from escouade_nb.widgets.agent_view import TurnView

    s = Script(tmp_path, F13, forbid=NO_OVERLAP)

    async def go():
        agent = s.agent()
        try:
            first = agent.send("go")
            await until(lambda: "working" in first.text, 10, "the first turn")
            second = agent.send("second")  # submitted while id 2 is open
            await asyncio.sleep(0.3)
            assert second.status == "queued" and repr(TurnView(second)).endswith("turn queued")
            assert [m.get("method") for m in s.received()].count("session/prompt") == 1
            assert (await first).stop_reason == "end_turn"
            assert (await second).stop_reason == "end_turn"
        finally:
            await agent.close()

    run(go())
    s.assert_ok()
    answered = next(e["t"] for e in s.entries("out") if '"stopReason":"end_turn"' in e["line"])
    sent_second = next(e["t"] for e in s.entries() if '"second"' in e["line"])
    assert sent_second >= answered


F13_REFUSED = """
[P]
A> {"jsonrpc":"2.0","id":2,"error":{"code":-32600,"message":"Prompt already in progress"}}
C> {"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"third"}]}}
A> {"jsonrpc":"2.0","id":3,"result":{"stopReason":"refusal"}}
!> {"quiet": 0.3}
"""


def test_F13_a_refused_prompt_keeps_the_text_and_says_why(tmp_path):
    s = Script(tmp_path, F13_REFUSED, forbid=NO_OVERLAP)

    async def go():
        agent = s.agent()
        try:
            turn = agent.send("go")
            with pytest.raises(AgentError) as err:
                await turn
            assert "Prompt already in progress" in str(err.value)
            assert turn.prompt == [{"type": "text", "text": "go"}]
            refused = await agent.send("third")
            assert refused.stop_reason == "refusal"
            text = render_items(agent.conversation.items)
            lines = text.splitlines()
            assert lines[0] == "you: go" and "Prompt already in progress" in lines[1]
            third = lines.index("you: third")
            assert "refus" in " ".join(lines[third + 1:]).lower()
            await asyncio.sleep(0.3)
        finally:
            await agent.close()

    run(go())
    s.assert_ok()


# -- F14 ----------------------------------------------------------------------------------------
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
F14_NO = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":%s,"authMethods":[]}}
C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}
C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"describe"},{"type":"resource_link","uri":"$URI","name":"$NAME","mimeType":"text/csv"}]}}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
"""
F14_YES = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"promptCapabilities":{"image":true,"embeddedContext":true}},"authMethods":[]}}
C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}
C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"describe"},{"type":"image","mimeType":"image/png","data":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="},{"type":"resource","resource":{"uri":"$URI","mimeType":"text/csv","text":"a,b\\n1,2\\n"}}]}}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
"""


@pytest.mark.parametrize("caps, csv", [
    ('{"promptCapabilities":{"image":false,"audio":false,"embeddedContext":false}}', "data.csv"),
    ("{}", "my data.csv"),  # no promptCapabilities at all: the same as all false
])
def test_F14_prompt_content_is_gated_on_prompt_capabilities(tmp_path, caps, csv):
    from escouade_nb.widgets import AgentView

    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    (ws / "plot.png").write_bytes(PNG)
    (ws / csv).write_text("a,b\n1,2\n")
    uri = (ws / csv).as_uri()
    assert ("%20" in uri) == (" " in csv)
    s = Script(tmp_path, F14_NO % caps, variables={"URI": uri, "NAME": csv})

    async def go():
        agent = s.agent()
        try:
            view = AgentView(agent)
            result = await agent.send("describe", attach=[ws / "plot.png", csv])
            assert result.stop_reason == "end_turn"
            await asyncio.sleep(0.1)
            notices = [i for i in agent.conversation.items if isinstance(i, Notice)]
            assert len(notices) == 1 and "image" in notices[0].text and "not sent" in notices[0].text
            assert "image was not sent" in repr(view)
        finally:
            await agent.close()

    run(go())
    s.assert_ok()
    (prompt,) = [m for m in s.received() if m.get("method") == "session/prompt"]
    blocks = prompt["params"]["prompt"]
    assert [b["type"] for b in blocks] == ["text", "resource_link"]
    assert blocks[1]["uri"].startswith("file:///")


def test_F14_images_and_embedded_files_when_the_agent_takes_them(tmp_path):
    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    (ws / "plot.png").write_bytes(PNG)
    (ws / "data.csv").write_text("a,b\n1,2\n")
    s = Script(tmp_path, F14_YES, variables={"URI": (ws / "data.csv").as_uri()})

    async def go():
        agent = s.agent()
        try:
            result = await agent.send("describe", attach=["plot.png", ws / "data.csv"])
            assert result.stop_reason == "end_turn"
            assert not [i for i in agent.conversation.items if isinstance(i, Notice)]
        finally:
            await agent.close()

    run(go())
    s.assert_ok()
    (prompt,) = [m for m in s.received() if m.get("method") == "session/prompt"]
    image, resource = prompt["params"]["prompt"][1:]
    assert base64.b64decode(image["data"]) == PNG and image["mimeType"] == "image/png"
    assert resource["resource"]["text"] == (ws / "data.csv").read_text()


# -- F15 ----------------------------------------------------------------------------------------
F15 = """
[P]
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Done <img src=x onerror=\\"alert(1)\\"> see [docs](javascript:alert(2)) and [ok](https://example.org)\\n\\n```html\\n<script>alert(3)</script>\\n```\\n\\n**bold** item"}}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"h1","title":"<b onmouseover=alert(4)>Read</b> a.py","kind":"read","status":"completed"}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"plan","entries":[{"content":"<iframe src=//example.invalid></iframe>step one","priority":"high","status":"pending"}]}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"plan","entries":[{"content":"step two <svg onload=alert(5)>","priority":"low","status":"in_progress"}]}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"h2","title":"Edit <x.py>","kind":"edit","status":"completed","rawInput":{"path":"<img src=y onerror=alert(6)>"},"content":[{"type":"diff","path":"$WS/<script>.py","oldText":null,"newText":"<script>alert(7)</script>\\n"},{"type":"content","content":{"type":"text","text":"<iframe srcdoc=x></iframe>"}}]}}}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
"""


class _Markup(html.parser.HTMLParser):
    """The live markup of an HTML string: its tags and their attributes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))

    handle_startendtag = handle_starttag


def test_F15_agent_text_is_never_live_html(tmp_path):
    from escouade_nb.widgets import AgentView
    from escouade_nb.widgets.agent_view import TurnView

    s = Script(tmp_path, F15)

    async def go():
        agent = s.agent()
        try:
            view = AgentView(agent)
            sent = record(view)
            turn = agent.send("go")
            turn_view = TurnView(turn)
            turn_sent = record(turn_view)
            await turn
            await asyncio.sleep(0.5)  # the batches went (FLUSH_WAIT)
            assert sent and turn_sent
            # what the browser puts in the page: the items' HTML (snapshot and ops), the saved forms
            values = (html_shown(view, sent) + html_shown(turn_view, turn_sent)
                      + [view.static_body(), turn_view.static_body()])
        finally:
            await agent.close()
        whole = "\n".join(values)
        for value in values:
            markup = _Markup()
            markup.feed(value)
            for tag, attrs in markup.tags:
                assert tag not in ("img", "script", "iframe", "svg", "object", "embed", "style"), value
                for name, val in attrs:
                    assert not name.startswith("on"), value
                    if name in ("href", "src"):
                        assert not (val or "").strip().lower().startswith(("javascript:", "data:")), value
            for raw in ("<img", "<script", "<iframe", "<svg"):
                assert raw not in value.lower()
        # the good parts still render: a link, bold, the fenced block as escaped code
        assert re.search(r'<a href="https://example\.org"( [a-z]+="[^"]*")*>ok</a>', whole)
        assert "<strong>bold</strong>" in whole
        highlighted = re.sub(r"</?span[^>]*>", "", whole)  # the code block is highlighted: spans around tokens
        assert "&lt;script&gt;alert(3)&lt;/script&gt;" in highlighted and "language-html" in whole
        assert "javascript:" not in re.sub(r"\[docs\]\(javascript:alert\(2\)\)", "", whole)
        # the tool title as plain text
        assert "&lt;b onmouseover=alert(4)&gt;Read&lt;/b&gt; a.py" in whole
        # the plan replaced by the second update, escaped
        assert "step two &lt;svg onload=alert(5)&gt;" in whole and "step one" not in whole
        assert "&lt;script&gt;alert(7)&lt;/script&gt;" in whole

    run(go())
    s.assert_ok()


F11_TERMINAL = """
C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}}
A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{},"authMethods":[{"id":"login","name":"Log in from a terminal","type":"terminal","args":["login"],"env":{"AGENT_LOGIN":"1"}}]}}
C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}
A> {"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Authentication required"}}
-- a terminal-type method is not called: the client runs the login command itself; nothing is sent
!> {"quiet": 0.5}
"""


def test_F11_terminal_sign_in_shows_the_login_command(tmp_path):
    """The login command runs in a client terminal (shown); an empty answer makes it
    fail (exit 3): said, and no restart (the whole success path: test_acp_2026.py)."""
    s = Script(tmp_path, F11_TERMINAL)

    async def go():
        agent = s.agent()
        try:
            with pytest.raises(AuthRequired):
                await agent.ready()
            signing = asyncio.ensure_future(agent.authenticate("login"))
            await until(lambda: agent.sign_in_job is not None and agent.sign_in_job.running, 10, "the sign-in")
            await agent.sign_in_input("")
            with pytest.raises(AgentError, match="exited with code 3"):
                await signing
            text = render_items(agent.conversation.items)
            assert f"AGENT_LOGIN=1 {sys.executable} {SCRIPT_AGENT} {s.scenario} login" in text
            assert "[error] Sign-in 'Log in from a terminal' failed (exit code 3)" in text
            await asyncio.sleep(0.6)
        finally:
            await agent.close()

    run(go())
    s.assert_ok()
    assert [m.get("method") for m in s.received()] == ["initialize", "session/new"]
