"""Drive ``escouade-fake-agent`` as a real subprocess through the SDK's client side."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
)

from acp_clients import AGENT_CMD, RecordingClient
from deadlines import run, until

from escouade_nb.tools.fake_agent import AGENT_NAME, AGENT_VERSION, find_file_name

ROOT = Path(__file__).resolve().parents[2]

EXPECTED_OPTIONS = [
    ("allow-once", "Allow once", "allow_once"),
    ("allow-always", "Always allow", "allow_always"),
    ("reject-once", "Reject", "reject_once"),
]


@asynccontextmanager
async def agent_session(client: RecordingClient, cwd: Path, *, fs: bool = True, stderr: Any = subprocess.DEVNULL):
    wire: list[dict[str, Any]] = []
    async with spawn_agent_process(
        client,
        *AGENT_CMD,
        cwd=cwd,
        transport_kwargs={"stderr": stderr},
        observers=[lambda ev: wire.append(ev.message)],
    ) as (conn, proc):
        caps = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs))
        init = await asyncio.wait_for(
            conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=caps,
                client_info=Implementation(name="test", version="0"),
            ),
            60,  # a start on a loaded machine
        )
        session = await conn.new_session(cwd=str(cwd))
        yield conn, proc, init, session.session_id, wire


def prompt_of(text: str) -> list[Any]:
    return [text_block(text)]


def assert_options(options: list[Any]) -> None:
    assert [(o.option_id, o.name, o.kind) for o in options] == EXPECTED_OPTIONS


# ---------------------------------------------------------------------------


def test_version_flag() -> None:
    out = subprocess.run([*AGENT_CMD, "--version"], capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    assert out.returncode == 0
    assert out.stdout == f"{AGENT_NAME} {AGENT_VERSION}\n" == "escouade-fake-agent 0.1.0\n"


def test_manifest() -> None:
    manifest = json.loads((ROOT / "plugins/fake/escouade-plugin.json").read_text(encoding="utf-8"))
    assert manifest["id"] == "dev.escouade_nb.fake"
    assert manifest["name"] == "Fake agent"
    assert "en" in manifest["description"]
    (harness,) = manifest["contributes"]["harnesses"]
    assert harness["id"] == "fake" and harness["speaker"] == "Fake"
    assert harness["locate"]["names"] == ["escouade-fake-agent"]
    assert harness["versionArgs"] == ["--version"]
    assert harness["tested"] == {"oldest": AGENT_VERSION, "newest": AGENT_VERSION}
    assert harness["acp"]["args"] == [] and harness["acp"]["fs"] is True
    assert harness["acp"]["modes"] == {"default": "ask", "acceptEdits": "accept-edits", "bypassPermissions": "yolo"}
    assert harness["acp"]["readOnlyMode"] == "read-only" and harness["acp"]["modelOption"] == "model"


def test_find_file_name() -> None:
    assert find_file_name("please edit notes.txt now") == "notes.txt"
    assert find_file_name("write `src/app.py`.") == "src/app.py"
    assert find_file_name("edit ./docs/README.md, please") == "./docs/README.md"
    assert find_file_name("edit something") == "notes.txt"


def test_initialize_sessions_and_greeting(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient()
        async with agent_session(client, tmp_path) as (conn, _proc, init, sid, wire):
            assert init.protocol_version == 1
            assert init.agent_info.name == "escouade-fake-agent" and init.agent_info.version == "0.1.0"
            raw_init = next(m for m in wire if m.get("id") == 0 and "result" in m)["result"]
            assert raw_init["protocolVersion"] == 1
            assert raw_init["agentCapabilities"]["loadSession"] is False
            assert raw_init["authMethods"] == []
            assert sid == "fake-session-1"
            assert (await conn.new_session(cwd=str(tmp_path))).session_id == "fake-session-2"

            resp = await conn.prompt(session_id=sid, prompt=prompt_of("Hi there"))
            assert resp.stop_reason == "end_turn"
            chunks = client.of(AgentMessageChunk)
            assert len(chunks) == 8
            assert len({c.message_id for c in chunks}) == 1 and chunks[0].message_id
            assert client.text() == (
                "Hello! I am the **fake** agent.\n\nYou said: Hi there\n\n"
                "Try `edit notes.txt`, `run npm test`, `plan`, `think`, `slow`, `crash`."
            )
            # the turn's updates (the slash commands are advertised on their own time, ~50 ms after a
            # session starts: on a loaded machine they may land among the turn's)
            raw = [m for m in wire if m.get("method") == "session/update" and m["params"]["sessionId"] == sid
                   and m["params"]["update"]["sessionUpdate"] != "available_commands_update"]
            assert all(m["params"]["update"]["messageId"] == chunks[0].message_id for m in raw[:-1])
            # every turn ends with a deterministic usage report
            assert raw[-1]["params"]["update"] == {"sessionUpdate": "usage_update", "used": 1200, "size": 200000,
                                                   "cost": {"amount": 0.004, "currency": "USD"}}

    run(main())


def test_chunks_n(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient()
        async with agent_session(client, tmp_path) as (conn, _p, _i, sid, wire):
            resp = await conn.prompt(session_id=sid, prompt=prompt_of("chunks 137"))
            assert resp.stop_reason == "end_turn"
            chunks = client.of(AgentMessageChunk)
            assert len(chunks) == 137 == len(client.updates) - 1  # + the usage report
            assert all(len(c.content.text) == 40 for c in chunks)
            assert len({c.message_id for c in chunks}) == 1
            assert sum(1 for m in wire if m.get("method") == "session/update"
                       and m["params"]["update"].get("sessionUpdate") != "available_commands_update") == 138

    run(main())


def test_available_commands_after_session_new(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient()
        async with agent_session(client, tmp_path) as (_conn, _p, _i, _sid, _w):
            await until(lambda: client.commands, what="the available commands")
            assert [[(c.name, c.description) for c in u.available_commands] for u in client.commands] == [
                [("plan", "Present a plan to approve"), ("test", "Run the tests")]]

    run(main())


def test_think(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient()
        async with agent_session(client, tmp_path) as (conn, _p, _i, sid, _w):
            resp = await conn.prompt(session_id=sid, prompt=prompt_of("Think hard"))
            assert resp.stop_reason == "end_turn"
            thoughts = client.of(AgentThoughtChunk)
            assert len(thoughts) == 2
            assert "".join(t.content.text for t in thoughts) == "Let me think about this step by step."
            assert isinstance(client.updates[0], AgentThoughtChunk)
            assert client.text()

    run(main())


def test_plan(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient()
        async with agent_session(client, tmp_path) as (conn, _p, _i, sid, _w):
            resp = await conn.prompt(session_id=sid, prompt=prompt_of("make a PLAN"))
            assert resp.stop_reason == "end_turn"
            plans = client.of(AgentPlanUpdate)
            assert len(plans) == 3
            assert all(len(p.entries) == 3 for p in plans)
            assert [e.priority for e in plans[0].entries] == ["high", "medium", "low"]
            assert [e.status for e in plans[0].entries] == ["pending"] * 3
            assert plans[1].entries[0].status == "in_progress"
            assert [e.status for e in plans[2].entries] == ["completed"] * 3
            kinds = [type(u).__name__ for u in client.updates]
            assert kinds[0] == "AgentPlanUpdate" and "AgentMessageChunk" in kinds[1 : kinds.index("AgentPlanUpdate", 1)]

    run(main())


def test_run_allowed_is_simulated(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient("allow-once")
        async with agent_session(client, tmp_path) as (conn, _p, _i, sid, _w):
            resp = await conn.prompt(session_id=sid, prompt=prompt_of("run touch sentinel.txt"))
            assert resp.stop_reason == "end_turn"
            (start,) = client.of(ToolCallStart)
            assert (start.tool_call_id, start.kind, start.status, start.title) == (
                "call-1",
                "execute",
                "pending",
                "Run touch sentinel.txt",
            )
            assert start.raw_input == {"command": "touch sentinel.txt"}
            (tool_call, options) = client.permissions[0]
            assert tool_call.tool_call_id == "call-1" and tool_call.kind == "execute"
            assert tool_call.title == "Run touch sentinel.txt"
            assert tool_call.raw_input == {"command": "touch sentinel.txt"}
            assert_options(options)
            progress = client.of(ToolCallProgress)
            assert [p.status for p in progress] == ["in_progress", "completed"]
            assert progress[1].content[0].content.text == "(simulated) $ touch sentinel.txt\nok"
            assert client.text() == "Ran `touch sentinel.txt`."
            assert not (tmp_path / "sentinel.txt").exists()
            # a second tool call in the same session gets the next id
            await conn.prompt(session_id=sid, prompt=prompt_of("run npm test"))
            assert client.of(ToolCallStart)[1].tool_call_id == "call-2"

    run(main())


def test_run_rejected(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient("reject-once")
        async with agent_session(client, tmp_path) as (conn, _p, _i, sid, _w):
            resp = await conn.prompt(session_id=sid, prompt=prompt_of("run rm -rf build"))
            assert resp.stop_reason == "end_turn"
            assert_options(client.permissions[0][1])
            assert [p.status for p in client.of(ToolCallProgress)] == ["failed"]
            assert client.text() == "I did not run `rm -rf build`."

    run(main())


def test_edit_allowed_through_client_fs(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient("allow-always")
        target = tmp_path / "notes.txt"
        async with agent_session(client, tmp_path) as (conn, _p, _i, sid, _w):
            resp = await conn.prompt(session_id=sid, prompt=prompt_of("Please edit notes.txt"))
            assert resp.stop_reason == "end_turn"
            (start,) = client.of(ToolCallStart)
            assert (start.kind, start.status, start.title) == ("edit", "pending", "Edit notes.txt")
            assert [loc.path for loc in start.locations] == [str(target)]
            (diff,) = start.content
            assert (diff.type, diff.path, diff.old_text, diff.new_text) == (
                "diff",
                str(target),
                None,
                "Edited by the fake agent.\n",
            )
            assert start.raw_input == {"path": str(target), "content": "Edited by the fake agent.\n"}
            assert_options(client.permissions[0][1])
            assert client.reads == [str(target)]
            assert client.writes == [(str(target), "Edited by the fake agent.\n")]
            assert target.read_text() == "Edited by the fake agent.\n"
            (done,) = client.of(ToolCallProgress)
            assert done.status == "completed" and done.content[0].type == "diff"
            assert client.text() == "Edited notes.txt."

    run(main())


def test_edit_rejected_leaves_file(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient("reject-once")
        target = tmp_path / "todo.md"
        target.write_text("hello\n")
        async with agent_session(client, tmp_path) as (conn, _p, _i, sid, _w):
            resp = await conn.prompt(session_id=sid, prompt=prompt_of("write todo.md"))
            assert resp.stop_reason == "end_turn"
            (diff,) = client.of(ToolCallStart)[0].content
            assert diff.old_text == "hello\n" and diff.new_text == "hello\nEdited by the fake agent.\n"
            assert [p.status for p in client.of(ToolCallProgress)] == ["failed"]
            assert client.writes == []
            assert target.read_text() == "hello\n"
            assert client.text() == "I left todo.md alone."

    run(main())


def test_edit_without_fs_capability_writes_disk(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient("allow-once")
        target = tmp_path / "sub" / "a.py"
        target.parent.mkdir()
        target.write_text("x = 1\n")
        async with agent_session(client, tmp_path, fs=False) as (conn, _p, _i, sid, _w):
            resp = await conn.prompt(session_id=sid, prompt=prompt_of("edit sub/a.py"))
            assert resp.stop_reason == "end_turn"
            assert client.reads == [] and client.writes == []
            assert target.read_text() == "x = 1\nEdited by the fake agent.\n"
            assert client.text() == "Edited sub/a.py."

    run(main())


def test_edit_cancelled_during_permission(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient("wait")
        async with agent_session(client, tmp_path) as (conn, _p, _i, sid, _w):
            task = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=prompt_of("edit notes.txt")))
            await asyncio.wait_for(client.permission_asked.wait(), 60)
            await conn.cancel(session_id=sid)
            await asyncio.sleep(0.05)
            assert not task.done()  # the agent waits for the client's answer
            client.pending.set_result(RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled")))
            resp = await asyncio.wait_for(task, 60)
            assert resp.stop_reason == "cancelled"
            assert [p.status for p in client.of(ToolCallProgress)] == ["failed"]
            assert client.writes == []
            assert not (tmp_path / "notes.txt").exists()

    run(main())


def test_slow_cancel(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient()
        async with agent_session(client, tmp_path) as (conn, _p, _i, sid, _w):
            task = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=prompt_of("be slow")))
            while len(client.of(AgentMessageChunk)) < 3:
                await asyncio.sleep(0.02)
            t0 = time.monotonic()
            await conn.cancel(session_id=sid)
            resp = await asyncio.wait_for(task, 30)
            assert time.monotonic() - t0 < 2.5  # its 50 ticks take 5 s: it stopped at the cancel, not at its end
            assert resp.stop_reason == "cancelled"
            ticks = [c.content.text for c in client.of(AgentMessageChunk)]
            assert 3 <= len(ticks) < 10
            assert ticks[:3] == ["tick 1 ", "tick 2 ", "tick 3 "]
            # the session still works after a cancelled turn
            resp = await conn.prompt(session_id=sid, prompt=prompt_of("chunks 2"))
            assert resp.stop_reason == "end_turn"

    run(main())


def test_flood(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient()
        log = tmp_path / "stderr.log"
        with log.open("wb") as err:
            async with agent_session(client, tmp_path, stderr=err) as (conn, _p, _i, sid, _w):
                resp = await conn.prompt(session_id=sid, prompt=prompt_of("flood"))
                assert resp.stop_reason == "end_turn"
                assert client.text() == "Flooded stderr with 2 MiB."
        assert log.stat().st_size >= 2 * 1024 * 1024

    run(main())


def test_crash(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient()
        log = tmp_path / "stderr.log"
        with log.open("wb") as err:
            async with agent_session(client, tmp_path, stderr=err) as (conn, proc, _i, sid, _w):
                with pytest.raises((ConnectionError, RequestError)):
                    await asyncio.wait_for(conn.prompt(session_id=sid, prompt=prompt_of("crash now")), 60)
                assert await asyncio.wait_for(proc.wait(), 10) == 3
        chunks = client.of(AgentMessageChunk)
        assert len(chunks) == 2 and client.text() == "Working on it…"
        assert "fake agent: about to crash\n" in log.read_text(encoding="utf-8")

    run(main())


# -- terminals and client files (the scenarios; the client side is tested in test_terminals.py
#    and test_fs.py with escouade_nb's own client) -------------------------------------------


def test_terminal_requests_of_each_scenario() -> None:
    from escouade_nb.tools.fake_agent import FakeAgent

    req = FakeAgent._terminal_request
    assert req("args", "") == ("echo", ["hello", "from", "args"], None)
    assert req("args", "a b") == ("echo", ["a", "b"], None)
    assert req("line", "") == ("echo hello && echo world", None, None)
    assert req("line", "ls | wc -l") == ("ls | wc -l", None, None)
    command, args, limit = req("limit", "")
    assert (command, args[0], len(args), limit) == ("printf", "%sé\\n", 51, 17)
    assert req("kill", "") == ("sleep", ["30"], None)
    assert req("release", "")[1] is None and req("fail", "")[0] == "echo oops >&2; exit 3"


def test_terminal_scenarios_need_the_terminal_capability(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient()
        async with agent_session(client, tmp_path) as (conn, _p, _i, sid, wire):
            for prompt in ("terminal args", "Terminal LINE echo hi", "terminal kill"):
                resp = await conn.prompt(session_id=sid, prompt=prompt_of(prompt))
                assert resp.stop_reason == "end_turn"
            assert client.text() == "The client offers no terminal, so I cannot run commands." * 3
            assert not [m for m in wire if m.get("method", "").startswith("terminal/")]

    run(main())


def test_write_outside_sends_the_path_as_given(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient()
        target = tmp_path / "elsewhere" / "x.txt"
        async with agent_session(client, tmp_path) as (conn, _p, _i, sid, _w):
            resp = await conn.prompt(session_id=sid, prompt=prompt_of(f"please write outside `{target}`"))
            assert resp.stop_reason == "end_turn"
            assert client.writes == [(str(target), "Written outside by the fake agent.\n")]
            assert client.permissions == []
            (start,) = client.of(ToolCallStart)
            assert (start.kind, start.title, start.content[0].path) == ("edit", f"Write {target}", str(target))
            assert [p.status for p in client.of(ToolCallProgress)] == ["completed"]
            assert client.text() == f"Wrote {target}."

    run(main())


def test_encoding_scenarios_read_through_the_client(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient()
        (tmp_path / "dos.txt").write_bytes(b"a\r\nb\r\n")
        async with agent_session(client, tmp_path) as (conn, _p, _i, sid, _w):
            await conn.prompt(session_id=sid, prompt=prompt_of("CRLF dos.txt"))
            # this simple client reads with newline translation and writes what it is given:
            # the reply tells what each read saw
            assert client.reads == [str(tmp_path / "dos.txt")] * 2
            assert client.writes == [(str(tmp_path / "dos.txt"), "a\nb\nEdited by the fake agent.\n")]
            assert client.text() == ("Read dos.txt: 2 lines, LF. Wrote it back with a line added, sent with LF "
                                     "endings. Read it again: 3 lines, LF.")
            client.updates.clear()
            await conn.prompt(session_id=sid, prompt=prompt_of("latin1 dos.txt"))
            assert client.text().startswith("Read dos.txt (")

    run(main())


def test_earlier_keywords_still_win(tmp_path: Path) -> None:
    async def main() -> None:
        client = RecordingClient()
        async with agent_session(client, tmp_path) as (conn, _p, _i, sid, _w):
            # "write" without "outside" is still the edit scenario (behind a permission)
            await conn.prompt(session_id=sid, prompt=prompt_of("write todo.md"))
            assert len(client.permissions) == 1 and client.text() == "Edited todo.md."

    run(main())


def test_stream_paced(tmp_path: Path) -> None:
    """``stream N of W at R/s``: N prose chunks of W characters at R a second, paragraphs;
    ``stream code N at R/s``: one fenced python block of about N bytes in ~20-byte chunks."""
    async def main() -> None:
        client = RecordingClient()
        async with agent_session(client, tmp_path) as (conn, _p, _i, sid, _w):
            t0 = time.monotonic()
            resp = await conn.prompt(session_id=sid, prompt=prompt_of("stream 60 of 20 at 100/s"))
            elapsed = time.monotonic() - t0
            assert resp.stop_reason == "end_turn"
            chunks = [c.content.text for c in client.of(AgentMessageChunk)]
            assert len(chunks) == 60 and all(len(c) == 20 for c in chunks)
            assert 0.5 <= elapsed < 2.0  # 59 gaps of 10 ms
            text = "".join(chunks)
            assert " " in text and set(text) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ., \n")
            client.updates.clear()
            resp = await conn.prompt(session_id=sid, prompt=prompt_of("stream 40 of 25 at 2000/s"))
            assert "\n\n" in "".join(c.content.text for c in client.of(AgentMessageChunk))  # paragraphs
            client.updates.clear()
            resp = await conn.prompt(session_id=sid, prompt=prompt_of("stream code 2000 at 1000/s"))
            assert resp.stop_reason == "end_turn"
            parts = [c.content.text for c in client.of(AgentMessageChunk)]
            code = "".join(parts)
            assert code.startswith("```python\ndef ") and code.endswith("```\n") and 1900 <= len(code) <= 2000
            assert max(map(len, parts)) == 20 and len(parts) == -(-len(code) // 20)
            compile(code.split("\n", 1)[1].rsplit("```", 1)[0], "<stream code>", "exec")
            # honours cancel like ``slow``
            client.updates.clear()
            task = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=prompt_of("stream 1000 of 20 at 50/s")))
            while len(client.of(AgentMessageChunk)) < 3:
                await asyncio.sleep(0.02)
            await conn.cancel(session_id=sid)
            resp = await asyncio.wait_for(task, 30)
            assert resp.stop_reason == "cancelled" and len(client.of(AgentMessageChunk)) < 40  # of 50

    run(main())
