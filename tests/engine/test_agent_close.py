"""``Agent.close()`` ends an agent the way ACP's stdio transport says a session ends: its
stdin is closed, and it has :data:`~escouade_nb.wire.process.EOF_GRACE` seconds to exit
by itself before its process group gets SIGTERM, then SIGKILL (issue 14, "Lifecycle")."""

from __future__ import annotations

import signal
import time

from scripted_agent import P_INIT, P_NEW, Script, run, steps_of

from escouade_nb.wire.process import EOF_GRACE

HANDSHAKE = steps_of(P_INIT + "\n" + P_NEW)


async def _close_timed(s: Script) -> tuple[float, int | None]:
    agent = s.agent()
    try:
        await agent.ready()
    except BaseException:
        await agent.close()
        raise
    started = time.monotonic()
    await agent.close()
    return time.monotonic() - started, agent.exit.code


def test_an_agent_that_exits_on_end_of_input_is_not_signalled(script):
    s = script(HANDSHAKE)  # once its steps are done, stdin's end exits it with 0
    took, code = run(_close_timed(s))
    assert code == 0  # it ended by itself: before the grace it died of the SIGTERM sent at once (-15)
    assert took < 1.0, f"close took {took:.2f} s"
    s.assert_ok()


def test_an_agent_that_ignores_end_of_input_gets_the_grace_then_sigterm(script):
    s = script([*HANDSHAKE, {"hang": True}])  # never reads its stdin's end; SIGTERM ends it
    took, code = run(_close_timed(s))
    assert code == -signal.SIGTERM
    assert EOF_GRACE <= took < EOF_GRACE + 1.0, f"close took {took:.2f} s"


def test_an_agent_that_ignores_end_of_input_and_sigterm_is_killed(script):
    s = script([{"ignore_sigterm": True}, *HANDSHAKE, {"hang": True}])
    took, code = run(_close_timed(s))
    assert code == -signal.SIGKILL
    assert EOF_GRACE + 3.0 <= took < EOF_GRACE + 4.0, f"close took {took:.2f} s"  # 3 s: terminate_group's grace
