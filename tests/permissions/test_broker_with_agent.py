"""Rule plugins with a real agent: the squad's broker, team-rules on for the project, the
shipped ``fake`` agent asking to run commands over real pipes."""

from __future__ import annotations

import asyncio
import inspect
import re
import time
from pathlib import Path

import pytest
from kernel_client import left_behind, processes_named

from escouade_nb.core.conversation import Permission
from escouade_nb.manifest.discovery import HarnessRef
from escouade_nb.manifest.project import Project
from escouade_nb.permissions.interfaces import PermissionAgent, PermissionRequest
from escouade_nb.permissions.commands import CommandError, journal_command, plugins_command
from escouade_nb.engine.squad import Squad
from escouade_nb.widgets.journal_view import JournalView
from escouade_nb.widgets.tables import plugins_html

TEAM_RULES_PROGRAM = "plugins/team-rules/team_rules.py"


@pytest.fixture(scope="module", autouse=True)
def no_orphan_plugins():
    before = set(processes_named(TEAM_RULES_PROGRAM))
    yield
    left = left_behind(TEAM_RULES_PROGRAM, before)
    assert not left, f"team-rules processes left behind: {sorted(left)}"


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    monkeypatch.setenv("ESCOUADE_NB_CONFIG_DIR", str(tmp_path / "config"))
    work = tmp_path / "work"
    work.mkdir()
    return work


def satisfies_the_seam(card) -> bool:
    """The engine's card is what the broker is typed against (permissions/interfaces.py)."""
    agent = card.agent
    choose = list(inspect.signature(card.choose).parameters)
    protocol = list(inspect.signature(PermissionRequest.choose).parameters)[1:]  # without self
    return (isinstance(card, PermissionRequest) and isinstance(agent, PermissionAgent)
            and isinstance(card.permission, Permission) and choose == protocol
            and isinstance(agent.name, str) and isinstance(agent.cwd, Path)
            and (agent.project is None or isinstance(agent.project, Project))
            and (agent.harness is None or isinstance(agent.harness, HarnessRef)))


async def settle(card, timeout: float = 30.0) -> None:
    """Wait until the policies are done with the card (settled, or the user is called)."""
    deadline = time.monotonic() + timeout
    while card.permission.deciding and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


def test_team_rules_decide_for_the_fake_agent(scratch: Path):
    async def main():
        squad = Squad()
        listing = plugins_command(squad.rules, ["on", "team-rules", "--project", str(scratch)])
        agent = squad.start("fake", cwd=scratch)
        out = {}
        seams = []
        try:
            await agent.ready()
            assert agent.project.folder == scratch.resolve()
            for cmd in ("rm -rf build", "npm test", "cargo build"):
                turn = agent.send(f"run {cmd}")
                card = await agent.next_permission(timeout=60)
                await settle(card)
                status = agent.status
                seams.append(satisfies_the_seam(card))
                if card.state == "pending":
                    assert card.choose("allow_once")  # the user decides
                result = await turn
                out[cmd] = (card, status, result.text, card._future.result())
            query = journal_command(squad.rules, ["team-rules"])  # data; the magic shows it as a JournalView
            view = JournalView(query.journal, plugin=query.plugin, kind=query.kind, names=query.names)
            assert repr(view) == repr(query)  # the user sees what the data says
            view.close()
            assert seams == [True] * 3
            return listing, out, repr(query), repr(plugins_command(squad.rules, ["--project", str(scratch)]))
        finally:
            await agent.close()
            await squad.rules.aclose()

    listing, out, journal, listing_after = asyncio.run(asyncio.wait_for(main(), 90))
    assert re.search(r"team-rules\s+Team rules\s+on  \(turned on for this project\)", repr(listing))

    card, status, text, answer = out["rm -rf build"]
    assert card.permission.answered_by == "Team rules via Escouade"
    assert card.permission.message == "no rm -rf here"
    assert card.label == "Denied by Team rules via Escouade — no rm -rf here"
    assert answer["outcome"] == "selected" and answer["optionId"] == "reject-once"  # never "cancelled"
    # the agent is told who refused, never that the user did
    assert answer["_meta"]["escouade"]["message"] == "Refused by Team rules through Escouade: no rm -rf here"
    assert text == "I did not run `rm -rf build`. I was told: Refused by Team rules through Escouade: no rm -rf here"

    card, status, text, answer = out["npm test"]
    assert card.permission.answered_by == "Team rules via Escouade"
    assert card.label == "Allowed by Team rules via Escouade"
    assert answer["optionId"] == "allow-once"  # never widened to "always"
    assert text.startswith("Ran `npm test`")

    card, status, text, answer = out["cargo build"]
    assert status == "waiting"  # no plugin settled it: the user was called
    assert card.permission.answered_by == "you"

    lines = [re.sub(r"^\d\d:\d\d:\d\d  ", "", x) for x in journal.splitlines()[1:]]
    assert [re.sub(r"\(\d+ ms\)", "(N ms)", x) for x in lines] == [
        "Decision  refused Bash rm -rf build (N ms): no rm -rf here",
        "Decision  allowed Bash npm test (N ms)",
        "Decision  did not decide Bash cargo build (N ms): it answered ask; the user is asked",
    ]
    assert re.search(r"team-rules .* on  \(turned on for this project\); running \(pid \d+\)", listing_after)


