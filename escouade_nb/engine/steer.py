"""Steering: the user's text sent now, while a turn runs (``agent.steer``, the view's
*Steer now* and Ctrl+Enter).

Where the agent takes text into its running turn (:mod:`..wire.steering`:
``_session/steering`` when its ``initialize`` answer advertised
``_meta.steering.supported``; goose's ``_goose/unstable/session/steer`` while goose has
named the running turn's run id), the text is sent that way and the running turn carries
it: the conversation shows it, marked steered, where the agent's answer came. When the
agent says no turn is running any more (``promptRequired``, goose's error) or refuses,
the text goes as a prompt instead.

When the running turn's prompt has not gone yet (its checkpoint is being taken), nothing
runs on the agent's side: nothing is stopped, and the text joins that prompt — one
``session/prompt`` carries both, the steered blocks marked (:meth:`~.turns.TurnQueue.join`)
— so the agent reads the prompt and the steer together, as a steer into its running turn
would have it, and the transcript holds both as the conversation shows them.

Otherwise the running turn is stopped (``session/cancel``, as Stop does: what it produced
stays in the conversation) and a new prompt carries the text, marked steered (the
``session/prompt`` carries ``_meta.escouade.steered``, so the transcript — and a resume —
says so too). That prompt runs as soon as the stopped turn ends, before the prompts
queued earlier (:attr:`~.turns.TurnQueue.steered`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import acp

from ..core.prompt import blocks
from ..wire import steering
from .turns import Turn

Agent = Any  # the public Agent (engine/agent.py imports this module: no import back)

log = logging.getLogger(__name__)

STEER_TIMEOUT = 30.0
"""Seconds a steering request may wait for the agent's answer before the text goes as a prompt."""


def native_method(agent: Agent) -> str | None:
    """The steering request ``agent`` takes now: :data:`~..wire.steering.STEERING` when
    its ``initialize`` answer advertised it, :data:`~..wire.steering.GOOSE_STEER` while
    goose has named a running run id, else None."""
    live = agent.live
    if live is None or live.session.session_id is None:
        return None
    if steering.advertised(live.session.init_meta):
        return steering.STEERING
    if steering.goose_run_id(agent.conversation.session_meta) is not None:
        return steering.GOOSE_STEER
    return None


def steer(agent: Agent, prompt: str | Sequence[Any]) -> Turn:
    """Send ``prompt`` (text, or ACP content blocks) now; returns the :class:`Turn` that
    carries it (see :meth:`Agent.steer`)."""
    content = blocks(prompt)
    if not any(b.get("type") != "text" or str(b.get("text", "")).strip() for b in content):
        raise ValueError("steer() needs some text")
    queue = agent.turns
    running = queue.current
    if running is None or running.done:  # nothing to steer: a prompt, in its place in the queue
        return queue.send(Turn(agent, content))
    joined = queue.join(content)  # its prompt not sent yet: the text goes with it, nothing is stopped
    if joined is not None:
        return joined
    method = native_method(agent)
    if method is not None and agent.budget.card is None:  # a budget card waiting: no new prompt goes in
        _send_native(agent, running, method, content)
        return running
    return _stop_and_prompt(agent, content)


def _stop_and_prompt(agent: Agent, content: list[dict[str, Any]]) -> Turn:
    """The fallback: a steered prompt that runs right after the running turn, which is
    stopped (``session/cancel``) unless it has ended."""
    turn = Turn(agent, content)
    turn.steered = True
    agent.turns.steered.append(turn)
    agent.turns.agent.notify_status()  # the views list it first in the queue
    running = agent.turns.current
    if running is not None and not running.done:
        agent.cancel()
    return turn


def _send_native(agent: Agent, running: Turn, method: str, content: list[dict[str, Any]]) -> None:
    """Send the steering request in a task the turn queue owns; the running turn's
    followers wait for its answer (:attr:`~.turns.TurnQueue.holds`)."""
    queue = agent.turns
    task = asyncio.get_running_loop().create_task(_guarded(agent, running, method, content),
                                                  name=f"escouade steer {agent.name}")
    queue.holds.add(task)
    queue._tasks.add(task)  # close() cancels it with the turns
    task.add_done_callback(queue.holds.discard)
    task.add_done_callback(queue._tasks.discard)


async def _guarded(agent: Agent, running: Turn, method: str, content: list[dict[str, Any]]) -> None:
    """:func:`_native`; a bug of ours there still delivers the text, as a steered prompt."""
    try:
        await _native(agent, running, method, content)
    except Exception:
        log.exception("steering failed")
        _stop_and_prompt(agent, content)


async def _native(agent: Agent, running: Turn, method: str, content: list[dict[str, Any]]) -> None:
    live = agent.live
    session = live.session
    run_id = steering.goose_run_id(agent.conversation.session_meta)
    params = steering.params(method, str(session.session_id), content, run_id)

    def answered(message: dict[str, Any]) -> None:  # as it is read: the text lands in its wire place
        if steering.delivered(method, message):
            agent.conversation.add_user_message(content, steered=True)

    why = ""
    try:
        result = await session.request(method, params, timeout=STEER_TIMEOUT, on_answer=answered)
    except acp.RequestError as exc:
        why = f"it answered {method} with an error: {exc}"
    except (ConnectionError, TimeoutError) as exc:
        why = f"{method} got no answer ({exc or type(exc).__name__})"
    else:
        if steering.delivered(method, {"result": result}):
            return
        outcome = result.get("outcome") if isinstance(result, dict) else None
        if outcome == "promptRequired" or running.done:
            _stop_and_prompt(agent, content)  # the turn had ended: the text is the next prompt
            return
        why = f"it answered {method} with {outcome or result!r}"
    if agent.live is not live:  # restarted meanwhile: the text is the next prompt of the new process
        _stop_and_prompt(agent, content)
        return
    agent.conversation.add_notice(f"The agent did not take the text into its running turn ({why}): the turn is "
                                  f"stopped and the text sent as a new prompt.", level="warning")
    _stop_and_prompt(agent, content)


__all__ = ["STEER_TIMEOUT", "native_method", "steer"]
