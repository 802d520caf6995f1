"""A hostile agent against its repository's main ``.git`` folder (issue 32, red team RT-3, RT-4,
RT-12): a ``.git/commondir`` planted (a name a main ``.git`` never has, so no bind of an existing
file covered it) sends git — the kernel's ``git worktree add`` for another agent, the user's own
``git status`` — to a copy of ``.git`` with the agent's config, hooks and fsmonitor; ``mv .git``
moves the read-only files away with it and a new ``.git`` takes its place.

A sandboxed agent's main ``.git`` is bound read-only whole: its own process is refused by the
system (``Read-only file system``), its client file system by the confinement
(``read_only_in_sandbox``). A ``commondir`` planted from outside (an agent that is not
sandboxed) makes the kernel refuse the repository in one line: its checkpoint, its review's
listing and a worktree's making run nothing."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from escouade_nb.engine.squad import Squad
from git_repos import base_repo, use_git_env
from scripted_agent import P_INIT, P_NEW, P_PROMPT, _chunk, responses_to
from deadlines import run

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("pasta") is None,
                                 reason="bubblewrap or passt's pasta is not installed (apt-get install bubblewrap passt)")

END2 = 'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'


def evil_copy(repo: Path, marks: Path) -> str:
    """A shell script, run in ``repo``: a copy of ``.git`` (``.evilgit``) whose config names a
    hooks folder of the agent's and an fsmonitor, each leaving a mark in ``marks`` when run."""
    return "\n".join([
        "cp -r .git .evilgit && chmod -R u+w .evilgit && mkdir -p .evilgit/h",
        f"printf '#!/bin/sh\\ntouch {marks}/hook-$(basename $0)\\n' > .evilgit/h/post-checkout",
        "for h in reference-transaction pre-commit post-commit post-index-change; do "
        "cp .evilgit/h/post-checkout .evilgit/h/$h; done",
        "chmod +x .evilgit/h/*",
        "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\thooksPath = %s/.evilgit/h\\n"
        f"\\tfsmonitor = \"touch {marks}/fsmonitor; false\"\\n' \"$PWD\" > .evilgit/config"])


