"""The ACP v1 wire this client speaks beyond the Python SDK (0.12.1, schema 1.19.0).

Pydantic models of the messages stabilised after schema 1.19 that the SDK lacks, as the
stable ``schema/v1/schema.json`` of npm ``@agentclientprotocol/sdk`` 2.4.0 has them (a
schema "from schema-v1.25.0" by its own comment: 1.25.0 is the lower bound of the
version this module follows, hence its name), with ``systemPrompt`` from that package's
unstable schema (stabilised 2026-11-06). Sources and field lists:
``shared/reference/acp-2026-notes.md``. What the SDK has (``session/list``,
``session/resume``, ``session/close``, ``additionalDirectories``, ``SessionInfo``) is
taken from the SDK, not redefined here; moving to a newer SDK is deleting this module.

Pure: models and small helpers, no I/O. The wire layer sends what is built here
through its own transport; the conversation fold validates the new update kinds here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from acp.schema import (AudioContentBlock, EmbeddedResourceContentBlock, ImageContentBlock, ResourceContentBlock,
                        TextContentBlock)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

ContentBlock = Annotated[TextContentBlock | ImageContentBlock | AudioContentBlock | ResourceContentBlock
                         | EmbeddedResourceContentBlock, Field(discriminator="type")]
"""ACP ``ContentBlock``, of the SDK's models (its schema names the union, the SDK does not)."""

SCHEMA_VERSION = "1.25.0"
"""The lowest schema version whose stable part has every model below (notices,
compaction, tool call ``name``, ``session/delete``); ``systemPrompt`` is newer."""


