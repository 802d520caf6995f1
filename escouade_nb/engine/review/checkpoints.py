"""Checkpoints of an agent's folder before each turn, and the rewind to one of them.

Before each prompt is sent, :class:`Checkpoints` takes a :class:`Checkpoint` of the agent's
folder (``agent.checkpoints``: one per turn, ``.turn``, ``.prompt``, ``.at``); ``await
agent.rewind(cp)`` puts the folder back as it was then and continues the conversation from
before that turn.

How a folder is kept (:class:`FolderSnapshots`; git through :mod:`..kernel_git`, async
subprocesses, never on the loop's thread): in the kernel's **private repository** over the
folder's work tree (:class:`~..kernel_git.PrivateRepo`: a ``GIT_DIR`` of ours under the state
folder, :func:`state_dir`, with ``GIT_WORK_TREE`` = the repository's top, or the folder itself
outside git). Its git reads only the configuration the kernel wrote — no config, hook,
filter, fsmonitor or attribute driver of the folder's repository, which the agent may have
written, runs. The files are written as a tree with a private index (``GIT_INDEX_FILE``, a copy
of the user's index bytes: ``git add -A`` into it, ``write-tree``, ``commit-tree``), and the
commit is kept under a ref of the private repository,
``refs/escouade/checkpoints/<agent>/<run>-<turn>``. The user's repository is only read (its
object store, through ``objects/info/alternates``; its index's bytes): no branch, not the index
(``.git/index``), not ``HEAD``, not the stash, no new object or ref. Only the agent's folder is
taken and restored (the part of the repository under it); the folder gets no ``.git``.

Untracked files are kept; git-ignored ones (``.gitignore``, ``.git/info/exclude``, the
user's global excludes) are not, and a rewind leaves them as they are. File contents are
stored raw and written back byte for byte (the private ``info/attributes`` unsets ``text``,
``filter``, ``ident``, ``working-tree-encoding`` over any ``.gitattributes``; no
``core.autocrlf``), with their executable bit and symlinks; empty folders are not kept (git
keeps files). What a rewind removes is unlinked, and what it writes back (checked out by git into a
folder of the kernel's, then copied), through a walk of folder fds from the agent's folder that follows
no symlink (:mod:`...wire.folder_fds`): a process of the agent's swapping one of its folders for a
symlink during the rewind gets that file left alone, named in the rewind's warning (``FolderSnapshots.refused``),
and nothing outside the folder is removed or written.

The conversation after a rewind: where the agent offers ``session/fork``
(``sessionCapabilities.fork``), a fork of the session is taken with each checkpoint (ACP forks
a session as it is *now*, so only a fork taken then is the conversation of then); a rewind
forks that fork again (the checkpoint's stays as it was, for a later rewind) and the agent
goes on in it, on the same process. Else — or when the process changed since (a restart, a
resume) — a new process and session carry the conversation up to that turn as context of the
next prompt (:func:`~...core.prompt.carried_conversation`, as a fork does). The turns from the
one rewound to on stay in the view, marked rewound (:meth:`~...core.conversation.Conversation.mark_rewound`,
``(rewound)`` in the text); each checkpoint and each rewind is on record in the transcript
(``checkpoint`` and ``rewind`` events), so a resume shows and keeps them.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import stat
import tempfile
import uuid
import weakref
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..._errors import EscouadeError
from ...core.conversation import Message
from ...wire.errors import AgentError
from ...wire.folder_fds import Changed, entry, open_below, open_folder, replace_at, symlink_at
from ...wire.transcript import CHECKPOINT_EVENT, REWIND_EVENT
from ..kernel_git import GitRepo, PrivateRepo, WorktreeError, git, state_dir

log = logging.getLogger(__name__)

__all__ = ["Checkpoint", "CheckpointError", "Checkpoints", "FolderSnapshots", "TooBig", "limits", "state_dir",
           "CHECKPOINT_EVENT", "REWIND_EVENT", "REF_PREFIX"]

REF_PREFIX = "refs/escouade/checkpoints/"
CHUNK = 200  # paths per checkout-index
PROMPT_SHOWN = 80
FORK_TIMEOUT = 10.0
"""Seconds a checkpoint's ``session/fork`` may take before the prompt goes without it."""


class CheckpointError(EscouadeError):
    """A checkpoint could not be taken or restored; the message is one line."""


