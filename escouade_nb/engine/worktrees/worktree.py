"""A git worktree per agent: its own branch and folder, merged back or discarded.

``await Worktree.create(folder, agent_name)`` runs ``git worktree add -b BRANCH PATH BASE``:
a new branch (default ``escouade/<agent>``) off the repository's ``HEAD`` (or ``base``),
checked out in ``<repo>.worktrees/<agent>`` beside the repository. Beside it, not under
the Jupyter data dir: the folder keeps the repository's name and relative neighbours
(``../other-package`` in a config still resolves), sits on the same file system (a
worktree shares the object store; nothing is copied), and is where a user looks for it;
not inside the repository, where it would show as untracked files of the main worktree.

Git itself runs as async subprocesses on the loop (:func:`~..kernel_git.git`): GitPython and
pygit2 are synchronous (GitPython forks ``git`` and waits), so either would block the kernel's
loop, and neither adds what we need (worktree add/remove, merge with its conflict list)
beyond the command line. Every method here is a coroutine; nothing blocks. Where it runs
(:mod:`..kernel_git`): in the agent's worktree (:meth:`Worktree.inside`) with ``GIT_DIR`` a
folder of the kernel's and ``GIT_WORK_TREE`` the recorded path — never the worktree's ``.git``
file or its admin folder's config, which a sandboxed agent can write —; in the user's main
worktree (:meth:`Worktree.main`) with the user's own config and hooks, ``GIT_DIR`` explicit.
The admin folder (``admin``), the main worktree's git dir and the common dir are recorded
when the worktree is made and kept in the transcript's header.

What an agent did is committed on its branch when it is merged or rebased (author: the
agent, ``<name> (escouade_nb)``); :meth:`Worktree.merge` fast-forwards the base branch in
the main worktree, or makes a merge commit; a conflict is reported with its files and the
merge is aborted — the main worktree is left as it was. Errors are :class:`WorktreeError`,
whose message is one line for the user.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..kernel_git import WorktreeError, WorktreeGit, find_repository, git, in_main

AGENT_EMAIL = "escouade_nb@localhost"
BRANCH_PREFIX = "escouade/"


def repository_of(folder: str | Path) -> Path | None:
    """The top folder of the git repository holding ``folder`` (a ``.git`` entry found by
    walking up — a few stats, fine on the loop), or None outside any repository. The
    check :meth:`Worktree.create` repeats with git itself."""
    here = Path(folder).expanduser().resolve()
    for p in (here, *here.parents):
        if (p / ".git").exists():
            return p
    return None


def default_path(repo: Path, agent_name: str) -> Path:
    """Where an agent's worktree goes: ``<repo>.worktrees/<agent>`` beside the repository."""
    return repo.parent / f"{repo.name}.worktrees" / agent_name


@dataclass
class DiffStat:
    """What a branch changed against its base, uncommitted work included: ``files``
    (count), ``insertions``, ``deletions`` (lines; binary files count as files only),
    ``paths`` (relative to the worktree)."""

    files: int = 0
    insertions: int = 0
    deletions: int = 0
    paths: list[str] = field(default_factory=list)

    @property
    def lines(self) -> int:
        """Lines changed: insertions + deletions."""
        return self.insertions + self.deletions

    def __str__(self) -> str:
        if not self.files:
            return "no changes"
        return f"{self.files} file{'s' if self.files != 1 else ''} changed, +{self.insertions} -{self.deletions}"


@dataclass
class MergeResult:
    """How a merge or rebase went: ``kind`` is ``fast-forward``, ``merge commit``,
    ``rebased``, ``up to date`` or ``conflict``; ``conflicts`` the files in conflict (then
    nothing was changed: the operation was aborted); ``commit`` the base branch's (or the
    rebased branch's) commit after it."""

    kind: str
    branch: str
    base: str
    conflicts: list[str] = field(default_factory=list)
    commit: str | None = None

    @property
    def ok(self) -> bool:
        return self.kind != "conflict"

    def __str__(self) -> str:
        if self.kind == "conflict":
            return (f"{self.branch} does not merge into {self.base}: conflict in {', '.join(self.conflicts)}; "
                    f"nothing was changed (the merge was aborted)")
        if self.kind == "rebased":
            return f"{self.branch} rebased onto {self.base} ({(self.commit or '')[:10]})"
        if self.kind == "up to date":
            return f"{self.base} already has everything of {self.branch}"
        return f"{self.branch} merged into {self.base} ({self.kind}, {(self.commit or '')[:10]})"

    def __repr__(self) -> str:
        return f"<MergeResult {self}>"


