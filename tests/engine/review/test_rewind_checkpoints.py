"""Checkpoints before each turn and the rewind (engine/review/checkpoints.py): a real git repository
(with a stash entry, a dirty index, untracked and ignored files), a folder outside git (the
shadow repository), scripted agents over real pipes — one offering ``session/fork``, whose
wire is checked, one not — and the transcript read back by a resume."""

import asyncio
import base64
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from escouade_nb.core.render_text import render_items
from escouade_nb.engine.agent import Agent
from escouade_nb.engine.review.checkpoints import REF_PREFIX
from scripted_agent import P_INIT, P_NEW, _chunk
from git_repos import GIT_ENV as ENV
from git_repos import git as sh
from deadlines import run, until




def folder_state(root: Path) -> dict:
    """Every file, link and folder under ``root`` but ``.git``: bytes, link target, exec bit."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root) + "/"] = "dir"
        for f in filenames:
            path = Path(dirpath) / f
            rel = os.path.relpath(path, root)
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            else:
                out[rel] = ("file", path.read_bytes(), bool(path.stat().st_mode & stat.S_IXUSR))
    return out


def user_repo_state(repo: Path) -> dict:
    return {"status": sh("status", "--porcelain=v1", "-uall", cwd=repo),
            "staged": sh("diff", "--cached", cwd=repo), "branches": sh("branch", "-a", "-v", cwd=repo),
            "stash": sh("stash", "list", cwd=repo), "stash_top": sh("stash", "show", "-p", cwd=repo),
            "head": sh("rev-parse", "HEAD", cwd=repo), "symbolic": sh("symbolic-ref", "HEAD", cwd=repo)}


def prompt_line(rid: int, text: str, session: str = "s1") -> str:
    return (f'C> {{"jsonrpc":"2.0","id":{rid},"method":"session/prompt","params":{{"sessionId":"{session}",'
            f'"prompt":"$ANY"}}}}')


def answer(rid: int, text: str, session: str = "s1") -> str:
    return f'A> {_chunk(text, session)}\nA> {{"jsonrpc":"2.0","id":{rid},"result":{{"stopReason":"end_turn"}}}}'


@pytest.fixture
def state(tmp_path, monkeypatch):
    folder = tmp_path / "state"
    monkeypatch.setenv("ESCOUADE_NB_CHECKPOINTS_DIR", str(folder))
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    return folder


@pytest.fixture
def repo(tmp_path, state):
    r = tmp_path / "proj"
    r.mkdir()
    sh("init", "-q", "-b", "main", cwd=r)
    (r / ".gitignore").write_text("*.log\nbuild/\n")
    (r / "notes.txt").write_text("a\n")
    (r / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    (r / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (r / "run.sh").chmod(0o755)
    (r / "other.txt").write_text("other\n")
    sh("add", "-A", cwd=r)
    sh("commit", "-qm", "base", cwd=r)
    sh("branch", "feature", cwd=r)
    (r / "notes.txt").write_text("stashed change\n")
    sh("stash", "push", "-q", "-m", "the user's stash", cwd=r)  # a stash entry
    (r / "other.txt").write_text("staged change\n")
    sh("add", "other.txt", cwd=r)  # a dirty index
    (r / "notes.txt").write_text("unstaged change\n")
    (r / "draft.md").write_text("untracked\n")
    (r / "debug.log").write_text("ignored before\n")
    return r


def test_rewind_after_two_turns_restores_a_git_folder_and_leaves_the_repository_as_it_was(script, repo, state):
    """No session/fork offered: the rewind restarts the agent into a new session (nothing came
    before turn 1, so nothing is carried); the folder is back byte for byte, ignored files as
    they are now; ``git status``, the index, branches and stash are those of before."""
    s = script("\n".join([P_INIT, P_NEW, prompt_line(2, "first"), answer(2, "one"),
                          prompt_line(3, "second"), answer(3, "two")]),
               "\n".join([P_INIT, P_NEW, prompt_line(2, "third"), answer(2, "three")]), ws=repo)
    before = folder_state(repo)
    repo_before = user_repo_state(repo)
    index_before = (repo / ".git" / "index").read_bytes()  # git status above refreshed it: now it must not change

    async def go():
        async with s.running() as agent:
            await agent.send("first")
            # what an agent writing by itself does in turn 1…
            (repo / "notes.txt").write_text("turn 1\n")
            (repo / "new dir" / "deep").mkdir(parents=True)
            (repo / "new dir" / "deep" / "made.bin").write_bytes(bytes(range(256)))
            (repo / "draft.md").unlink()
            (repo / "crlf.txt").write_bytes(b"changed\n")
            (repo / "debug.log").write_text("ignored, turn 1\n")
            await agent.send("second")
            (repo / "run.sh").chmod(0o644)
            (repo / "link").symlink_to("notes.txt")
            (repo / "build").mkdir()
            (repo / "build" / "out.o").write_bytes(b"\0ignored")
            assert [(cp.turn, cp.prompt) for cp in agent.checkpoints] == [(1, "first"), (2, "second")]
            assert all(cp.at.tzinfo is not None and cp.fork is None for cp in agent.checkpoints)
            private = agent.checkpoints[0].git_dir  # the kernel's private repository, outside the folder
            assert private is not None and Path(private).is_relative_to(state)
            assert all(cp.git_dir == private for cp in agent.checkpoints)
            refs = sh("for-each-ref", "--format=%(refname)", REF_PREFIX, cwd=private).split()
            assert sorted(refs) == sorted(cp.ref for cp in agent.checkpoints)
            assert sh("for-each-ref", REF_PREFIX, cwd=repo) == ""  # nothing in the user's repository
            await agent.rewind(agent.checkpoints[0])
            after = folder_state(repo)
            assert (repo / "debug.log").read_text() == "ignored, turn 1\n"  # ignored files: untouched
            assert (repo / "build" / "out.o").read_bytes() == b"\0ignored"
            ignored = {"debug.log", "build/", "build/out.o"}
            assert {k: v for k, v in after.items() if k not in ignored} == \
                {k: v for k, v in before.items() if k not in ignored}
            assert (repo / ".git" / "index").read_bytes() == index_before  # never written, not even refreshed
            assert user_repo_state(repo) == repo_before
            text = render_items(agent.conversation.items)
            assert "you (rewound): first" in text and "you (rewound): second" in text
            assert "Rewound to before turn 1" in text
            third = await agent.send("third")
            assert third.text == "three"
            assert "you: third" in render_items(agent.conversation.items)
        s.assert_ok(runs=2)
        assert list((state / "index").iterdir()) == []  # the private index went with the agent
        sent = [m for m in s.received(run=1) if m.get("method") == "session/prompt"]
        assert sent[0]["params"]["prompt"] == [{"type": "text", "text": "third"}]  # nothing before turn 1
    run(go())


def test_rewind_in_a_folder_outside_git_uses_a_shadow_repository_outside_it(script, tmp_path, state):
    """The folder gets no ``.git``; the shadow repository is under the state folder. Rewound to
    before turn 2, the new session's first prompt carries turn 1 as context."""
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.txt").write_text("a\n")
    s = script("\n".join([P_INIT, P_NEW, prompt_line(2, "first"), answer(2, "one"),
                          prompt_line(3, "second"), answer(3, "two")]),
               "\n".join([P_INIT, P_NEW, prompt_line(2, "again"), answer(2, "back")]), ws=plain)

    async def go():
        async with s.running() as agent:
            await agent.send("first")
            (plain / "a.txt").write_text("turn 1\n")
            (plain / "b.txt").write_text("b\n")
            between = folder_state(plain)
            await agent.send("second")
            (plain / "a.txt").unlink()
            (plain / "c").mkdir()
            (plain / "c" / "d.txt").write_text("d\n")
            cp = agent.checkpoints[1]
            assert cp.git_dir is not None and Path(cp.git_dir).is_relative_to(state)
            assert not (plain / ".git").exists()
            await agent.rewind(cp)
            assert folder_state(plain) == between
            assert not (plain / ".git").exists()
            assert (await agent.send("again")).text == "back"
            path = agent.transcript.path  # the new process's file, which names the one before the restart
        s.assert_ok(runs=2)
        resumed = Agent.resume(path, s.ref, program=sys.executable)  # the rewound turn survives the transcript
        text = render_items(resumed.conversation.items)
        assert "you: first" in text and "you (rewound): second" in text and "you: again" in text
        assert [cp.turn for cp in resumed.checkpoints] == [1, 2, 3]
        prompt = next(m for m in s.received(run=1) if m.get("method") == "session/prompt")["params"]["prompt"]
        carried = [b for b in prompt if (b.get("_meta") or {}).get("escouade", {}).get("context") == "fork"]
        assert len(carried) == 1 and prompt[-1] == {"type": "text", "text": "again"}
        body = json.dumps(carried[0])
        assert "you: first" in body and "one" in body and "second" not in body
    run(go())


