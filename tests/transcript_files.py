"""Hand-written transcript files (``wire/transcript.py``'s JSON lines) for the tests of what
``%escouade resume`` lists: a header, the set-up lines, the prompts, a chosen modification time."""

from __future__ import annotations

import json
import os
from pathlib import Path


def _line(kind: str, **fields) -> str:
    """One transcript line of ``kind`` (``header``, ``out``, ``in``…) with ``fields``."""
    return json.dumps({"t": 1.0, "kind": kind, **fields})


def _prompt(id_: int, *texts: str) -> str:
    """The client's ``session/prompt`` ``id_`` of ``texts``, as written out."""
    blocks = [{"type": "text", "text": t} for t in texts]
    return _line("out", msg={"jsonrpc": "2.0", "id": id_, "method": "session/prompt",
                             "params": {"sessionId": "s1", "prompt": blocks}})


def _write(path: Path, *lines: str, when: float | None = None, **header) -> Path:
    """A transcript at ``path``: its header (``header`` fields), ``lines``; mtime ``when`` (epoch s) if given."""
    path.write_text("\n".join([_line("header", **header), *lines]) + "\n", encoding="utf-8")
    if when is not None:
        os.utime(path, (when, when))
    return path


SETUP = [_line("out", msg={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}),
         _line("in", msg={"jsonrpc": "2.0", "id": 0, "result": {"agentCapabilities": {}, "pad": "x" * 5000}})]
