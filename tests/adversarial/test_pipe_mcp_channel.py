"""A hostile agent against the kernel's MCP server carried over its own pipe (MCP-over-ACP,
``escouade_nb/kernel_mcp/acp_channel.py``): the real server (``KernelServer``, the ``mcp`` SDK's own
loop per connection), each message as the session hands the agent's ``mcp/*`` requests to it.

It forges another agent's ``serverId`` and ``connectionId`` (refused as unknown, nothing runs under the
other grant), floods (requests under way and connections are bounded, refused with an error, nothing
queued), sends garbage (a clear JSON-RPC error, and the connection still answers), and drops the
connection while a ``run_code`` card waits (the card is withdrawn, the code never runs).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from deadlines import run, until

from escouade_nb.kernel_mcp.acp_channel import MAX_CONNECTIONS, MAX_IN_FLIGHT, ChannelError
from escouade_nb.kernel_mcp.server import KernelServer, Refused


class Owner:
    """A ToolOwner: ``mode`` allow / wait (its ``ask_run_code`` waits until cancelled)."""

    def __init__(self, name: str, mode: str = "allow") -> None:
        self.name = name
        self.mode = mode
        self.asked: list[str] = []
        self.cancelled = 0
        self.ran: list[str] = []

    async def ask_run_code(self, code: str) -> None:
        self.asked.append(code)
        if self.mode == "refuse":
            raise Refused("no")
        if self.mode == "wait":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise

    def ran_code(self, code: str, result: dict) -> None:
        self.ran.append(code)


async def opened(channel: Any) -> str:
    """An MCP connection through ``channel``, initialized: its connectionId."""
    connection = (await channel.handle("mcp/connect", {"serverId": channel.server_id}))["connectionId"]
    result = await channel.handle("mcp/message", {"connectionId": connection, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "hostile", "version": "1"}}})
    assert result["serverInfo"]["name"] == "escouade"
    await channel.handle("mcp/message", {"connectionId": connection, "method": "notifications/initialized"},
                         request=False)
    return connection


def call(connection: str, tool: str, arguments: dict) -> dict:
    return {"connectionId": connection, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def text(result: dict) -> str:
    return "".join(part.get("text", "") for part in result.get("content", []))


def test_another_agents_server_and_connection_ids_are_refused_and_run_nothing():
    async def main() -> None:
        ns: dict[str, Any] = {"secret": 42}
        server = await KernelServer(namespace=ns).start()
        try:
            victim, attacker = Owner("victim"), Owner("attacker")
            theirs = server.channel(server.grant(victim))
            mine = server.channel(server.grant(attacker))
            connection = await opened(theirs)
            with pytest.raises(ChannelError, match="unknown serverId"):
                await mine.handle("mcp/connect", {"serverId": theirs.server_id})
            for method in ("mcp/message", "mcp/disconnect"):
                with pytest.raises(ChannelError, match="unknown connectionId"):
                    await mine.handle(method, call(connection, "run_code", {"code": "ns_hit = 1"}))
            assert victim.asked == [] and attacker.asked == [] and "ns_hit" not in ns
            # the victim's connection is untouched, and answers under the victim's grant only
            result = await theirs.handle("mcp/message", call(connection, "run_code", {"code": "print(secret)"}))
            assert "42" in text(result) and victim.asked == ["print(secret)"] and attacker.asked == []
        finally:
            await server.aclose()

    run(main())


def test_a_flood_is_bounded_and_refused_not_queued():
    async def main() -> None:
        server = await KernelServer(namespace={}).start()
        try:
            owner = Owner("flooder", "wait")
            channel = server.channel(server.grant(owner))
            connection = await opened(channel)
            waiting = [asyncio.ensure_future(channel.handle("mcp/message", call(connection, "run_code",
                                                                                {"code": f"x = {i}"})))
                       for i in range(MAX_IN_FLIGHT)]
            await until(lambda: len(owner.asked) == MAX_IN_FLIGHT, timeout=60, what="every card waiting")
            with pytest.raises(ChannelError, match="under way") as refused:
                await channel.handle("mcp/message", call(connection, "run_code", {"code": "one too many"}))
            assert refused.value.code == -32000 and "one too many" not in owner.asked
            others = [await channel.handle("mcp/connect", {"serverId": channel.server_id})
                      for _ in range(MAX_CONNECTIONS - 1)]
            assert len(others) == MAX_CONNECTIONS - 1
            with pytest.raises(ChannelError, match="connections are open"):
                await channel.handle("mcp/connect", {"serverId": channel.server_id})
            await channel.aclose()  # the pipe closed: every card withdrawn, nothing run
            results = await asyncio.gather(*waiting, return_exceptions=True)
            assert all(isinstance(r, (ChannelError, asyncio.CancelledError)) or r.get("isError") for r in results)
            await until(lambda: owner.cancelled == MAX_IN_FLIGHT, timeout=60, what="every card withdrawn")
            assert owner.ran == []
        finally:
            await server.aclose()

    run(main())


@pytest.mark.parametrize("params, error", [
    ("not an object", "params must be an object"),
    ({"method": 7}, "method must be a non-empty string"),
    ({"method": "tools/call", "params": ["a", "list"]}, "params must be an object"),
    ({"method": "tools/call", "params": {"name": {"not": "a name"}}}, "Invalid request parameters"),  # the SDK's
    ({"method": "tools/call", "params": {"name": "run_code", "arguments": {"code": 7}}}, None),
])
def test_garbage_gets_a_clear_error_and_the_connection_still_answers(params, error):
    async def main() -> None:
        server = await KernelServer(namespace={"kept": 1}).start()
        try:
            channel = server.channel(server.grant(Owner("garbage")))
            connection = await opened(channel)
            message = {"connectionId": connection, **params} if isinstance(params, dict) else params
            try:
                answer = await channel.handle("mcp/message", message)
            except ChannelError as exc:
                assert error is not None and error in exc.message and "\n" not in exc.message, exc.message
            else:  # the SDK's own answer for bad arguments: an error the model reads, nothing run
                assert error is None and answer.get("isError"), answer
            result = await channel.handle("mcp/message", call(connection, "list_variables", {}))
            assert "kept" in text(result)
        finally:
            await server.aclose()

    run(main())


def test_a_connection_dropped_while_its_card_waits_withdraws_the_card_and_runs_nothing():
    async def main() -> None:
        ns: dict[str, Any] = {}
        server = await KernelServer(namespace=ns).start()
        try:
            owner = Owner("dropper", "wait")
            channel = server.channel(server.grant(owner))
            connection = await opened(channel)
            pending = asyncio.ensure_future(channel.handle("mcp/message", call(connection, "run_code",
                                                                                {"code": "dropped = True"})))
            await until(lambda: owner.asked, timeout=60, what="the card waiting")
            assert await channel.handle("mcp/disconnect", {"connectionId": connection}) == {}
            got = await asyncio.gather(pending, return_exceptions=True)
            assert isinstance(got[0], ChannelError) or got[0].get("isError"), got
            await until(lambda: owner.cancelled == 1, timeout=60, what="the card withdrawn")
            assert "dropped" not in ns and owner.ran == []
            with pytest.raises(ChannelError, match="unknown connectionId"):
                await channel.handle("mcp/message", call(connection, "list_variables", {}))
        finally:
            await server.aclose()

    run(main())
