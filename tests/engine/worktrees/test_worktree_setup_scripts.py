"""A worktree ``setup`` that names a script of the repository (finding 6b): the card shows the
script whole (a binary one by its size and SHA-256), the kept confirmation is keyed by the
commands and the scripts' SHA-256 — a changed script asks again —, and a script the worktree
would run that is not the one shown is not run. Real git, the shipped ``fake`` agent, real
shell commands; the card answered from Python as a user would."""

import asyncio
import hashlib

import pytest

from escouade_nb.engine.squad import Squad
from git_repos import base_repo, use_git_env
from git_repos import git as sh
from deadlines import run


@pytest.fixture
def repo(tmp_path, monkeypatch):
    use_git_env(monkeypatch)
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    monkeypatch.setenv("ESCOUADE_NB_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("ESCOUADE_NB_CHECKPOINTS_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    marker = tmp_path / "ran"
    return base_repo(tmp_path / "proj", {
        "scripts/setup.sh": f"#!/bin/sh\necho v1 >> {marker}\n",
        "tool.bin": b"\0\1binary",
        ".escouade.yml": 'name: proj\nworktree:\n  setup: "./scripts/setup.sh && sh -n tool.bin || true"\n',
    }, executable=["scripts/setup.sh"])


def card_text(card) -> str:
    return "\n".join(c.get("content", {}).get("text", "") for c in card.request.content)


async def closing(squad: Squad) -> None:
    await asyncio.gather(*(a.close() for a in squad.agents.values()))
    await squad.aclose()


def test_the_card_shows_the_script_a_changed_script_asks_again_an_unchanged_one_does_not(repo, tmp_path):
    marker = tmp_path / "ran"
    script = repo / "scripts" / "setup.sh"

    async def go():
        squad = Squad()
        try:
            one = squad.start("fake", cwd=repo, name="one", worktree=True)
            card = await one.next_permission(timeout=60)
            text = card_text(card)
            assert f"    echo v1 >> {marker}" in text  # the script's content, whole
            digest = hashlib.sha256(script.read_bytes()).hexdigest()
            assert f"scripts/setup.sh ({len(script.read_bytes())} bytes, SHA-256 {digest})" in text
            binary = hashlib.sha256(b"\0\1binary").hexdigest()
            assert f"tool.bin (8 bytes, SHA-256 {binary}), which they run: binary" in text
            assert card.request.raw_input["files"] == {"scripts/setup.sh": digest, "tool.bin": binary}
            card.choose("run")
            await one.ready()
            assert marker.read_text() == "v1\n"

            two = squad.start("fake", cwd=repo, name="two", worktree=True)
            await two.ready()  # the same command and the same script: not asked
            assert two.pending_cards == [] and marker.read_text() == "v1\nv1\n"

            script.write_text(f"#!/bin/sh\necho v2 >> {marker}\n")  # the command's text is the same
            sh("commit", "-qam", "setup v2", cwd=repo)
            three = squad.start("fake", cwd=repo, name="three", worktree=True)
            card = await three.next_permission(timeout=60)  # asked again: the script changed
            assert f"    echo v2 >> {marker}" in card_text(card)
            card.choose("run")
            await three.ready()
            assert marker.read_text() == "v1\nv1\nv2\n"

            script.write_text(f"#!/bin/sh\necho uncommitted >> {marker}\n")  # shown, but not what the worktree has
            four = squad.start("fake", cwd=repo, name="four", worktree=True)
            card = await four.next_permission(timeout=60)
            assert "echo uncommitted" in card_text(card)
            card.choose("run")
            with pytest.raises(Exception) as failed:
                await four.ready()
            assert "scripts/setup.sh in the worktree is not the file you confirmed" in str(failed.value)
            assert marker.read_text() == "v1\nv1\nv2\n"  # the committed v2 script did not run unseen
        finally:
            await closing(squad)
    run(go())


def test_a_cleanup_script_the_agent_changed_in_its_worktree_is_not_run_an_unchanged_one_is(repo, tmp_path):
    marker = tmp_path / "cleaned"
    (repo / "scripts" / "cleanup.sh").write_text(f"#!/bin/sh\necho clean >> {marker}\n")
    (repo / "scripts" / "cleanup.sh").chmod(0o755)
    (repo / ".escouade.yml").write_text('name: proj\nworktree:\n  cleanup: "sh scripts/cleanup.sh"\n')
    sh("add", "-A", cwd=repo)
    sh("commit", "-qm", "cleanup", cwd=repo)

    async def go():
        squad = Squad()
        try:
            a = squad.start("fake", cwd=repo, name="a", worktree=True)
            card = await a.next_permission(timeout=60)
            assert f"    echo clean >> {marker}" in card_text(card)
            card.choose("run")
            await a.ready()
            b = squad.start("fake", cwd=repo, name="b", worktree=True)
            await b.ready()  # confirmed: the same command and script
            (b.worktree.path / "scripts" / "cleanup.sh").write_text(f"#!/bin/sh\necho agent >> {marker}\n")
            await squad.discard("b", force=True)  # its copy changed: not run
            assert not marker.exists()
            assert any("scripts/cleanup.sh in the worktree is not the file you confirmed" in n
                       for n in [i.text for i in b.conversation.items if type(i).__name__ == "Notice"])
            await squad.discard("a")
            assert marker.read_text() == "clean\n"
        finally:
            await closing(squad)
    run(go())
