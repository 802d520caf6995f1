"""The kernel-tool checks of a released agent started from a kernel (the scripted model's
``ESC-MCP <tool> <json>`` marker makes it call that tool of the kernel's server), shared by
the tests that reach an agent elsewhere (``--via ssh``, by URL).

The kernel holds the agent as ``a``, ``sales`` (a dict) in its namespace, and ``asyncio``
and ``json`` imported."""

from __future__ import annotations

import json

from model_server import FINAL_PREFIX
from test_agents import TURN_TIMEOUT, AgentKernel

RUN = "piped = sum(sales.values())\nprint('piped', piped)"


def lists_variables(kernel: AgentKernel) -> dict:
    """The agent calls ``list_variables``; a card that waits for the user meanwhile (not the
    subject) is allowed. Returns ``{"text": the turn's text, "state": a.kernel_tools_state}``
    after checking that ``sales`` reached the model."""
    out = kernel.run(
        "t = a.send('ESC-MCP list_variables {} List the kernel variables.')\n"
        "async def _allow():  # a card that waits for the user (not the subject here) is allowed\n"
        "    while True:\n"
        "        card = await a.next_permission()\n"
        "        await asyncio.sleep(0.05)\n"
        "        if not card.answered:\n"
        "            card.choose(next(o for o in card.options if o['kind'] == 'allow_once')['optionId'])\n"
        "_allower = asyncio.ensure_future(_allow())\n"
        f"r = await asyncio.wait_for(t.wait(), {TURN_TIMEOUT})\n"
        "_allower.cancel()\n"
        "print('RESULT', json.dumps({'text': r.text, 'state': a.kernel_tools_state}))",
        timeout=TURN_TIMEOUT + 30)
    r = json.loads(out.text.split("RESULT", 1)[1])
    assert r["state"][0] == "connected", r
    assert f"{FINAL_PREFIX} list_variables returned:" in r["text"] and "sales" in r["text"], r["text"]
    return r


def run_code_card(kernel: AgentKernel) -> dict:
    """The agent asks ``run_code`` (:data:`RUN`): the turn is ``t`` and its first open card
    ``card`` in the kernel; returns what the card shows, checked to be the one card of that
    code, nothing run yet."""
    prompt = "ESC-MCP run_code " + json.dumps({"code": RUN}) + " Run this in the kernel."
    out = kernel.run(
        f"t = a.send({prompt!r})\n"
        "async def _first_open():\n"
        f"    while (card := await a.next_permission(timeout={TURN_TIMEOUT})).answered:\n"
        "        pass\n"
        "    return card\n"
        "card = await _first_open()\n"
        "print('CARD', json.dumps({'title': card.request.title, 'code': card.request.raw_input,\n"
        "  'pending': len(a.pending_cards), 'ran': 'piped' in globals()}))", timeout=TURN_TIMEOUT + 30)
    card = json.loads(out.text.split("CARD", 1)[1])
    assert card == {"title": "Run code in the kernel", "code": {"code": RUN}, "pending": 1, "ran": False}, card
    return card


def runs_behind_one_card(kernel: AgentKernel) -> None:
    """``run_code`` asked by the agent: one "Run code in the kernel" card, nothing run before it
    is allowed, then the code runs in the kernel's namespace and its output reaches the model."""
    run_code_card(kernel)
    out = kernel.run(
        "card.choose(next(o for o in card.options if o['kind'] == 'allow_once')['optionId'])\n"
        f"r = await asyncio.wait_for(t.wait(), {TURN_TIMEOUT})\n"
        "print('RESULT', json.dumps({'text': r.text, 'piped': piped, 'cards': sum(\n"
        "  1 for i in r.items if type(i).__name__ == 'Permission' and i.request.title == 'Run code in the kernel')}))",
        timeout=TURN_TIMEOUT + 30)
    r = json.loads(out.text.split("RESULT", 1)[1])
    assert r["piped"] == 90.5 and r["cards"] == 1, r
    assert f"{FINAL_PREFIX} run_code returned:" in r["text"] and "piped 90.5" in r["text"], r["text"]
    kernel.run("del piped")
