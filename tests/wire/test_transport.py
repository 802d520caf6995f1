"""``LineTransport``: NDJSON framing over anyio byte streams (in memory), plus one
end-to-end run of the SDK's client connection through it to ``escouade-fake-agent``."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import PROTOCOL_VERSION, connect_to_agent
from acp.schema import ClientCapabilities, Implementation
from deadlines import run

from escouade_nb.wire.transport import MAX_LINE_BYTES, LineTransport
from escouade_nb.core.conversation import Conversation
from escouade_nb.tools.fake_agent import AGENT_NAME, AGENT_VERSION

# -- in-memory byte streams ---------------------------------------------------------------


class ByteSource:
    """The receive side: chunks from a memory object stream, each cut to ``max_bytes``
    like a pipe read; ``anyio.EndOfStream`` once the writer closed and all is read."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._pending = b""
        self._offset = 0

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._offset >= len(self._pending):
            self._pending = await self._stream.receive()  # EndOfStream passes through
            self._offset = 0
        data = self._pending[self._offset:self._offset + max_bytes]
        self._offset += len(data)
        return data

    async def aclose(self) -> None:
        await self._stream.aclose()


class ByteSink:
    """The send side: each ``send(bytes)`` is one item of a memory object stream."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def send(self, item: bytes) -> None:
        assert isinstance(item, bytes)
        await self._stream.send(item)

    async def aclose(self) -> None:
        await self._stream.aclose()


class Wired:
    """A transport between two in-memory pipes: ``feed`` writes what the agent would
    print, ``written`` reads what the transport sent. Closes every stream on exit."""

    def __init__(self, **kwargs: Any) -> None:
        self.feed, self._in_recv = anyio.create_memory_object_stream[bytes](math.inf)
        self._out_send, self.written = anyio.create_memory_object_stream[bytes](math.inf)
        self.source = ByteSource(self._in_recv)
        self.transport = LineTransport(ByteSink(self._out_send), self.source, **kwargs)  # type: ignore[arg-type]

    def sent(self) -> list[bytes]:
        out = []
        while True:
            try:
                out.append(self.written.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream):
                return out

    async def __aenter__(self) -> Wired:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for stream in (self.feed, self._in_recv, self._out_send, self.written):
            await stream.aclose()


async def receive_all(chunks: list[bytes], **kwargs: Any) -> tuple[list[dict[str, Any]], LineTransport]:
    """Feed ``chunks`` then EOF; return every message the transport delivers."""
    async with Wired(**kwargs) as w:
        for c in chunks:
            w.feed.send_nowait(c)
        await w.feed.aclose()
        messages: list[dict[str, Any]] = []
        with anyio.fail_after(60):
            while (msg := await w.transport.receive()) is not None:
                messages.append(msg)
        return messages, w.transport


def receive_all_sync(chunks: list[bytes], **kwargs: Any) -> tuple[list[dict[str, Any]], LineTransport]:
    return run(lambda: receive_all(chunks, **kwargs))


def line(obj: Any) -> bytes:
    return (json.dumps(obj) + "\n").encode()


# -- framing ---------------------------------------------------------------------------------


def test_several_messages_in_one_chunk() -> None:
    data = line({"id": 1}) + line({"id": 2, "result": {}}) + line({"method": "x"})
    messages, transport = receive_all_sync([data])
    assert messages == [{"id": 1}, {"id": 2, "result": {}}, {"method": "x"}]
    assert transport.skipped_count == 0


def test_one_message_split_across_many_chunks() -> None:
    msg = {"jsonrpc": "2.0", "method": "session/update", "params": {"text": "hello world " * 20}}
    data = line(msg)
    chunks = [data[i:i + 7] for i in range(0, len(data), 7)]
    assert len(chunks) > 30
    messages, transport = receive_all_sync(chunks)
    assert messages == [msg]
    assert transport.skipped_count == 0


def test_multibyte_character_split_between_chunks() -> None:
    msg = {"text": "café ☕ 𝄞 ok"}
    data = json.dumps(msg, ensure_ascii=False).encode("utf-8") + b"\n"
    for ch in ("é", "☕", "𝄞"):
        encoded = ch.encode("utf-8")
        start = data.index(encoded)
        for cut in range(1, len(encoded)):  # every split point inside the character
            messages, transport = receive_all_sync([data[:start + cut], data[start + cut:]])
            assert messages == [msg], (ch, cut)
            assert transport.skipped_count == 0


def test_every_byte_in_its_own_chunk() -> None:
    msgs = [{"a": "ü"}, {"b": [1, 2, {"c": None}]}]
    data = b"".join(json.dumps(m, ensure_ascii=False).encode() + b"\n" for m in msgs)
    messages, _ = receive_all_sync([bytes([b]) for b in data])
    assert messages == msgs


def test_a_5_mib_line_arrives_intact() -> None:
    big = "x" * (5 * 1024 * 1024)
    msg = {"id": 7, "result": {"content": big}}
    data = line(msg)
    chunks = [data[i:i + (1 << 20)] for i in range(0, len(data), 1 << 20)] + [line({"id": 8})]

    async def go() -> tuple[list[dict[str, Any]], LineTransport]:
        return await receive_all(chunks)

    messages, transport = run(go)
    assert len(messages) == 2
    assert messages[0]["id"] == 7
    assert len(messages[0]["result"]["content"]) == 5 * 1024 * 1024
    assert messages[0] == msg
    assert messages[1] == {"id": 8}
    assert transport.skipped_count == 0


def test_default_max_line_is_the_cap() -> None:
    # above what rule plugins judge whole (4 MiB), under the kernel's MCP body limit (10 MB): issue 32
    assert 4 * 1024 * 1024 < MAX_LINE_BYTES <= 10_000_000


def test_too_long_line_spanning_reads_is_skipped_once() -> None:
    long_line = line({"pad": "y" * 1000})
    chunks = [line({"id": 1})] + [long_line[i:i + 50] for i in range(0, len(long_line), 50)] + [line({"id": 2})]
    messages, transport = receive_all_sync(chunks, max_line_bytes=100)
    assert messages == [{"id": 1}, {"id": 2}]
    assert transport.skipped_count == 1
    assert list(transport.skipped) == ["line longer than 100 bytes"]


def test_too_long_line_in_one_chunk_is_skipped() -> None:
    data = line({"id": 1}) + line({"pad": "z" * 500}) + line({"id": 2})
    messages, transport = receive_all_sync([data], max_line_bytes=100)
    assert messages == [{"id": 1}, {"id": 2}]
    assert transport.skipped_count == 1
    assert transport.skipped[0].startswith("line longer than 100 bytes")


def test_too_long_final_line_without_newline_is_skipped() -> None:
    messages, transport = receive_all_sync([line({"id": 1}) + json.dumps({"pad": "q" * 500}).encode()],
                                           max_line_bytes=100)
    assert messages == [{"id": 1}]
    assert transport.skipped_count == 1


def test_line_of_exactly_max_bytes_is_kept() -> None:
    body = json.dumps({"p": ""}).encode()
    body = json.dumps({"p": "k" * (100 - len(body))}).encode()
    assert len(body) == 100
    messages, transport = receive_all_sync([body + b"\n" + line({"id": 2})], max_line_bytes=100)
    assert messages == [json.loads(body), {"id": 2}]
    assert transport.skipped_count == 0


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (b"this is not json", "line is not JSON"),
        (b'{"id": 1', "line is not JSON"),
        (b'{"id": 3} {"id": 4}', "line is not JSON"),  # two values on one line: not one message
        (b'{"id": 3}x', "line is not JSON"),
        (b'{"text": "\xff\xfe"}', "line is not UTF-8"),
        (b"42", "JSON line is a int, not an object"),
        (b"[1]", "JSON line is a list, not an object"),
        (b'"x"', "JSON line is a str, not an object"),
        (b"null", "JSON line is a NoneType, not an object"),
        (b"[" * 200_000 + b"]" * 200_000, "line is not JSON"),
    ],
)
def test_bad_lines_are_skipped_and_counted(bad: bytes, why: str) -> None:
    messages, transport = receive_all_sync([line({"id": 1}) + bad + b"\n" + line({"id": 2})])
    assert messages == [{"id": 1}, {"id": 2}]
    assert transport.skipped_count == 1
    assert transport.skipped[0].startswith(why)


def test_skipped_keeps_a_short_sample() -> None:
    messages, transport = receive_all_sync([b"garbage " * 100 + b"\n"])
    assert messages == []
    (entry,) = transport.skipped
    assert entry.startswith("line is not JSON: garbage garbage")
    assert len(entry) < 260


def test_many_bad_lines_are_all_counted_and_the_log_is_bounded() -> None:
    data = b"".join(b"bad %d\n" % i for i in range(120)) + line({"ok": True})
    messages, transport = receive_all_sync([data])
    assert messages == [{"ok": True}]
    assert transport.skipped_count == 120
    assert len(transport.skipped) == 50
    assert transport.skipped[-1] == "line is not JSON: bad 119"


def test_blank_lines_and_crlf_are_ignored() -> None:
    data = b"\n\n   \n" + line({"id": 1}) + b"\r\n\t\n" + b'{"id": 2}\r\n' + b"\n"
    messages, transport = receive_all_sync([data])
    assert messages == [{"id": 1}, {"id": 2}]
    assert transport.skipped_count == 0


def test_final_line_without_newline_is_delivered_at_eof() -> None:
    messages, transport = receive_all_sync([line({"id": 1}) + b'{"id": 2, "last": tr', b"ue}"])
    assert messages == [{"id": 1}, {"id": 2, "last": True}]
    assert transport.skipped_count == 0


def test_eof_returns_none_and_keeps_returning_none() -> None:
    async def go() -> list[Any]:
        async with Wired() as w:
            await w.feed.send(line({"id": 1}))
            got = [await w.transport.receive()]
            await w.feed.aclose()
            got.append(await w.transport.receive())
            got.append(await w.transport.receive())
            return got

    assert run(go) == [{"id": 1}, None, None]


def test_empty_stream_is_eof() -> None:
    messages, transport = receive_all_sync([])
    assert messages == []
    assert transport.skipped_count == 0


def test_receive_waits_for_the_rest_of_a_line() -> None:
    async def go() -> list[Any]:
        got: list[Any] = []
        async with Wired() as w:

            async def reader() -> None:
                got.append(await w.transport.receive())

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(reader)
                    await w.feed.send(b'{"id":')
                    await anyio.sleep(0.05)
                    assert got == []  # half a line is not a message
                    await w.feed.send(b' 3}\n')
        return got

    assert run(go) == [{"id": 3}]


# -- intercept and observers -----------------------------------------------------------------


def test_intercept_consumes_messages() -> None:
    seen: list[dict[str, Any]] = []

    def intercept(msg: dict[str, Any]) -> bool:
        seen.append(msg)
        return msg.get("method") == "session/update"

    data = (line({"method": "session/update", "params": {"n": 1}}) + line({"id": 1, "result": {}})
            + line({"method": "session/update", "params": {"n": 2}}) + line({"method": "fs/read_text_file", "id": 2}))
    messages, _ = receive_all_sync([data], intercept=intercept)
    assert messages == [{"id": 1, "result": {}}, {"method": "fs/read_text_file", "id": 2}]
    assert [m.get("params", {}).get("n") for m in seen] == [1, None, 2, None]


def test_intercept_does_not_see_skipped_lines() -> None:
    seen: list[dict[str, Any]] = []
    messages, _ = receive_all_sync([b"nope\n[1]\n" + line({"id": 1})],
                                   intercept=lambda m: seen.append(m) or False)  # type: ignore[func-returns-value]
    assert seen == [{"id": 1}]
    assert messages == [{"id": 1}]


def test_observers_see_in_and_out() -> None:
    async def go() -> tuple[list[tuple[str, dict[str, Any]]], list[bytes]]:
        log: list[tuple[str, dict[str, Any]]] = []

        def broken(direction: str, msg: dict[str, Any]) -> None:
            raise RuntimeError("observer bug")

        async with Wired(intercept=lambda m: m.get("method") == "eaten") as w:
            w.transport.observers.append(broken)
            w.transport.observers.append(lambda d, m: log.append((d, m)))
            await w.feed.send(line({"method": "eaten"}) + b"junk\n" + line({"id": 1, "result": None}))
            await w.feed.aclose()
            assert await w.transport.receive() == {"id": 1, "result": None}
            await w.transport.send({"id": 2, "method": "initialize"})
            assert await w.transport.receive() is None
            return log, w.sent()

    log, written = run(go)
    assert log == [("in", {"method": "eaten"}), ("in", {"id": 1, "result": None}),
                   ("out", {"id": 2, "method": "initialize"})]
    assert written == [b'{"id":2,"method":"initialize"}\n']


# -- sending ---------------------------------------------------------------------------------


def test_send_writes_one_compact_utf8_line() -> None:
    async def go() -> list[bytes]:
        async with Wired() as w:
            await w.transport.send({"jsonrpc": "2.0", "id": 1, "params": {"text": "héllo ☕\nline2", "n": [1, 2]}})
            await w.transport.send({"b": None})
            return w.sent()

    first, second = run(go)
    assert first == '{"jsonrpc":"2.0","id":1,"params":{"text":"héllo ☕\\nline2","n":[1,2]}}\n'.encode()
    assert first.count(b"\n") == 1 and first.endswith(b"\n")
    assert "☕".encode() in first
    assert second == b'{"b":null}\n'


def test_sent_lines_round_trip_through_a_reader() -> None:
    async def go() -> list[dict[str, Any]]:
        msgs = [{"id": i, "text": "ü\n" * i} for i in range(5)]
        async with Wired() as writer:
            for m in msgs:
                await writer.transport.send(m)
            await writer.transport.close()
            got, _ = await receive_all(writer.sent())
        return got

    assert run(go) == [{"id": i, "text": "ü\n" * i} for i in range(5)]


def test_send_after_close_raises_connection_error() -> None:
    async def go() -> None:
        async with Wired() as w:
            out: list[str] = []
            w.transport.observers.append(lambda d, m: out.append(d))
            await w.transport.close()
            await w.transport.close()  # twice is harmless
            with pytest.raises(ConnectionError):
                await w.transport.send({"id": 1})
            assert out == []  # nothing was sent, nothing observed

    run(go)


def test_send_to_a_gone_reader_raises_connection_error() -> None:
    async def go() -> None:
        async with Wired() as w:
            await w.written.aclose()  # the agent's stdin reader went away
            with pytest.raises(ConnectionError):
                await w.transport.send({"id": 1})

    run(go)


# -- end to end with the SDK and the real fake agent -----------------------------------------

_SCRIPT = Path(sys.executable).with_name("escouade-fake-agent")
AGENT_CMD = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "escouade_nb.tools.fake_agent"]


class QuietClient:
    """The least an ACP client needs; records what the SDK hands it."""

    def __init__(self) -> None:
        self.updates: list[Any] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no permission expected")

    def on_connect(self, conn: Any) -> None:
        pass


def test_sdk_connection_through_line_transport_to_fake_agent() -> None:
    async def go() -> dict[str, Any]:
        result: dict[str, Any] = {}
        conversation = Conversation()
        updates: list[str] = []

        def intercept(msg: dict[str, Any]) -> bool:
            if msg.get("method") == "session/update":
                update = msg["params"]["update"]
                updates.append(update.get("sessionUpdate"))
                conversation.apply(update)
                return True
            return False

        process = await anyio.open_process(AGENT_CMD, stderr=None)
        try:
            assert process.stdin is not None and process.stdout is not None
            transport = LineTransport(process.stdin, process.stdout, intercept=intercept)
            directions: list[str] = []
            transport.observers.append(lambda d, m: directions.append(d))
            client = QuietClient()
            conn = connect_to_agent(client, transport)
            with anyio.fail_after(60):
                init = await conn.initialize(
                    protocol_version=PROTOCOL_VERSION,
                    client_capabilities=ClientCapabilities(),
                    client_info=Implementation(name="escouade-test", version="0"),
                )
                result["protocol"] = init.protocol_version
                result["agent"] = (init.agent_info.name, init.agent_info.version) if init.agent_info else None
                session = await conn.new_session(cwd=str(Path.cwd()), mcp_servers=[])
                result["session"] = session.session_id
                reply = await conn.prompt(session_id=session.session_id,
                                          prompt=[{"type": "text", "text": "chunks 3"}])  # type: ignore[list-item]
                result["stop"] = reply.stop_reason
            result["updates"] = updates
            result["sdk_updates"] = client.updates
            result["items"] = [(type(i).__name__, getattr(i, "role", None), len(getattr(i, "text", "")))
                               for i in conversation.items]
            result["directions"] = directions
            result["skipped"] = transport.skipped_count
            await conn.close()
            await transport.close()
            with anyio.fail_after(60):
                result["rc"] = await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        return result

    result = run(go)
    assert result["protocol"] == 1
    assert result["agent"] == (AGENT_NAME, AGENT_VERSION)
    assert result["session"] == "fake-session-1"
    assert result["stop"] == "end_turn"
    assert result["updates"] == ["agent_message_chunk"] * 3 + ["usage_update"]
    assert result["sdk_updates"] == []  # all consumed by the intercept
    assert result["items"] == [("Message", "agent", 120)]
    assert result["directions"][:2] == ["out", "in"]
    assert result["directions"].count("out") == 3  # initialize, session/new, session/prompt
    assert result["skipped"] == 0
    assert result["rc"] == 0
