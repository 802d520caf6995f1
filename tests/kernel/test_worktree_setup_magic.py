"""``%escouade NAME --worktree`` in a real kernel with a ``.escouade.yml`` that sets worktrees up
(issue 25.3): the confirmation card in the agent's view, answered by the click message a
browser sends; the setup's output in the view; no card the second time; ``%escouade discard``
running the cleanup; ``worktree: false`` refusing in one line."""

from __future__ import annotations

import json
import subprocess

import pytest

from kernel_client import Kernel, act, buttons_of, kernel_with_env
from git_repos import GIT_ENV as GIT

pytestmark = pytest.mark.kernel



def git(*args, cwd) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**GIT, "PATH": "/usr/bin:/bin"}).stdout


@pytest.fixture
def kernel_in_repo(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    git("init", "-q", "-b", "main", cwd=ws)
    (ws / "notes.txt").write_text("a\n")
    git("add", "notes.txt", cwd=ws)
    git("commit", "-qm", "base", cwd=ws)
    (ws / ".env").write_text("TOKEN=from-the-main-worktree\n")
    (ws / ".escouade.yml").write_text(
        "worktree:\n  copy: [.env]\n  setup: |\n    echo setup-says-hello\n    cat .env\n"
        f"  cleanup: echo cleaned > {tmp_path / 'cleaned'}\n")
    env = {"ESCOUADE_NB_PLUGINS_DIR": str(tmp_path / "plugins"), "ESCOUADE_NB_CONFIG_DIR": str(tmp_path / "config"),
           "ESCOUADE_NB_TRANSCRIPTS_DIR": str(tmp_path / "transcripts"),
           "ESCOUADE_NB_JOURNAL_DIR": str(tmp_path / "journal"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"), **GIT}
    k = kernel_with_env(ws, env)
    k.run("%load_ext escouade_nb\nimport json\nfrom escouade_nb.widgets import views_of")
    try:
        yield k, ws, tmp_path
    finally:
        k.run("from escouade_nb import get_squad\nimport asyncio\n"
              "await asyncio.gather(*(a.close() for a in get_squad().agents.values()))", allow_error=True)
        k.shutdown()


def _click(kernel: Kernel, agent: str, label: str) -> str:
    model_id, html = json.loads(kernel.run(
        f"print(json.dumps([views_of({agent})[0].model_id, views_of({agent})[0].card_html(card)]))").text)
    buttons = {b["label"]: b for b in buttons_of(html)}
    act(kernel, model_id, {"act": "choose", "key": buttons[label]["key"], "value": buttons[label]["value"]})
    return html


def test_the_magic_asks_once_shows_the_setup_and_discard_cleans_up(kernel_in_repo):
    kernel, ws, tmp = kernel_in_repo
    worktree = ws.parent / "ws.worktrees" / "a"
    kernel.run("a = %escouade fake --worktree --as a\ncard = await a.next_permission(timeout=60)")
    assert not worktree.exists()  # nothing made before the answer
    html = _click(kernel, "a", "Run (remember for this folder)")
    assert "echo setup-says-hello" in html and "cat .env" in html  # the whole command
    assert str(worktree) in html and str(ws / ".escouade.yml") in html  # the folder, the file that asks
    out = kernel.run("await a.ready()\nprint(a.status, card.label)\n"
                     "print('setup-says-hello' in views_of(a)[0].static_body(), "
                     "'from-the-main-worktree' in views_of(a)[0].static_body())").text
    assert out.split("\n")[0].startswith("idle") and "True True" in out
    assert (worktree / ".env").read_text() == "TOKEN=from-the-main-worktree\n"

    out = kernel.run("b = %escouade fake --worktree --as b\nawait b.ready()\nprint(len(b.pending_cards), b.status)").text
    assert "0 idle" in out  # confirmed once for this folder: no card

    kernel.run("%escouade discard a")
    kernel.run("import asyncio, time\nend = time.monotonic() + 60\n"
               "while a.worktree is not None and time.monotonic() < end:\n    await asyncio.sleep(0.05)")
    assert (tmp / "cleaned").read_text() == "cleaned\n" and not worktree.exists()


def test_worktree_false_refuses_the_magic_in_one_line(kernel_in_repo):
    kernel, ws, _tmp = kernel_in_repo
    (ws / ".escouade.yml").write_text("worktree: false\n")
    res = kernel.run("%escouade fake --worktree --as n", allow_error=True)
    said = (res.error or "") + res.text
    assert f"{ws / '.escouade.yml'} says `worktree: false`" in said and "start it without --worktree" in said
    assert not (ws.parent / "ws.worktrees").exists()
