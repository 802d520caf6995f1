"""A hostile agent hides code where the review did not look (issue 32): a git hook (``git commit``
runs it) and a forged ``__pycache__`` ``.pyc`` (``import`` runs it while the reviewed ``.py`` is
untouched: Python trusts a ``.pyc`` whose header's source time and size match, and an
unchecked-hash one whatever the source). Both are pending with ``--review`` whatever ``.gitignore``
says; Reject removes them, and a Reject of ``x.py`` also removes its compiled forms. Checked with a
real ``git commit`` and a real ``python -c "import m"``."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import py_compile
import subprocess
import sys
from pathlib import Path

from scripted_agent import run

END = 'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'
GIT = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


def _write(path: Path, data: bytes) -> str:
    return "!> " + json.dumps({"file": str(path), "b64": base64.b64encode(data).decode()})


def _pyc(tmp: Path, source: str, mode: py_compile.PycInvalidationMode) -> bytes:
    """A .pyc of ``source`` for this Python."""
    src, out = tmp / "forged_src.py", tmp / "forged.pyc"
    src.write_text(source)
    py_compile.compile(str(src), cfile=str(out), invalidation_mode=mode, doraise=True)
    return out.read_bytes()


def _forged_for(tmp: Path, target: Path, source: str) -> bytes:
    """A timestamp .pyc of ``source`` whose header claims ``target``'s time and size."""
    data = bytearray(_pyc(tmp, source, py_compile.PycInvalidationMode.TIMESTAMP))
    st = target.stat()
    data[8:12] = (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
    data[12:16] = (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    return bytes(data)


def _python(ws: Path, module: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=60)
    return done.stdout + done.stderr


def _repo(ws: Path) -> None:
    (ws / "m.py").write_text("print('reviewed m')\n")
    (ws / "m2.py").write_text("print('reviewed m2')\n")
    (ws / ".gitignore").write_text("__pycache__/\n*.pyc\n")
    subprocess.run(["git", "-C", str(ws), *GIT, "init", "-q"], check=True)
    subprocess.run(["git", "-C", str(ws), *GIT, "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(ws), *GIT, "commit", "-qm", "base"], check=True)


def test_a_hook_and_a_forged_pyc_pend_review_and_reject_leaves_neither(tmp_path, script):
    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    _repo(ws)
    ran = tmp_path / "hook-ran"
    hook = ws / ".git" / "hooks" / "pre-commit"
    cache = ws / "__pycache__"
    tag = sys.implementation.cache_tag
    forged = _forged_for(tmp_path, ws / "m.py", "print('FORGED m')\n")
    unchecked = _pyc(tmp_path, "print('FORGED m2')\n", py_compile.PycInvalidationMode.UNCHECKED_HASH)
    assert importlib.util.cache_from_source(str(ws / "m.py")) == str(cache / f"m.{tag}.pyc")
    s = script("\n".join([
        "[P]",
        _write(hook, f"#!/bin/sh\necho hook > {ran}\nexit 0\n".encode()),
        "!> " + json.dumps({"run": ["chmod", "755", str(hook)]}),  # executable: git runs it
        _write(cache / f"m.{tag}.pyc", forged),  # m.py untouched: its review shows nothing
        _write(ws / "m2.py", b"print('agent m2')\n"),
        _write(cache / f"m2.{tag}.pyc", unchecked),  # used whatever m2.py says
        END,
    ]), ws=ws)

    async def go():
        async with s.running(review=True) as agent:
            await agent.send("go")
            edits = {e.rel: e for e in agent.pending_edits}
            assert set(edits) == {".git/hooks/pre-commit", f"__pycache__/m.{tag}.pyc", "m2.py",
                                  f"__pycache__/m2.{tag}.pyc"}
            assert edits[".git/hooks/pre-commit"].change == "create"
            assert "+echo hook" in edits[".git/hooks/pre-commit"].diff
            assert edits[f"__pycache__/m.{tag}.pyc"].diff.startswith(
                f"Binary files /dev/null and b/__pycache__/m.{tag}.pyc differ")
            assert "FORGED m" in _python(ws, "m")  # the forgery works: what the review must not let through
            assert await edits[".git/hooks/pre-commit"].reject() == "rejected"
            assert await edits[f"__pycache__/m.{tag}.pyc"].reject() == "rejected"
            # only m2.py rejected: its compiled forms go with it (the unchecked one is dropped, not pending)
            assert await edits["m2.py"].reject() == "rejected"
            assert edits[f"__pycache__/m2.{tag}.pyc"].state == "dropped"
            assert agent.pending_edits == []

    run(go())
    s.assert_ok()
    assert not hook.exists()
    assert _python(ws, "m").strip() == "reviewed m"
    assert _python(ws, "m2").strip() == "reviewed m2"
    (ws / "new.txt").write_text("x\n")
    subprocess.run(["git", "-C", str(ws), *GIT, "add", "new.txt"], check=True)
    subprocess.run(["git", "-C", str(ws), *GIT, "commit", "-qm", "after"], check=True)
    assert not ran.exists()  # no hook ran


def test_a_git_config_and_info_change_pend_review_in_a_folder_that_ignores_everything(tmp_path, script):
    """``.git/config`` (an alias, a filter, core.fsmonitor: code git runs) and ``.git/info/attributes``
    are shown even when ``.gitignore`` ignores everything; their diff is shown as for any file."""
    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    _repo(ws)
    (ws / ".gitignore").write_text("*\n")
    config = (ws / ".git" / "config").read_bytes()
    s = script("\n".join([
        "[P]",
        _write(ws / ".git" / "config", config + b"[core]\n\tfsmonitor = touch /tmp/pwned\n"),
        _write(ws / ".git" / "info" / "attributes", b"*.py filter=evil\n"),
        END,
    ]), ws=ws)

    async def go():
        async with s.running(review=True) as agent:
            await agent.send("go")
            edits = {e.rel: e for e in agent.pending_edits}
            assert set(edits) == {".git/config", ".git/info/attributes"}
            assert "+\tfsmonitor = touch /tmp/pwned\n" in edits[".git/config"].diff
            assert await edits[".git/config"].reject() == "rejected"
            assert await edits[".git/info/attributes"].reject() == "rejected"

    run(go())
    s.assert_ok()
    assert (ws / ".git" / "config").read_bytes() == config
    assert not (ws / ".git" / "info" / "attributes").exists()


def test_reject_of_a_source_removes_its_compiled_forms_outside_git(tmp_path, script):
    """A plain folder (no git: a walk): the agent edits ``x.py`` and leaves an unchecked-hash ``.pyc`` of
    other code (and one of another Python's tag and optimization level); the user rejects ``x.py`` only:
    Python runs the restored source, not the ``.pyc``."""
    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    (ws / "x.py").write_text("print('reviewed x')\n")
    (ws / "clean.py").write_text("print('clean')\n")
    tag = sys.implementation.cache_tag
    cache = ws / "__pycache__"
    unchecked = _pyc(tmp_path, "print('FORGED x')\n", py_compile.PycInvalidationMode.UNCHECKED_HASH)
    s = script("\n".join([
        "[P]",
        _write(ws / "x.py", b"print('agent x')\n"),
        _write(cache / f"x.{tag}.pyc", unchecked),
        _write(cache / "x.cpython-99.opt-1.pyc", unchecked),
        _write(cache / "xy.cpython-99.pyc", unchecked),  # another module's: left alone
        # Python's own cache of a source as it is: not shown (a run of the tests, an import, makes many)
        "!> " + json.dumps({"run": [sys.executable, "-c", f"import sys; sys.dont_write_bytecode = False; sys.path.insert(0, {str(ws)!r}); import clean"]}),
        END,
    ]), ws=ws)

    async def go():
        async with s.running(review=True) as agent:
            await agent.send("go")
            edit = next(e for e in agent.pending_edits if e.rel == "x.py")
            assert (cache / f"clean.{tag}.pyc").exists()
            assert f"__pycache__/clean.{tag}.pyc" not in {e.rel for e in agent.pending_edits}
            assert "FORGED x" in _python(ws, "x")
            assert await edit.reject() == "rejected"
            assert {e.rel for e in agent.pending_edits} == {"__pycache__/xy.cpython-99.pyc"}
            assert any("compiled form(s) of x.py removed" in i.text for i in agent.conversation.items
                       if type(i).__name__ == "Notice")

    run(go())
    s.assert_ok()
    assert sorted(p.name for p in cache.iterdir()) == [f"clean.{tag}.pyc", "xy.cpython-99.pyc"]
    assert (ws / "x.py").read_text() == "print('reviewed x')\n"
    assert _python(ws, "x").strip() == "reviewed x"


def test_a_git_redirect_through_commondir_pends_review_with_what_it_points_at(tmp_path, script):
    """An agent (not sandboxed) writes ``.git/commondir`` pointing at a folder of ``.git`` of its own
    (a config with ``core.fsmonitor`` and ``core.hooksPath``, a pre-commit hook): every git then reads
    that config — the user's ``git status`` runs the fsmonitor, ``git commit`` the hook. The kernel
    refuses the repository (its own git runs none of it), the review compares the folder file by file
    instead and says so, and the redirect and what it points at are pending; Reject removes them and
    the user's git runs nothing (red team RT-8: nothing was pending and both ran)."""
    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    _repo(ws)
    marks = tmp_path / "marks"
    marks.mkdir()
    evil = ws / ".git" / "evil"
    evil.mkdir()  # the agent's copy of git's data, made before its turn (data: never pending)
    for name in ("objects", "refs"):
        subprocess.run(["cp", "-r", str(ws / ".git" / name), str(evil / name)], check=True)
    (evil / "HEAD").write_text((ws / ".git" / "HEAD").read_text())
    planted = {
        evil / "config": (f"[core]\n\trepositoryformatversion = 0\n\tbare = false\n\thooksPath = {evil / 'h'}\n"
                          f"\tfsmonitor = \"touch {marks}/fsmonitor; false\"\n").encode(),
        evil / "h" / "pre-commit": f"#!/bin/sh\ntouch {marks}/hook\n".encode(),
        ws / ".git" / "commondir": b"evil\n",
    }
    s = script("\n".join([
        "[P]",
        *(_write(path, data) for path, data in planted.items()),
        "!> " + json.dumps({"run": ["chmod", "755", str(evil / "h" / "pre-commit")]}),
        END,
    ]), ws=ws)

    async def go():
        async with s.running(review=True) as agent:
            await agent.send("go")
            edits = {e.rel: e for e in agent.pending_edits}
            assert {".git/commondir", ".git/evil/config", ".git/evil/h/pre-commit"} <= set(edits), sorted(edits)
            assert not any(rel.startswith((".git/evil/objects/", ".git/evil/refs/")) for rel in edits)  # git's data
            notices = [i.text for i in agent.conversation.items if type(i).__name__ == "Notice"]
            assert any("commondir" in n and "file by file" in n for n in notices), notices
            assert not list(marks.iterdir())  # the kernel's own git ran none of it
            for edit in list(agent.pending_edits):
                if edit.rel in planted_rels:
                    assert await edit.reject() == "rejected"

    planted_rels = {p.relative_to(ws).as_posix() for p in planted}
    run(go())
    s.assert_ok()
    assert not (ws / ".git" / "commondir").exists()
    subprocess.run(["git", "-C", str(ws), *GIT, "status"], check=True, capture_output=True)
    (ws / "new.txt").write_text("x\n")
    subprocess.run(["git", "-C", str(ws), *GIT, "add", "new.txt"], check=True)
    subprocess.run(["git", "-C", str(ws), *GIT, "commit", "-qm", "after"], check=True)
    assert not list(marks.iterdir())  # neither the fsmonitor nor the hook ran
