"""Review after the fact: the files an agent changed in a turn, pending the user's Keep or
Reject (``review=True``: ``%escouade NAME --review``, ``squad.start(..., review=True)``,
``review: true`` in the folder's ``.escouade.yml``).

The agent's writes land at once (it goes on working); each file it changed in a turn is
then a :class:`FileEdit` in ``agent.pending_edits``, next to its changes to the open
notebook (:mod:`.cell_review`: the same list, the same :class:`~.cell_review.Settling`,
answered edits leave it). Two ways a file changes, both caught:

* through our client file system (``fs/write_text_file``): :meth:`FileWatch.written` is
  told of each write (the text before it, so even a file outside the watched folder is
  reviewed);
* by the agent itself, with its own tools (a shell, its own file writer: a client-side
  diff never sees those): the agent's folder is snapshot before each turn and compared
  after it (:meth:`FileWatch.before_turn`, :meth:`FileWatch.after_turn`).

No window between turns: the agent's process lives between turns. The folder is snapshot
before the process is spawned (:meth:`FileWatch.process_started`) and at each turn's end,
and compared again at the next turn's start and when the process ends
(:meth:`FileWatch.process_ended`): a change then is pending too, ``through == {"between"}``,
marked :data:`BETWEEN` (the kernel cannot tell the agent's process from the user there; a
notebook counts only when what runs of it changed, :func:`_notebook_code`). At a kernel
shutdown (interpreter exit, no loop) :meth:`FileWatch.killed_at_exit` compares in the exiting
thread and records what changed, pending.

What is watched
    The agent's folder (``cwd``). In a git repository the files are those git lists
    (``git ls-files --cached --others --exclude-standard``, read-only: it writes neither
    the index nor a ref; run in the kernel's private repository over the folder, reading no
    configuration the agent could have written: :mod:`..kernel_git`): tracked and untracked files, git-ignored
    ones left out. Elsewhere a plain walk. Both skip :data:`SKIPPED_FOLDERS` (``.git``,
    ``node_modules``, ``__pycache__``…) and symlinks (neither followed nor reviewed), and the
    notebook the kernel runs (JupyterLab saves it while the agent works) unless the agent
    wrote it through our fs. Limits (:data:`MAX_FILE_BYTES` per file, :data:`MAX_FILES`
    files, :data:`MAX_TOTAL_BYTES` in all): a file over them (or unreadable) is not
    reviewed, and the conversation names it when it changed (the file count: once).
    Snapshots run in a worker thread (``asyncio.to_thread``, the loop's executor, joined at
    exit: not anyio's, see ``tests/core/test_layering.py``), git as an async subprocess; a
    file unchanged since the last snapshot (same size, times, inode) is not read again when
    its times were older than its read by the kernel's writeback window
    (:func:`writeback_window_ns`) and it lies on a disk file system (:data:`WRITEBACK_FILESYSTEMS`):
    git's "racily clean". A write through a shared mapping (``mmap``) moves no time while its
    page is dirty and writable, and a page stays so until written back: only a file whose
    times are older than that window at its read is known to move its times at its next
    write. Any other file (changed recently, on tmpfs or another file system) is read again
    at each snapshot.

Keep and Reject
    ``keep()`` leaves the file as the agent made it. ``reject()`` puts back the bytes the
    file had before the agent's change, exactly (line endings, encoding, binary; mode
    bits kept), a new file removed, a deleted file restored (its folders made again); it
    is refused (:class:`FileChanged`, the edit stays pending) when the file is no longer
    what the agent left (someone changed it since: nothing is overwritten). Every file a Reject
    reads, writes or removes (a compiled form too) is reached from the agent's folder by a walk
    of folder fds that follows no symlink (:mod:`...wire.folder_fds`; :func:`_folder`): a folder
    the agent swapped for a symlink after its turn refuses the Reject (:class:`FileChanged`, "a
    symbolic link in its path"), and nothing outside the folder is touched. A second turn
    changing a file still pending stays one edit, from the bytes before the first change.
    A text file's edit has :attr:`FileEdit.hunks`: each hunk kept or rejected alone
    (the file rewritten with that hunk taken back; the edit is kept or rejected once no
    hunk is left). The agent is told of rejections in its next prompt (or the kernel
    tool result before it), naming the files (:meth:`~.cell_review.EditReview.take_notice`).

On record
    Each pending file and each answer is a ``file_review`` event of the transcript
    (``path``, ``change``, ``outcome`` — ``pending``, ``kept``, ``rejected``, ``dropped`` —,
    ``through``, ``hunk``) and a notice of the conversation (so ``%escouade resume`` shows
    it; :func:`restore_settled` rebuilds ``edit_review.settled``). The bytes before a change
    live in memory only: a change still pending when the kernel stops stays as written.
"""

from __future__ import annotations

import asyncio
import difflib
import importlib.util
import json
import logging
import marshal
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._errors import EscouadeError
from ...wire.folder_fds import Changed, entry, open_below, open_folder, read_at, replace_at, still_at
from .cell_review import EditReview, Settling
from ..kernel_git import GitRepo, PrivateRepo, WorktreeError, find_repository

if TYPE_CHECKING:
    from ..interfaces import EditReviewPart

log = logging.getLogger(__name__)

__all__ = ["FileEdit", "Hunk", "FileWatch", "FileChanged", "restore_settled", "FILE_EVENT", "MAX_FILE_BYTES",
           "MAX_FILES", "MAX_TOTAL_BYTES", "SKIPPED_FOLDERS"]

FILE_EVENT = "file_review"
"""The transcript ``event`` of a file pending review and of each answer."""
MAX_FILE_BYTES = 2 * 1024 * 1024
"""Bytes of a file above which it is not reviewed (its change is said, not offered)."""
MAX_FILES = 20_000
"""Files of the folder watched at most (the rest is not reviewed; said once)."""
MAX_TOTAL_BYTES = 128 * 1024 * 1024
"""Bytes held for one snapshot at most (files beyond are not reviewed; said once)."""
SKIPPED_FOLDERS = frozenset({".git", ".hg", ".svn", ".jj", ".ipynb_checkpoints", "__pycache__", "node_modules",
                             ".venv", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox"})
"""Folders never walked, at any depth."""
WRITEBACK_MARGIN_NS = 30_000_000_000
"""Added to the kernel's writeback window (:func:`writeback_window_ns`): the flusher runs late
under I/O load, file times are coarse (a clock tick), the clock may step."""
DEFAULT_WRITEBACK_NS = (3000 + 500) * 10_000_000
"""The writeback window when ``/proc/sys/vm`` cannot be read: Linux's defaults
(``dirty_expire_centisecs`` 3000, ``dirty_writeback_centisecs`` 500)."""
WRITEBACK_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "bcachefs", "jfs", "reiserfs"})
"""File systems whose pages written through a shared mapping are written back by the kernel's
flusher and then write-protected, so that the next write through the mapping faults and
moves the file's mtime and ctime (``page_mkwrite``). A folder on any other (tmpfs, ramfs:
no writeback, a dirty page stays writable and the times never move; overlay, whose upper
layer may be tmpfs; network and FUSE file systems) never trusts a file's times: each
snapshot reads all its files."""
DIFF_CONTEXT = 3
"""Lines of context around each hunk (unified diff)."""
CHANGE_WORDS = {"create": "new file", "edit": "edit of", "delete": "deletion of"}
"""How a file change is named (:attr:`FileEdit.label`)."""
BETWEEN = "changed between turns, by the agent or by you"
"""How a change seen between turns is marked (:attr:`FileEdit.label`): the kernel cannot tell
the agent's process from the user there."""


