"""The rule plugins' wire (plugin-1): constants and pydantic models, one set for both sides.

The host (:mod:`.host`, :mod:`.broker`, :mod:`.request`) writes these messages and the
plugin SDK (:mod:`escouade_nb.plugin_sdk`) reads them, so both import this module. It
imports pydantic, the standard library and ``escouade_nb._version`` only: a rule plugin's
process loads nothing of the engine.

JSON-RPC 2.0, one UTF-8 JSON object per ``\\n``-terminated line (at most :data:`MAX_LINE`
bytes), on the plugin's stdin/stdout::

    host -> plugin  {"jsonrpc":"2.0","id":1,"method":"initialize","params":InitializeParams}
    plugin -> host  {"jsonrpc": "2.0", "id": 1, "result": InitializeResult}
    host -> plugin  {"jsonrpc":"2.0","id":2,"method":"permissions/decide","params":DecideParams}
    plugin -> host  {"jsonrpc": "2.0", "id": 2, "result": {"decision": "deny", "message": "no rm -rf here"}}
    host -> plugin  {"jsonrpc":"2.0","id":3,"method":"shutdown"}      the plugin answers null, then exits

Every model keeps the fields it does not know (``extra="allow"``): a later host may add
documented fields, a plugin may add its own to an answer. Readers are lenient (defaults
for what a host always sends), writers always send the whole seed shape.
"""

from __future__ import annotations

import shlex
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


__all__ = [
    "PROTOCOL_VERSION", "INITIALIZE", "DECIDE", "SHUTDOWN", "MAX_LINE", "MAX_REQUEST", "PATH_KEYS", "Family",
    "Decision",
    "PARSE_ERROR", "INVALID_REQUEST", "METHOD_NOT_FOUND", "INVALID_PARAMS", "INTERNAL_ERROR",
    "PluginInfo", "NotebookEdit", "InitializeParams", "InitializeResult", "RequestInfo", "ProjectInfo", "TicketInfo",
    "AgentInfo", "DecideParams", "DecideResult", "ErrorObject", "Message", "command_of", "response", "error_response",
]

PROTOCOL_VERSION = 1
"""The plugin protocol version this side speaks (``initialize``'s ``protocolVersion``)."""
INITIALIZE = "initialize"
DECIDE = "permissions/decide"
SHUTDOWN = "shutdown"
MAX_LINE = 8 * 1024 * 1024
"""The longest message line either side reads (bytes, newline excluded); a longer one is
skipped. A ``permissions/decide`` request stays below it: its params are at most
:data:`MAX_REQUEST` bytes."""
MAX_REQUEST = 4 * 1024 * 1024
"""The most a ``permissions/decide``'s params take on the wire (bytes of their UTF-8 JSON).
Every field of a request goes whole up to it; a request that would be larger has its
longest texts cut until it fits, each cut one named in ``request.truncated`` (see
:class:`RequestInfo`), and no plugin's allowance of it is honoured."""

# JSON-RPC 2.0's own error codes (its section 5.1). The host uses ``acp.RequestError``'s
# factories, which carry the same codes; the plugin SDK, which must not load the ACP SDK,
# uses these names.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

PATH_KEYS = ("file_path", "path", "notebook_path")
"""The fields of a tool's ``input`` that name a file (Claude Code's tools)."""
Family = Literal["command", "edit", "read", "fetch", "mcp", "tool"]
"""``request.kind``: the family of the tool (see :data:`escouade_nb.permissions.request.FAMILIES`)."""
Decision = Literal["allow", "deny", "ask"]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


# -- initialize ---------------------------------------------------------------------------


class PluginInfo(_Wire):
    """Who is started: the manifest's ``id`` and ``version``, and the plugin ``folder``
    (an absolute path; also the program's working folder)."""

    id: str = ""
    version: str | None = None
    folder: str = ""


def _escouade() -> dict[str, str]:
    from .._version import __version__  # here, not at import: a plugin's process never needs it

    return {"name": "escouade_nb", "version": __version__}


