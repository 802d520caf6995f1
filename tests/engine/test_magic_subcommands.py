"""``%escouade``'s subcommand table (magics.COMMANDS): the dispatch by its first word, and
the ``--help`` generated from it — no kernel, no agent."""

from __future__ import annotations

import pytest

from escouade_nb import magics
from escouade_nb.magics import COMMANDS, START, USAGE, EscouadeMagics, Subcommand


@pytest.fixture
def line(capsys):
    """Run one ``%escouade`` line (usage errors printed as the magic prints them); returns
    (stdout, stderr)."""
    def run(text: str) -> tuple[str, str]:
        EscouadeMagics(shell=None).escouade(text)
        out = capsys.readouterr()
        return out.out, out.err
    return run


def test_the_usage_is_every_subcommand_s_lines_in_order():
    assert USAGE.startswith("usage:\n  %escouade ")
    at = 0
    for command in COMMANDS:
        found = USAGE.find(command.usage.rstrip("\n"), at)
        assert found >= at, command.names
        at = found


@pytest.mark.parametrize("text", ["--help", "-h", "help"])
def test_help_prints_the_whole_usage(line, text):
    assert line(text) == (USAGE + "\n", "")


@pytest.mark.parametrize("name", ["stop", "export", "sessions", "merge", "rebase", "discard", "fork", "resume",
                                  "update", "squad", "plugins", "journal"])
def test_a_subcommand_s_help_is_its_own_lines(line, name):
    (command,) = [c for c in COMMANDS if name in c.names]
    assert line(f"help {name}") == (command.help() + "\n", "")
    assert line(f"{name} --help") == (command.help() + "\n", "")
    assert f"%escouade {name}" in command.help() or f"|{name}" in command.help()


def test_the_start_s_help_names_its_options(line):
    out, err = line("fake --help")
    assert out == START.help() + "\n" and not err
    assert "--worktree" in out and "--private:" in out


def test_help_of_no_subcommand_is_a_usage_error(line):
    out, err = line("help nope")
    assert not out and err.startswith("escouade: help takes one subcommand (stop, ") and USAGE in err


def test_every_word_is_dispatched_to_its_handler(monkeypatch):
    """Its first word picks the subcommand; no subcommand's word: the start; no word: the
    listing. The handler gets the words as typed."""
    called = []

    def recording(command: Subcommand) -> Subcommand:
        return Subcommand(command.names, command.usage, lambda _m, squad, words: called.append((command, words)))

    monkeypatch.setattr(magics.engine, "get_squad", lambda: "the squad")
    table = {name: recording(c) for name, c in magics._BY_NAME.items()}
    monkeypatch.setattr(magics, "_BY_NAME", table)
    monkeypatch.setattr(magics, "START", recording(START))
    monkeypatch.setattr(magics, "LISTING", recording(magics.LISTING))
    for name in table:
        EscouadeMagics(shell=None)._line([name, "x"])
    EscouadeMagics(shell=None)._line(["fake", "--cwd", "x"])
    EscouadeMagics(shell=None)._line([])
    assert [(c.names, words) for c, words in called] == [
        *((table[name].names, [name, "x"]) for name in table), ((), ["fake", "--cwd", "x"]), ((), [])]
    assert set(table) == {n for c in COMMANDS if c.handler is not None for n in c.names}


@pytest.mark.parametrize("text", ["help start", "help start --help", "start --help"])
def test_help_start_is_the_start_s_usage(line, text):
    assert line(text) == (START.help() + "\n", "")


@pytest.mark.parametrize("text", ["help --help", "--help --help", "help -h"])
def test_help_asked_twice_is_the_whole_usage(line, text):
    assert line(text) == (USAGE + "\n", "")


def test_help_of_two_subcommands_says_so(line):
    out, err = line("help stop fork")
    assert not out and err.startswith("escouade: help takes one subcommand, or none (got 2 words)")