def test_a_shipped_rule_plugin_is_off_until_turned_on_and_private_projects_stay_private(scratch: Path):
    async def main():
        squad = Squad()
        # off by default (shipped): the fake agent's request goes straight to the user
        agent = squad.start("fake", cwd=scratch, private=True)
        try:
            await agent.ready()
            assert agent.project.private
            turn = agent.send("run rm -rf build")
            card = await agent.next_permission(timeout=60)
            await settle(card)
            state_before = card.state
            card.choose("reject_once")
            await turn
            running = [p.state for p in squad.rules.host.processes.values() if p.running]
            with pytest.raises(CommandError):
                plugins_command(squad.rules, ["on", "no-such-plugin"])
            with pytest.raises(CommandError):
                plugins_command(squad.rules, ["sideways", "team-rules"])
            return state_before, running, repr(plugins_command(squad.rules, ["--project", str(scratch)]))
        finally:
            await agent.close()
            await squad.rules.aclose()

    state_before, running, listing = asyncio.run(asyncio.wait_for(main(), 60))
    assert state_before == "pending"
    assert running == []  # nothing was started for nobody
    assert "team-rules" in listing and "off (shipped: off until turned on)" in listing


def test_which_rule_plugins_guard_an_agent_and_how_to_guard_one_started_elsewhere(scratch: Path, tmp_path: Path):
    """Issue 16: ``plugins on`` says which project (folder) it applied to and which running
    agents it leaves unguarded; ``agent.rules_guarding()`` / ``agent.rules_hint()`` tell a
    view, and the hint's command, run as given, guards the agent started with ``--cwd``."""
    import shlex

    elsewhere = tmp_path / "other project"  # a space: the command quotes it
    elsewhere.mkdir()

    async def main():
        squad = Squad()
        here = squad.start("fake", cwd=scratch, name="here")
        away = squad.start("fake", cwd=elsewhere, name="away")
        try:
            await here.ready()
            await away.ready()
            pid = squad.rules.find("team-rules")
            before_on = (here.rules_guarding(), here.rules_hint())
            on = plugins_command(squad.rules, ["on", "team-rules", "--project", str(scratch)], [here, away])
            processes = dict(squad.rules.host.processes)
            guards = {a.name: (a.rules_guarding(), a.rules_hint()) for a in (here, away)}
            assert squad.rules.host.processes == processes  # asking starts and makes nothing
            hint = away.rules_hint()
            command = hint.split("`")[1]  # as a user would paste it
            assert command.startswith("%escouade plugins on team-rules --project ")
            plugins_command(squad.rules, shlex.split(command)[2:])
            after = away.rules_guarding()
            turn = away.send("run rm -rf build")
            card = await away.next_permission(timeout=60)
            await settle(card)
            await turn
            off = plugins_command(squad.rules, ["off", "team-rules", "--project", str(scratch)], [here, away])
            return (pid, before_on, repr(on), plugins_html(on), guards, hint, after, card, repr(off),
                    here.rules_guarding())
        finally:
            await here.close()
            await away.close()
            await squad.rules.aclose()

    pid, before_on, on, on_html, guards, hint, after, card, off, here_after_off = \
        asyncio.run(asyncio.wait_for(main(), 90))
    guarded = [(pid, "Team rules")]
    # shipped team-rules is off until turned on: nobody is guarded, and the hint says how, for its folder
    assert before_on[0] == []
    assert before_on[1] == (f"No rule plugin guards project work ({scratch.resolve()}): `%escouade plugins on "
                            f"team-rules --project {scratch.resolve()}` turns Team rules on for it")
    lines = on.splitlines()
    assert lines[0] == (f"team-rules turned on for project work ({scratch.resolve()}) only: it guards the agents "
                        f"working there; for another folder: `%escouade plugins on team-rules --project DIR`")
    assert lines[1] == (f"  not guarded by it: agent away in {elsewhere.resolve()} — `%escouade plugins on team-rules "
                        f"--project {shlex.quote(str(elsewhere.resolve()))}`")
    assert lines[2].startswith("Rule plugins for project work")
    assert f"turned on for project work ({scratch.resolve()}) only" in on_html
    assert guards["here"] == (guarded, None)
    assert guards["away"][0] == [] and "other project" in guards["away"][1]
    assert after == guarded and [tuple(g) for g in after] == guarded and after[0].name == "Team rules"
    assert card.label == "Denied by Team rules via Escouade — no rm -rf here"  # the hint's command guards it
    assert off.splitlines()[0] == f"team-rules turned off for project work ({scratch.resolve()}) only"
    assert here_after_off == []


def test_rules_guarding_is_side_effect_free_and_a_worktree_agent_is_pointed_at_its_own_project(scratch: Path):
    from types import SimpleNamespace

    from escouade_nb.engine.agent import Agent
    from escouade_nb.manifest.project import project_id

    repo, wt = scratch / "repo", scratch / "repo.worktrees" / "w"
    (repo / "sub").mkdir(parents=True)
    (wt / "sub").mkdir(parents=True)

    async def main():
        squad = Squad()
        squad.rules.host.refresh()
        ref = squad.find("fake")
        project = Project(id=project_id(repo / "sub"), name="sub", folder=wt)  # as Squad.start makes it
        agent = Agent(ref, program="unused", cwd=wt / "sub", project=project, policies=[squad.rules.broker])
        agent.in_worktree(SimpleNamespace(path=wt, repo=repo))
        bare = Agent(ref, program="unused", cwd=scratch)  # not the squad's: no rule plugins at all
        procs = dict(squad.rules.host.processes)
        out = agent.rules_guarding(), agent.rules_hint(), agent.project_folder, bare.rules_guarding(), bare.rules_hint()
        assert squad.rules.host.processes == procs  # nothing made, nothing started
        return out

    guarding, hint, folder, bare_guarding, bare_hint = asyncio.run(main())
    assert guarding == [] and folder == (repo / "sub").resolve()
    assert f"--project {(repo / 'sub').resolve()}`" in hint  # the folder whose project it is, not the worktree
    assert bare_guarding == [] and bare_hint.startswith("No rule plugin answers ")