class _Wire(BaseModel):
    """camelCase on the wire; unknown keys kept (a later schema may add some)."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# -- client capabilities (opt-in update kinds) -------------------------------------------------
def client_capabilities(*, notices: bool = True, compaction: bool = True, subagents: bool = False,
                        auth_terminal: bool = False) -> dict[str, Any]:
    """The ``clientCapabilities`` keys this module adds, to merge into the SDK's:
    ``{"session": {"notices": {}, "compaction": {}}, "subagents": {}, "auth": {"terminal": true}}``
    (each only when asked; ``auth.terminal``: the client runs terminal auth methods)."""
    session: dict[str, Any] = {}
    if notices:
        session["notices"] = {}
    if compaction:
        session["compaction"] = {}
    out: dict[str, Any] = {"session": session} if session else {}
    if subagents:
        out["subagents"] = {}
    if auth_terminal:
        out["auth"] = {"terminal": True}
    return out


def merge_capabilities(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` (the SDK's dump) with ``extra`` merged in, objects key by key."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_capabilities(out[key], value)
        else:
            out[key] = value
    return out


# -- session/update kinds ------------------------------------------------------------------------
class NoticeUpdate(_Wire):
    """``{"sessionUpdate": "notice", "severity", "title", "description"?}``: something the
    agent tells the user; not history, fails nothing. ``severity`` is ``info``,
    ``warning``, ``error`` or another string (shown as ``info``)."""

    session_update: Literal["notice"] = Field(alias="sessionUpdate")
    severity: str
    title: str = Field(min_length=1)
    description: str | None = None
    field_meta: dict[str, Any] | None = Field(default=None, alias="_meta")


class CompactionUpdate(_Wire):
    """``{"sessionUpdate": "compaction_update", "compactionId", "status", "summary"?, "error"?}``:
    an upsert keyed by ``compactionId``; ``summary`` (content blocks) and ``error``:
    omitted = unchanged, ``null`` = cleared, a value replaces (``[]`` clears)."""

    session_update: Literal["compaction_update"] = Field(alias="sessionUpdate")
    compaction_id: str = Field(alias="compactionId")
    status: str
    summary: list[ContentBlock] | None = None
    error: str | None = None
    field_meta: dict[str, Any] | None = Field(default=None, alias="_meta")


class CompactionSummaryChunk(_Wire):
    """``{"sessionUpdate": "compaction_summary_chunk", "compactionId", "content"}``: one
    more block of the summary (an unseen id makes an in-progress compaction)."""

    session_update: Literal["compaction_summary_chunk"] = Field(alias="sessionUpdate")
    compaction_id: str = Field(alias="compactionId")
    content: ContentBlock
    field_meta: dict[str, Any] | None = Field(default=None, alias="_meta")


class SubagentUpdate(_Wire):
    """``{"sessionUpdate": "subagent_update", "sessionId", "title"?, "description"?,
    "capabilities"?, "state"?, "cwd"?, "additionalDirectories"?}``, sent on the PARENT
    session: announces (first one) or patches a child session ``sessionId`` (omitted =
    keep, ``null`` = clear). ``state``: ``{"state": "running"|"idle"|"requires_action"|
    "unknown", "stopReason"?, "usage"?}``; ``capabilities.cancel`` (an object) allows
    ``session/cancel`` on the child. Shapes from the unstable schema of npm
    ``@agentclientprotocol/sdk`` 2.4.0 (stabilised 2026-11-20)."""

    session_update: Literal["subagent_update"] = Field(alias="sessionUpdate")
    session_id: str = Field(alias="sessionId", min_length=1)
    title: str | None = None
    description: str | None = None
    capabilities: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    cwd: str | None = None
    additional_directories: list[str] | None = Field(default=None, alias="additionalDirectories")
    field_meta: dict[str, Any] | None = Field(default=None, alias="_meta")


class StateUpdate(_Wire):
    """``{"sessionUpdate": "state_update", "state": "running"|"idle"|"requires_action"|
    "unknown"|<string>, "stopReason"?, "usage"?}``: ACP v2's (draft) word of the agent on
    its own work, the ``StateUpdate`` of ``subagent_update`` sent for the session itself
    (``docs/protocol/v2/migration.mdx``). Accepted from a v1 agent that sends it, as data:
    it ends no turn of ours (:mod:`..core.activity`)."""

    session_update: Literal["state_update"] = Field(alias="sessionUpdate")
    state: str = Field(min_length=1)
    stop_reason: str | None = Field(default=None, alias="stopReason")
    field_meta: dict[str, Any] | None = Field(default=None, alias="_meta")


UPDATES: dict[str, type[_Wire]] = {
    "notice": NoticeUpdate,
    "compaction_update": CompactionUpdate,
    "compaction_summary_chunk": CompactionSummaryChunk,
    "subagent_update": SubagentUpdate,
    "state_update": StateUpdate,
}
"""The ``sessionUpdate`` kinds of this module, by tag."""


def validate_update(raw: dict[str, Any]) -> str | None:
    """Check an update of one of :data:`UPDATES`' kinds; the first problem as
    ``"field: message"``, or None when valid."""
    try:
        UPDATES[raw["sessionUpdate"]].model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where}: {first['msg']}" if where else first["msg"]
    return None


# -- session setup ---------------------------------------------------------------------------
SystemPromptMode = Literal["append", "override"]


class SystemPrompt(_Wire):
    """``systemPrompt`` of ``session/new``/``load``/``resume``: ``{"mode", "content"}``.
    ``append`` adds to the agent's own prompt (offered by ``sessionCapabilities.systemPrompt:
    {}``); ``override`` replaces it (only with ``{"mode": {"override": {}}}``)."""

    mode: SystemPromptMode
    content: list[ContentBlock]

    @classmethod
    def text(cls, text: str, mode: SystemPromptMode = "append") -> SystemPrompt:
        return cls.model_validate({"mode": mode, "content": [{"type": "text", "text": text}]})


def offers_system_prompt(agent_capabilities: dict[str, Any], mode: SystemPromptMode = "append") -> bool:
    """Whether ``agentCapabilities`` (the wire dict) offers ``systemPrompt`` in ``mode``."""
    offer = (agent_capabilities.get("sessionCapabilities") or {}).get("systemPrompt")
    if not isinstance(offer, dict):
        return False
    return mode == "append" or isinstance((offer.get("mode") or {}).get(mode), dict)


def offers(agent_capabilities: dict[str, Any], name: str) -> bool:
    """Whether ``agentCapabilities.sessionCapabilities.<name>`` is given (an object):
    ``list``, ``resume``, ``close``, ``delete``, ``additionalDirectories``, ``systemPrompt``."""
    return isinstance((agent_capabilities.get("sessionCapabilities") or {}).get(name), dict)


class DeleteSessionRequest(_Wire):
    """``session/delete`` params ``{"sessionId"}``; the result is ``{}`` (deleting an
    unknown session succeeds silently)."""

    session_id: str = Field(alias="sessionId")


class CancelRequestNotification(_Wire):
    """``$/cancel_request`` params ``{"requestId"}``: the client abandons a request it sent
    (the agent answers it, typically with -32800 "request cancelled")."""

    request_id: str | int = Field(alias="requestId")


def blocks_text(blocks: list[dict[str, Any]] | None) -> str:
    """The text of content blocks (others named by type), for summaries and notices."""
    out = []
    for block in blocks or []:
        out.append(block.get("text", "") if block.get("type") == "text" else f"[{block.get('type', '?')}]")
    return "".join(out)
