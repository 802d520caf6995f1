"""A worktree per agent, one prompt to several agents, forks: real git repositories in
temp folders, the shipped ``fake`` agent over real pipes."""

import asyncio

import pytest

from escouade_nb.engine.squad import Squad, SquadError
from escouade_nb.engine.worktrees.worktree import Worktree, WorktreeError
from escouade_nb.manifest.project import project_id
from escouade_nb.wire import transcript
from git_repos import base_repo, use_git_env
from git_repos import git as sh
from deadlines import run, until




@pytest.fixture
def repo(tmp_path, monkeypatch):
    use_git_env(monkeypatch)
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    return base_repo(tmp_path / "proj", {"notes.txt": "a\n"})


async def edit(agent, file: str = "notes.txt") -> None:
    turn = agent.send(f"edit {file}")
    card = await agent.next_permission(timeout=60)
    card.choose("allow_once")
    await turn


async def closing(squad: Squad) -> None:
    await asyncio.gather(*(a.close() for a in squad.agents.values()))
    await squad.aclose()


def test_two_worktrees_edit_one_file_merge_fast_forwards_then_conflicts_and_discard_removes(repo):
    async def go():
        squad = Squad()
        try:
            a = squad.start("fake", cwd=repo, name="a", worktree=True)
            b = squad.start("fake", cwd=repo, name="b", worktree="try-b")
            await asyncio.gather(a.ready(), b.ready())
            assert a.worktree.path == repo.parent / "proj.worktrees" / "a" and a.cwd == a.worktree.path
            assert (a.worktree.branch, b.worktree.branch, a.worktree.base) == ("escouade/a", "try-b", "main")
            assert a.project.id == project_id(repo) and a.project.folder == a.worktree.path  # fenced to it
            await edit(a)  # a: one line added
            await edit(b)
            await edit(b)  # b: two lines: the same file, changed differently
            assert (repo / "notes.txt").read_text() == "a\n"  # the main worktree untouched so far
            # re-counted after each turn, for the views' headers
            await until(lambda: a.worktree.last_stat is not None and a.worktree.last_stat.files == 1, what="the stat")
            assert str(a.worktree.last_stat) == "1 file changed, +1 -0"
            stat = await a.worktree.diffstat()
            assert (stat.files, stat.insertions, stat.deletions, stat.paths) == (1, 1, 0, ["notes.txt"])
            assert str(stat) == "1 file changed, +1 -0" and "escouade/a" in a.worktree.header_text()

            first = await squad.merge("a")
            assert first.kind == "fast-forward" and first.ok
            assert (repo / "notes.txt").read_text() == (a.worktree.path / "notes.txt").read_text()
            head = sh("rev-parse", "HEAD", cwd=repo)

            second = await squad.merge("b")
            assert second.kind == "conflict" and second.conflicts == ["notes.txt"]
            assert "conflict in notes.txt; nothing was changed" in str(second)
            assert sh("rev-parse", "HEAD", cwd=repo) == head  # nothing changed: aborted
            assert sh("status", "--porcelain", cwd=repo) == ""

            rebased = await squad.rebase("b")  # onto main, which has a's line now: the same conflict
            assert rebased.kind == "conflict" and rebased.conflicts == ["notes.txt"]

            (b.worktree.path / "new.txt").write_text("x\n")  # uncommitted: discard refuses
            with pytest.raises(SquadError) as refused:
                await squad.discard("b")
            assert "uncommitted changes (1 file: new.txt)" in str(refused.value) and "\n" not in str(refused.value)
            path = b.worktree.path
            await squad.discard("b", force=True)
            assert not path.exists() and "try-b" not in sh("branch", "--list", cwd=repo)
            assert b.worktree is None and b.status == "closed"
            entries = list(squad.rules.journal.read("worktrees")) if hasattr(squad.rules.journal, "read") else []
            assert entries == [] or any("discard" in (e.text_ or "") for e in entries)
        finally:
            await closing(squad)
    run(go())


