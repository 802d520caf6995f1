"""The client file system of ACP: ``fs/read_text_file`` and ``fs/write_text_file``.

:class:`FileSystem` serves an agent's file requests from disk, for one session folder.

Paths
    Absolute paths are taken as they are; relative ones are resolved against the
    session folder (``cwd``). The file actually read or written is the *real* path:
    ``..`` and every symlink resolved (``os.path.realpath``), so what is checked is what
    is touched.

Fences (private projects)
    With ``fence`` set, any path whose real path is not the fence folder or under it is
    refused with a clear error naming the path and the fence: ``..`` climbing out, an
    absolute path elsewhere, a symlink inside the folder pointing out (also a dangling
    one, and a file not yet existing under a symlinked folder), and a sibling sharing a
    prefix (``/srv/app2`` is not inside ``/srv/app``: the comparison is by path
    components, not by string). Nothing is created or written on a refusal.

Sandboxed agents (``--sandbox``)
    With ``confinement`` set (a :class:`Confinement`), the client file system reaches
    what the agent's sandboxed process reaches, no further: a write whose real path is
    outside its writable set (its folder, additional directories, state folders…) is
    refused (-32602, ``data.reason`` ``"outside_sandbox"``), so is a write over a git file
    its sandbox keeps read-only (``"read_only_in_sandbox"``: ``.git/config``, ``.git/hooks``…)
    and a read inside a folder its sandbox hides (``"hidden_by_sandbox"``: the kernel's
    ``/tmp``, Jupyter's runtime folder, ``$XDG_RUNTIME_DIR``, the kernel's token folder),
    by the same real-path check as the fence — ``..``, symlinks and sibling prefixes
    resolved, the races below closed the same way — and nothing is created or written on
    a refusal. A fence and a confinement both hold when both are set.

Races (what is checked is what is touched)
    The real path is checked on the event loop, and the disk is touched later, in a
    worker thread (after a notebook's validation, too). In between, anything may change
    on disk. So the worker opens exactly the checked real path, one component at a time
    from ``/``: each folder with ``O_NOFOLLOW | O_DIRECTORY`` (``O_PATH`` on Linux)
    relative to the previous one's descriptor, the file with ``O_NOFOLLOW``, never by its
    path string (the walk is :mod:`.folder_fds`'s, shared with the review's Reject and a
    rewind). A component that became a symlink since the check (the file, or any
    folder above it, swapped for a link to elsewhere) is not followed: the request fails
    with -32602, ``data.reason`` ``"changed_during_access"``, ``data.changed`` the
    component, and nothing is read or written.
    A write goes to a new file in the held folder (``.<random>.escouade-write``, mode of
    the old file, or 0666 less the umask for a new one; owner and group kept where the
    OS lets us), which then replaces the name (``renameat``: it replaces a symlink rather
    than following it), so a reader never sees half a file. Just before that, the name
    must still be the file read (or still missing) and the folder still at its checked
    path (a folder *moved* out of the fence with all it holds is refused too); what is
    left is the microseconds between that last check and the rename. Replacing the name
    means a hard link to the file (perhaps one outside the fence) keeps the old text.
    Only when the folder takes no new file (permission denied) is an existing file
    overwritten in place, and then only if it has no other hard link.
    A folder, FIFO, device or socket at the path is refused without being opened.

Text
    Files are UTF-8. A file that is not is refused with an error saying so (byte offset
    and value), for reading and for overwriting: it is never re-encoded. Line endings
    are preserved: text is read and written without newline translation, and when the
    file on disk uses CRLF throughout and the agent writes text with bare ``\\n`` only,
    the ``\\n`` become ``\\r\\n`` again (agents often normalise what they read). A UTF-8
    byte order mark is hidden from the agent on read and kept on write.

Notebooks
    A write of a path ending in ``.ipynb`` (as named, or its real path) is checked
    before anything touches the disk (:func:`notebook_problem`, in a worker thread: the
    first check imports nbformat and jsonschema, about 0.9 s here): an invalid notebook
    is refused with a sentence naming the cell and the field, and the file is left as it
    was. Reading is not checked.

Errors (``acp.RequestError``; its message is what the agent sees)
    * a missing file: ``RequestError.resource_not_found`` (-32002, ``data.uri`` = the path);
    * outside the fence or the sandbox's reach, changed since it was checked, not UTF-8, a folder or another
      file that is not a regular one, bad ``line``/``limit``: -32602 (invalid params)
      with a sentence naming the path;
    * an invalid notebook: -32602, ``data.reason`` ``"invalid_notebook"``, ``data.field``
      (``cells[2].outputs[0]``, or ``""`` for the whole text) and ``data.cell`` (0-based
      index) / ``data.cellId`` when a cell is at fault;
    * any other OS error (permission denied…): -32603 with the OS's message.

Each successful write calls ``on_write(path, old_text, new_text)`` on the caller's
thread (the event loop), where ``path`` is the absolute path the agent named
(normalised, symlinks not resolved: the path its tool call shows), ``old_text`` the
file's text before the write (``None`` for a new file) and ``new_text`` the text now
in the file.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import secrets
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import RequestError
from acp.schema import ReadTextFileResponse, WriteTextFileResponse

from .._errors import EscouadeError
from ..core.render_text import cut, is_notebook_path
from .folder_fds import Changed as _Changed
from .folder_fds import entry as _entry
from .folder_fds import open_folder as _open_folder
from .folder_fds import read_at as _read_at
from .folder_fds import still_at as _still_at

__all__ = ["Confinement", "FileSystem", "OnWrite", "FenceError", "NotebookProblem", "SandboxRefusal",
           "notebook_problem", "inside", "INVALID_PARAMS", "INTERNAL_ERROR"]

INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
_BOM = "\ufeff"

OnWrite = Callable[[Path, "str | None", str], None]
"""``on_write(path, old_text, new_text)``: told of each write, after it happened."""


class FenceError(EscouadeError, RequestError):
    """A path outside the private project's folder (-32602)."""

    def __init__(self, path: str, real: Path, fence: Path) -> None:
        shown = path if str(real) == path else f"{path} (really {real})"
        super().__init__(
            INVALID_PARAMS,
            f"Refused: {shown} is outside the private project folder {fence}; "
            "escouade_nb only reads and writes files inside it",
            {"path": path, "realPath": str(real), "fence": str(fence), "reason": "outside_fence"},
        )


