"""The agent's own name of a tool, whatever the agent: one place for the rule plugins'
translation (:mod:`escouade_nb.permissions.request`) and the plan detection
(:mod:`.plans`). Pure."""

from __future__ import annotations

from typing import Any

__all__ = ["agent_tool_name", "title_head"]


def agent_tool_name(call: Any) -> tuple[str | None, str | None]:
    """``(name, mcp_server)``: the agent's own name of the tool — the tool call's ``name``
    (ACP, stable since schema 1.25) first, else ``_meta.<agent>.toolCall.toolName`` (or
    ``_meta.<agent>.toolName``, ``_meta.toolName``) — and the MCP server ``_meta`` names, if any."""
    name = (getattr(call, "extra", None) or {}).get("name")
    if isinstance(name, str) and name:
        return name, _meta_tool_name(call)[1]
    return _meta_tool_name(call)


def _meta_tool_name(call: Any) -> tuple[str | None, str | None]:
    meta = getattr(call, "meta", None) or {}
    if isinstance(meta, dict):
        for value in meta.values():
            if not isinstance(value, dict):
                continue
            for holder in (value.get("toolCall"), value):
                if isinstance(holder, dict) and isinstance(holder.get("toolName"), str) and holder["toolName"]:
                    server = holder.get("mcpServer") or holder.get("server")
                    return holder["toolName"], server if isinstance(server, str) and server else None
        for key in ("tool_name", "toolName"):
            if isinstance(meta.get(key), str) and meta[key]:
                return meta[key], None
    return None, None


def title_head(call: Any) -> str | None:
    """The title before ``"·"`` (the whole title when it has none)."""
    title = getattr(call, "title", None)
    if isinstance(title, str):
        head = title.split("·", 1)[0].strip()
        return head or None
    return None
