"""A hostile agent's repository against the kernel's own bookkeeping git (engine/kernel_git.py):
the checkpoint taken before its next turn, the rewind, the review's listing. The agent writes
filters, fsmonitor, hooks, includes, drivers and attributes into its repository (git_attacks.py,
planted by the scripted agent's own process, sandboxed in one test); the kernel's git must run
none of them and still do its job."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from escouade_nb.core.conversation import Conversation
from escouade_nb.engine.review.cell_review import EditReview
from escouade_nb.engine.review.file_review import FileWatch
from git_attacks import plant, ran
from git_repos import base_repo, use_git_env
from scripted_agent import P_INIT, P_NEW, _chunk
from deadlines import run

ATTACKS = Path(__file__).resolve().parent / "git_attacks.py"
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap is not installed (apt-get install bubblewrap)")


def prompt(rid: int) -> str:
    return (f'C> {{"jsonrpc":"2.0","id":{rid},"method":"session/prompt","params":{{"sessionId":"s1",'
            f'"prompt":"$ANY"}}}}')


def answer(rid: int, text: str) -> str:
    return f'A> {_chunk(text, "s1")}\nA> {{"jsonrpc":"2.0","id":{rid},"result":{{"stopReason":"end_turn"}}}}'


def planting_turns(ws: Path, marks: Path, cwd: str = "$WS", *, best_effort: bool = False) -> str:
    """Turn 1: the agent plants every attack with its own process and changes a tracked file
    (``best_effort``: what its sandbox refuses is skipped, said as ``REFUSED=[paths]``);
    turn 2: a plain answer (the kernel took a checkpoint before it)."""
    new = ('C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"' + cwd + '","mcpServers":[]}}\n'
           'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}')
    plant_it = {"run": [sys.executable, str(ATTACKS), str(ws / ".git"), str(ws), str(marks),
                        *(["--best-effort"] if best_effort else [])]}
    change = {"run": ["sh", "-c", "printf 'agent line\\r\\n' > notes.txt && echo changed"]}
    return "\n".join([P_INIT, new, prompt(2), f"!> {json.dumps(plant_it)}", f"!> {json.dumps(change)}",
                      answer(2, "planted"), prompt(3), answer(3, "two")])


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("ESCOUADE_NB_CHECKPOINTS_DIR", str(tmp_path / "state"))
    use_git_env(monkeypatch)
    marks = tmp_path / "marks"
    marks.mkdir()
    return marks


def user_repo(ws: Path) -> Path:
    return base_repo(ws, {".gitignore": "*.log\n", "notes.txt": "user line\n", "keep.txt": "kept\n"})


def private_show(git_dir: str, commit: str, path: str) -> bytes:
    """A file of a checkpoint, read from the kernel's private repository (its own config only)."""
    return subprocess.run(["git", "--git-dir", git_dir, "cat-file", "blob", f"{commit}:{path}"], check=True,
                          capture_output=True, env={"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
                                                    "PATH": "/usr/bin:/bin"}).stdout


def test_a_checkpoint_and_a_rewind_run_nothing_the_agent_planted_in_its_repository(script, tmp_path, env):
    """The agent process plants filters, fsmonitor, hooks, an include, drivers and attributes in
    turn 1; the checkpoint before turn 2 and two rewinds run none of them; the checkpoint holds
    the bytes as written (no clean filter, no autocrlf); the user's index is never written."""
    marks = env
    ws = user_repo(tmp_path / "proj")
    s = script(planting_turns(ws, marks), "\n".join([P_INIT, P_NEW]), "\n".join([P_INIT, P_NEW]), ws=ws)

    async def go():
        async with s.running() as agent:
            first = await agent.send("first")
            assert "[exit 0] planted" in first.text and "[exit 0] changed" in first.text
            assert (ws / ".gitattributes").exists() and "filter" in (ws / ".git" / "config").read_text()
            index = (ws / ".git" / "index").read_bytes()  # as the agent left it (its fsmonitor extension)
            await agent.send("second")
            assert ran(marks) == []
            assert [cp.turn for cp in agent.checkpoints] == [1, 2]
            cp = agent.checkpoints[1]
            assert private_show(cp.git_dir, cp.commit, "notes.txt") == b"agent line\r\n"  # raw: no filter, no crlf
            assert private_show(cp.git_dir, cp.commit, "script.py") == (ws / "script.py").read_bytes()
            (ws / "notes.txt").write_text("later\n")
            await agent.rewind(cp)  # written back by checkout-index: no smudge, no post-checkout
            assert (ws / "notes.txt").read_bytes() == b"agent line\r\n"
            await agent.rewind(agent.checkpoints[0])  # the planted files removed, the user's line back
            assert (ws / "notes.txt").read_text() == "user line\n" and not (ws / ".gitattributes").exists()
            assert ran(marks) == []
            return index
    index = run(go())
    assert ran(marks) == []
    assert (ws / ".git" / "index").read_bytes() == index


