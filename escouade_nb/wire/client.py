"""Our side of ACP: the handlers the SDK calls when the agent asks something of us.

``EscouadeClient`` implements the SDK's ``acp.interfaces.Client`` protocol for one
agent. Permission requests go to the agent's ``on_permission`` (which shows a card and
waits for an answer); ``fs/*`` is served by :class:`~escouade_nb.acp.fs.FileSystem`
(with the private project's fence, if any); ``terminal/*`` by
:class:`~escouade_nb.acp.terminals.TerminalManager` (``client.terminals``, which must be
hosted for the agent's lifetime: ``tg.start_soon(client.terminals.serve)``). Only what is
implemented and wanted is advertised (:func:`capabilities`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from acp import RequestError
from acp.schema import (
    AcceptElicitationResponse,
    AllowedOutcome,
    CancelElicitationResponse,
    ClientCapabilities,
    ClientSessionCapabilities,
    CreateTerminalResponse,
    DeclineElicitationResponse,
    DeniedOutcome,
    ElicitationCapabilities,
    EnvVariable,
    FileSystemCapabilities,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    SessionConfigOptionsCapabilities,
    TerminalOutputResponse,
    ToolCallUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from .fs import Confinement, FileSystem
from .terminals import TerminalManager, Wrap

log = logging.getLogger(__name__)

PermissionHandler = Callable[[dict[str, Any], list[dict[str, Any]]], Awaitable[dict[str, Any]]]
"""``(tool_call, options) -> outcome``: wire dicts in, ``{"outcome": "selected",
"optionId": ...}`` or ``{"outcome": "cancelled"}`` out."""

ElicitationHandler = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
"""``(message, mode) -> answer``: ``mode`` the wire dict of the request's mode (form:
``requestedSchema``; url: ``url``, ``elicitationId``), the answer ``{"action": "accept",
"content": {...}}``, ``{"action": "decline"}`` or ``{"action": "cancel"}``."""


def capabilities(fs: bool, terminal: bool = False, questions: bool = False) -> ClientCapabilities:
    """The ``clientCapabilities`` we advertise in ``initialize``: ``fs`` turns on both
    ``fs.readTextFile`` and ``fs.writeTextFile`` (off when the manifest says
    ``"fs": false``); ``terminal`` the ``terminal/*`` methods (only when the client's
    ``terminals`` manager is being served); ``questions`` ``elicitation`` (form and url)
    and boolean session config options (both handled by the engine)."""
    caps = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs), terminal=terminal)
    if questions:
        caps.elicitation = ElicitationCapabilities(form={}, url={})
        caps.session = ClientSessionCapabilities(config_options=SessionConfigOptionsCapabilities(boolean={}))
    return caps


def _dump(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class EscouadeClient:
    """The ``acp.Client`` of one agent.

    ``cwd`` is the session folder (relative fs paths and terminals' default folder);
    ``on_update`` takes a ``session/update`` ``update`` dict the transport did not
    intercept; ``on_file_written(path, old_text, new_text)`` is told of each write
    (``old_text`` ``None`` for a new file); ``fence`` (a private project's folder)
    refuses fs paths and terminal folders (``cwd``) outside it and outside the ``also``
    folders (the session's ``additionalDirectories``); ``confinement``: a sandboxed agent's reach (its fs
    writes and terminal folders only in its writable set, no read in a folder its sandbox hides; see
    :meth:`confine`); ``terminal_env`` is the base environment of terminal
    commands (the agent's own; ``os.environ`` when ``None``). ``fs`` and ``terminals``
    are the :class:`FileSystem` and :class:`TerminalManager` behind the handlers."""

    def __init__(self, *, cwd: Path, on_permission: PermissionHandler,
                 on_update: Callable[[dict[str, Any]], None],
                 on_file_written: Callable[[Path, str | None, str], None] | None = None,
                 fence: Path | None = None, also: Sequence[Path] = (), terminal_env: Mapping[str, str] | None = None,
                 on_elicitation: ElicitationHandler | None = None,
                 on_elicitation_complete: Callable[[str], None] | None = None,
                 confinement: Confinement | None = None) -> None:
        self.cwd = Path(cwd)
        self._on_permission = on_permission
        self._on_update = on_update
        self._on_elicitation = on_elicitation
        self._on_elicitation_complete = on_elicitation_complete
        self.fs = FileSystem(self.cwd, fence, on_write=on_file_written, also=also, confinement=confinement)
        self.terminals = TerminalManager(self.cwd, env=terminal_env, fence=fence, also=also, confinement=confinement)
        self.extension_calls: list[tuple[str, dict[str, Any]]] = []
        # the raw ``toolCall`` of permission requests by toolCallId (filled by the session's router):
        # what the SDK's ToolCallUpdate drops (the stable ``name``) is put back from it
        self.raw_tool_calls: dict[str, dict[str, Any]] = {}
        # child sessions (subagents) the router let through; their permission requests go to
        # ``on_child_permission(session_id, tool_call, options)`` when given
        self.child_sessions: set[str] = set()
        self.on_child_permission: Callable[[str, dict[str, Any], list[dict[str, Any]]],
                                           Awaitable[dict[str, Any]]] | None = None

    @property
    def fence(self) -> Path | None:
        return self.fs.fence

    def confine(self, confinement: Confinement, wrap: Wrap | None) -> None:
        """A sandboxed agent's reach, once its sandbox is made: the file system and the
        terminals held to ``confinement``; each terminal's command line made by ``wrap``
        (bwrap with the agent's binds; ``None``: its terminals are refused)."""
        self.fs.confinement = confinement
        self.terminals.confinement = confinement
        self.terminals.wrap = wrap

    # -- permissions --------------------------------------------------------------------
    async def request_permission(self, options: list[PermissionOption], session_id: str,
                                 tool_call: ToolCallUpdate, **kwargs: Any) -> RequestPermissionResponse:
        wire = _dump(tool_call)
        raw = self.raw_tool_calls.pop(str(wire.get("toolCallId", "")), None) or {}
        wire.update({k: v for k, v in raw.items() if k not in wire})  # fields newer than the SDK's schema
        if session_id in self.child_sessions and self.on_child_permission is not None:
            outcome = await self.on_child_permission(session_id, wire, [_dump(o) for o in options])
        else:
            outcome = await self._on_permission(wire, [_dump(o) for o in options])
        meta = outcome.get("_meta")  # e.g. who answered, a refusal message: ``_meta.escouade``
        if outcome.get("outcome") == "selected":
            return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=outcome["optionId"]),
                                             field_meta=meta)
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"), field_meta=meta)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self._on_update(_dump(update))

    # -- questions (ACP elicitation/create, elicitation/complete) -------------------------
    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> Any:
        if self._on_elicitation is None:
            return CancelElicitationResponse(action="cancel")
        raw = _dump(mode) if hasattr(mode, "model_dump") else dict(mode)
        answer = await self._on_elicitation(message, raw)
        if answer["action"] == "accept":
            return AcceptElicitationResponse(action="accept", content=answer.get("content"))
        if answer["action"] == "decline":
            return DeclineElicitationResponse(action="decline")
        return CancelElicitationResponse(action="cancel")

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        """The agent says a URL elicitation is done."""
        if self._on_elicitation_complete is not None:
            self._on_elicitation_complete(elicitation_id)

    # -- file system (ACP fs/read_text_file, fs/write_text_file) --------------------------
    def resolve(self, path: str) -> Path:
        """The real path the fs handlers would open (``RequestError`` outside the fence)."""
        return self.fs.resolve(path)

    async def read_text_file(self, path: str, session_id: str, limit: int | None = None,
                             line: int | None = None, **kwargs: Any) -> ReadTextFileResponse:
        return await self.fs.read_text_file(path, line=line, limit=limit)

    async def write_text_file(self, content: str, path: str, session_id: str,
                              **kwargs: Any) -> WriteTextFileResponse:
        return await self.fs.write_text_file(path, content)

    # -- terminals (ACP terminal/*) -----------------------------------------------------------
    async def create_terminal(self, command: str, session_id: str, args: list[str] | None = None,
                              cwd: str | None = None, env: list[EnvVariable] | None = None,
                              output_byte_limit: int | None = None, **kwargs: Any) -> CreateTerminalResponse:
        terminal_id = await self.terminals.create(command, args=args, env=env, cwd=cwd,
                                                  output_byte_limit=output_byte_limit)
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> TerminalOutputResponse:
        output, truncated, status = await self.terminals.output(terminal_id)
        return TerminalOutputResponse(output=output, truncated=truncated, exit_status=status)

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str,
                                     **kwargs: Any) -> WaitForTerminalExitResponse:
        status = await self.terminals.wait_for_exit(terminal_id)
        return WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> KillTerminalResponse:
        await self.terminals.kill(terminal_id)
        return KillTerminalResponse()

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> ReleaseTerminalResponse:
        await self.terminals.release(terminal_id)
        return ReleaseTerminalResponse()

    # -- extensions ------------------------------------------------------------------------
    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.extension_calls.append((method, params))
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.extension_calls.append((method, params))

    def on_connect(self, conn: Any) -> None:
        pass