def _numstat(text: str) -> DiffStat:
    stat = DiffStat()
    for line in text.splitlines():
        parts = line.split("\t", 2)
        if len(parts) != 3:
            continue
        added, deleted, path = parts
        stat.files += 1
        stat.paths.append(path)
        stat.insertions += int(added) if added.isdigit() else 0
        stat.deletions += int(deleted) if deleted.isdigit() else 0
    return stat


class Worktree:
    """One agent's git worktree: ``repo`` (the main worktree's folder), ``path`` (this
    worktree's folder), ``branch`` (its branch), ``base`` (the branch it merges into, or
    a commit when made off a detached ``HEAD``), ``agent`` (the agent's name, the commits'
    author). Made by :meth:`create`; :meth:`record` / :meth:`from_record` carry it through
    a transcript header (a worktree outlives the kernel)."""

    def __init__(self, repo: Path, path: Path, branch: str, base: str, agent: str, *,
                 git_dir: Path | None = None, common_dir: Path | None = None, admin: Path | None = None) -> None:
        self.repo, self.path, self.branch, self.base, self.agent = Path(repo), Path(path), branch, base, agent
        # what the kernel recorded when it made the worktree (kernel_git): the main worktree's git dir, the
        # repository's common dir, this worktree's admin folder; never read again from the worktree's .git file
        self.git_dir, self.common_dir, self.admin = git_dir, common_dir, admin
        self._git: WorktreeGit | None = None
        self.last_stat: DiffStat | None = None  # the latest diffstat() (what views show without asking git)
        self.events: list[str] = []  # what was done to it, in order ("merged into main"…): a comparison says them
        self._lock = asyncio.Lock()  # one git operation on this worktree at a time (they share its index)

    # -- making one -------------------------------------------------------------------------------
    @classmethod
    async def create(cls, folder: str | Path, agent: str, *, branch: str | None = None, base: str | None = None,
                     path: str | Path | None = None) -> Worktree:
        """``git worktree add -b BRANCH PATH BASE`` for agent ``agent``: ``folder`` is any
        folder of the repository; ``branch`` defaults to ``escouade/<agent>``, ``base`` to
        the branch checked out there (its ``HEAD``), ``path`` to :func:`default_path`.
        Raises :class:`WorktreeError` (one line) outside a git repository, in a
        repository without a commit, with staged changes in its index, for a branch name
        taken or a folder that exists."""
        folder = Path(folder).expanduser().resolve()
        found = find_repository(folder)  # read as files: never git's own discovery (see kernel_git)
        if found is None:
            raise WorktreeError(f"{folder} is not inside a git repository: --worktree needs one")
        repo = found.top
        env = in_main(repo, found.git_dir)

        async def run(*args: str, check: bool = True) -> tuple[int, str, str]:
            return await git(*args, cwd=repo, check=check, env=env)
        if (await run("rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False))[0] != 0:
            raise WorktreeError(f"the repository {repo} has no commit yet: commit once, then start with --worktree")
        if (await run("diff", "--cached", "--quiet", check=False))[0] != 0:
            raise WorktreeError(f"the index of {repo} has staged changes: commit or unstage them first "
                                f"(a worktree starts from a commit; staged work would not come along)")
        branch = branch or f"{BRANCH_PREFIX}{agent}"
        if (await run("check-ref-format", "--branch", branch, check=False))[0] != 0:
            raise WorktreeError(f"{branch!r} is not a valid branch name")
        if (await run("show-ref", "--verify", "--quiet", f"refs/heads/{branch}", check=False))[0] == 0:
            raise WorktreeError(f"the branch {branch} exists already in {repo}: pick another name (--worktree NAME)")
        if base is None:
            rc, head, _ = await run("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
            base = head.strip() if rc == 0 else (await run("rev-parse", "HEAD"))[1].strip()
        elif (await run("rev-parse", "--verify", "--quiet", f"{base}^{{commit}}", check=False))[0] != 0:
            raise WorktreeError(f"no branch or commit {base!r} in {repo} to start the worktree from")
        target = Path(path).expanduser().resolve() if path is not None else default_path(repo, agent)
        if target.exists():
            raise WorktreeError(f"{target} exists already: remove it or pick another agent name")
        await run("worktree", "add", "-b", branch, str(target), base)
        admin = WorktreeGit.admin_of(found.common_dir, target)  # before the agent exists: what git wrote
        if admin is None:
            raise WorktreeError(f"git made no administration folder for the worktree {target}")
        return cls(repo, target, branch, base, agent, git_dir=found.git_dir, common_dir=found.common_dir, admin=admin)

    def record(self) -> dict[str, str]:
        """What a transcript header keeps of it (:meth:`from_record` reads it back)."""
        rec = {"repo": str(self.repo), "path": str(self.path), "branch": self.branch, "base": self.base,
               "agent": self.agent}
        for key, value in (("git_dir", self.git_dir), ("common_dir", self.common_dir), ("admin", self.admin)):
            if value is not None:
                rec[key] = str(value)
        return rec

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Worktree:
        """A worktree from :meth:`record` (``KeyError`` for a missing field)."""
        extra = {k: Path(record[k]) for k in ("git_dir", "common_dir", "admin") if isinstance(record.get(k), str)}
        return cls(Path(record["repo"]), Path(record["path"]), record["branch"], record["base"], record["agent"],
                   **extra)

    # -- the two places git runs (kernel_git) -------------------------------------------------------
    def _located(self) -> None:
        """The main worktree's git dir and the common dir, from the user's main worktree (a record
        made before they were kept); the admin folder, found by the ``gitdir`` naming this path."""
        if self.git_dir is None or self.common_dir is None:
            found = find_repository(self.repo)
            if found is None:
                raise WorktreeError(f"{self.repo} is not a git repository (any more)")
            self.git_dir, self.common_dir = found.git_dir, found.common_dir
        if self.admin is None:
            self.admin = WorktreeGit.admin_of(self.common_dir, self.path)

    async def main(self, *args: str, check: bool = True) -> tuple[int, str, str]:
        """``git ARGS`` in the user's main worktree (:func:`~..kernel_git.in_main`)."""
        self._located()
        return await git(*args, cwd=self.repo, check=check, env=in_main(self.repo, self.git_dir))

    async def inside(self, *args: str, check: bool = True) -> tuple[int, str, str]:
        """``git ARGS`` in the agent's worktree (:class:`~..kernel_git.WorktreeGit`: never the
        worktree's ``.git`` file nor its admin folder's config); :class:`WorktreeError` when
        its admin folder is gone or was changed."""
        self._located()
        if self.admin is None:
            raise WorktreeError(f"git has no administration folder for the worktree {self.path} (any more)")
        if self._git is None:
            assert self.common_dir is not None
            self._git = WorktreeGit(self.path, self.branch, self.common_dir, self.admin)
        return await self._git.run(*args, check=check)

    async def exists(self) -> bool:
        """Whether git still knows this worktree (after a kernel restart, say)."""
        rc, out, _ = await self.main("worktree", "list", "--porcelain", check=False)
        return rc == 0 and f"worktree {self.path}" in out.splitlines()

    # -- what it changed --------------------------------------------------------------------------
    async def _fork_point(self) -> str:
        return (await self.inside("merge-base", self.base, "HEAD"))[1].strip()

    async def diffstat(self) -> DiffStat:
        """What the branch changed since it left its base, uncommitted and new files
        included (new files are marked intent-to-add, ``git add -N``, to be counted)."""
        async with self._lock:
            await self.inside("add", "--all", "--intent-to-add")
            _, out, _ = await self.inside("diff", "--numstat", await self._fork_point())
            self.last_stat = _numstat(out)
            return self.last_stat

    async def dirty(self) -> list[str]:
        """The files with uncommitted changes in the worktree (``git status --porcelain``)."""
        _, out, _ = await self.inside("status", "--porcelain")
        return [line[3:] for line in out.splitlines() if line.strip()]

    async def commit(self, message: str | None = None) -> str | None:
        """Commit everything uncommitted in the worktree on its branch (author: the
        agent); the new commit's id, or None when there was nothing to commit."""
        async with self._lock:
            return await self._commit(message)

    async def _commit(self, message: str | None = None) -> str | None:
        if not await self.dirty():
            return None
        await self.inside("add", "--all")
        ident = [] if (await self.inside("var", "GIT_COMMITTER_IDENT", check=False))[0] == 0 else [
            "-c", "user.name=escouade_nb", "-c", f"user.email={AGENT_EMAIL}"]
        await self.inside(*ident, "commit", "--quiet", "--no-verify",
                          f"--author={self.agent} (escouade_nb) <{AGENT_EMAIL}>",
                          "-m", message or f"{self.agent}'s work (escouade_nb)")
        return (await self.inside("rev-parse", "HEAD"))[1].strip()

    # -- merge, rebase, discard -------------------------------------------------------------------
    async def _identity(self) -> list[str]:
        ok = (await self.main("var", "GIT_COMMITTER_IDENT", check=False))[0] == 0
        return [] if ok else ["-c", "user.name=escouade_nb", "-c", f"user.email={AGENT_EMAIL}"]

    async def merge(self) -> MergeResult:
        """Commit the agent's uncommitted work on its branch, then merge the branch into
        the base branch in the main worktree: a fast-forward when the base has not moved,
        else a merge commit. A conflict is reported (``kind == "conflict"``, the files in
        ``conflicts``) and the merge aborted: the main worktree is as it was. Raises
        :class:`WorktreeError` when the main worktree is not on the base branch or has
        uncommitted changes to tracked files (a merge would mix them in)."""
        async with self._lock:
            result = await self._merge()
        if result.ok and result.kind != "up to date":
            self.events.append(f"merged into {self.base}")
        return result

    async def _merge(self) -> MergeResult:
        await self._commit()
        rc, head, _ = await self.main("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        if rc != 0 or head.strip() != self.base:
            on = head.strip() if rc == 0 else "a detached HEAD"
            raise WorktreeError(f"the main worktree {self.repo} is on {on}, not {self.base}: check out {self.base} "
                                f"to merge {self.branch} into it")
        _, changed, _ = await self.main("status", "--porcelain", "--untracked-files=no")
        if changed.strip():
            raise WorktreeError(f"the main worktree {self.repo} has uncommitted changes "
                                f"({len(changed.splitlines())} files): commit or stash them before merging")
        if (await self.main("merge-base", "--is-ancestor", self.branch, "HEAD", check=False))[0] == 0:
            return MergeResult("up to date", self.branch, self.base, commit=await self._head(self.main))
        if (await self.main("merge-base", "--is-ancestor", "HEAD", self.branch, check=False))[0] == 0:
            await self.main("merge", "--ff-only", "--quiet", self.branch)
            return MergeResult("fast-forward", self.branch, self.base, commit=await self._head(self.main))
        rc, _, err = await self.main(*await self._identity(), "merge", "--no-ff", "--no-edit", "--quiet", "-m",
                                     f"Merge {self.branch} ({self.agent}'s work, escouade_nb)", self.branch,
                                     check=False)
        if rc == 0:
            return MergeResult("merge commit", self.branch, self.base, commit=await self._head(self.main))
        conflicts = await self._conflicts(self.main)
        await self.main("merge", "--abort", check=False)
        if not conflicts:  # git refused before merging (an untracked file in the way…): its own words
            line = next((ln for ln in err.splitlines() if ln.strip()), "merge failed")
            raise WorktreeError(f"git merge of {self.branch} into {self.base} failed: {line.strip()}")
        return MergeResult("conflict", self.branch, self.base, conflicts=conflicts)

    async def rebase(self) -> MergeResult:
        """Commit the agent's uncommitted work, then rebase its branch onto the base's
        current commit. A conflict is reported with its files and the rebase aborted (the
        branch is as it was)."""
        async with self._lock:
            result = await self._rebase()
        if result.ok:
            self.events.append(f"rebased onto {self.base}")
        return result

    async def _rebase(self) -> MergeResult:
        await self._commit()
        rc, _, err = await self.inside(*await self._identity(), "rebase", "--quiet", self.base, check=False)
        if rc == 0:
            return MergeResult("rebased", self.branch, self.base, commit=await self._head(self.inside))
        conflicts = await self._conflicts(self.inside)
        await self.inside("rebase", "--abort", check=False)
        if not conflicts:
            line = next((ln for ln in err.splitlines() if ln.strip()), "rebase failed")
            raise WorktreeError(f"git rebase of {self.branch} onto {self.base} failed: {line.strip()}")
        return MergeResult("conflict", self.branch, self.base, conflicts=conflicts)

    async def discard(self, force: bool = False) -> None:
        """Remove the worktree's folder and delete its branch (what it committed and did
        not merge is gone). Refuses (:class:`WorktreeError`) while the worktree has
        uncommitted changes, unless ``force``."""
        async with self._lock:
            await self._discard(force)
        self.events.append("worktree discarded")

    async def _discard(self, force: bool) -> None:
        if await self.exists():
            if not force:
                changed = await self.dirty()
                if changed:
                    raise WorktreeError(f"{self.path} has uncommitted changes ({len(changed)} file"
                                        f"{'s' if len(changed) != 1 else ''}: {', '.join(changed[:5])}): "
                                        f"discard(force=True) to throw them away")
            # --force always: without it git would run `git status` inside the worktree itself, reading its
            # admin folder's config.worktree (the agent's); what is uncommitted was checked just above
            await asyncio.to_thread(self._relink)
            await self.main("worktree", "remove", "--force", str(self.path))
        else:
            await self.main("worktree", "prune", check=False)
        if (await self.main("show-ref", "--verify", "--quiet", f"refs/heads/{self.branch}", check=False))[0] == 0:
            await self.main("branch", "-D", "--quiet", self.branch)
        if self._git is not None:
            await self._git.aclose()
        self.last_stat = None

    def _relink(self) -> None:
        """The worktree's ``.git`` file as git wrote it (``gitdir: <admin>``), which ``worktree remove``
        checks: an agent may have pointed it elsewhere; the folder is removed right after."""
        self._located()
        if self.admin is None:
            return
        dot = self.path / ".git"
        want = f"gitdir: {self.admin}\n"
        try:
            if dot.is_file() and not dot.is_symlink() and dot.read_text(encoding="utf-8") == want:
                return
        except (OSError, UnicodeDecodeError):
            pass
        if dot.is_dir() and not dot.is_symlink():
            shutil.rmtree(dot)
        else:
            dot.unlink(missing_ok=True)
        dot.write_text(want, encoding="utf-8")

    @staticmethod
    async def _head(run: Any) -> str:
        return (await run("rev-parse", "HEAD"))[1].strip()

    @staticmethod
    async def _conflicts(run: Any) -> list[str]:
        _, out, _ = await run("diff", "--name-only", "--diff-filter=U", check=False)
        return [p for p in out.splitlines() if p.strip()]

    def header_text(self) -> str:
        """One line for a view's header: the branch and the latest diff stat."""
        stat = f" · {self.last_stat}" if self.last_stat is not None else ""
        return f"worktree {self.branch} (off {self.base}){stat}"

    def __repr__(self) -> str:
        return f"<Worktree {self.branch} at {self.path}>"


_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str) -> str:
    """An agent name as a folder and branch component (``codex 2`` -> ``codex-2``)."""
    return _SAFE.sub("-", name).strip(".-") or "agent"
