"""The agent view's review strip with files (``review=True``, engine/review/file_review.py), the Python side: a
scripted agent over real pipes changes two files by itself; the head lists each with its diff (escaped),
a file with several hunks offers each; a hunk's Reject (checked against the ``@@`` line the view showed),
a file's Reject and Keep all act through ``agent.pending_edits``; the saved form says what was answered."""

from __future__ import annotations

import asyncio
import base64
import json

from scripted_agent import run, until

from escouade_nb.widgets import AgentView

BEFORE = b"".join(b"line %d\n" % i for i in range(30))
AFTER = BEFORE.replace(b"line 1\n", b"LINE <b>1</b>\n").replace(b"line 25\n", b"LINE 25\n")


def _file(path: str, data: bytes) -> str:
    return "!> " + json.dumps({"file": path, "b64": base64.b64encode(data).decode()})


SCRIPT = "\n".join([
    "[P]",
    _file("$WS/two.txt", AFTER),
    _file("$WS/new.txt", b"fresh\n"),
    _file("$WS/other.txt", b"other\n"),
    'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}',
])


def test_the_review_strip_lists_files_with_their_diffs_and_answers_hunks_and_files(tmp_path, script):
    s = script(SCRIPT)
    (s.ws / "two.txt").write_bytes(BEFORE)

    async def go():
        agent = s.agent(review=True, name="writer")
        view = AgentView(agent)
        try:
            await agent.send("go")
            review = view.head()["review"]
            rows = {e["file"]: e for e in review["edits"]}
            assert set(rows) == {"two.txt", "new.txt", "other.txt"}
            two = rows["two.txt"]
            assert two["key"] == f"file:{s.ws / 'two.txt'}" and two["label"] == "edit of two.txt"
            assert two["through"] == ["itself"] and two["diff"] == ""
            assert [h["at"] for h in two["hunks"]] == ["@@ -1,5 +1,5 @@", "@@ -23,7 +23,7 @@"]
            assert "LINE &lt;b&gt;1&lt;/b&gt;" in two["hunks"][0]["diff"]  # escaped
            assert rows["new.txt"]["hunks"] == [] and "esc-diff-add" in rows["new.txt"]["diff"]

            # a hunk whose @@ line is no longer what the view showed is left alone
            view.act({"k": "act", "act": "review", "value": "reject", "key": two["key"], "hunk": 1, "at": "@@ -1 +1 @@"})
            await asyncio.sleep(0.2)
            assert (s.ws / "two.txt").read_bytes() == AFTER
            view.act({"k": "act", "act": "review", "value": "reject", "key": two["key"], "hunk": 1,
                      "at": two["hunks"][1]["at"]})
            await until(lambda: (s.ws / "two.txt").read_bytes() == AFTER.replace(b"LINE 25\n", b"line 25\n"),
                        what="the hunk taken back")
            await until(lambda: not any(e.settling for e in agent.pending_edits), what="settled")
            rows = {e["file"]: e for e in view.head()["review"]["edits"]}
            assert rows["two.txt"]["hunks"] == [] and "LINE &lt;b&gt;1" in rows["two.txt"]["diff"]

            view.act({"k": "act", "act": "review", "value": "reject", "key": rows["new.txt"]["key"]})
            await until(lambda: not (s.ws / "new.txt").exists(), what="the new file removed")
            view.act({"k": "act", "act": "review", "value": "keep", "key": ""})  # Keep all: the rest
            await until(lambda: not agent.pending_edits, what="everything answered")
            assert view.head()["review"] is None
            assert (s.ws / "other.txt").read_bytes() == b"other\n"
            text = view.companion_bundle()["text/plain"]
            assert "Its changes to files: " in text
            assert "deletion" not in text and "new file new.txt: rejected" in text and "edit of two.txt: kept" in text
            assert "File review: hunk 2 of edit of two.txt rejected (taken back)" in repr(view)
        finally:
            view.close()
            await agent.close()

    run(go())
    s.assert_ok()