class SandboxRefusal(EscouadeError, RequestError):
    """A sandboxed agent's path out of its reach (-32602): a write outside its writable
    set (``data.reason`` ``"outside_sandbox"``, ``data.writable`` the folders), a write over
    a git file the sandbox keeps read-only (``"read_only_in_sandbox"``), a read or
    a write in a folder its sandbox hides (``"hidden_by_sandbox"``, ``data.hidden`` the
    folder)."""

    def __init__(self, path: str, real: Path, confinement: Confinement, writing: bool) -> None:
        shown = path if str(real) == path else f"{path} (really {real})"
        if writing and inside(real, confinement.writable) and inside(real, confinement.readonly):
            folder = next(r for r in confinement.readonly if real.is_relative_to(r))
            super().__init__(INVALID_PARAMS, f"Refused: {shown} is in {folder}, which this agent's sandbox keeps "
                                             "read-only (a file that makes the kernel's git run code); escouade_nb "
                                             "does not write it for it; nothing was written",
                             {"path": path, "realPath": str(real), "readOnly": str(folder),
                              "reason": "read_only_in_sandbox"})
        elif writing and not inside(real, confinement.writable):
            folders = ", ".join(map(str, confinement.writable))
            super().__init__(INVALID_PARAMS, f"Refused: {shown} is outside what this sandboxed agent may write "
                                             f"({folders}); escouade_nb writes for it only there, as its sandbox "
                                             "lets it write only there; nothing was written",
                             {"path": path, "realPath": str(real), "writable": [str(p) for p in confinement.writable],
                              "reason": "outside_sandbox"})
        else:
            folder = next((h for h in confinement.hidden if real.is_relative_to(h)), real)
            super().__init__(INVALID_PARAMS, f"Refused: {shown} is in {folder}, which this agent's sandbox hides "
                                             f"from it; escouade_nb does not {'write' if writing else 'read'} it "
                                             "for it",
                             {"path": path, "realPath": str(real), "hidden": str(folder),
                              "reason": "hidden_by_sandbox"})