FORK_INIT = P_INIT.replace('"loadSession":false', '"loadSession":false,"sessionCapabilities":{"fork":{}}')


def fork_lines(rid: int, source: str, made: str) -> str:
    return (f'C> {{"jsonrpc":"2.0","id":{rid},"method":"session/fork","params":{{"sessionId":"{source}",'
            f'"cwd":"$WS","mcpServers":[]}}}}\n'
            f'A> {{"jsonrpc":"2.0","id":{rid},"result":{{"sessionId":"{made}"}}}}')


def test_an_agent_offering_session_fork_is_forked_with_each_checkpoint_and_rewound_into_a_fork(script, tmp_path,
                                                                                               state):
    """The wire: a session/fork before each prompt; the rewind forks the checkpoint's fork
    again and the next prompt goes to that session, on the same process, carrying nothing.
    A resume from the transcript shows the rewound turn and keeps the checkpoints."""
    plain = tmp_path / "forked"
    plain.mkdir()
    (plain / "f.txt").write_text("0\n")
    s = script("\n".join([FORK_INIT, P_NEW,
                          fork_lines(2, "s1", "f1"), prompt_line(3, "first"), answer(3, "one"),
                          fork_lines(4, "s1", "f2"), prompt_line(5, "second"), answer(5, "two"),
                          fork_lines(6, "f2", "f2b"),
                          fork_lines(7, "f2b", "f3"), prompt_line(8, "third", "f2b"), answer(8, "three", "f2b")]),
               ws=plain)

    async def go():
        async with s.running() as agent:
            await agent.send("first")
            (plain / "f.txt").write_text("1\n")
            before_two = folder_state(plain)
            await agent.send("second")
            (plain / "f.txt").write_text("2\n")
            assert [cp.fork for cp in agent.checkpoints] == ["f1", "f2"]
            await agent.rewind(agent.checkpoints[1])
            assert folder_state(plain) == before_two
            assert agent.session_id == "f2b"
            third = await agent.send("third")
            assert third.text == "three"
            text = render_items(agent.conversation.items)
            assert "you: first" in text and "you (rewound): second" in text and "you: third" in text
            assert "goes on in session f2b" in text
            path = agent.transcript.path
        s.assert_ok()
        prompts = [m for m in s.received() if m.get("method") == "session/prompt"]
        assert [p["params"]["sessionId"] for p in prompts] == ["s1", "s1", "f2b"]
        assert prompts[2]["params"]["prompt"] == [{"type": "text", "text": "third"}]  # the fork carries it
        methods = [m.get("method") for m in s.received() if "method" in m]
        assert methods.count("session/fork") == 4

        resumed = Agent.resume(path, s.ref, program=sys.executable)
        text = render_items(resumed.conversation.items)
        assert "you: first" in text and "you (rewound): second" in text and "you: third" in text
        assert "two" in text and "three" in text
        assert [(cp.turn, cp.prompt, cp.fork) for cp in resumed.checkpoints] == \
            [(1, "first", "f1"), (2, "second", "f2"), (3, "third", "f3")]
        users = [i for i in resumed.conversation.items if type(i).__name__ == "Message" and i.role == "user"]
        assert [u.checkpointed for u in users] == [True, True, True]
        assert [u.rewound for u in users] == [False, True, False]
    run(go())