def _decides() -> dict[str, Any]:
    return {"permissions": {"decide": True}}


class InitializeParams(_Wire):
    """``initialize``'s params: ``protocolVersion``, who speaks (``escouade``), the
    ``plugin``, the user's ``lang`` and what the host asks of it (``capabilities``)."""

    protocol_version: int = Field(PROTOCOL_VERSION, alias="protocolVersion")
    escouade: dict[str, str] = Field(default_factory=_escouade)
    plugin: PluginInfo | None = None
    lang: str = "en"
    capabilities: dict[str, Any] = Field(default_factory=_decides)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class InitializeResult(_Wire):
    """``initialize``'s result: the ``protocolVersion`` the plugin speaks (the host stops
    a plugin that speaks another) and its ``capabilities``."""

    protocol_version: int = Field(alias="protocolVersion")
    capabilities: dict[str, Any] = Field(default_factory=dict)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


# -- permissions/decide -------------------------------------------------------------------


class NotebookEdit(_Wire):
    """One ``.ipynb`` the tool call writes (a ``diff`` of a notebook path): its ``path``,
    ``changedCellIds`` (cells added, removed, moved or changed, by cell id) and
    ``kernelNotebook`` (true when it is the notebook the asking kernel runs)."""

    path: str
    changed_cell_ids: list[str] = Field(default_factory=list, alias="changedCellIds")
    kernel_notebook: bool = Field(False, alias="kernelNotebook")


class RequestInfo(_Wire):
    """``request``: the seed's ``id``, ``kind`` (a :data:`Family`), ``tool`` (named as
    Claude Code names it) and ``input`` (what the tool was given, every text whole); then
    what the ACP tool call itself says, so that a rule can tell calls apart when the
    agent sends no ``rawInput``: ``acpKind`` (ACP's ``ToolKind``: ``read``, ``edit``,
    ``delete``, ``move``, ``search``, ``execute``, ``think``, ``fetch``, ``switch_mode``,
    ``other``; null when the agent gave none), ``title`` (null when none), ``locations``
    (the paths of its ``locations``) and ``diffPaths`` (the paths of its ``diff``
    contents), each a list of strings in the agent's order (empty when none);
    ``notebooks``, one :class:`NotebookEdit` per notebook the call writes.

    Then what a rule needs to know it judges the whole request (documented additions to
    the seed): ``sizes``, the length in characters of every string of ``input`` — and of
    any other field that was cut — by its path (``"input.code"``, ``"input.edits[0].new_string"``,
    ``"title"``; ``"input"`` itself, the characters of all its strings, when it had to be
    left out whole); ``truncated``, the paths of the fields that were cut because the
    request was over :data:`MAX_REQUEST` bytes (empty: every field is whole). A cut text
    ends with ``"… (N more characters)"``. The host never honours an allowance of a
    request with a cut field (the user decides; a denial still wins): a rule should not
    allow one either (:attr:`DecideParams.whole`)."""

    id: str = ""
    kind: str = "tool"
    tool: str = ""
    input: dict[str, Any] = Field(default_factory=dict)
    acp_kind: str | None = Field(None, alias="acpKind")
    title: str | None = None
    locations: list[str] = Field(default_factory=list)
    diff_paths: list[str] = Field(default_factory=list, alias="diffPaths")
    notebooks: list[NotebookEdit] = Field(default_factory=list)
    sizes: dict[str, int] = Field(default_factory=dict)
    truncated: list[str] = Field(default_factory=list)


class ProjectInfo(_Wire):
    id: str = ""
    name: str = ""
    private: bool = False


class TicketInfo(_Wire):
    id: str = ""
    key: str | None = None
    title: str | None = None


class AgentInfo(_Wire):
    id: str = ""
    name: str = ""


