"""The project an agent works for: ``Project(id, name, folder, private)``.

A project is a folder: the agent's session folder, resolved (symlinks followed). Its
``id`` is derived from that resolved path alone, so it is the same in every kernel and
every session, and two spellings of one folder give one project.

``private`` comes from either of two places, and either one is enough:

* the start flag: ``%escouade NAME --private`` (``Squad.start(..., private=True)``);
* the project's own config file, ``.escouade.yml`` at the top of the folder, with a
  line ``private: true``.

That file may also give the project's ``name``, and ``sandbox: true`` (every agent of the
folder under bubblewrap, as ``--sandbox``: a protection, which a project file may turn on
by itself, never off). Only those top-level keys are read:
a project folder can mark itself private, but it can never turn a rule plugin on — a
``plugins:`` section (or anything else) in it is ignored. Which plugins decide for a
project is the user's choice, kept in the user's config (see
:mod:`escouade_nb.permissions.states`), never in the project folder.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

__all__ = ["CONFIG_FILENAME", "Project", "ProjectConfig", "read_project_config"]

CONFIG_FILENAME = ".escouade.yml"
"""The project's own config file, at the top of its folder."""

_NAMESPACE = uuid.UUID("6f1c3b0e-2a55-4b8e-9a51-0e5c0a7d2f11")
_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*:\s*(.*?)\s*$")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0", ""}


class ProjectConfig(BaseModel):
    """What escouade_nb reads of ``.escouade.yml``: ``name``, ``private`` and ``sandbox``."""

    model_config = ConfigDict(extra="ignore")

    name: str | None = None
    private: bool = False
    sandbox: bool = False  # every agent of the folder under bubblewrap (engine/sandbox.py)

    @field_validator("private", "sandbox", mode="before")
    @classmethod
    def _yaml_bool(cls, value):
        if isinstance(value, str):
            low = value.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
        return value


def _scalar(text: str) -> str:
    """A YAML plain or quoted scalar, without a trailing comment."""
    if text[:1] in ("'", '"'):
        quote = text[0]
        end = text.find(quote, 1)
        return text[1:end] if end > 0 else text[1:]
    return text.split(" #", 1)[0].strip()


def read_project_config(folder: Path) -> ProjectConfig:
    """The top-level scalar keys of ``folder/.escouade.yml`` (a missing or unreadable
    file, or a bad value, gives the defaults). Nested blocks are skipped."""
    path = Path(folder) / CONFIG_FILENAME
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ProjectConfig()
    values: dict[str, str] = {}
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#") or raw[:1] in (" ", "\t", "-"):
            continue  # blank, comment, or inside a nested block
        m = _LINE.match(raw)
        if m and m.group(2) and not m.group(2).startswith(("|", ">", "{", "[")):
            values[m.group(1)] = _scalar(m.group(2))
    try:
        return ProjectConfig.model_validate(values)
    except ValidationError:
        return ProjectConfig(name=values.get("name"))


@dataclass(frozen=True)
class Project:
    """A project: ``id`` (stable per resolved folder), ``name``, ``folder``, ``private``."""

    id: str
    name: str
    folder: Path
    private: bool = False
    sandbox: bool = False

    @classmethod
    def for_folder(cls, folder: str | Path, *, private: bool = False, sandbox: bool = False) -> Project:
        """The project of ``folder``: private if ``private`` is given or its
        ``.escouade.yml`` says so (the flag can only add privacy, never remove it)."""
        resolved = Path(folder).expanduser().resolve()
        config = read_project_config(resolved)
        return cls(id=project_id(resolved), name=config.name or resolved.name or str(resolved),
                   folder=resolved, private=bool(private or config.private),
                   sandbox=bool(sandbox or config.sandbox))

    def wire(self) -> dict[str, object]:
        """The ``project`` object of a ``permissions/decide`` request."""
        return {"id": self.id, "name": self.name, "private": self.private}


def project_id(folder: str | Path) -> str:
    """The id of the project at ``folder`` (resolved): a UUID derived from its path."""
    return str(uuid.uuid5(_NAMESPACE, str(Path(folder).expanduser().resolve())))
