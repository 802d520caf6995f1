"""The JSON-RPC-over-lines client of the plugin host (``permissions/jsonrpc.py``), against a
real peer process on real pipes: ids and answers matched out of order, the peer's own
requests answered "method not found", garbage skipped, errors mapped to exceptions, a
peer that goes away, a request given up."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import anyio
import pytest
from acp import RequestError
from deadlines import run, until

from escouade_nb.permissions.jsonrpc import LineClient, PeerClosed, RemoteError, RpcError
from escouade_nb.wire.framing import Skipped

PEER = textwrap.dedent(r'''
    import json, sys, time

    def send(msg):
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()

    held = None
    for raw in sys.stdin:
        msg = json.loads(raw)
        rid, method, params = msg.get("id"), msg.get("method"), msg.get("params")
        if method == "echo":
            sys.stdout.write("this is not JSON-RPC\n[1, 2]\n")
            send({"jsonrpc": "2.0", "method": "note", "params": {}})      # a notification: ignored
            send({"jsonrpc": "2.0", "id": "p1", "method": "ping"})        # a request of its own
            answer = json.loads(sys.stdin.readline())                     # the host's answer to it
            send({"jsonrpc": "2.0", "id": rid, "result": {"params": params, "answer": answer}})
        elif method == "fail":
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": "nope", "data": {"x": 1}}})
        elif method == "neither":
            send({"jsonrpc": "2.0", "id": rid})
        elif method == "null":
            send({"jsonrpc": "2.0", "id": rid, "result": None})
        elif method == "hold":
            held = rid
        elif method == "release":
            send({"jsonrpc": "2.0", "id": rid, "result": "released"})
            send({"jsonrpc": "2.0", "id": held, "result": "held"})
        elif method == "slow":
            time.sleep(float(params))
            send({"jsonrpc": "2.0", "id": rid, "result": "slow"})
        elif method == "long":
            sys.stdout.write('{"jsonrpc": "2.0", "id": %d, "result": "%s"}\n' % (rid, "x" * 5000))
            send({"jsonrpc": "2.0", "id": rid, "result": "short"})
        elif method == "exit":
            sys.exit(0)
''')


async def with_peer(body, *, max_line: int = 1 << 20):
    skipped: list[bytes | Skipped] = []
    closed: list[str] = []
    proc = await anyio.open_process([sys.executable, "-u", "-c", PEER], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    client = LineClient(proc.stdin, on_skip=skipped.append, on_close=closed.append, max_line=max_line)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run, proc.stdout)
            result = await body(client, proc)
            tg.cancel_scope.cancel()
    finally:
        if proc.returncode is None:
            proc.kill()
        with anyio.CancelScope(shield=True):
            await proc.wait()
    return result, skipped, closed


def test_a_result_the_peers_own_request_and_garbage():
    async def body(client, proc):
        return await client.request("echo", {"a": "é"})

    result, skipped, _ = run(with_peer(body))
    assert result["params"] == {"a": "é"}
    err = RequestError.method_not_found("ping")
    assert result["answer"] == {"jsonrpc": "2.0", "id": "p1", "error": err.to_error_obj()}
    assert result["answer"]["error"]["code"] == -32601
    assert skipped == [b"this is not JSON-RPC", b"[1, 2]"]


def test_errors_are_exceptions_and_null_is_a_result():
    async def body(client, proc):
        out = {}
        with pytest.raises(RemoteError) as info:
            await client.request("fail")
        out["fail"] = info.value
        with pytest.raises(RemoteError) as info:
            await client.request("neither", [1])
        out["neither"] = info.value
        out["null"] = await client.request("null")
        return out

    out, _, _ = run(with_peer(body))
    fail = out["fail"]
    assert isinstance(fail, RequestError) and isinstance(fail, RpcError)
    assert (fail.code, fail.message, fail.data) == (-32000, "nope", {"x": 1})
    assert str(fail) == "nope (-32000)"
    assert out["neither"].code == -32603 and "neither result nor error" in out["neither"].message
    assert out["null"] is None


def test_answers_are_matched_by_id_whatever_their_order():
    async def body(client, proc):
        results = {}

        async def one(method):
            results[method] = await client.request(method)

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "hold")
            await until(lambda: client.in_flight == 1, what="hold sent")  # sent first: release answers it
            tg.start_soon(one, "release")
        return results, client.in_flight

    (results, in_flight), _, _ = run(with_peer(body))
    assert results == {"hold": "held", "release": "released"}
    assert in_flight == 0


def test_a_too_long_line_is_skipped_and_the_next_one_read():
    async def body(client, proc):
        return await client.request("long")

    result, skipped, _ = run(with_peer(body, max_line=1000))
    assert result == "short"
    assert len(skipped) == 1 and isinstance(skipped[0], Skipped) and "1000 bytes" in skipped[0].why


def test_a_peer_that_goes_away_fails_the_request_in_flight_and_every_later_one():
    async def body(client, proc):
        with pytest.raises(PeerClosed):
            await client.request("exit")
        await proc.wait()
        with pytest.raises(PeerClosed):
            await client.request("null")
        return client.closed

    closed_flag, _, closed = run(with_peer(body))
    assert closed_flag and closed == ["the peer's output ended"]  # on_close once, before the failures


def test_a_request_given_up_leaves_nothing_behind_and_its_late_answer_is_ignored():
    async def body(client, proc):
        with anyio.move_on_after(0.1):
            await client.request("slow", 0.4)
        assert client.in_flight == 0
        return await client.request("null")  # the late "slow" answer arrives first, and is dropped

    result, skipped, _ = run(with_peer(body))
    assert result is None and skipped == []


def test_close_fails_what_is_in_flight_with_the_reason():
    async def body(client, proc):
        async def later():
            await until(lambda: client.in_flight == 1, what="hold sent")
            client.close("the plugin exited with code 3")

        async with anyio.create_task_group() as tg:
            tg.start_soon(later)
            with pytest.raises(PeerClosed, match="exited with code 3"):
                await client.request("hold")
        client.close("another reason")
        with pytest.raises(PeerClosed, match="exited with code 3"):  # the first reason stays
            await client.request("null")
        return True

    assert run(with_peer(body))[0]
