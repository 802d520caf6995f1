"""What each agent wrote in a notebook, read: :func:`read_written` (``escouade_nb.written``,
``%escouade written [PATH]``). The rows are :mod:`..core.written`'s; the file is read in a
worker thread (nbformat), the open notebook through the kernel's channel to its page.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core import notebook as notebook_core
from ..core.written import Written, written_rows
from .tools import ToolFailure

__all__ = ["read_written", "written", "saved_trusted", "NO_NOTEBOOK"]

NO_NOTEBOOK = ("no notebook to read: this kernel's notebook is not open in a page with escouade_nb's extension "
               "and the kernel does not know its file (nbclient, nbval, a console): give a path, "
               "%escouade written PATH.ipynb")


def _read(path: Path) -> Any:
    """``nbformat.read`` as version 4 (a worker thread's job)."""
    import nbformat

    return nbformat.read(str(path), as_version=4)


def _trusted(nb: Any) -> bool:
    """Whether this Jupyter's notary knows the read notebook's signature (nbformat's
    ``NotebookNotary.check_signature``: the user saved it in this Jupyter; a worker thread's
    job: it reads the notary's database)."""
    from jupyter_core.paths import jupyter_data_dir
    from nbformat.sign import NotebookNotary

    here = Path(jupyter_data_dir())  # the notary's own defaults: its key and its signatures' database
    if not ((here / "notebook_secret").is_file() and (here / "nbsignatures.db").is_file()):
        return False  # nothing was ever signed here (and the notary would create both to say so)
    return bool(NotebookNotary().check_signature(nb))


def saved_trusted(path: Path) -> bool | None:
    """Whether the saved notebook at ``path`` is trusted here (:func:`_trusted`); ``None``
    when it cannot be read. Blocking: call it in a worker thread."""
    try:
        return _trusted(_read(path))
    except Exception:
        return None


async def _from_file(path: Path) -> Written:
    try:
        nb = await asyncio.to_thread(_read, path)
    except FileNotFoundError:
        return Written(str(path), error=f"{path}: no such file")
    except Exception as exc:  # not a notebook nbformat reads: said in one line
        return Written(str(path), error=f"{path}: not read as a notebook ({type(exc).__name__}: "
                                        f"{str(exc).splitlines()[0][:200] if str(exc) else ''})")
    try:
        trusted: bool | None = await asyncio.to_thread(_trusted, nb)
    except Exception:  # no notary database to read: said unknown, not trusted
        trusted = False
    return Written(str(path), written_rows(nb.get("cells") or []), trusted=trusted)


async def read_written(path: str | os.PathLike[str] | None = None, *, ns: Mapping[str, Any] | None = None,
                       live: Any = None) -> Written:
    """What each agent wrote (the cells kept with their provenance), as a :class:`Written`:

    - ``path`` given: that saved ``.ipynb`` (relative to the kernel's folder), read with
      nbformat in a worker thread;
    - no ``path``: this kernel's open notebook as its page holds it now, through the
      channel (``live``: a :class:`~.server.LiveNotebook`, by default the kernel's),
      unsaved Keeps included; with no page answering, the saved file of the kernel's
      session (``ns["__session__"]`` or ``JPY_SESSION_NAME``); else a one-line ``error``.

    Never raises for a missing or unreadable notebook: ``Written.error`` says why."""
    if path is not None:
        return await _from_file(Path(path).expanduser().absolute())
    if live is None:
        from . import server

        live = server._live_notebook
    if live is not None:
        try:
            got = await live.live_cells()
        except ToolFailure:
            got = None  # no page: the saved file, below
        if isinstance(got, dict) and isinstance(got.get("cells"), list):
            where = got.get("path") if isinstance(got.get("path"), str) and got.get("path") else "the open notebook"
            return Written(f"{where} (open in the page)", written_rows(got["cells"]))
    ref = notebook_core.kernel_notebook(ns or {}, os.environ, Path.cwd())
    if ref is None:
        return Written("", error=NO_NOTEBOOK)
    written = await _from_file(ref.path)
    if written.error is None:
        written.where = f"{ref.path} (saved file)"
    return written


async def written(path: str | os.PathLike[str] | None = None) -> Written:
    """``await escouade_nb.written("analysis.ipynb")``: what each agent wrote in that saved
    notebook (no ``path``: this kernel's open notebook, see :func:`read_written`), a
    :class:`~..core.written.Written` that a notebook shows as a table (per agent: the cells
    kept with their agent, harness, session, turn, time, cell id, first line, code run).
    Never raises for a missing or unreadable notebook: its ``error`` says why, in one line."""
    return await read_written(path, ns=_user_ns())


def _user_ns() -> Mapping[str, Any]:
    """The IPython kernel's namespace (where ``__session__`` names its notebook), or ``{}``."""
    import sys

    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    ns = getattr(shell, "user_ns", None)
    return ns if isinstance(ns, Mapping) else {}
