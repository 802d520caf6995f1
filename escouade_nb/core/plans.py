"""Plans to approve and questions written in text: recognising them, reading them.

A *plan to approve* is a permission request whose tool presents a plan — Claude Code's
``ExitPlanMode``, or ``exit_plan_mode`` (the plan-mode seed) — found by the tool's own
name (``_meta.<agent>.toolCall.toolName``, a ``name`` field, or the title before "·"),
mapped through the manifest's ``acp.tools``. Its markdown is ``rawInput.plan`` or the
text content of the call. Plans are always the user's: never a rule plugin's, never
the mode's.

*Questions in text* are for harnesses declared ``questionsInText``: they have no tool
to ask, so the first prompt tells them to end their turn on an
``<escouade_question>`` block holding JSON; the block is hidden from the reply and
shown as a question card; the answers go back as the next prompt.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .conversation import ToolCall
from .tool_names import agent_tool_name, title_head

PLAN_TOOLS = {"ExitPlanMode", "exit_plan_mode"}

QUESTION_OPEN = "<escouade_question>"
QUESTION_CLOSE = "</escouade_question>"
_BLOCK = re.compile(re.escape(QUESTION_OPEN) + r"(.*?)(?:" + re.escape(QUESTION_CLOSE) + r"|\Z)", re.S)

QUESTIONS_PREAMBLE = (
    "[escouade] You have no tool to ask the user a question. When you need the user to decide, end your turn "
    f"with one block {QUESTION_OPEN}…{QUESTION_CLOSE} holding JSON: "
    '{"questions": [{"id": "short-id", "question": "…", "options": ["…", "…"]}]} '
    "(\"options\" is optional; without it the user answers in free text). The user's answers come back as "
    "the next message.\n\n"
)


def tool_name(call: ToolCall | None) -> str | None:
    """The agent's own name of the tool (:func:`.tool_names.agent_tool_name`: the tool
    call's stable ``name``, else ``_meta``'s), else the title before "·"."""
    if call is None:
        return None
    return agent_tool_name(call)[0] or title_head(call)


def plan_of(call: ToolCall | None, tools: dict[str, str] | None = None) -> str | None:
    """The plan's markdown if ``call`` presents a plan to approve, else None."""
    name = tool_name(call)
    if call is None or name is None:
        return None
    mapped = (tools or {}).get(name, name)
    if mapped not in PLAN_TOOLS and name not in PLAN_TOOLS:
        return None
    raw = call.raw_input if isinstance(call.raw_input, dict) else {}
    if isinstance(raw.get("plan"), str):
        return raw["plan"]
    texts = [c.get("content", {}).get("text", "") for c in call.content
             if c.get("type") == "content" and (c.get("content") or {}).get("type") == "text"]
    return "\n\n".join(t for t in texts if t) or ""


def visible_text(text: str) -> str:
    """Reply text without ``<escouade_question>`` blocks (also one still streaming)."""
    if QUESTION_OPEN not in text:
        return text
    return _BLOCK.sub("", text).rstrip()


def questions_in(text: str) -> list[dict[str, Any]] | None:
    """The questions of the last complete ``<escouade_question>`` block, as dicts with
    ``id``, ``question`` and optional ``options``; None when there is no block. A block
    that is not the expected JSON becomes one free-text question holding its text."""
    blocks = [m.group(1) for m in _BLOCK.finditer(text) if m.group(0).endswith(QUESTION_CLOSE)]
    if not blocks:
        return None
    body = blocks[-1].strip()
    try:
        data = json.loads(body)
    except ValueError:
        return [{"id": "q1", "question": body}]
    items = data.get("questions") if isinstance(data, dict) else data
    if isinstance(data, dict) and "question" in data:
        items = [data]
    if not isinstance(items, list):
        return [{"id": "q1", "question": body}]
    out = []
    for n, q in enumerate(items, 1):
        if isinstance(q, str):
            q = {"question": q}
        if not isinstance(q, dict) or not isinstance(q.get("question"), str):
            continue
        options = q.get("options")
        out.append({"id": str(q.get("id") or f"q{n}"), "question": q["question"],
                    **({"options": [str(o) for o in options]} if isinstance(options, list) and options else {})})
    return out or [{"id": "q1", "question": body}]


def answers_prompt(questions: list[dict[str, Any]], answers: dict[str, Any]) -> str:
    """The next prompt carrying the user's answers to questions written in text."""
    lines = ["[escouade] The user answered your questions:"]
    for q in questions:
        lines.append(f"- {q['question']}\n  → {answers.get(q['id'], '(no answer)')}")
    return "\n".join(lines)
