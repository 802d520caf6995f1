"""The kernel's own git: the one runner every git of the package goes through (:func:`git`), and
the two ways it runs over a folder an agent can write (:class:`PrivateRepo`, :class:`WorktreeGit`).

Why. git runs what a repository's own files say: ``.git/config`` (filters, ``core.fsmonitor``,
``diff.external``, ``core.pager``, ``gpg.program``, ``include.path``…), ``.git/hooks/*``,
``.gitattributes`` (naming a filter or diff driver), and a worktree's ``.git`` file and admin
folder. A ``--sandbox`` agent may write all of these in its folder; the kernel's git runs
*outside* the sandbox (a checkpoint before the agent's next turn, the review's listing, a merge):
run there, an agent-written filter would be code outside the sandbox. ``-c core.hooksPath=…``
style overrides do not close that (an ``include.path``, a ``filter.<any>.clean`` of any name, a
diff driver), so the kernel's git reads a configuration the agent cannot touch instead:

* **Every call** (:func:`git`): never prompts, C locale, no pager (output is piped), and the
  caller's ``GIT_DIR`` / ``GIT_WORK_TREE`` / ``GIT_INDEX_FILE`` / ``GIT_CONFIG_*`` of the kernel's
  own environment dropped (only what the caller passes counts).
* **The kernel's bookkeeping over the agent's folder** — checkpoints
  (:mod:`.review.checkpoints`) and the review's listing (:mod:`.review.file_review`): :class:`PrivateRepo`, a
  ``GIT_DIR`` the kernel owns outside the folder (under :func:`state_dir`), with
  ``GIT_WORK_TREE`` = the repository's top and a private ``GIT_INDEX_FILE`` seeded from the
  user's index *bytes* (its stat cache spares hashing every file; tracked files stay tracked).
  ``GIT_CONFIG_NOSYSTEM=1``, ``GIT_CONFIG_GLOBAL=/dev/null``, ``GIT_ATTR_NOSYSTEM=1``: the only
  configuration read is the private repository's ``config``, written by the kernel (no hooks —
  ``core.hooksPath`` an empty folder of ours —, no fsmonitor, no filters or drivers defined, no
  ``autocrlf``; the user's global ``core.excludesFile`` is copied into it as a value, and the
  repository's ``info/exclude`` patterns are copied into the private one, so the ignored set is
  the user's). Its ``info/attributes`` says ``* -text -filter -diff -merge -ident
  -working-tree-encoding``: it has precedence over the work tree's ``.gitattributes``, so no
  attribute the agent writes converts bytes or names a driver (an undefined driver would be a
  pass-through anyway). Objects: ``objects/info/alternates`` names the user's object store —
  read, never written (the blobs git has are not hashed or copied again: a checkpoint of a
  2,000-file repository stays about as fast as before); what a checkpoint adds goes into the
  private store, and its refs (``refs/escouade/checkpoints/…``) live in the private repository.
  The user's repository is found by walking up to a ``.git`` (a folder, or a ``gitdir:`` file,
  read as data), never by asking git inside it (its ``core.worktree`` would pick the folder).
  Reading objects and ignore patterns the agent wrote is reading data: nothing of it runs.
* **Operations in an agent's git worktree** (:class:`WorktreeGit`: add -N, status, commit, diff,
  rebase): the repository is never discovered from the worktree's ``.git`` file (the agent can
  point it at a gitdir it made): ``GIT_DIR`` is a *shadow admin folder* the kernel owns (its
  ``commondir`` = the repository's common git dir, its ``HEAD`` = ``ref: refs/heads/<the
  recorded branch>``, its ``config.worktree`` written by the kernel), ``GIT_WORK_TREE`` the
  recorded worktree path and ``GIT_INDEX_FILE`` the worktree's own index (data). So the
  worktree's admin folder ``.git/worktrees/NAME`` — writable by a sandboxed agent — is never
  read as configuration (its ``config.worktree``) nor as HEAD; its ``gitdir`` and ``commondir``
  are checked to be what git wrote when the kernel made the worktree, else the operation is
  refused in one line. The configuration read there is the repository's common ``config``,
  hooks and ``info/attributes`` and the user's global and system files: the user's own, which
  a sandboxed agent cannot write (its bubblewrap binds only its worktree, its admin folder,
  the object store and its branch's ref folders writable); an attribute in the worktree can
  only name a driver the user defined.
* **Operations for the user in the user's main worktree** (``worktree add``/``remove``/``list``,
  the merge into the user's branch, ``branch -D``): :func:`in_main` — ``GIT_DIR`` and
  ``GIT_WORK_TREE`` explicit, from what the kernel recorded; the user's own config and hooks
  (not writable by a sandboxed agent), never an agent's ``config.worktree`` (git reads only
  the main worktree's).

Errors are :class:`WorktreeError` (one line for the user).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from .._errors import EscouadeError

__all__ = ["GitRepo", "PrivateRepo", "WorktreeError", "WorktreeGit", "find_repository", "git", "in_main",
           "state_dir", "ISOLATED", "PRIVATE_ATTRIBUTES"]

PRIVATE_ATTRIBUTES = "* -text -filter -diff -merge -ident -working-tree-encoding\n"
"""The private repository's ``info/attributes``: no attribute of the work tree converts bytes or names a driver."""
ISOLATED = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1",
            "GIT_NO_REPLACE_OBJECTS": "1"}
