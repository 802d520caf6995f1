"""Your own MCP servers: ``<jupyter config dir>/escouade_nb/mcp.json``.

The file has the common form (Claude Desktop, Cursor, Zed, gemini-cli read the same)::

    {"mcpServers": {
        "files":  {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."],
                   "env": {"TOKEN": "..."}},
        "search": {"type": "http", "url": "https://example.org/mcp", "headers": {"Authorization": "Bearer ..."}},
        "legacy": {"type": "sse", "url": "http://127.0.0.1:9000/sse"}}}

A stdio server has ``command`` (and optional ``args``, ``env``); a remote one has ``url``
with ``type`` ``"http"`` (the default when ``url`` is given) or ``"sse"``, and optional
``headers``. ``$ESCOUADE_NB_MCP_CONFIG`` names another file. Every server of the file is
offered to every agent unless ``%escouade NAME --mcp SERVER`` (repeatable) picks some, or
``--mcp none`` none; a manifest never holds a server (manifests carry no secrets). What
goes to the agent is ACP's ``mcpServers`` entry (``McpServerStdio`` / ``HttpMcpServer`` /
``SseMcpServer``, env and headers as name/value lists); :func:`secrets_of` gives the
values to keep out of transcripts.

Errors are :class:`~.models.ManifestError` naming the file and the field
(``mcpServers.search.url``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .models import ManifestError, _error_from_validation

__all__ = ["MCP_CONFIG_ENV", "McpConfig", "StdioServer", "RemoteServer", "mcp_config_path", "read_mcp_config",
           "to_acp", "secrets_of"]

MCP_CONFIG_ENV = "ESCOUADE_NB_MCP_CONFIG"


class StdioServer(BaseModel):
    """A server the agent starts: ``command`` ``args``, with ``env`` added."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["stdio"] = "stdio"
    command: Annotated[str, Field(min_length=1)]
    args: list[str] = []
    env: dict[str, str] = {}


class RemoteServer(BaseModel):
    """A server the agent reaches at ``url`` (streamable HTTP, or the older SSE)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["http", "sse"] = "http"
    url: Annotated[str, Field(pattern=r"^https?://")]
    headers: dict[str, str] = {}


class McpConfig(BaseModel):
    """The file: ``mcpServers`` by name."""

    model_config = ConfigDict(extra="ignore")

    mcpServers: dict[str, Annotated[StdioServer | RemoteServer, Field(discriminator="type")]] = {}

    @model_validator(mode="before")
    @classmethod
    def _typed(cls, data: Any) -> Any:
        """Pick the entry's model by its shape, so an error names the right fields."""
        servers = data.get("mcpServers") if isinstance(data, dict) else None
        if isinstance(servers, dict):
            for name, entry in servers.items():
                if isinstance(entry, dict) and "type" not in entry:
                    servers[name] = {**entry, "type": "http" if "url" in entry and "command" not in entry
                                     else "stdio"}
        return data


def mcp_config_path() -> Path:
    """``$ESCOUADE_NB_MCP_CONFIG`` if set, else ``<jupyter config dir>/escouade_nb/mcp.json``
    (it may not exist)."""
    env = os.environ.get(MCP_CONFIG_ENV)
    if env:
        return Path(env).expanduser()
    from jupyter_core.paths import jupyter_config_dir

    return Path(jupyter_config_dir()) / "escouade_nb" / "mcp.json"


def read_mcp_config(path: Path | None = None) -> dict[str, StdioServer | RemoteServer]:
    """The servers of ``path`` (default :func:`mcp_config_path`), by name; ``{}`` when the
    file does not exist. Blocking (a small file): call it in a thread from the loop.
    Raises :class:`ManifestError` (file and field) for a file that cannot be read or is
    not of the form above."""
    path = path or mcp_config_path()
    try:
        source = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(path, None, f"cannot read: {getattr(exc, 'strerror', None) or exc}") from exc
    try:
        data = json.loads(source)
    except json.JSONDecodeError as exc:
        raise ManifestError(path, None, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                            line=exc.lineno, column=exc.colno) from exc
    if not isinstance(data, dict):
        raise ManifestError(path, None, 'an MCP config must be a JSON object {"mcpServers": {...}}')
    try:
        config = McpConfig.model_validate(data)
    except ValidationError as exc:
        raise _error_from_validation(path, exc, data) from None
    for name in config.mcpServers:
        if not name or any(c.isspace() for c in name):
            raise ManifestError(path, f"mcpServers.{name}", "a server name must be one word")
    return dict(config.mcpServers)


def _pairs(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def to_acp(name: str, server: StdioServer | RemoteServer) -> dict[str, Any]:
    """ACP's ``mcpServers`` entry (wire dict) for one server."""
    if isinstance(server, StdioServer):
        return {"name": name, "command": server.command, "args": list(server.args), "env": _pairs(server.env)}
    return {"type": server.type, "name": name, "url": server.url, "headers": _pairs(server.headers)}


def secrets_of(entry: dict[str, Any]) -> list[str]:
    """The values of an ACP ``mcpServers`` entry that must not be written anywhere: its
    env values and header values (what is short enough to be a word is kept: ``1``)."""
    values = [p.get("value", "") for p in [*(entry.get("env") or []), *(entry.get("headers") or [])]]
    return [v for v in values if isinstance(v, str) and len(v) >= 4]