def test_rewind_is_refused_during_a_turn_and_for_a_stranger_checkpoint(script, tmp_path, state):
    slow = tmp_path / "slow"
    slow.mkdir()
    s = script("\n".join([P_INIT, P_NEW, prompt_line(2, "first"), answer(2, "one"),
                          prompt_line(3, "second"), '!> {"sleep": 1.5}', answer(3, "two")]), ws=slow)

    async def go():
        from escouade_nb.wire.errors import AgentError
        async with s.running() as agent:
            await agent.send("first")
            turn = agent.send("second")
            while len(agent.checkpoints) < 2:
                await asyncio.sleep(0.02)
            with pytest.raises(AgentError, match="in a turn"):
                await agent.rewind(agent.checkpoints[0])
            await turn
            with pytest.raises(AgentError, match="no checkpoint before turn 7"):
                await agent.rewind(7)
    run(go())


def test_a_refused_fork_is_said_once_and_not_asked_again_on_that_process(script, tmp_path, state):
    """An agent advertising session/fork that refuses it: the turn goes on, the conversation
    says once that a rewind will carry the conversation instead, no fork is asked again."""
    plain = tmp_path / "refusing"
    plain.mkdir()
    refused = ('C> {"jsonrpc":"2.0","id":2,"method":"session/fork","params":{"sessionId":"s1"}}\n'
               'A> {"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":"no forks today"}}')
    s = script("\n".join([FORK_INIT, P_NEW, refused, prompt_line(3, "first"), answer(3, "one"),
                          prompt_line(4, "second"), answer(4, "two")]), ws=plain)

    async def go():
        async with s.running() as agent:
            await agent.send("first")
            await agent.send("second")
            assert [cp.fork for cp in agent.checkpoints] == [None, None]
            text = render_items(agent.conversation.items)
            assert text.count("did not fork its session") == 1 and "no forks today" in text
        s.assert_ok()
    run(go())