def _error(path: str | os.PathLike[str], message: str, reason: str, code: int = INVALID_PARAMS) -> RequestError:
    return RequestError(code, message, {"path": str(path), "reason": reason})


def _not_utf8(path: Path | str, exc: UnicodeDecodeError, doing: str) -> RequestError:
    byte = exc.object[exc.start]
    return _error(path, f"{path} is not UTF-8 text (byte 0x{byte:02x} at offset {exc.start}); "
                        f"escouade_nb does not re-encode files, so it will not {doing} it",
                  "not_utf8")


def inside(real: Path, roots: Sequence[Path]) -> bool:
    """Whether the real path ``real`` is one of ``roots`` (real paths too) or under one,
    compared by path components (``/srv/app2`` is not inside ``/srv/app``)."""
    return any(real.is_relative_to(root) for root in roots)


@dataclass(frozen=True)
class Confinement:
    """A sandboxed agent's reach through the client (``--sandbox``), the same as its
    process's: it writes only inside ``writable`` (its folder, additional directories,
    state folders…); it reads anything but what is inside ``hidden`` (the folders its
    sandbox hides: the kernel's ``/tmp``, Jupyter's runtime folder…) unless also inside a
    folder of ``shown`` that is in that hidden folder (what the sandbox binds there: its
    own folder under ``/tmp``); a hidden folder inside its writable set is neither read
    nor written, nor is anything inside ``readonly`` (bound read-only over the writable
    set: ``.git/config``, ``.git/hooks``…). Real paths
    (made so). ``escouade_nb.engine.launch.sandbox.client_confinement`` makes one from the
    sandbox's binds."""

    writable: tuple[Path, ...]
    hidden: tuple[Path, ...] = ()
    shown: tuple[Path, ...] = ()
    readonly: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        for name in ("writable", "hidden", "shown", "readonly"):
            object.__setattr__(self, name, tuple(Path(os.path.realpath(p)) for p in getattr(self, name)))

    def may_write(self, real: Path) -> bool:
        """Whether the real path ``real`` is in the writable set, not in ``readonly`` (what
        the sandbox binds read-only over it: the kernel's git config and hooks) and
        readable (a hidden folder inside its folder stays hidden)."""
        return inside(real, self.writable) and not inside(real, self.readonly) and self.may_read(real)

    def may_read(self, real: Path) -> bool:
        """Whether the real path ``real`` is readable: in no hidden folder, or in a folder
        shown *inside* that hidden folder (its own folder under ``/tmp``; a shown folder
        that holds a hidden one — its folder is your home — does not uncover it)."""
        return all(not real.is_relative_to(h) or any(real.is_relative_to(s) and s.is_relative_to(h)
                                                     for s in self.shown) for h in self.hidden)


# -- opening exactly the checked path: the walk of folder fds is .folder_fds's (the review's Reject and a
# rewind walk with it too)
def _changed_error(path: str, real: Path, exc: _Changed, doing: str) -> RequestError:
    return RequestError(
        INVALID_PARAMS,
        f"Refused: {path} changed while it was being {doing}: {exc.where} {exc.what} since the path was "
        f"checked (against the fence, if any); nothing was {doing}",
        {"path": path, "realPath": str(real), "changed": str(exc.where), "reason": "changed_during_access"})


