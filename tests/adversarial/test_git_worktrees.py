"""A hostile agent's git worktree against the kernel's worktree operations (engine/worktrees/worktree.py
through engine/kernel_git.py): the agent writes its admin folder's ``config.worktree`` (filters,
fsmonitor, drivers, an include…), ``.gitattributes``, its ``.git`` file (pointing at a gitdir it
made) and even its admin folder's ``commondir``; diffstat, status, commit, rebase, merge and
discard run none of it — and still do their job, or refuse in one line."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from escouade_nb.engine.worktrees.worktree import Worktree, WorktreeError
from git_attacks import plant, ran
from git_repos import base_repo, use_git_env
from git_repos import git as sh
from deadlines import run

ATTACKS = Path(__file__).resolve().parent / "git_attacks.py"
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap is not installed (apt-get install bubblewrap)")


@pytest.fixture
def repo(tmp_path, monkeypatch):
    use_git_env(monkeypatch)
    monkeypatch.setenv("ESCOUADE_NB_CHECKPOINTS_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    r = base_repo(tmp_path / "proj", {"notes.txt": "a\n", "other.txt": "o\n"})
    # per-worktree config is on (as the kernel turns it on for `copy`): git reads each worktree's config.worktree
    sh("config", "extensions.worktreeConfig", "true", cwd=r)
    (tmp_path / "marks").mkdir()
    return r


def admin_of(repo: Path, path: Path) -> Path:
    """The worktree's admin folder, found by what git wrote (as a test sees it, on any version)."""
    for entry in (repo / ".git" / "worktrees").iterdir():
        if Path((entry / "gitdir").read_text().strip()).resolve() == (path / ".git").resolve():
            return entry
    raise AssertionError(f"no admin folder for {path}")


def plant_worktree(repo: Path, wt_path: Path, admin: Path, marks: Path) -> None:
    """What the agent writes: its config.worktree, attributes, and its .git file pointing at a
    gitdir it made (a copy of its admin folder, the same attacks in its ``config.worktree``)."""
    plant(admin, wt_path, marks, config_name="config.worktree")
    forged = wt_path / ".forged-gitdir"
    shutil.copytree(admin, forged)
    (forged / "commondir").write_text(f"{repo / '.git'}\n")  # a valid linked gitdir of its own
    (wt_path / ".git").write_text(f"gitdir: {forged}\n")


def test_worktree_operations_run_nothing_the_agent_planted_and_still_work(repo, tmp_path):
    marks = tmp_path / "marks"

    async def go():
        wt = await Worktree.create(repo, "evil")
        admin = admin_of(repo, wt.path)
        (wt.path / "notes.txt").write_text("a\nagent\n")
        (wt.path / "made.txt").write_text("made by the agent\n")
        plant_worktree(repo, wt.path, admin, marks)
        stat = await wt.diffstat()
        assert "notes.txt" in stat.paths and "made.txt" in stat.paths and stat.insertions >= 2
        dirty = await wt.dirty()
        assert "notes.txt" in dirty and ran(marks) == []
        commit = await wt.commit("agent's work")
        assert commit is not None and ran(marks) == []
        (repo / "other.txt").write_text("user moved on\n")  # the user commits on main meanwhile
        sh("commit", "-qam", "user", cwd=repo)
        rebased = await wt.rebase()
        assert rebased.kind == "rebased" and ran(marks) == []
        merged = await wt.merge()
        assert merged.kind == "fast-forward", merged
        assert (repo / "made.txt").read_text() == "made by the agent\n"
        assert (repo / "notes.txt").read_text() == "a\nagent\n" and (repo / "other.txt").read_text() == "user moved on\n"
        (wt.path / "late.txt").write_text("uncommitted\n")
        with pytest.raises(WorktreeError, match="uncommitted changes"):
            await wt.discard()
        await wt.discard(force=True)
        assert not wt.path.exists()
        return ran(marks)

    assert run(go()) == []
    assert sh("branch", "--list", "escouade/evil", cwd=repo) == ""


