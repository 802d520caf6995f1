"""One JSON-RPC 2.0 client over lines: what the plugin host speaks to a rule plugin.

A :class:`LineClient` sends requests on a byte stream (one compact JSON object a line,
under a send lock so lines never interleave) and reads the peer's answers from another
(framed by :class:`escouade_nb.wire.framing.LineBuffer`). It serves nothing: a request of
the peer is answered with the error ``method not found`` (``acp.RequestError``'s code),
a notification is ignored, a line that is not JSON-RPC goes to ``on_skip``.

::

    client = LineClient(proc.stdin, on_skip=journal_it)
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.run, proc.stdout)      # reads until the peer's output ends
        result = await client.request("initialize", params)

Errors: an error response raises :class:`RemoteError` (an ``acp.RequestError``: ``code``,
``message``, ``data``); a request in flight when the peer's output ends, when
:meth:`LineClient.close` is called or when the line cannot be written raises
:class:`PeerClosed`. Both are :class:`RpcError`. Bound a request in time yourself.

Every task has an owner: the replies to the peer's requests run in :meth:`LineClient.run`'s
task group, so they end with it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from typing import Any

import anyio
from acp import RequestError
from anyio.abc import ByteReceiveStream, ByteSendStream, TaskGroup
from pydantic import ValidationError

from .._errors import EscouadeError
from ..wire.framing import LineBuffer, Skipped
from .protocol import MAX_LINE, Message, error_response

__all__ = ["RpcError", "PeerClosed", "RemoteError", "LineClient"]


class RpcError(EscouadeError):
    """A request did not get a result."""


class PeerClosed(RpcError):
    """The peer went away (its output ended, it could not be written to, or the client
    was closed) while the request was in flight."""


class RemoteError(RpcError, RequestError):
    """The peer answered with a JSON-RPC error: ``code``, ``message``, ``data``."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        RequestError.__init__(self, code, message, data)
        self.message = message

    def __str__(self) -> str:
        return f"{self.message} ({self.code})"


def _encode(msg: dict[str, Any]) -> bytes:
    return (json.dumps(msg, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


class LineClient:
    """A JSON-RPC 2.0 client writing to ``send`` (see the module's doc).

    ``on_skip(line)`` gets each line that is not a JSON-RPC message (the raw bytes) or
    that was too long (a :class:`Skipped`); ``on_close(reason)`` is called once, when the
    client closes, before the requests in flight fail (the owner can mark itself not
    ready first); ``max_line`` bounds a line in bytes. Request ids are 1, 2, 3…"""

    def __init__(self, send: ByteSendStream, *, on_skip: Callable[[bytes | Skipped], None] | None = None,
                 on_close: Callable[[str], None] | None = None, max_line: int = MAX_LINE) -> None:
        self._send = send
        self._on_skip = on_skip
        self._on_close = on_close
        self._max_line = max_line
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._lock = anyio.Lock()
        self._tg: TaskGroup | None = None
        self._closed: str | None = None

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def in_flight(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._pending)

    # -- sending --------------------------------------------------------------------------
    async def request(self, method: str, params: Any = None, *, encoded: bytes | None = None) -> Any:
        """Send ``method`` (``params`` left out when None) and return its ``result``.
        ``encoded``: the params already as compact UTF-8 JSON (sent as is, in place of
        ``params``: a large request encoded once for several peers). Raises
        :class:`RemoteError` or :class:`PeerClosed`."""
        if self._closed is not None:
            raise PeerClosed(self._closed)
        rid = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None and encoded is None:
            msg["params"] = params
        data = _encode(msg)
        if encoded is not None:
            data = data[:-2] + b',"params":' + encoded + b"}\n"
        try:
            await self._write(data)
            return await fut
        finally:
            self._pending.pop(rid, None)
            if not fut.done():
                fut.cancel()

    async def _write(self, msg: dict[str, Any] | bytes) -> None:
        data = msg if isinstance(msg, bytes) else _encode(msg)
        async with self._lock:
            try:
                await self._send.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise PeerClosed(f"cannot write to the peer: {exc or type(exc).__name__}") from None

    async def _answer(self, msg: dict[str, Any]) -> None:
        try:
            await self._write(msg)
        except PeerClosed:
            pass  # the peer is gone: nobody to answer

    # -- reading --------------------------------------------------------------------------
    async def run(self, receive: ByteReceiveStream) -> None:
        """Read the peer's messages until its output ends (or this is cancelled); then
        the requests in flight fail with :class:`PeerClosed`."""
        buffer = LineBuffer(self._max_line)
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                try:
                    async for chunk in receive:
                        for line in buffer.feed(chunk):
                            self._on_line(line)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    pass
                for line in buffer.close():
                    self._on_line(line)
                tg.cancel_scope.cancel()  # the peer's output ended: answers to it are moot
        finally:
            self._tg = None
            self.close("the peer's output ended")

    def _skip(self, line: bytes | Skipped) -> None:
        if self._on_skip is not None:
            self._on_skip(line)

    def _on_line(self, line: bytes | Skipped) -> None:
        if isinstance(line, Skipped):
            self._skip(line)
            return
        if not line.strip():
            return
        try:
            msg = Message.model_validate_json(line)
        except ValidationError:
            self._skip(line)
            return
        if msg.method is not None:
            if msg.id is not None and self._tg is not None:  # a request of the peer: we serve none
                err = RequestError.method_not_found(msg.method)
                self._tg.start_soon(self._answer, error_response(msg.id, err.code, str(err), err.data))
            return
        fut = self._pending.get(msg.id) if isinstance(msg.id, int) else None
        if fut is None or fut.done():
            return  # an answer nobody waits for any more (late)
        if msg.error is not None:
            fut.set_exception(RemoteError(msg.error.code, msg.error.message, msg.error.data))
        elif "result" in msg.model_fields_set:
            fut.set_result(msg.result)
        else:
            fut.set_exception(RemoteError(RequestError.internal_error().code,
                                          "a response with neither result nor error"))

    def close(self, reason: str = "closed") -> None:
        """Fail the requests in flight, and every later one, with ``PeerClosed(reason)``
        (the first reason given stays)."""
        if self._closed is None:
            self._closed = reason
            if self._on_close is not None:
                self._on_close(reason)
        for fut in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(PeerClosed(reason))
                fut.exception()  # retrieved: a timed-out caller may be gone
        self._pending.clear()
