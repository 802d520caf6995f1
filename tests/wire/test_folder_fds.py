"""The walk of folder fds (escouade_nb/wire/folder_fds.py) that the client fs, a Reject and a rewind
share: a symlink anywhere on the way is refused, never followed; the last part is written beside its
name and renamed over it (a symlink there replaced, not followed)."""

from __future__ import annotations

import os
import stat

import pytest

from escouade_nb.wire.folder_fds import Changed, open_below, open_folder, read_at, replace_at, symlink_at


def test_a_symlink_on_the_way_is_refused_and_what_it_points_to_is_untouched(tmp_path):
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    out = tmp_path / "out"
    out.mkdir()
    (out / "f.txt").write_bytes(b"outside\n")
    os.symlink(out, root / "a" / "sub")
    top = open_folder(root)
    assert top is not None
    try:
        with pytest.raises(Changed) as refused:
            open_below(top, root, ["a", "sub"])
        assert refused.value.symlink and refused.value.where == root / "a" / "sub"
        with pytest.raises(Changed):
            open_below(top, root, ["a", "sub", "deeper"], create=True)
        assert not (out / "deeper").exists()
        assert open_below(top, root, ["a", "missing"]) is None
        with pytest.raises(ValueError):
            open_below(top, root, ["..", "out"])
    finally:
        os.close(top)
    with pytest.raises(Changed):
        open_folder(root / "a" / "sub")
    assert (out / "f.txt").read_bytes() == b"outside\n"


def test_replace_at_replaces_a_symlink_at_the_name_and_sets_the_mode_exactly(tmp_path):
    out = tmp_path / "out.txt"
    out.write_bytes(b"outside\n")
    os.symlink(out, tmp_path / "f.txt")
    fd = open_folder(tmp_path)
    assert fd is not None
    try:
        with pytest.raises(Changed):
            read_at(fd, "f.txt", tmp_path / "f.txt")
        st = replace_at(fd, "f.txt", b"mine\n", 0o751)
        assert stat.S_IMODE(st.st_mode) == 0o751
        assert read_at(fd, "f.txt", tmp_path / "f.txt")[0] == b"mine\n"
        symlink_at(fd, "l", "f.txt")
    finally:
        os.close(fd)
    assert out.read_bytes() == b"outside\n" and not (tmp_path / "f.txt").is_symlink()
    assert os.readlink(tmp_path / "l") == "f.txt"
    assert [p.name for p in tmp_path.iterdir() if "escouade-write" in p.name] == []
