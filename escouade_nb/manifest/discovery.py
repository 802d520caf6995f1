"""Where manifests are found: shipped plugins, the user's folder, entry points, extra dirs.

:func:`discover` gathers them into a :class:`Discovery`, whose :meth:`Discovery.find`
resolves a harness by ``plugin:<plugin>:<harness>`` or by its short id.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from .._resources import shipped_dir
from .models import MANIFEST_FILENAME, AcpConfig, Harness, Manifest, ManifestError, Source, load_manifest

ENTRY_POINT_GROUP = "escouade_nb.plugins"
"""Entry-point group through which installed packages contribute plugins."""

USER_PLUGINS_ENV = "ESCOUADE_NB_PLUGINS_DIR"
"""Environment variable overriding the user plugins folder."""

SHIPPED_PLUGINS_DIR = shipped_dir("plugins")
"""Folder of the plugins shipped with escouade_nb: ``escouade_nb/plugins`` in an
installed wheel, the repository's top-level ``plugins/`` in a checkout (editable)."""

@dataclass
class HarnessRef:
    """A described harness found by :func:`discover`.

    ``manifest`` and ``harness`` are the parsed models, ``path`` the manifest
    file, ``source`` where it came from (``"shipped"``, ``"user"``,
    ``"entry-point"`` or ``"extra"``).
    """

    manifest: Manifest
    harness: Harness
    path: Path
    source: Source

    @property
    def id(self) -> str:
        """Full id: ``plugin:<manifest id>:<harness id>``."""
        return f"plugin:{self.manifest.id}:{self.harness.id}"

    @property
    def short_id(self) -> str:
        """The harness id alone."""
        return self.harness.id

    @property
    def folder(self) -> Path:
        """The plugin folder (the one holding the manifest)."""
        return self.path.parent

    @property
    def display_name(self) -> str:
        """The harness's name as people read it (the manifest's ``displayName``)."""
        return self.harness.display_name

    @property
    def speaker(self) -> str:
        """Who speaks in a conversation: the manifest's ``speaker``, else its display name."""
        return self.harness.speaker or self.harness.display_name

    @property
    def acp(self) -> AcpConfig:
        """The harness's ``acp`` object: every harness :func:`discover` finds has one (it
        lists described harnesses only). ``ValueError`` for a reference made by hand without."""
        if self.harness.acp is None:
            raise ValueError(f"harness {self.id} has no acp object: it is not described")
        return self.harness.acp


@dataclass
class Discovery:
    """Result of :func:`discover`.

    * ``harnesses``: described harnesses (those with an ``acp`` object);
    * ``errors``: one :class:`ManifestError` per manifest or source that
      failed to load;
    * ``plugins``: every manifest loaded, with its file, in load order,
      including those without harnesses (rule plugins) and ones whose
      harnesses were overridden by a later source.
    """

    harnesses: list[HarnessRef] = field(default_factory=list)
    errors: list[ManifestError] = field(default_factory=list)
    plugins: list[tuple[Manifest, Path]] = field(default_factory=list)

    def find(self, name: str) -> HarnessRef:
        """The harness named *name*: a full id ``plugin:<plugin>:<harness>``
        or a short id (the harness id), case-sensitive.

        Raises ``LookupError`` (one-line message) when no harness matches,
        listing the known short ids, or when a short id is defined by several
        plugins, listing their full ids.
        """
        if name.startswith("plugin:"):
            matches = [r for r in self.harnesses if r.id == name]
        else:
            matches = [r for r in self.harnesses if r.short_id == name]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            full = ", ".join(r.id for r in matches)
            raise LookupError(f"harness {name!r} is ambiguous: {full}; use a full id")
        known = sorted({r.short_id for r in self.harnesses})
        listing = ", ".join(known) if known else "(none)"
        broken = self.broken_for(name)
        why = ""
        if broken:
            why = (f": its manifest is broken — {broken[0]}" if broken[0].harness_ids
                   else f": a broken manifest in a folder of that name may define it — {broken[0]}")
        raise LookupError(f"unknown harness {name!r}{why}; known harnesses: {listing}")

    def broken_for(self, name: str) -> list[ManifestError]:
        """The manifests that failed to load and name harness ``name`` (a short id, or
        the last part of a full id) — or, not JSON enough to tell, sit in a folder of
        that name."""
        short = name.rsplit(":", 1)[-1]
        out = []
        for err in self.errors:
            folder = Path(err.path).parent.name if isinstance(err.path, Path) else None
            if short in err.harness_ids or (not err.harness_ids and folder == short):
                out.append(err)
        return out