def test_refusals_are_one_clear_line(repo, tmp_path):
    async def go():
        squad = Squad()
        try:
            outside = tmp_path / "plain"
            outside.mkdir()
            with pytest.raises(SquadError, match=r"^.*plain is not inside a git repository: --worktree needs one$"):
                squad.start("fake", cwd=outside, worktree=True)
            with pytest.raises(WorktreeError, match="is not inside a git repository"):
                await Worktree.create(outside, "x")

            sh("branch", "taken", cwd=repo)
            agent = squad.start("fake", cwd=repo, name="t", worktree="taken")
            with pytest.raises(Exception) as failed:
                await agent.ready()
            assert str(failed.value) == f"the branch taken exists already in {repo}: pick another name (--worktree NAME)"
            assert agent.status == "failed" and not (repo.parent / "proj.worktrees" / "t").exists()

            early = squad.start("fake", cwd=repo, name="early", worktree=True)
            await early.close()  # while its worktree is being made: it never starts
            await until(lambda: early.status == "closed", what="the early agent closed")
            assert early.status == "closed" and early.live is None

            (repo / "notes.txt").write_text("staged\n")
            sh("add", "notes.txt", cwd=repo)
            with pytest.raises(WorktreeError) as dirty:
                await Worktree.create(repo, "d")
            assert str(dirty.value).startswith(f"the index of {repo} has staged changes") and "\n" not in str(dirty.value)
        finally:
            await closing(squad)
    run(go())


def test_a_worktree_survives_and_resume_reattaches_it(repo):
    async def go():
        squad = Squad()
        a = squad.start("fake", cwd=repo, name="wt-resume", worktree=True)
        try:
            await edit(a)
            path = a.worktree.path
        finally:
            await closing(squad)
        head = transcript.header(transcript.latest("wt-resume")["wt-resume"])
        assert head["worktree"]["path"] == str(path) and head["worktree"]["branch"] == "escouade/wt-resume"
        again = Squad()  # as after a kernel restart
        try:
            back = again.resume("wt-resume")
            await back.ready()
            assert back.worktree is not None and back.worktree.path == path and back.cwd == path
            assert back.project.id == project_id(repo) and back.project.folder == path  # the repository's project
            assert await back.worktree.exists()
            assert (await back.worktree.diffstat()).insertions == 1
        finally:
            await closing(again)
            await Worktree.from_record(head["worktree"]).discard(force=True)
    run(go())


def test_ask_sends_one_prompt_to_three_agents_concurrently(repo, monkeypatch):
    monkeypatch.chdir(repo)  # "fake" starts in the current folder: the repository, not the checkout (its checkpoints)

    async def go():
        squad = Squad()
        try:
            squad.start("fake", cwd=repo, name="one")
            squad.start("fake", cwd=repo, name="two")
            turns = await squad.ask(["one", "two", "fake"], "hello squad")  # "fake": a harness, started here
            assert [t.agent.name for t in turns] == ["one", "two", "fake"]
            assert all(t.stop_reason == "end_turn" and "hello squad" in t.text for t in turns)
            with pytest.raises(SquadError, match="named twice"):
                squad.ask_soon(["one", "one"], "x")
            with pytest.raises(SquadError):
                squad.ask_soon(["no-such-harness"], "x")
        finally:
            await closing(squad)
    run(go())


def test_fork_without_session_fork_carries_the_conversation_and_says_how(repo):
    async def go():
        squad = Squad()
        try:
            parent = squad.start("fake", cwd=repo, name="p", worktree=True)
            await parent.send("think of a pomegranate")
            await edit(parent)
            child = squad.fork("p", name="c")
            await child.ready()
            notices = [i.text for i in child.conversation.items if type(i).__name__ == "Notice"]
            assert any("Forked from p as a new session" in n and "offers no session/fork" in n for n in notices)
            assert child.worktree.branch == "escouade/c" and child.worktree.base == "main"
            assert (child.worktree.path / "notes.txt").read_text() == (parent.worktree.path / "notes.txt").read_text()
            sent: list = []
            child.transport.observers.append(
                lambda d, m: d == "out" and m.get("method") == "session/prompt" and sent.append(m["params"]["prompt"]))
            await child.send("what did we say?")
            carried = sent[0][0]  # the fake takes no embedded context: the resource as a text block, marked
            assert "pomegranate" in carried["text"] and "forked from p" in carried["text"]
            assert carried["_meta"] == {"escouade": {"context": "fork"}}
            assert sent[0][-1] == {"type": "text", "text": "what did we say?"}
            await child.send("and now?")  # the primer goes once
            assert sent[1] == [{"type": "text", "text": "and now?"}]
        finally:
            await closing(squad)
    run(go())