def _read_entry(path: str, real: Path, dir_fd: int) -> tuple[bytes, os.stat_result] | None:
    """The bytes and ``stat`` of the regular file ``real.name`` in the folder ``dir_fd``
    (never following a symlink: :func:`~.folder_fds.read_at`), or ``None`` when there is
    none. A folder or any other kind of file (a FIFO, a device) is an error, and is not
    opened; a file replaced between its ``stat`` and its opening is :class:`_Changed`."""
    st = _entry(dir_fd, real.name)
    if st is None:
        return None
    if stat.S_ISDIR(st.st_mode):
        raise _error(path, f"{path} is a folder, not a file", "is_a_folder")
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
        raise _error(path, f"{path} is not a regular file", "not_a_file")
    got = _read_at(dir_fd, real.name, real)
    if got is not None and (got[1].st_dev, got[1].st_ino) != (st.st_dev, st.st_ino):
        raise _Changed(real, "was replaced")
    return got


@dataclass(frozen=True)
class _Decoded:
    text: str
    bom: bool
    crlf: bool  # every line break in the file is CRLF (and there is at least one)


def _decode(data: bytes) -> _Decoded:
    """UTF-8 bytes to text (raises ``UnicodeDecodeError``); no newline translation."""
    text = data.decode("utf-8")
    bom = text.startswith(_BOM)
    if bom:
        text = text[1:]
    lf = data.count(b"\n")
    return _Decoded(text, bom, lf > 0 and data.count(b"\r\n") == lf)


def _select_lines(text: str, line: int | None, limit: int | None) -> str:
    """Lines ``line`` (1-based) to ``line + limit - 1`` of ``text``, line breaks kept.
    Lines are split on ``\\n`` only (a CRLF line keeps its ``\\r\\n``)."""
    start = 1 if line is None else line
    pos = 0
    for _ in range(start - 1):  # skip to the first wanted line
        nl = text.find("\n", pos)
        if nl < 0:
            return ""
        pos = nl + 1
    if limit is None:
        return text[pos:]
    end = pos
    for _ in range(limit):
        nl = text.find("\n", end)
        if nl < 0:
            return text[pos:]
        end = nl + 1
    return text[pos:end]


