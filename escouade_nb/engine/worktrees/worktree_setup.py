"""A worktree that sets itself up: ``.escouade.yml``'s ``worktree: {copy, setup, cleanup}``.

What :func:`prepare` does for an agent started with ``--worktree`` (in this order; the agent
starts only when each step went well):

1. **Confirm** the commands. A project file never runs a command by itself: ``setup`` and
   ``cleanup`` run only once the user confirmed those exact commands for that folder. The
   first time (and again whenever a command changes) a permission card asks, before
   anything is made — the card shows each whole command, the folder the worktree goes to,
   and the file that asks. Its answer is kept (:class:`Confirmations`, in the user's config
   folder, keyed by the folder and the exact commands); rule plugins and modes never answer
   it. Denied: nothing is made, nothing runs, the agent is not started (``failed``).
2. ``git worktree add`` (:func:`.agent_worktrees.make`).
3. **Copy** the ``copy`` paths (files and folders, untracked in the repository: ``.env``,
   ``data/``) from the folder holding ``.escouade.yml`` into the same place in the worktree,
   in a thread. A path missing is said (a warning), not fatal; a file the worktree has
   already (tracked, so checked out) is left as git made it. Each copied path goes into the
   worktree's own exclude file so that ``git status`` — hence ``discard`` and ``merge`` —
   never sees it (:func:`exclude_in_worktree`).
4. **Setup** runs in the agent's folder in the worktree: ``/bin/sh -c SETUP`` as an async
   process in its own group, its output (stdout and stderr interleaved) streamed into the
   agent's conversation as a terminal card ("Worktree setup"), at most ``timeout`` seconds
   (``worktree.timeout``, default 300 s, at most 3600 s) and the newest
   :data:`OUTPUT_CAP` bytes kept. A failure (a non-zero exit, a signal, the timeout) is
   said with its exit code and last lines, and the agent is not started; the worktree is
   **kept** (see :func:`prepare`).

``discard`` runs ``cleanup`` first (:func:`cleanup`), in the worktree, under the same
bounds; its failure is said and the discard goes on.

Sandboxed when the agent is (``--sandbox``): ``setup`` and ``cleanup`` run under the agent's
own bubblewrap as its client terminals do (:func:`..launch.sandbox.client_reach`,
:func:`..launch.sandbox.terminal_command`: writable only its folder in the worktree, the worktree's
git administration, its state folders and a private ``/tmp``; the same hidden folders and
read-only git files), with a network of their own cut the same way (their own pasta: the
internet, of the host's loopback only the ports declared for the agent — the kernel's MCP
server is not theirs).
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import hashlib
import itertools
import json
import os
import shlex
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from ...manifest.project import ProjectFileError, WorktreeSetup
from ...permissions.journal import Journal
from ...permissions.states import config_dir
from ...wire.errors import AgentError
from ...wire.terminals import TerminalEvent, TerminalManager
from . import agent_worktrees
from ..cards import CardDesk
from ..interfaces import WorktreeAgent
from ..launch.launcher import agent_env
from ..launch.sandbox import SandboxError, client_reach, sandboxed
from .worktree import Worktree

__all__ = ["CONFIRMATIONS_FILE", "LAST_LINES", "OUTPUT_CAP", "SHOWN_BYTES", "CommandResult", "Confirmations", "Copied",
           "NamedFile", "SetupFailed", "cleanup", "confirm", "copy_paths", "exclude_in_worktree", "named_files",
           "prepare", "refuse_worktree", "run_command"]

OUTPUT_CAP = 256 * 1024
"""Bytes of a setup's (or cleanup's) output kept, the newest (older ones are dropped, the card says so)."""
LAST_LINES = 12
"""Lines of its output a failure message quotes."""
CONFIRMATIONS_FILE = "worktree-commands.json"
"""The kept confirmations, in the user's config folder (``$ESCOUADE_NB_CONFIG_DIR``, else
``<jupyter config dir>/escouade_nb``): never in a project folder."""


_ids = itertools.count(1)
ORIGIN = "worktree"
"""The :attr:`~...core.conversation.ToolCall.origin` of the worktree's cards and command calls."""
_running: set[TerminalManager] = set()  # the setups and cleanups running now (killed at interpreter exit)


