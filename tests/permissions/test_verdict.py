"""The verdict merge, sans I/O: every order and mix of allow/deny/ask/late/error/crash."""

from __future__ import annotations

import itertools

import pytest

from escouade_nb.permissions.verdict import REASONS, Answer, Tally, merge

OUTCOMES = ["allow", "deny", "ask", "late", "error", "crash", "invalid", "not_running"]


def expected(outcomes):
    if "deny" in outcomes:
        return "deny"
    if "allow" in outcomes:
        return "allow"
    return "ask"


@pytest.mark.parametrize("mix", list(itertools.combinations_with_replacement(OUTCOMES, 3)))
def test_every_mix_in_every_order(mix):
    plugins = ["p1", "p2", "p3"]
    for order in set(itertools.permutations(range(3))):
        answers = [Answer(plugins[i], mix[i], message=f"m{i}") for i in range(3)]
        tally = Tally(plugins)
        verdicts = [tally.add(answers[i]) for i in order]
        final = tally.final()
        assert final.decision == expected(mix), (mix, order)
        if final.decision != "ask":
            # the settling answer is the first plugin (in plugin order) with that decision
            first = next(a for a in answers if a.outcome == final.decision)
            assert final.by is first
        else:
            assert final.by is None
        # a denial is known as soon as it arrives, whatever came before
        known = [v for v in verdicts if v is not None]
        if "deny" in mix:
            first_deny = next(k for k, i in enumerate(order) if mix[i] == "deny")
            assert verdicts[first_deny] is not None and verdicts[first_deny].decision == "deny"
            assert all(v is None for v in verdicts[:first_deny])
        else:
            # an allowance (or ask) only once every plugin has answered
            assert all(v is None for v in verdicts[:-1])
            assert known == [verdicts[-1]]


def test_missing_answers_count_as_late():
    tally = Tally(["a", "b"])
    assert tally.add(Answer("a", "allow")) is None  # b may still deny
    assert not tally.complete
    v = tally.final()
    assert v.decision == "allow" and tally.answers["b"].outcome == "late"
    assert merge([], ["a"]).decision == "ask"


def test_first_answer_of_a_plugin_counts_and_strangers_are_ignored():
    tally = Tally(["a"])
    assert tally.add(Answer("zzz", "deny")) is None
    assert tally.add(Answer("a", "allow")).decision == "allow"
    assert tally.add(Answer("a", "deny")).decision == "allow"


def test_reasons():
    assert Answer("a", "late").reason == "no answer in time"
    assert Answer("a", "error", detail="rules unreadable").reason == "an error: rules unreadable"
    assert Answer("a", "crash").reason == "a crash"
    assert Answer("a", "invalid").reason == "an answer that is none of the three"
    assert Answer("a", "allow").reason is None
    assert set(REASONS) == set(OUTCOMES) - {"allow", "deny"}