@dataclass(frozen=True)
class NotebookProblem:
    """Why a text is not a valid notebook: ``message`` (a sentence, ``where`` included),
    ``where`` (``cell 3 (id a1b2), outputs[0]``, or ``""``), ``field_path`` (the JSON path,
    ``cells[2].outputs[0]``), ``cell`` (0-based index) and ``cell_id`` when a cell is at
    fault, ``extra`` (``line``/``column`` of a JSON syntax error)."""

    message: str
    where: str = ""
    field_path: str = ""
    cell: int | None = None
    cell_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _json_path(path: list[Any]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _problem(message: str, path: list[Any], cells: Any) -> NotebookProblem:
    """A problem at JSON ``path`` of the notebook (``["cells", 2, "source"]``)."""
    if len(path) >= 2 and path[0] == "cells" and isinstance(path[1], int):
        index = path[1]
        cell = cells[index] if isinstance(cells, list) and 0 <= index < len(cells) else None
        cid = cell.get("id") if isinstance(cell, dict) and isinstance(cell.get("id"), str) else None
        where = f"cell {index + 1}" + (f" (id {cid})" if cid else "") + (f", {_json_path(path[2:])}" if path[2:]
                                                                         else "")
        return NotebookProblem(f"{where}: {message}", where, _json_path(path), index, cid)
    where = _json_path(path)
    return NotebookProblem(f"{where}: {message}" if where else message, where, where)


def notebook_problem(text: str) -> NotebookProblem | None:
    """Why ``text`` is not a valid Jupyter notebook, or None when it is. Checked, in
    order: JSON; an object with integer ``nbformat``/``nbformat_minor`` nbformat knows;
    from nbformat 4.5 on, every cell has an ``id`` and no two share one; then
    ``nbformat.validate`` against the notebook's own format version (its first error,
    with the cell and field). Blocking (nbformat and jsonschema are imported on the first
    call, about 0.9 s here; a 2,000-cell notebook validates in about 0.1 s): call it in a
    worker thread.

    ``nbformat.reads`` is not used: it logs an invalid notebook and returns it rather
    than raising, and, as ``validate`` does, it silently gives new ids to cells whose id
    is missing or repeated before checking them — both are refused here instead."""
    try:
        nb = json.loads(text[1:] if text.startswith(_BOM) else text)
    except json.JSONDecodeError as exc:
        return NotebookProblem(f"the text is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                               extra={"line": exc.lineno, "column": exc.colno})
    except RecursionError:
        return NotebookProblem("the text is JSON nested too deeply to read")
    if not isinstance(nb, dict):
        return NotebookProblem(f"the text is a JSON {type(nb).__name__}, not a notebook object")
    for key in ("nbformat", "nbformat_minor"):
        if key not in nb:
            return _problem(f'no "{key}" (the format version nbformat needs)', [], None)
        if not isinstance(nb[key], int) or isinstance(nb[key], bool):
            return _problem(f"must be an integer, not {cut(json.dumps(nb[key]), 80)}", [key], None)
    import nbformat  # here, in the worker thread: it imports jsonschema

    major, minor = nb["nbformat"], nb["nbformat_minor"]
    if major not in nbformat.versions:
        return _problem(f"nbformat {major} is not a notebook format version nbformat knows "
                        f"({', '.join(map(str, sorted(nbformat.versions)))})", ["nbformat"], None)
    cells = nb.get("cells")
    known_types = ("code", "markdown", "raw")
    if major == 4 and minor <= nbformat.v4.nbformat_minor and isinstance(cells, list):
        seen: dict[str, int] = {}
        for index, cell in enumerate(cells):
            if not isinstance(cell, dict):
                continue
            if cell.get("cell_type") not in known_types:  # the schema's own error would print the whole cell
                return _problem(f"{cut(json.dumps(cell.get('cell_type')), 80)} is not a cell type (one of "
                                f"{', '.join(known_types)})", ["cells", index, "cell_type"], cells)
            cid = cell.get("id")
            if minor >= 5 and "id" not in cell:
                return _problem(f'no "id" (nbformat {major}.{minor} requires one per cell)', ["cells", index], cells)
            if minor >= 5 and isinstance(cid, str) and cid in seen:
                return _problem(f"the same as cell {seen[cid] + 1}'s (ids must be unique)",
                                ["cells", index, "id"], cells)
            if isinstance(cid, str):
                seen[cid] = index
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        path = list(getattr(exc, "absolute_path", None) or getattr(exc, "relative_path", None) or [])
        return _problem(cut(str(exc.message), 300), path, cells)
    return None


class FileSystem:
    """Serves ``fs/*`` for one session folder ``cwd``; ``fence`` (a private project's
    folder) refuses every path outside it and outside the ``also`` folders (the
    session's ``additionalDirectories``). See the module's documentation."""

    def __init__(self, cwd: Path, fence: Path | None = None, *, on_write: OnWrite | None = None,
                 also: Sequence[Path] = (), confinement: Confinement | None = None) -> None:
        self.cwd = Path(os.path.abspath(cwd))
        self.fence = Path(os.path.realpath(fence)) if fence is not None else None
        self.also = [Path(os.path.realpath(d)) for d in also]
        self.on_write = on_write
        self.confinement = confinement  # a sandboxed agent's (--sandbox): set again once its sandbox is made

    # -- paths -----------------------------------------------------------------------------
    def absolute(self, path: str | os.PathLike[str]) -> Path:
        """The path as the agent means it: absolute as is, relative against ``cwd``;
        ``.`` and ``..`` folded lexically. For display; not what is opened."""
        p = Path(path)
        return Path(os.path.normpath(p if p.is_absolute() else self.cwd / p))

    def resolve(self, path: str | os.PathLike[str], *, writing: bool = False) -> Path:
        """The real path that is opened: relative paths joined to ``cwd``, then ``..`` and
        symlinks resolved (also for parts that do not exist yet). Raises
        :class:`FenceError` when a fence is set and the real path is outside it, and
        :class:`SandboxRefusal` when a ``confinement`` is set and the path is out of its
        reach (to write when ``writing``, else to read)."""
        p = Path(path)
        if not str(path):
            raise _error(path, "Empty path", "empty_path")
        real = Path(os.path.realpath(p if p.is_absolute() else self.cwd / p))
        if self.fence is not None and not inside(real, (self.fence, *self.also)):
            raise FenceError(str(path), real, self.fence)
        box = self.confinement
        if box is not None and not (box.may_write(real) if writing else box.may_read(real)):
            raise SandboxRefusal(str(path), real, box, writing)
        return real

    def inside_fence(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` would be allowed (always ``True`` without a fence)."""
        try:
            self.resolve(path)
        except RequestError:
            return False
        return True

    # -- fs/read_text_file -------------------------------------------------------------------
    async def read_text_file(self, path: str, line: int | None = None,
                             limit: int | None = None) -> ReadTextFileResponse:
        """The file's text, or lines ``line`` (1-based) .. ``line + limit - 1``."""
        if line is not None and line < 1:
            raise _error(path, f"line must be 1 or more (it is 1-based), not {line}", "bad_line")
        if limit is not None and limit < 0:
            raise _error(path, f"limit must be 0 or more, not {limit}", "bad_limit")
        real = self.resolve(path)
        decoded = await asyncio.to_thread(self._read, path, real)
        if decoded is None:
            raise RequestError.resource_not_found(str(path))
        return ReadTextFileResponse(content=_select_lines(decoded.text, line, limit))

    @staticmethod
    def _read(path: str, real: Path) -> _Decoded | None:
        """Read the checked real path ``real`` exactly: see the module's "Races"."""
        try:
            folder = _open_folder(real.parent) if real.name else None
            if folder is None:
                if not real.name:
                    raise _error(path, f"{path} is a folder, not a file", "is_a_folder")
                return None
            try:
                found = _read_entry(path, real, folder)
            finally:
                os.close(folder)
        except _Changed as exc:
            raise _changed_error(path, real, exc, "read") from None
        except NotADirectoryError as exc:
            raise _error(path, f"Cannot read {path}: {exc.strerror or exc}", "not_a_folder") from None
        except OSError as exc:
            raise _error(path, f"Cannot read {path}: {exc.strerror or exc}", "os_error", INTERNAL_ERROR) from None
        if found is None:
            return None
        try:
            return _decode(found[0])
        except UnicodeDecodeError as exc:
            raise _not_utf8(path, exc, "show") from None

    # -- fs/write_text_file ------------------------------------------------------------------
    async def write_text_file(self, path: str, content: str) -> WriteTextFileResponse:
        """Write ``content`` (creating missing parent folders), keeping the file's line
        endings and byte order mark; then tell ``on_write``. A notebook is checked first
        (see the module's documentation)."""
        real = self.resolve(path, writing=True)
        if is_notebook_path(path) or is_notebook_path(real.name):
            problem = await asyncio.to_thread(notebook_problem, content)
            if problem is not None:
                raise RequestError(INVALID_PARAMS, f"Refused: {path} would not be a valid notebook, so it was not "
                                                   f"written: {problem.message}",
                                   {"path": str(path), "reason": "invalid_notebook", "field": problem.field_path,
                                    **({"cell": problem.cell} if problem.cell is not None else {}),
                                    **({"cellId": problem.cell_id} if problem.cell_id else {}), **problem.extra})
        old, new = await asyncio.to_thread(self._write, path, real, content)
        if self.on_write is not None:
            self.on_write(self.absolute(path), old, new)
        return WriteTextFileResponse()

    @staticmethod
    def _write(path: str, real: Path, content: str) -> tuple[str | None, str]:
        """Write the checked real path ``real`` exactly (a worker thread): its folder is
        opened without following symlinks, the bytes go to a new file beside it, which
        then replaces the name (``renameat``, which never follows a symlink either). See
        the module's "Races"."""
        if not real.name:
            raise _error(path, f"{path} is a folder, not a file", "is_a_folder")
        try:
            folder = _open_folder(real.parent, create=True)
            assert folder is not None
            try:
                return _write_in(path, real, folder, content)
            finally:
                os.close(folder)
        except _Changed as exc:
            raise _changed_error(path, real, exc, "written") from None
        except NotADirectoryError as exc:
            raise _error(path, f"Cannot write {path}: {exc.strerror or exc}", "not_a_folder") from None
        except OSError as exc:
            raise _error(path, f"Cannot write {path}: {exc.strerror or exc}", "os_error", INTERNAL_ERROR) from None


def _write_in(path: str, real: Path, folder: int, content: str) -> tuple[str | None, str]:
    """:meth:`FileSystem._write` once the folder ``folder`` is open."""
    try:
        found = _read_entry(path, real, folder)
    except OSError as exc:
        raise _error(path, f"Cannot read {path} before writing it: {exc.strerror or exc}", "os_error",
                     INTERNAL_ERROR) from None
    old: _Decoded | None = None
    if found is not None:
        try:
            old = _decode(found[0])
        except UnicodeDecodeError as exc:
            raise _not_utf8(path, exc, "overwrite") from None
    new = content
    if old is not None and old.crlf and "\n" in new and "\r\n" not in new:
        new = new.replace("\n", "\r\n")
    try:
        data = ((_BOM if old is not None and old.bom and not new.startswith(_BOM) else "") + new).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _error(path, f"The text for {path} cannot be written as UTF-8 "
                           f"({exc.reason} at character {exc.start})", "not_encodable") from None
    before = found[1] if found is not None else None
    mode = stat.S_IMODE(before.st_mode) if before is not None else 0o666  # a new file: the umask applies
    temp = f".{secrets.token_hex(6)}.escouade-write"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=folder)
    except PermissionError:
        if before is None:
            raise
        _write_in_place(real, folder, before, data)  # a writable file in a folder we may not add to
        return (old.text if old is not None else None), new
    try:
        with open(fd, "wb") as fh:
            fh.write(data)
            if before is not None:
                os.fchmod(fh.fileno(), mode)  # exactly the old mode, whatever the umask
                if (before.st_uid, before.st_gid) != (os.geteuid(), os.getegid()):
                    try:
                        os.fchown(fh.fileno(), before.st_uid, before.st_gid)
                    except OSError:
                        pass  # not ours to give: the file is now the writer's
        # the last checks: the name is what was read (or still missing), the folder still at its path
        _unchanged(real, folder, before)
        _still_at(folder, real.parent)
        os.replace(temp, real.name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=folder)
        except OSError:
            pass
        raise
    return (old.text if old is not None else None), new


def _unchanged(real: Path, folder: int, before: os.stat_result | None) -> None:
    """Raise :class:`_Changed` unless the name ``real.name`` in ``folder`` is still the
    file read before (``before``), or still missing (``None``)."""
    now = _entry(folder, real.name)
    if now is None and before is None:
        return
    if now is None:
        raise _Changed(real, "was removed")
    if stat.S_ISLNK(now.st_mode):
        raise _Changed(real, "is now a symlink")
    if before is None:
        raise _Changed(real, "appeared")
    if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
        raise _Changed(real, "was replaced")


def _write_in_place(real: Path, folder: int, before: os.stat_result, data: bytes) -> None:
    """Overwrite the file read before (``before``) in place, for a folder where no new
    file may be made: opened without following a symlink, and only when it is still that
    file and has no other hard link (one outside a fence would be written too)."""
    fd = os.open(real.name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    with open(fd, "wb") as fh:
        st = os.fstat(fh.fileno())
        if (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
            raise _Changed(real, "was replaced")
        if st.st_nlink != 1:
            raise PermissionError(errno.EACCES, f"no new file may be made in {real.parent}, and {real.name} has "
                                                f"{st.st_nlink} hard links: it is not written in place")
        _still_at(folder, real.parent)
        fh.truncate(0)
        fh.write(data)