"""What keeps the system and global files out of a :class:`PrivateRepo`'s git."""
_DROPPED = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
            "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
            "GIT_NAMESPACE", "GIT_EXTERNAL_DIFF", "GIT_PAGER", "GIT_EDITOR", "GIT_SSH", "GIT_SSH_COMMAND",
            "GIT_ASKPASS", "GIT_ATTR_SOURCE")


class WorktreeError(EscouadeError):
    """A worktree request git refused or that would lose work; the message is one line."""


async def git(*args: str, cwd: str | Path, check: bool = True,
              env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run ``git ARGS`` in ``cwd`` as an async subprocess: ``(returncode, stdout, stderr)``.
    ``check``: :class:`WorktreeError` (git's ``fatal:``/``error:`` line, else its first line) on a
    non-zero exit. ``env``: the repository to use (``GIT_DIR``, ``GIT_WORK_TREE``,
    ``GIT_INDEX_FILE``… — see the module); the kernel's own ``GIT_*`` variables that would pick
    another repository or configuration are dropped. Never prompts (``GIT_TERMINAL_PROMPT=0``),
    no pager, C locale so messages parse."""
    base = {k: v for k, v in os.environ.items() if k not in _DROPPED and not k.startswith("GIT_CONFIG_KEY_")
            and not k.startswith("GIT_CONFIG_VALUE_")}
    env = {**base, **(env or {}), "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "PAGER": "cat",
           "LC_ALL": "C", "LANGUAGE": "C"}
    if not Path(cwd).is_dir():  # a stat: else the spawn's error would read "no git"
        raise WorktreeError(f"{cwd} does not exist (any more): git cannot run there")
    try:
        proc = await asyncio.create_subprocess_exec("git", *args, cwd=str(cwd), env=env,
                                                    stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except FileNotFoundError:
        raise WorktreeError("git is not installed (no `git` on PATH): worktrees need it") from None
    try:
        out, err = await proc.communicate()
    except BaseException:  # cancelled: the git process does not outlive its caller; SIGTERM, so that
        if proc.returncode is None:  # git removes its lock files (index.lock) on the way out
            proc.terminate()
            await asyncio.shield(proc.wait())
        raise
    text, errors = out.decode(errors="replace"), err.decode(errors="replace")
    code = proc.returncode
    assert code is not None  # communicate() returned: the process has exited
    if check and code != 0:
        lines = [ln for ln in errors.splitlines() if ln.strip()]
        # git's own error line, not a progress line before it ("Preparing worktree …")
        line = next((ln for ln in lines if ln.startswith(("fatal:", "error:"))), lines[0] if lines else
                    f"exit {code}")
        raise WorktreeError(f"git {_verb(args)} failed in {cwd}: {line.strip()}")
    return code, text, errors


def _verb(args: tuple[str, ...]) -> str:
    """The git command of ``args``, past any ``-c KEY=VALUE``."""
    it = iter(args)
    for a in it:
        if a == "-c":
            next(it, None)
            continue
        return a
    return "?"


def state_dir() -> Path:
    """Where the kernel's private repositories and index files live: ``$ESCOUADE_NB_CHECKPOINTS_DIR``,
    else ``checkpoints`` beside the transcripts' folder when ``$ESCOUADE_NB_TRANSCRIPTS_DIR``
    names one, else ``<jupyter data dir>/escouade_nb/checkpoints``."""
    env = os.environ.get("ESCOUADE_NB_CHECKPOINTS_DIR")
    if env:
        return Path(env).expanduser()
    transcripts = os.environ.get("ESCOUADE_NB_TRANSCRIPTS_DIR")
    if transcripts:
        return Path(transcripts).expanduser() / "checkpoints"
    from jupyter_core.paths import jupyter_data_dir
    return Path(jupyter_data_dir()) / "escouade_nb" / "checkpoints"


def _name_part(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") or "folder"


# -- the user's repository, found without git ---------------------------------------------------------

@dataclass(frozen=True)
class GitRepo:
    """A repository found by :func:`find_repository`: ``top`` (its work tree's top), ``git_dir``
    (its ``.git`` folder, or the folder a ``gitdir:`` file names), ``common_dir`` (where its
    objects, refs and config are: ``git_dir``'s ``commondir``, else ``git_dir``)."""

    top: Path
    git_dir: Path
    common_dir: Path

    @property
    def index(self) -> Path:
        return self.git_dir / "index"

    @property
    def objects(self) -> Path:
        return self.common_dir / "objects"


def _read_line(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(4096).decode("utf-8", "surrogateescape").strip()
    except OSError:
        return None


def find_repository(folder: str | Path) -> GitRepo | None:
    """The repository holding ``folder``: the nearest ``.git`` found walking up (a folder, or a
    ``gitdir: PATH`` file), read as files — git is not run inside it, so nothing of its config
    (``core.worktree``…) is read. None outside any repository. A main ``.git`` folder that
    holds a ``commondir`` file is refused (:class:`WorktreeError`, one line): git never writes
    one there (only in a worktree's admin folder, which the kernel finds through its own
    records), so one there was planted, to send git to another repository's config and hooks.
    A few stats and reads."""
    here = Path(folder).expanduser().resolve()
    for top in (here, *here.parents):
        dot = top / ".git"
        if dot.is_dir():
            git_dir = dot
            if (dot / "commondir").exists() or (dot / "commondir").is_symlink():
                raise WorktreeError(f"{dot} holds a commondir file, which git never writes in a main repository's "
                                    f".git (it was planted, to make git read another folder's config and hooks): "
                                    f"the kernel runs no git there; remove {dot / 'commondir'} if you did not put it")
        elif dot.is_file():
            line = _read_line(dot) or ""
            if not line.startswith("gitdir:"):
                continue
            git_dir = (top / line[len("gitdir:"):].strip()).resolve()
        else:
            continue
        if not (git_dir / "HEAD").exists():
            continue
        common = _read_line(git_dir / "commondir")
        common_dir = (git_dir / common).resolve() if common else git_dir
        return GitRepo(top, git_dir, common_dir)
    return None


# -- the kernel's private repository over a folder ------------------------------------------------------

_global_excludes: dict[tuple[str, ...], str] = {}


async def _user_excludes_file() -> str:
    """The user's global ``core.excludesFile`` (a value of ~/.gitconfig, the user's file), or ""
    (git's default, ``$XDG_CONFIG_HOME/git/ignore``, then applies by itself). Asked once per
    home and global config file."""
    key = tuple(os.environ.get(k, "") for k in ("HOME", "XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL"))
    if key not in _global_excludes:
        code, out, _ = await git("config", "--global", "--path", "--get", "core.excludesFile", cwd="/",
                                 check=False, env={"GIT_CONFIG_NOSYSTEM": "1"})
        _global_excludes[key] = out.strip() if code == 0 else ""
    return _global_excludes[key]


def _config_text(git_dir: Path, excludes: str, object_format: str = "sha1") -> str:
    def quoted(v: str) -> str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    lines = ["# Written by escouade_nb: the kernel's private repository over a folder an agent may write.",
             "# The only configuration its git reads (no system or global files).",
             "[core]", f"\trepositoryformatversion = {0 if object_format == 'sha1' else 1}", "\tbare = true",
             "\tfilemode = true", "\tsymlinks = true",
             "\tlogallrefupdates = false", "\tautocrlf = false", "\tsafecrlf = false", "\tfsmonitor = false",
             "\tuntrackedCache = false", "\tsplitIndex = false", "\tsparseCheckout = false",
             f"\thooksPath = {quoted(str(git_dir / 'no-hooks'))}", "\tpager = cat", "\tquotePath = false"]
    if excludes:
        lines.append(f"\texcludesFile = {quoted(excludes)}")
    if object_format != "sha1":
        lines += ["[extensions]", f"\tobjectFormat = {object_format}"]
    lines += ["[gc]", "\tauto = 0", "[commit]", "\tgpgSign = false", "[tag]", "\tgpgSign = false",
              ]
    return "\n".join(lines) + "\n"


def _write_if_changed(path: Path, text: str) -> None:
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class PrivateRepo:
    """The kernel's own repository over the work tree ``top`` (see the module): ``git_dir``
    (under :func:`state_dir`, ``shadow/<name>-<hash of top>``), ``source`` (the user's
    :class:`GitRepo` whose objects it borrows and whose index seeds ours, or None outside git).
    :meth:`ensure` makes and (re)writes it; :meth:`env` is the environment of its git."""

    def __init__(self, top: Path, source: GitRepo | None) -> None:
        self.top = Path(top)
        self.source = source
        key = hashlib.sha256(str(self.top.resolve()).encode()).hexdigest()[:16]
        self.git_dir = state_dir() / "shadow" / f"{_name_part(self.top.name)}-{key}"

    @classmethod
    def over(cls, folder: str | Path) -> PrivateRepo:
        """The private repository for ``folder``: over its repository's top when it is in one
        (:func:`find_repository`), else over the folder itself."""
        repo = find_repository(folder)
        return cls(repo.top, repo) if repo is not None else cls(Path(folder).expanduser().resolve(), None)

    async def ensure(self) -> None:
        """Make the private repository if missing, and write what the kernel owns in it (its
        config, ``info/attributes``, ``info/exclude``, ``objects/info/alternates``) — again each
        time, so nothing else's stays. :class:`WorktreeError` when git cannot make it."""
        if not (self.git_dir / "HEAD").exists():
            await asyncio.to_thread(self.git_dir.parent.mkdir, parents=True, exist_ok=True)
            form: list[str] = []
            if self.source is not None:  # a SHA-256 repository's objects need a SHA-256 private repository
                code, out, _ = await git("config", "--file", str(self.source.common_dir / "config"), "--get",
                                         "extensions.objectFormat", cwd=self.git_dir.parent, check=False,
                                         env=ISOLATED)  # a value read from the file (no include followed)
                if code == 0 and out.strip() in ("sha1", "sha256"):
                    form = [f"--object-format={out.strip()}"]
            await git("init", "-q", "--bare", "--template=", *form, str(self.git_dir), cwd=self.git_dir.parent,
                      env=ISOLATED)
        excludes = await _user_excludes_file()
        await asyncio.to_thread(self._write, excludes)

    def _write(self, excludes: str) -> None:
        d = self.git_dir
        for sub in ("info", "no-hooks", "objects/info"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        try:  # the private repository's own file (git init's, then ours): its object format is kept
            sha256 = re.search(r"(?im)^\s*objectformat\s*=\s*sha256\s*$", (d / "config").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            sha256 = None
        _write_if_changed(d / "config", _config_text(d, excludes, "sha256" if sha256 else "sha1"))
        _write_if_changed(d / "info" / "attributes", PRIVATE_ATTRIBUTES)
        exclude = ""
        if self.source is not None:  # the repository's own patterns (data: they only leave files out), and a
            # linked worktree's own (worktree_setup's excludes of the paths it copied)
            for folder in dict.fromkeys((self.source.common_dir, self.source.git_dir)):
                try:
                    exclude += (folder / "info" / "exclude").read_text(encoding="utf-8", errors="replace") + "\n"
                except OSError:
                    continue
        _write_if_changed(d / "info" / "exclude", exclude)
        alternates = d / "objects" / "info" / "alternates"
        if self.source is not None and self.source.objects.is_dir():
            _write_if_changed(alternates, f"{self.source.objects.resolve()}\n")
        else:
            alternates.unlink(missing_ok=True)

    def env(self, index: Path | None = None) -> dict[str, str]:
        """The environment of this repository's git: :data:`ISOLATED`, ``GIT_DIR``,
        ``GIT_WORK_TREE``, ``GIT_INDEX_FILE`` (``index``, when given)."""
        env = {**ISOLATED, "GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.top)}
        if index is not None:
            env["GIT_INDEX_FILE"] = str(index)
        return env

    async def seed_index(self, index: Path) -> bool:
        """Write ``index`` as a copy of the user's index bytes (read, never written); without
        one (no repository, no index yet), an empty index. True when copied."""
        if self.source is not None:
            try:
                await asyncio.to_thread(shutil.copyfile, self.source.index, index)
                return True
            except OSError:
                pass
        await git("read-tree", "--empty", cwd=self.top, env=self.env(index))
        return False

    async def run(self, *args: str, cwd: Path | None = None, index: Path | None = None, check: bool = True,
                  env: dict[str, str] | None = None) -> tuple[int, str, str]:
        """``git ARGS`` over this repository (in ``cwd``, default the top)."""
        return await git(*args, cwd=cwd or self.top, check=check, env={**(env or {}), **self.env(index)})

    async def list_files(self, folder: Path) -> list[str] | None:
        """The files git lists under ``folder`` (tracked — the user's index —, and untracked not
        ignored), relative to it; None when git fails. Read-only for the user's repository: a
        private copy of its index is used and removed."""
        try:
            await self.ensure()
            scratch = state_dir() / "index"
            await asyncio.to_thread(scratch.mkdir, parents=True, exist_ok=True)
            fd, name = await asyncio.to_thread(tempfile.mkstemp, prefix="review-", dir=scratch)
            os.close(fd)
            index = Path(name)
            try:
                await self.seed_index(index)
                code, out, _ = await self.run("ls-files", "-z", "--cached", "--others", "--exclude-standard",
                                              cwd=folder, index=index, check=False,
                                              env={"GIT_OPTIONAL_LOCKS": "0"})
            finally:
                await asyncio.to_thread(index.unlink, missing_ok=True)
        except (WorktreeError, OSError):
            return None
        if code != 0:
            return None
        return sorted({n for n in out.split("\0") if n})


# -- an agent's worktree -------------------------------------------------------------------------------

def in_main(repo: Path, common_dir: Path | None = None) -> dict[str, str]:
    """The environment of git in the user's main worktree ``repo``: ``GIT_DIR`` (``common_dir``,
    default ``repo/.git``) and ``GIT_WORK_TREE`` explicit. The user's own config and hooks are
    read (see the module)."""
    return {"GIT_DIR": str(common_dir or Path(repo) / ".git"), "GIT_WORK_TREE": str(repo)}


class WorktreeGit:
    """git in an agent's worktree ``path`` on ``branch`` of the repository whose common git dir
    is ``common_dir``; ``admin`` its admin folder (``<common>/worktrees/NAME``). See the module:
    a shadow admin folder of the kernel's is the ``GIT_DIR``; the admin folder's ``gitdir`` and
    ``commondir`` are checked before each use (:class:`WorktreeError`, one line, when an agent
    changed them)."""

    def __init__(self, path: Path, branch: str, common_dir: Path, admin: Path) -> None:
        self.path, self.branch, self.common_dir, self.admin = Path(path), branch, Path(common_dir), Path(admin)
        key = hashlib.sha256(f"{self.admin}\0{self.path}".encode()).hexdigest()[:16]
        self.shadow = state_dir() / "worktrees" / f"{_name_part(self.path.name)}-{key}"

    @staticmethod
    def admin_of(common_dir: Path, path: Path) -> Path | None:
        """The admin folder of the worktree at ``path`` (whose ``gitdir`` names ``path/.git``),
        read right after ``git worktree add`` made it; None when none does."""
        want = (Path(path) / ".git").resolve()
        root = Path(common_dir) / "worktrees"
        try:
            entries = sorted(root.iterdir())
        except OSError:
            return None
        for entry in entries:
            line = _read_line(entry / "gitdir")
            if line and Path(line).resolve() == want:
                return entry
        return None

    def _check(self) -> None:
        """The admin folder is still what git wrote when the kernel made the worktree."""
        gitdir = _read_line(self.admin / "gitdir")
        common = _read_line(self.admin / "commondir")
        want = (self.path / ".git").resolve()
        if gitdir is None or Path(gitdir).resolve() != want or common is None or \
                (self.admin / common).resolve() != self.common_dir.resolve():
            raise WorktreeError(f"the git administration of the worktree {self.path} ({self.admin}) was changed "
                                f"(its gitdir or commondir is not what git wrote): escouade_nb's git will not run "
                                f"there")

    def _write(self) -> None:
        s = self.shadow
        s.mkdir(parents=True, exist_ok=True)
        _write_if_changed(s / "commondir", f"{self.common_dir.resolve()}\n")
        _write_if_changed(s / "gitdir", f"{(self.path / '.git').resolve()}\n")
        _write_if_changed(s / "HEAD", f"ref: refs/heads/{self.branch}\n")
        exclude = self.admin / "info" / "exclude"  # the kernel's per-worktree excludes (worktree_setup), patterns
        text = "# Written by escouade_nb: the only per-worktree config its git reads for this worktree.\n"
        if exclude.is_file():
            text += "[core]\n\texcludesFile = \"" + str(exclude).replace("\\", "\\\\").replace('"', '\\"') + "\"\n"
        _write_if_changed(s / "config.worktree", text)

    async def env(self) -> dict[str, str]:
        """The environment of git in this worktree (checked, shadow admin written)."""
        await asyncio.to_thread(self._check)
        await asyncio.to_thread(self._write)
        return {"GIT_DIR": str(self.shadow), "GIT_WORK_TREE": str(self.path),
                "GIT_INDEX_FILE": str(self.admin / "index")}

    async def run(self, *args: str, check: bool = True) -> tuple[int, str, str]:
        """``git ARGS`` in the worktree (see the class)."""
        return await git(*args, cwd=self.path, check=check, env=await self.env())

    async def aclose(self) -> None:
        """Remove the shadow admin folder (the worktree is gone)."""
        await asyncio.to_thread(shutil.rmtree, self.shadow, True)
