"""A saved form's change as the page applies it (issue 34, finding 5): ``front.text_delta`` counts UTF-16 units,
as JavaScript does (``labextension/src/forms.js`` slices the output's text with them), and the end a long
conversation's ``text/plain`` keeps moves by whole blocks, so a turn added changes its end only."""

from __future__ import annotations

import random

from escouade_nb.widgets.agent_view import PLAIN_KEEP, plain_tail
from escouade_nb.widgets.front import text_delta


def apply_as_javascript(old: str, delta: list) -> str:
    """What forms.js does: ``old.slice(0, start) + insert + old.slice(old.length - end)``, in UTF-16 units."""
    start, end, insert = delta
    units = old.encode("utf-16-le", "surrogatepass")
    assert 0 <= start and 0 <= end and start + end <= len(units) // 2
    kept = units[:2 * start].decode("utf-16-le", "surrogatepass") + insert
    return kept + units[len(units) - 2 * end:].decode("utf-16-le", "surrogatepass")


def test_a_change_applied_as_javascript_gives_the_new_form() -> None:
    rng = random.Random(34)
    alphabet = "ab<>&\n é✓😀𝄞"  # non-BMP characters: two UTF-16 units each
    for _ in range(2000):
        old = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60)))
        a, b = sorted(rng.randrange(0, len(old) + 1) for _ in range(2))
        new = old[:a] + "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 10))) + old[b:]
        delta = text_delta(old, new)
        assert apply_as_javascript(old, delta) == new, (old, new, delta)


def test_a_change_at_a_long_forms_end_costs_its_own_size() -> None:
    old = "<p>" + "x" * 1_000_000 + "</p>😀<p>last</p>"
    new = old.replace("<p>last</p>", "<p>last</p><p>one more line</p>")
    delta = text_delta(old, new)
    assert len(delta[2]) < 40 and apply_as_javascript(old, delta) == new


def test_a_long_texts_kept_end_changes_only_at_its_end_when_a_turn_is_added() -> None:
    lines = [f"line {i:06d} " + "y" * 40 for i in range(5000)]
    before = plain_tail("\n".join(lines))
    after = plain_tail("\n".join(lines + ["one more line"]))
    assert after.startswith(before) and after[len(before):] == "\none more line"
    assert PLAIN_KEEP <= len(before) <= 1.5 * PLAIN_KEEP + 200 and before.endswith(lines[-1])
    assert before.startswith("… the first ") and "HTML form" in before.splitlines()[0]
    assert plain_tail("short\ntext") == "short\ntext"
