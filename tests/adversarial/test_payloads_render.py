"""Cards drawn within a budget (issue 32, finding B): the hidden characters of megabytes of code are
marked in linear C-level passes, exactly as the per-character definition says; code past
``DRAW_AT_ONCE`` is drawn in pieces on a running loop and then shown whole, the same HTML as drawn at
once; a saved form keeps its start, its length and its SHA-256."""

from __future__ import annotations

import asyncio
import hashlib
import random
import time

from scripted_agent import run


def _marked_one_by_one(text: str) -> tuple[str, int]:
    """The definition: each hidden character marked, a \\r before \\n left (a line end)."""
    from escouade_nb.core.render_text import is_hidden

    out, count = [], 0
    for i, ch in enumerate(text):
        if is_hidden(ch) and not (ch == "\r" and text[i + 1:i + 2] == "\n"):
            count += 1
            out.append(f"⟨U+{ord(ch):04X}⟩")
        else:
            out.append(ch)
    return ("".join(out), count) if count else (text, 0)


def test_hidden_characters_are_marked_as_defined_and_in_linear_time():
    from escouade_nb.core.render_text import reveal

    code = ("x = 1  # \u202e é\r\n" * 220_000)[:3_300_000]  # 3.3 MB, every line hiding an override
    started = time.perf_counter()
    shown, count = reveal(code)
    assert time.perf_counter() - started < 5.0  # a guard only: the loop-stall figure is the kernel test's
    assert count == code.count("\u202e") and "⟨U+202E⟩" in shown and "\r\n" in shown

    from escouade_nb.core.render_text import count_hidden

    alphabet = "ab =\n\t\r\r\n\x00\x1b\x7f\u202e\u2066\u200b\ufeff\ufe0f\u3164\u115fé世\U000e0100\U000e0041\ud800\u2028"
    rng = random.Random(32)
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert reveal(text) == _marked_one_by_one(text), repr(text)
        assert count_hidden(text) == _marked_one_by_one(text)[1], repr(text)


def test_long_code_is_drawn_in_pieces_then_whole_and_a_saved_form_keeps_its_start():
    from escouade_nb.widgets import render

    code = ("print('a < b')  # \u200b\n" * 30_000) + "x = 1\r\n"  # > DRAW_AT_ONCE, with markup and hidden characters
    assert len(code) > render.DRAW_AT_ONCE
    at_once = render.run_code_html(code)  # no loop running: drawn at once
    assert "x = 1" in at_once and "&lt;" in at_once and at_once.count("esc-hidden-char") == 30_000

    async def go():
        try:
            render.run_code_html(code)
        except render.NotDrawnYet as pending:
            done = asyncio.Event()
            render.draw_later(pending, done.set)
            await asyncio.wait_for(done.wait(), 30)
        else:
            raise AssertionError("drawn at once on a running loop")
        assert render.run_code_html(code) == at_once  # the same whole card, from its pieces
        with render.saved_form():
            saved = render.run_code_html(code)
        assert len(saved) < len(at_once) // 2 and hashlib.sha256(code.encode()).hexdigest() in saved
        assert f"{len(code):,} characters" in saved and "30,000 invisible" in saved

    run(go())
