"""An agent built outside the squad (``escouade_nb.Agent(...)``) forks, as it always did:
into the process-wide squad (``get_squad().fork``), the real fake agent over real pipes."""

import asyncio
import subprocess
import sys

import escouade_nb
from escouade_nb.manifest import discover, locate_program


def test_an_agent_built_outside_the_squad_forks_into_the_process_wide_squad(tmp_path):
    ref = discover().find("fake")

    async def go():
        parent = escouade_nb.Agent(ref, program=locate_program(ref.harness), cwd=tmp_path, name="lone")
        squad = escouade_nb.get_squad()
        child = None
        try:
            await parent.send("think of a pomegranate")
            child = parent.fork("lone-child")
            assert squad.agents["lone-child"] is child
            await child.ready()
            notices = [i.text for i in child.conversation.items if type(i).__name__ == "Notice"]
            assert any("Forked from lone as a new session" in n for n in notices)
        finally:
            await parent.close()
            if child is not None:
                await child.close()
                squad.agents.pop("lone-child", None)
    asyncio.run(asyncio.wait_for(go(), 60))


def test_the_public_agent_name_loads_who_forks_it():
    """``escouade_nb.Agent`` alone (no squad named) registers the squad as the forker of
    agents that no squad holds."""
    code = ("import escouade_nb; escouade_nb.Agent; from escouade_nb.engine import interfaces; "
            "print(interfaces._default_forker is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "True"
