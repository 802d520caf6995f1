"""Remote agents by URL: where they run, and the reconnection after a dropped connection.

An agent reached by URL (``Squad.connect``) runs behind the local stdio carrier of
:mod:`~...wire.url_bridge`, its launcher: everything else is a local agent's (session,
cards, journal, record). When the connection drops, the carrier exits with
:data:`~...wire.url_bridge.LOST`; the agent's process end (``Live.end``) then closes the
dropped turn's cards ("connection lost"), fails its turn saying so, and calls
:func:`reconnect`: up to :data:`TRIES` tries with a doubling delay (:data:`FIRST_DELAY`
seconds first, at most :data:`MAX_DELAY`), each waiting for the server's port to answer
before a new carrier starts; the new process reopens the session (``session/resume`` or
``session/load``, as the agent offers; its replay is matched against what the record has,
:class:`~...wire.reloads.ReplaySkip`, so nothing is said twice) and writes on in the same
transcript. The conversation says "Reconnected to HOST:PORT", or after the last try one
line saying it gave up.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ...core.adapters import adapt
from ...core.conversation import Conversation
from ...core.status import AgentStatus
from ...manifest import Harness, HarnessRef, Manifest
from ...wire import transcript as tr
from ...wire.errors import AgentError
from ...wire.reloads import ReplaySkip
from ...wire.url_bridge import LOST, url_of, where

log = logging.getLogger(__name__)

TRIES = 6
"""How many times a dropped connection is tried again before the agent is left exited."""
FIRST_DELAY = 0.5
"""Seconds before the first try; each next waits twice as long, up to :data:`MAX_DELAY`."""
MAX_DELAY = 8.0
"""The longest wait between two tries (seconds)."""
PROBE_TIMEOUT = 5.0
"""Seconds a try waits for the server's TCP port to answer."""


def place(via: Sequence[str]) -> str:
    """Where an agent runs, as its head says it: ``at HOST:PORT`` (a remote agent by URL;
    never its token nor its token file), ``via LAUNCHER…`` (a launcher), ``""`` (here)."""
    url = url_of(via)
    if url is not None:
        return f"at {where(url)}"
    return f"via {shlex.join(via)}" if via else ""


def lost(via: Sequence[str], code: int | None) -> str | None:
    """``HOST:PORT`` when an agent by URL ended because its connection dropped (its carrier's
    exit code :data:`~...wire.url_bridge.LOST`), else None."""
    url = url_of(via)
    return where(url) if url is not None and code == LOST else None


def expected(agent: Any, session_id: str) -> ReplaySkip:
    """What a reload of ``session_id`` will replay that ``agent``'s record already has (its
    transcript read into a scratch conversation, as a resume reads it)."""
    transcript = agent.transcript
    if transcript is None:
        return ReplaySkip()
    transcript.flush()
    scratch = Conversation()
    info = tr.replay(iter(tr.history(transcript.path)), scratch,
                     adapt=lambda update: adapt(agent.harness.short_id, scratch, update))
    return ReplaySkip.of(tr.expected_replay(info, session_id))


async def _answers(url: str) -> bool:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "wss" else 80)
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, port), PROBE_TIMEOUT)
    except (OSError, TimeoutError):
        return False
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return True


async def reconnect(agent: Any, session_id: str | None) -> None:
    """Reach ``agent``'s server again (``agent``: its state, typed ``Any``: the launch wing sees no
    handle of the engine's) and reopen ``session_id`` (see the module). Returns
    when reconnected, when it gave up (said in the conversation), or when the agent was
    closed or restarted meanwhile (then silently)."""
    url = url_of(agent.via)
    assert url is not None, "reconnect() of an agent not reached by URL"
    at = where(url)
    delay = FIRST_DELAY
    fresh = session_id is None  # a new session: none to reopen, or it could not be reopened
    for attempt in range(1, TRIES + 1):
        await asyncio.sleep(delay)  # backoff between tries (not a wait for an event: the server gives none)
        delay = min(delay * 2, MAX_DELAY)
        # EXITED: the drop; FAILED: a try of ours that could not start. Anything else: the user's move
        if agent.status not in (AgentStatus.EXITED, AgentStatus.FAILED) or agent.restarting:
            return
        if not await _answers(url):
            continue
        agent.resume_reconnected(None if fresh else session_id, ReplaySkip() if fresh or session_id is None
                                 else expected(agent, session_id))
        agent.reconnecting = True
        try:
            agent.start()
            await agent.ready()
        except AgentError as exc:
            if agent.status is AgentStatus.FAILED and not fresh:
                fresh = True
                agent.conversation.add_notice(
                    f"Session {session_id} could not be reopened ({exc}); the next try starts a new session "
                    f"(the conversation above stays as recorded).", level="warning")
            continue  # refused, or dropped again while it started: the next try
        finally:
            agent.reconnecting = False
        agent.conversation.add_notice(f"Reconnected to {at} (try {attempt} of {TRIES}).")
        return
    agent.conversation.add_notice(f"Gave up reconnecting to {at} after {TRIES} tries: restart the agent to try "
                                  f"again.", level="error")


def remote_harness() -> HarnessRef:
    """The harness of an agent by URL when the user names none: a generic ACP agent (no
    adapters, no modes of ours, no program here: it is served elsewhere)."""
    manifest = Manifest(id="remote", name="Remote agents")
    return HarnessRef(manifest=manifest, harness=Harness(id="acp", name="ACP agent by URL", acp={"args": []}),
                      path=Path("(remote)"), source="extra")
