"""The agent's dials: Escouade's modes, the agent's own modes, config options, models."""

from __future__ import annotations

from typing import Any


def flatten_options(options: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """A select option list (flat, or grouped ``{group, name, options}``) as (value, label)."""
    out: list[tuple[str, str]] = []
    for o in options:
        if "options" in o and "value" not in o:
            out.extend((v, f"{o.get('name', o.get('group'))} / {label}") for v, label in flatten_options(o["options"]))
        elif "value" in o:
            out.append((o["value"], o.get("name") or o["value"]))
    return out