class FileChanged(EscouadeError):
    """The file is no longer what the agent left: a Reject would overwrite someone's change."""


# -- snapshots (worker threads) ----------------------------------------------------------------------
@dataclass
class _Seen:
    """One regular file as a snapshot saw it; ``data`` None: over a limit, not held."""

    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    mode: int
    read_ns: int
    data: bytes | None


@dataclass
class _Snapshot:
    files: dict[str, _Seen] = field(default_factory=dict)  # path relative to the folder -> what it was
    truncated: bool = False  # more than MAX_FILES files


def _walk(root: Path) -> list[str]:
    """The regular files under ``root`` (relative, ``/``-separated), :data:`SKIPPED_FOLDERS`
    and symlinked folders left out; at most ``MAX_FILES + 1``."""
    out: list[str] = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS)
        rel = os.path.relpath(folder, root)
        for name in sorted(files):
            out.append(name if rel == "." else f"{rel}/{name}")
            if len(out) > MAX_FILES:
                return out
    return out


def _skipped(rel: str) -> bool:
    return any(part in SKIPPED_FOLDERS for part in rel.split("/")[:-1]) and not runs_code(rel)


SITE_FILES = frozenset({"sitecustomize.py", "usercustomize.py"})
"""Files Python runs at its start when they sit in ``site-packages`` (besides ``*.pth``)."""


GIT_DATA_FOLDERS = frozenset({"objects", "refs", "logs"})
"""Folders of a ``.git`` holding git's data (objects, refs and their logs), not what it runs."""
GIT_DATA_FILES = frozenset({"index", "HEAD", "ORIG_HEAD", "FETCH_HEAD", "MERGE_HEAD", "MERGE_MSG", "MERGE_MODE",
                            "AUTO_MERGE", "CHERRY_PICK_HEAD", "REVERT_HEAD", "COMMIT_EDITMSG", "packed-refs",
                            "description", "gitk.cache"})
"""Files of a ``.git`` (or of a worktree's admin folder) that git writes as data as it works."""


def _git_data(parts: Sequence[str]) -> bool:
    """Whether ``parts`` (a path inside ``.git``, split) is git's data, which runs nothing and
    changes with every commit: under :data:`GIT_DATA_FOLDERS`, one of :data:`GIT_DATA_FILES`,
    or a lock file."""
    return any(part in GIT_DATA_FOLDERS for part in parts[:-1]) or parts[-1] in GIT_DATA_FILES or \
        parts[-1].endswith(".lock")


def runs_code(rel: str) -> bool:
    """Whether ``rel`` (relative to the agent's folder, ``/``-separated) is a file that makes
    a tool run code without being one of "your files" — reviewed whatever ``.gitignore`` says
    and inside :data:`SKIPPED_FOLDERS`: every file of ``.git`` but git's data
    (:func:`_git_data`: objects, refs, logs, the index…) — its ``config``, ``hooks/**``,
    ``info/**``, a ``commondir`` (git then reads another folder's config and hooks: that
    folder's files are under ``.git`` too, or refused by the kernel), ``modules/**`` (the
    submodules' own config and hooks), a rebase's todo (its ``exec`` lines) —, ``*.pyc`` (Python imports a
    ``__pycache__/x.*.pyc`` instead of ``x.py`` when its header matches, an unchecked-hash one
    always, and a lone ``x.pyc`` as a module), ``*.pth`` (run by ``site`` at every start of
    the Python whose ``site-packages`` holds it), and ``sitecustomize.py`` /
    ``usercustomize.py`` in a ``site-packages``."""
    parts = rel.split("/")
    if parts[0] == ".git":
        return len(parts) > 1 and not _git_data(parts[1:])
    name = parts[-1]
    if name.endswith((".pyc", ".pth")):
        return True
    return name in SITE_FILES and len(parts) > 1 and parts[-2] == "site-packages"


def _code_files(root: Path, names: Sequence[str]) -> list[str]:
    """The files under ``root`` that :func:`runs_code` names and a listing (``names``: git's,
    which leaves out ignored files, or the walk's, which skips :data:`SKIPPED_FOLDERS`) does
    not hold (a worker thread): the files of ``.git`` but git's data (:func:`runs_code`); in each
    folder that holds a listed file (and ``root``), its ``*.pyc`` and ``*.pth`` and those of its
    ``__pycache__``; in each virtual environment at the top of ``root`` (a folder with
    ``pyvenv.cfg``), ``lib/python*/site-packages``'s ``*.pth`` and ``sitecustomize.py`` /
    ``usercustomize.py``. Relative, ``/``-separated; symlinks left out (as everywhere)."""
    out: list[str] = []

    def files_in(rel_dir: str, keep: Callable[[str], bool]) -> None:
        try:
            with os.scandir(root / rel_dir if rel_dir else root) as it:
                for entry in it:
                    if keep(entry.name) and entry.is_file(follow_symlinks=False):
                        out.append(f"{rel_dir}/{entry.name}" if rel_dir else entry.name)
        except OSError:  # not there, not a folder, unreadable
            pass

    git = root / ".git"
    if git.is_dir() and not git.is_symlink():
        for folder, dirs, files in os.walk(git, followlinks=False):
            dirs[:] = sorted(d for d in dirs if d not in GIT_DATA_FOLDERS)
            rel = Path(folder).relative_to(root).as_posix()
            out.extend(f"{rel}/{f}" for f in sorted(files) if runs_code(f"{rel}/{f}"))
    folders = {""}
    for name in names:  # each listed file's folder and the folders above it
        folder = name.rpartition("/")[0]
        while folder not in folders:
            folders.add(folder)
            folder = folder.rpartition("/")[0]
    for rel_dir in sorted(folders):
        if _skipped(rel_dir + "/x"):
            continue
        cache = False
        try:  # one read of the folder: its own *.pyc / *.pth, and whether it has a __pycache__
            with os.scandir(root / rel_dir if rel_dir else root) as it:
                for entry in it:
                    name = entry.name
                    if name == "__pycache__":
                        cache = entry.is_dir(follow_symlinks=False)
                    elif name.endswith((".pyc", ".pth")) and entry.is_file(follow_symlinks=False):
                        out.append(f"{rel_dir}/{name}" if rel_dir else name)
        except OSError:
            continue
        if cache:
            files_in(f"{rel_dir}/__pycache__" if rel_dir else "__pycache__", lambda n: n.endswith(".pyc"))
    try:
        with os.scandir(root) as it:
            venvs = [e.name for e in it if e.is_dir(follow_symlinks=False) and (root / e.name / "pyvenv.cfg").is_file()]
    except OSError:
        venvs = []
    for venv in sorted(venvs):
        for site in sorted((root / venv).glob("lib/python*/site-packages")):
            if site.is_dir() and not site.is_symlink():
                rel = site.relative_to(root).as_posix()
                files_in(rel, lambda n: n.endswith(".pth") or n in SITE_FILES)
    listed = set(names)
    return [n for n in dict.fromkeys(out) if n not in listed]


