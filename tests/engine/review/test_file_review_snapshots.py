"""What the file review's snapshots see (engine/review/file_review.py, without an agent): git-ignored files and
skipped folders are not reviewed, symlinks neither; a file over the size limit is named, not offered; the
kernel's notebook is left out; a file the agent puts back as it was is dropped; a write that keeps the size
and the modification time is still caught (content compared, not times alone); an fs write outside the folder
is reviewed and its byte order mark kept on Reject."""

from __future__ import annotations

import asyncio
import os
import subprocess

from escouade_nb.core.conversation import Conversation, Notice
from escouade_nb.engine.review import file_review
from escouade_nb.engine.review.cell_review import EditReview
from escouade_nb.engine.review.file_review import FileWatch


def _watch(folder, excluded=()):
    review = EditReview()
    conversation = Conversation()
    return review, conversation, FileWatch(review, folder, conversation, lambda: None, lambda: set(excluded))


def _notices(conversation):
    return [i.text for i in conversation.items if isinstance(i, Notice)]


def test_git_ignored_skipped_and_symlinked_files_are_not_reviewed_and_the_index_is_untouched(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".gitignore").write_text("*.log\nbuild/\n")
    (repo / "tracked.txt").write_text("t\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    index = (repo / ".git" / "index").read_bytes()
    outside = tmp_path / "outside.txt"
    outside.write_text("o\n")

    async def go():
        review, conversation, watch = _watch(repo)
        await watch.before_turn()
        (repo / "run.log").write_text("ignored\n")
        (repo / "build").mkdir()
        (repo / "build" / "out.txt").write_text("ignored\n")
        (repo / "node_modules").mkdir()
        (repo / "node_modules" / "x.js").write_text("skipped\n")
        (repo / "link.txt").symlink_to(outside)
        (repo / "untracked.txt").write_text("new\n")
        (repo / "tracked.txt").write_text("changed\n")
        await watch.after_turn()
        return watch.git, sorted(e.rel for e in review.pending)

    git_used, pending = asyncio.run(go())
    assert git_used is True
    assert pending == ["tracked.txt", "untracked.txt"]
    assert (repo / ".git" / "index").read_bytes() == index


def test_limits_the_kernel_notebook_a_change_put_back_and_a_write_with_the_same_times(tmp_path, monkeypatch):
    monkeypatch.setattr(file_review, "MAX_FILE_BYTES", 1000)
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "big.bin").write_bytes(b"x" * 2000)
    (folder / "big-unchanged.bin").write_bytes(b"z" * 2000)
    (folder / "nb.ipynb").write_text("{}")
    (folder / "same.txt").write_bytes(b"aaaa\n")
    (folder / "back.txt").write_bytes(b"v1\n")

    async def go():
        review, conversation, watch = _watch(folder, excluded=[folder / "nb.ipynb"])
        await watch.before_turn()
        (folder / "big.bin").write_bytes(b"y" * 2000)
        (folder / "nb.ipynb").write_text('{"saved": "by JupyterLab"}')
        st = os.stat(folder / "same.txt")
        (folder / "same.txt").write_bytes(b"bbbb\n")  # same size…
        os.utime(folder / "same.txt", ns=(st.st_atime_ns, st.st_mtime_ns))  # …and the same modification time
        (folder / "back.txt").write_bytes(b"v2\n")
        await watch.after_turn()
        first = sorted(e.rel for e in review.pending)
        await watch.before_turn()
        (folder / "back.txt").write_bytes(b"v1\n")  # the agent puts it back in its next turn
        await watch.after_turn()
        return first, sorted(e.rel for e in review.pending), [(e.rel, e.state, e.why) for e in review.settled], \
            _notices(conversation), watch.git

    first, later, settled, notices, git_used = asyncio.run(go())
    assert git_used is False  # not a repository: a plain walk
    assert first == ["back.txt", "same.txt"]
    assert later == ["same.txt"]
    assert settled == [("back.txt", "dropped", "the agent put the file back as it was")]
    assert any("big.bin changed but is over" in n and "not offered for review, kept as written" in n for n in notices)
    assert not any("big-unchanged.bin" in n for n in notices)  # over the limit but unchanged: not named


def test_an_fs_write_outside_the_folder_is_reviewed_and_reject_keeps_its_byte_order_mark(tmp_path):
    folder = tmp_path / "work"
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_bytes(b"\xef\xbb\xbfold\r\n")

    async def go():
        review, conversation, watch = _watch(folder)
        await watch.before_turn()
        elsewhere.write_bytes(b"\xef\xbb\xbfnew\r\n")  # what our fs writes (it keeps the mark and the CRLF)
        watch.written(elsewhere, "old\r\n", "new\r\n")  # …and tells the text without the mark
        await watch.after_turn()
        [edit] = review.pending
        assert edit.rel == str(elsewhere) and edit.through == {"fs"}
        assert await edit.reject() == "rejected"

    asyncio.run(go())
    assert elsewhere.read_bytes() == b"\xef\xbb\xbfold\r\n"


def test_a_reject_during_the_next_turn_is_not_taken_for_the_agents_change(tmp_path):
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "a.txt").write_bytes(b"v1\n")

    async def go():
        review, conversation, watch = _watch(folder)
        await watch.before_turn()
        (folder / "a.txt").write_bytes(b"v2\n")
        await watch.after_turn()
        [edit] = review.pending
        await watch.before_turn()  # the next turn runs…
        assert await edit.reject() == "rejected"  # …while the user rejects the last one's change
        await watch.after_turn()
        return review.pending

    assert asyncio.run(go()) == []
    assert (folder / "a.txt").read_bytes() == b"v1\n"
