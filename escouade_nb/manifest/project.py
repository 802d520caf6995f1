"""The project an agent works for: ``Project(id, name, folder, private)``.

A project is a folder: the agent's session folder, resolved (symlinks followed). Its
``id`` is derived from that resolved path alone, so it is the same in every kernel and
every session, and two spellings of one folder give one project.

``private`` comes from either of two places, and either one is enough:

* the start flag: ``%escouade NAME --private`` (``Squad.start(..., private=True)``);
* the project's own config file, ``.escouade.yml`` at the top of the folder, with a
  line ``private: true``.

That file may also give the project's ``name``, ``review: true`` (the files an agent
changes in each turn pend the user's Keep or Reject: ``engine/review/file_review.py``; it only adds
a review, never takes one away) and ``sandbox: true`` (every agent of the folder under
bubblewrap, as ``--sandbox``: a protection, which a project file may turn on by itself,
never off). Only those top-level keys are read:
a project folder can mark itself private, but it can never turn a rule plugin on — a
``plugins:`` section (or anything else) in it is ignored. Which plugins decide for a
project is the user's choice, kept in the user's config (see
:mod:`escouade_nb.permissions.states`), never in the project folder.

A ``via`` key names the folder's launcher (``via: "podman exec -i box"``): its agents run there
unless ``--via`` says otherwise (:func:`project_launcher`: only the launcher forms of the docs, with
their harmless options — a folder never runs a local command of its own by naming a launcher).

A ``worktree`` key says how an agent's git worktree (``--worktree``) is set up:
:func:`read_worktree_config` reads it (YAML, all of it, only when the key is there) as a
:class:`WorktreeSetup`. ``worktree: false`` refuses ``--worktree`` for the folder. Its
``setup`` and ``cleanup`` commands never run by the file's say alone: the user confirms
each exact command once for the folder (:mod:`escouade_nb.engine.worktrees.worktree_setup`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from .._errors import EscouadeError

__all__ = ["CONFIG_FILENAME", "Project", "ProjectConfig", "ProjectFileError", "WorktreeSetup", "load_project_file",
           "project_launcher", "read_project_config",
           "read_worktree_config"]

CONFIG_FILENAME = ".escouade.yml"
"""The project's own config file, at the top of its folder."""

_NAMESPACE = uuid.UUID("6f1c3b0e-2a55-4b8e-9a51-0e5c0a7d2f11")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0", ""}


class ProjectConfig(BaseModel):
    """What escouade_nb reads of ``.escouade.yml`` at its top level: ``name``, ``private``,
    ``review`` and ``sandbox`` (``worktree``: :func:`read_worktree_config`)."""

    model_config = ConfigDict(extra="ignore")

    name: str | None = None
    private: bool = False
    review: bool = False  # the files an agent changes in each turn pend review (engine/review/file_review.py)
    sandbox: bool = False  # every agent of the folder under bubblewrap (engine/launch/sandbox.py)

    @field_validator("private", "review", "sandbox", mode="before")
    @classmethod
    def _yaml_bool(cls, value):
        if isinstance(value, str):
            low = value.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
        return value


