"""Released agents call the kernel's MCP server (``escouade``) through the product, in a
real kernel, offline: the scripted model (marker ``ESC-MCP <tool> <json>``) makes the agent
call ``inspect_variable`` on a live pandas DataFrame, then ``run_code``.

For each agent of ``MCP_AGENTS`` (installed by ``scripts/install-agents.sh``; reference
``mcp-in-the-kernel.md`` §4):

* ``inspect_variable``: the turn ends with the summary (shape, columns) in the model's final
  text, and no card waited for the user — the agent's own permission request for a read of
  the kernel's server was settled by escouade_nb (who answered is asserted);
* ``run_code``: the agent's own request is answered by escouade_nb without a card, and
  exactly one card "Run code in the kernel" waits; clicking its "Run" button (the click
  message a browser sends) runs the code in the user's namespace, and its output reaches
  the model (the final text).

What each agent sent (the MCP tool names its model saw, its ``session/request_permission``
shapes) is printed (``-s``) and added to ``agent-report.json`` under pytest's temporary folder.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest

from agent_configs import AGENTS, DROP, SUITE_TOKEN, sandbox_flags
from kernel_client import act, buttons_of, wait_for
from model_server import FINAL_PREFIX
from test_agents import REPORT, TURN_TIMEOUT, AgentKernel

pytestmark = pytest.mark.agents

MCP_AGENTS = ["fast-agent", "kimi", "claude-agent", "codex", "gemini", "mistral-vibe", "opencode"]
# claude-agent and mistral-vibe get the stdio bridge with a token file (claude's manifest says mcpInArgv; vibe takes
# no HTTP). opencode sends no permission request for MCP tools with the suite's config: its own tool call
# carries our card. mistral-vibe names the tools mcp_escouade.<tool> and its requests carry only the call's id.
ASKS_FIRST = set(MCP_AGENTS) - {"opencode"}
RUN_CODE = "kt_total = float(df.revenue.sum()); print('doubled', kt_total * 2)"


SANDBOXED = ["codex+sandbox", "claude-agent+sandbox"]
"""Under ``--sandbox`` too: codex reaches the kernel's server over HTTP on 127.0.0.1 (the
network is shared), claude-agent through the stdio bridge, whose token file's folder is
bound read-only into the sandbox."""


@pytest.fixture(scope="module", params=MCP_AGENTS + SANDBOXED)
def agent(request, model_server, tmp_path_factory):
    """A kernel with a DataFrame ``df`` and the agent started in it (``+sandbox``: with
    ``--sandbox``), connected to the kernel's server; yields ``(harness, kernel)``."""
    yield from agent_in_kernel(request.param, model_server, tmp_path_factory)


def agent_in_kernel(param: str, model_server, tmp_path_factory):
    """:func:`agent`'s work for ``param`` (``HARNESS`` or ``HARNESS+sandbox``): a generator
    yielding ``(harness, kernel)`` once, closing the agent and the kernel after (skips when
    the agent is not installed)."""
    harness, _, variant = param.partition("+")
    if variant == "sandbox" and (shutil.which("bwrap") is None or shutil.which("pasta") is None):
        pytest.skip("bubblewrap or passt's pasta is not installed (apt-get install bubblewrap passt)")
    spec = AGENTS[harness]
    bin_dir = spec.bin_dir()
    if bin_dir is None:
        pytest.skip(f"{harness} is not installed (scripts/install-agents.sh {harness})")
    root = tmp_path_factory.mktemp(f"kernel-tools-{harness}")
    env = {k: v for k, v in os.environ.items() if k not in DROP}
    env.update(spec.env(root / "home", model_server.url))
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["ESCOUADE_AGENT_SUITE"] = SUITE_TOKEN  # inherited by the agents: see conftest
    work = root / "work"
    work.mkdir()
    kernel = AgentKernel(root, env)
    kernel.run(
        "%load_ext escouade_nb\nimport asyncio, json, time\nimport pandas as pd\n"
        "from escouade_nb.widgets import views_of\n"
        "df = pd.DataFrame({'region': ['north', 'south', 'east'], 'revenue': [120.5, -30.0, 44.0]})\n"
        "wire, updates = [], []  # the agent's permission requests and our answers; its tool call updates\n"
        "_seq = __import__('itertools').count()  # one order for both lists\n"
        "def _watch(d, m):\n"
        "    if m.get('method') == 'session/request_permission' or (d == 'out' and 'result' in m\n"
        "            and isinstance(m['result'], dict) and 'outcome' in m['result']):\n"
        "        wire.append((d, m, next(_seq)))\n"
        "    u = (m.get('params') or {}).get('update') or {} if m.get('method') == 'session/update' else {}\n"
        "    if u.get('sessionUpdate') in ('tool_call', 'tool_call_update'):\n"
        "        updates.append({'seq': next(_seq), **{k: u.get(k) for k in ('sessionUpdate', 'toolCallId', 'title',\n"
        "                                              'kind', 'status', 'rawInput') if k in u}})\n"
        "async def next_open(agent, timeout):  # the next card still waiting (reads are settled by escouade_nb)\n"
        "    while (card := await agent.next_permission(timeout=timeout)).answered:\n"
        "        pass\n"
        "    return card")
    out = kernel.run(
        f"_t0 = time.monotonic()\n"
        f"a = %escouade {harness} --cwd {shlex.quote(str(work))} --as {harness}-kt"
        f"{sandbox_flags(model_server.url) if variant == 'sandbox' else ''}\n"
        f"await a.ready()\n"
        f"a.transport.observers.append(_watch)\n"
        f"print('READY', round(time.monotonic() - _t0, 3))\n"
        f"print('MCP', json.dumps(a.agent_capabilities.get('mcpCapabilities')))", timeout=120)
    ready = float(out.text.split("READY")[1].split()[0])
    caps = json.loads(out.text.split("MCP", 1)[1])
    REPORT.setdefault(harness, {})["kernel_tools"] = {"ready_s": ready, "mcpCapabilities": caps}
    print(f"\n{harness}: ready {ready:.2f} s, mcpCapabilities {caps}")
    try:
        yield harness, kernel
    finally:
        try:
            kernel.run("await a.close()", allow_error=True, timeout=60)
        finally:
            kernel.shutdown()
        (Path(tmp_path_factory.getbasetemp()) / "agent-report.json").write_text(json.dumps(REPORT, indent=2))