class SetupFailed(AgentError):
    """The worktree's set-up did not happen (denied, or its command failed); one line for the user."""


# -- the user's confirmations -----------------------------------------------------------------------

class Confirmations:
    """The commands the user confirmed, per folder: ``<config dir>/worktree-commands.json``
    (``path`` for another file), ``{"version": 1, "folders": {FOLDER: {"setup": CMD,
    "cleanup": CMD, "file": FILE, "files": {PATH: SHA-256}, "at": ISO time}}}``. A folder's entry is replaced when the
    user confirms other commands for it. Blocking file I/O: call from a thread."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else config_dir() / CONFIRMATIONS_FILE

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"version": 1, "folders": {}}
        if not isinstance(data, dict) or not isinstance(data.get("folders"), dict):
            return {"version": 1, "folders": {}}
        return data

    def confirmed(self, folder: Path, commands: dict[str, str], files: dict[str, str] | None = None) -> bool:
        """Whether the user confirmed exactly ``commands`` (role -> command line) for
        ``folder``: every one of them, byte for byte — and every file they name (``files``:
        path relative to the folder -> SHA-256, :func:`named_files`) as it was then."""
        kept = self._read()["folders"].get(str(folder))
        if not isinstance(kept, dict) or not all(kept.get(role) == command for role, command in commands.items()):
            return False
        kept_files = kept.get("files")
        hashes: dict[str, Any] = kept_files if isinstance(kept_files, dict) else {}
        return all(hashes.get(rel) == digest for rel, digest in (files or {}).items())

    def keep(self, folder: Path, commands: dict[str, str], file: Path, files: dict[str, str] | None = None) -> None:
        """Keep the confirmation of ``commands`` for ``folder`` (asked by ``file``), with the
        SHA-256 of the files they name (``files``); written whole to a temporary file, then
        renamed over the old one."""
        data = self._read()
        data["folders"][str(folder)] = {**commands, "file": str(file), "files": dict(files or {}),
                                        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".worktree-commands-", suffix=".json", dir=self.path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.path)


@dataclass
class NamedFile:
    """A file of the repository a command names (``./setup.sh``, ``bash scripts/setup.sh``, the
    ``Makefile`` of ``make``): ``rel`` (relative to the folder of ``.escouade.yml``), ``size``
    (bytes), ``sha256``, ``text`` (its whole content when it is text of at most
    :data:`SHOWN_BYTES`, else None: the card gives its size and SHA-256)."""

    rel: str
    size: int
    sha256: str
    text: str | None


SHOWN_BYTES = 256 * 1024
"""Bytes of a named file shown whole on the card at most (a bigger or binary one: its size and SHA-256)."""
_MAKEFILES = ("GNUmakefile", "makefile", "Makefile")


def _words(command: str) -> list[list[str]]:
    """The simple commands of a shell line, each as its words (``&&``, ``;``, ``|`` split them)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    out: list[list[str]] = [[]]
    try:
        for token in lexer:
            if token and set(token) <= set(";&|()<>"):
                out.append([])
            else:
                out[-1].append(token)
    except ValueError:  # an unbalanced quote: the plain words
        out = [command.split()]
    return [words for words in out if words]


def named_files(config: WorktreeSetup) -> dict[str, NamedFile]:
    """The files of the repository that ``config``'s commands name (each word that is a regular
    file under the folder of ``.escouade.yml`` — resolved, symlinks followed, inside the
    repository —, and the Makefile of a ``make``), read whole (blocking: call it in a thread).
    Keyed by their path relative to that folder."""
    folder = config.folder.resolve()
    repo = folder
    for p in (folder, *folder.parents):
        if (p / ".git").exists():
            repo = p
            break
    found: dict[str, NamedFile] = {}
    for command in config.commands.values():
        for words in _words(command):
            names = [w for w in words if w and not w.startswith("-") and "=" not in w.split("/")[0]]
            if Path(words[0]).name in ("make", "gmake"):
                names += [next((m for m in _MAKEFILES if (folder / m).is_file()), "")]
            for word in names:
                if not word:
                    continue
                path = (folder / Path(word).expanduser()).resolve()
                if not path.is_relative_to(repo) or not path.is_file():
                    continue
                rel = os.path.relpath(path, folder)
                if rel in found:
                    continue
                try:
                    data = path.read_bytes()
                except OSError:
                    continue
                text: str | None = None
                if len(data) <= SHOWN_BYTES and b"\0" not in data:
                    try:
                        text = data.decode("utf-8")
                    except UnicodeDecodeError:
                        text = None
                found[rel] = NamedFile(rel, len(data), hashlib.sha256(data).hexdigest(), text)
    return found