def user_plugins_dir() -> Path:
    """The user plugins folder: ``$ESCOUADE_NB_PLUGINS_DIR`` if set, else
    ``<jupyter data dir>/escouade_nb/plugins``.  It may not exist."""
    env = os.environ.get(USER_PLUGINS_ENV)
    if env:
        return Path(env).expanduser()
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "escouade_nb" / "plugins"


def _manifest_files(folder: Path, *, allow_self: bool) -> list[Path]:
    """Manifests of *folder*: itself when it is a plugin folder (if
    *allow_self*), else those of its subfolders, sorted by name."""
    if folder.is_file():
        return [folder] if allow_self else []
    own = folder / MANIFEST_FILENAME
    if allow_self and own.is_file():
        return [own]
    try:
        children = sorted(folder.iterdir(), key=lambda p: p.name)
    except OSError:
        return []
    return [c / MANIFEST_FILENAME for c in children if (c / MANIFEST_FILENAME).is_file()]


_read_entry_points: tuple[tuple[Any, ...], list[Any]] | None = None


def _plugin_entry_points() -> list[Any]:
    """The entry points of :data:`ENTRY_POINT_GROUP`, read again only when a folder of ``sys.path`` changed
    (its modification time: installing or removing a distribution adds or removes its folder there). Each
    read parses every installed distribution's ``entry_points.txt`` (~25 ms for 300 of them, on the kernel's
    loop: the first ``%escouade NAME`` read them twice, its squad's discovery then its rule plugins')."""
    global _read_entry_points
    key = (entry_points, tuple(sys.path), tuple(_mtime(p) for p in sys.path))
    read = _read_entry_points
    if read is None or read[0] != key:
        read = _read_entry_points = (key, list(entry_points(group=ENTRY_POINT_GROUP)))
    return read[1]


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path or ".").st_mtime_ns
    except OSError:
        return None


def _entry_point_folders(errors: list[ManifestError]) -> list[Path]:
    folders: list[Path] = []
    for ep in _plugin_entry_points():
        where = f"<entry point {ep.name} = {ep.value}>"
        try:
            value: Any = ep.load()
            if callable(value) and not isinstance(value, (str, os.PathLike)):
                value = value()
            folders.append(Path(value))
        except Exception as exc:  # a broken third-party package must not break discovery
            errors.append(ManifestError(where, None, f"cannot load: {type(exc).__name__}: {exc}"))
    return folders


def discover(extra_dirs: list[Path] | None = None) -> Discovery:
    """Find the plugins and their described harnesses.

    Sources, in this order:

    1. ``shipped``: :data:`SHIPPED_PLUGINS_DIR` ``*/escouade-plugin.json``;
    2. ``user``: each subfolder of :func:`user_plugins_dir` holding an
       ``escouade-plugin.json``;
    3. ``entry-point``: entry points of group ``escouade_nb.plugins``, each
       loading to a ``str``/``Path`` (or a zero-argument callable returning
       one) naming a plugin folder or a folder of plugin folders;
    4. ``extra``: *extra_dirs*, each a plugin folder, a folder of plugin
       folders or a manifest file.

    Override rule: a later source defining a harness with the same full id
    (``plugin:<plugin>:<harness>``) replaces the earlier one, keeping its
    place in the list; so a user plugin overrides a shipped one, and an
    extra dir overrides everything.

    A broken manifest adds one :class:`ManifestError` to ``errors`` and the
    others still load; a missing extra dir or entry-point folder, or an
    entry point that fails to load, is reported the same way.  Never raises
    :class:`ManifestError`.
    """
    result = Discovery()
    by_id: dict[str, HarnessRef] = {}

    def scan(folder: Path, source: Source, *, allow_self: bool, must_exist: bool) -> None:
        if not folder.exists():
            if must_exist:
                result.errors.append(ManifestError(folder, None, "plugin folder not found"))
            return
        for file in _manifest_files(folder, allow_self=allow_self):
            try:
                manifest = load_manifest(file)
            except ManifestError as err:
                result.errors.append(err)
                continue
            result.plugins.append((manifest, file))
            for harness in manifest.described_harnesses():
                ref = HarnessRef(manifest=manifest, harness=harness, path=file, source=source)
                by_id[ref.id] = ref  # later source wins, position kept

    scan(SHIPPED_PLUGINS_DIR, "shipped", allow_self=False, must_exist=False)
    scan(user_plugins_dir(), "user", allow_self=False, must_exist=False)
    for folder in _entry_point_folders(result.errors):
        scan(folder, "entry-point", allow_self=True, must_exist=True)
    for folder in extra_dirs or []:
        scan(Path(folder), "extra", allow_self=True, must_exist=True)

    result.harnesses = list(by_id.values())
    return result