def load_project_file(folder: str | Path) -> tuple[Path, dict[str, Any] | None]:
    """``folder/.escouade.yml`` read whole as YAML (PyYAML's ``safe_load``): its path and
    its top-level mapping, None when the file is missing, unreadable or empty. Blocking (a
    small file). Raises :class:`ProjectFileError` (one line naming the file, and the line)
    for a file that is not YAML or whose top level is not a mapping."""
    path = Path(folder) / CONFIG_FILENAME
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return path, None
    import yaml  # only for a folder that has the file: a light import otherwise

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ProjectFileError(f"{path}: not YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if data is None:
        return path, None
    if not isinstance(data, dict):
        raise ProjectFileError(f"{path}: not a mapping of keys (name, private, review, sandbox, worktree)")
    return path, data


def read_project_config(folder: Path) -> ProjectConfig:
    """The top-level keys of ``folder/.escouade.yml`` that a project file may set
    (:class:`ProjectConfig`); a missing file gives the defaults, a key with a bad value is
    left at its default (``private: maybe`` is not private), anything else in the file is
    ignored. :class:`ProjectFileError` for a file that is not YAML (see
    :func:`load_project_file`)."""
    _, data = load_project_file(folder)
    values = {k: v for k, v in (data or {}).items() if k in ProjectConfig.model_fields}
    if isinstance(values.get("name"), int | float):
        values["name"] = str(values["name"])
    try:
        return ProjectConfig.model_validate(values)
    except ValidationError as exc:
        bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
        return ProjectConfig.model_validate({k: v for k, v in values.items() if k not in bad})


@dataclass(frozen=True)
class Project:
    """A project: ``id`` (stable per resolved folder), ``name``, ``folder``, ``private``."""

    id: str
    name: str
    folder: Path
    private: bool = False
    review: bool = False
    sandbox: bool = False

    @classmethod
    def for_folder(cls, folder: str | Path, *, private: bool = False, sandbox: bool = False) -> Project:
        """The project of ``folder``: private if ``private`` is given or its
        ``.escouade.yml`` says so (the flag can only add privacy, never remove it)."""
        resolved = Path(folder).expanduser().resolve()
        config = read_project_config(resolved)
        return cls(id=project_id(resolved), name=config.name or resolved.name or str(resolved),
                   folder=resolved, private=bool(private or config.private), review=config.review,
                   sandbox=bool(sandbox or config.sandbox))

    def wire(self) -> dict[str, object]:
        """The ``project`` object of a ``permissions/decide`` request."""
        return {"id": self.id, "name": self.name, "private": self.private}


def project_id(folder: str | Path) -> str:
    """The id of the project at ``folder`` (resolved): a UUID derived from its path."""
    return str(uuid.uuid5(_NAMESPACE, str(Path(folder).expanduser().resolve())))


# -- the worktree's set-up (issue 25) ----------------------------------------------------------------

WORKTREE_TIMEOUT = 300.0
"""How long ``setup`` (and ``cleanup``) may run by default, in seconds (``worktree.timeout`` changes it)."""
WORKTREE_TIMEOUT_MAX = 3600.0
"""The longest ``worktree.timeout`` accepted, in seconds."""
_WORKTREE_KEYS = ("copy", "setup", "cleanup", "timeout")


class ProjectFileError(EscouadeError):
    """A ``.escouade.yml`` that cannot be followed; the message is one line naming the file and the field."""


@dataclass(frozen=True)
class WorktreeSetup:
    """The ``worktree`` key of ``file`` (a ``.escouade.yml`` at the top of ``folder``, both
    resolved). ``allowed`` False: ``worktree: false``, no worktree for this folder.
    ``copy``: paths relative to ``folder`` (files or folders, never leaving it) copied
    into a new worktree; ``setup`` runs in it once made, ``cleanup`` before ``discard``
    removes it (shell lines, None when not given); ``timeout``: seconds each may run."""

    file: Path
    folder: Path
    allowed: bool = True
    copy: tuple[str, ...] = ()
    setup: str | None = None
    cleanup: str | None = None
    timeout: float = WORKTREE_TIMEOUT

    @property
    def commands(self) -> dict[str, str]:
        """The commands it asks to run, by role (``setup``, ``cleanup``): what a confirmation covers."""
        return {k: v for k, v in (("setup", self.setup), ("cleanup", self.cleanup)) if v is not None}


def read_worktree_config(folder: str | Path) -> WorktreeSetup | None:
    """The ``worktree`` key of ``folder/.escouade.yml``: None without the file or the key,
    else a :class:`WorktreeSetup` (``worktree: true`` gives one that does nothing), read by
    :func:`load_project_file`. Blocking (a small file): call it in a thread on a hot path.
    Raises :class:`ProjectFileError` (one line naming the file and the field) for a file
    that is not YAML, an unknown key under ``worktree``, a path that is absolute or
    leaves the folder (``..``), a command that is not a non-empty string, a timeout that
    is not a number of seconds in (0, 3600]."""
    resolved = Path(folder).expanduser().resolve()
    path, data = load_project_file(resolved)
    if data is None or "worktree" not in data:
        return None
    return _worktree_setup(path, resolved, data["worktree"])


def _worktree_setup(path: Path, folder: Path, value: Any) -> WorktreeSetup:
    def bad(field: str, why: str) -> ProjectFileError:
        return ProjectFileError(f"{path}: {field}: {why}")

    if value is False or value is None or value is True:
        return WorktreeSetup(path, folder, allowed=value is not False)
    if not isinstance(value, dict):
        raise bad("worktree", f"false, or a mapping of {', '.join(_WORKTREE_KEYS)}; not {value!r}")
    unknown = [str(k) for k in value if k not in _WORKTREE_KEYS]
    if unknown:
        raise bad(f"worktree.{unknown[0]}", f"unknown key (known: {', '.join(_WORKTREE_KEYS)})")
    raw = value.get("copy") or []
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise bad("worktree.copy", f"a list of paths, not {raw!r}")
    copy: list[str] = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, str) or not entry.strip():
            raise bad(f"worktree.copy[{i}]", f"a path, not {entry!r}")
        pure = PurePosixPath(entry.strip())
        if pure.is_absolute() or ".." in pure.parts:
            raise bad(f"worktree.copy[{i}]", f"{entry!r} leaves the folder: list paths inside {folder}")
        copy.append(entry.strip())
    commands: dict[str, str | None] = {}
    for role in ("setup", "cleanup"):
        command = value.get(role)
        if command is not None and (not isinstance(command, str) or not command.strip()):
            raise bad(f"worktree.{role}", f"a shell command (a string), not {command!r}")
        commands[role] = command.strip() if isinstance(command, str) else None
    timeout = value.get("timeout", WORKTREE_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= WORKTREE_TIMEOUT_MAX:
        raise bad("worktree.timeout", f"seconds, more than 0 and at most {WORKTREE_TIMEOUT_MAX:g}; not {timeout!r}")
    return WorktreeSetup(path, folder, True, tuple(copy), commands["setup"], commands["cleanup"], float(timeout))


# -- the folder's launcher (``via:``) ----------------------------------------------------------------

_LAUNCHER_FORMS: dict[str, tuple[tuple[str, ...], frozenset[str], frozenset[str], bool]] = {
    # program: (its fixed words after the program, flags without a value, options taking one value,
    #           whether the form ends with "--")
    "ssh": ((), frozenset({"-4", "-6", "-T", "-q", "-C"}), frozenset({"-p", "-l"}), False),
    "podman": (("exec",), frozenset({"-i", "--interactive"}),
               frozenset({"-w", "--workdir", "-u", "--user"}), False),
    "docker": (("exec",), frozenset({"-i", "--interactive"}),
               frozenset({"-w", "--workdir", "-u", "--user"}), False),
    "kubectl": (("exec",), frozenset({"-i", "--stdin"}),
                frozenset({"-n", "--namespace", "-c", "--container"}), True),
    "srun": ((), frozenset({"--unbuffered", "-u"}),
             frozenset({"-N", "--nodes", "-n", "--ntasks", "-p", "--partition", "-A", "--account", "-t", "--time",
                        "-c", "--cpus-per-task", "--mem", "--gres", "--gpus", "-w", "--nodelist", "-J",
                        "--job-name", "--immediate", "-q", "--qos", "--constraint", "-C"}), False),
}
"""What a project file's ``via:`` may say, by program (a bare name, looked up on ``PATH``): the
launcher forms of the docs with their harmless options. Anything else — an option that runs a local
command (``ssh -o ProxyCommand=…``, ``kubectl --kubeconfig`` with an exec plugin, ``srun --prolog``),
a program by path — is refused: a cloned folder must not run a command of its own by naming a
launcher. ``--via`` given by the user is not limited."""


def project_launcher(folder: str | Path) -> list[str] | None:
    """The launcher ``folder/.escouade.yml`` names (``via: "podman exec -i box"``), as argv; None when
    it names none. :class:`ProjectFileError` (one line naming the file) for a launcher outside the
    forms of :data:`_LAUNCHER_FORMS` or a file that is not YAML."""
    import shlex

    path, data = load_project_file(folder)
    value = (data or {}).get("via")
    if value is None or value == "":
        return None
    try:
        words = shlex.split(value) if isinstance(value, str) else None
    except ValueError as exc:
        raise ProjectFileError(f"{path}: via: {exc}") from None
    if not words:
        raise ProjectFileError(f"{path}: via: a launcher's command line, as text (e.g. \"ssh host\")")
    why = _launcher_refused(words)
    if why is not None:
        raise ProjectFileError(f"{path}: via: {shlex.join(words)!r} is not a launcher a project file may name "
                               f"({why}); give it with --via instead")
    return words


def _launcher_refused(words: list[str]) -> str | None:
    """Why ``words`` is not one of the allowed forms, else None."""
    program, rest = words[0], list(words[1:])
    form = _LAUNCHER_FORMS.get(program)
    if form is None:
        return f"its program must be one of {', '.join(_LAUNCHER_FORMS)}, by name"
    fixed, flags, options, dashes = form
    if rest[:len(fixed)] != list(fixed):
        return f"{program} {' '.join(fixed)} …"
    rest = rest[len(fixed):]
    if dashes:
        if not rest or rest[-1] != "--":
            return "it must end with --"
        rest = rest[:-1]
    targets: list[str] = []
    while rest:
        word = rest.pop(0)
        if not word.startswith("-"):
            targets.append(word)
            continue
        name, eq, _ = word.partition("=")
        if word in flags:
            continue
        if name in options and eq:
            continue
        if word in options:
            if not rest or rest[0].startswith("-"):
                return f"{word} wants a value"
            rest.pop(0)
            continue
        if len(word) > 2 and not word.startswith("--") and word[:2] in options:  # -N1, -pdebug
            continue
        return f"option {word} is not allowed there"
    if program == "srun":
        return None if not targets else f"srun takes no command words here: {targets[0]}"
    if len(targets) != 1:
        return "it must name one host, container or pod"
    return None