def test_a_folder_with_more_new_files_than_a_checkpoint_takes_gets_none(script, tmp_path, state, monkeypatch):
    """A home folder, a data folder: over the limits no checkpoint is taken (said once), the
    turns go on, and it is not tried again every turn."""
    monkeypatch.setenv("ESCOUADE_NB_CHECKPOINT_MAX_FILES", "3")
    big = tmp_path / "big"
    big.mkdir()
    for n in range(5):
        (big / f"{n}.csv").write_text("x\n")
    s = script("\n".join([P_INIT, P_NEW, prompt_line(2, "first"), answer(2, "one"),
                          prompt_line(3, "second"), answer(3, "two")]), ws=big)

    async def go():
        async with s.running() as agent:
            await agent.send("first")
            await agent.send("second")
            assert agent.checkpoints == []
            text = render_items(agent.conversation.items)
            assert text.count("No checkpoints of") == 1 and "5 files git does not have yet, more than 3" in text
        s.assert_ok()
    run(go())


def test_stop_while_the_checkpoint_is_taken_sends_no_prompt(script, tmp_path, state):
    """Stop pressed while the checkpoint's ``session/fork`` is under way: the prompt is
    never sent and the turn ends ``cancelled`` (it ran to its end before)."""
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.txt").write_text("a\n")
    s = script("\n".join([FORK_INIT, P_NEW,
                          'C> {"jsonrpc":"2.0","id":2,"method":"session/fork","params":{"sessionId":"s1"}}',
                          '!> {"sleep": 1.0}',
                          'A> {"jsonrpc":"2.0","id":2,"result":{"sessionId":"f1"}}']), ws=plain)

    async def go():
        async with s.running() as agent:
            turn = agent.send("first")  # the agent holds the fork's answer 1 s: Stop lands while it is under way
            await until(lambda: any(m.get("method") == "session/fork" for m in s.received()), what="the fork sent")
            assert turn.status == "running"
            agent.cancel()  # Stop
            await turn
            assert turn.stop_reason == "cancelled" and turn.cancelled_by_user
            await asyncio.sleep(0.3)
        assert "session/prompt" not in [m.get("method") for m in s.received()]

    run(go())