def _updates(kernel, since: int) -> list[dict]:
    """The agent's ``tool_call`` / ``tool_call_update`` notifications since ``since``
    (id, title, kind, status, rawInput)."""
    return json.loads(kernel.run(f"print(json.dumps(updates[{since}:], default=str))").text)


def _wire(kernel, since: int) -> list[dict]:
    """The permission requests the agent sent since ``since`` with our answer to each."""
    return json.loads(kernel.run(
        f"_reqs = [(m, n) for d, m, n in wire[{since}:] if d == 'in']\n"
        f"_answers = {{m['id']: m['result'] for d, m, n in wire if d == 'out'}}\n"
        f"print(json.dumps([{{'seq': n, 'toolCall': m['params']['toolCall'], 'options': m['params']['options'],\n"
        f"                   'answer': _answers.get(m['id'])}} for m, n in _reqs], default=str))").text)


def _model_calls(server, mark: int) -> list[dict]:
    """The tool calls the scripted model answered since ``mark``, with the agent's MCP
    tool names it was offered."""
    seen = server.since(mark)
    assert seen and all(e["client"] == "127.0.0.1" for e in seen)
    return [{"answer": e["answer"], "offered": [t for t in e.get("tools") or [] if "escouade" in t]}
            for e in seen if str(e.get("answer", "")).startswith("tool ")]


def _report(harness: str, scenario: str, data: dict) -> None:
    REPORT.setdefault(harness, {}).setdefault("kernel_tools", {})[scenario] = data
    print(f"\n{harness} {scenario}: {json.dumps(data, default=str)[:3000]}")


def test_inspect_variable_reaches_the_model_and_no_card_waits(agent, model_server):
    harness, kernel = agent
    wait_for(kernel, "a.kernel_tools_state[0] == 'connected'", timeout=30)
    since, usince = map(int, kernel.run("print(len(wire), len(updates))").text.split())
    mark = model_server.mark()
    out = kernel.run(
        "_t1 = time.monotonic()\n"
        "t = a.send('ESC-MCP inspect_variable {\"name\": \"df\"} Describe df from the kernel.')\n"
        "_card = asyncio.ensure_future(next_open(a, None))\n"
        f"_done, _ = await asyncio.wait({{_card, asyncio.ensure_future(t.wait())}}, timeout={TURN_TIMEOUT},\n"
        "                             return_when=asyncio.FIRST_COMPLETED)\n"
        "print('WAITING', _card.done() and _card.result().tool_call.title)\n"
        "_card.cancel()\n"
        "r = await t\n"
        "print('RESULT', json.dumps({'stop': r.stop_reason, 'text': r.text, 'secs': round(time.monotonic() - _t1, 3),\n"
        "  'answered': [(i.answered_by, i.tool_call.mcp if i.tool_call else None) for i in r.items\n"
        "               if type(i).__name__ == 'Permission'],\n"
        "  'tools': [(c.title, c.shown_status, c.mcp) for c in r.tool_calls],\n"
        "  'pending': len(a.pending_cards)}, default=str))", timeout=TURN_TIMEOUT + 30)
    assert "WAITING False" in out.text, out.text  # no card waited for the user
    r = json.loads(out.text.split("RESULT", 1)[1])
    requests = _wire(kernel, since)
    _report(harness, "inspect_variable", {"secs": r["secs"], "model": _model_calls(model_server, mark),
                                          "permission_requests": requests, "answered": r["answered"],
                                          "tool_updates": _updates(kernel, usince),
                                          "tools": r["tools"], "text": r["text"]})
    assert r["stop"] == "end_turn", r
    assert f"{FINAL_PREFIX} inspect_variable returned:" in r["text"], r["text"]
    assert "df: pandas.DataFrame" in r["text"] and "3×2" in r["text"] and "revenue" in r["text"], r["text"]
    assert r["pending"] == 0
    # the agent asked first (all but opencode do), and escouade_nb answered: a read of its own server
    assert requests or harness not in ASKS_FIRST, "the agent sent no permission request"
    assert r["answered"] == ([["escouade_nb (a read of the kernel's own server)", ["escouade", "inspect_variable"]]]
                             if harness in ASKS_FIRST else []), r["answered"]
    assert all(q["answer"]["outcome"]["outcome"] == "selected" for q in requests), requests