def test_side_by_side_view_compares_the_turns_and_the_squad_view_shows_worktrees(repo):
    from escouade_nb.engine.compare import comparison
    from escouade_nb.widgets.compare_view import CompareView
    from escouade_nb.widgets.agent_view import status_line
    from escouade_nb.widgets.squad_view import SquadView, agent_row

    async def go():
        squad = Squad()
        try:
            squad.start("fake", cwd=repo, name="x", worktree=True)
            squad.start("fake", cwd=repo, name="y", worktree=True)
            turns = squad.ask_soon(["x", "y"], "edit notes.txt")
            view = CompareView(turns)
            for agent in (squad.agents["x"], squad.agents["y"]):
                card = await agent.next_permission(timeout=60)
                card.choose("allow_once")  # every agent's card answerable at once
            await squad.restat_soon(turns, view.finish)
            rows = comparison(turns, durations=False)
            assert [r["agent"] for r in rows] == ["x", "y"]
            assert all(r["stop"] == "end_turn" and r["tool calls"] == "1" for r in rows)
            assert all(r["files changed"] == "1 file changed, +1 -0 (notes.txt)" for r in rows)
            assert all(r["cards"] == "Allowed once by you" and r["tokens"] == "+1200 (1200/200000)" for r in rows)
            assert view.comparison.frozen is not None and view.comparison.rows(durations=False) == rows
            text = repr(view)
            assert text.splitlines()[-3].split() == ["agent", "stop", "tokens", "cost", "files", "changed",
                                                     "tool", "calls", "cards"]
            assert "x: turn end_turn" in text and "y: turn end_turn" in text
            table = view.state()["table"]
            assert "<table class='escouade-comparison'>" in table and " s</td>" in table
            assert agent_row(squad.agents["x"])["worktree"] == "escouade/x (off main): 1 file changed, +1 -0"
            assert status_line(squad.agents["x"]) == "x · Fake · worktree escouade/x (off main) · 1 file changed, +1 -0 · idle"
            squad_view = SquadView(squad)
            assert "worktree=escouade/y (off main): 1 file changed, +1 -0" in repr(squad_view)
            cells = {r["name"]: r["cells"] for r in squad_view.table()["rows"]}
            assert cells["y"]["worktree"] == "escouade/y (off main): 1 file changed, +1 -0"
            squad_view.close()
            view.close()
        finally:
            await closing(squad)
    run(go())


def test_fork_with_session_fork_loads_the_forked_session_in_a_new_process(script):
    from scripted_agent import P_INIT, P_NEW, _chunk

    init = P_INIT.replace('"loadSession":false', '"loadSession":true,"sessionCapabilities":{"fork":{}}')
    new = P_NEW.replace('"mcpServers":[]', '"mcpServers":"$ANY"')
    # the checkpoint before the prompt takes a fork too (engine/review/checkpoints.py)
    parent_run = f"""{init}
{new}
C> {{"jsonrpc":"2.0","id":9,"method":"session/fork","params":{{"sessionId":"s1","cwd":"$WS"}}}}
A> {{"jsonrpc":"2.0","id":9,"result":{{"sessionId":"s1-checkpoint"}}}}
C> {{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{{"sessionId":"s1","prompt":[{{"type":"text","text":"go"}}]}}}}
A> {_chunk("Hello")}
A> {{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"end_turn"}}}}
C> {{"jsonrpc":"2.0","id":3,"method":"session/fork","params":{{"sessionId":"s1","cwd":"$WS"}}}}
A> {{"jsonrpc":"2.0","id":3,"result":{{"sessionId":"s1-fork"}}}}
"""
    fork_run = f"""{init}
C> {{"jsonrpc":"2.0","id":1,"method":"session/load","params":{{"sessionId":"s1-fork","cwd":"$WS","mcpServers":"$ANY"}}}}
A> {{"jsonrpc":"2.0","id":1,"result":{{}}}}
C> {{"jsonrpc":"2.0","id":9,"method":"session/fork","params":{{"sessionId":"s1-fork","cwd":"$WS"}}}}
A> {{"jsonrpc":"2.0","id":9,"result":{{"sessionId":"s1-fork-checkpoint"}}}}
C> {{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{{"sessionId":"s1-fork","prompt":[{{"type":"text","text":"next"}}]}}}}
A> {_chunk("Again", "s1-fork")}
A> {{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"end_turn"}}}}
"""
    s = script(parent_run, fork_run)

    async def go():
        squad = Squad()
        parent = s.agent()
        try:
            await parent.send("go")
            child = squad.fork(parent, name="forked")
            await child.ready()
            notices = [i.text for i in child.conversation.items if type(i).__name__ == "Notice"]
            assert any("Forked from script with session/fork" in n for n in notices)
            assert child.session_id == "s1-fork"
            assert (await child.send("next")).text == "Again"  # no primer: the agent carries it
        finally:
            await parent.close()
            await closing(squad)
        s.assert_ok(runs=2)
    run(go())


