"""What ``%escouade resume`` lists and resumes: the histories of this project's agents.

A *history* is one agent's transcripts: its files chained by restarts (a restart's file
names the one before: ``"previous"``), listed by its newest file. Two histories may bear
one name (an agent closed, then a new one of that name; two notebooks of one project):
they are both listed, told apart by their last write, first prompt and folder, and
resuming that name asks which (``--from FILE``), never picking one silently.

*This project* is the folder of the notebook (the kernel's working folder), or the git
repository holding it: a history is this project's when its agent worked inside it (its
folder, or its worktree's repository) or was started from inside it (the header's
``started_from``: an agent of this notebook given ``--cwd`` elsewhere). The others are
counted, not listed, unless asked (``%escouade resume --all``).

Reads each file's first line and the newest files' heads up to their first prompt
(:func:`~..wire.transcript.first_prompt`): bounded whatever the files' sizes; writes
nothing queued first (safe in a thread).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..wire import transcript as tr
from .worktrees.worktree import repository_of


@dataclass(frozen=True)
class History:
    """One agent's history: ``name``, its newest file (``path``), ``written`` (that
    file's last write, epoch seconds), ``first_prompt`` (see
    :class:`~..wire.transcript.Summary`), ``folder`` (the agent's working folder, as
    recorded; None when the header has none), ``repo`` (its worktree's repository) and
    ``started_from`` (the folder of the notebook that started it)."""

    name: str
    path: Path
    written: float
    first_prompt: str | None
    folder: Path | None
    repo: Path | None = None
    started_from: Path | None = None

    @property
    def written_text(self) -> str:
        """``written`` in local time, ``2026-12-01 14:03``."""
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(self.written))

    def inside(self, root: Path) -> bool:
        """Whether the agent worked inside ``root`` (resolved) — its folder, or its
        worktree's repository — or was started from inside it. A history whose folders
        were not recorded is nobody's."""
        return any(p is not None and (p == root or p.is_relative_to(root))
                   for p in (self.folder, self.repo, self.started_from))


@dataclass
class Listing:
    """``here``: this project's histories (``root``), by name then newest first;
    ``elsewhere``: the other folders' (listed only when asked: ``everywhere``)."""

    root: Path
    here: list[History] = field(default_factory=list)
    elsewhere: list[History] = field(default_factory=list)
    everywhere: bool = False

    def named(self, name: str) -> list[History]:
        """This project's histories of agent ``name``, newest first."""
        return [h for h in self.here if h.name == name]


def project_root(folder: str | Path | None = None) -> Path:
    """The project of a notebook in ``folder`` (default: the working folder): the git
    repository holding it, else the folder itself (resolved)."""
    here = Path(folder if folder is not None else os.getcwd()).expanduser().resolve()
    return repository_of(here) or here


def _resolved(value: object) -> Path | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return Path(value).expanduser().resolve()
    except (OSError, RuntimeError):
        return None


def histories(folder: Path | None = None) -> list[History]:
    """Every history in the transcripts ``folder`` (default
    :func:`~..wire.transcript.transcripts_dir`), by name then newest first: each chain of
    files (restarts) by its newest file — one no other file names ``previous``."""
    heads: dict[Path, tuple[dict, float]] = {}
    named_before: set[Path] = set()
    for path, head, mtime in tr.headers(folder):  # first lines only, nothing queued written first (safe in a thread)
        heads[path] = (head, mtime)
        before = _resolved(head.get("previous"))
        if before is not None:
            named_before.add(before)
    out = []
    for path, (head, mtime) in heads.items():
        if path.resolve() in named_before:
            continue  # a restart's file follows it: the history is listed by its newest
        worktree: dict[str, Any] = head["worktree"] if isinstance(head.get("worktree"), dict) else {}
        out.append(History(str(head.get("agent", "")), path, mtime, tr.first_prompt(path), _resolved(head.get("cwd")),
                           _resolved(worktree.get("repo")), _resolved(head.get("started_from"))))
    return sorted(out, key=lambda h: (h.name, -h.written, h.path.name))


def listing(root: Path | None = None, *, everywhere: bool = False, folder: Path | None = None) -> Listing:
    """:func:`histories` (of the transcripts ``folder``) split into this project's
    (``root``, default :func:`project_root`) and the others'."""
    root = project_root() if root is None else root
    found = Listing(root, everywhere=everywhere)
    for h in histories(folder):
        (found.here if h.inside(root) else found.elsewhere).append(h)
    return found


def _where(h: History, root: Path) -> str:
    """The agent's folder: relative to the project (``.`` its top), else absolute."""
    if h.folder is None:
        return "(folder not recorded)"
    if h.folder == root:
        return "."
    return str(h.folder.relative_to(root)) if h.folder.is_relative_to(root) else str(h.folder)


def _line(h: History, root: Path) -> str:
    prompt = f"“{h.first_prompt}”" if h.first_prompt is not None else "(no prompt)"
    return f"  {h.name:<14} {h.written_text}  {prompt}  in {_where(h, root)}  ({h.path.name})"


def listing_text(found: Listing) -> str:
    """What ``%escouade resume`` prints: this project's histories (name, last write,
    first prompt, folder, file), a name held by several marked with how to pick one, and
    how many other folders have (``--all`` lists them too)."""
    lines: list[str] = []
    title = found.root.name or str(found.root)
    if found.here:
        lines.append(f"Resumable agents of this project ({title}):")
        lines.extend(_line(h, found.root) for h in found.here)
        for name in sorted({h.name for h in found.here if len(found.named(h.name)) > 1}):
            lines.append(f"  {len(found.named(name))} agents were named {name}: pick one with "
                         f"%escouade resume {name} --from FILE (FILE in parentheses above)")
    else:
        lines.append(f"No transcript of this project ({title}) to resume from.")
    if found.elsewhere:
        if found.everywhere:
            lines.append("Of other folders (resume one with %escouade resume NAME --from FILE):")
            lines.extend(_line(h, found.root) for h in found.elsewhere)
        else:
            lines.append(f"{len(found.elsewhere)} more of other folders: %escouade resume --all lists them.")
    return "\n".join(lines)


def choose(found: Listing, name: str, picked: str | None = None) -> History:
    """The history of agent ``name`` to resume: ``picked`` (a file name of the
    transcripts folder, or a path) when given; else this project's only one.
    ``LookupError`` saying what exists and how to pick when there is none or several."""
    if picked is not None:
        for h in [*found.here, *found.elsewhere]:
            if picked in (h.path.name, str(h.path)) or _resolved(picked) == h.path.resolve():
                if h.name != name:
                    raise LookupError(f"{picked} is a transcript of {h.name!r}, not of {name!r}")
                return h
        raise LookupError(f"no transcript {picked!r} (%escouade resume lists them)")
    mine = found.named(name)
    if len(mine) == 1:
        return mine[0]
    if len(mine) > 1:
        raise LookupError(f"{len(mine)} agents of this project were named {name!r}; pick one with "
                          f"%escouade resume {name} --from FILE:\n" + "\n".join(_line(h, found.root) for h in mine))
    where = f"this project ({found.root})"
    others = [h for h in found.elsewhere if h.name == name]
    if others:
        raise LookupError(f"no transcript of an agent named {name!r} in {where}; {len(others)} in other folders:\n"
                          + "\n".join(_line(h, found.root) for h in others)
                          + f"\nresume one with %escouade resume {name} --from FILE")
    known = ", ".join(sorted({h.name for h in found.here})) or "none"
    raise LookupError(f"no transcript of an agent named {name!r} in {where} (resumable: {known})")