def writeback_window_ns() -> int | None:
    """How long after a page of a file was last made dirty through a shared mapping it may
    still be dirty, and so writable without a fault that moves the file's times: the age at
    which the kernel's flusher writes dirty data back (``/proc/sys/vm/dirty_expire_centisecs``)
    plus the period at which it wakes (``/proc/sys/vm/dirty_writeback_centisecs``) — Linux's
    ``Documentation/admin-guide/sysctl/vm.rst`` — plus :data:`WRITEBACK_MARGIN_NS`;
    :data:`DEFAULT_WRITEBACK_NS` for the first two when unreadable. None when the periodic
    writeback is off (``dirty_writeback_centisecs`` 0: a page may stay dirty for ever)."""
    try:
        expire = int(Path("/proc/sys/vm/dirty_expire_centisecs").read_text())
        period = int(Path("/proc/sys/vm/dirty_writeback_centisecs").read_text())
    except (OSError, ValueError):
        return DEFAULT_WRITEBACK_NS + WRITEBACK_MARGIN_NS
    if period <= 0:
        return None
    return (max(expire, 0) + period) * 10_000_000 + WRITEBACK_MARGIN_NS


def _unescape(field: str) -> str:
    """A path of ``/proc/self/mountinfo`` (space, tab, newline, backslash as octal escapes)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _filesystem(root: Path) -> str | None:
    """The type of the file system ``root`` lies on (the mount of ``/proc/self/mountinfo``
    whose mount point is the longest prefix of its real path; the last one mounted there), or
    None when unknown."""
    try:
        real = os.path.realpath(root)
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    best, kind = -1, None
    for line in lines:
        fields = line.split(" ")
        try:
            point, fstype = _unescape(fields[4]), fields[fields.index("-", 6) + 1]
        except (IndexError, ValueError):
            continue
        if point == "/" or real == point or real.startswith(point.rstrip("/") + "/"):
            if len(point) >= best:
                best, kind = len(point), fstype
    return kind


def _trusted_until(root: Path) -> tuple[int, int] | None:
    """How ``_scan`` may trust a cached file under ``root``: the device it must be on (the
    folder's own) and the writeback window its times must be older than at its read; None:
    never (not a :data:`WRITEBACK_FILESYSTEMS`, writeback off, the folder unreadable)."""
    window = writeback_window_ns()
    if window is None or _filesystem(root) not in WRITEBACK_FILESYSTEMS:
        return None
    try:
        return os.stat(root).st_dev, window
    except OSError:
        return None


class _Folders:
    """The folders of a snapshot's files, each reached from the agent's folder by a walk of
    folder fds that follows no symlink (:mod:`...wire.folder_fds`): a folder swapped for a
    symlink while the snapshot runs is not read through. Holds one folder's fd at a time (the
    names come grouped by folder); :meth:`close` when done."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))
        try:
            self.top = open_folder(self.root)
        except (Changed, OSError):  # not there (any more), not a folder: nothing to read
            self.top = None
        self.at: tuple[str, ...] | None = None
        self.fd: int | None = None

    def of(self, parts: tuple[str, ...]) -> int | None:
        """An fd of the folder ``parts`` below the root (None: missing, or not reachable
        without following a symlink)."""
        if parts == self.at:
            return self.fd
        if self.fd is not None:
            os.close(self.fd)
        self.at, self.fd = parts, None
        if self.top is not None:
            try:
                self.fd = open_below(self.top, self.root, parts)
            except (Changed, OSError, ValueError):
                self.fd = None
        return self.fd

    def close(self) -> None:
        for fd in (self.fd, self.top):
            if fd is not None:
                os.close(fd)
        self.fd = self.top = None


def _scan(root: Path, names: Iterable[str], cache: dict[str, _Seen]) -> _Snapshot:
    """What ``names`` (relative to ``root``) are now: a file unchanged since ``cache`` saw it
    (size, times, inode) keeps the bytes read then when its times were older than its read by
    the writeback window, on a file system that writes back (:func:`_trusted_until`); any
    other is read again. Missing files, folders and symlinks are left out; each file is
    reached from ``root`` without following a symlink (:class:`_Folders`)."""
    snap = _Snapshot()
    total = 0
    trust = _trusted_until(root) if cache else None
    folders = _Folders(root)
    try:
        for count, rel in enumerate(names):
            if count >= MAX_FILES:
                snap.truncated = True
                break
            if _skipped(rel):
                continue
            parts = tuple(rel.split("/"))
            fd = folders.of(parts[:-1])
            if fd is None:
                continue
            try:
                st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            old = cache.get(rel)
            if trust is not None and old is not None and old.data is not None and st.st_dev == trust[0] and (
                    old.size, old.mtime_ns, old.ctime_ns, old.ino) == (
                    st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) and max(
                    old.mtime_ns, old.ctime_ns) < old.read_ns - trust[1]:
                snap.files[rel] = old
                total += old.size
                continue
            data: bytes | None = None
            read_ns = time.time_ns()
            if st.st_size <= MAX_FILE_BYTES and total + st.st_size <= MAX_TOTAL_BYTES:
                try:
                    with open(os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd), "rb") as fh:
                        data = fh.read(MAX_FILE_BYTES + 1)
                except OSError:  # unreadable (permissions…): seen, not held, so never taken for a deletion
                    data = None
                if data is None:
                    pass
                elif len(data) > MAX_FILE_BYTES:
                    data = None
                else:
                    total += len(data)
            snap.files[rel] = _Seen(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode, read_ns, data)
    finally:
        folders.close()
    return snap


_Found = dict[Path, tuple[str, "bytes | None", "bytes | None", "int | None", set[str]]]


def _notebook_code(data: bytes | None) -> Any:
    """What runs of a notebook's bytes: its cells' types and sources and its kernel's name
    (outputs, execution counts and other metadata left out: what a Jupyter save changes
    when one only runs cells); None when it is not a notebook's JSON."""
    if data is None:
        return None
    try:
        nb = json.loads(data)
        cells = [(c.get("cell_type"), "".join(c["source"]) if isinstance(c.get("source"), list) else c.get("source"))
                 for c in nb["cells"]]
        return cells, ((nb.get("metadata") or {}).get("kernelspec") or {}).get("name")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _same_code(b: bytes | None, a: bytes | None) -> bool:
    """Two notebook versions that run the same (:func:`_notebook_code`); False when either
    is not a notebook."""
    code = _notebook_code(b)
    return code is not None and code == _notebook_code(a)