def _card_text(config: WorktreeSetup, target: Path, files: dict[str, NamedFile] | None = None) -> str:
    """What the card says (shown as it is, preformatted): each whole command, where, who asks,
    and each file of the repository they name — whole, or its size and SHA-256."""
    parts = [f"{config.file} (not the agent) asks to run these commands for the agent's git worktree {target}:"]
    for role, command in config.commands.items():
        when = "in the worktree once it is made" if role == "setup" else "in the worktree before discard removes it"
        parts.append(f"{role}, {when}:\n" + "\n".join(f"    {line}" for line in command.splitlines()))
    for named in (files or {}).values():
        head = f"{named.rel} ({named.size} bytes, SHA-256 {named.sha256}), which they run"
        if named.text is None:
            parts.append(f"{head}: binary or over {SHOWN_BYTES // 1024} KiB, not shown")
        else:
            parts.append(f"{head}:\n" + "\n".join(f"    {line}" for line in named.text.splitlines()))
    parts.append(f"Nothing runs unless you allow it. Your answer is kept for {config.folder} until one of these "
                 f"commands or the files they name changes. Don't run: the agent is not started and nothing is made.")
    return "\n\n".join(parts)


async def confirm(agent: WorktreeAgent, config: WorktreeSetup, target: Path, journal: Journal | None,
                  confirmations: Confirmations | None = None, *, files: dict[str, NamedFile] | None = None) -> bool:
    """Whether ``config``'s commands may run: already confirmed for its folder (said in the
    conversation), else a permission card (:class:`~..cards.PermissionCard`, handed out by
    ``agent.next_permission()`` and shown by the views like any card) that only the user
    answers: *Run* (kept) or *Don't run*. ``target``: where the worktree goes (shown).
    The decision goes in the conversation (a notice, so a transcript keeps it) and the
    journal (plugin ``worktrees``). True when there is no command."""
    commands = config.commands
    if not commands:
        return True
    confirmations = confirmations or Confirmations()
    shown = "; ".join(f"{role}: {command}" for role, command in commands.items())
    if files is None:
        files = await asyncio.to_thread(named_files, config)  # off the loop: scripts are read whole
    hashes = {rel: named.sha256 for rel, named in files.items()}
    if await asyncio.to_thread(confirmations.confirmed, config.folder, commands, hashes):
        agent.conversation.add_notice(f"Worktree commands of {config.file} run as you confirmed them before for "
                                      f"{config.folder}", detail=shown)
        _journal(journal, agent, "Answer", f"worktree commands confirmed earlier for {config.folder}: {shown}",
                 verdict="allowed")
        return True
    desk = agent.early_desk = CardDesk(agent)  # the session does not exist yet: the card's own desk
    tool_call = {"toolCallId": f"escouade-worktree-confirm-{next(_ids)}", "kind": "execute", "status": "pending",
                 "title": f"Run the worktree commands of {config.file}?",
                 "rawInput": {**commands, "folder": str(target), "file": str(config.file),
                              **({"files": hashes} if hashes else {})},
                 "content": [{"type": "content", "content": {"type": "text",
                                                             "text": _card_text(config, target, files)}}]}
    options = [{"optionId": "run", "name": "Run (remember for this folder)", "kind": "allow_always"},
               {"optionId": "dont-run", "name": "Don't run", "kind": "reject_once"}]
    card = desk.new_card(tool_call, options, origin=ORIGIN)  # ours by who made it, not by its id
    card.permission.note = f"for its worktree: {config.file.name} asks, not the agent"
    agent.notify_status()
    try:
        answer = await card.wait()
    finally:
        if not card.answered:  # the agent was closed while the card waited
            card.cancel("agent closed")
        desk.close("agent closed")
    allowed = answer.get("outcome") == "selected" and answer.get("optionId") == "run"
    call = card.permission.tool_call
    if call is not None:  # ours, held: its status says the answer (no agent updates it)
        agent.conversation.set_status(call, "completed" if allowed else "failed" if
                                      answer.get("outcome") == "selected" else "cancelled")
    if allowed:
        await asyncio.to_thread(confirmations.keep, config.folder, commands, config.file, hashes)
    who = card.permission.answered_by or "you"
    agent.conversation.add_notice(f"Worktree commands of {config.file} {'allowed' if allowed else 'not allowed'} "
                                  f"by {who}" + (", kept for this folder" if allowed else ": nothing ran"),
                                  level="info" if allowed else "warning", detail=shown)
    _journal(journal, agent, "Answer", f"worktree commands of {config.file} "
             f"{'allowed' if allowed else 'refused'} by {who}: {shown}", verdict="allowed" if allowed else "refused")
    return allowed


