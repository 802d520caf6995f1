"""A hostile agent writes through a shared mapping between turns (issue 32, red team RT-10). The
agent's process creates ``tool.py`` during its turn and maps it ``MAP_SHARED``, writable; the user
keeps it; after the turn it writes other bytes through the mapping. The page was already dirty and
writable: no write fault, so neither size, mtime, ctime nor inode moves (until the kernel writes
the page back). The review must not trust its cached bytes for such a file: the next turn's start
shows the change pending, "changed between turns", and Reject puts the kept bytes back. On tmpfs
(no writeback: the page never gets clean, the times may never move) the cache is never trusted,
however old the file's times."""

from __future__ import annotations

import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from scripted_agent import run, until

from escouade_nb.engine.review import file_review
from escouade_nb.engine.review.file_review import FileEdit

SHM = Path("/dev/shm")
KEPT, EVIL = b"benign-1\n", b"EVIL-111\n"

# the agent's process: its file made and mapped during the turn (the write fault: times moved once,
# the page dirty and writable), then, once the test says so, other bytes through the mapping
MAPPER = """\
import mmap, os, sys, time
path, ctl = sys.argv[1], sys.argv[2]
with open(path, "wb") as fh:
    fh.write(b"benign-1\\n")
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 9, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[:] = b"benign-1\\n"
open(os.path.join(ctl, "mapped"), "w").close()
end = time.time() + 60
while not os.path.exists(os.path.join(ctl, "go")) and time.time() < end:
    time.sleep(0.02)
m[:] = b"EVIL-111\\n"
open(os.path.join(ctl, "written"), "w").close()
while not os.path.exists(os.path.join(ctl, "quit")) and time.time() < end:
    time.sleep(0.05)
"""


def _step(step: dict) -> str:
    return "!> " + json.dumps(step)


def _prompt(rpc_id: int) -> str:
    return (f'C> {{"jsonrpc":"2.0","id":{rpc_id},"method":"session/prompt","params":{{"sessionId":"s1",'
            f'"prompt":"$ANY"}}}}')


def _end(rpc_id: int) -> str:
    return f'A> {{"jsonrpc":"2.0","id":{rpc_id},"result":{{"stopReason":"end_turn"}}}}'


def _script(ws: Path, ctl: Path) -> str:
    return "\n".join([
        "[P]",
        _step({"spawn": [sys.executable, str(ctl / "mapper.py"), str(ws / "tool.py"), str(ctl)]}),
        _step({"wait_file": "$CTL/mapped", "timeout": 20}),
        # the file's times older than git's 2 s "racily clean" window when the turn's end reads it
        _step({"sleep": 2.5}),
        _end(2),
        _prompt(3), _end(3),
        _prompt(4), _end(4),
    ])


@pytest.fixture
def shm_folder():
    kind = subprocess.run(["stat", "-f", "-c", "%T", str(SHM)], capture_output=True, text=True).stdout.strip()
    if not SHM.is_dir() or kind != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="escouade-test-", dir=SHM))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _between_turns(tmp_path: Path, script, ws: Path | None) -> None:
    ctl = tmp_path / "ctl"  # outside the agent's folder: the test's signals are not the agent's changes
    ctl.mkdir()
    (ctl / "mapper.py").write_text(MAPPER)
    ws = (ws or tmp_path / "ws").resolve()
    s = script(_script(ws, ctl), variables={"CTL": str(ctl)}, ws=ws)
    tool = s.ws / "tool.py"

    async def go():
        async with s.running(review=True) as agent:
            try:
                await agent.send("go")
                [made] = agent.pending_edits
                assert made.rel == "tool.py" and made.change == "create" and made.after == KEPT
                assert await made.keep() == "kept"
                (ctl / "go").touch()
                await until(lambda: (ctl / "written").exists(), timeout=20, what="the write through the mapping")
                assert tool.read_bytes() == EVIL
                await agent.send("next")
                edits = [e for e in agent.pending_edits if isinstance(e, FileEdit)]
                assert [(e.rel, e.change, e.between, e.before, e.after) for e in edits] == [
                    ("tool.py", "edit", True, KEPT, EVIL)]
                assert "changed between turns" in edits[0].label
                assert await edits[0].reject() == "rejected"
                assert tool.read_bytes() == KEPT
                await agent.send("again")
                assert agent.pending_edits == []  # the restore is not taken for a change between turns
            finally:
                (ctl / "quit").touch()

    run(go(), timeout=60)
    s.assert_ok()


