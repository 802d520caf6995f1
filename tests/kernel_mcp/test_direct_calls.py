"""The read tools' calls answered without the SDK's session machinery (``DirectCalls``, issue 37): the same
answers as the SDK's path gives, for what it takes; everything else reaches the SDK as it came, the body
replayed whole. Plain asyncio, a real server on loopback, raw POSTs (httpx2) beside the SDK's own client."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import httpx2
from deadlines import run

from escouade_nb.kernel_mcp.http import DIRECT_MAX_BODY
from escouade_nb.kernel_mcp.server import KernelServer
from test_kernel_server import Owner, mcp_client, text_of

VERSION = "2025-06-18"


async def raw_session(http: httpx2.AsyncClient, server: KernelServer, grant: Any) -> dict[str, str]:
    """A session opened with raw POSTs: the headers of its requests."""
    accept = {"Accept": "application/json, text/event-stream", "Authorization": grant.authorization}
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    opened = await http.post(server.url, json=init, headers=accept)
    assert opened.status_code == 200, opened.text
    headers = {**accept, "Mcp-Session-Id": opened.headers["mcp-session-id"], "Mcp-Protocol-Version": VERSION}
    await http.post(server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return headers


@contextlib.asynccontextmanager
async def served(namespace: dict, owner: Any = None):
    """A server on loopback for ``namespace``, a grant (``owner``, else a new :class:`Owner`), an HTTP client and
    the headers of a session it opened: ``(server, grant, http, headers)``."""
    server = await KernelServer(namespace=namespace).start()
    try:
        grant = server.grant(owner if owner is not None else Owner())
        async with httpx2.AsyncClient(timeout=30) as http:
            yield server, grant, http, await raw_session(http, server, grant)
    finally:
        await server.aclose()


def answer_of(response: httpx2.Response) -> dict:
    """The JSON-RPC answer of a POST, whether it came as JSON or in an SSE stream."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        return response.json()
    data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    return next(json.loads(d) for d in data if d and "id" in json.loads(d))


def call(tool: str, arguments: Any, req_id: Any = 1, **params: Any) -> dict:
    return {"jsonrpc": "2.0", "id": req_id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, **params}}


def test_a_read_tools_call_is_answered_directly_as_the_sdk_answers_it():
    async def main() -> None:
        ns = {"n": 41, "rows": list(range(10))}
        server = await KernelServer(namespace=ns).start()
        try:
            owner = Owner()
            grant = server.grant(owner)
            direct = server._direct
            async with httpx2.AsyncClient(timeout=30) as http:
                headers = await raw_session(http, server, grant)
                for tool, arguments in (("inspect_variable", {"name": "n"}), ("list_variables", {}),
                                        ("inspect_variable", {"name": "nope"}),  # the tool's ToolError
                                        ("inspect_variable", {"name": "n", "rows": -1}),  # the arguments' check
                                        ("inspect_variable", {}),  # a required argument missing
                                        ("notebook_cells", {"source": "history"})):
                    before = direct.answered
                    quick = await http.post(server.url, json=call(tool, arguments, "q"), headers=headers)
                    assert direct.answered == before + 1, (tool, arguments)
                    assert quick.headers["content-type"] == "application/json"
                    assert quick.headers["mcp-session-id"] == headers["Mcp-Session-Id"]
                    # the same call asking for progress (its _meta) goes through the SDK: the same answer
                    slow = await http.post(server.url, json=call(tool, arguments, "s", _meta={"progressToken": 7}),
                                           headers=headers)
                    assert direct.answered == before + 1
                    got, expected = answer_of(quick), answer_of(slow)
                    assert got["id"] == "q" and expected["id"] == "s"
                    assert got["result"] == expected["result"], (tool, arguments)
                # no protocol version header: the SDK's default version, as the SDK takes it (one agent sends none)
                bare = {k: v for k, v in headers.items() if k != "Mcp-Protocol-Version"}
                before = direct.answered
                unversioned = await http.post(server.url, json=call("list_variables", {}, "u"), headers=bare)
                assert direct.answered == before + 1 and answer_of(unversioned)["result"]["content"][0]["text"] \
                    .startswith("2 variables")
            # the SDK's own client takes it too, and the owner's record is the same as through the SDK
            async with mcp_client(server.url, grant.token) as session:
                before = direct.answered
                result = await session.call_tool("inspect_variable", {"name": "n"})
                assert direct.answered == before + 1 and not result.is_error
                assert text_of(result) == "n: int\nint = 41\nrepr:\n41"
            reads = [t for t, _ in owner.reads]
            assert reads.count("inspect_variable") == 2 * 2 + 1 and reads.count("list_variables") == 3
            assert grant.calls == 2 * 4 + 2  # two of the six fail the arguments' check before the tool
        finally:
            await server.aclose()

    run(main())