def _journal(journal: Journal | None, agent: WorktreeAgent, kind: Any, text: str, **fields: Any) -> None:
    if journal is not None:
        journal.add("worktrees", kind, text=text, agent=agent.name, **fields)


# -- copies -----------------------------------------------------------------------------------------

@dataclass
class Copied:
    """What :func:`copy_paths` did: ``copied`` (entries copied, as listed), ``missing``
    (not in the folder), ``kept`` (files the worktree had already: left as git made them)."""

    copied: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def _copy(entries: tuple[str, ...], source: Path, target: Path, repo: Path) -> Copied:
    done = Copied()
    for entry in entries:
        src = source / entry
        if not src.exists() and not src.is_symlink():
            done.missing.append(entry)
            continue
        if not src.resolve().is_relative_to(repo):  # a symlink pointing out of the repository
            raise ProjectFileError(f"worktree.copy: {entry!r} leads out of the repository {repo} "
                                   f"(to {src.resolve()}): not copied")
        dst = target / entry
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir() and not src.is_symlink():
            def keep_existing(s: str, d: str) -> object:
                if os.path.lexists(d):
                    done.kept.append(os.path.relpath(d, target))
                    return d
                return shutil.copy2(s, d)
            shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True, copy_function=keep_existing)
        elif os.path.lexists(dst):
            done.kept.append(entry)
            continue
        else:
            shutil.copy2(src, dst, follow_symlinks=False)
        done.copied.append(entry)
    return done


async def copy_paths(config: WorktreeSetup, worktree: Worktree, target: Path) -> Copied:
    """Copy ``config.copy`` from ``config.folder`` into ``target`` (the same folder inside
    ``worktree``), in a thread; then add what was copied to the worktree's own exclude
    file (:func:`exclude_in_worktree`). :class:`~...manifest.project.ProjectFileError` for
    a path whose symlink leads out of the repository."""
    done = await asyncio.to_thread(_copy, config.copy, config.folder, target, worktree.repo.resolve())
    if done.copied:
        relative = [str((target / e).relative_to(worktree.path)) for e in done.copied]
        await exclude_in_worktree(worktree, relative)
    return done