@pytest.fixture
def env(tmp_path, monkeypatch):
    use_git_env(monkeypatch)
    monkeypatch.setenv("ESCOUADE_NB_CHECKPOINTS_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    plugins = tmp_path / "plugins"
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
    marks = tmp_path / "marks"
    marks.mkdir()
    return plugins, marks


def _other(script, repo: Path, plugins: Path) -> None:
    """A second agent (not sandboxed), for which the kernel makes a git worktree."""
    other = script("\n".join([P_INIT, 'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":"$ANY"}',
                              'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}']), ws=repo, name="other")
    other.install(plugins)


def _marks(marks: Path) -> list[str]:
    return sorted(p.name for p in marks.iterdir())


@needs_bwrap
def test_a_sandboxed_agent_cannot_plant_a_commondir_nor_move_its_git_folder(script, tmp_path, env):
    """The agent's own process, in its main worktree: ``.git/commondir``, a new folder in
    ``.git``, ``mv .git`` (and a ``.git`` of its own in its place), a commit: each refused by
    the system; the kernel's ``git worktree add`` for another agent and the user's ``git
    status`` then run nothing of the agent's; the agent still reads its repository."""
    plugins, marks = env
    repo = base_repo(tmp_path / "proj", {"notes.txt": "a\n"})
    attack = "\n".join([
        evil_copy(repo, marks),
        "(echo ../.evilgit > .git/commondir) 2>&1 | tail -1 | sed 's/^/COMMONDIR: /'",
        "(mkdir .git/evil) 2>&1 | tail -1 | sed 's/^/MKDIR: /'",
        "(mv .git .git_old) 2>&1 | tail -1 | sed 's/^/MOVE: /'",
        "(mv .evilgit .git) 2>&1 | tail -1 | sed 's/^/REPLACE: /'",
        "echo b >> notes.txt",
        "(git commit -qam agent) 2>&1 | grep -o 'Read-only file system' | head -1 | sed 's/^/COMMIT: /'",
        "git log --oneline | wc -l | sed 's/^/LOG: /'",
        "git status --short | sed 's/^/STATUS: /'"])
    boxed = script("\n".join([P_INIT, P_NEW, P_PROMPT, "!> " + json.dumps({"run": ["sh", "-c", attack]}), END2]),
                   ws=repo, name="boxed")
    boxed.install_sandboxed(plugins)
    _other(script, repo, plugins)

    async def go():
        squad = Squad()
        try:
            agent = squad.start("boxed", cwd=repo, sandbox=True)
            await agent.ready()
            text = (await agent.send("go")).text
            other = squad.start("other", cwd=repo, worktree=True)  # the kernel's git in the main worktree
            await other.ready()
            return text
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()

    text = run(go())
    said = {what: next((line.split(f"{what}: ", 1)[1] for line in text.splitlines() if f"{what}: " in line), "")
            for what in ("COMMONDIR", "MKDIR", "MOVE", "COMMIT", "LOG")}
    for what in ("COMMONDIR", "MKDIR", "COMMIT"):
        assert "Read-only file system" in said[what], text
    assert "Device or resource busy" in said["MOVE"], text  # a mount point is not renamed
    assert said["LOG"] == "1" and "STATUS:  M notes.txt" in text, text  # it reads its repository
    assert not (repo / ".git" / "commondir").exists() and not (repo / ".git_old").exists()
    assert (repo / ".git" / "HEAD").is_file()
    subprocess.run(["git", "status"], cwd=repo, capture_output=True, check=True)  # the user's own git
    assert _marks(marks) == []


@needs_bwrap
def test_a_sandboxed_agents_client_fs_cannot_write_in_its_git_folder(script, tmp_path, env):
    """The same plant through the client file system (``fs/write_text_file``): ``.git/commondir``,
    ``.git/evil/config``, ``.git/HEAD`` refused as ``read_only_in_sandbox``, nothing written;
    a file of its worktree is written."""
    plugins, marks = env
    repo = base_repo(tmp_path / "proj", {"notes.txt": "a\n"})
    head = (repo / ".git" / "HEAD").read_bytes()
    config = f'[core]\n\tfsmonitor = "touch {marks}/fsmonitor; false"\n'
    writes = {100: (".git/commondir", "evil\n"), 101: (".git/evil/config", config),
              102: (".git/HEAD", "ref: refs/heads/evil\n"), 103: ("notes.txt", "written\n")}
    lines = [P_INIT, P_NEW, P_PROMPT]
    for rid, (rel, content) in writes.items():
        lines += ["A> " + json.dumps({"jsonrpc": "2.0", "id": rid, "method": "fs/write_text_file",
                                      "params": {"sessionId": "s1", "path": f"$WS/{rel}", "content": content}}),
                  'C> {"jsonrpc":"2.0","id":%d}' % rid]
    lines.append(END2)
    boxed = script("\n".join(lines), ws=repo, name="boxed")
    boxed.install_sandboxed(plugins)

    async def go():
        squad = Squad()
        try:
            agent = squad.start("boxed", cwd=repo, sandbox=True)
            await agent.ready()
            await agent.send("go")
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()

    run(go())
    received = boxed.received()
    for rid in (100, 101, 102):
        (answer,) = responses_to(received, rid)
        assert answer.get("error", {}).get("data", {}).get("reason") == "read_only_in_sandbox", answer
    (answer,) = responses_to(received, 103)
    assert "error" not in answer, answer
    assert not (repo / ".git" / "commondir").exists() and not (repo / ".git" / "evil").exists()
    assert (repo / ".git" / "HEAD").read_bytes() == head and (repo / "notes.txt").read_text() == "written\n"
    subprocess.run(["git", "status"], cwd=repo, capture_output=True, check=True)
    assert _marks(marks) == []


def test_a_commondir_planted_from_outside_is_refused_by_the_kernel_in_one_line(script, tmp_path, env):
    """An agent that is not sandboxed plants ``.git/commondir`` (its own process, turn 1): the
    review's listing after that turn, then an agent started in the repository afterwards (its
    first checkpoint, its review's listing) and a worktree made for another agent each refuse
    the repository in one line naming the file; nothing planted runs."""
    plugins, marks = env
    repo = base_repo(tmp_path / "proj", {"notes.txt": "a\n"})
    plant = evil_copy(repo, marks) + "\necho ../.evilgit > .git/commondir && echo planted"
    plain = script("\n".join([P_INIT, P_NEW, P_PROMPT, "!> " + json.dumps({"run": ["sh", "-c", plant]}), END2]),
                   ws=repo, name="plain")
    plain.install(plugins)
    late = script("\n".join([P_INIT, P_NEW, P_PROMPT, f"A> {_chunk('late', 's1')}", END2]), ws=repo, name="late")
    late.install(plugins)
    _other(script, repo, plugins)

    def notices(agent) -> list[str]:
        return [getattr(i, "text", "") for i in agent.conversation.items if type(i).__name__ == "Notice"]

    async def go():
        squad = Squad()
        try:
            agent = squad.start("plain", cwd=repo, review=True)
            await agent.ready()
            await agent.send("go")
            assert (repo / ".git" / "commondir").is_file()
            second = squad.start("late", cwd=repo, review=True)
            await second.ready()
            await second.send("go")
            with pytest.raises(Exception) as refused:
                other = squad.start("other", cwd=repo, worktree=True)
                await other.ready()
            return str(refused.value), notices(agent), notices(second), [cp.turn for cp in second.checkpoints]
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()

    refusal, first, later, turns = run(go())
    assert "commondir" in refusal and "\n" not in refusal, refusal
    assert any(n.startswith("File review") and "commondir" in n for n in first), first
    assert turns == [], turns  # no checkpoint: refused
    assert any("No checkpoint" in n and "commondir" in n for n in later), later
    assert any(n.startswith("File review") and "commondir" in n for n in later), later
    assert _marks(marks) == []
