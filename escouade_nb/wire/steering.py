"""The wire of steering: putting the user's text into a prompt turn that is running.

Two extensions are known (neither is in ACP's schema):

``_session/steering`` (claude-agent-acp, codex-acp, pi-acp)
    Advertised in the ``initialize`` answer's top-level ``_meta.steering.supported``
    (not inside ``agentCapabilities``). Request ``{"sessionId", "prompt": [ContentBlock],
    "_meta": {"steering": {"idleBehavior": "promptRequired"}}}``; the answer's
    ``outcome`` is ``injected`` (the text joined the running turn, whose
    ``session/prompt`` answer comes at its real end), ``promptRequired`` (no turn was
    running: nothing was done, send a prompt), ``startedNewTurn`` (an agent that ignores
    ``idleBehavior`` started a turn of its own) or ``failed``.
``_goose/unstable/session/steer`` (goose)
    Not advertised: goose names the running turn's run in a ``session_info_update``
    whose ``_meta.goose.activeRunId`` is the run id (``null`` once it ends). Request
    ``{"sessionId", "expectedRunId", "prompt": [ContentBlock]}``; the answer is
    ``{"runId", "messageId"}``, an ``invalid_params`` error when no run is active or
    another one is.
"""

from __future__ import annotations

from typing import Any

STEERING = "_session/steering"
"""The steering request of claude-agent-acp, codex-acp and pi-acp."""
GOOSE_STEER = "_goose/unstable/session/steer"
"""Goose's steering request (needs the running turn's run id)."""
METHODS = (STEERING, GOOSE_STEER)
DELIVERED = ("injected", "startedNewTurn")
"""``_session/steering`` outcomes that mean the agent has the text."""


def advertised(init_meta: dict[str, Any] | None) -> bool:
    """Whether an ``initialize`` answer's top-level ``_meta`` advertises ``_session/steering``."""
    steering = (init_meta or {}).get("steering")
    return isinstance(steering, dict) and steering.get("supported") is True


def goose_run_id(session_meta: dict[str, Any] | None) -> str | None:
    """The running turn's run id goose announced (``_meta.goose.activeRunId`` of its
    ``session_info_update``s, merged), else None."""
    goose = (session_meta or {}).get("goose")
    run = goose.get("activeRunId") if isinstance(goose, dict) else None
    return run if isinstance(run, str) and run else None


def params(method: str, session_id: str, prompt: list[dict[str, Any]], run_id: str | None = None) -> dict[str, Any]:
    """The request's params for ``method`` (:data:`STEERING` or :data:`GOOSE_STEER`)."""
    if method == GOOSE_STEER:
        return {"sessionId": session_id, "expectedRunId": run_id, "prompt": prompt}
    return {"sessionId": session_id, "prompt": prompt, "_meta": {"steering": {"idleBehavior": "promptRequired"}}}


def delivered(method: str, answer: dict[str, Any]) -> bool:
    """Whether the answer (a JSON-RPC response message) to a steering request of
    ``method`` says the agent took the text (an error answer: it did not)."""
    result = answer.get("result")
    if "error" in answer or not isinstance(result, dict):
        return False
    if method == GOOSE_STEER:
        return isinstance(result.get("runId"), str)
    return result.get("outcome") in DELIVERED
