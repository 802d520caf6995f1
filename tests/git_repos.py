"""Git for the tests' own set-up and checks (never on a kernel's loop): one identity and one
``git`` runner for every test that makes a repository in a temp folder."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
"""The author and committer of the tests' commits (set with monkeypatch, or passed to a kernel)."""


def git(*args: str, cwd) -> str:
    """``git ARGS`` in ``cwd`` with :data:`GIT_ENV`: its stdout; CalledProcessError when it fails."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


def use_git_env(monkeypatch: Any) -> None:
    """:data:`GIT_ENV` set for the length of a test (``monkeypatch``: pytest's fixture)."""
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)


def base_repo(r: Path, files: dict[str, str | bytes], executable: Iterable[str] = ()) -> Path:
    """A repository made at ``r`` on branch ``main``: ``files`` (path in it: text or bytes, its folders
    made) written, the ``executable`` ones of them made executable, all committed as ``base``."""
    r.mkdir(parents=True, exist_ok=True)
    git("init", "-q", "-b", "main", cwd=r)
    for rel, content in files.items():
        path = r / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    for rel in executable:
        (r / rel).chmod(0o755)
    git("add", "-A", cwd=r)
    git("commit", "-qm", "base", cwd=r)
    return r
