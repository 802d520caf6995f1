"""Checkpoints and *Rewind to here* in a real kernel: the shipped fake agent edits files of a
git repository (with a stash entry and a dirty index) over two turns, the view's Rewind
click message puts the folder back byte for byte, and ``git status``, the index, branches
and stash are as they were."""

import json
import os

import pytest

from kernel_client import Kernel, act, wait_for
from git_repos import git as sh

pytestmark = pytest.mark.kernel




def files(root) -> dict:
    return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
            for d, dirs, names in os.walk(root) if ".git" not in d.split(os.sep) for f in names}


def repo_state(repo) -> dict:
    return {name: sh(*args, cwd=repo) for name, args in {
        "status": ("status", "--porcelain=v1", "-uall"), "staged": ("diff", "--cached"),
        "branches": ("branch", "-a", "-v"), "stash": ("stash", "list"), "head": ("rev-parse", "HEAD")}.items()}


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    ws = tmp_path_factory.mktemp("rewind-ws")
    sh("init", "-q", "-b", "main", cwd=ws)
    (ws / "notes.txt").write_text("a\n")
    (ws / "other.txt").write_text("o\n")
    sh("add", "-A", cwd=ws)
    sh("commit", "-qm", "base", cwd=ws)
    (ws / "other.txt").write_text("stashed\n")
    sh("stash", "push", "-q", cwd=ws)
    (ws / "other.txt").write_text("staged\n")
    sh("add", "other.txt", cwd=ws)
    (ws / "untracked.md").write_text("u\n")
    k = Kernel(ws)
    k.ws = ws
    k.run("%load_ext escouade_nb\nimport asyncio, json\nfrom escouade_nb.widgets import views_of")
    yield k
    k.run("from escouade_nb import get_squad\nfor a in list(get_squad().agents.values()):\n    await a.close()",
          allow_error=True)
    k.shutdown()


def test_rewind_to_here_clicked_in_the_view_restores_the_repository_folder(kernel):
    ws = kernel.ws
    before, repo_before = files(ws), repo_state(ws)
    edit = ("turn = demo.send('{what}')\ncard = await demo.next_permission(timeout=60)\n"
            "card.choose('allow_once')\nawait turn\n")
    kernel.run("demo = %escouade fake --as rw\nawait demo.ready()\n" + edit.format(what="edit notes.txt"))
    (ws / "made-by-hand.txt").write_text("between the turns\n")
    kernel.run(edit.format(what="edit second.txt"))
    assert (ws / "notes.txt").read_text() != "a\n" and (ws / "second.txt").exists()
    out = kernel.run("print(json.dumps([[c.turn, c.prompt] for c in demo.checkpoints]))").text
    assert json.loads(out.strip().splitlines()[-1]) == [[1, "edit notes.txt"], [2, "edit second.txt"]]
    info = json.loads(kernel.run(
        "view = views_of(demo)[0]\nfirst = [i for i in demo.conversation.items if getattr(i, 'role', '') == 'user'][0]\n"
        "print(json.dumps([view.model_id, view.feed.key(first), view.feed.render(first)[0]]))").text)
    model_id, key, html = info
    assert "Rewind to here" in html and 'data-act="rewind"' in html
    act(kernel, model_id, {"act": "rewind", "key": key, "value": None})  # the user confirms Rewind
    wait_for(kernel, "any('Rewound to before turn 1' in getattr(i, 'text', '') for i in demo.conversation.items) "
                     "and demo.status == 'idle'", timeout=30)
    assert files(ws) == before
    assert repo_state(ws) == repo_before
    text = kernel.run("from escouade_nb.core.render_text import render_items\n"
                      "print(render_items(demo.conversation.items))").text
    assert "you (rewound): edit notes.txt" in text and "you (rewound): edit second.txt" in text
    assert "Rewound to before turn 1" in text
    html = kernel.run("print(view.feed.render(first)[0])").text
    assert "rewound" in html and "Rewind to here" not in html
    # the agent goes on: a new session (the fake offers no session/fork)
    out = kernel.run("r = await demo.send('hello again')\nprint(r.stop_reason)").text
    assert out.strip().splitlines()[-1] == "end_turn"
