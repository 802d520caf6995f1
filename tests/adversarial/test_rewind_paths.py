"""A rewind walks the agent's folder without following a symlink (issue 32, red team RT-7): an
agent's process alive during the rewind swaps a folder of its own (``sub``) for a symlink to a
folder outside (``renameat2(RENAME_EXCHANGE)``, or ``mv sub sub_old; ln -s /outside sub``) after
the kernel listed what to remove and write back. The removal of the files added since and the
writing back of the others reach each file from the agent's folder by a walk of folder fds
(``escouade_nb.wire.folder_fds``): the file behind the symlink is refused, named in the rewind's
notice with "a symbolic link in its path", and the files outside are untouched. The swap is
planted at the exact point (after the kernel's listing, before its removals: deterministic), and
by a sandboxed agent racing the rewind (bounded in time: four attempts of 5 s). Also: git itself does not write a
file through a symlinked leading path (``checkout-index`` replaces the symlink by a folder)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from git_repos import GIT_ENV
from scripted_agent import P_INIT, P_NEW

from escouade_nb.engine.review import checkpoints

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: no --sandbox here")
END_2 = 'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'
FILES = 20
# the agent's process: exchange `sub` (a folder) and `lnk` (a symlink to outside) atomically, for a while
SWAPPER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
os.chdir(sys.argv[1])
if not os.path.lexists("lnk"):
    os.symlink(sys.argv[2], "lnk")
end = time.time() + float(sys.argv[3])
while time.time() < end:
    libc.renameat2(-100, b"sub", -100, b"lnk", 2)
    time.sleep(0.0005)
"""


def _step(step: dict) -> str:
    return "!> " + json.dumps(step)


def _write(path: str, data: bytes) -> str:
    return _step({"file": path, "b64": base64.b64encode(data).decode()})


def _prompt(rpc_id: int) -> str:
    return (f'C> {{"jsonrpc":"2.0","id":{rpc_id},"method":"session/prompt","params":{{"sessionId":"s1",'
            f'"prompt":"$ANY"}}}}')


def _outside(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A folder outside the agent's, holding files of the same names as the agent's."""
    out = tmp_path / "outside"
    out.mkdir()
    files = {f"v{i}.txt": b"outside\n" for i in range(FILES)} | {"keep.txt": b"outside keep\n"}
    for name, data in files.items():
        (out / name).write_bytes(data)
    return out, files


def _state(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir()}


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("ESCOUADE_NB_CHECKPOINTS_DIR", str(tmp_path / "state"))
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)


def test_a_rewind_does_not_remove_or_write_through_a_folder_swapped_for_a_symlink(script, tmp_path, state,
                                                                                    monkeypatch):
    """The agent's turn adds ``sub/v*.txt`` and changes ``sub/keep.txt``; the swap lands after the
    kernel listed the files to remove and write back: none of them is removed or written through the
    symlink, the notice names them, and the rewind of the rest of the folder is done."""
    out, outside = _outside(tmp_path)
    s = script("\n".join([P_INIT, P_NEW, _prompt(2), *[_write(f"$WS/sub/v{i}.txt", b"agent\n") for i in range(FILES)],
                          _write("$WS/sub/keep.txt", b"agent keep\n"), _write("$WS/top.txt", b"agent top\n"), END_2]),
               "\n".join([P_INIT, P_NEW]))  # the process after the rewind (a new session)
    (s.ws / "sub").mkdir()
    (s.ws / "sub" / "keep.txt").write_bytes(b"user keep\n")
    real_remove = checkpoints._remove

    def swapped_then_remove(top, folder, paths):  # what a racing process of the agent's does at that moment
        os.rename(s.ws / "sub", s.ws / "sub_old")
        os.symlink(out, s.ws / "sub")
        return real_remove(top, folder, paths)

    monkeypatch.setattr(checkpoints, "_remove", swapped_then_remove)

    async def go():
        async with s.running() as agent:
            await agent.send("go")
            assert (s.ws / "sub" / "v0.txt").read_bytes() == b"agent\n"
            await agent.rewind(agent.checkpoints[0])
            return [i.text for i in agent.conversation.items if type(i).__name__ == "Notice"]

    notices = asyncio.run(asyncio.wait_for(go(), 60))
    assert _state(out) == outside, "a rewind removed or wrote files outside the agent's folder"
    said = next(n for n in notices if n.startswith("Rewind:"))
    assert "a symbolic link in its path" in said and "sub/v0.txt" in said and "sub/keep.txt" in said, said
    assert not (s.ws / "top.txt").exists()  # the rest of the rewind was done
    assert (s.ws / "sub").is_symlink()


@needs_bwrap
@pytest.mark.parametrize("attempt", range(4))
def test_a_sandboxed_agent_racing_a_rewind_with_a_symlink_swap_removes_nothing_outside(script, tmp_path, state,
                                                                                       monkeypatch, attempt):
    """The red team's race: the agent's own process (under bwrap, alive through the rewind)
    exchanges ``sub`` and a symlink to outside every half millisecond for 5 s while the kernel
    rewinds; whatever the timing, no file outside is removed or written. (A race: before the fix
    about one rewind in two removed files outside; four attempts, about 5 s each.)"""
    from escouade_nb.engine.squad import Squad

    out, outside = _outside(tmp_path)
    plugins = tmp_path / "plugins"
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "sub").mkdir()
    (ws / "sub" / "keep.txt").write_bytes(b"user keep\n")
    s = script("\n".join(["[P]", *[_write(f"$WS/sub/v{i}.txt", b"agent\n") for i in range(FILES)],
                          _write("$WS/sub/keep.txt", b"agent keep\n"), END_2,
                          _step({"spawn": [sys.executable, "-c", SWAPPER, str(ws), str(out), "5"]}),
                          _step({"hang": True})]), ws=ws, name="boxed")
    s.install_sandboxed(plugins)

    async def go():
        squad = Squad()
        try:
            agent = squad.start("boxed", cwd=ws, sandbox=True)
            await agent.ready()
            await agent.send("go")
            await asyncio.sleep(0.5)  # the swapper runs
            try:
                await agent.rewind(1)
            except Exception as exc:  # a rewind may fail on the moving folder; what matters is outside
                print("rewind:", type(exc).__name__, exc)
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()

    asyncio.run(asyncio.wait_for(go(), 90))
    assert _state(out) == outside, "a rewind removed or wrote files outside the agent's folder"


def test_git_checkout_index_does_not_write_through_a_symlinked_leading_path(tmp_path):
    """git's own check (``has_symlink_leading_path``): ``checkout-index -f`` of ``sub/keep.txt``
    with ``sub`` a symlink to a folder outside replaces the symlink by a folder; the file outside
    is not written. (The rewind does not rely on it: git writes into a folder of the kernel's,
    the walk copies from there — a racing swap falls between git's check and its write.)"""
    env = {**os.environ, **GIT_ENV}
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    (repo / "sub").mkdir()
    (repo / "sub" / "keep.txt").write_bytes(b"from git\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
    out = tmp_path / "outside"
    out.mkdir()
    (out / "keep.txt").write_bytes(b"outside\n")
    shutil.rmtree(repo / "sub")
    os.symlink(out, repo / "sub")
    subprocess.run(["git", "checkout-index", "-f", "-q", "--", "sub/keep.txt"], cwd=repo, env=env)
    assert (out / "keep.txt").read_bytes() == b"outside\n"
    assert not (repo / "sub").is_symlink() and (repo / "sub" / "keep.txt").read_bytes() == b"from git\n"