def test_a_private_worktree_agent_is_fenced_to_its_worktree(repo):
    async def go():
        squad = Squad()
        try:
            agent = squad.start("fake", cwd=repo, name="fenced", worktree=True, private=True)
            await agent.ready()
            assert agent.fence == agent.worktree.path
            reply = await agent.send(f"write outside {repo / 'notes.txt'}")
            assert (repo / "notes.txt").read_text() == "a\n"  # the main worktree is outside the fence
            assert "outside" in reply.text.lower() or "refus" in reply.text.lower(), reply.text
        finally:
            await closing(squad)
    run(go())


def test_ask_three_agents_two_fake_one_goose_shaped_returns_three_turns(repo, tmp_path, monkeypatch):
    """Two ``fake`` agents and the goose-shaped stand-in of the agents suite (a Python
    script speaking goose's ACP wire, its model the suite's scripted model server), each
    in its own worktree: one prompt, three turns, three rows in the comparison."""
    import os
    import shlex
    import sys
    from pathlib import Path

    from escouade_nb.engine.compare import comparison, comparison_text

    sys.path.insert(0, str(Path(__file__).parents[2] / "agents"))
    try:
        from model_server import ModelServer
    finally:
        sys.path.pop(0)
    bin_dir = tmp_path / "bin"  # `goose` exists only on this test's PATH, as in tests/agents
    bin_dir.mkdir()
    (bin_dir / "goose").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                                   f"{shlex.quote(str(Path(__file__).parents[2] / 'agents' / 'goose_like_agent.py'))} \"$@\"\n")
    (bin_dir / "goose").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")

    with ModelServer() as server:
        monkeypatch.setenv("OPENAI_HOST", server.url)
        monkeypatch.setenv("GOOSE_MODE", "approve")
        monkeypatch.setenv("GOOSE_MODEL", "fake-model")
        monkeypatch.setenv("GOOSE_PATH_ROOT", str(tmp_path / "goose"))

        async def go():
            squad = Squad()
            try:
                for name, harness in (("one", "fake"), ("two", "fake"), ("g", "goose")):
                    squad.start(harness, cwd=repo, name=name, worktree=True)
                turns = await squad.ask(["one", "two", "g"], "hello squad")
                assert [t.agent.name for t in turns] == ["one", "two", "g"]
                assert [t.agent.harness.short_id for t in turns] == ["fake", "fake", "goose"]
                assert all(t.stop_reason == "end_turn" and t.error is None for t in turns), [t.error for t in turns]
                assert all("hello squad" in t.text for t in turns[:2])
                assert turns[2].text == "Scripted reply."  # the model server's answer, through goose's wire
                assert turns[2].agent.cwd == repo.parent / "proj.worktrees" / "g"
                rows = comparison(turns, durations=False)
                assert [(r["agent"], r["stop"], r["files changed"], r["cards"]) for r in rows] == [
                    (n, "end_turn", "none", "none") for n in ("one", "two", "g")]
                assert [line.split()[0] for line in comparison_text(turns, durations=False).splitlines()] == [
                    "agent", "one", "two", "g"]
            finally:
                await closing(squad)
        run(go())
    assert any(r["path"].endswith("/chat/completions") for r in server.requests)  # goose asked the model here


def test_a_git_failure_says_gits_error_not_its_progress_line(repo):
    """``git worktree add`` writes "Preparing worktree (new branch …)" before its
    ``fatal:`` line: the error says the fatal one (06-orchestration once failed with only
    "Preparing worktree" to go on)."""
    from escouade_nb.engine.worktrees.worktree import git

    target = repo.parent / "proj.worktrees" / "x"
    target.mkdir(parents=True)
    (target / "in-the-way").write_text("")
    with pytest.raises(WorktreeError) as failed:
        run(git("worktree", "add", "-b", "escouade/x", str(target), "main", cwd=repo))
    assert "already exists" in str(failed.value) and "Preparing" not in str(failed.value), failed.value
