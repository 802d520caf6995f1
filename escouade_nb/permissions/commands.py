"""``%escouade plugins …`` and ``%escouade journal …``: parse the words, act, return data
(:class:`~.broker.PluginsListing`, :class:`JournalQuery`); the magics choose the view.
A :class:`CommandError` is a usage error (one line)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import EscouadeError

if TYPE_CHECKING:  # pragma: no cover  (loaded where used: %load_ext imports this module on the kernel's loop)
    from ..manifest.project import Project
    from .broker import PluginsListing, RulePlugins
    from .journal import Entry, Journal

PLUGINS_USAGE = (
    "  %escouade plugins                         rule plugins: on/off for this project, permission, process\n"
    "  %escouade plugins on|off PLUGIN [--project DIR]   turn a plugin on/off for a project, a folder (default: here)\n"
    "  %escouade plugins revoke|grant PLUGIN     take back (or give again) its permission to decide\n"
    "  %escouade journal [PLUGIN]                the rule plugins' journal (decisions), with a filter"
)


class CommandError(EscouadeError):
    """A usage error of ``%escouade plugins``/``journal``: one line."""


def _project(words: list[str]) -> tuple[list[str], Project]:
    if "--project" in words:
        i = words.index("--project")
        if i + 1 >= len(words):
            raise CommandError("--project takes a folder")
        folder = Path(words[i + 1]).expanduser()
        if not folder.is_dir():
            raise CommandError(f"folder {folder} does not exist")
        return words[:i] + words[i + 2:], _for_folder(folder)
    return words, _for_folder(Path.cwd())


def _for_folder(folder: Path) -> Project:
    from ..manifest.project import Project

    return Project.for_folder(folder)


def plugins_command(rules: RulePlugins, words: list[str], agents: Iterable[Any] = ()) -> PluginsListing:
    """``[]`` lists; ``on|off PLUGIN [--project DIR]``; ``revoke|grant PLUGIN``.
    Returns the listing to display; after ``on|off`` it first says which project (folder)
    that was for, and, of ``agents`` (the running ones: ``name``, ``cwd``, ``project``,
    ``project_folder``), those the plugin turned on does not guard, with the command that
    would."""
    words, project = _project(list(words))
    if not words:
        return _listing(rules, project)
    action, rest = words[0], words[1:]
    if action not in ("on", "off", "revoke", "grant"):
        raise CommandError(f"unknown plugins action {action!r}: on, off, revoke or grant")
    if len(rest) != 1:
        raise CommandError(f"plugins {action} takes one plugin name")
    note = None
    try:
        if action in ("on", "off"):
            pid = rules.turn(rest[0], action == "on", project)
            note = _turned(rules, pid, action == "on", project, agents)
        else:
            rules.grant(rest[0], action == "grant")
    except LookupError as exc:
        raise CommandError(str(exc).strip("'\"")) from None
    return _listing(rules, project, note)


def _listing(rules: RulePlugins, project: Project, note: str | None = None) -> PluginsListing:
    from .broker import listing

    return listing(rules, project, note)


def _turned(rules: RulePlugins, pid: str, on: bool, project: Project, agents: Iterable[Any]) -> str:
    """What ``plugins on|off`` says first: the project (folder) it applied to, and the
    running agents elsewhere that the plugin does not guard (a project is a folder: an
    agent started with ``--cwd`` elsewhere is another project)."""
    spec = rules.host.specs.get(pid)
    short = spec.folder.name if spec is not None else pid
    head = f"{short} turned {'on' if on else 'off'} for project {project.name} ({project.folder}) only"
    if not on:
        return head
    lines = [f"{head}: it guards the agents working there; for another folder: "
             f"`%escouade plugins on {short} --project DIR`"]
    for agent in agents:
        theirs = getattr(agent, "project", None) or _for_folder(agent.cwd)
        if any(g.id == pid for g in rules.broker.guarding(theirs)):
            continue
        folder = getattr(agent, "project_folder", None) or theirs.folder
        lines.append(f"  not guarded by it: agent {agent.name} in {folder} — "
                     f"`%escouade plugins on {short} --project {shlex.quote(str(folder))}`")
    return "\n".join(lines)


@dataclass
class JournalQuery:
    """What ``%escouade journal [PLUGIN]`` shows: the ``journal``'s entries of ``plugin``
    (None: all plugins) of ``kind`` (None: every kind); ``names`` maps plugin ids to
    their names. Its ``repr`` is the plain text (a header line, then one line an entry);
    the magics show it as a :class:`~escouade_nb.widgets.journal_view.JournalView`."""

    journal: Journal
    plugin: str | None = None
    kind: str | None = "Decision"
    names: dict[str, str] = field(default_factory=dict)

    def entries(self) -> list[Entry]:
        return self.journal.entries(self.plugin, self.kind)

    def text(self) -> str:
        return journal_text(self.entries(), self.plugin, self.names)

    def __repr__(self) -> str:
        return journal_repr(self.entries(), self.plugin, self.kind, self.names)


def journal_text(entries: list[Entry], plugin: str | None, names: dict[str, str]) -> str:
    """The journal's plain text: one line an entry, the plugin's name after it when the
    lines are of all plugins (``plugin`` None)."""
    return "\n".join(e.text() if plugin else f"{e.text()}  [{names.get(e.plugin, e.plugin)}]" for e in entries)


def journal_repr(entries: list[Entry], plugin: str | None, kind: str | None, names: dict[str, str],
                 matching: str = "") -> str:
    """A header line (whose journal, which kind, the filter), then :func:`journal_text`."""
    who = names.get(plugin, plugin) if plugin else "all plugins"
    head = f"Journal of {who}" + (f", {kind} entries" if kind else "") + (f" matching {matching!r}" if matching else "")
    return head + ":\n" + (journal_text(entries, plugin, names) or "(no entries)")


def journal_command(rules: RulePlugins, words: list[str]) -> JournalQuery:
    """``[PLUGIN]``: the journal to show (all plugins when no name is given)."""
    if len(words) > 1:
        raise CommandError("journal takes at most one plugin name")
    plugin = None
    if words:
        try:
            plugin = rules.find(words[0])
        except LookupError as exc:
            if words[0] not in rules.journal.plugins():
                raise CommandError(str(exc).strip("'\"")) from None
            plugin = words[0]
    names = {pid: spec.name for pid, spec in rules.host.specs.items()}
    return JournalQuery(rules.journal, plugin=plugin, names=names)