async def pieces(data: bytes, size: int):
    for start in range(0, len(data), size):
        yield data[start:start + size]


def text_of_raw(answer: dict) -> str:
    return "\n".join(c["text"] for c in answer["result"]["content"])


def test_what_direct_calls_do_not_take_reaches_the_sdk_as_it_came():
    async def main() -> None:
        async with served({"n": 41}) as (server, grant, http, headers):
            direct = server._direct
            cases = {
                "a batch": [call("list_variables", {})],
                "another tool": call("task_status", {"task_id": "task-none"}),
                "an extra param": call("list_variables", {}, extra=1),
                "arguments not an object": call("inspect_variable", ["n"]),
                "a boolean id": call("list_variables", {}, req_id=True),
                "a body over the limit": call("inspect_variable", {"name": "n", "pad": "x" * (DIRECT_MAX_BODY + 10)}),
                "not JSON": b"{not json",
                "nested deeper than json.loads goes": b"[" * 40_000,
            }
            for what, body in cases.items():
                content: Any = body if isinstance(body, bytes) else json.dumps(body).encode()
                if what == "a body over the limit":  # in pieces: read up to the limit, then handed on
                    content = pieces(content, DIRECT_MAX_BODY // 2)
                response = await http.post(server.url, content=content,
                                           headers={**headers, "Content-Type": "application/json"})
                assert direct.answered == 0, what
                assert response.status_code in (200, 202, 400), (what, response.status_code, response.text)
                if what == "a body over the limit":  # replayed whole: the SDK read all of it and answered
                    answer = answer_of(response)
                    assert answer["id"] == 1 and text_of_raw(answer).startswith("n: int\n"), answer
                if what == "another tool":
                    assert "task-none" in json.dumps(answer_of(response))
            # headers it does not take: a protocol version outside the SDK's handshake era (the SDK answers it
            # as it does), no JSON accepted, a session ended
            for version in ("2026-07-28", "1.0"):
                await http.post(server.url, json=call("list_variables", {}),
                                headers={**headers, "Mcp-Protocol-Version": version})
                assert direct.answered == 0, version
            sse_only = await http.post(server.url, json=call("list_variables", {}),
                                       headers={**headers, "Accept": "text/event-stream"})
            assert direct.answered == 0 and sse_only.status_code == 406
            assert (await http.delete(server.url, headers=headers)).status_code in (200, 204)
            ended = await http.post(server.url, json=call("list_variables", {}), headers=headers)
            assert direct.answered == 0 and ended.status_code == 404

    run(main())


def test_a_look_whose_result_is_in_is_not_reported_as_still_running():
    """A read answered at once, then the same value read again before the reader thread forgot the first look
    (the loop wakes on the result, the thread forgets it after): the second read runs, it is not "still
    running from an earlier call" (the faster answers of DirectCalls made this happen between two calls)."""
    import threading

    from escouade_nb.kernel_mcp.reads import Readers

    async def main() -> None:
        readers = Readers(size=2)
        held, release = threading.Event(), threading.Event()
        forget = readers._forget

        def slow_forget(read: Any) -> None:  # the first look's thread, held between its result and forgetting it
            if not held.is_set():
                held.set()
                release.wait(30)
            forget(read)

        readers._forget = slow_forget  # type: ignore[method-assign]
        value = [1, 2, 3]
        try:
            (first,) = await readers.read([("v", value, lambda progress: repr(value))], 10)
            assert first.done and first.result() == "[1, 2, 3]" and held.is_set()
            (second,) = await readers.read([("v", value, lambda progress: len(value))], 10)
            assert second.earlier is None and second.done and second.result() == 3, second.why_not(10)
        finally:
            release.set()
            readers.close()

    run(main())


def test_a_request_the_sdk_refuses_for_its_host_or_origin_is_not_answered_directly():
    """The SDK's DNS-rebinding check (a server on loopback: Host must be a loopback name, Origin absent or
    a loopback one) holds for a read's call too: a page of another site that learnt a token and a session
    gets from the direct path what it gets from the SDK, 421 or 403, never a variable's value."""
    async def main() -> None:
        async with served({"secret": "s3cr3t-value"}) as (server, grant, http, headers):
            direct = server._direct
            for foreign, status in (({"Host": "evil.example:80"}, 421), ({"Origin": "http://evil.example"}, 403)):
                response = await http.post(server.url, json=call("inspect_variable", {"name": "secret"}),
                                           headers={**headers, **foreign})
                assert response.status_code == status and "s3cr3t" not in response.text, (foreign, response.text)
                assert direct.answered == 0, foreign
            # a loopback origin (the SDK allows it) is still answered
            same = await http.post(server.url, json=call("inspect_variable", {"name": "secret"}),
                                   headers={**headers, "Origin": server.url.rsplit("/", 1)[0]})
            assert "s3cr3t-value" in text_of_raw(answer_of(same))

    run(main())


class LoneSurrogate:
    def __repr__(self) -> str:
        return "half a pair: \ud800"


def test_a_read_of_a_value_whose_repr_holds_a_lone_surrogate_is_answered_on_both_paths():
    """A ``repr`` (code the agent may have run) can hold a lone surrogate, which UTF-8 cannot carry: the read
    is answered all the same (the surrogate escaped), directly and through the SDK — never a 500 nor an SSE
    stream that ends without the answer (the client would wait for it until its own timeout)."""
    async def main() -> None:
        async with served({"odd": LoneSurrogate()}) as (server, grant, http, headers):
            direct = server._direct
            for tool, arguments in (("inspect_variable", {"name": "odd"}), ("list_variables", {})):
                for params in ({}, {"_meta": {"progressToken": 3}}):  # direct, then through the SDK
                    before = direct.answered
                    response = await http.post(server.url, json=call(tool, arguments, **params), headers=headers)
                    assert response.status_code == 200, (tool, params, response.status_code, response.text)
                    assert direct.answered == before + (0 if params else 1), (tool, params)
                    text = text_of_raw(answer_of(response))
                    assert "half a pair: \\ud800" in text, (tool, params, text)

    run(main())


def test_what_the_sdk_refuses_is_not_answered_directly():
    """A header or a body the SDK's path refuses (its Content-Type and Accept checks, its JSON parser) is
    refused as the SDK refuses it, not answered directly: a client sees one server, whichever path a request
    takes."""
    async def main() -> None:
        async with served({"n": 41}) as (server, grant, http, headers):
            direct = server._direct
            body = json.dumps(call("inspect_variable", {"name": "n"}))
            cases = {
                "a Content-Type in capitals": ({"Content-Type": "APPLICATION/JSON"}, body.encode(), 415),
                "no SSE accepted": ({"Accept": "application/json"}, body.encode(), 406),
                "a body in UTF-16": ({}, body.encode("utf-16"), 400),
                "a body with a BOM": ({}, b"\xef\xbb\xbf" + body.encode(), 400),
                "a lone surrogate's escape": ({}, body.replace('"n"}', '"\\ud800"}').encode(), 400),
            }
            for what, (more, content, status) in cases.items():
                response = await http.post(server.url, content=content,
                                           headers={**headers, "Content-Type": "application/json", **more})
                assert (direct.answered, response.status_code) == (0, status), (what, response.text)

    run(main())
