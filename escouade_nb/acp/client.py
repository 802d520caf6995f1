"""Our side of ACP: the handlers the SDK calls when the agent asks something of us.

``EscouadeClient`` implements the SDK's ``acp.interfaces.Client`` protocol for one
agent. It holds no state of its own: permission requests go to the agent's
``on_permission`` (which shows a card and waits for an answer), file-system calls are
served from disk here. Only what is implemented is advertised (``capabilities``):
``fs/*`` unless the manifest says ``"fs": false``; no terminal yet.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from acp import RequestError
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    PermissionOption,
    ReadTextFileResponse,
    RequestPermissionResponse,
    ToolCallUpdate,
    WriteTextFileResponse,
)

log = logging.getLogger(__name__)

PermissionHandler = Callable[[dict[str, Any], list[dict[str, Any]]], Awaitable[dict[str, Any]]]
"""``(tool_call, options) -> outcome``: wire dicts in, ``{"outcome": "selected",
"optionId": ...}`` or ``{"outcome": "cancelled"}`` out."""


def capabilities(fs: bool) -> ClientCapabilities:
    """The ``clientCapabilities`` we advertise in ``initialize``."""
    return ClientCapabilities(fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs), terminal=False)


def _dump(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class EscouadeClient:
    """The ``acp.Client`` of one agent. ``cwd`` resolves relative fs paths;
    ``on_update`` takes a ``session/update`` ``update`` dict the transport did not
    intercept; ``on_file_written(path, old_text, new_text)`` is told of each write."""

    def __init__(self, *, cwd: Path, on_permission: PermissionHandler,
                 on_update: Callable[[dict[str, Any]], None],
                 on_file_written: Callable[[Path, str | None, str], None] | None = None) -> None:
        self.cwd = cwd
        self._on_permission = on_permission
        self._on_update = on_update
        self._on_file_written = on_file_written
        self.extension_calls: list[tuple[str, dict[str, Any]]] = []

    # -- permissions --------------------------------------------------------------------
    async def request_permission(self, options: list[PermissionOption], session_id: str,
                                 tool_call: ToolCallUpdate, **kwargs: Any) -> RequestPermissionResponse:
        outcome = await self._on_permission(_dump(tool_call), [_dump(o) for o in options])
        if outcome.get("outcome") == "selected":
            return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=outcome["optionId"]))
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self._on_update(_dump(update))

    # -- file system (ACP fs/read_text_file, fs/write_text_file) --------------------------
    def resolve(self, path: str) -> Path:
        """An absolute path as is; a relative one against the session folder."""
        p = Path(path)
        return p if p.is_absolute() else self.cwd / p

    async def read_text_file(self, path: str, session_id: str, limit: int | None = None,
                             line: int | None = None, **kwargs: Any) -> ReadTextFileResponse:
        """``line`` is 1-based; ``limit`` counts lines. A missing file answers ACP's
        resource-not-found error (-32002); a file that is not UTF-8 is refused."""
        target = self.resolve(path)
        try:
            data = await anyio.Path(target).read_bytes()
        except FileNotFoundError:
            raise RequestError.resource_not_found(str(target)) from None
        except IsADirectoryError:
            raise RequestError.invalid_params({"path": str(target), "reason": "is a folder"}) from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RequestError.invalid_params(
                {"path": str(target), "reason": f"not UTF-8 text (byte {exc.start}); it is not re-encoded"}) from None
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            end = None if limit is None else start + max(limit, 0)
            text = "".join(lines[start:end])
        return ReadTextFileResponse(content=text)

    async def write_text_file(self, content: str, path: str, session_id: str,
                              **kwargs: Any) -> WriteTextFileResponse:
        """Creates missing parent folders; writes the text as UTF-8, newlines as given."""
        target = self.resolve(path)
        old: str | None = None
        apath = anyio.Path(target)
        if await apath.exists():
            try:
                old = (await apath.read_bytes()).decode("utf-8")
            except UnicodeDecodeError:
                raise RequestError.invalid_params(
                    {"path": str(target), "reason": "the file is not UTF-8 text; refusing to overwrite it"}) from None
        await apath.parent.mkdir(parents=True, exist_ok=True)
        await apath.write_bytes(content.encode("utf-8"))
        if self._on_file_written is not None:
            self._on_file_written(target, old, content)
        return WriteTextFileResponse()

    # -- extensions ------------------------------------------------------------------------
    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.extension_calls.append((method, params))
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.extension_calls.append((method, params))

    def on_connect(self, conn: Any) -> None:
        pass
