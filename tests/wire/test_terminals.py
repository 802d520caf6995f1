"""``escouade_nb.wire.terminals.TerminalManager``: ACP terminals on real processes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
import pytest
from acp import RequestError
from acp.schema import EnvVariable
from deadlines import run, until

from escouade_nb.wire.terminals import SHELL, Terminal, TerminalManager, command_argv

PY = sys.executable


def group_members(pgid: int) -> list[tuple[int, str]]:
    """Live processes (pid, state) whose process group is ``pgid``, read from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        state, _ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        if int(pgrp) == pgid and state != "Z":
            found.append((int(entry), state))
    return found


async def group_gone(pgid: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        await anyio.sleep(0.02)
    return True


# -- the command-shape rule -----------------------------------------------------------------

def test_command_argv_rule(tmp_path: Path) -> None:
    assert command_argv("echo", ["a b", "c"]) == (["echo", "a b", "c"], False)
    assert command_argv("echo hello && echo world", None) == ([SHELL, "-c", "echo hello && echo world"], True)
    assert command_argv("echo hi", []) == ([SHELL, "-c", "echo hi"], True)
    assert command_argv("pytest", None) == ([SHELL, "-c", "pytest"], True)
    tool = tmp_path / "My Tools" / "run"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho ran\n")
    tool.chmod(0o755)
    assert command_argv(str(tool), None) == ([str(tool)], False)
    tool.chmod(0o644)  # not executable: a shell line again
    assert command_argv(str(tool), None)[1] is True


def test_both_command_shapes(tmp_path: Path) -> None:
    async def main():
        async with TerminalManager(tmp_path) as tm:
            a = await tm.create("printf", ["[%s]\n", "a b", "$HOME", "*"])
            b = await tm.create("echo hello && echo world")
            c = await tm.create("exit 0")  # a shell builtin: only works through the shell
            for tid in (a, b, c):
                assert (await tm.wait_for_exit(tid)).exit_code == 0
            assert (await tm.output(a))[0] == "[a b]\n[$HOME]\n[*]\n"  # no shell: nothing expanded
            assert (await tm.output(b))[0] == "hello\nworld\n"
            assert tm.get(a).command_line == "printf '[%s]\n' 'a b' '$HOME' '*'"
            assert tm.get(b).command_line == "echo hello && echo world"

    run(main)


def test_executable_path_with_space_runs_directly(tmp_path: Path) -> None:
    tool = tmp_path / "My Tools" / "run"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho \"ran $#\"\n")
    tool.chmod(0o755)

    async def main():
        async with TerminalManager(tmp_path) as tm:
            tid = await tm.create(str(tool))
            await tm.wait_for_exit(tid)
            assert (await tm.output(tid))[0] == "ran 0\n"

    run(main)


def test_stdout_and_stderr_are_both_captured(tmp_path: Path) -> None:
    async def main():
        async with TerminalManager(tmp_path) as tm:
            tid = await tm.create("echo out; echo err >&2; echo out2")
            status = await tm.wait_for_exit(tid)
            assert status.exit_code == 0 and status.signal is None
            output, truncated, exit_status = await tm.output(tid)
            assert output == "out\nerr\nout2\n" and truncated is False
            assert exit_status == status

    run(main)


def test_missing_program_is_an_error(tmp_path: Path) -> None:
    async def main():
        async with TerminalManager(tmp_path) as tm:
            with pytest.raises(RequestError) as err:
                await tm.create("no-such-program-xyz", ["--flag"])
            assert "Cannot run 'no-such-program-xyz'" in str(err.value)
            # through the shell, the shell says so and exits 127
            tid = await tm.create("no-such-program-xyz --flag")
            assert (await tm.wait_for_exit(tid)).exit_code == 127
            assert "no-such-program-xyz" in (await tm.output(tid))[0]

    run(main)


# -- env and cwd ----------------------------------------------------------------------------

