"""Review after the fact (``review=True``, engine/review/file_review.py): a scripted agent over real pipes changes
files through our fs and by itself (a CRLF file, a Latin-1 file, a binary, new files, a deletion); each is a
pending edit in ``agent.pending_edits`` by the time ``await turn`` returns; Reject puts the bytes back exactly,
the agent is told in its next prompt naming the files, and every answer is on record (a resume shows it)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

from scripted_agent import run, until

from escouade_nb.engine.agent import Agent
from escouade_nb.engine.review.file_review import FileChanged, FileEdit


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _fs_write(rpc_id: int, path: str, content: str) -> str:
    line = json.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": "fs/write_text_file",
                       "params": {"sessionId": "s1", "path": path, "content": content}})
    return f'A> {line}\nC> {{"jsonrpc":"2.0","id":{rpc_id},"result":"$ANY","error":"$ABSENT"}}'


def _file(path: str, data: bytes | None) -> str:
    step = {"file": path, "delete": True} if data is None else {"file": path, "b64": _b64(data)}
    return "!> " + json.dumps(step)


LATIN_AFTER = "café crème\n".encode("latin-1")
BINARY_BEFORE = bytes(range(256)) * 4
BINARY_AFTER = bytes(reversed(range(256))) * 4

TURNS = "\n".join([
    "[P]",
    _fs_write(100, "$WS/crlf.txt", "one\nTWO\nthree\n"),  # our fs keeps the file's CRLF
    _fs_write(101, "$WS/sub/new_fs.txt", "hello\n"),
    _file("$WS/latin.txt", LATIN_AFTER),
    _file("$WS/pic.bin", BINARY_AFTER),
    _file("$WS/made.txt", b"made by itself\n"),
    _file("$WS/gone.txt", None),
    _file("$WS/keep.txt", b"kept\n"),
    'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}',
    'C> {"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1","prompt":"$ANY"}}',
    'A> {"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}',
])


def _seed(ws):
    (ws / "crlf.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    (ws / "latin.txt").write_bytes("café\n".encode("latin-1"))
    (ws / "pic.bin").write_bytes(BINARY_BEFORE)
    (ws / "gone.txt").write_bytes(b"bye\n")
    (ws / "gone.txt").chmod(0o640)
    (ws / "keep.txt").write_bytes(b"k\n")


def test_files_changed_through_fs_and_by_itself_pend_review_and_reject_restores_bytes(tmp_path, script):
    s = script(TURNS)
    _seed(s.ws)

    async def go():
        agent = s.agent(review=True)
        try:
            turn = agent.send("go")
            await turn
            edits = {e.rel: e for e in agent.pending_edits}  # filled by the time the turn returns
            assert set(edits) == {"crlf.txt", "sub/new_fs.txt", "latin.txt", "pic.bin", "made.txt", "gone.txt",
                                  "keep.txt"}
            assert all(isinstance(e, FileEdit) for e in edits.values())
            crlf = edits["crlf.txt"].path  # absolute: text that answers Path's attributes too
            assert crlf == str(s.ws / "crlf.txt") and crlf == s.ws / "crlf.txt" and s.ws / "crlf.txt" == crlf
            assert crlf.endswith("crlf.txt") and crlf.name == "crlf.txt" and crlf.read_bytes().startswith(b"one\r\n")
            assert edits["crlf.txt"].through == {"fs"} and edits["latin.txt"].through == {"itself"}
            assert {e.rel: e.change for e in edits.values()} == {
                "crlf.txt": "edit", "sub/new_fs.txt": "create", "latin.txt": "edit", "pic.bin": "edit",
                "made.txt": "create", "gone.txt": "delete", "keep.txt": "edit"}
            diff = edits["crlf.txt"].diff
            assert diff.startswith("--- a/crlf.txt\n+++ b/crlf.txt\n@@ ")
            assert "-two\r\n" in diff and "+TWO\r\n" in diff
            assert "+café crème\n" in edits["latin.txt"].diff  # Latin-1 shown as what it is
            assert edits["pic.bin"].diff.startswith("Binary files a/pic.bin and b/pic.bin differ")
            assert edits["gone.txt"].diff == "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
            assert len(edits["crlf.txt"].hunks) == 1 and edits["pic.bin"].hunks == []
            # the writes landed at once
            assert (s.ws / "crlf.txt").read_bytes() == b"one\r\nTWO\r\nthree\r\n"
            assert not (s.ws / "gone.txt").exists()

            kept = edits["keep.txt"].keep()
            assert await kept == "kept"
            assert await edits["crlf.txt"].reject() == "rejected"
            edits["latin.txt"].reject()  # not awaited: it runs all the same
            rejected = [edits[n].reject() for n in ("pic.bin", "sub/new_fs.txt", "made.txt", "gone.txt")]
            assert [await r for r in rejected] == ["rejected"] * 4
            await until(lambda: not agent.pending_edits, what="the answered edits gone")
            assert agent.pending_edits == []  # answered edits leave the list
            assert {e.rel: e.state for e in agent.edit_review.settled} == {
                "keep.txt": "kept", "crlf.txt": "rejected", "latin.txt": "rejected", "pic.bin": "rejected",
                "sub/new_fs.txt": "rejected", "made.txt": "rejected", "gone.txt": "rejected"}

            again = await agent.send("again")
            assert again.stop_reason == "end_turn"
            assert agent.pending_edits == []  # a turn that changes nothing adds nothing
            notices = [i.text for i in agent.conversation.items if type(i).__name__ == "Notice"]
            assert "File review: edit of crlf.txt rejected (put back as it was)" in notices
            assert "File review: edit of keep.txt kept" in notices
            return agent.transcript.path
        finally:
            await agent.close()

    path = run(go())
    s.assert_ok()
    ws = s.ws
    assert (ws / "crlf.txt").read_bytes() == b"one\r\ntwo\r\nthree\r\n"
    assert (ws / "latin.txt").read_bytes() == "café\n".encode("latin-1")
    assert (ws / "pic.bin").read_bytes() == BINARY_BEFORE
    assert (ws / "gone.txt").read_bytes() == b"bye\n" and (ws / "gone.txt").stat().st_mode & 0o777 == 0o640
    assert not (ws / "made.txt").exists() and not (ws / "sub" / "new_fs.txt").exists()
    assert (ws / "keep.txt").read_bytes() == b"kept\n"

    # the agent was told in its next prompt, naming the files (once: the same path as the cells' rejections)
    prompts = [m for m in s.received() if m.get("method") == "session/prompt"]
    told = " ".join(b.get("text", "") for b in prompts[1]["params"]["prompt"])
    assert "The user rejected your change(s) to these files" in told
    for name in ("crlf.txt", "latin.txt", "pic.bin", "sub/new_fs.txt", "made.txt", "gone.txt"):
        assert str(ws / name) in told  # named by their absolute paths
    assert "keep.txt" not in told
    assert "again" in told

    # on record: a resume rebuilds the answers (and the notices, through the transcript)
    async def resumed():
        agent = Agent.resume(path, s.ref, program=sys.executable)
        try:
            return {e.rel: e.state for e in agent.edit_review.settled}, agent.review, [
                i.text for i in agent.conversation.items if type(i).__name__ == "Notice"]
        finally:
            await agent.close()

    states, review, notices = run(resumed())
    assert states["crlf.txt"] == "rejected" and states["keep.txt"] == "kept" and review is True
    assert "File review: deletion of gone.txt rejected (put back as it was)" in notices


HUNKS = "\n".join([
    "[P]",
    _file("$WS/long.txt", b"".join(b"line %d\n" % i if i not in (2, 30) else b"LINE %d\n" % i for i in range(40))),
    'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}',
    'C> {"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1","prompt":"$ANY"}}',
    _file("$WS/long.txt", b"".join(b"line %d\n" % i if i not in (2, 30, 35) else b"LINE %d\n" % i
                                   for i in range(40))),
    'A> {"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}',
])


def test_hunks_answered_alone_and_a_second_turn_stays_one_edit_in_a_git_repository(tmp_path, script):
    """In a git repository (listed by git, read-only: the index, refs and stash untouched), a hunk
    rejected alone; a later turn's change of the same file stays one edit from the first bytes;
    a file changed by someone else since is not overwritten by a Reject."""
    s = script(HUNKS)
    ws = s.ws
    original = b"".join(b"line %d\n" % i for i in range(40))
    (ws / "long.txt").write_bytes(original)
    (ws / ".gitignore").write_text("ignored.log\n")
    git = ["git", "-C", str(ws), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    index_before = (ws / ".git" / "index").read_bytes()

    async def go():
        agent = s.agent(review=True)
        try:
            await agent.send("go")
            assert agent.file_watch.git is True
            [edit] = agent.pending_edits
            assert [h.diff.splitlines()[0] for h in edit.hunks] == ["@@ -1,6 +1,6 @@", "@@ -28,7 +28,7 @@"]
            assert await edit.hunks[1].reject() == "partial"  # one hunk taken back, the other still pending
            assert (ws / "long.txt").read_bytes() == original.replace(b"line 2\n", b"LINE 2\n")
            assert agent.pending_edits == [edit] and len(edit.hunks) == 1
            await agent.send("again")  # the agent changes it again: still one edit, from the bytes before
            assert agent.pending_edits == [edit]
            assert len(edit.hunks) == 2  # the first hunk, and line 35 (line 30 it took back as told)
            (ws / "long.txt").write_bytes(b"someone else\n")
            try:
                await edit.reject()
            except FileChanged:
                pass
            else:
                raise AssertionError("a Reject overwrote a change made since")
            assert edit.state == "pending" and (ws / "long.txt").read_bytes() == b"someone else\n"
            (ws / "long.txt").write_bytes(edit.after or b"")
            assert await edit.reject() == "rejected"
            assert (ws / "long.txt").read_bytes() == original
        finally:
            await agent.close()

    run(go())
    s.assert_ok()
    prompts = [m for m in s.received() if m.get("method") == "session/prompt"]
    assert f"hunk 2 of the edit of {ws / 'long.txt'}" in json.dumps(prompts[1]["params"]["prompt"])
    assert (ws / ".git" / "index").read_bytes() == index_before
    status = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True, check=True).stdout
    assert status == ""
    assert subprocess.run([*git, "stash", "list"], capture_output=True, text=True).stdout == ""


def test_project_file_turns_review_on(tmp_path):
    from escouade_nb.manifest.project import Project

    (tmp_path / ".escouade.yml").write_text("name: demo\nreview: yes\n")
    assert Project.for_folder(tmp_path).review is True
    (tmp_path / ".escouade.yml").write_text("name: demo\n")
    assert Project.for_folder(tmp_path).review is False