def test_a_prompt_sent_while_a_rewind_runs_waits_for_it_and_goes_to_the_new_session(script, tmp_path, state):
    """A prompt typed right after *Rewind to here* waits for the rewind: it is sent in the
    new session, not marked rewound, and answered there."""
    plain = tmp_path / "plain"
    plain.mkdir()
    for i in range(300):
        (plain / f"f{i}.txt").write_text("a\n" * 100)
    s = script("\n".join([P_INIT, P_NEW, prompt_line(2, "first"), answer(2, "one")]),
               "\n".join([P_INIT, P_NEW, prompt_line(2, "second"), answer(2, "two-new")]), ws=plain)

    async def go():
        async with s.running() as agent:
            await agent.send("first")
            for i in range(300):
                (plain / f"f{i}.txt").write_text("b\n")
            task = agent.rewind_soon(1)
            await asyncio.sleep(0)
            second = agent.send("second")
            await task
            await asyncio.wait_for(second.wait(), 20)
            assert second.stop_reason == "end_turn" and "two-new" in second.text
            text = render_items(agent.conversation.items)
            assert "you (rewound): first" in text and "you (rewound): second" not in text
            assert (plain / "f0.txt").read_text() == "a\n" * 100
        assert [m.get("method") for m in s.received(run=0)].count("session/prompt") == 1

    run(go())


def test_a_rewind_drops_the_pending_file_changes_it_undid(script, tmp_path, state):
    """``review=True``: the agent wrote a.txt by itself in turn 1; a rewind to before turn 1
    puts it back, and its pending change leaves ``pending_edits`` (dropped, "undone by the
    rewind") instead of offering a Reject that can only fail."""
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.txt").write_text("a\n")
    step = "!> " + json.dumps({"file": "$WS/a.txt", "b64": base64.b64encode(b"turn 1\n").decode()})
    s = script("\n".join([P_INIT, P_NEW, prompt_line(2, "first"), step,
                          'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}']),
               "\n".join([P_INIT, P_NEW]), ws=plain)

    async def go():
        agent = s.agent(review=True)
        try:
            await agent.send("first")
            assert [e.rel for e in agent.pending_edits] == ["a.txt"]
            await agent.rewind(agent.checkpoints[0])
            assert (plain / "a.txt").read_text() == "a\n"
            assert agent.pending_edits == []
            undone = agent.edit_review.settled[-1]
            assert undone.state == "dropped" and undone.why == "undone by the rewind"
        finally:
            await agent.close()

    run(go())


def test_a_sha256_repository_gets_a_sha256_private_repository(tmp_path, state):
    """The kernel's private repository borrows the user's objects: over a SHA-256 repository it is one too."""
    from escouade_nb.engine.review.checkpoints import FolderSnapshots

    r = tmp_path / "sha256"
    r.mkdir()
    sh("init", "-q", "--object-format=sha256", "-b", "main", cwd=r)
    (r / "a.txt").write_text("a\n")
    sh("add", "-A", cwd=r)
    sh("commit", "-qm", "base", cwd=r)
    (r / "a.txt").write_text("changed\n")

    async def go():
        snaps = FolderSnapshots(r, "x")
        commit, _ = await snaps.take(1, "t")
        (r / "a.txt").write_text("later\n")
        restored = await snaps.restore(commit)
        await snaps.aclose()
        return commit, restored
    commit, (removed, written) = run(go())
    assert len(commit) == 64 and (removed, written) == ([], ["a.txt"])
    assert (r / "a.txt").read_text() == "changed\n"
