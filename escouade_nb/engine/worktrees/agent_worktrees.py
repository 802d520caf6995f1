"""An agent's own git worktree, as the squad works on it: planned before the agent
exists, made before it starts, re-counted after its turns, merged, rebased, discarded.

The git work itself is :class:`~.worktree.Worktree`'s; this module ties it to an agent
(its state: :class:`~..interfaces.WorktreeAgent`): the notices in its conversation, the
journal's lines, the status observers told (views redraw their header). Git's refusals
come out as :class:`~.worktree.WorktreeError` (the squad says them as ``SquadError``).
"""

from __future__ import annotations

import dataclasses

from collections.abc import Awaitable, Callable
from pathlib import Path

from ...manifest.project import Project
from ...permissions.journal import Journal
from ..interfaces import WorktreeAgent
from .worktree import MergeResult, Worktree, WorktreeError, safe_name

__all__ = ["discard", "make", "merge", "moved_into", "plan", "rebase", "restat", "worktree_of"]


def plan(repo: Path, name: str, branch: str | None = None, base: str = "") -> Worktree:
    """The worktree agent ``name`` will get (not made yet): ``<repo>.worktrees/<name>``
    next to the repository, on ``branch`` (default ``escouade/<name>``) off ``base``
    (``""``: the repository's ``HEAD``)."""
    return Worktree(repo, repo.parent / f"{repo.name}.worktrees" / safe_name(name),
                    branch or f"escouade/{safe_name(name)}", base, name)


def moved_into(planned: Worktree, folder: Path, within: Path,
               project: Project | None) -> tuple[Path, Project | None]:
    """``folder`` (inside ``within``: the repository, or a fork's parent's worktree) as the
    same subfolder of ``planned``; ``project`` (its id, its privacy) fenced to ``planned``."""
    if project is not None:
        project = dataclasses.replace(project, folder=planned.path)  # every flag kept (private, review, sandbox)
    return planned.path / folder.relative_to(within), project


async def make(agent: WorktreeAgent, planned: Worktree, base: str | None, parent: Worktree | None = None) -> None:
    """``git worktree add`` for ``agent`` (off ``parent``'s branch for a fork), then
    its first diff stat (what views show). :class:`WorktreeError` for git's refusals."""
    # a fork's worktree is made from the repository (never through its parent's worktree: an agent's .git file)
    made = await Worktree.create(planned.repo, planned.agent, branch=planned.branch,
                                 base=parent.branch if parent else base, path=planned.path)
    if parent is not None:
        made.base = parent.base  # a fork merges where its parent merges
    agent.in_worktree(made)
    await made.diffstat()
    agent.conversation.add_notice(f"Working in its own git worktree: {made.path}, branch {made.branch} "
                                  f"(off {parent.branch if parent else made.base}).")


async def restat(agent: WorktreeAgent) -> None:
    """Re-count the diff stat of ``agent``'s worktree (if it still exists); the status
    observers are told."""
    if agent.worktree is not None and await agent.worktree.exists():
        await agent.worktree.diffstat()
    agent.notify_status()


def worktree_of(agent: WorktreeAgent) -> Worktree:
    """``agent``'s worktree; :class:`WorktreeError` when it has none."""
    if agent.worktree is None:
        raise WorktreeError(f"agent {agent.name!r} has no worktree (start it with --worktree)")
    return agent.worktree


async def merge(agent: WorktreeAgent, journal: Journal) -> MergeResult:
    """Merge ``agent``'s worktree branch into its base (:meth:`Worktree.merge`), journal
    it, say it in its conversation, re-count."""
    result = await worktree_of(agent).merge()
    journal.add("worktrees", "Output", text=f"merge: {result}", agent=agent.name)
    agent.conversation.add_notice(str(result), level="info" if result.ok else "warning")
    await restat(agent)
    return result


async def rebase(agent: WorktreeAgent) -> MergeResult:
    """Rebase ``agent``'s worktree branch onto its base (:meth:`Worktree.rebase`)."""
    result = await worktree_of(agent).rebase()
    agent.conversation.add_notice(str(result), level="info" if result.ok else "warning")
    await restat(agent)
    return result


async def discard(agent: WorktreeAgent, journal: Journal, force: bool = False,
                  cleanup: Callable[[WorktreeAgent], Awaitable[object]] | None = None) -> None:
    """Stop ``agent`` and remove its worktree and branch (:meth:`Worktree.discard`;
    refused with uncommitted changes unless ``force``, saying which files), and journal it.
    ``cleanup(agent)`` runs once the agent is stopped, before the removal
    (:func:`.worktree_setup.cleanup`: ``.escouade.yml``'s command); what it leaves behind
    is removed with the worktree."""
    wt = worktree_of(agent)
    if not force and await wt.dirty():
        await wt.discard()  # raises, saying which files
    await agent.close()
    ran = await cleanup(agent) if cleanup is not None else None
    await wt.discard(force=force or ran is not None)
    journal.add("worktrees", "Output", text=f"discard: {wt.branch} and {wt.path} removed", agent=agent.name)
    agent.conversation.add_notice(f"Worktree {wt.path} and branch {wt.branch} removed.")
    agent.in_worktree(None)
    agent.notify_status()
