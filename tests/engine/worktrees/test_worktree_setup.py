"""``.escouade.yml``'s ``worktree: {copy, setup, cleanup}`` and ``worktree: false`` (issue 25.3):
real git repositories in temp folders, the shipped ``fake`` agent over real pipes, real shell
commands; the confirmation card answered from Python as a user would."""

import asyncio
import json
import re
import shutil
import socket
import time

import pytest

from escouade_nb.engine.squad import Squad, SquadError
from escouade_nb.manifest.project import ProjectFileError, read_worktree_config
from git_repos import base_repo, use_git_env
from git_repos import git as sh
from deadlines import run, until




@pytest.fixture
def repo(tmp_path, monkeypatch):
    use_git_env(monkeypatch)
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    monkeypatch.setenv("ESCOUADE_NB_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    r = base_repo(tmp_path / "proj", {"notes.txt": "a\n", ".escouade.yml": "name: proj\n"})
    (r / ".env").write_text("SECRET=42\n")  # untracked, not ignored: what `copy` is for
    (r / "data").mkdir()
    (r / "data" / "rows.csv").write_text("a,b\n1,2\n")
    return r


def config(repo, block: str) -> None:
    (repo / ".escouade.yml").write_text("name: proj\n" + block)


async def closing(squad: Squad) -> None:
    await asyncio.gather(*(a.close() for a in squad.agents.values()))
    await squad.aclose()


def notices(agent) -> list[str]:
    return [i.text for i in agent.conversation.items if type(i).__name__ == "Notice"]


def terminal_output(agent, title: str) -> tuple[str, bool | None]:
    for call in agent.conversation.items:  # items: tool_calls forgets its ids when the session starts
        if type(call).__name__ == "ToolCall" and call.title == title:
            term = next(iter(call.terminals.values()), {})
            return term.get("output", ""), term.get("running")
    return "", None


def test_the_worktree_block_is_read_and_checked(repo):
    config(repo, 'worktree:\n  copy: [".env", data/]\n  setup: |\n    echo one\n    echo two\n'
                 '  cleanup: "echo bye"\n  timeout: 20\n')
    got = read_worktree_config(repo)
    assert (got.copy, got.setup, got.cleanup, got.timeout, got.allowed) == (
        (".env", "data/"), "echo one\necho two", "echo bye", 20.0, True)
    assert got.file == repo / ".escouade.yml" and got.commands == {"setup": "echo one\necho two", "cleanup": "echo bye"}
    config(repo, "worktree: {copy: [.env], setup: make dev}\n")
    assert read_worktree_config(repo).setup == "make dev"
    config(repo, "worktree: false\n")
    assert read_worktree_config(repo).allowed is False
    config(repo, "private: true\n")
    assert read_worktree_config(repo) is None
    for block, field in [("worktree:\n  setpu: x\n", "worktree.setpu: unknown key"),
                         ("worktree:\n  copy: [../outside]\n", "worktree.copy[0]: '../outside' leaves the folder"),
                         ("worktree:\n  copy: [/etc/passwd]\n", "worktree.copy[0]"),
                         ("worktree:\n  setup: 3\n", "worktree.setup: a shell command"),
                         ("worktree:\n  timeout: 0\n", "worktree.timeout: seconds"),
                         ("worktree: [\n", "not YAML (line")]:
        config(repo, block)
        with pytest.raises(ProjectFileError) as bad:
            read_worktree_config(repo)
        assert str(bad.value).startswith(f"{repo / '.escouade.yml'}: ") and field in str(bad.value)
        assert "\n" not in str(bad.value)


def test_first_start_asks_copies_streams_the_setup_then_discard_runs_cleanup(repo, tmp_path):
    go_file, cleaned = tmp_path / "go", tmp_path / "cleaned"
    config(repo, f'worktree:\n  copy: [".env", "data/", "missing.txt"]\n'
                 f'  setup: "echo first; cat .env; while [ ! -e {go_file} ]; do sleep 0.05; done; '
                 f'echo second > data/made.txt; echo second"\n'
                 f'  cleanup: "echo cleaning; echo done > {cleaned}"\n')

    async def go():
        squad = Squad()
        try:
            agent = squad.start("fake", cwd=repo, name="a", worktree=True)
            card = await agent.next_permission(timeout=60)
            asked = card.request.raw_input
            assert asked["setup"].startswith("echo first; cat .env;") and asked["cleanup"].startswith("echo cleaning")
            assert asked["folder"] == str(repo.parent / "proj.worktrees" / "a")
            assert asked["file"] == str(repo / ".escouade.yml")
            assert agent.pending_cards == [card] and agent.status == "starting"
            assert not (repo.parent / "proj.worktrees" / "a").exists()  # nothing made before the answer
            assert [o["optionId"] for o in card.options] == ["run", "dont-run"]
            card.choose("run")

            # the setup's output reaches the conversation while it runs
            await until(lambda: "SECRET=42" in terminal_output(agent, "Worktree setup")[0], what="the setup's output")
            out, running = terminal_output(agent, "Worktree setup")
            assert "first" in out and "SECRET=42" in out and running is True and "second" not in out
            go_file.write_text("")
            await agent.ready()
            out, running = terminal_output(agent, "Worktree setup")
            assert out.rstrip().endswith("second") and running is False

            wt = agent.worktree.path
            assert (wt / ".env").read_text() == "SECRET=42\n" and (wt / "data" / "rows.csv").exists()
            assert (wt / "data" / "made.txt").read_text() == "second\n"  # setup ran in the worktree
            said = "\n".join(notices(agent))
            assert "Copied into the worktree: .env, data/" in said
            assert "Not copied, missing in" in said and "missing.txt" in said
            assert "Worktree setup exited with code 0" in said
            assert "allowed by you, kept for this folder" in said
            assert await agent.worktree.dirty() == []  # the copies are ignored in the worktree only
            assert "?? .env" in sh("status", "--porcelain", cwd=repo)  # the main worktree as it was
            kept = json.loads((tmp_path / "config" / "worktree-commands.json").read_text())
            assert kept["folders"][str(repo)]["setup"] == asked["setup"]

            await squad.discard("a")  # not refused as dirty; cleanup first
            assert cleaned.read_text() == "done\n" and not wt.exists()
            assert "Worktree cleanup exited with code 0" in "\n".join(notices(agent))
            journal = (tmp_path / "journal").rglob("*")
            text = "\n".join(p.read_text() for p in journal if p.is_file())
            assert "allowed by you" in text and "Worktree setup exited with code 0" in text
        finally:
            await closing(squad)
    run(go())


def test_a_confirmed_command_is_not_asked_again_a_changed_one_is_and_a_denial_runs_nothing(repo, tmp_path):
    marker = tmp_path / "ran"
    config(repo, f'worktree:\n  setup: "echo ran >> {marker}"\n')

    async def go():
        squad = Squad()
        try:
            first = squad.start("fake", cwd=repo, name="one", worktree=True)
            (await first.next_permission(timeout=60)).choose("run")
            await first.ready()
            second = squad.start("fake", cwd=repo, name="two", worktree=True)
            await second.ready()  # no card: the same command, the same folder
            assert second.pending_cards == [] and marker.read_text() == "ran\nran\n"
            assert any("as you confirmed them before" in n for n in notices(second))

            config(repo, f'worktree:\n  setup: "echo changed >> {marker}"\n')
            third = squad.start("fake", cwd=repo, name="three", worktree=True)
            card = await third.next_permission(timeout=60)
            assert card.request.raw_input["setup"] == f"echo changed >> {marker}"
            card.choose("dont-run")
            with pytest.raises(Exception) as failed:
                await third.ready()
            assert "were not allowed: nothing was made or run, the agent was not started" in str(failed.value)
            assert third.status == "failed" and third.worktree is None
            assert not (repo.parent / "proj.worktrees" / "three").exists() and marker.read_text() == "ran\nran\n"
            assert "escouade/three" not in sh("branch", "--list", cwd=repo)

            fourth = squad.start("fake", cwd=repo, name="four", worktree=True)
            (await fourth.next_permission(timeout=60)).choose("run")  # asked again: the denial was not kept
            await fourth.ready()
            assert marker.read_text() == "ran\nran\nchanged\n"
        finally:
            await closing(squad)
    run(go())


def test_a_failing_setup_says_its_exit_code_and_last_lines_and_keeps_the_worktree(repo):
    config(repo, 'worktree:\n  setup: "echo installing; echo no such package >&2; exit 3"\n'
                 '  cleanup: "echo cleaned"\n')

    async def go():
        squad = Squad()
        try:
            agent = squad.start("fake", cwd=repo, name="f", worktree=True)
            (await agent.next_permission(timeout=60)).choose("run")
            with pytest.raises(Exception) as failed:
                await agent.ready()
            text = str(failed.value)
            assert "worktree setup exited with code 3" in text and "no such package" in text
            assert "the worktree" in text and "is kept" in text and "\n" not in text
            assert agent.status == "failed" and agent.worktree is not None and agent.worktree.path.is_dir()
            out, running = terminal_output(agent, "Worktree setup")
            assert "installing" in out and "no such package" in out and running is False
            await squad.discard("f", force=True)  # the cleanup runs, then it is gone
            assert not (repo.parent / "proj.worktrees" / "f").exists()
            assert any("Worktree cleanup exited with code 0" in n for n in notices(agent))
        finally:
            await closing(squad)
    run(go())


def test_a_setup_past_its_timeout_is_killed_and_said(repo, tmp_path):
    config(repo, 'worktree:\n  setup: "echo waiting; sleep 60"\n  timeout: 1\n')

    async def go():
        squad = Squad()
        try:
            agent = squad.start("fake", cwd=repo, name="slow", worktree=True)
            (await agent.next_permission(timeout=60)).choose("run")
            with pytest.raises(Exception) as failed:
                await agent.ready()
            assert "worktree setup timed out after 1 s (killed)" in str(failed.value)
            assert "waiting" in str(failed.value)
            out, running = terminal_output(agent, "Worktree setup")
            assert running is False
        finally:
            await closing(squad)
    run(go())


def test_worktree_false_refuses_in_one_line_and_a_bad_file_names_its_field(repo):
    async def go():
        squad = Squad()
        try:
            config(repo, "worktree: false\n")
            with pytest.raises(SquadError) as refused:
                squad.start("fake", cwd=repo, name="n", worktree=True)
            assert str(refused.value) == (f"{repo / '.escouade.yml'} says `worktree: false`: agents of this folder do "
                                          f"not work in a git worktree; start it without --worktree")
            plain = squad.start("fake", cwd=repo, name="plain")  # without --worktree: as ever
            await plain.ready()
            config(repo, "worktree:\n  copy: [../x]\n")
            with pytest.raises(SquadError, match=r"\.escouade\.yml: worktree\.copy\[0\]"):
                squad.start("fake", cwd=repo, name="m", worktree=True)
            assert "m" not in squad.agents
        finally:
            await closing(squad)
    run(go())


def test_closing_while_the_card_waits_cancels_it_and_nothing_is_made(repo, tmp_path):
    config(repo, f'worktree:\n  setup: "echo x > {tmp_path / "ran"}"\n')

    async def go():
        squad = Squad()
        try:
            agent = squad.start("fake", cwd=repo, name="c", worktree=True)
            card = await agent.next_permission(timeout=60)
            await agent.close()
            assert card.state == "cancelled" and agent.status == "closed"
            assert not (repo.parent / "proj.worktrees" / "c").exists() and not (tmp_path / "ran").exists()
        finally:
            await closing(squad)
    run(go())


def test_a_resume_shows_the_setup_said_and_ran_and_its_last_lines(repo, tmp_path):
    from escouade_nb.engine.worktrees.worktree_setup import Confirmations
    from escouade_nb.manifest.project import read_worktree_config as read

    config(repo, 'worktree:\n  copy: [.env]\n  setup: "echo resumed-setup-line"\n')
    Confirmations().keep(repo, read(repo).commands, repo / ".escouade.yml")  # confirmed in an earlier kernel

    async def go():
        squad = Squad()
        try:
            agent = squad.start("fake", cwd=repo, name="rs", worktree=True)
            await agent.ready()
            assert agent.pending_cards == []
            path = agent.worktree.path
        finally:
            await closing(squad)
        again = Squad()
        try:
            back = again.resume("rs")
            await back.ready()
            said = [(i.text, i.detail) for i in back.conversation.items if type(i).__name__ == "Notice"]
            assert any("as you confirmed them before" in t for t, _ in said)
            assert any("Copied into the worktree: .env" in t for t, _ in said)
            assert any(t.startswith("Worktree setup exited with code 0") and "resumed-setup-line" in d for t, d in said)
            assert back.worktree.path == path and (path / ".env").exists()
        finally:
            await closing(again)
    run(go())


def test_the_worktrees_own_excludes_keep_the_global_ones_and_leave_the_main_worktree_alone(repo, tmp_path):
    from escouade_nb.engine.worktrees.worktree import Worktree
    from escouade_nb.engine.worktrees.worktree_setup import exclude_in_worktree

    (tmp_path / "xdg" / "git").mkdir(parents=True)
    (tmp_path / "xdg" / "git" / "ignore").write_text("*.log\n")  # the user's global excludes

    async def go():
        wt = await Worktree.create(repo, "ex")
        try:
            (wt.path / ".env").write_text("x\n")
            (wt.path / "run.log").write_text("x\n")
            (wt.path / "new.txt").write_text("x\n")
            assert sorted(await wt.dirty()) == [".env", "new.txt"]  # the global *.log already applies
            await exclude_in_worktree(wt, [".env"])
            await exclude_in_worktree(wt, [".env"])  # twice: one line
            assert await wt.dirty() == ["new.txt"]  # .env ignored, *.log still ignored
            exclude = (wt.path.parent.parent / "proj" / ".git" / "worktrees" / "ex" / "info" / "exclude")
            assert exclude.read_text().count("/.env") == 1
            (repo / "other.txt").write_text("x\n")
            status = sh("status", "--porcelain", cwd=repo)
            assert "?? .env" in status and "?? other.txt" in status  # the main worktree sees what it saw
        finally:
            await wt.discard(force=True)
    run(go())


def test_a_failing_or_unconfirmed_cleanup_is_said_and_the_discard_goes_on(repo, tmp_path):
    (tmp_path / "elsewhere").write_text("not yours\n")
    config(repo, 'worktree:\n  setup: "true"\n  cleanup: "echo cannot clean; exit 4"\n')

    async def go():
        squad = Squad()
        try:
            a = squad.start("fake", cwd=repo, name="fa", worktree=True)
            (await a.next_permission(timeout=60)).choose("run")
            await a.ready()
            path = a.worktree.path
            await squad.discard("fa")
            said = "\n".join(notices(a))
            assert "Worktree cleanup exited with code 4" in said and not path.exists()

            b = squad.start("fake", cwd=repo, name="fb", worktree=True)
            await b.ready()  # the same commands: confirmed
            config(repo, f'worktree:\n  setup: "true"\n  cleanup: "echo changed > {tmp_path / "ran"}"\n')
            await squad.discard("fb")  # a cleanup changed since you confirmed it: not run, said
            assert "Worktree cleanup of" in "\n".join(notices(b)) and "not run" in "\n".join(notices(b))
            assert not (tmp_path / "ran").exists() and not (repo.parent / "proj.worktrees" / "fb").exists()

            (repo / "link").symlink_to(tmp_path / "elsewhere")
            config(repo, 'worktree:\n  copy: [link]\n')
            c = squad.start("fake", cwd=repo, name="fc", worktree=True)
            with pytest.raises(Exception, match=r"worktree.copy: 'link' leads out of the repository"):
                await c.ready()
            assert not (repo.parent / "proj.worktrees" / "fc" / "link").exists()
        finally:
            await closing(squad)
    run(go())


@pytest.mark.skipif(not __import__("shutil").which("bwrap"), reason="bubblewrap (bwrap) is not installed")
@pytest.mark.skipif(shutil.which("pasta") is None, reason="passt's pasta is not installed (apt-get install passt)")
def test_a_sandboxed_agents_setup_has_a_network_of_its_own_cut_as_its_terminals(repo, tmp_path, own_processes):
    """Its setup runs as its client terminals do: its own network namespace and its own
    pasta — the port declared for the agent reached, another port of the host's loopback
    refused — and that pasta ends with the setup."""
    declared, other = (socket.create_server(("127.0.0.1", 0)) for _ in range(2))
    try:
        probe = "exec 3<>/dev/tcp/127.0.0.1/{} && echo {}-reached || echo {}-cut"
        line = "; ".join(f"bash -c '{probe.format(sock.getsockname()[1], name, name)}'"
                         for sock, name in ((declared, "declared"), (other, "other")))
        config(repo, f'worktree:\n  setup: "{line}"\n')

        async def go():
            squad = Squad()
            try:
                agent = squad.start("fake", cwd=repo, name="s", worktree=True,
                                    sandbox_ports=[declared.getsockname()[1]])
                (await agent.next_permission(timeout=60)).choose("run")
                await agent.ready()
                out, running = terminal_output(agent, "Worktree setup")
                assert running is False and "declared-reached" in out and "other-cut" in out, out
                return own_processes("--netns-only")
            finally:
                await closing(squad)

        pastas = run(go())
        assert len(pastas) <= 1  # the agent's own at most (the setup's ended with it)
        deadline = time.monotonic() + 30
        while own_processes("--netns-only") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not own_processes("--netns-only")
    finally:
        declared.close()
        other.close()


def test_a_sandboxed_agents_setup_runs_under_its_bubblewrap(repo, tmp_path):
    """``--sandbox --worktree``: the confirmed setup runs as the agent will, under its
    bubblewrap — it writes in the worktree, and its write into the main worktree is
    refused by the system (the file never appears)."""
    escaped = repo / "escaped.txt"
    config(repo, f'worktree:\n  setup: "echo inside > made.txt; echo outside > {escaped} || echo refused"\n')

    async def go():
        squad = Squad()
        try:
            agent = squad.start("fake", cwd=repo, name="s", worktree=True, sandbox=True)
            (await agent.next_permission(timeout=60)).choose("run")
            await agent.ready()
            out, running = terminal_output(agent, "Worktree setup")
            assert running is False and "refused" in out and "Read-only file system" in out, out
            assert (repo.parent / "proj.worktrees" / "s" / "made.txt").read_text() == "inside\n"
            assert not escaped.exists()
            assert agent.sandbox is not None and agent.worktree is not None
        finally:
            await closing(squad)

    run(go())


def test_an_answered_worktree_card_is_saved_as_answered_never_pending(repo):
    """The worktree commands' card is ours: no agent updates its call, which stayed ``pending``; its
    saved form read "● pending" above "✓ Allowed by you" (issue 34, finding 4). Answered, its call
    says so (completed when allowed, failed when not), and so do the saved form's HTML and text."""
    from escouade_nb.widgets import AgentView

    config(repo, 'worktree:\n  setup: "echo set up"\n')

    async def go():
        squad = Squad()
        try:
            agent = squad.start("fake", cwd=repo, name="a", worktree=True)
            view = AgentView(agent)
            try:
                card = await agent.next_permission(timeout=60)
                card.choose("run")
                await agent.ready()
                return card.permission.tool_call.status, view.companion_bundle()
            finally:
                view.close()
        finally:
            await closing(squad)

    status, saved = run(go(), timeout=120)
    assert status == "completed"
    html = re.sub(r"<style>.*?</style>", "", saved["text/html"], flags=re.S)
    word = re.search(r'● ([^<]*)</span> <b class="esc-title">Run the worktree commands', html)
    assert word is not None and word.group(1) != "pending", html  # on main: "● pending"
    assert "✓ Allowed by you: Run (remember for this folder)" in html, html
    line = next(ln for ln in saved["text/plain"].splitlines() if ln.startswith("[tool] Run the worktree commands"))
    assert "pending" not in line, line