def _global_excludes(configured: str) -> str:
    path = Path(configured).expanduser() if configured else Path(
        os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "git" / "ignore"
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _write_exclude(path: Path, global_text: str, paths: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text(encoding="utf-8") if path.exists() else None
    lines = [] if old is not None else [
        "# This worktree's own excludes (escouade_nb): git reads them through this worktree's core.excludesFile.",
        "# Your global excludes file's lines come first, since this file takes its place here.",
        global_text.rstrip("\n")]
    body = (old or "\n".join(x for x in lines if x) + "\n")
    have = set(body.splitlines())
    for p in paths:
        line = "/" + p.strip("/").replace("\\", "/")
        if line not in have:
            body += line + "\n"
    path.write_text(body, encoding="utf-8")


async def exclude_in_worktree(worktree: Worktree, paths: list[str]) -> Path:
    """Make git ignore ``paths`` (relative to the worktree) in ``worktree`` only: they go in
    ``<its git dir>/info/exclude`` (``.git/worktrees/NAME/info/exclude``), which this
    worktree's ``core.excludesFile`` names (git's per-worktree config: ``extensions.worktreeConfig``
    is set on the repository if it was not; git itself reads ``info/exclude`` only from the
    common git dir, which would hide them in the main worktree too). The file starts with
    your global excludes file's lines, which it replaces in this worktree. ``git worktree
    remove`` deletes it with the worktree. Returns the file."""
    _, configured, _ = await worktree.inside("config", "--path", "core.excludesFile", check=False)
    assert worktree.admin is not None  # inside() found it (the admin folder the kernel recorded)
    exclude = worktree.admin / "info" / "exclude"
    configured = configured.strip()
    own = configured == str(exclude)
    global_text = "" if own else await asyncio.to_thread(_global_excludes, configured)
    await asyncio.to_thread(_write_exclude, exclude, global_text, paths)
    if not own:
        _, flag, _ = await worktree.main("config", "--bool", "extensions.worktreeConfig", check=False)
        if flag.strip() != "true":
            await worktree.main("config", "extensions.worktreeConfig", "true")
        # written by file (the worktree's own config, for the agent's git); the kernel's git never reads it
        await worktree.main("config", "--file", str(worktree.admin / "config.worktree"), "core.excludesFile",
                            str(exclude))
    return exclude


# -- running a command ------------------------------------------------------------------------------

@dataclass
class CommandResult:
    """How a setup or cleanup command ended: ``code`` (its exit code; None when killed),
    ``signal`` (the signal's name when killed), ``timed_out`` (the timeout in seconds when
    it struck), ``output`` (the newest :data:`OUTPUT_CAP` bytes, ``truncated`` when older
    ones were dropped), ``seconds`` it ran."""

    role: str
    command: str
    code: int | None
    signal: str | None
    output: str
    truncated: bool
    seconds: float
    timed_out: float | None = None

    @property
    def ok(self) -> bool:
        return self.code == 0 and self.timed_out is None

    @property
    def verdict(self) -> str:
        if self.timed_out is not None:
            return f"timed out after {self.timed_out:g} s (killed)"
        if self.code is None:
            return f"killed by {self.signal or 'a signal'}"
        return f"exited with code {self.code}"

    def last_lines(self, n: int = LAST_LINES) -> str:
        return "\n".join([ln for ln in self.output.splitlines() if ln.strip()][-n:])


async def run_command(agent: WorktreeAgent, role: str, command: str, folder: Path, *, timeout: float) -> CommandResult:
    """Run ``command`` (a shell line: ``/bin/sh -c``; under the agent's bubblewrap when it is
    sandboxed) in ``folder`` as
    an async process in a group of its own, its output shown live in ``agent``'s
    conversation as a terminal card titled "Worktree ROLE"; killed (the whole group) after
    ``timeout`` seconds or when the caller is cancelled. Never raises for the command's
    own failure (see :class:`CommandResult`); :class:`SetupFailed` when it cannot start."""
    argv = ["/bin/sh", "-c", command]
    reach: tuple[Any, Any] = (None, None)
    if agent.sandbox is not None:  # as the agent runs: its folder, its worktree's git admin, a private /tmp
        try:  # its env: its --account's folders; the binds of its client terminals (terminal_command: the
            # same hidden folders, read-only git files and a network of its own, its own pasta)
            reach = client_reach(await sandboxed(agent, argv, agent_env(agent)))
        except SandboxError as exc:
            raise SetupFailed(f"worktree {role} could not be sandboxed: {exc}") from None
    conversation = agent.conversation
    started = time.monotonic()
    timed_out: float | None = None
    async with TerminalManager(folder, id_prefix=f"worktree-{role}", default_output_byte_limit=OUTPUT_CAP,
                               confinement=reach[0], wrap=reach[1]) as terms:
        _running.add(terms)
        try:
            try:
                tid = await terms.create(argv[0], args=argv[1:])
            except Exception as exc:  # acp.RequestError: the shell (or the sandbox) cannot run
                raise SetupFailed(f"worktree {role} could not start in {folder}: {exc}") from None
            call_id = f"escouade-worktree-{role}-{next(_ids)}"
            call = conversation.apply_own(ORIGIN, {
                "sessionUpdate": "tool_call", "toolCallId": call_id, "kind": "execute", "title": f"Worktree {role}",
                "status": "in_progress", "rawInput": {"command": command, "cwd": str(folder)},
                "content": [{"type": "terminal", "terminalId": tid}]})

            def store(event: TerminalEvent | None = None) -> None:
                if event is not None and event.terminal_id != tid:
                    return
                output, truncated, status = terms.snapshot(tid)
                call.terminals[tid] = {"output": output, "truncated": truncated, "running": status is None,
                                       "exit_code": getattr(status, "exit_code", None),
                                       "signal": getattr(status, "signal", None)}
                conversation.touch(call)

            watch = terms.subscribe(store)
            try:
                with anyio.move_on_after(timeout) as scope:
                    await terms.wait_for_exit(tid)
                if scope.cancelled_caught:
                    timed_out = timeout
                    await terms.kill(tid)
                status = await terms.wait_for_exit(tid)
            finally:
                watch.close()
                store()
            output, truncated, _ = terms.snapshot(tid)
            result = CommandResult(role, command, status.exit_code, status.signal, output, truncated,
                                   time.monotonic() - started, timed_out)
            conversation.set_status(call, "completed" if result.ok else "failed")
            return result
        finally:
            _running.discard(terms)


def _kill_running() -> None:
    for terms in list(_running):
        terms.kill_now()


atexit.register(_kill_running)


def _say(agent: WorktreeAgent, journal: Journal | None, result: CommandResult, where: Path) -> None:
    tail = result.last_lines()
    text = f"Worktree {result.role} {result.verdict} in {result.seconds:.1f} s ({where})"
    agent.conversation.add_notice(text, level="info" if result.ok else "error",
                                  detail=f"$ {result.command}\n{tail}" if tail else f"$ {result.command}")
    _journal(journal, agent, "Output", f"{text}: {result.command}")


# -- the whole flow -----------------------------------------------------------------------------------

async def prepare(agent: WorktreeAgent, planned: Worktree, base: str | None, config: WorktreeSetup | None,
                  start_folder: Path | None = None, *, journal: Journal | None = None,
                  confirmations: Confirmations | None = None) -> None:
    """Make ``agent``'s worktree and set it up (the module's steps): confirm ``config``'s
    commands (a card the first time), ``git worktree add``, copy, run ``setup`` in
    ``start_folder``'s place inside the worktree (the agent's folder). Raises (the agent is
    then not started, ``failed`` with the message): :class:`SetupFailed` when the commands
    were not allowed (nothing made) or the setup failed (its exit code and last lines; the
    worktree is KEPT — what the setup left is there to look at and its branch holds nothing
    yet: ``%escouade discard NAME --force`` runs ``cleanup`` and removes it; Restart starts
    the agent in it as it is), :class:`~.worktree.WorktreeError` for git's refusals."""
    target = planned.path
    files = await asyncio.to_thread(named_files, config) if config is not None and config.commands else {}
    if config is not None and not await confirm(agent, config, target, journal, confirmations, files=files):
        raise SetupFailed(f"the worktree commands of {config.file} were not allowed: nothing was made or run, "
                          f"the agent was not started")
    await agent_worktrees.make(agent, planned, base)
    if config is None:
        return
    worktree = agent.worktree
    assert worktree is not None
    inside = target / start_folder.relative_to(planned.repo) if start_folder is not None else target
    if config.copy:
        done = await copy_paths(config, worktree, inside)
        if done.copied:
            agent.conversation.add_notice(f"Copied into the worktree: {', '.join(done.copied)} (from {config.folder}; "
                                          f"ignored by git in the worktree)")
        if done.kept:
            agent.conversation.add_notice(f"Already in the worktree, left as git checked them out: "
                                          f"{', '.join(done.kept[:10])}" + (" …" if len(done.kept) > 10 else ""))
        if done.missing:
            agent.conversation.add_notice(f"Not copied, missing in {config.folder}: {', '.join(done.missing)} "
                                          f"(listed in {config.file})", level="warning")
        _journal(journal, agent, "Output", f"worktree copy: {len(done.copied)} copied, missing: "
                 f"{', '.join(done.missing) or 'none'}")
    if config.setup is None:
        return
    ran = await asyncio.to_thread(named_files, dataclasses.replace(config, folder=inside, cleanup=None))
    changed = [rel for rel, named in ran.items() if rel not in files or files[rel].sha256 != named.sha256]
    if changed:  # what runs is what the card showed: the worktree's copy (its commit) must be those bytes
        raise SetupFailed(f"worktree setup not run: {', '.join(changed)} in the worktree is not the file you "
                          f"confirmed in {config.folder} (uncommitted changes there?). The agent was not started; "
                          f"the worktree {target} is kept (`%escouade discard {agent.name} --force` removes it)")
    result = await run_command(agent, "setup", config.setup, inside, timeout=config.timeout)
    _say(agent, journal, result, inside)
    if not result.ok:
        tail = result.last_lines(3).replace("\n", " ⏎ ")
        raise SetupFailed(f"worktree setup {result.verdict}: {config.setup!r}"
                          + (f"; last lines: {tail}" if tail else "")
                          + f". The agent was not started; the worktree {target} is kept "
                            f"(`%escouade discard {agent.name} --force` removes it)")


async def cleanup(agent: WorktreeAgent, journal: Journal | None = None, *,
                  confirmations: Confirmations | None = None) -> CommandResult | None:
    """Before ``agent``'s worktree is discarded: read ``.escouade.yml`` of the folder the
    agent was started from (in the main worktree, never the worktree's copy, which the
    agent may have edited) and run its ``cleanup`` in the agent's folder of the worktree —
    only if the user confirmed that exact command for that folder, and the files it names
    (:func:`named_files`) are in the worktree as you confirmed them in the folder; else it is
    said and not run. Its failure is said (exit code, last lines); the discard goes on either way (a
    cleanup is best effort: a worktree that cannot be removed because its cleanup failed
    would be worse). None when nothing ran."""
    from ...manifest.project import read_worktree_config

    worktree = agent_worktrees.worktree_of(agent)
    if not agent.cwd.is_relative_to(worktree.path):
        return None
    start_folder = worktree.repo / agent.cwd.relative_to(worktree.path)
    try:
        config = await asyncio.to_thread(read_worktree_config, start_folder)
    except ProjectFileError as exc:
        agent.conversation.add_notice(f"Worktree cleanup not run: {exc}", level="warning")
        return None
    if config is None or config.cleanup is None:
        return None
    confirmations = confirmations or Confirmations()
    only = dataclasses.replace(config, setup=None)
    files = await asyncio.to_thread(named_files, only)
    if not await asyncio.to_thread(confirmations.confirmed, config.folder, {"cleanup": config.cleanup},
                                   {rel: named.sha256 for rel, named in files.items()}):
        agent.conversation.add_notice(f"Worktree cleanup of {config.file} not run: you have not confirmed this "
                                      f"command for {config.folder} (it changed since, or was never allowed)",
                                      level="warning", detail=config.cleanup)
        _journal(journal, agent, "Output", f"worktree cleanup not run (not confirmed): {config.cleanup}")
        return None
    if not agent.cwd.is_dir():
        return None
    there = await asyncio.to_thread(named_files, dataclasses.replace(only, folder=agent.cwd))
    changed = [rel for rel, named in there.items() if rel not in files or files[rel].sha256 != named.sha256]
    if changed:  # the worktree's copy is the agent's to change: only the file you confirmed runs
        agent.conversation.add_notice(f"Worktree cleanup of {config.file} not run: {', '.join(changed)} in the "
                                      f"worktree is not the file you confirmed in {config.folder}",
                                      level="warning", detail=config.cleanup)
        _journal(journal, agent, "Output", f"worktree cleanup not run (its file changed): {config.cleanup}")
        return None
    result = await run_command(agent, "cleanup", config.cleanup, agent.cwd, timeout=config.timeout)
    _say(agent, journal, result, agent.cwd)
    return result


def refuse_worktree(config: WorktreeSetup | None) -> str | None:
    """The one line that refuses ``--worktree`` when ``config`` says ``worktree: false``, else None."""
    if config is not None and not config.allowed:
        return (f"{config.file} says `worktree: false`: agents of this folder do not work in a git worktree; "
                f"start it without --worktree")
    return None

