"""Worktree creation for a repository of 10,000 files: ``Worktree.create`` (the checks —
a repository, a commit, a clean index, the branch free, the base — then ``git worktree
add``, all as async subprocesses) against ``git worktree add`` alone, in the same run,
interleaved; each worktree is removed (untimed) before the next. Prints JSON.

    python benchmarks/worktree_add.py [--files 10000] [--runs 7] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from escouade_nb.engine.worktrees.worktree import Worktree

ENV = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com", "GIT_COMMITTER_NAME": "b",
       "GIT_COMMITTER_EMAIL": "b@example.com"}


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True)


def make_repo(root: Path, files: int) -> Path:
    repo = root / "big"
    repo.mkdir()
    for i in range(files):
        folder = repo / f"pkg{i // 100:03d}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod{i:05d}.py").write_text(f"VALUE = {i}\n" * 20)
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "base", cwd=repo)
    return repo


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=10_000)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--json", help="write the JSON there too (benchmarks/run.py)")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="escouade-bench-worktree-"))
    try:
        repo = make_repo(root, args.files)
        bare, ours = [], []
        for i in range(args.runs):
            target = root / f"bare{i}"
            t = time.perf_counter()
            git("worktree", "add", "-q", "-b", f"bare{i}", str(target), "main", cwd=repo)
            bare.append(time.perf_counter() - t)
            git("worktree", "remove", "--force", str(target), cwd=repo)

            t = time.perf_counter()
            wt = asyncio.run(Worktree.create(repo, f"agent{i}"))
            ours.append(time.perf_counter() - t)
            asyncio.run(wt.discard(force=True))
        b, o = statistics.median(bare), statistics.median(ours)
        out = json.dumps({"files": args.files, "runs": args.runs, "bare_ms": b * 1e3, "ours_ms": o * 1e3,
                          "bare_range_ms": [min(bare) * 1e3, max(bare) * 1e3],
                          "ours_range_ms": [min(ours) * 1e3, max(ours) * 1e3], "overhead": o / b - 1})
        print(out)
        if args.json:
            Path(args.json).write_text(out)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
