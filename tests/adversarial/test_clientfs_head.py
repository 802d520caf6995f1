"""The agent's head says what holds (issue 32): each protection in force — sandboxed, private,
reviewed — in a short word, with a sentence saying what it means, in the live view's head, its
text form, its saved form and ``%escouade``'s listing. A real scripted agent started by the
squad (under the real bubblewrap)."""

from __future__ import annotations

import asyncio
import html
import shutil

import pytest

from escouade_nb.engine.squad import Squad
from scripted_agent import P_INIT, P_NEW

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap is not installed (apt-get install bubblewrap)")

STARTS = "\n".join([P_INIT, P_NEW])
WORDS = ("sandboxed", "private", "reviewed")


@pytest.fixture
def installed(script, tmp_path, monkeypatch):
    """A scripted harness installed for the squad, its own files its state folder."""
    plugins = tmp_path / "plugins"
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    s = script(STARTS, STARTS, name="boxed")  # a run per start
    s.install_sandboxed(plugins)
    return s


def _shown(**start):
    async def go():
        from escouade_nb.widgets import AgentView
        from escouade_nb.widgets.tables import squad_html

        squad = Squad()
        try:
            agent = squad.start("boxed", **start)
            await agent.ready()
            view = AgentView(agent)
            try:
                return (view.head(), repr(view).splitlines()[0], view.companion_bundle(),
                        repr(squad.listing()), squad_html(squad.listing()))
            finally:
                view.close()
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()
    return asyncio.run(asyncio.wait_for(go(), 60))


@needs_bwrap
def test_the_head_of_a_sandboxed_private_reviewed_agent_says_each_protection(installed):
    head, first, saved, listing, listing_html = _shown(cwd=installed.ws, sandbox=True, private=True, review=True)
    assert " · sandboxed · private · reviewed" in head["where"]
    meanings = dict(head["protections"])
    assert list(meanings) == list(WORDS)
    assert "bubblewrap" in meanings["sandboxed"] and "its folder" in meanings["sandboxed"]
    assert "project folder" in meanings["private"] and "Keep or Reject" in meanings["reviewed"]
    assert " · sandboxed · private · reviewed" in first  # the text form
    assert " · sandboxed · private · reviewed" in saved["text/plain"].splitlines()[0]  # the saved forms
    for word in WORDS:
        assert f'title="{html.escape(meanings[word])}">{word}</span>' in saved["text/html"]
    agents = listing.split("\nAgents:", 1)[1]
    boxed_row = next(line for line in agents.splitlines() if line.strip().startswith("boxed "))
    assert boxed_row.endswith("(sandboxed, private, reviewed)")  # %escouade's listing
    assert all(f">{word}</span>" in listing_html for word in WORDS)


def test_a_private_agents_head_says_private_and_an_unprotected_one_says_none(installed):
    head, first, saved, listing, _html = _shown(cwd=installed.ws, private=True)
    assert " · private" in head["where"] and " · private" in first and " · private" in saved["text/plain"]
    assert [word for word, _meaning in head["protections"]] == ["private"]
    head, first, saved, listing, _html = _shown(cwd=installed.ws)
    assert head["protections"] == [] and not any(word in first for word in WORDS)
