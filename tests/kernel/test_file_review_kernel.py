"""Review after the fact in a real kernel: ``%escouade NAME --review`` and a folder whose ``.escouade.yml`` says
``review: true``; a scripted agent over real pipes writes by itself and through our fs; the files pend review in
``agent.pending_edits`` once ``await turn`` returns; Reject clicked in the agent view (the comm message the
front-end sends) puts the bytes back; Keep all from the view keeps the rest."""

from __future__ import annotations

import base64
import json
import os
import sys

import pytest

from kernel_client import act, kernel_with_env, wait_for
from scripted_agent import Script

pytestmark = pytest.mark.kernel


def _steps(ws_file: str, data: bytes) -> str:
    return "\n".join([
        "[P]",
        "!> " + json.dumps({"file": ws_file, "b64": base64.b64encode(data).decode()}),
        'A> {"jsonrpc":"2.0","id":100,"method":"fs/write_text_file","params":{"sessionId":"s1",'
        '"path":"$WS/via-fs.txt","content":"through fs\\n"}}',
        'C> {"jsonrpc":"2.0","id":100,"result":"$ANY","error":"$ABSENT"}',
        'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}',
    ])


def test_the_magic_flag_and_the_project_file_turn_review_on_and_the_view_answers(tmp_path):
    root = tmp_path
    flagged = Script(root, _steps("$WS/data.csv", b"a;b\r\n1;2\r\n"), ws=root / "flagged", name="flagged")
    configured = Script(root, _steps("$WS/notes.md", b"# new\n"), ws=root / "configured", name="configured")
    (flagged.ws / "data.csv").write_bytes(b"a;b\r\n")
    (configured.ws / ".escouade.yml").write_text("review: true\n")
    plugins = root / "plugins"
    flagged.install(plugins)
    configured.install(plugins)
    env = {"ESCOUADE_NB_PLUGINS_DIR": str(plugins), "ESCOUADE_NB_CONFIG_DIR": str(root / "config"),
           "ESCOUADE_NB_TRANSCRIPTS_DIR": str(root / "transcripts"),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    k = kernel_with_env(flagged.ws, env)
    try:
        k.run("%load_ext escouade_nb\nimport json\nfrom escouade_nb.widgets import views_of")
        out = k.run(f"a = %escouade flagged --review --no-kernel-tools\n"
                    f"b = %escouade configured --cwd {str(configured.ws)!r} --no-kernel-tools\n"
                    "ra, rb = await a.send('go'), await b.send('go')\n"
                    "print(json.dumps([a.review, b.review, sorted(e.rel for e in a.pending_edits), "
                    "sorted(e.rel for e in b.pending_edits), [e.diff for e in a.pending_edits if e.rel == 'data.csv']]))"
                    ).text
        review_a, review_b, files_a, files_b, (diff,) = json.loads(out.strip().splitlines()[-1])
        assert review_a is True and review_b is True
        assert files_a == ["data.csv", "via-fs.txt"] and files_b == ["notes.md", "via-fs.txt"]
        assert "+1;2\r\n" in diff

        # the user clicks Reject on data.csv in a's view, then Keep all in b's
        model_a, key = json.loads(k.run("v = views_of(a)[0]\nprint(json.dumps([v.model_id, "
                                        "next(e['key'] for e in v.head()['review']['edits'] "
                                        "if e['file'] == 'data.csv')]))").text.strip().splitlines()[-1])
        act(k, model_a, {"act": "review", "value": "reject", "key": key})
        wait_for(k, "[e.rel for e in a.pending_edits] == ['via-fs.txt']")
        assert (flagged.ws / "data.csv").read_bytes() == b"a;b\r\n"
        model_b = k.run("print(views_of(b)[0].model_id)").text.strip().splitlines()[-1]
        act(k, model_b, {"act": "review", "value": "keep", "key": ""})
        wait_for(k, "not b.pending_edits")
        assert (configured.ws / "notes.md").read_bytes() == b"# new\n"
        out = k.run("print(json.dumps(sorted((e.rel, e.state) for e in a.edit_review.settled + "
                    "b.edit_review.settled)))").text
        assert json.loads(out.strip().splitlines()[-1]) == [
            ["data.csv", "rejected"], ["notes.md", "kept"], ["via-fs.txt", "kept"]]
    finally:
        k.run("await a.close()\nawait b.close()", allow_error=True)
        k.shutdown()
    flagged.assert_ok()
    configured.assert_ok()
