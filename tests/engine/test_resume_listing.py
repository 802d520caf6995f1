"""``%escouade resume`` with no name (issue 16): per resumable agent, when its transcript
was last written and its first prompt, read from the files' heads only, in a thread."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

from escouade_nb.engine.resume import resumable_text
from escouade_nb.engine.squad import Squad
from escouade_nb.wire import transcript as tr
from transcript_files import SETUP, _line, _prompt, _write




def test_each_agent_lists_its_newest_transcript_with_its_last_write_and_first_prompt(tmp_path: Path) -> None:
    when = time.mktime((2026, 12, 1, 14, 3, 0, 0, 0, -1))  # local time
    _write(tmp_path / "a-old.jsonl", *SETUP, _prompt(1, "an older session"), when=when - 3600, agent="a")
    newest = _write(tmp_path / "a-new.jsonl", *SETUP,
                    _prompt(1, "[escouade] You have no tool to ask the user a question…",  # our preamble: not hers
                            "Please   edit\nnotes.txt and then tell me everything you changed, line by line"),
                    _prompt(2, "a later prompt"), when=when, agent="a")
    _write(tmp_path / "b.jsonl", *SETUP, when=when, agent="b")  # never prompted
    (tmp_path / "broken.jsonl").write_text("not json\n")

    found = tr.summaries(tmp_path)
    assert [(s.name, s.path) for s in found] == [("a", newest), ("b", tmp_path / "b.jsonl")]
    a, b = found
    assert a.written == when and a.written_text == "2026-12-01 14:03"
    # one line, cut to 60 characters with "…"
    assert a.first_prompt == "Please edit notes.txt and then tell me everything you chang…"
    assert len(a.first_prompt) == tr.PROMPT_CHARS and b.first_prompt is None
    assert resumable_text(found).splitlines() == [
        "Resumable agents:",
        f"  a              2026-12-01 14:03  “Please edit notes.txt and then tell me everything you chang…”  {newest}",
        f"  b              2026-12-01 14:03  (no prompt)  {tmp_path / 'b.jsonl'}",
    ]
    assert resumable_text([]) == "No transcript to resume from."


def test_the_first_prompt_is_the_oldest_one_across_restarts_and_rotation(tmp_path: Path) -> None:
    first = _write(tmp_path / "c-1.jsonl", *SETUP, agent="c")
    (tmp_path / "c-1.jsonl.1").write_text(_prompt(1, "rotated away, still the first") + "\n")  # older part
    _write(tmp_path / "c-1.jsonl.2", *SETUP, agent="c")  # the oldest part: the header, no prompt yet
    after_restart = _write(tmp_path / "c-2.jsonl", *SETUP, _prompt(1, "after the restart"), agent="c",
                           previous=str(first))
    os.utime(after_restart, (time.time() + 10, time.time() + 10))
    (s,) = tr.summaries(tmp_path)
    assert s.path == after_restart and s.first_prompt == "rotated away, still the first"
    # a fork's conversation so far, sent with its first prompt, is not the prompt
    forked = _write(tmp_path / "d.jsonl", _prompt(1, "You are continuing a conversation …\n\n--- end of the earlier "
                                                     "conversation; my next message follows. ---", "go on"),
                    agent="d")
    assert tr.first_prompt(forked) == "go on"


def test_only_the_head_of_a_big_transcript_is_read(tmp_path: Path) -> None:
    filler = [_line("in", msg={"jsonrpc": "2.0", "method": "session/update", "params": {"pad": "y" * 1000}})] * 400
    path = _write(tmp_path / "big.jsonl", *filler, _prompt(1, "far down"), agent="big")
    assert path.stat().st_size > tr.HEAD_BYTES
    assert tr.first_prompt(path) is None  # beyond the head: not looked for
    assert tr.first_prompt(path, limit=path.stat().st_size) == "far down"


def test_the_magic_reads_them_in_a_thread_and_leaves_out_running_agents(tmp_path: Path, monkeypatch) -> None:
    from escouade_nb.engine import listing

    monkeypatch.setenv("ESCOUADE_NB_TRANSCRIPTS_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # the notebook's folder: the agents worked in it
    _write(tmp_path / "gone.jsonl", _prompt(1, "hello"), agent="gone", cwd=str(tmp_path))
    _write(tmp_path / "busy.jsonl", _prompt(1, "busy"), agent="busy", cwd=str(tmp_path))
    threads = []
    real = listing.histories

    def spy(*args):
        threads.append(threading.current_thread() is threading.main_thread())
        return real(*args)
    monkeypatch.setattr(listing, "histories", spy)

    class Running:
        status = "idle"

    async def main():
        squad = Squad()
        squad.agents["busy"] = Running()  # a running agent of that name: not resumable
        got = []
        await squad.resumable_soon(lambda found, error: got.append((found, error)))
        return got, squad.resumable_summaries()

    got, now = asyncio.run(main())
    ((found, error),) = got
    assert error is None and [h.name for h in found.here] == ["gone"] and found.here[0].first_prompt == "hello"
    assert [h.name for h in now.here] == ["gone"]
    assert threads == [False, True]  # the magic's read: off the loop's thread
