"""Git for the tests' own set-up and checks (never on a kernel's loop): one identity and one
``git`` runner for every test that makes a repository in a temp folder."""

from __future__ import annotations

import os
import subprocess

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
"""The author and committer of the tests' commits (set with monkeypatch, or passed to a kernel)."""


def git(*args: str, cwd) -> str:
    """``git ARGS`` in ``cwd`` with :data:`GIT_ENV`: its stdout; CalledProcessError when it fails."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout
