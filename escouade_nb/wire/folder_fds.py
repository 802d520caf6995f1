"""Reaching a file without following a symlink: a walk of folder file descriptors.

One home for the walk the kernel does wherever a path may be changed under it by someone
else (a sandboxed agent's own process): the client file system (:mod:`.fs`), the review's
Keep and Reject (``engine/review/file_review.py``) and a rewind (``engine/review/checkpoints.py``).

A path is never handed to the OS as a string it resolves again. It is opened one
component at a time: each folder with ``O_NOFOLLOW | O_DIRECTORY`` (``O_PATH`` on Linux)
relative to the previous one's descriptor (``openat``), from ``/`` (:func:`open_folder`)
or from a folder already held (:func:`open_below`); the last component is then read,
written, renamed or unlinked relative to its folder's descriptor (``dir_fd=``,
``src_dir_fd=``/``dst_dir_fd=``). ``O_NOFOLLOW`` alone covers only the last component: a
folder above it swapped for a symlink (``mv sub sub_old; ln -s /elsewhere sub``, or an
atomic ``renameat2(RENAME_EXCHANGE)`` racing the kernel) would be followed. Here it is
not: a symlink anywhere on the way is :class:`Changed` (``where`` the component), a
non-folder is ``NotADirectoryError``, and nothing is touched.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path

from .._errors import EscouadeError

__all__ = ["FOLDER_FLAGS", "Changed", "open_folder", "open_below", "still_at", "entry", "read_at", "replace_at",
           "symlink_at"]

FOLDER_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW
"""How a folder on the way is opened: not following a symlink, only a folder (``O_PATH``
where there is one: no read permission needed)."""


class Changed(EscouadeError):
    """``where`` (a path) is not what the walk may go through: ``what`` says why (``is now a
    symlink``, ``was moved or removed``, ``is now another folder``…). Its users turn it into
    their own error (the client fs's -32602, a Reject's ``FileChanged``, a rewind's notice)."""

    def __init__(self, where: Path, what: str) -> None:
        super().__init__(where, what)
        self.where, self.what = where, what

    @property
    def symlink(self) -> bool:
        """Whether ``where`` is a symbolic link."""
        return "symlink" in self.what


def _diagnose(dir_fd: int, here: Path, exc: OSError) -> Exception:
    """Why opening ``here`` (a folder expected) relative to ``dir_fd`` failed."""
    try:
        st = os.stat(here.name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return exc
    if stat.S_ISLNK(st.st_mode):
        return Changed(here, "is now a symlink")
    if not stat.S_ISDIR(st.st_mode):
        return NotADirectoryError(errno.ENOTDIR, f"{here} is not a folder")
    return exc


def open_below(fd: int, base: Path, parts: Sequence[str], *, create: bool = False,
               flags: int = FOLDER_FLAGS) -> int | None:
    """An fd of the folder ``parts`` below the folder held by ``fd`` (``base`` its path,
    for messages; ``fd`` itself is left open), each component opened relative to the
    previous one without following a symlink; missing folders are made when ``create``,
    else ``None``. The last folder is opened with ``flags`` (``O_RDONLY | O_DIRECTORY |
    O_NOFOLLOW`` to list it). Raises :class:`Changed` for a symlink on the way,
    ``NotADirectoryError`` for another kind of file, ``OSError``. ``parts`` empty: a new fd
    of ``fd``'s folder."""
    if any(p in ("", ".", "..") or "/" in p for p in parts):
        raise ValueError(f"not a path below a folder: {'/'.join(parts)!r}")
    here = base
    current = os.open(".", flags if not parts else FOLDER_FLAGS, dir_fd=fd)
    try:
        for i, part in enumerate(parts):
            here = here / part
            want = flags if i == len(parts) - 1 else FOLDER_FLAGS
            try:
                try:
                    child = os.open(part, want, dir_fd=current)
                except FileNotFoundError:
                    if not create:
                        os.close(current)
                        return None
                    try:
                        os.mkdir(part, dir_fd=current)
                    except FileExistsError:  # made meanwhile: opened below like any other
                        pass
                    child = os.open(part, want, dir_fd=current)
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                raise _diagnose(current, here, exc) from None
            os.close(current)
            current = child
        return current
    except BaseException:
        os.close(current)
        raise


def open_folder(real: Path, *, create: bool = False, flags: int = FOLDER_FLAGS) -> int | None:
    """An fd of the folder at the absolute path ``real``, reached from ``/`` without
    following any symlink (so ``real`` must be a real path); missing folders are made when
    ``create``, else ``None``. Raises :class:`Changed` for a component that is a symlink,
    ``NotADirectoryError``, ``OSError``."""
    root = os.open("/", FOLDER_FLAGS)
    try:
        return open_below(root, Path("/"), real.parts[1:], create=create, flags=flags)
    finally:
        os.close(root)


def still_at(fd: int, real: Path) -> None:
    """Raise :class:`Changed` unless the folder ``fd`` is still the one at ``real`` (a
    folder moved away after it was opened, with all it holds)."""
    try:
        now = open_folder(real)
    except Changed:
        raise
    except OSError:
        now = None
    if now is None:
        raise Changed(real, "was moved or removed")
    try:
        a, b = os.fstat(fd), os.fstat(now)
    finally:
        os.close(now)
    if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
        raise Changed(real, "is now another folder")


def entry(dir_fd: int, name: str) -> os.stat_result | None:
    """``lstat`` of ``name`` in the folder ``dir_fd`` (``None`` when missing)."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def read_at(dir_fd: int, name: str, where: Path, limit: int | None = None) -> tuple[bytes, os.stat_result] | None:
    """The bytes (at most ``limit + 1`` when given) and ``fstat`` of the regular file
    ``name`` in the folder ``dir_fd`` (``where`` its path, for messages), never following a
    symlink, never opening a FIFO or a device; ``None`` when there is none. Raises
    :class:`Changed` for a symlink, a folder or another kind of file there."""
    st = entry(dir_fd, name)
    if st is None:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise Changed(where, "is now a symlink")
    if not stat.S_ISREG(st.st_mode):
        raise Changed(where, "is not a regular file")
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Changed(where, "is now a symlink") from None
        raise
    with open(fd, "rb") as fh:
        opened = os.fstat(fh.fileno())
        if not stat.S_ISREG(opened.st_mode):
            raise Changed(where, "is not a regular file")
        return (fh.read() if limit is None else fh.read(limit + 1)), opened


def _temp_name(name: str) -> str:
    return f".{name[:64]}.{secrets.token_hex(6)}.escouade-write"


def _drop(dir_fd: int, temp: str) -> None:
    try:
        os.unlink(temp, dir_fd=dir_fd)
    except OSError:
        pass


def _swap_in(dir_fd: int, temp: str, name: str) -> None:
    """``temp`` renamed over ``name`` in the folder ``dir_fd`` (``renameat``); removed if
    that fails."""
    try:
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        _drop(dir_fd, temp)
        raise


def replace_at(dir_fd: int, name: str, data: bytes, mode: int) -> os.stat_result:
    """Make ``name`` in the folder ``dir_fd`` a regular file holding ``data`` with the
    permission bits ``mode`` (exactly, whatever the umask): written to a new file beside
    it, which then replaces the name (``renameat``: a symlink there is replaced, not
    followed). The new file's ``fstat``."""
    temp = _temp_name(name)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    try:
        with open(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), stat.S_IMODE(mode))
            st = os.fstat(fh.fileno())
    except BaseException:
        _drop(dir_fd, temp)
        raise
    _swap_in(dir_fd, temp, name)
    return st


def symlink_at(dir_fd: int, name: str, target: str) -> None:
    """Make ``name`` in the folder ``dir_fd`` a symlink to ``target`` (``symlinkat`` beside
    it, then ``renameat`` over the name; the link is made, never followed)."""
    temp = _temp_name(name)
    os.symlink(target, temp, dir_fd=dir_fd)
    _swap_in(dir_fd, temp, name)