def test_run_code_one_card_clicked_run_and_the_output_reaches_the_model(agent, model_server):
    harness, kernel = agent
    since, usince = map(int, kernel.run("print(len(wire), len(updates))").text.split())
    mark = model_server.mark()
    prompt = "ESC-MCP run_code " + json.dumps({"code": RUN_CODE}) + " Run this in the kernel."
    out = kernel.run(
        f"_t1 = time.monotonic()\n"
        f"t = a.send({prompt!r})\n"
        f"card = await next_open(a, {TURN_TIMEOUT})\n"
        f"print('CARD', json.dumps({{'title': card.request.title, 'raw_input': card.request.raw_input,\n"
        f"  'options': [o['name'] for o in card.options], 'pending': len(a.pending_cards),\n"
        f"  'id': card.tool_call.tool_call_id}}))", timeout=TURN_TIMEOUT + 15)
    card = json.loads(out.text.split("CARD", 1)[1])
    assert card["title"] == "Run code in the kernel", card
    assert card["raw_input"] == {"code": RUN_CODE}
    assert card["options"] == ["Run", "Run without asking again in this session", "Don't run"]
    assert card["pending"] == 1  # exactly one card: the agent's own request (folded by identity) or the server's
    assert "kt_total" not in kernel.run("print(list(globals()))").text  # not run before the click
    wait_for(kernel, "views_of(a)[0].feed.find(views_of(a)[0].feed.key(card.permission)) is not None")
    model_id, html = json.loads(kernel.run("_v = views_of(a)[0]\n"
                                           "print(json.dumps([_v.model_id, _v.card_html(card)]))").text)
    run_button = next(b for b in buttons_of(html) if b["label"] == "Run")
    act(kernel, model_id, {"act": "choose", "key": run_button["key"], "value": run_button["value"]})  # a click
    wait_for(kernel, "t.done", timeout=TURN_TIMEOUT)
    out = kernel.run(
        "r = await t\n"
        "print('RESULT', json.dumps({'stop': r.stop_reason, 'text': r.text, 'secs': round(time.monotonic() - _t1, 3),\n"
        "  'label': card.label, 'total': kt_total, 'pending': len(a.pending_cards),\n"
        "  'cards': [(i.tool_call.mcp if i.tool_call else None, i.answered_by, i.tool_call.title) for i in r.items\n"
        "            if type(i).__name__ == 'Permission'],\n"
        "  'tools': [(c.title, c.shown_status, c.mcp) for c in r.tool_calls]}, default=str))")
    r = json.loads(out.text.split("RESULT", 1)[1])
    requests = _wire(kernel, since)
    _report(harness, "run_code", {"secs": r["secs"], "model": _model_calls(model_server, mark),
                                  "permission_requests": requests, "cards": r["cards"], "tools": r["tools"],
                                  "tool_updates": _updates(kernel, usince),
                                  "text": r["text"]})
    assert r["label"] == "Allowed by you: Run", r["label"]
    assert r["total"] == 134.5  # it ran in the user's namespace
    assert r["stop"] == "end_turn", r
    assert f"{FINAL_PREFIX} run_code returned:" in r["text"] and "doubled 269.0" in r["text"], r["text"]
    assert r["pending"] == 0
    # the only card of the turn, in the agent's own tool call
    assert [c[:2] for c in r["cards"]] == [[["escouade", "run_code"], "you"]], r["cards"]
    assert len([t for t in r["tools"] if t[2] == ["escouade", "run_code"]]) == 1, r["tools"]  # one item per call
    # the agent asked for run_code first: its request provably asked for exactly this code, so it was the card,
    # answered by you; the server then ran that code with no second card
    assert requests or harness not in ASKS_FIRST, "the agent sent no permission request"
    for q in requests:
        assert q["answer"]["outcome"]["outcome"] == "selected", q
        assert q["answer"]["_meta"]["escouade"]["by"] == "you", q