def _compiled_from_source(path: Path, data: bytes | None, root: Path | None = None) -> bool:
    """Whether ``data``, a ``.pyc`` at ``path`` (``…/__pycache__/x.TAG[.opt-N].pyc``), is
    exactly what this Python writes for its source ``x.py`` as it is now: this Python's tag and
    magic number, a timestamp header matching the source's time and size (or a checked hash
    matching its bytes), and the code compiled from it, byte for byte. Such a file says what
    the source says (Python makes one at each import): its change is not shown. Anything else
    — an unchecked-hash ``.pyc`` (used whatever the source becomes), another Python's, one
    whose source is missing, a forgery — is. Never loads ``data`` (``marshal`` is not safe
    against crafted bytes): it compiles the source and compares."""
    if data is None or path.parent.name != "__pycache__" or len(data) < 16:
        return False
    parts = path.name.split(".")
    tag = sys.implementation.cache_tag
    if tag is None or len(parts) not in (3, 4) or parts[1] != tag or parts[-1] != "pyc":
        return False
    level = 0
    if len(parts) == 4:
        if parts[2] not in ("opt-1", "opt-2"):
            return False
        level = int(parts[2][-1])
    if data[:4] != importlib.util.MAGIC_NUMBER:
        return False
    try:
        source = Path(importlib.util.source_from_cache(str(path)))
        found = _read_stat(source, root)  # by the walk: not a source behind a folder swapped for a symlink
        if found is None or len(found[0]) > MAX_FILE_BYTES:
            return False
        code, st = found
        flags = int.from_bytes(data[4:8], "little")
        if flags == 0:
            header = data[8:16] == ((int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                                    + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little"))
        elif flags == 3:  # checked hash
            header = data[8:16] == importlib.util.source_hash(code)
        else:  # 1: unchecked hash, never compared with its source
            return False
        compiled = compile(code, str(source), "exec", dont_inherit=True, optimize=level)
        return header and data[16:] == marshal.dumps(compiled)
    except (OSError, FileChanged, ValueError, SyntaxError, RecursionError, MemoryError, NotImplementedError):
        return False


def _compare(cwd: Path, before: _Snapshot, after: _Snapshot, written: dict[Path, str | None],
             excluded: set[Path], between: bool = False) -> tuple[_Found, list[str]]:
    """What changed between ``before`` and ``after`` (a worker thread): ``{real path: (rel,
    bytes before, bytes after, mode, through)}`` and the files over a limit. ``written``:
    the fs writes of the turn (path as named -> text before); ``excluded``: not watched
    unless written through our fs. ``between``: the two snapshots are the end of a turn
    and the start of the next (or the process's end): a change not written through our fs
    is ``{"between"}`` (the agent or the user), nothing is excluded, and a notebook
    (``.ipynb``) counts as changed only when what runs of it did (:func:`_notebook_code`:
    a Jupyter save of outputs is not a change)."""
    fs_real = {Path(os.path.realpath(p)): old for p, old in written.items()}
    excluded = set() if between else {Path(os.path.realpath(p)) for p in excluded}
    found: _Found = {}
    too_big: list[str] = []
    for rel in sorted(set(before.files) | set(after.files)):
        b, a = before.files.get(rel), after.files.get(rel)
        if a is b:
            continue
        path = cwd / rel
        through = {"fs"} if path in fs_real else {"between"} if between else {"itself"}
        if through == {"itself"} and path in excluded:
            continue
        if between and through != {"fs"} and rel.endswith(".ipynb") and b is not None and a is not None \
                and _same_code(b.data, a.data):
            continue
        if (b is not None and b.data is None) or (a is not None and a.data is None):
            if a is not None and b is not None and (a.size, a.mtime_ns, a.ctime_ns, a.ino) == (
                    b.size, b.mtime_ns, b.ctime_ns, b.ino):
                continue  # not held (over a limit, unreadable) and unchanged
            too_big.append(rel)
            continue
        b_data, a_data = (b.data if b else None), (a.data if a else None)
        if b_data == a_data:
            continue
        if rel.endswith(".pyc") and through != {"fs"} and _compiled_from_source(path, a_data, cwd):
            continue  # Python's own cache of a source as it is: the source's review is the one that counts
        seen = b if b is not None else a
        found[path] = (rel, b_data, a_data, seen.mode if seen is not None else None, through)
    for path, old_text in fs_real.items():  # written through our fs where no snapshot looks (ignored, outside)
        rel = path.relative_to(cwd).as_posix() if path.is_relative_to(cwd) else str(path)
        if path in found or rel in before.files or rel in after.files:
            continue  # seen: changed, unchanged, or over a limit (said)
        try:
            now = _read_now(path, cwd)
        except (OSError, FileChanged):
            continue
        old = None if old_text is None else old_text.encode("utf-8")
        if old is not None and now is not None and now.startswith(b"\xef\xbb\xbf") and not old.startswith(
                b"\xef\xbb\xbf"):
            old = b"\xef\xbb\xbf" + old  # our fs hides a byte order mark and keeps it on write
        if old != now:
            found[path] = (rel, old, now, None, {"fs"})
    return found, too_big


async def _git_files(root: Path, recorded: GitRepo | None = None) -> list[str] | None:
    """The files git lists under ``root`` (tracked, and untracked not ignored), relative to
    it; None when ``root`` is not in a work tree or git is missing. Read-only for the user's
    repository, and run in the kernel's private repository over it
    (:meth:`~..kernel_git.PrivateRepo.list_files`): no config, hook, fsmonitor or attribute of
    the folder's repository — which the agent may have written — is read as configuration.
    ``recorded``: the repository as the kernel recorded it (an agent's worktree), else found by
    walking up to a ``.git``."""
    repo = recorded if recorded is not None and Path(root).resolve().is_relative_to(recorded.top.resolve()) else \
        await asyncio.to_thread(find_repository, root)
    if repo is None:
        return None
    return await PrivateRepo(repo.top, repo).list_files(Path(root))


def _refused(path: Path, exc: Changed | NotADirectoryError, doing: str) -> FileChanged:
    """Why ``path`` was not ``doing`` (``read``, ``put back``…): the walk from the agent's
    folder met a symlink (:class:`~...wire.folder_fds.Changed`) or a non-folder on its way."""
    if isinstance(exc, Changed) and exc.where == path and not exc.symlink:
        return FileChanged(f"{path} is no longer a regular file: not {doing}")
    if isinstance(exc, Changed) and exc.symlink:
        return FileChanged(f"{path} was not {doing}: a symbolic link in its path ({exc.where}); escouade_nb "
                           f"does not follow it, so nothing outside the folder was touched")
    if isinstance(exc, Changed):
        return FileChanged(f"{path} was not {doing}: {exc.where} {exc.what}")
    return FileChanged(f"{path} was not {doing}: a part of its path is not a folder ({exc.strerror or exc})")


def _folder(path: Path, root: Path | None, create: bool = False) -> tuple[int | None, Path]:
    """An fd of the folder holding ``path`` and that folder's real path: reached from the
    agent's folder ``root`` (its real path opened from ``/``) by a walk of folder fds that
    follows no symlink (:mod:`...wire.folder_fds`), or, for a path outside ``root`` (a write
    through our fs elsewhere, named by its real path), from ``/`` the same way. Missing
    folders made when ``create``, else ``(None, …)``. Raises ``Changed``, ``OSError``."""
    if root is not None:
        real_root = Path(os.path.realpath(root))
        for base in (Path(root), real_root):
            if path != base and path.is_relative_to(base):
                parts = path.relative_to(base).parts[:-1]
                top = open_folder(real_root)
                if top is None:
                    return None, real_root.joinpath(*parts)
                try:
                    return open_below(top, real_root, parts, create=create), real_root.joinpath(*parts)
                finally:
                    os.close(top)
    return open_folder(path.parent, create=create), path.parent


def _read_stat(path: Path, root: Path | None = None) -> tuple[bytes, os.stat_result] | None:
    """The bytes and ``fstat`` of the regular file at ``path`` now (None: no file), reached
    by :func:`_folder`'s walk; ``FileChanged`` for a folder, a symlink, a symlink on the way…"""
    try:
        fd, _parent = _folder(path, root)
        if fd is None:
            return None
        try:
            return read_at(fd, path.name, path)
        finally:
            os.close(fd)
    except (Changed, NotADirectoryError) as exc:
        raise _refused(path, exc, "read") from None


def _read_now(path: Path, root: Path | None = None) -> bytes | None:
    """The bytes at ``path`` now (None: no file); ``FileChanged`` for a folder, a symlink, a
    symlink on the way from ``root`` (the agent's folder)…"""
    found = _read_stat(path, root)
    return None if found is None else found[0]


def _put(path: Path, data: bytes | None, mode: int | None, expect: bytes | None,
         root: Path | None = None) -> os.stat_result | None:
    """Make ``path`` hold ``data`` exactly (None: no file), if it still holds ``expect``
    (a worker thread); the new file's ``fstat``. The file is reached from ``root`` (the
    agent's folder) by a walk of folder fds that follows no symlink (:func:`_folder`):
    a symlink anywhere on the way is :class:`FileChanged` ("a symbolic link in its path"),
    and nothing is written or removed. Written beside it and renamed over it (``renameat``
    in the held folder): never half a file."""
    try:
        fd, parent = _folder(path, root, create=data is not None)
        if fd is None:  # no folder there, so no file
            if expect is not None:
                raise FileChanged(f"{path} changed since the agent's change: not overwritten")
            return None
        try:
            found = read_at(fd, path.name, path)
            if (found[0] if found is not None else None) != expect:
                raise FileChanged(f"{path} changed since the agent's change: not overwritten")
            if data is None:
                try:
                    os.unlink(path.name, dir_fd=fd)
                except FileNotFoundError:
                    pass
                return None
            still_at(fd, parent)  # not a folder moved away with all it holds since it was opened
            return replace_at(fd, path.name, data, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
        finally:
            os.close(fd)
    except (Changed, NotADirectoryError) as exc:
        raise _refused(path, exc, "put back" if data is not None else "removed") from None


def _remove_bytecode(source: Path, root: Path | None = None) -> list[Path]:
    """Remove the compiled forms of the Python source ``source`` (a worker thread): every
    ``__pycache__/<stem>.*.pyc`` beside it (each Python version's tag, each optimization
    level) and :func:`importlib.util.cache_from_source`'s paths (under a
    ``sys.pycache_prefix`` too). Each reached by a walk of folder fds that follows no symlink
    (from ``root``, the agent's folder: :func:`_folder`), unlinked in its held folder. The
    paths removed."""
    removed: list[Path] = []
    cache_path = source.parent / "__pycache__"
    prefix = source.stem + "."
    try:
        fd, parent = _folder(source, root)
    except (Changed, OSError):
        fd, parent = None, source.parent
    if fd is not None:
        try:
            cache = open_below(fd, parent, ["__pycache__"], flags=os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except (Changed, OSError):
            cache = None
        finally:
            os.close(fd)
        if cache is not None:
            try:
                for name in sorted(os.listdir(cache)):
                    st = entry(cache, name) if name.startswith(prefix) and name.endswith(".pyc") else None
                    if st is None or stat.S_ISDIR(st.st_mode):
                        continue
                    try:
                        os.unlink(name, dir_fd=cache)
                    except OSError:
                        continue
                    removed.append(cache_path / name)
            finally:
                os.close(cache)
    for level in ("", 1, 2):  # elsewhere: a sys.pycache_prefix
        try:
            pyc = Path(importlib.util.cache_from_source(str(source), optimization=level))
        except (NotImplementedError, ValueError):  # no cache tag (sys.implementation.cache_tag None)
            continue
        if pyc.parent == cache_path or pyc in removed:
            continue
        try:
            at = open_folder(pyc.parent)
        except (Changed, OSError):
            continue
        if at is None:
            continue
        try:
            st = entry(at, pyc.name)
            if st is None or stat.S_ISDIR(st.st_mode):
                continue
            os.unlink(pyc.name, dir_fd=at)
        except OSError:
            continue
        finally:
            os.close(at)
        removed.append(pyc)
    return sorted(removed)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- diffs and hunks (pure) -------------------------------------------------------------------------
def _binary(data: bytes | None) -> bool:
    return data is not None and b"\0" in data[:8192]


def _text(data: bytes) -> str:
    """Bytes shown as text: UTF-8, else Latin-1 (every byte a character: nothing lost to the eye)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _lines(data: bytes | None) -> list[bytes]:
    return data.splitlines(keepends=True) if data else []


def _groups(before: bytes | None, after: bytes | None) -> list[list[tuple[str, int, int, int, int]]]:
    matcher = difflib.SequenceMatcher(None, _lines(before), _lines(after), autojunk=False)
    if before == after:
        return []
    return [g for g in matcher.get_grouped_opcodes(DIFF_CONTEXT) if any(op[0] != "equal" for op in g)]


def _show(line: bytes) -> str:
    text = _text(line)
    if text.endswith("\n"):
        return text
    return text + "\n\\ No newline at end of file\n"


def _hunk_text(group: Sequence[tuple[str, int, int, int, int]], a: list[bytes], b: list[bytes]) -> str:
    first, last = group[0], group[-1]
    i1, i2, j1, j2 = first[1], last[2], first[3], last[4]
    old = f"{i1 + 1 if i2 > i1 else i1},{i2 - i1}" if i2 - i1 != 1 else f"{i1 + 1}"
    new = f"{j1 + 1 if j2 > j1 else j1},{j2 - j1}" if j2 - j1 != 1 else f"{j1 + 1}"
    out = [f"@@ -{old} +{new} @@\n"]
    for tag, a1, a2, b1, b2 in group:
        if tag == "equal":
            out += [" " + _show(x) for x in a[a1:a2]]
            continue
        out += ["-" + _show(x) for x in a[a1:a2]]
        out += ["+" + _show(x) for x in b[b1:b2]]
    return "".join(out)


def _take(before: bytes | None, after: bytes | None, index: int, from_after: bool) -> bytes:
    """``before`` with hunk ``index`` taken from ``after`` (``from_after``), or ``after``
    with hunk ``index`` taken back from ``before``: bytes, exact elsewhere."""
    a, b = _lines(before), _lines(after)
    group = _groups(before, after)[index]
    base, other = (a, b) if from_after else (b, a)
    out: list[bytes] = []
    at = 0
    for tag, a1, a2, b1, b2 in group:
        if tag == "equal":
            continue
        lo, hi, olo, ohi = (a1, a2, b1, b2) if from_after else (b1, b2, a1, a2)
        out += base[at:lo]
        out += other[olo:ohi]
        at = hi
    out += base[at:]
    return b"".join(out)


# -- the pending edits --------------------------------------------------------------------------------
class FilePath(str):
    """A file's absolute path as text (``==`` a ``str``, ``.endswith``…) that also answers
    :class:`~pathlib.Path`'s attributes (``.name``, ``.parent``, ``.read_bytes()``…) and
    equals a ``Path`` of the same path."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(Path(self), name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, os.PathLike):
            return str(self) == os.fspath(other)
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = str.__hash__

    def __fspath__(self) -> str:
        return str(self)


class Hunk:
    """One hunk of a text file's pending edit: ``index`` (0-based, in the edit's current
    diff), ``diff`` (its ``@@`` header and lines); ``keep()`` / ``reject()`` as the edit's,
    for this hunk alone (a :class:`~.cell_review.Settling`)."""

    def __init__(self, edit: FileEdit, index: int, diff: str) -> None:
        self.edit, self.index, self.diff = edit, index, diff

    def keep(self) -> Settling:
        return self.edit._review._settle(self.edit, True, hunk=self.index)

    def reject(self) -> Settling:
        return self.edit._review._settle(self.edit, False, hunk=self.index)

    def __repr__(self) -> str:
        return f"<Hunk {self.index} of {self.edit.rel}>"


class FileEdit:
    """One file the agent changed, pending review: ``path`` (absolute: a :class:`FilePath`,
    text that answers ``Path``'s attributes too), ``file`` (the same as a ``Path``), ``rel`` (as shown:
    relative to the agent's folder when inside it), ``change`` (``create``, ``edit``,
    ``delete``), ``diff`` (unified text; a binary file's is one line), ``hunks`` (a text
    file's, each with ``keep()`` / ``reject()``; empty for a binary file, a creation or a
    deletion), ``through`` (``{"fs"}`` written through our client fs, ``{"itself"}`` by
    the agent's own tools, or both), ``state`` (``pending``, ``kept``, ``rejected``,
    ``dropped`` — the agent put it back as it was), ``at`` / ``settled_at`` (epoch
    seconds), ``why`` (of a drop). ``cell_id`` is None (not a cell)."""

    cell_id = None

    def __init__(self, review: EditReview, watch: FileWatch, path: Path, rel: str, before: bytes | None,
                 after: bytes | None, mode: int | None, through: set[str]) -> None:
        self._review, self._watch = review, watch
        self.file, self.path, self.rel = Path(path), FilePath(path), rel
        self.before, self.after, self.mode = before, after, mode
        self.through = set(through)
        self.at = time.time()
        self.state = "pending"
        self.settled_at: float | None = None
        self.why: str | None = None
        self.changed_by_user = False
        self.last_hunk: int | None = None  # the hunk the last partial answer was about

    @property
    def change(self) -> str:
        return "create" if self.before is None else "delete" if self.after is None else "edit"

    @property
    def key(self) -> str:
        """Its key in the review (``file:`` and its absolute path)."""
        return f"file:{self.path}"

    @property
    def between(self) -> bool:
        """Whether it changed between turns (``"between"`` in :attr:`through`): by the agent's
        process or by the user, the kernel cannot tell."""
        return "between" in self.through

    @property
    def label(self) -> str:
        """``new file a.txt``, ``edit of a.txt``, ``deletion of a.txt`` (and ``(changed
        between turns, by the agent or by you)`` for one that did)."""
        return f"{CHANGE_WORDS[self.change]} {self.rel}" + (f" ({BETWEEN})" if self.between else "")

    @property
    def binary(self) -> bool:
        return _binary(self.before) or _binary(self.after)

    @property
    def diff(self) -> str:
        """The change as a unified diff (``--- a/REL`` / ``+++ b/REL``, hunks of
        :data:`DIFF_CONTEXT` lines of context); a binary file: ``Binary files … differ``."""
        a_name = "/dev/null" if self.before is None else f"a/{self.rel}"
        b_name = "/dev/null" if self.after is None else f"b/{self.rel}"
        if self.binary:
            return (f"Binary files {a_name} and {b_name} differ ({len(self.before or b'')} -> "
                    f"{len(self.after or b'')} bytes)\n")
        return f"--- {a_name}\n+++ {b_name}\n" + "".join(h.diff for h in self._all_hunks())

    def _all_hunks(self) -> list[Hunk]:
        a, b = _lines(self.before), _lines(self.after)
        return [Hunk(self, i, _hunk_text(g, a, b)) for i, g in enumerate(_groups(self.before, self.after))]

    @property
    def hunks(self) -> list[Hunk]:
        """The hunks one can keep or reject alone (a text file changed, not made or removed)."""
        if self.binary or self.change != "edit":
            return []
        return self._all_hunks()

    @property
    def settling(self) -> bool:
        return self.key in self._review._busy

    def keep(self, *, client: str | None = None) -> Settling:
        """Keep the change (the file stays as the agent made it)."""
        return self._review._settle(self, True, client)

    def reject(self, *, client: str | None = None) -> Settling:
        """Put the file back as it was before the agent's change, byte for byte (a new
        file removed, a deleted one restored); the agent is told at its next prompt.
        Fails with :class:`FileChanged` (the edit stays pending) when the file is no
        longer what the agent left."""
        return self._review._settle(self, False, client)

    async def apply(self, keep: bool, hunk: int | None = None) -> dict[str, Any]:
        """Do the Keep or Reject (of ``hunk`` alone when given): the review's settle task
        calls it. ``{"outcome": "kept"|"rejected"}`` once the whole edit is answered,
        ``{"outcome": "partial"}`` after a hunk when hunks are left."""
        return await self._watch._apply(self, keep, hunk)

    def told(self, hunk: int | None = None) -> str:
        """How its rejection (of ``hunk`` alone when given) is named to the agent."""
        return self._watch.told(self, hunk)

    def __repr__(self) -> str:
        return f"<FileEdit {self.change} of {self.rel} ({self.state})>"


def _notice_of(edit: FileEdit) -> str:
    when = "changed between turns; " if edit.between else ""
    return {"create": f"new file {edit.path} ({when}removed)",
            "edit": f"edit of {edit.path} ({when}its bytes before put back)",
            "delete": f"deletion of {edit.path} ({when}the file restored)"}[edit.change]


class FileWatch:
    """The file review of one agent (``review=True``): snapshots around each turn, the
    writes through our fs, the :class:`FileEdit` s it adds to ``review`` (the agent's
    :class:`~.cell_review.EditReview`). ``cwd``: the folder watched; ``conversation``: where
    its notices go; ``transcript()``: the agent's transcript now (or None);
    ``excluded()``: paths not watched for the agent's own writes (the kernel's notebook);
    ``repository()``: the repository as the kernel recorded it (an agent's worktree), or None."""

    def __init__(self, review: EditReview, cwd: Path, conversation: Any,
                 transcript: Callable[[], Any], excluded: Callable[[], set[Path]] | None = None,
                 repository: Callable[[], GitRepo | None] | None = None) -> None:
        self.review, self.cwd, self.conversation = review, Path(cwd), conversation
        self._repository = repository or (lambda: None)
        self._transcript = transcript
        self._excluded = excluded or (lambda: set())
        self._cache: dict[str, _Seen] = {}
        self._before: _Snapshot | None = None
        self._written: dict[Path, str | None] = {}  # fs writes of this turn: path -> its text before the first
        # the folder as the agent's live process last left it reviewed (its start, a turn's end): what changes
        # from it until the next turn's start, or the process's end, is pending "between turns"; None: no process
        self._last: _Snapshot | None = None
        self._between: dict[Path, str | None] = {}  # fs writes between turns
        self._process: int | None = None  # the live process's token (process_started), None: none lives
        self._serial = 0
        self._lock = asyncio.Lock()  # one snapshot-and-compare at a time (a turn's edge, a process's end)
        self._told: set[str] = set()  # limits said once
        self.git: bool | None = None  # whether the folder was listed by git (None: not yet)

    # -- the turn's edges -------------------------------------------------------------------------------
    async def _snapshot(self) -> _Snapshot:
        try:
            names = await _git_files(self.cwd, self._repository())
        except WorktreeError as exc:  # a planted .git/commondir: the folder walked, .git's files compared too
            names = None
            if "refused" not in self._told:
                self._told.add("refused")
                self.conversation.add_notice(f"File review: {exc}; the folder is compared file by file instead "
                                             f"(its .git included)", level="warning")
        self.git = names is not None
        cache = self._cache
        if names is None:
            names = await asyncio.to_thread(_walk, self.cwd)
        listed = names

        def scan() -> _Snapshot:  # the files that make tools run code first: never past MAX_FILES
            return _scan(self.cwd, [*_code_files(self.cwd, listed), *listed], cache)

        snap = await asyncio.to_thread(scan)
        self._cache = snap.files
        return snap

    async def process_started(self) -> int:
        """The agent's process is about to be spawned: the folder now is what its changes are
        compared with until its first turn (the baseline of "between turns"). Its token, for
        :meth:`process_ended`. A failure is logged and said (the changes before its first
        turn are then not reviewed)."""
        self._serial += 1
        token = self._serial
        async with self._lock:
            self._process, self._between, self._last = token, {}, None
            try:
                self._last = await self._snapshot()
            except Exception as exc:
                log.exception("escouade_nb: the file review's snapshot failed")
                self.conversation.add_notice(f"File review: the folder could not be read when the agent started "
                                             f"({exc}); its changes before its first turn will not be offered for "
                                             f"review.", level="warning")
        return token

    async def process_ended(self, token: int) -> list[FileEdit]:
        """The process of ``token`` ended (closed, killed, crashed): what changed in the folder
        since the end of its last turn is pending, "between turns" (a turn that ran meanwhile
        compares its own end instead). The edits added or updated."""
        async with self._lock:
            if token != self._process:
                return []
            self._process = None
            if self._before is not None:  # a turn runs: its after_turn compares, with the process gone
                return []
            last, self._last = self._last, None
            edits, _now = await self._since(last, "when its process ended")
            return edits

    def killed_at_exit(self) -> list[str]:
        """Interpreter exit (a kernel shutdown): the process was just killed and no loop is left
        to compare on. A synchronous comparison, in this thread, of the files the last snapshot
        held and the files that run code (git is not asked: a file new since, of another kind,
        is not seen); each change is recorded in the transcript as pending, "between turns" —
        a resumed agent lists it ``unanswered``. The paths recorded (relative)."""
        last = self._before if self._before is not None else self._last
        if last is None or self._process is None:
            return []
        self._process = None
        names = list(last.files)
        try:
            now = _scan(self.cwd, [*_code_files(self.cwd, names), *names], self._cache)
            found, _too_big = _compare(self.cwd, last, now, {}, set(), True)
        except Exception:
            log.exception("escouade_nb: the file review at the kernel's exit failed")
            return []
        for path, (rel, before, after, mode, through) in found.items():
            self._record(FileEdit(self.review, self, path, rel, before, after, mode, through), "pending")
        return sorted(info[0] for info in found.values())

    async def _since(self, last: _Snapshot | None, when: str) -> tuple[list[FileEdit], _Snapshot | None]:
        """Compare the folder now with ``last`` (changes between turns): each changed file
        pending, and a notice naming them. The edits, and the snapshot taken (None without
        ``last`` or when it failed). Holds the lock."""
        if last is None:
            return [], None
        written, self._between = self._between, {}
        try:
            now = await self._snapshot()
            found, too_big = await asyncio.to_thread(_compare, self.cwd, last, now, written, set(), True)
        except Exception as exc:
            log.exception("escouade_nb: the file review between turns failed")
            self.conversation.add_notice(f"File review: the folder could not be compared {when} ({exc}); what "
                                         f"changed since the last turn is kept as written.", level="warning")
            return [], None
        self._limits(now, too_big)
        edits = [self._pending(path, *info) for path, info in found.items()]
        if edits:
            names = ", ".join(e.rel for e in edits[:10]) + (" …" if len(edits) > 10 else "")
            self.conversation.add_notice(f"File review: {names} changed between turns (by the agent or by you), "
                                         f"seen {when}: pending review.", level="warning")
        return edits, now

    async def before_turn(self) -> None:
        """What changed since the last turn's end (or the process's start) becomes pending,
        "between turns"; then snapshot the folder (a turn is about to be sent). A failure is
        logged and said; this turn is then not reviewed (the prompt is sent all the same)."""
        async with self._lock:
            # a turn whose before_turn ran but was never sent (dropped) left its snapshot: compared from there
            last = self._before if self._before is not None else self._last
            self._written, self._before, self._last = {}, None, None
            _edits, now = await self._since(last, "at this turn's start")
            try:
                self._before = now if now is not None else await self._snapshot()  # the same moment: read once
            except Exception as exc:
                log.exception("escouade_nb: the file review's snapshot failed")
                self.conversation.add_notice(f"File review: the folder could not be read before this turn ({exc}); "
                                             f"its changes will not be offered for review.", level="warning")

    def written(self, path: Path, old: str | None, new: str) -> None:
        """A write through our fs (``path`` absolute, ``old`` its text before or None)."""
        if self._before is not None:
            self._written.setdefault(Path(path), old)
        elif self._last is not None:
            self._between.setdefault(Path(path), old)

    async def after_turn(self) -> list[FileEdit]:
        """Compare the folder with the snapshot before the turn; each changed file becomes
        (or updates) a pending :class:`FileEdit`. The edits added or updated. A failure of
        the review itself is logged and said in the conversation; the turn is not failed.
        The folder now is then the baseline of the changes between turns (while the process
        lives), but for the excluded files (the kernel's notebook): their baseline stays what
        they were before the turn, so that what runs of them is compared at the next start."""
        async with self._lock:
            before, written = self._before, self._written
            if before is None:
                return []
            self._before, self._written = None, {}
            try:
                after = await self._snapshot()
                excluded = self._excluded()
                found, too_big = await asyncio.to_thread(_compare, self.cwd, before, after, written, excluded)
            except Exception as exc:  # a bug of ours, or the folder gone: the turn goes on, unreviewed
                log.exception("escouade_nb: the file review of a turn failed")
                self.conversation.add_notice(f"File review: this turn's files could not be compared ({exc}); they "
                                             f"are kept as written.", level="warning")
                self._last = before if self._process is not None else None
                return []
            if self._process is not None:
                last = _Snapshot(dict(after.files), after.truncated)
                root = Path(os.path.realpath(self.cwd))
                for path in excluded:
                    real = Path(os.path.realpath(path))
                    if real.is_relative_to(root):
                        rel = real.relative_to(root).as_posix()
                        if rel in before.files:
                            last.files[rel] = before.files[rel]
                        else:
                            last.files.pop(rel, None)
                self._last = last
            self._limits(after, too_big)
            return [self._pending(path, *info) for path, info in found.items()]

    def _limits(self, snap: _Snapshot, too_big: list[str]) -> None:
        if snap.truncated and "count" not in self._told:
            self._told.add("count")
            self.conversation.add_notice(
                f"File review watches the first {MAX_FILES} files of {self.cwd}: changes to the others are not "
                f"offered for review.", level="warning")
        if too_big:
            self.conversation.add_notice(
                f"File review: {', '.join(too_big[:10])}{' …' if len(too_big) > 10 else ''} changed but "
                f"{'is' if len(too_big) == 1 else 'are'} over {MAX_FILE_BYTES // (1024 * 1024)} MiB (or past "
                f"{MAX_TOTAL_BYTES // (1024 * 1024)} MiB in all, or unreadable): not offered for review, kept as "
                f"written.",
                level="warning")

    async def rewound(self, paths: Iterable[Path]) -> None:
        """A rewind (:mod:`.checkpoints`) put ``paths`` (absolute) back (not a change of the
        agent's, between turns either): a pending change of one of them is dropped when the
        file is now as it was before that change ("undone by the rewind"), else its diff
        becomes what the file holds now against its bytes before."""
        back = {Path(p) for p in paths}
        for path in back:  # the rewind's writes are not the agent's: the snapshots compared with take them
            try:
                found = await asyncio.to_thread(_read_stat, path, self.cwd)
                self._restored(path, None if found is None else found[0], None if found is None else found[1])
            except (OSError, FileChanged):
                continue
        pending: list[Any] = self.review.pending
        for edit in [e for e in pending if isinstance(e, FileEdit) and e.file in back and not e.settling]:
            try:
                now = await asyncio.to_thread(_read_now, edit.file, self.cwd)
            except (OSError, FileChanged):
                continue
            if now == edit.before:
                edit.why = "undone by the rewind"
                self.review.drop_item(edit)
            elif now != edit.after:
                edit.after, edit.at = now, time.time()
                self.review.touched_item(edit)

    def _pending(self, path: Path, rel: str, before: bytes | None, after: bytes | None, mode: int | None,
                 through: set[str]) -> FileEdit:
        pending: list[Any] = self.review.pending
        same = next((e for e in pending if isinstance(e, FileEdit) and e.path == path), None)
        if same is not None and not same.settling:  # changed again: one edit, from the bytes before the first
            same.after, same.at = after, time.time()
            same.through |= through
            if same.after == same.before:
                same.why = "the agent put the file back as it was"
                self.review.drop_item(same)
            else:
                self.review.touched_item(same)
            return same
        edit = FileEdit(self.review, self, path, rel, before, after, mode, through)
        self.review.add_item(edit)
        self._record(edit, "pending")
        return edit

    # -- answers ------------------------------------------------------------------------------------
    async def _apply(self, edit: FileEdit, keep: bool, hunk: int | None) -> dict[str, Any]:
        if hunk is not None:
            if edit.change != "edit" or edit.binary or not 0 <= hunk < len(edit.hunks):
                raise ValueError(f"{edit.rel} has no hunk {hunk}")
            if keep:  # the hunk becomes part of "before": nothing on disk changes
                edit.before = _take(edit.before, edit.after, hunk, from_after=True)
            else:
                taken = _take(edit.before, edit.after, hunk, from_after=False)
                st = await asyncio.to_thread(_put, edit.file, taken, edit.mode, edit.after, self.cwd)
                edit.after = taken
                self._restored(edit.file, taken, st)
                await self._drop_bytecode(edit)
            edit.last_hunk = hunk
            self._record(edit, "kept" if keep else "rejected", hunk=hunk)
            self.conversation.add_notice(f"File review: hunk {hunk + 1} of {edit.label} "
                                         f"{'kept' if keep else 'rejected (taken back)'}")
            if edit.before != edit.after:
                return {"outcome": "partial", "rejected_hunk": not keep}
            return {"outcome": "kept" if keep else "rejected", "silent": True}
        if not keep:
            if edit.before is not None and edit.mode is None:
                edit.mode = 0o666 & ~_umask()
            st = await asyncio.to_thread(_put, edit.file, edit.before, edit.mode, edit.after, self.cwd)
            self._restored(edit.file, edit.before, st)
            await self._drop_bytecode(edit)
        return {"outcome": "kept" if keep else "rejected"}

    async def _drop_bytecode(self, edit: FileEdit) -> None:
        """A Reject of a Python source (``x.py``) also removes its compiled forms
        (:func:`_remove_bytecode`), so that Python compiles the restored source again (a
        ``.pyc`` left there may not be what the source says: one whose header matches the
        source's time and size, or an unchecked-hash one, is imported instead of it). A
        pending change of one of them is dropped (removed with the Reject)."""
        if edit.file.suffix != ".py":
            return
        removed = await asyncio.to_thread(_remove_bytecode, edit.file, self.cwd)
        for pyc in removed:
            self._restored(pyc, None)
            pending: list[Any] = self.review.pending
            same = next((e for e in pending if isinstance(e, FileEdit) and e.file == pyc and not e.settling), None)
            if same is not None:
                same.why = f"removed with the Reject of {edit.rel}: Python compiles it again"
                self.review.drop_item(same)
        if removed:
            self.conversation.add_notice(f"File review: the compiled form(s) of {edit.rel} removed "
                                         f"({', '.join(p.name for p in removed)}): Python compiles the restored "
                                         f"source again.")

    def _restored(self, path: Path, data: bytes | None, st: os.stat_result | None = None) -> None:
        """A Reject changed ``path`` (``st``: its ``fstat`` then): the snapshots it is compared
        with (the running turn's, the last turn's end) take it, so the restore is not taken
        for the agent's change."""
        real = Path(os.path.realpath(self.cwd))
        if path.is_relative_to(self.cwd):
            rel = path.relative_to(self.cwd).as_posix()
        elif path.is_relative_to(real):  # named by its real path (a write through our fs)
            rel = path.relative_to(real).as_posix()
        else:
            return
        for snap in (self._before, self._last):
            if snap is None:
                continue
            if data is None:
                snap.files.pop(rel, None)
                continue
            if st is None:
                return
            snap.files[rel] = _Seen(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode, 0, data)

    def settled(self, edit: FileEdit) -> None:
        """An answer (the review's ``on_settled``): a notice and a ``file_review`` line."""
        words = {"kept": "kept", "rejected": "rejected (put back as it was)", "dropped": f"dropped ({edit.why})"}
        self.conversation.add_notice(f"File review: {edit.label} {words.get(edit.state, edit.state)}")
        self._record(edit, edit.state)

    def told(self, edit: FileEdit, hunk: int | None = None) -> str:
        """How a rejection is named to the agent."""
        if hunk is not None:
            return f"hunk {hunk + 1} of the edit of {edit.path} (taken back)"
        return _notice_of(edit)

    def _record(self, edit: FileEdit, outcome: str, hunk: int | None = None) -> None:
        transcript = self._transcript()
        if transcript is not None:
            transcript.event(FILE_EVENT, path=str(edit.path), rel=edit.rel, change=edit.change, outcome=outcome,
                             through=sorted(edit.through), **({"hunk": hunk} if hunk is not None else {}))


def restore_settled(records: Sequence[Any], review: EditReviewPart) -> int:
    """Rebuild ``review.settled`` with the file answers of a transcript's ``records``
    (whole-file answers; a file still pending at the end is ``unanswered``). How many."""
    last: dict[str, dict[str, Any]] = {}
    for rec in records:
        data = rec.data or {}
        if rec.kind == "event" and rec.event == FILE_EVENT \
                and isinstance(data.get("path"), str) and "hunk" not in data:
            last[data["path"]] = data
    for path, data in last.items():
        edit = _Restored(path, str(data.get("rel") or path), str(data.get("change") or "edit"),
                         "unanswered" if data.get("outcome") == "pending" else str(data.get("outcome")),
                         isinstance(data.get("through"), list) and "between" in data["through"])
        review.restore_item(edit)
    return len(last)


class _Restored:
    """A file's answer read back from a transcript (in ``edit_review.settled``)."""

    cell_id = None

    def __init__(self, path: str, rel: str, change: str, state: str, between: bool = False) -> None:
        self.path, self.rel, self._change, self.state = Path(path), rel, change, state
        self.between = between
        self.key = f"file:{path}"

    @property
    def change(self) -> str:
        return self._change

    @property
    def label(self) -> str:
        return f"{CHANGE_WORDS.get(self._change, self._change)} {self.rel}" + (f" ({BETWEEN})" if self.between else "")

    def __repr__(self) -> str:
        return f"<FileEdit {self._change} of {self.rel} ({self.state})>"