def command_of(input: dict[str, Any]) -> str:
    """The command of a Bash input, as one string (an argv list is quoted with
    :func:`shlex.join`; "" when there is none)."""
    cmd = input.get("command", input.get("cmd"))
    if isinstance(cmd, str):
        return cmd
    if isinstance(cmd, list) and all(isinstance(c, str) for c in cmd):
        return shlex.join(cmd)
    return ""


class DecideParams(_Wire):
    """The params of ``permissions/decide`` — the seed's shape, never the conversation:
    ``request``, ``project``, ``ticket`` (absent outside a ticket, never null), ``agent``.

    Shortcuts for a rule: ``tool``, ``kind``, ``input``, ``command`` (the Bash command
    as one string; "" for another tool), ``acp_kind``, ``title``, ``locations``,
    ``diff_paths`` (the ACP tool call's own fields, see :class:`RequestInfo`),
    ``paths`` (every path the call names: locations, diffs, then the input's
    ``file_path``/``path``/``notebook_path``; no repeats), ``sizes`` and ``truncated``
    (the fields' lengths, the fields cut) and ``whole`` (True when nothing was cut)."""

    request: RequestInfo
    project: ProjectInfo = Field(default_factory=ProjectInfo)
    ticket: TicketInfo | None = None
    agent: AgentInfo = Field(default_factory=AgentInfo)

    @property
    def tool(self) -> str:
        return self.request.tool

    @property
    def kind(self) -> str:
        return self.request.kind

    @property
    def input(self) -> dict[str, Any]:
        return self.request.input

    @property
    def command(self) -> str:
        return command_of(self.request.input) if self.request.tool == "Bash" else ""

    @property
    def acp_kind(self) -> str | None:
        return self.request.acp_kind

    @property
    def title(self) -> str | None:
        return self.request.title

    @property
    def locations(self) -> list[str]:
        return self.request.locations

    @property
    def diff_paths(self) -> list[str]:
        return self.request.diff_paths

    @property
    def notebooks(self) -> list[NotebookEdit]:
        """The notebooks the call writes, with the ids of the cells it changes."""
        return self.request.notebooks

    @property
    def sizes(self) -> dict[str, int]:
        """Characters of every string of the input (and of any field cut), by path."""
        return self.request.sizes

    @property
    def truncated(self) -> list[str]:
        """The paths of the fields cut (the request was over :data:`MAX_REQUEST` bytes)."""
        return self.request.truncated

    @property
    def whole(self) -> bool:
        """True when every field came whole: nothing was cut. The host does not honour an
        allowance of a request that is not whole; a rule should not give one."""
        return not self.request.truncated

    @property
    def paths(self) -> list[str]:
        found = [*self.request.locations, *self.request.diff_paths]
        found += [v for k in PATH_KEYS if isinstance(v := self.request.input.get(k), str) and v]
        return list(dict.fromkeys(found))

    def wire(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", by_alias=True)
        if data.get("ticket") is None:
            data.pop("ticket", None)
        return data


class DecideResult(_Wire):
    """A plugin's answer: ``{"decision": "allow"|"deny"|"ask", "message"?: str}``. A
    result that does not validate (another decision, not an object) counts as ask."""

    decision: Decision
    message: str | None = None

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


# -- the JSON-RPC envelope ----------------------------------------------------------------


class ErrorObject(_Wire):
    code: int
    message: str = ""
    data: Any = None


class Message(_Wire):
    """Any JSON-RPC 2.0 message: a request (``method`` and ``id``), a notification
    (``method``, no ``id``) or a response (``id`` and ``result`` or ``error``; a
    ``result`` of null is a result: check ``"result" in model_fields_set``)."""

    jsonrpc: Literal["2.0"]
    id: int | str | None = None
    method: str | None = None
    params: Any = None
    result: Any = None
    error: ErrorObject | None = None


def response(rid: int | str | None, result: Any) -> dict[str, Any]:
    """A response to request ``rid``, as a dict to serialise."""
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def error_response(rid: int | str | None, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """An error response (``data`` only when given)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": error}
