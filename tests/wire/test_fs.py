"""``escouade_nb.wire.fs.FileSystem``: ACP's client file system, with fences."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from acp import RequestError
from deadlines import run

from escouade_nb.wire.fs import FenceError, FileSystem


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (not following symlinks) with its bytes."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if not p.is_symlink():
                out[str(p.relative_to(root))] = p.read_bytes()
    return out


class Writes(list):
    def __call__(self, path, old, new):
        self.append((path, old, new))


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """``tmp_path/app`` (the fence), with a sibling ``app2`` and an ``outside`` folder."""
    app = tmp_path / "app"
    (app / "src").mkdir(parents=True)
    (app / "src" / "main.py").write_text("print('hi')\n")
    (tmp_path / "app2").mkdir()
    (tmp_path / "app2" / "secret.txt").write_text("sibling secret\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("outside secret\n")
    return app


# -- reading ------------------------------------------------------------------------------

def test_read_absolute_and_relative(project: Path) -> None:
    fs = FileSystem(project)
    assert run(fs.read_text_file, str(project / "src" / "main.py")).content == "print('hi')\n"
    assert run(fs.read_text_file, "src/main.py").content == "print('hi')\n"
    # relative paths are taken against cwd, not the process's working folder
    assert Path.cwd() != project
    sub = FileSystem(project / "src")
    assert run(sub.read_text_file, "main.py").content == "print('hi')\n"


def test_read_line_and_limit(tmp_path: Path) -> None:
    f = tmp_path / "lines.txt"
    f.write_text("one\ntwo\nthree\nfour\nfive")  # no final newline
    fs = FileSystem(tmp_path)

    async def read(**kw):
        return (await fs.read_text_file(str(f), **kw)).content

    async def main():
        assert await read() == "one\ntwo\nthree\nfour\nfive"
        assert await read(line=2) == "two\nthree\nfour\nfive"
        assert await read(line=2, limit=2) == "two\nthree\n"
        assert await read(limit=1) == "one\n"
        assert await read(line=5, limit=3) == "five"
        assert await read(line=4, limit=10) == "four\nfive"
        assert await read(line=6) == ""
        assert await read(line=99, limit=2) == ""
        assert await read(line=1, limit=0) == ""
        for bad in ({"line": 0}, {"line": -1}, {"limit": -1}):
            with pytest.raises(RequestError) as err:
                await read(**bad)
            assert err.value.code == -32602

    run(main)


def test_read_lines_split_on_newline_only(tmp_path: Path) -> None:
    f = tmp_path / "odd.txt"
    # \x0c (form feed) and \u2028 are line breaks for str.splitlines, not for a file
    f.write_bytes("a\x0cb\u2028c\r\nd\r\ne\n".encode())
    fs = FileSystem(tmp_path)
    assert run(lambda: fs.read_text_file(str(f), line=2, limit=1)).content == "d\r\n"
    assert run(lambda: fs.read_text_file(str(f), limit=1)).content == "a\x0cb\u2028c\r\n"


def test_missing_file_is_resource_not_found(tmp_path: Path) -> None:
    fs = FileSystem(tmp_path)
    with pytest.raises(RequestError) as err:
        run(fs.read_text_file, "nope/missing.txt")
    assert err.value.code == -32002
    assert err.value.data == {"uri": "nope/missing.txt"}
    assert err.value.to_error_obj()["code"] == -32002


def test_read_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RequestError) as err:
        run(FileSystem(tmp_path).read_text_file, str(tmp_path))
    assert err.value.code == -32602 and "is a folder" in str(err.value)


def test_read_not_utf8_is_a_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "latin1.txt"
    f.write_bytes("café\n".encode("latin-1"))
    with pytest.raises(RequestError) as err:
        run(FileSystem(tmp_path).read_text_file, str(f))
    msg = str(err.value)
    assert err.value.code == -32602
    assert str(f) in msg and "not UTF-8" in msg and "0xe9" in msg and "offset 3" in msg
    assert err.value.data["reason"] == "not_utf8"


# -- writing ------------------------------------------------------------------------------

def test_write_creates_parents_and_reports_old_text(tmp_path: Path) -> None:
    writes = Writes()
    fs = FileSystem(tmp_path, on_write=writes)

    async def main():
        await fs.write_text_file("a/b/c/new.txt", "hello\n")
        await fs.write_text_file(str(tmp_path / "a/b/c/new.txt"), "hello\nworld\n")

    run(main)
    target = tmp_path / "a" / "b" / "c" / "new.txt"
    assert target.read_bytes() == b"hello\nworld\n"
    assert writes == [(target, None, "hello\n"), (target, "hello\n", "hello\nworld\n")]


def test_write_keeps_unicode(tmp_path: Path) -> None:
    fs = FileSystem(tmp_path)
    run(fs.write_text_file, "u.txt", "héllo ✓ 𝄞\n")
    assert (tmp_path / "u.txt").read_bytes() == "héllo ✓ 𝄞\n".encode()


def test_crlf_round_trip(tmp_path: Path) -> None:
    f = tmp_path / "dos.txt"
    f.write_bytes(b"one\r\ntwo\r\n")
    writes = Writes()
    fs = FileSystem(tmp_path, on_write=writes)

    async def main():
        text = (await fs.read_text_file(str(f))).content
        assert text == "one\r\ntwo\r\n"  # read as is, no translation
        await fs.write_text_file(str(f), text + "three\r\n")  # written back as is
        assert f.read_bytes() == b"one\r\ntwo\r\nthree\r\n"
        # an agent that normalised to LF: the file keeps its CRLF
        await fs.write_text_file(str(f), "one\ntwo\nthree\nfour\n")
        assert f.read_bytes() == b"one\r\ntwo\r\nthree\r\nfour\r\n"
        assert (await fs.read_text_file(str(f), line=4)).content == "four\r\n"

    run(main)
    assert writes[-1] == (f, "one\r\ntwo\r\nthree\r\n", "one\r\ntwo\r\nthree\r\nfour\r\n")


def test_lf_and_mixed_files_are_written_as_given(tmp_path: Path) -> None:
    lf = tmp_path / "unix.txt"
    lf.write_bytes(b"a\nb\n")
    mixed = tmp_path / "mixed.txt"
    mixed.write_bytes(b"a\r\nb\n")
    fs = FileSystem(tmp_path)

    async def main():
        await fs.write_text_file(str(lf), "a\nb\nc\n")
        await fs.write_text_file(str(mixed), "a\nb\nc\n")
        await fs.write_text_file("new.txt", "x\r\ny\n")

    run(main)
    assert lf.read_bytes() == b"a\nb\nc\n"
    assert mixed.read_bytes() == b"a\nb\nc\n"
    assert (tmp_path / "new.txt").read_bytes() == b"x\r\ny\n"


def test_bom_is_hidden_and_kept(tmp_path: Path) -> None:
    f = tmp_path / "bom.txt"
    f.write_bytes(b"\xef\xbb\xbfhello\r\n")
    fs = FileSystem(tmp_path)

    async def main():
        assert (await fs.read_text_file(str(f))).content == "hello\r\n"
        await fs.write_text_file(str(f), "hello\nworld\n")

    run(main)
    assert f.read_bytes() == b"\xef\xbb\xbfhello\r\nworld\r\n"


def test_overwrite_of_non_utf8_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "latin1.txt"
    original = "naïve\n".encode("latin-1")
    f.write_bytes(original)
    writes = Writes()
    with pytest.raises(RequestError) as err:
        run(FileSystem(tmp_path, on_write=writes).write_text_file, str(f), "replaced\n")
    assert err.value.code == -32602
    assert "not UTF-8" in str(err.value) and "overwrite" in str(err.value) and str(f) in str(err.value)
    assert f.read_bytes() == original and writes == []


def test_write_to_a_folder_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(RequestError) as err:
        run(FileSystem(tmp_path).write_text_file, "d", "x")
    assert "is a folder" in str(err.value)


def test_write_lone_surrogate_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RequestError) as err:
        run(FileSystem(tmp_path).write_text_file, "s.txt", "bad \ud800 text")
    assert err.value.code == -32602 and "UTF-8" in str(err.value)
    assert not (tmp_path / "s.txt").exists()


# -- fences -------------------------------------------------------------------------------

def _refused(fs: FileSystem, path: str, root: Path, *, expect_in_message: str | None = None) -> None:
    """Both read and write of ``path`` are refused, nothing changes under ``root``."""
    before = tree(root)
    writes = Writes()
    fs.on_write = writes
    for call in (lambda: fs.read_text_file(path), lambda: fs.write_text_file(path, "pwned\n")):
        with pytest.raises(FenceError) as err:
            anyio.run(call)
        msg = str(err.value)
        assert err.value.code == -32602
        assert path in msg and str(fs.fence) in msg and "outside the private project" in msg
        if expect_in_message:
            assert expect_in_message in msg
        assert err.value.data["fence"] == str(fs.fence) and err.value.data["path"] == path
    assert tree(root) == before, "nothing may be written on a refusal"
    assert writes == []
    assert not fs.inside_fence(path)


def test_fence_allows_inside(project: Path) -> None:
    fs = FileSystem(project, fence=project)

    async def main():
        assert (await fs.read_text_file("src/main.py")).content == "print('hi')\n"
        await fs.write_text_file("src/new/deep.txt", "ok\n")
        await fs.write_text_file(str(project / "top.txt"), "ok\n")
        # .. that stays inside is fine
        await fs.write_text_file("src/../src/again.txt", "ok\n")

    run(main)
    assert (project / "src/new/deep.txt").read_text() == "ok\n"
    assert (project / "src/again.txt").read_text() == "ok\n"
    assert fs.inside_fence(str(project)) and fs.inside_fence("src")


def test_fence_refuses_dotdot(project: Path) -> None:
    fs = FileSystem(project, fence=project)
    _refused(fs, "../outside/secret.txt", project.parent)
    _refused(fs, "../escape.txt", project.parent)
    _refused(fs, str(project / "src" / ".." / ".." / "outside" / "new.txt"), project.parent)
    _refused(fs, "src/not-yet/../../../escape.txt", project.parent)
    assert not (project.parent / "escape.txt").exists()


def test_fence_refuses_absolute_outside(project: Path) -> None:
    fs = FileSystem(project, fence=project)
    _refused(fs, str(project.parent / "outside" / "secret.txt"), project.parent)
    _refused(fs, str(project.parent / "outside" / "sub" / "new.txt"), project.parent)
    _refused(fs, "/etc/hostname", project.parent)
    assert not (project.parent / "outside" / "sub").exists()


def test_fence_refuses_sibling_prefix(project: Path) -> None:
    fs = FileSystem(project, fence=project)
    assert str(project.parent / "app2").startswith(str(project))  # the trap
    _refused(fs, str(project.parent / "app2" / "secret.txt"), project.parent)
    _refused(fs, str(project) + "2/new.txt", project.parent)
    _refused(fs, "../app2/new.txt", project.parent)
    assert (project.parent / "app2" / "secret.txt").read_text() == "sibling secret\n"


def test_fence_refuses_relative_path_from_a_cwd_outside(project: Path) -> None:
    # the session folder is outside the fence: relative paths resolve there first
    fs = FileSystem(project.parent / "outside", fence=project)
    _refused(fs, "secret.txt", project.parent)
    _refused(fs, "new.txt", project.parent)
    assert not (project.parent / "outside" / "new.txt").exists()


def test_fence_refuses_symlink_pointing_out(project: Path) -> None:
    outside = project.parent / "outside"
    (project / "link-file").symlink_to(outside / "secret.txt")
    (project / "link-dir").symlink_to(outside)
    (project / "dangling").symlink_to(outside / "not-yet.txt")
    fs = FileSystem(project, fence=project)
    _refused(fs, "link-file", project.parent, expect_in_message=str(outside / "secret.txt"))
    _refused(fs, str(project / "link-dir" / "secret.txt"), project.parent)
    # a file that does not exist yet, under a symlinked folder
    _refused(fs, "link-dir/new/file.txt", project.parent)
    # a dangling symlink: writing it would create the file outside
    _refused(fs, "dangling", project.parent)
    assert not (outside / "not-yet.txt").exists() and not (outside / "new").exists()
    assert (outside / "secret.txt").read_text() == "outside secret\n"


def test_symlink_inside_pointing_inside_is_fine(project: Path) -> None:
    (project / "alias").symlink_to(project / "src")
    fs = FileSystem(project, fence=project)
    run(fs.write_text_file, "alias/via-link.txt", "ok\n")
    assert (project / "src" / "via-link.txt").read_text() == "ok\n"


def test_fence_itself_behind_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    (tmp_path / "other").mkdir()
    fs = FileSystem(tmp_path / "alias", fence=tmp_path / "alias")
    run(fs.write_text_file, "a.txt", "ok\n")
    assert (real / "a.txt").read_text() == "ok\n"
    _refused(fs, str(tmp_path / "other" / "x.txt"), tmp_path)


def test_missing_file_outside_the_fence_is_refused_not_missing(project: Path) -> None:
    fs = FileSystem(project, fence=project)
    with pytest.raises(FenceError):
        run(fs.read_text_file, str(project.parent / "outside" / "missing.txt"))


def test_on_write_path_is_the_named_path(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    writes = Writes()
    fs = FileSystem(tmp_path / "alias", on_write=writes)
    run(fs.write_text_file, "sub/../f.txt", "x")
    assert writes == [(tmp_path / "alias" / "f.txt", None, "x")]
    assert (tmp_path / "real" / "f.txt").read_text() == "x"


# -- end to end: the fake agent over real pipes, our EscouadeClient on this side -------------

from acp_clients import escouade_session  # noqa: E402


def test_e2e_write_outside_refused_in_a_private_project(project: Path) -> None:
    outside = project.parent / "outside"
    (project / "out-link").symlink_to(outside)

    async def main():
        before = tree(project.parent)
        async with escouade_session(project, fence=project) as s:
            cases = {
                "../escape.txt": project.parent / "escape.txt",
                str(outside / "abs.txt"): outside / "abs.txt",
                "../app2/sibling.txt": project.parent / "app2" / "sibling.txt",
                "out-link/via-link.txt": outside / "via-link.txt",
            }
            for path, real in cases.items():
                reply = await s.prompt(f"write outside {path}")
                shown = path if str(real) == path else f"{path} (really {real})"
                assert reply == (f"The client refused to write {path}: Refused: {shown} is outside the private "
                                 f"project folder {project}; escouade_nb only reads and writes files inside it")
                assert s.requests("fs/write_text_file")[-1]["path"] == path  # sent as given
                assert s.tool_updates()[-1]["status"] == "failed"
            # inside the fence the same scenario writes
            assert await s.prompt("write outside src/inside.txt") == "Wrote src/inside.txt."
        assert s.writes == [(project / "src" / "inside.txt", None, "Written outside by the fake agent.\n")]
        after = tree(project.parent)
        assert after.pop("app/src/inside.txt") == b"Written outside by the fake agent.\n"
        assert after == before

    anyio.run(main)


def test_e2e_write_outside_without_fence_is_written(project: Path) -> None:
    async def main():
        async with escouade_session(project) as s:
            assert await s.prompt("write outside ../escape.txt") == "Wrote ../escape.txt."
        assert (project.parent / "escape.txt").read_text() == "Written outside by the fake agent.\n"
        assert s.writes == [(project.parent / "escape.txt", None, "Written outside by the fake agent.\n")]

    anyio.run(main)


def test_e2e_crlf_file_stays_crlf(tmp_path: Path) -> None:
    f = tmp_path / "dos.txt"
    f.write_bytes(b"first\r\nsecond\r\n")

    async def main():
        async with escouade_session(tmp_path, fence=tmp_path) as s:
            reply = await s.prompt("crlf dos.txt")
            assert reply == ("Read dos.txt: 2 lines, CRLF. Wrote it back with a line added, sent with LF "
                             "endings. Read it again: 3 lines, CRLF.")
            # what the agent sent: LF; what the disk has: CRLF
            assert s.requests("fs/write_text_file")[0]["content"] == "first\nsecond\nEdited by the fake agent.\n"
        assert f.read_bytes() == b"first\r\nsecond\r\nEdited by the fake agent.\r\n"
        assert s.writes == [(f, "first\r\nsecond\r\n", "first\r\nsecond\r\nEdited by the fake agent.\r\n")]

    anyio.run(main)


def test_e2e_non_utf8_file_is_a_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "legacy.txt"
    original = "déjà vu\n".encode("latin-1")
    f.write_bytes(original)

    async def main():
        async with escouade_session(tmp_path) as s:
            reply = await s.prompt("latin1 legacy.txt")
            assert reply == (
                f"The client could not read legacy.txt: {f} is not UTF-8 text (byte 0xe9 at offset 1); "
                "escouade_nb does not re-encode files, so it will not show it. Overwriting it was refused too: "
                f"{f} is not UTF-8 text (byte 0xe9 at offset 1); escouade_nb does not re-encode files, so it "
                "will not overwrite it.")
            assert await s.prompt("non-utf8 missing.txt") == (
                "The client could not read missing.txt: Resource not found. It let me overwrite it.")
        assert f.read_bytes() == original
        assert s.writes == [(tmp_path / "missing.txt", None, "replaced\n")]

    anyio.run(main)


def test_e2e_fs_not_offered(tmp_path: Path) -> None:
    async def main():
        async with escouade_session(tmp_path, fs=False) as s:
            assert await s.prompt("crlf dos.txt") == "The client does not offer fs/*."
            assert await s.prompt("write outside ../x.txt") == "The client does not offer fs/write_text_file."
        assert not (tmp_path.parent / "x.txt").exists()

    anyio.run(main)


# -- a fenced write or read racing a symlink swap (issue 21, item 6) ---------------------------
# The swap is done by a hook at the exact point between the fence check and the disk access
# (the notebook's validation, or just before the worker thread touches the disk): deterministic.

import escouade_nb.wire.fs as fs_module  # noqa: E402

NOTEBOOK = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n'


def _swap_parent(project: Path, name: str) -> None:
    """``app/nbs`` (a real folder when checked) becomes a symlink to ``outside``."""
    (project / "nbs").rename(project / "nbs-was")
    (project / "nbs").symlink_to(project.parent / "outside")


def _swap_target(project: Path, name: str) -> None:
    """``app/nbs/NAME`` (a real file when checked) becomes a symlink to ``outside/NAME``."""
    (project / "nbs" / name).unlink()
    (project / "nbs" / name).symlink_to(project.parent / "outside" / name)


def _swap_new_target(project: Path, name: str) -> None:
    """``app/nbs/NAME`` (missing when checked) appears as a dangling symlink to ``outside/new-NAME``."""
    (project / "nbs" / name).unlink(missing_ok=True)
    (project / "nbs" / name).symlink_to(project.parent / "outside" / f"new-{name}")


SWAPS = {"parent": _swap_parent, "target": _swap_target, "new-target": _swap_new_target}


def _race_setup(project: Path, swap_name: str, name: str, text: str) -> tuple[FileSystem, Writes, dict[str, bytes]]:
    (project / "nbs").mkdir()
    if swap_name != "new-target":
        (project / "nbs" / name).write_text(text)
    (project.parent / "outside" / name).write_text("outside file\n")
    writes = Writes()
    return FileSystem(project, fence=project, on_write=writes), writes, tree(project.parent / "outside")


def _assert_refused_as_changed(err: pytest.ExceptionInfo, path: str) -> None:
    assert err.value.code == -32602
    assert path in str(err.value) and "changed while" in str(err.value)
    assert err.value.data["path"] == path and err.value.data["reason"] == "changed_during_access"


@pytest.mark.parametrize("swap_name", sorted(SWAPS))
def test_fenced_notebook_write_racing_a_symlink_swap_never_lands_outside(project: Path, swap_name: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fs, writes, outside_before = _race_setup(project, swap_name, "nb.ipynb", NOTEBOOK)
    validate = fs_module.notebook_problem

    def validate_while_swapped(text: str):
        SWAPS[swap_name](project, "nb.ipynb")  # between the fence check and the write
        return validate(text)

    monkeypatch.setattr(fs_module, "notebook_problem", validate_while_swapped)
    path = "nbs/nb.ipynb"
    with pytest.raises(RequestError) as err:
        run(fs.write_text_file, path, NOTEBOOK.replace('"metadata": {}', '"metadata": {"pwned": true}'))
    _assert_refused_as_changed(err, path)
    assert tree(project.parent / "outside") == outside_before, "nothing may land outside the fence"
    assert writes == []


@pytest.mark.parametrize("swap_name", sorted(SWAPS))
def test_fenced_text_write_racing_a_symlink_swap_never_lands_outside(project: Path, swap_name: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fs, writes, outside_before = _race_setup(project, swap_name, "notes.txt", "inside\n")
    write = FileSystem._write

    def write_after_a_swap(*args):
        SWAPS[swap_name](project, "notes.txt")  # the check is done, the worker has not touched the disk yet
        return write(*args)

    monkeypatch.setattr(FileSystem, "_write", staticmethod(write_after_a_swap))
    path = "nbs/notes.txt"
    with pytest.raises(RequestError) as err:
        run(fs.write_text_file, path, "pwned\n")
    _assert_refused_as_changed(err, path)
    assert tree(project.parent / "outside") == outside_before, "nothing may land outside the fence"
    assert writes == []


def test_fenced_read_racing_a_symlink_swap_shows_nothing_from_outside(project: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fs, _writes, _before = _race_setup(project, "target", "notes.txt", "inside\n")
    read = FileSystem._read

    def read_after_a_swap(*args):
        _swap_target(project, "notes.txt")
        return read(*args)

    monkeypatch.setattr(FileSystem, "_read", staticmethod(read_after_a_swap))
    with pytest.raises(RequestError) as err:
        run(fs.read_text_file, "nbs/notes.txt")
    _assert_refused_as_changed(err, "nbs/notes.txt")
    assert "outside file" not in str(err.value)


def test_fenced_write_into_a_folder_moved_out_after_it_was_opened_is_refused(project: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # not a symlink this time: the checked folder itself is moved outside while the write holds it open
    fs, writes, _before = _race_setup(project, "target", "notes.txt", "inside\n")
    write_in = fs_module._write_in

    def write_in_a_moved_folder(*args):
        (project / "nbs").rename(project.parent / "outside" / "moved")
        return write_in(*args)

    monkeypatch.setattr(fs_module, "_write_in", write_in_a_moved_folder)
    with pytest.raises(RequestError) as err:
        run(fs.write_text_file, "nbs/notes.txt", "pwned\n")
    _assert_refused_as_changed(err, "nbs/notes.txt")
    moved = project.parent / "outside" / "moved"
    assert {p.name: p.read_text() for p in moved.iterdir()} == {"notes.txt": "inside\n"}  # no temp file left
    assert writes == []


def test_write_keeps_the_mode_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o750)
    fs = FileSystem(tmp_path, fence=tmp_path)
    run(fs.write_text_file, "run.sh", "#!/bin/sh\necho hi\n")
    run(fs.write_text_file, "new.txt", "x\n")
    umask = os.umask(0o022)
    os.umask(umask)
    assert (script.stat().st_mode & 0o7777, script.read_text()) == (0o750, "#!/bin/sh\necho hi\n")
    assert (tmp_path / "new.txt").stat().st_mode & 0o7777 == 0o666 & ~umask
    with pytest.raises(RequestError):
        run(fs.write_text_file, "new.txt", "bad \ud800\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.txt", "run.sh"]


def test_write_in_a_folder_that_takes_no_new_file_overwrites_in_place(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # root ignores folder permissions: the folder's refusal is simulated at the one call that meets it
    (tmp_path / "one.txt").write_text("a\n")
    (tmp_path / "linked.txt").write_text("b\n")
    os.link(tmp_path / "linked.txt", tmp_path / "hard-link.txt")
    real_open = os.open

    def folder_refuses_new_files(name, flags, *args, **kwargs):
        if isinstance(name, str) and name.endswith(".escouade-write"):
            raise PermissionError(13, "Permission denied", name)
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", folder_refuses_new_files)
    fs = FileSystem(tmp_path, fence=tmp_path)
    run(fs.write_text_file, "one.txt", "a\nb\n")
    assert (tmp_path / "one.txt").read_text() == "a\nb\n"
    with pytest.raises(RequestError) as err:  # in place would write the other link too
        run(fs.write_text_file, "linked.txt", "pwned\n")
    assert "hard links" in str(err.value) and "linked.txt" in str(err.value)
    assert (tmp_path / "hard-link.txt").read_text() == "b\n"
    with pytest.raises(RequestError) as err:
        run(fs.write_text_file, "brand-new.txt", "x\n")
    assert "Permission denied" in str(err.value) and not (tmp_path / "brand-new.txt").exists()


def test_a_hard_link_to_a_file_outside_is_not_written_through(project: Path) -> None:
    # a name inside the fence for a file outside (made by a terminal, say): the write replaces the
    # name inside, the file outside keeps its text
    outside = project.parent / "outside" / "secret.txt"
    os.link(outside, project / "linked.txt")
    fs = FileSystem(project, fence=project)
    run(fs.write_text_file, "linked.txt", "replaced\n")
    assert (project / "linked.txt").read_text() == "replaced\n"
    assert outside.read_text() == "outside secret\n"


def test_reading_a_fifo_is_refused_not_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    for call in (FileSystem(tmp_path).read_text_file, FileSystem(tmp_path).write_text_file):
        with pytest.raises(RequestError) as err:
            run(call, "pipe", *(["x"] if call.__name__ == "write_text_file" else []))
        assert "not a regular file" in str(err.value)


def test_a_file_where_a_folder_is_expected_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(RequestError) as err:
        run(FileSystem(tmp_path).write_text_file, "f/new.txt", "x")
    assert f"{tmp_path / 'f'} is not a folder" in str(err.value) and "f/new.txt" in str(err.value)
