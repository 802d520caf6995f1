"""The baseline of the ingest benchmarks: the ACP SDK alone (a no-op client) reading what the
blast agent writes. One copy, run by ``run.py`` in its own process and by ``views.py`` inside
kernels (its text is sent to the kernel): ``ingest_sdk(n, argv, cwd)`` → seconds for n updates."""

import os
import subprocess
import time


async def ingest_sdk(n, argv, cwd):
    import acp

    class NoOp:
        async def session_update(self, session_id, update, **kw):
            return None

        async def request_permission(self, *a, **kw):
            raise RuntimeError("not expected")

    async with acp.spawn_agent_process(NoOp(), *argv, transport_kwargs={"stderr": subprocess.DEVNULL,
                                                                         "limit": 50 * 2**20}) as (conn, _proc):
        await conn.initialize(protocol_version=1)
        session = await conn.new_session(cwd=str(cwd or os.getcwd()), mcp_servers=[])
        t0 = time.perf_counter()
        await conn.prompt(session_id=session.session_id, prompt=[acp.text_block(f"blast {n}")])
        return time.perf_counter() - t0
