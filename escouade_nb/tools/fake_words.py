"""The fake agent's words: its name and version, the words of a prompt it understands
(the scenarios' patterns, see the table in :mod:`escouade_nb.tools.fake_agent`) and the
text it writes (prose, Python, numbered chunks). No ACP here: ``--version`` imports only
this module.

Deterministic: the same prompt gives the same text.
"""

from __future__ import annotations

import re
import sys

AGENT_NAME = "escouade-fake-agent"
AGENT_VERSION = "0.1.0"

EDIT_MARKER = "Edited by the fake agent.\n"
DEFAULT_FILE = "notes.txt"
FLOOD_BYTES = 2 * 1024 * 1024
SLOW_TICKS = 50
SLOW_DELAY = 0.1
CHUNK_WIDTH = 40

_CHUNKS_RE = re.compile(r"chunks\s+(\d+)(?:\s+of\s+(\d+))?", re.IGNORECASE)
_RATE = r"\s+at\s+(\d+(?:\.\d+)?)\s*/\s*s\b"
_STREAM_RE = re.compile(r"\bstream\s+(\d+)\s+of\s+(\d+)" + _RATE, re.IGNORECASE)
_STREAM_CODE_RE = re.compile(r"\bstream\s+code\s+(\d+)" + _RATE, re.IGNORECASE)
CODE_CHUNK = 20
# words for the ``stream`` scenarios' prose and code, most frequent first (drawn Zipf-like from a
# seeded generator, so the text compresses about as well as English or Python does, ~3x with zlib)
_WORDS = tuple("""the of and to a in is that for it as with was on be by this are from or at an not have which
but we can all one has their more when will there been if would its so what about into other only out new some
time these two may then do first any like now such our over also after most where through way between many
well being because those while should each just very under both last same since during without another might
agent notebook cell kernel data frame column row value plot trend result model test file function change run
summary table index series chart error output input reader writer token window buffer session prompt reply
branch commit review patch build cache query schema record field report metric sample batch epoch weight layer
shape array vector matrix graph node edge path folder module package version config option flag mode card
reads writes shows loads keeps drops finds checks counts sorts joins splits merges groups filters maps plots
fast slow large small early late clear short long new old simple careful empty full open closed stable""".split())
_CODE_VERBS = ("load", "parse", "scale", "merge", "split", "count", "filter", "render", "check", "build", "read",
               "write", "group", "sort", "clean", "score", "fetch", "store", "update", "compare")
_CODE_NOUNS = ("rows", "frame", "values", "records", "batch", "table", "cells", "tokens", "paths", "items",
               "scores", "labels", "columns", "samples", "weights", "options", "results", "entries")
_QUIET_RE = re.compile(r"\bgo\s+quiet\s+(\d+(?:\.\d+)?)\s*s\b", re.IGNORECASE)
SILENT_WORDS = "Looking into it…"
"""What ``go silent`` and ``go quiet N s`` say before their silence."""
_RUN_RE = re.compile(r"\brun\s+(.+)", re.IGNORECASE)
# A token "looks like a file name" when it ends in a dot and an extension.
_FILE_RE = re.compile(r"^[\w./\\~-]*\w\.[A-Za-z0-9]{1,10}$")
_TOKEN_STRIP = "`'\"()[]{}<>,;:!?"



def _log(line: str) -> None:
    """Write one diagnostic line to stderr (never stdout)."""
    sys.stderr.write(f"fake agent: {line}\n")
    sys.stderr.flush()


def _split(text: str, pieces: int) -> list[str]:
    """Split ``text`` into at most ``pieces`` non-empty, contiguous parts."""
    if not text:
        return []
    pieces = max(1, min(pieces, len(text)))
    size, extra = divmod(len(text), pieces)
    out: list[str] = []
    start = 0
    for i in range(pieces):
        end = start + size + (1 if i < extra else 0)
        out.append(text[start:end])
        start = end
    return out


def _chunk_text(i: int, width: int = CHUNK_WIDTH) -> str:
    """The i-th chunk of the ``chunks N [of W]`` scenario: exactly ``width`` (≥ 8)
    characters, default 40, ending in a newline."""
    head = f"{i:05d} "
    return (head + "x" * width)[: width - 1] + "\n"


def _prose(size: int) -> str:
    """``size`` characters of prose: words and spaces, sentences of 6–18 words, a blank line
    every ~400 characters (so a markdown view sees paragraphs). Deterministic."""
    import random

    rng = random.Random(size)
    weights = [1 / (rank + 1) for rank in range(len(_WORDS))]
    out: list[str] = []
    total = para = 0
    while total < size:
        words = rng.choices(_WORDS, weights, k=rng.randint(6, 18))
        if len(words) > 9 and rng.random() < 0.4:
            words[rng.randint(3, len(words) - 3)] += ","
        sentence = " ".join(words).capitalize() + "."
        para += len(sentence) + 1
        if para >= 400:
            sentence += "\n\n"
            para = 0
        else:
            sentence += " "
        out.append(sentence)
        total += len(sentence)
    return "".join(out)[:size]


def _python_code(size: int) -> str:
    """About ``size`` bytes (ASCII) of plain Python that compiles: small functions of varied
    names, arguments and bodies, then comment lines up to the size, in a fenced ``python``
    block (the fence counts). Deterministic."""
    import random

    rng = random.Random(size)
    head, tail = "```python\n", "```\n"
    room = size - len(head) - len(tail)
    parts: list[str] = []
    while True:
        verb, (noun, other) = rng.choice(_CODE_VERBS), rng.sample(_CODE_NOUNS, 2)
        name, limit, scale = f"{verb}_{noun}", rng.randint(2, 500), round(rng.uniform(0.1, 9.9), 2)
        shape = rng.randrange(3)
        if shape == 0:
            body = (f"    result = []\n"
                    f"    for index, item in enumerate({noun}):\n"
                    f"        if item is not None and index < {limit}:\n"
                    f"            result.append(item * {scale})\n"
                    f"    return result\n")
        elif shape == 1:
            body = (f"    seen = {{}}\n"
                    f"    for key, {other[:-1]} in {noun}.items():\n"
                    f"        seen.setdefault(key, []).append({other[:-1]})\n"
                    f"    return {{k: len(v) for k, v in seen.items() if len(v) > {limit % 7}}}\n")
        else:
            body = (f"    total = sum(x for x in {noun} if x > {scale})\n"
                    f"    if total > {limit}:\n"
                    f"        raise ValueError(f\"{verb} {noun}: {{total}} > {limit}\")\n"
                    f"    return total / max(1, len({noun}))\n")
        doc = " ".join(rng.choices(_WORDS, k=rng.randint(5, 14))).capitalize()
        note = " ".join(rng.choices(_WORDS, k=rng.randint(4, 10)))
        block = (f"def {name}({noun}, {other}=None):\n"
                 f"    \"\"\"{doc}.\"\"\"\n"
                 f"    # {note}\n"
                 f"{body}\n\n")
        if len(block) > room:
            break
        parts.append(block)
        room -= len(block)
    while room >= 3:
        line = ("# " + " ".join(rng.choices(_WORDS, k=12)))[: min(room, 64) - 1].rstrip() + "\n"
        parts.append(line)
        room -= len(line)
    return head + "".join(parts) + tail


def find_file_name(text: str) -> str:
    """First whitespace-separated token that looks like a file name, else ``notes.txt``."""
    for raw in text.split():
        token = raw.lstrip(_TOKEN_STRIP).rstrip(_TOKEN_STRIP + ".")
        if _FILE_RE.match(token):
            return token
    return DEFAULT_FILE