def test_a_write_through_a_shared_mapping_between_turns_pends_and_reject_puts_the_kept_bytes_back(
        tmp_path, script):
    _between_turns(tmp_path, script, None)


def test_on_tmpfs_a_write_through_a_shared_mapping_pends_however_old_the_files_times(
        tmp_path, script, shm_folder, monkeypatch):
    """tmpfs never writes a page back: its times are never trusted, even past any window (here
    none at all: as if the turn had ended long after the file was made)."""
    monkeypatch.setattr(file_review, "writeback_window_ns", lambda: 0, raising=False)
    _between_turns(tmp_path, script, shm_folder / "ws")


# -- the snapshot's cache itself ----------------------------------------------------------------------
def _mapped(path: Path, data: bytes) -> mmap.mmap:
    path.write_bytes(data)
    with open(path, "r+b") as fh:
        m = mmap.mmap(fh.fileno(), len(data), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    m[:] = data  # the write fault: the page dirty and writable from now on
    return m


def test_a_recent_file_is_read_again_an_old_one_is_not(tmp_path, monkeypatch):
    """Within the writeback window of its read a file's cached bytes are not trusted (its page
    may still be dirty and writable); past it (here a window of 0 on a disk file system) they
    are, and only the recent files are read again."""
    if file_review._filesystem(tmp_path) not in file_review.WRITEBACK_FILESYSTEMS:
        pytest.skip(f"{tmp_path} is not on a file system that writes back")
    window = file_review.writeback_window_ns()
    assert window is not None and window >= file_review.WRITEBACK_MARGIN_NS
    m = _mapped(tmp_path / "tool.py", KEPT)
    try:
        first = file_review._scan(tmp_path, ["tool.py"], {})
        m[:] = EVIL  # no fault: the file's stat is as it was
        st = os.stat(tmp_path / "tool.py")
        assert (st.st_mtime_ns, st.st_ctime_ns) == (first.files["tool.py"].mtime_ns, first.files["tool.py"].ctime_ns)
        assert file_review._scan(tmp_path, ["tool.py"], first.files).files["tool.py"].data == EVIL
        monkeypatch.setattr(file_review, "writeback_window_ns", lambda: 0)
        again = file_review._scan(tmp_path, ["tool.py"], first.files)
        assert again.files["tool.py"] is first.files["tool.py"]  # trusted: not read again
    finally:
        m.close()


def test_on_tmpfs_the_cache_is_never_trusted(shm_folder, monkeypatch):
    monkeypatch.setattr(file_review, "writeback_window_ns", lambda: 0)
    assert file_review._trusted_until(shm_folder) is None
    m = _mapped(shm_folder / "tool.py", KEPT)
    try:
        first = file_review._scan(shm_folder, ["tool.py"], {})
        m[:] = EVIL
        assert file_review._scan(shm_folder, ["tool.py"], first.files).files["tool.py"].data == EVIL
    finally:
        m.close()


def test_the_writeback_window_follows_the_kernels_settings(monkeypatch):
    real = Path.read_text

    def settings(values: dict[str, str]):
        def read_text(self, *args, **kwargs):
            if str(self) in values:
                return values[str(self)]
            return real(self, *args, **kwargs)
        return read_text

    vm = "/proc/sys/vm/"
    monkeypatch.setattr(Path, "read_text", settings({vm + "dirty_expire_centisecs": "6000\n",
                                                     vm + "dirty_writeback_centisecs": "1000\n"}))
    assert file_review.writeback_window_ns() == 70_000_000_000 + file_review.WRITEBACK_MARGIN_NS
    monkeypatch.setattr(Path, "read_text", settings({vm + "dirty_expire_centisecs": "3000\n",
                                                     vm + "dirty_writeback_centisecs": "0\n"}))
    assert file_review.writeback_window_ns() is None  # no periodic writeback: never trusted
    monkeypatch.setattr(Path, "read_text", settings({vm + "dirty_expire_centisecs": "x",
                                                     vm + "dirty_writeback_centisecs": "500"}))
    assert file_review.writeback_window_ns() == file_review.DEFAULT_WRITEBACK_NS + file_review.WRITEBACK_MARGIN_NS