def test_env_and_cwd(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    base = {"PATH": os.environ["PATH"], "FROM_AGENT": "agent"}

    async def main():
        async with TerminalManager(tmp_path, env=base) as tm:
            line = 'echo "$FROM_AGENT|$EXTRA|${HOME-unset}|$(pwd)"'
            t1 = await tm.create(line, env=[EnvVariable(name="EXTRA", value="x y")])
            t2 = await tm.create(line, env=[{"name": "FROM_AGENT", "value": "overridden"}], cwd=str(tmp_path / "sub"))
            t3 = await tm.create(line, cwd="sub")  # relative: against the session folder
            for t in (t1, t2, t3):
                await tm.wait_for_exit(t)
            assert (await tm.output(t1))[0] == f"agent|x y|unset|{tmp_path}\n"
            assert (await tm.output(t2))[0] == f"overridden||unset|{tmp_path / 'sub'}\n"
            assert (await tm.output(t3))[0] == f"agent||unset|{tmp_path / 'sub'}\n"
            with pytest.raises(RequestError) as err:
                await tm.create("pwd", cwd=str(tmp_path / "missing"))
            assert "does not exist" in str(err.value)

    run(main)


def test_default_env_is_the_process_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ESCOUADE_TERMINAL_PROBE", "seen")

    async def main():
        async with TerminalManager(tmp_path) as tm:
            tid = await tm.create('echo "$ESCOUADE_TERMINAL_PROBE"')
            await tm.wait_for_exit(tid)
            assert (await tm.output(tid))[0] == "seen\n"

    run(main)


# -- output limit ---------------------------------------------------------------------------

def test_truncation_keeps_newest_bytes_on_a_character_boundary(tmp_path: Path) -> None:
    async def main():
        async with TerminalManager(tmp_path) as tm:
            # 20 × "é" (2 bytes each): the newest 11 bytes start inside an "é"
            t1 = await tm.create(PY, ["-c", "import sys; sys.stdout.write('é' * 20)"], output_byte_limit=11)
            # 10 × "𝄞" (4 bytes): the newest 6 bytes start inside one
            t2 = await tm.create(PY, ["-c", "import sys; sys.stdout.write('𝄞' * 10)"], output_byte_limit=6)
            # numbered, so "the newest" is visible
            script = "import sys\nfor i in range(2000): sys.stdout.write(f'{i}€'); sys.stdout.flush()"
            t3 = await tm.create(PY, ["-c", script], output_byte_limit=100)
            t4 = await tm.create(PY, ["-c", "print('small')"], output_byte_limit=100)
            t5 = await tm.create(PY, ["-c", "print('x')"], output_byte_limit=0)
            for t in (t1, t2, t3, t4, t5):
                assert (await tm.wait_for_exit(t)).exit_code == 0
            assert await tm.output(t1) == ("é" * 5, True, tm.get(t1).exit_status)
            assert (await tm.output(t2))[:2] == ("𝄞", True)
            out3, trunc3, _ = await tm.output(t3)
            full = "".join(f"{i}€" for i in range(2000))
            assert trunc3 and full.endswith(out3) and out3.endswith("1999€")
            assert 97 <= len(out3.encode()) <= 100 and "\ufffd" not in out3
            assert (await tm.output(t4))[:2] == ("small\n", False)
            assert (await tm.output(t5))[:2] == ("", True)

    run(main)


def test_feed_in_pieces_and_incomplete_characters() -> None:
    async def main():
        term = Terminal(id="t", command="x", args=[], argv=["x"], shell=False, cwd=Path("/"), output_byte_limit=9)
        data = "aé€𝄞b€".encode()  # 1+2+3+4+1+3 = 14 bytes
        for i in range(len(data)):
            term.feed(data[i:i + 1])
            seen = term.output
            assert "\ufffd" not in seen, (i, seen)  # a split character is held back
            assert data[: i + 1].decode("utf-8", "ignore").endswith(seen)
            assert len(seen.encode()) <= 9
        assert term.output == "𝄞b€" and term.truncated
        term.feed(b"\xe2\x82")  # half a "€" (10 bytes: the "𝄞" goes whole), then the command ends
        assert term.output == "b€" and term.output_bytes == 6
        term.exited.set()
        assert term.output == "b€\ufffd"

    run(main)


# -- exit status, kill, release -------------------------------------------------------------

def test_exit_code_and_signal(tmp_path: Path) -> None:
    async def main():
        async with TerminalManager(tmp_path) as tm:
            code = await tm.create("echo bye; exit 7")
            killed = await tm.create("kill -KILL $$")
            segv = await tm.create(PY, ["-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
            s = await tm.wait_for_exit(code)
            assert (s.exit_code, s.signal) == (7, None)
            s = await tm.wait_for_exit(killed)
            assert (s.exit_code, s.signal) == (None, "SIGKILL")
            s = await tm.wait_for_exit(segv)
            assert (s.exit_code, s.signal) == (None, "SIGSEGV")
            assert (await tm.output(code))[2].exit_code == 7
            assert tm.snapshot(killed)[2].signal == "SIGKILL"

    run(main)


def test_output_while_running_has_no_exit_status(tmp_path: Path) -> None:
    async def main():
        async with TerminalManager(tmp_path) as tm:
            tid = await tm.create("echo started; sleep 30")
            while (await tm.output(tid))[0] != "started\n":
                await anyio.sleep(0.02)
            assert (await tm.output(tid))[2] is None and tm.get(tid).running
            t0 = time.monotonic()
            await tm.kill(tid)
            assert time.monotonic() - t0 < 1.5
            output, _, status = await tm.output(tid)
            assert output == "started\n" and status.signal == "SIGTERM"
            assert (await tm.wait_for_exit(tid)).signal == "SIGTERM"
            await tm.kill(tid)  # killing a finished terminal is harmless
            assert await group_gone(tm.get(tid).pid)

    run(main)


def test_kill_escalates_to_sigkill_and_takes_the_group(tmp_path: Path) -> None:
    async def main():
        async with TerminalManager(tmp_path, kill_grace=0.3) as tm:
            # the shell and its child both ignore SIGTERM; the child is a grandchild of ours
            tid = await tm.create("trap '' TERM; sleep 30 & sleep 30; wait")
            pgid = tm.get(tid).pid
            deadline = time.monotonic() + 5
            while len(group_members(pgid)) < 3 and time.monotonic() < deadline:
                await anyio.sleep(0.02)
            assert len(group_members(pgid)) == 3
            await tm.kill(tid)
            assert (await tm.wait_for_exit(tid)).signal == "SIGKILL"
            assert await group_gone(pgid)

    run(main)


def test_release_of_a_running_command(tmp_path: Path) -> None:
    events = []

    async def main():
        async with TerminalManager(tmp_path) as tm:
            tm.subscribe(events.append)
            tid = await tm.create("echo working; sleep 30")
            pgid = tm.get(tid).pid
            while not tm.snapshot(tid)[0]:
                await anyio.sleep(0.02)
            async with anyio.create_task_group() as tg:
                waited = []

                async def wait(*, task_status=anyio.TASK_STATUS_IGNORED):
                    task_status.started()  # the parent goes on once this task waits in wait_for_exit
                    waited.append(await tm.wait_for_exit(tid))

                await tg.start(wait)
                await tm.release(tid)
            assert waited[0].signal == "SIGTERM"  # a pending wait is answered
            assert await group_gone(pgid)
            for call in (tm.output, tm.wait_for_exit, tm.kill, tm.release):
                with pytest.raises(RequestError) as err:
                    await call(tid)
                assert "released" in str(err.value)
            # the view can still show what it printed
            assert tm.snapshot(tid)[0] == "working\n" and tm.snapshot(tid)[2].signal == "SIGTERM"
            assert tm.terminals == []
            with pytest.raises(RequestError) as err:
                await tm.output("term-99")
            assert "no such terminal" in str(err.value)
            with pytest.raises(KeyError):
                tm.snapshot("term-99")

    run(main)
    kinds = [e.kind for e in events]
    assert kinds[0] == "created" and kinds[-2:] == ["exited", "released"] and "output" in kinds
    assert {e.terminal_id for e in events} == {"term-1"}


def test_background_leftovers_are_killed_when_the_command_ends(tmp_path: Path) -> None:
    async def main():
        async with TerminalManager(tmp_path) as tm:
            t0 = time.monotonic()
            tid = await tm.create("sleep 30 & echo started")
            status = await tm.wait_for_exit(tid)
            assert status.exit_code == 0 and time.monotonic() - t0 < 2.5
            assert (await tm.output(tid))[0] == "started\n"
            assert await group_gone(tm.get(tid).pid)

    run(main)


def test_leaving_the_manager_kills_everything(tmp_path: Path) -> None:
    pgids = []

    async def main():
        async with TerminalManager(tmp_path) as tm:
            for _ in range(3):
                tid = await tm.create("sleep 30")
                pgids.append(tm.get(tid).pid)
            await until(lambda: all(group_members(p) for p in pgids), what="the three commands running")
            statuses = tm.terminals
        assert all(t.exit_status.signal == "SIGTERM" for t in statuses)
        for p in pgids:
            assert await group_gone(p)

    run(main)


def test_serve_cancelled_kills_everything(tmp_path: Path) -> None:
    async def main():
        tm = TerminalManager(tmp_path)
        async with anyio.create_task_group() as tg:
            await tg.start(tm.serve)
            assert tm.serving
            tid = await tm.create("sleep 30")
            pgid = tm.get(tid).pid
            tg.cancel_scope.cancel()
        assert not tm.serving
        assert await group_gone(pgid)
        with pytest.raises(RequestError) as err:
            await tm.create("echo too late")
        assert "not running" in str(err.value)

    run(main)


def test_close_all(tmp_path: Path) -> None:
    async def main():
        async with TerminalManager(tmp_path) as tm:
            a = await tm.create("sleep 30")
            b = await tm.create("echo done")
            await tm.wait_for_exit(b)
            await tm.close_all()
            assert tm.snapshot(a)[2].signal == "SIGTERM" and tm.snapshot(b)[2].exit_code == 0
            assert await group_gone(tm.get(a).pid)
            assert (await tm.output(a))[2].signal == "SIGTERM"  # still readable until released

    run(main)


def test_bounds(tmp_path: Path) -> None:
    async def main():
        async with TerminalManager(tmp_path, max_running=2, max_kept=3) as tm:
            a = await tm.create("sleep 30")
            b = await tm.create("sleep 30")
            with pytest.raises(RequestError) as err:
                await tm.create("echo one more")
            assert "Too many terminals running (2, the limit is 2)" in str(err.value)
            await tm.kill(a)
            c = await tm.create("echo c")
            await tm.wait_for_exit(c)
            d = await tm.create("echo d")  # 4 kept > 3: the oldest finished one (a) goes
            assert [t.id for t in tm.terminals] == [b, c, d]
            with pytest.raises(RequestError):
                await tm.output(a)
            assert tm.snapshot(a)[2].signal == "SIGTERM"

    run(main)


def test_not_serving_refuses(tmp_path: Path) -> None:
    async def main():
        with pytest.raises(RequestError) as err:
            await TerminalManager(tmp_path).create("echo hi")
        assert "not running" in str(err.value)

    run(main)


# -- end to end: the fake agent over real pipes, our EscouadeClient on this side -------------

from acp_clients import escouade_session  # noqa: E402
from escouade_nb.wire.client import EscouadeClient, capabilities  # noqa: E402


def test_capabilities() -> None:
    dumped = capabilities(True, True).model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["fs"] == {"readTextFile": True, "writeTextFile": True} and dumped["terminal"] is True
    dumped = capabilities(False, False).model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["fs"] == {"readTextFile": False, "writeTextFile": False} and dumped["terminal"] is False
    assert capabilities(True).terminal is False  # terminals only when asked for


def test_e2e_terminal_shapes_and_embedding(tmp_path: Path) -> None:
    async def main():
        async with escouade_session(tmp_path) as s:
            reply = await s.prompt("terminal args")
            assert reply == "`echo hello from args` exited with code 0. Output:\n```\nhello from args\n```"
            reply = await s.prompt("terminal line")
            assert reply == "`echo hello && echo world` exited with code 0. Output:\n```\nhello\nworld\n```"
            create_args, create_line = s.requests("terminal/create")
            assert create_args["command"] == "echo" and create_args["args"] == ["hello", "from", "args"]
            assert create_line["command"] == "echo hello && echo world" and "args" not in create_line
            assert create_args["cwd"] == str(tmp_path)
            # the terminal is embedded in the tool call, and stays readable for the view after release
            starts = [u for u in s.tool_updates() if u["sessionUpdate"] == "tool_call"]
            assert starts[0]["content"] == [{"type": "terminal", "terminalId": "term-1"}]
            assert starts[0]["kind"] == "execute" and starts[0]["title"] == "Run echo hello from args"
            done = [u for u in s.tool_updates() if u.get("status") == "completed"]
            assert done[0]["content"] == [{"type": "terminal", "terminalId": "term-1"}]
            assert done[0]["rawOutput"] == {"exitCode": 0, "signal": None, "truncated": False}
            assert s.client.terminals.snapshot("term-1")[0] == "hello from args\n"
            assert s.client.terminals.snapshot("term-2")[2].exit_code == 0
            assert s.client.terminals.terminals == []  # both released by the agent

    run(main)


def test_e2e_output_limit_kill_release_fail(tmp_path: Path) -> None:
    async def main():
        async with escouade_session(tmp_path) as s:
            events = []
            s.client.terminals.subscribe(events.append)
            reply = await s.prompt("terminal limit")
            # 17 newest bytes start inside an "é": 16 are kept
            assert reply == ("`printf '%sé\\n' " + " ".join(str(i) for i in range(1, 51))
                             + "` exited with code 0. Output (truncated: the newest bytes only):\n```\n"
                             + "\n48é\n49é\n50é\n```")
            assert s.requests("terminal/create")[0]["outputByteLimit"] == 17

            reply = await s.prompt("terminal kill")
            assert reply == "`sleep 30` was killed by SIGTERM. Output:\n```\n```"
            killed = s.client.terminals.get("term-2")
            assert await group_gone(killed.pid)
            assert [u.get("status") for u in s.tool_updates()][-1] == "failed"

            t0 = time.monotonic()
            reply = await s.prompt("terminal release")
            assert time.monotonic() - t0 < 5
            assert reply == ("Released `echo started; sleep 30` while it was running (term-3). Asking for its "
                             "output after the release, the client says: Unknown terminal 'term-3': it was released")
            released = s.client.terminals.get("term-3")
            assert released.exit_status.signal == "SIGTERM" and await group_gone(released.pid)

            reply = await s.prompt("terminal fail")
            assert reply == "`echo oops >&2; exit 3` exited with code 3. Output:\n```\noops\n```"
            assert [(e.terminal_id, e.kind) for e in events if e.kind != "output"] == [
                (f"term-{i}", k) for i in range(1, 5) for k in ("created", "exited", "released")]

    run(main)


def test_e2e_agent_gone_leaves_no_terminal(tmp_path: Path) -> None:
    pgids = []

    async def main():
        async with escouade_session(tmp_path) as s:
            tid = await s.client.terminals.create("sleep 30")  # as if the agent had left it running
            pgids.append(s.client.terminals.get(tid).pid)
        assert await group_gone(pgids[0])

    run(main)


def test_e2e_without_terminal_capability(tmp_path: Path) -> None:
    async def main():
        async with escouade_session(tmp_path, terminal=False) as s:
            assert await s.prompt("terminal args") == "The client offers no terminal, so I cannot run commands."
            assert s.requests("terminal/create") == []

    run(main)


def test_kill_now_is_synchronous(tmp_path: Path) -> None:
    async def main():
        async with TerminalManager(tmp_path) as tm:
            tid = await tm.create("trap '' TERM; echo armed; sleep 30")
            pgid = tm.get(tid).pid
            await until(lambda: tm.snapshot(tid)[0] == "armed\n", what="the trap set")  # SIGTERM ignored from here
            tm.kill_now()  # no await: usable from atexit
            assert (await tm.wait_for_exit(tid)).signal == "SIGKILL"
            assert await group_gone(pgid)

    run(main)


# -- the fence of a private project holds for a terminal's folder (issue 21, item 6) ----------

@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """``tmp_path/app`` (the fence) with ``src``, a sibling ``app2``, an ``outside`` folder,
    a symlink ``app/out-link`` to ``outside`` and ``app/alias`` to ``app/src``."""
    app = tmp_path / "app"
    (app / "src").mkdir(parents=True)
    (tmp_path / "app2").mkdir()
    (tmp_path / "outside").mkdir()
    (app / "out-link").symlink_to(tmp_path / "outside")
    (app / "alias").symlink_to(app / "src")
    return app


def _fenced_client(cwd: Path, fence: Path, also: list[Path] | None = None) -> EscouadeClient:
    async def no_permission(tool_call, options):
        raise AssertionError("no permission expected")

    return EscouadeClient(cwd=cwd, on_permission=no_permission, on_update=lambda u: None, fence=fence,
                          also=also or [])


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_terminal_cwd_outside_a_private_fence_is_refused_and_nothing_starts(project: Path) -> None:
    outside = project.parent / "outside"
    cases = {
        str(outside): outside,                          # absolute
        "../outside": outside,                          # relative, climbing out
        "src/../../outside": outside,
        "out-link": outside,                            # a symlink inside pointing out
        str(project / "out-link"): outside,
        "../app2": project.parent / "app2",             # a sibling sharing the prefix
        str(project) + "2": project.parent / "app2",
        "/": Path("/"),
    }

    async def main():
        client = _fenced_client(project, project)
        before = _files(project.parent)
        async with client.terminals:
            for cwd, real in cases.items():
                with pytest.raises(RequestError) as err:
                    await client.create_terminal("touch started-here", "s1", cwd=cwd)
                msg = str(err.value)
                assert err.value.code == -32602
                assert cwd in msg and str(project) in msg and "outside the private project folder" in msg
                assert err.value.data == {"cwd": cwd, "realCwd": str(real), "fence": str(project),
                                          "reason": "outside_fence"}
            assert client.terminals.terminals == []  # no process was started
        assert _files(project.parent) == before

    run(main)


def test_terminal_cwd_inside_a_private_fence_runs_there(project: Path) -> None:
    extra = project.parent / "outside" / "extra"  # an additional directory of the session
    extra.mkdir()
    cases = {
        None: project,                  # no cwd: the session's folder
        "": project,
        "src": project / "src",         # relative: against the session's folder
        "src/../src": project / "src",
        str(project / "src"): project / "src",
        "alias": project / "src",       # a symlink inside pointing inside: its real folder
        str(extra): extra,              # an additional directory is inside the fence too
    }

    async def main():
        client = _fenced_client(project, project, also=[extra])
        async with client.terminals:
            for cwd, real in cases.items():
                tid = (await client.create_terminal("pwd -P", "s1", cwd=cwd)).terminal_id
                await client.terminals.wait_for_exit(tid)
                assert (await client.terminals.output(tid))[0] == f"{real}\n", cwd
                assert client.terminals.get(tid).cwd == real

    run(main)


def test_terminal_default_cwd_outside_a_private_fence_is_refused(project: Path) -> None:
    # a session folder outside the fence: a terminal with no cwd would start there
    async def main():
        client = _fenced_client(project.parent / "outside", project)
        async with client.terminals:
            with pytest.raises(RequestError) as err:
                await client.create_terminal("pwd", "s1")
            assert "outside the private project folder" in str(err.value)
            assert client.terminals.terminals == []

    run(main)