def test_an_admin_folder_pointed_elsewhere_is_refused_in_one_line_and_runs_nothing(repo, tmp_path):
    """The agent points its admin folder's ``commondir`` at a repository it made (its config full
    of attacks): the kernel's git refuses to run there, in one line."""
    marks = tmp_path / "marks"

    async def go():
        wt = await Worktree.create(repo, "evil")
        admin = admin_of(repo, wt.path)
        (wt.path / "notes.txt").write_text("changed\n")
        forged = wt.path / ".forged-common"
        subprocess.run(["git", "init", "-q", "--bare", str(forged)], check=True)
        plant(forged, wt.path, marks)
        (forged / "objects" / "info" / "alternates").write_text(f"{repo / '.git' / 'objects'}\n")
        (forged / "refs" / "heads" / "escouade").mkdir(parents=True)
        (forged / "refs" / "heads" / "escouade" / "evil").write_text(sh("rev-parse", "HEAD", cwd=repo))
        (admin / "commondir").write_text(f"{forged}\n")
        for op in (wt.dirty, wt.diffstat, wt.commit):
            with pytest.raises(WorktreeError) as caught:
                await op()
            assert "\n" not in str(caught.value) and "was changed" in str(caught.value)
        return ran(marks)

    assert run(go()) == []


def test_an_admin_head_pointed_at_the_users_branch_does_not_move_the_commit_there(repo, tmp_path):
    """The agent points its admin folder's ``HEAD`` at ``main``: the kernel's commit of its work
    still goes on its own branch (the HEAD the kernel recorded), ``main`` does not move."""

    async def go():
        wt = await Worktree.create(repo, "evil")
        admin = admin_of(repo, wt.path)
        main_before = sh("rev-parse", "main", cwd=repo)
        (admin / "HEAD").write_text("ref: refs/heads/main\n")
        (wt.path / "made.txt").write_text("work\n")
        commit = await wt.commit("agent's work")
        assert sh("rev-parse", "main", cwd=repo) == main_before
        assert sh("rev-parse", "escouade/evil", cwd=repo).strip() == commit
        assert sh("show", "--format=", "--name-only", commit, cwd=repo).split() == ["made.txt"]

    run(go())


@needs_bwrap
def test_a_sandboxed_worktree_agent_plants_in_its_admin_folder_and_the_squad_merges_without_running_it(
        script, repo, tmp_path, monkeypatch):
    """End to end: a ``sandbox=True, worktree=True`` agent plants, with its own process inside bwrap,
    into its admin folder (``config.worktree``) and worktree; the kernel re-counts its diff stat
    after the turn, merges and discards it: nothing planted runs."""
    from escouade_nb.engine.squad import Squad

    marks = tmp_path / "marks"
    plugins = tmp_path / "plugins"
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
    worktree = repo.parent / f"{repo.name}.worktrees" / "boxed"
    admin = repo / ".git" / "worktrees" / "boxed"  # where git puts it: the folder's name
    plant_it = {"run": [sys.executable, str(ATTACKS), str(admin), str(worktree), str(marks), "config.worktree"]}
    change = {"run": ["sh", "-c", "echo agent >> notes.txt && echo changed"]}
    relink = {"run": ["sh", "-c", f"cp -r {admin} .forged && "
                                  f"printf '{repo / '.git'}\\n' > .forged/commondir && "
                                  "echo \"gitdir: $PWD/.forged\" > .git && echo relinked"]}
    turn = "\n".join([
        'C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":"$ANY"}',
        'A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false},'
        '"authMethods":[]}}',
        'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":"$ANY"}',
        'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}',
        'C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":"$ANY"}',
        f"!> {json.dumps(plant_it)}", f"!> {json.dumps(change)}", f"!> {json.dumps(relink)}",
        'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}',
        'C> {"jsonrpc":"2.0","id":3,"method":"session/prompt","params":"$ANY"}',
        'A> {"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}'])
    s = script(turn, ws=repo, name="boxed")
    s.install_sandboxed(plugins)

    async def go():
        squad = Squad()
        try:
            agent = squad.start("boxed", cwd=repo, worktree=True, sandbox=True, review=True)
            assert agent.sandbox is not None
            await agent.ready()
            assert agent.worktree.path == worktree
            first = await agent.send("go")
            assert "relinked" in first.text and "filter" in (admin / "config.worktree").read_text()  # from inside
            assert (worktree / ".git").read_text().startswith(f"gitdir: {worktree / '.forged'}")
            assert "notes.txt" in {e.rel for e in agent.edit_review.pending if hasattr(e, "rel")}  # reviewed
            await agent.send("again")  # the checkpoint before it: the kernel's recorded admin folder, not .git
            cp = agent.checkpoints[-1]
            assert cp.turn == 2 and cp.git_dir is not None and ran(marks) == []
            stat = await agent.worktree.diffstat()
            assert "notes.txt" in stat.paths
            result = await squad.merge("boxed")
            assert result.ok, result
            assert (repo / "notes.txt").read_text() == "a\nagent\n"
            await squad.discard("boxed", force=True)
            return ran(marks)
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()

    assert run(go()) == []