class TooBig(CheckpointError):
    """The files a checkpoint would add to git are more than it takes (:func:`limits`)."""


def limits() -> tuple[int, int]:
    """``(files, bytes)`` a checkpoint adds at most (files git does not have yet):
    ``$ESCOUADE_NB_CHECKPOINT_MAX_FILES`` (default 20,000) and ``$ESCOUADE_NB_CHECKPOINT_MAX_MB``
    (default 256 MB). A folder over them — a home folder, a data folder — gets no checkpoints."""
    def number(name: str, default: float) -> float:
        try:
            return float(os.environ.get(name, default))
        except ValueError:
            return default
    return int(number("ESCOUADE_NB_CHECKPOINT_MAX_FILES", 20_000)), int(number("ESCOUADE_NB_CHECKPOINT_MAX_MB", 256)
                                                                           * 1024 * 1024)


def _size_over(top: Path, paths: list[str], limit: int) -> int:
    """The bytes of ``paths`` (under ``top``), counted until past ``limit`` (runs in a thread)."""
    total = 0
    for rel in paths:
        try:
            total += (top / rel).lstat().st_size
        except OSError:
            continue
        if total > limit:
            break
    return total


def _ref_part(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") or "agent"


@dataclass(eq=False)
class Checkpoint:
    """The agent's folder as it was before turn ``turn`` (1 for the first prompt of its
    conversation): ``prompt`` that turn's text, ``at`` when it was taken (UTC), ``commit`` the
    git commit holding the files, ``ref`` where it is kept, ``git_dir`` the shadow repository
    (None: the folder's own repository), ``fork`` the session the agent forked then (None
    when it offers no ``session/fork``)."""

    turn: int
    prompt: str
    at: datetime
    commit: str
    ref: str
    git_dir: str | None = None
    fork: str | None = None
    _live: Any = field(default=None, repr=False)  # a weak reference to the process whose session was forked

    def __repr__(self) -> str:
        shown = self.prompt if len(self.prompt) <= PROMPT_SHOWN else self.prompt[:PROMPT_SHOWN - 1] + "…"
        return f"<Checkpoint before turn {self.turn} ({self.at:%Y-%m-%d %H:%M:%S} UTC): {shown!r}>"

    def record(self) -> dict[str, Any]:
        return {"turn": self.turn, "prompt": self.prompt, "at": self.at.isoformat(), "commit": self.commit,
                "ref": self.ref, "git_dir": self.git_dir, "fork": self.fork}


class FolderSnapshots:
    """Snapshots of one folder as git commits (see the module): :meth:`take` returns a
    commit, :meth:`restore` puts the folder back to one. ``name`` names the refs."""

    def __init__(self, folder: Path, name: str, repo: GitRepo | None = None) -> None:
        self.folder = Path(folder)
        self.name = name
        self.repo = repo  # the repository as the kernel recorded it (an agent's worktree); None: found by walking up
        self.run = uuid.uuid4().hex[:8]  # this agent's checkpoints in this kernel: refs apart from another's
        self.top: Path | None = None  # the work tree's top (the repository's, or the folder for a shadow)
        self.scope = "."  # the folder, relative to top
        self.git_dir: Path | None = None  # the kernel's private repository (kernel_git.PrivateRepo)
        self.private: PrivateRepo | None = None
        self._index: Path | None = None
        self._lock = asyncio.Lock()
        self.refused: list[tuple[str, str]] = []  # the last restore's files not restored: (path, why)

    def _env(self, index: Path | None = None) -> dict[str, str]:
        assert self.private is not None
        return {**self.private.env(index), "GIT_LITERAL_PATHSPECS": "1",
                "GIT_AUTHOR_NAME": "escouade_nb", "GIT_AUTHOR_EMAIL": "escouade_nb@localhost",
                "GIT_COMMITTER_NAME": "escouade_nb", "GIT_COMMITTER_EMAIL": "escouade_nb@localhost"}

    async def _git(self, *args: str, index: Path | None = None, check: bool = True) -> str:
        assert self.top is not None
        code, out, err = await git(*args, cwd=self.top, check=False, env=self._env(index))
        if check and code != 0:
            line = next((ln for ln in err.splitlines() if ln.startswith(("fatal:", "error:"))), err.strip()[:200])
            raise CheckpointError(f"git {args[0]}: {line or f'exit {code}'}")
        return out

    async def _locate(self) -> None:
        if self.top is not None:
            return
        try:
            private = PrivateRepo(self.repo.top, self.repo) if self.repo is not None and \
                self.folder.resolve().is_relative_to(self.repo.top.resolve()) else \
                await asyncio.to_thread(PrivateRepo.over, self.folder)
            await private.ensure()
        except (WorktreeError, OSError) as exc:
            raise CheckpointError(f"the private repository could not be made: {str(exc)[:400]}") from None
        self.private, self.top, self.git_dir = private, private.top, private.git_dir
        self.scope = os.path.relpath(self.folder.resolve(), private.top.resolve())
        work = state_dir() / "index"
        await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
        self._index = work / f"{_ref_part(self.name)}-{self.run}"
        try:  # the private index starts as a copy of the user's bytes (read, never written): its stat cache
            await private.seed_index(self._index)  # spares hashing every file; tracked files stay tracked
        except WorktreeError as exc:
            raise CheckpointError(str(exc)) from None

    async def _tree(self, limited: bool = True) -> str:
        """The folder's files as a tree now (the private index brought up to date);
        :class:`TooBig` when the files it would add are more than :func:`limits` (``limited``)."""
        assert self.top is not None
        if limited:
            await self._within_limits()
        await self._git("add", "-A", "--ignore-errors", "--", self.scope, index=self._index, check=False)
        return (await self._git("write-tree", index=self._index)).strip()

    async def _within_limits(self) -> None:
        assert self.top is not None
        others = await self._git("ls-files", "--others", "--exclude-standard", "-z", "--", self.scope,
                                 index=self._index)
        new = [p for p in others.split("\0") if p]
        most, most_bytes = limits()
        if len(new) > most:
            raise TooBig(f"{len(new)} files git does not have yet, more than {most} "
                         f"(ESCOUADE_NB_CHECKPOINT_MAX_FILES; a .gitignore leaves some out)")
        size = await asyncio.to_thread(_size_over, self.top, new, most_bytes)
        if size > most_bytes:
            raise TooBig(f"more than {most_bytes // (1024 * 1024)} MB of files git does not have yet "
                         f"(ESCOUADE_NB_CHECKPOINT_MAX_MB; a .gitignore leaves some out)")

    async def take(self, turn: int, label: str) -> tuple[str, str]:
        """Snapshot the folder: ``(commit, ref)``. :class:`CheckpointError` when git fails."""
        async with self._lock:
            await self._locate()
            tree = await self._tree()
            commit = (await self._git("commit-tree", tree, "-m", label)).strip()
            ref = f"{REF_PREFIX}{_ref_part(self.name)}/{self.run}-{turn}"
            await self._git("update-ref", ref, commit)
            return commit, ref

    async def aclose(self) -> None:
        """Remove the private index file (the checkpoints stay, under their refs)."""
        if self._index is not None:
            await asyncio.to_thread(self._index.unlink, missing_ok=True)
        self.top = self.git_dir = self._index = self.private = None  # found again (index made again) on next use

    async def restore(self, commit: str) -> tuple[list[str], list[str]]:
        """Put the folder back as ``commit`` has it: files added since removed, the others
        written back byte for byte; ignored files untouched. Returns ``(removed, written)``
        paths relative to the work tree's top. :class:`CheckpointError` when git fails."""
        async with self._lock:
            await self._locate()
            now = await self._tree(limited=False)  # what is there now, however big: to know what to remove
            raw = await self._git("diff-tree", "-r", "-z", "--raw", "--no-renames", commit, now, "--", self.scope)
            removed: list[str] = []
            written: list[str] = []
            fields = raw.split("\0")
            for head, path in zip(fields[0::2], fields[1::2], strict=False):
                parts = head.lstrip(":").split()
                if len(parts) < 5 or "160000" in parts[:2]:  # a nested repository: left alone
                    continue
                (removed if parts[4] == "A" else written).append(path)
            assert self.top is not None
            refused = await asyncio.to_thread(_remove, self.top, self.folder, removed)
            if written:
                with tempfile.TemporaryDirectory(prefix="escouade-rewind-") as scratch:
                    # git writes the files into a folder of the kernel's own (no one else's process reaches it),
                    # and they are copied from there by the walk of folder fds (_write_back): git's own checks of
                    # a symlinked leading path and its writes are separate path lookups, which a process racing
                    # the rewind could swap in between
                    index = Path(scratch) / "index"
                    out = Path(scratch) / "files"
                    out.mkdir()
                    await self._git("read-tree", commit, index=index)
                    for at in range(0, len(written), CHUNK):
                        await self._git("checkout-index", "-f", "-q", f"--prefix={out}/", "--",
                                        *written[at:at + CHUNK], index=index)
                    refused += await asyncio.to_thread(_write_back, self.top, self.folder, out, written)
            self.refused = refused
            bad = {rel for rel, _why in refused}
            return [p for p in removed if p not in bad], [p for p in written if p not in bad]


def _below(top: Path, folder: Path, rel: str) -> tuple[Path, tuple[str, ...]]:
    """The folder's real path and the parts of ``rel`` (relative to the work tree's ``top``)
    below it."""
    root = Path(os.path.realpath(folder))
    full = Path(os.path.realpath(top)) / rel
    return root, full.relative_to(root).parts


def _why(rel: str, exc: BaseException, root: Path) -> tuple[str, str]:
    """``(rel, why)`` of a file not restored; the component at fault named relative to the
    agent's folder ``root``."""
    if isinstance(exc, Changed):
        where = exc.where.relative_to(root).as_posix() if exc.where.is_relative_to(root) else str(exc.where)
        return rel, (f"a symbolic link in its path ({where}), not followed" if exc.symlink
                     else f"{where} {exc.what}")
    if isinstance(exc, OSError):
        return rel, exc.strerror or str(exc)
    return rel, str(exc)


def _held(root: Path, parts: tuple[str, ...], create: bool = False) -> int | None:
    """An fd of the folder ``parts`` below the agent's folder ``root`` (a real path), by the
    walk of folder fds that follows no symlink (:mod:`...wire.folder_fds`)."""
    top = open_folder(root)
    if top is None:
        return None
    try:
        return open_below(top, root, parts, create=create)
    finally:
        os.close(top)


def _remove(top: Path, folder: Path, paths: list[str]) -> list[tuple[str, str]]:
    """Unlink the files ``paths`` (relative to the work tree's ``top``; a folder is never
    removed whole), then the folders they leave empty, up to ``folder`` (runs in a thread).
    Each is reached from ``folder`` by a walk of folder fds that follows no symlink and
    unlinked in its held folder: one with a symlink on its way is left alone. Those refused,
    with why."""
    refused: list[tuple[str, str]] = []
    parents: set[tuple[str, ...]] = set()
    for rel in paths:
        try:
            root, parts = _below(top, folder, rel)
            if not parts:
                continue
            fd = _held(root, parts[:-1])
            if fd is None:
                continue
            try:
                st = entry(fd, parts[-1])
                if st is None or stat.S_ISDIR(st.st_mode):
                    continue
                os.unlink(parts[-1], dir_fd=fd)
                parents.add(parts[:-1])
            finally:
                os.close(fd)
        except FileNotFoundError:
            continue
        except (Changed, OSError, ValueError) as exc:
            refused.append(_why(rel, exc, Path(os.path.realpath(folder))))
    root = Path(os.path.realpath(folder))
    done: set[tuple[str, ...]] = set()
    for parent in sorted(parents, key=lambda p: -len(p)):
        at = parent
        while at and at not in done:
            done.add(at)
            try:
                fd = _held(root, at[:-1])
                if fd is None:
                    break
                try:
                    os.rmdir(at[-1], dir_fd=fd)  # rmdir never follows a symlink
                finally:
                    os.close(fd)
            except (Changed, OSError):
                break
            at = at[:-1]
    return refused


def _write_back(top: Path, folder: Path, out: Path, paths: list[str]) -> list[tuple[str, str]]:
    """Copy the files ``paths`` (relative to the work tree's ``top``) that git wrote under the
    kernel's folder ``out`` into the agent's ``folder``, each reached by a walk of folder fds
    that follows no symlink (missing folders made), written beside its name and renamed over
    it (a symlink of the checkpoint made again as a symlink). Those refused, with why."""
    refused: list[tuple[str, str]] = []
    for rel in paths:
        source = out / rel
        try:
            st = os.lstat(source)
        except FileNotFoundError:  # not in the checkpoint after all: nothing to write
            continue
        try:
            root, parts = _below(top, folder, rel)
            if not parts:
                continue
            fd = _held(root, parts[:-1], create=True)
            assert fd is not None
            try:
                now = entry(fd, parts[-1])
                if now is not None and stat.S_ISDIR(now.st_mode):
                    raise IsADirectoryError(errno.EISDIR, "a folder is there now")
                if stat.S_ISLNK(st.st_mode):
                    symlink_at(fd, parts[-1], os.readlink(source))
                else:
                    replace_at(fd, parts[-1], source.read_bytes(), stat.S_IMODE(st.st_mode))
            finally:
                os.close(fd)
        except (Changed, OSError, ValueError) as exc:
            refused.append(_why(rel, exc, Path(os.path.realpath(folder))))
    return refused


def _refused_notice(refused: list[tuple[str, str]]) -> str:
    """The notice of a rewind's files not restored (``(path, why)``), grouped by why."""
    by: dict[str, list[str]] = {}
    for rel, why in refused:
        by.setdefault(why, []).append(rel)
    parts = [f"{', '.join(sorted(names)[:10])}{f' and {len(names) - 10} more' if len(names) > 10 else ''} ({why})"
             for why, names in by.items()]
    return (f"Rewind: {len(refused)} file{'s' if len(refused) != 1 else ''} not restored: {'; '.join(parts)}. "
            "Nothing outside the folder was touched.")


def _prompt_text(turn: Any) -> str:
    return "".join(b.get("text", "") for b in turn.prompt if isinstance(b, dict)
                   and b.get("type") == "text").strip()


class Checkpoints:
    """An agent's checkpoints (``agent.checkpoints`` lists :attr:`items`), taken before each
    prompt (:meth:`before_prompt`) and rewound to (:meth:`rewind`). ``enabled``: take them
    (default True; never for an agent run through a launcher, whose files are elsewhere)."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.items: list[Checkpoint] = []
        self.enabled = True
        self._snapshots: FolderSnapshots | None = None
        self._warned = False
        self._fork_warned = False
        self._no_fork: Any = None  # the process that failed a session/fork: not asked again
        self._fork_answer: dict[str, Any] = {}  # the last session/fork answer (its modes, config options)
        self._rewinding = False
        self.task: asyncio.Task | None = None  # a rewind asked from the view (rewind_soon); close() cancels it

    @property
    def snapshots(self) -> FolderSnapshots:
        if self._snapshots is None or self._snapshots.folder != self.agent.cwd:
            self._snapshots = FolderSnapshots(self.agent.cwd, self.agent.name, self._recorded())
        return self._snapshots

    def _recorded(self) -> GitRepo | None:
        """An agent's worktree as the kernel recorded it when it made it (its admin folder, the
        common dir): read instead of the worktree's ``.git`` file, which the agent may rewrite."""
        wt = self.agent.worktree
        if wt is None or wt.admin is None or wt.common_dir is None:
            return None
        return GitRepo(Path(wt.path), Path(wt.admin), Path(wt.common_dir))

    def _turn_number(self) -> int:
        return sum(1 for i in self.agent.conversation.items if isinstance(i, Message) and i.role == "user")

    async def before_prompt(self, turn: Any, live: Any) -> None:
        """Take the checkpoint of ``turn`` (its prompt is in the conversation, not sent yet)
        and, where offered, a fork of the session. Never raises: a failure is said once in
        the conversation and the turn goes on without a checkpoint."""
        agent = self.agent
        if not self.enabled or agent.via:
            return
        number = self._turn_number()
        prompt = _prompt_text(turn)
        try:
            commit, ref = await self.snapshots.take(number, f"escouade_nb: {agent.name} before turn {number}\n\n"
                                                            f"{prompt[:2000]}")
        except TooBig as exc:  # a home folder, a data folder: not tried again every turn
            self.enabled = False
            agent.conversation.add_notice(f"No checkpoints of {agent.cwd} for {agent.name}: {exc}. Its turns "
                                          f"cannot be rewound to.", level="warning")
            return
        except (CheckpointError, WorktreeError, OSError) as exc:
            if not self._warned:
                self._warned = True
                agent.conversation.add_notice(f"No checkpoint of {agent.cwd} before this turn ({exc}): it cannot "
                                              f"be rewound to.", level="warning")
            return
        cp = Checkpoint(number, prompt, datetime.now(UTC), commit, ref,
                        str(self.snapshots.git_dir) if self.snapshots.git_dir else None)
        cp.fork, cp._live = await self._fork(live), weakref.ref(live)
        self.items.append(cp)
        message = self._message(number)
        if message is not None:
            message.checkpointed = True
            agent.conversation.touch(message)
        if agent.transcript is not None:
            agent.transcript.event(CHECKPOINT_EVENT, **cp.record())

    async def _fork(self, live: Any, session_id: str | None = None) -> str | None:
        """``session/fork`` of the current session (or ``session_id``) where the agent offers
        it: the fork's session id, else None."""
        session = live.session if live is not None else None
        caps = self.agent.agent_capabilities or {}
        if session is None or (caps.get("sessionCapabilities") or {}).get("fork") is None or live is self._no_fork:
            return None
        source = session_id or session.session_id
        try:
            result = await session.request("session/fork", {"sessionId": source, "cwd": str(self.agent.cwd),
                                                            "mcpServers": list(live.mcp_servers)},
                                           timeout=FORK_TIMEOUT)
            fork = (result or {}).get("sessionId")
            self._fork_answer = result if isinstance(result, dict) else {}
            return fork if isinstance(fork, str) and fork else None
        except Exception as exc:  # the agent refused or broke: the rewind carries the conversation instead
            self._no_fork = live  # not asked again on this process: a prompt must not wait for it each turn
            if not self._fork_warned:
                self._fork_warned = True
                self.agent.conversation.add_notice(f"The agent did not fork its session for the checkpoint ({exc}): "
                                                   f"a rewind will carry the conversation in a new session.",
                                                   level="warning")
            return None

    def _message(self, number: int) -> Message | None:
        """The user message of turn ``number`` (1-based)."""
        users = [i for i in self.agent.conversation.items if isinstance(i, Message) and i.role == "user"]
        return users[number - 1] if 0 < number <= len(users) else None

    def checkpoint_of(self, turn: int) -> Checkpoint | None:
        """The newest checkpoint taken before turn ``turn``, else None."""
        return next((cp for cp in reversed(self.items) if cp.turn == turn), None)

    async def rewind(self, cp: Checkpoint | int) -> Checkpoint:
        """Restore the folder to ``cp`` (a :class:`Checkpoint` of this agent, or its turn
        number) and continue the conversation from before that turn (see the module).
        :class:`AgentError` for a checkpoint not of this agent, while a turn runs, or a rewind
        under way; :class:`CheckpointError` when git cannot restore it (nothing is changed
        in the conversation then)."""
        agent = self.agent
        if isinstance(cp, int):
            found = self.checkpoint_of(cp)
            if found is None:
                raise AgentError(f"{agent.name} has no checkpoint before turn {cp}")
            cp = found
        if cp not in self.items:
            raise AgentError(f"{cp!r} is not a checkpoint of {agent.name}")
        current = agent.turns.current
        if current is not None and not current.done:
            raise AgentError(f"{agent.name} is in a turn: stop it before rewinding")
        if self._rewinding:
            raise AgentError(f"a rewind of {agent.name} is under way")
        self._rewinding = True
        try:
            async with agent.turns.held():  # no prompt turn starts while the folder and session change
                return await self._rewind(cp)
        finally:
            self._rewinding = False

    def rewind_soon(self, cp: Checkpoint | int) -> asyncio.Task:
        """:meth:`rewind` as a task of this agent's (:attr:`task`), returned at once; a
        refusal or a failure is a notice in the conversation."""
        async def rewind() -> None:
            try:
                await self.rewind(cp)
            except (AgentError, CheckpointError, WorktreeError) as exc:
                self.agent.conversation.add_notice(f"Not rewound: {exc}", level="warning")
                message = self._message(cp.turn if isinstance(cp, Checkpoint) else cp)
                if message is not None:  # drawn again: its Rewind button on once more
                    self.agent.conversation.touch(message)
        self.task = asyncio.get_running_loop().create_task(rewind(), name=f"escouade rewind of {self.agent.name}")
        return self.task

    async def _rewind(self, cp: Checkpoint) -> Checkpoint:
        agent = self.agent
        snapshots = self.snapshots
        if cp.git_dir is not None and snapshots.git_dir is None:
            await snapshots._locate()
        removed, written = await snapshots.restore(cp.commit)
        files = agent.file_watch  # review=True: pending changes the rewind undid leave the list
        if files is not None and snapshots.top is not None:
            await files.rewound([snapshots.top / p for p in [*removed, *written]])
        conversation = agent.conversation
        shown = cp.prompt if len(cp.prompt) <= PROMPT_SHOWN else cp.prompt[:PROMPT_SHOWN - 1] + "…"
        before = self._carried_items(cp.turn)
        rewound = conversation.mark_rewound(cp.turn)
        live = agent.live
        fork = None
        if cp.fork is not None and cp._live is not None and live is cp._live() and agent.session is not None \
                and agent.session.alive and not agent.session.closing:
            fork = await self._fork(live, cp.fork)
        files = (f"{len(removed)} file{'s' if len(removed) != 1 else ''} removed, "
                 f"{len(written)} written back")
        what = f"Rewound to before turn {cp.turn} (“{shown}”): {agent.cwd} is as it was then ({files}); " \
               f"{rewound} turn{'s' if rewound != 1 else ''} marked rewound."
        if snapshots.refused:
            conversation.add_notice(_refused_notice(snapshots.refused), level="warning")
        if fork is not None:
            self._switch(live, fork)
            if agent.transcript is not None:
                agent.transcript.event(REWIND_EVENT, turn=cp.turn, commit=cp.commit, session=fork)
                agent.transcript.event("session", session_id=fork)
            conversation.add_notice(f"{what} The conversation goes on in session {fork}, forked from the one the "
                                    f"agent forked before that turn (session/fork).")
            return cp
        from ...core.prompt import carried_items
        if agent.transcript is not None:
            agent.transcript.event(REWIND_EVENT, turn=cp.turn, commit=cp.commit, session=None)
        why = "it offers no session/fork" if cp.fork is None else "its process changed since that turn"
        carried = (f"the conversation up to there ({len(before)} items) goes, as text, with your next prompt"
                   if before else "nothing came before that turn")
        conversation.add_notice(f"{what} The conversation goes on in a new session ({why}): {carried}.")
        if before:
            agent.carries(carried_items(agent.name, agent.name, before, agent.harness.speaker))
        if agent.status not in ("resumable", "harness missing"):
            await agent.restart()
        return cp

    def _carried_items(self, turn: int) -> list[Any]:
        """The conversation before turn ``turn``, without what earlier rewinds undid."""
        items = list(self.agent.conversation.items)
        message = self._message(turn)
        end = items.index(message) if message is not None and message in items else len(items)
        return [i for i in items[:end] if not i.rewound]

    def _switch(self, live: Any, session_id: str) -> None:
        """The agent goes on in ``session_id`` (a fork on the same process)."""
        session = live.session
        session.session_id = session_id
        session.router.opened(session_id)
        conversation = self.agent.conversation
        conversation.new_session()
        answer = self._fork_answer  # the fork's own modes and options, where its answer gives them
        modes, options = answer.get("modes"), answer.get("configOptions")
        conversation.set_session_state(modes=modes if isinstance(modes, dict) else None,
                                       config_options=options if isinstance(options, list) else None)

    async def aclose(self) -> None:
        """The agent is closed: a rewind asked from the view is cancelled, the private index removed."""
        if self.task is not None:
            self.task.cancel()
        if self._snapshots is not None:
            await self._snapshots.aclose()

    def rebuild(self, records: list[Any]) -> None:
        """The checkpoints on record in a transcript (a resume): their files can be
        rewound to (their forks belong to the process that made them: a rewind carries the
        conversation instead); the user messages they come before are marked."""
        for rec in records:
            if rec.kind != "event" or rec.event != CHECKPOINT_EVENT:
                continue
            data = rec.data or {}
            try:
                cp = Checkpoint(int(data["turn"]), str(data.get("prompt") or ""),
                                datetime.fromisoformat(str(data["at"])), str(data["commit"]), str(data["ref"]),
                                data.get("git_dir") if isinstance(data.get("git_dir"), str) else None,
                                data.get("fork") if isinstance(data.get("fork"), str) else None)
            except (KeyError, TypeError, ValueError):
                continue
            self.items.append(cp)
            message = self._message(cp.turn)
            if message is not None:
                message.checkpointed = True