def test_the_review_listing_runs_nothing_planted_and_keeps_the_ignored_set(tmp_path, env, monkeypatch):
    """The review's ``ls-files`` over a planted repository: nothing runs; tracked and untracked
    files are listed, ignored ones (``.gitignore``, ``info/exclude``, the user's global
    ``core.excludesFile``) left out; the user's index is not written."""
    marks = env
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f"[core]\n\texcludesFile = {home / 'global-ignore'}\n")
    (home / "global-ignore").write_text("*.secret\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    ws = user_repo(tmp_path / "proj")
    (ws / ".git" / "info").mkdir(exist_ok=True)
    (ws / ".git" / "info" / "exclude").write_text("*.local\n")
    plant(ws / ".git", ws, marks)
    index = (ws / ".git" / "index").read_bytes()

    async def go():
        review, conversation = EditReview(), Conversation()
        watch = FileWatch(review, ws, conversation, lambda: None, lambda: set())
        await watch.before_turn()
        (ws / "keep.txt").write_text("changed\n")
        (ws / "new.txt").write_text("new\n")
        (ws / "run.log").write_text("ignored by .gitignore\n")
        (ws / "x.local").write_text("ignored by info/exclude\n")
        (ws / "key.secret").write_text("ignored by the global excludes file\n")
        await watch.after_turn()
        return watch.git, sorted(e.rel for e in review.pending)

    used_git, pending = run(go())
    assert ran(marks) == []
    assert used_git is True
    assert pending == ["keep.txt", "new.txt"]
    assert (ws / ".git" / "index").read_bytes() == index


@needs_bwrap
def test_a_sandboxed_agent_planting_in_its_repository_gets_a_checkpoint_that_runs_none_of_it(script, tmp_path, env,
                                                                                             monkeypatch):
    """The same plant, by an agent started with ``sandbox=True`` (its own process under bwrap):
    its sandbox keeps ``.git/config``, ``.git/hooks`` and ``.git/info`` read-only (refused,
    skipped), the rest is planted (``.gitattributes``, its own hooks folder, an include, the
    index's fsmonitor extension); the kernel takes the checkpoint before its next turn outside
    bwrap and runs none of it."""
    from escouade_nb.engine.squad import Squad

    marks = env
    plugins = tmp_path / "plugins"
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    ws = user_repo(tmp_path / "proj")
    s = script(planting_turns(ws, marks, best_effort=True), ws=ws, name="boxed")
    s.install_sandboxed(plugins)

    async def go():
        squad = Squad()
        try:
            agent = squad.start("boxed", cwd=ws, sandbox=True)
            assert agent.sandbox is not None
            await agent.ready()
            text = (await agent.send("first")).text
            assert text.endswith("planted")
            refused = json.loads(text.split("REFUSED=", 1)[1].splitlines()[0])
            assert {str(ws / ".git" / n) for n in ("config", "hooks/pre-commit", "info/attributes")} <= set(refused)
            assert "filter" not in (ws / ".git" / "config").read_text()  # read-only in the sandbox
            assert "filter=esc" in (ws / ".gitattributes").read_text()  # planted from inside the sandbox
            await agent.send("second")
            assert ran(marks) == []
            return [cp.turn for cp in agent.checkpoints], agent.checkpoints[-1]
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()

    turns, cp = run(go())
    assert turns == [1, 2]
    assert private_show(cp.git_dir, cp.commit, "notes.txt") == b"agent line\r\n"
    assert ran(marks) == []
    s.assert_ok()
