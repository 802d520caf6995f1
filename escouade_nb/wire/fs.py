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
    * outside the fence, not UTF-8, a folder, bad ``line``/``limit``: -32602 (invalid
      params) with a sentence naming the path;
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
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import RequestError
from acp.schema import ReadTextFileResponse, WriteTextFileResponse

from ..core.render_text import cut, is_notebook_path

__all__ = ["FileSystem", "OnWrite", "FenceError", "NotebookProblem", "notebook_problem", "INVALID_PARAMS",
           "INTERNAL_ERROR"]

INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
_BOM = "\ufeff"

OnWrite = Callable[[Path, "str | None", str], None]
"""``on_write(path, old_text, new_text)``: told of each write, after it happened."""


class FenceError(RequestError):
    """A path outside the private project's folder (-32602)."""

    def __init__(self, path: str, real: Path, fence: Path) -> None:
        shown = path if str(real) == path else f"{path} (really {real})"
        super().__init__(
            INVALID_PARAMS,
            f"Refused: {shown} is outside the private project folder {fence}; "
            "escouade_nb only reads and writes files inside it",
            {"path": path, "realPath": str(real), "fence": str(fence), "reason": "outside_fence"},
        )


def _error(path: Path | str, message: str, reason: str, code: int = INVALID_PARAMS) -> RequestError:
    return RequestError(code, message, {"path": str(path), "reason": reason})


def _not_utf8(path: Path | str, exc: UnicodeDecodeError, doing: str) -> RequestError:
    byte = exc.object[exc.start]
    return _error(path, f"{path} is not UTF-8 text (byte 0x{byte:02x} at offset {exc.start}); "
                        f"escouade_nb does not re-encode files, so it will not {doing} it",
                  "not_utf8")


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
                 also: Sequence[Path] = ()) -> None:
        self.cwd = Path(os.path.abspath(cwd))
        self.fence = Path(os.path.realpath(fence)) if fence is not None else None
        self.also = [Path(os.path.realpath(d)) for d in also]
        self.on_write = on_write

    # -- paths -----------------------------------------------------------------------------
    def absolute(self, path: str | os.PathLike[str]) -> Path:
        """The path as the agent means it: absolute as is, relative against ``cwd``;
        ``.`` and ``..`` folded lexically. For display; not what is opened."""
        p = Path(path)
        return Path(os.path.normpath(p if p.is_absolute() else self.cwd / p))

    def resolve(self, path: str | os.PathLike[str]) -> Path:
        """The real path that is opened: relative paths joined to ``cwd``, then ``..`` and
        symlinks resolved (also for parts that do not exist yet). Raises
        :class:`FenceError` when a fence is set and the real path is outside it."""
        p = Path(path)
        if not str(path):
            raise _error(path, "Empty path", "empty_path")
        real = Path(os.path.realpath(p if p.is_absolute() else self.cwd / p))
        if self.fence is not None and not any(real.is_relative_to(root) for root in (self.fence, *self.also)):
            raise FenceError(str(path), real, self.fence)
        return real

    def inside_fence(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` would be allowed (always ``True`` without a fence)."""
        try:
            self.resolve(path)
        except RequestError:
            return False
        return True

    # -- fs/read_text_file -------------------------------------------------------------------
    async def read_text_file(self, path: str, line: int | None = None, limit: int | None = None) -> ReadTextFileResponse:
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
        try:
            data = real.read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise _error(path, f"{path} is a folder, not a file", "is_a_folder") from None
        except OSError as exc:
            raise _error(path, f"Cannot read {path}: {exc.strerror or exc}", "os_error", INTERNAL_ERROR) from None
        try:
            return _decode(data)
        except UnicodeDecodeError as exc:
            raise _not_utf8(path, exc, "show") from None

    # -- fs/write_text_file ------------------------------------------------------------------
    async def write_text_file(self, path: str, content: str) -> WriteTextFileResponse:
        """Write ``content`` (creating missing parent folders), keeping the file's line
        endings and byte order mark; then tell ``on_write``. A notebook is checked first
        (see the module's documentation)."""
        real = self.resolve(path)
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
        old: _Decoded | None = None
        try:
            old = _decode(real.read_bytes())
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            raise _error(path, f"{path} is a folder, not a file", "is_a_folder") from None
        except UnicodeDecodeError as exc:
            raise _not_utf8(path, exc, "overwrite") from None
        except OSError as exc:
            raise _error(path, f"Cannot read {path} before writing it: {exc.strerror or exc}", "os_error",
                         INTERNAL_ERROR) from None
        new = content
        if old is not None and old.crlf and "\n" in new and "\r\n" not in new:
            new = new.replace("\n", "\r\n")
        try:
            data = ((_BOM if old is not None and old.bom and not new.startswith(_BOM) else "") + new).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _error(path, f"The text for {path} cannot be written as UTF-8 "
                               f"({exc.reason} at character {exc.start})", "not_encodable") from None
        try:
            real.parent.mkdir(parents=True, exist_ok=True)
            real.write_bytes(data)
        except OSError as exc:
            raise _error(path, f"Cannot write {path}: {exc.strerror or exc}", "os_error", INTERNAL_ERROR) from None
        return (old.text if old is not None else None), new
