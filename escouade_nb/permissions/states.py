"""Which rule plugin decides for which project: the user's choice, in the user's config.

The file is ``<config dir>/plugins.json``, the config dir being ``$ESCOUADE_NB_CONFIG_DIR``
if set, else ``<jupyter config dir>/escouade_nb`` (``jupyter --config-dir``; usually
``~/.jupyter``). Never in a project folder: a project's ``.escouade.yml`` can never turn
a plugin on.

For each plugin (by manifest id):

* ``decide``: its permission "Decides your agents' permissions". ``false`` once taken
  back (``%escouade plugins revoke``): it is no longer asked, and not started for it;
* ``default``: on or off for the projects without a setting of their own (unset: on
  for an installed plugin, off for one shipped with escouade_nb as an example);
* ``projects``: per project id, ``{"on": bool, "folder": ..., "name": ...}``.

A private project is submitted only to a plugin turned on for it by name: the default
never applies to it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..manifest.project import Project

__all__ = ["CONFIG_ENV", "config_dir", "ProjectSetting", "PluginState", "StateFile", "PluginStates"]

CONFIG_ENV = "ESCOUADE_NB_CONFIG_DIR"


def config_dir() -> Path:
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env).expanduser()
    from jupyter_core.paths import jupyter_config_dir

    return Path(jupyter_config_dir()) / "escouade_nb"


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class ProjectSetting(_Model):
    on: bool
    folder: str | None = None
    name: str | None = None


class PluginState(_Model):
    decide: bool = True
    default: bool | None = None
    projects: dict[str, ProjectSetting] = Field(default_factory=dict)


class StateFile(_Model):
    version: int = 1
    plugins: dict[str, PluginState] = Field(default_factory=dict)


class PluginStates:
    """The state file, read again when it changed on disk (another kernel may write it)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else config_dir() / "plugins.json"
        self._data = StateFile()
        self._stamp: tuple[int, int] | None = None
        self.error: str | None = None

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    @property
    def data(self) -> StateFile:
        stamp = self._stat()
        if stamp != self._stamp:
            self._stamp = stamp
            self.error = None
            if stamp is None:
                self._data = StateFile()
            else:
                try:
                    self._data = StateFile.model_validate_json(self.path.read_bytes())
                except (OSError, ValidationError) as exc:
                    # a broken file turns nothing on: every plugin is off until it is fixed
                    self.error = f"{self.path}: {str(exc).splitlines()[0]}"
                    self._data = StateFile(plugins={})
        return self._data

    def _save(self, data: StateFile) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".plugins-", suffix=".json", dir=self.path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(data.model_dump_json(indent=2, exclude_none=True) + "\n")
        os.replace(tmp, self.path)
        self._data = data
        self._stamp = self._stat()

    def state(self, plugin: str) -> PluginState:
        return self.data.plugins.get(plugin) or PluginState()

    def granted(self, plugin: str) -> bool:
        return self.state(plugin).decide

    def is_on(self, plugin: str, project: Project, *, default: bool) -> bool:
        """Whether ``plugin`` decides for ``project`` (``default``: its source's default)."""
        st = self.state(plugin)
        if self.error or not st.decide:
            return False
        own = st.projects.get(project.id)
        if own is not None:
            return own.on
        if project.private:
            return False
        return st.default if st.default is not None else default

    def wanted(self, plugin: str, *, default: bool) -> bool:
        """Whether ``plugin`` should run: it may decide, and is on for some project."""
        st = self.state(plugin)
        if self.error or not st.decide:
            return False
        if (st.default if st.default is not None else default):
            return True
        return any(s.on for s in st.projects.values())

    def set_project(self, plugin: str, project: Project, on: bool) -> None:
        data = self.data.model_copy(deep=True)
        st = data.plugins.setdefault(plugin, PluginState())
        st.projects[project.id] = ProjectSetting(on=on, folder=str(project.folder), name=project.name)
        self._save(data)

    def set_default(self, plugin: str, on: bool | None) -> None:
        data = self.data.model_copy(deep=True)
        data.plugins.setdefault(plugin, PluginState()).default = on
        self._save(data)

    def set_decide(self, plugin: str, granted: bool) -> None:
        data = self.data.model_copy(deep=True)
        data.plugins.setdefault(plugin, PluginState()).decide = granted
        self._save(data)
