"""What a hostile agent writes into a git repository it can write, so that the kernel's own git
(which runs outside any sandbox) would run its commands: filters, fsmonitor, pager, external
diff and textconv, merge drivers, signing programs, an ``include.path``, hooks, attributes in
``.gitattributes`` and ``info/attributes``, a worktree's ``config.worktree`` and ``.git`` file.

Every planted command, when run, creates a file in the marks folder named after the attack:
a test asserts the folder stays empty. Runnable as a program too, so that a scripted agent plants
them with its own process (inside its sandbox): ``python git_attacks.py GIT_DIR WORK MARKS
[CONFIG_NAME] [--best-effort]`` (``--best-effort``: what the sandbox refuses is skipped and
printed, ``REFUSED=[paths]``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HOOKS = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-checkout", "post-merge",
         "pre-merge-commit", "pre-rebase", "post-rewrite", "reference-transaction", "post-index-change",
         "pre-auto-gc", "pre-push", "fsmonitor-watchman")


def _cmd(marks: Path, name: str, passthrough: bool = True) -> str:
    """A shell line that leaves ``marks/name`` (and, as a filter, passes its input through)."""
    then = "cat" if passthrough else "true"
    return f"sh -c 'touch {marks}/{name} && {then}'"  # no ';': it starts a comment in a config file


def config_text(marks: Path, hooks: Path, include: Path) -> str:
    """The configuration an agent writes (``.git/config``, a ``config.worktree``)."""
    c = lambda name, p=True: _cmd(marks, name, p)  # noqa: E731
    return "\n".join([
        "[core]",
        f"\tfsmonitor = {c('fsmonitor', False)}",
        f"\tpager = {c('pager')}",
        f"\thooksPath = {hooks}",
        f"\tattributesFile = {hooks}/attributes",
        f"\teditor = {c('editor', False)}",
        f"\tsshCommand = {c('ssh', False)}",
        f"\taskPass = {c('askpass', False)}",
        "\tautocrlf = true",
        f'[filter "esc"]\n\tclean = {c("filter-clean")}\n\tsmudge = {c("filter-smudge")}',
        f'[filter "proc"]\n\tprocess = {c("filter-process", False)}',
        f"[diff]\n\texternal = {c('diff-external', False)}",
        f'[diff "esc"]\n\ttextconv = {c("diff-textconv")}\n\tcommand = {c("diff-command", False)}',
        f'[merge "esc"]\n\tdriver = {c("merge-driver", False)}',
        f"[gpg]\n\tprogram = {c('gpg', False)}",
        "[commit]\n\tgpgSign = true",
        f"[include]\n\tpath = {include}",
        f"[pager]\n\tstatus = {c('pager-status')}\n\tdiff = {c('pager-diff')}",
        f"[sequence]\n\teditor = {c('sequence-editor', False)}",
        f"[credential]\n\thelper = {c('credential', False)}",
        ""])


ATTRIBUTES = "* filter=esc diff=esc merge=esc\n*.py filter=proc\n*.inc filter=inc\n"


def plant(git_dir: Path, work: Path, marks: Path, *, config_name: str = "config",
          refused: list[str] | None = None) -> None:
    """Write every attack: into ``git_dir`` (its ``config_name`` — ``config``, or a worktree's
    ``config.worktree`` —, ``hooks/``, ``info/attributes``, an included file) and ``work`` (its
    ``.gitattributes``, a hooks folder of its own). The repository's files the agent may
    write; nothing outside ``git_dir`` and ``work``. ``refused`` (a list): each write is tried
    on its own and the path of each one refused (``OSError``: a sandbox keeps ``.git/config``
    and ``.git/hooks`` read-only) appended to it, the others still made; else the first
    refusal raises."""
    git_dir, work, marks = Path(git_dir), Path(work), Path(marks)

    def attempt(path: Path, write) -> None:
        if refused is None:
            write()
            return
        try:
            write()
        except OSError:
            refused.append(str(path))

    # the index carries an fsmonitor extension (made with a harmless hook): a git that reads the
    # index with the planted core.fsmonitor then runs it, even `ls-files`
    subprocess.run(["git", "-c", "core.fsmonitor=true", "update-index", "--fsmonitor"], cwd=work,
                   env={**os.environ, "GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(work)},
                   capture_output=True, check=False)
    own_hooks = work / ".hooks"
    include = git_dir / "evil.inc"
    for folder in (git_dir / "hooks", own_hooks):
        attempt(folder, lambda folder=folder: folder.mkdir(parents=True, exist_ok=True))
        for hook in HOOKS:
            path = folder / hook

            def hook_file(path: Path = path, hook: str = hook, folder: Path = folder) -> None:
                path.write_text(f"#!/bin/sh\ntouch {marks}/hook-{hook}-{folder.name}\nexit 0\n")
                path.chmod(0o755)
            attempt(path, hook_file)
    attempt(own_hooks / "attributes", lambda: (own_hooks / "attributes").write_text(ATTRIBUTES))
    attempt(include, lambda: include.write_text(f'[filter "inc"]\n\tclean = {_cmd(marks, "include-filter")}\n'
                                                f'\tsmudge = {_cmd(marks, "include-smudge")}\n'
                                                f"[core]\n\tfsmonitor = {_cmd(marks, 'include-fsmonitor', False)}\n"))
    config = git_dir / config_name
    old = config.read_text() if config.exists() else ""
    attempt(config, lambda: config.write_text(old + "\n" + config_text(marks, own_hooks, include)))
    attempt(git_dir / "info", lambda: (git_dir / "info").mkdir(exist_ok=True))
    attempt(git_dir / "info" / "attributes", lambda: (git_dir / "info" / "attributes").write_text(ATTRIBUTES))
    (work / ".gitattributes").write_text(ATTRIBUTES)
    (work / "script.py").write_text("print('a file a filter=proc names')\n")
    (work / "data.inc").write_text("a file the included filter names\n")


def ran(marks: Path) -> list[str]:
    """The attacks that ran (the marks left)."""
    return sorted(os.listdir(marks)) if Path(marks).is_dir() else []


if __name__ == "__main__":
    best_effort = "--best-effort" in sys.argv  # (a sandboxed agent: what its sandbox refuses, listed)
    words = [a for a in sys.argv[1:] if a != "--best-effort"]
    target, tree, where = (Path(a) for a in words[:3])
    refusals: list[str] | None = [] if best_effort else None
    plant(target, tree, where, config_name=words[3] if len(words) > 3 else "config", refused=refusals)
    if refusals is not None:
        print("REFUSED=" + json.dumps(refusals))
    print("planted")
