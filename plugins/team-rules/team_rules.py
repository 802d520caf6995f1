"""Team rules: deny what ``rules.json``'s ``deny`` forbids, allow what ``allow`` permits,
leave the rest to the user.

An entry is a command prefix (``"npm test"``) or ``{"command": ..., "message": ...}``.
Each command of the line is judged (after ``&&``, ``||``, ``;``, ``|``, newlines, inside
``$( … )`` and backticks; heredoc bodies are text): any denied command denies the line,
all commands allowed allows it, otherwise the user decides. Prefixes match on word
boundaries (``npm test`` allows ``npm test -- -u``, not ``npm testing``). Only commands
(Bash) are judged; the rules are read once, at start. A command cut because the request
was too large (``req.whole`` False) is never allowed: a denied command in the part seen
still denies it; otherwise the user decides.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from escouade_nb.plugin_sdk import allow, ask, command_words, decide, deny, matches, on_start, run, split_commands


class Rule(BaseModel):
    command: str
    message: str | None = None

    @property
    def words(self) -> list[str]:
        return command_words(self.command)

    @property
    def refusal(self) -> str:
        return self.message or f"no {self.command} here"


class Rules(BaseModel):
    deny: list[Rule | str] = Field(default_factory=list)
    allow: list[Rule | str] = Field(default_factory=list)

    def denied(self) -> list[Rule]:
        return [r if isinstance(r, Rule) else Rule(command=r) for r in self.deny]

    def allowed(self) -> list[Rule]:
        return [r if isinstance(r, Rule) else Rule(command=r) for r in self.allow]


RULES = Rules()


@on_start
def load(folder: Path) -> None:
    global RULES
    RULES = Rules.model_validate(json.loads((folder / "rules.json").read_text(encoding="utf-8")))


def judge(line: str, rules: Rules):
    commands = split_commands(line)
    if not commands:
        return ask()
    denied, allowed = rules.denied(), rules.allowed()
    for words in commands:
        for rule in denied:
            if matches(words, rule.words):
                return deny(rule.refusal)
    if all(any(matches(words, rule.words) for rule in allowed) for words in commands):
        return allow()
    return ask()


@decide
def team_rules(req):
    if req.tool != "Bash" or not req.command:
        return ask()
    answer = judge(req.command, RULES)
    if answer.decision == "allow" and not req.whole:
        return ask("the command was cut: too large to judge whole")
    return answer


if __name__ == "__main__":
    run()
