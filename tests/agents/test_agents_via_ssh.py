"""Released agents started ``--via "ssh …"`` reach the kernel's MCP server through the
launcher's reverse forward (``escouade_nb/engine/launch/ssh_forward.py``) where the server allows
it and the agent takes HTTP, else over their own pipe (the relay beside them,
``escouade_nb/engine/launch/pipe_relay.py``: MCP-over-ACP).

Per agent (skipped when not installed): a real sshd on 127.0.0.1 (``tests/ssh_servers.py``)
whose ``SetEnv`` gives the "remote" logins the agent's test environment (the scripted model
server, a temporary HOME, the install folder on PATH, this run's suite marker): what a remote
host configured for the agent has. The agent is started from a kernel through that sshd and
told (``ESC-MCP``) to call ``list_variables``: the answer, from the kernel's namespace, must
reach it. An agent that takes no HTTP MCP servers or puts them on a command line (mistral-vibe,
claude-agent) gets it over its own pipe; so do codex, gemini and claude-agent through an sshd that
forbids forwarding (``AllowTcpForwarding no``).
"""

from __future__ import annotations

import json
import os
import shlex
import sys

import pytest

from agent_configs import AGENTS, DROP, SUITE_TOKEN
from model_server import FINAL_PREFIX
from ssh_servers import sshd
from test_agents import TURN_TIMEOUT, AgentKernel

pytestmark = pytest.mark.agents

NO_FORWARD = {"claude-agent", "mistral-vibe"}  # mcpInArgv / no HTTP MCP (docs/kernel-mcp-server.md): the pipe
FORBIDDEN = ("codex", "gemini", "claude-agent")  # also played through an sshd with AllowTcpForwarding no
CASES = [(harness, "allowed") for harness in AGENTS] + [(harness, "forbidden") for harness in FORBIDDEN]


def _set_env(env: dict[str, str]) -> str:
    """The sshd_config ``SetEnv`` line for ``env`` (one line: sshd uses the first ``SetEnv`` it
    reads; each word double-quoted)."""
    for name, value in env.items():
        if '"' in value or "\n" in value:
            pytest.skip(f"{name}'s value cannot be written in an sshd_config SetEnv")
    return "SetEnv " + " ".join(f'"{name}={value}"' for name, value in env.items()) + "\n"


@pytest.mark.parametrize("harness, forwarding", CASES)
def test_a_released_agent_through_ssh_lists_the_kernels_variables(harness, forwarding, model_server, tmp_path):
    spec = AGENTS[harness]
    bin_dir = spec.bin_dir()
    if bin_dir is None:
        pytest.skip(f"{harness} is not installed (scripts/install-agents.sh {harness})")
    remote = {**spec.env(tmp_path / "home", model_server.url), "ESCOUADE_AGENT_SUITE": SUITE_TOKEN,
              "PATH": f"{bin_dir}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}/usr/bin:/bin"}
    work = tmp_path / "work"
    work.mkdir()
    config = _set_env(remote) + ("AllowTcpForwarding no\n" if forwarding == "forbidden" else "")
    with sshd(tmp_path / "sshd", config) as launcher:
        env = {k: v for k, v in os.environ.items() if k not in DROP}  # the kernel's: no agent configuration
        env["ESCOUADE_AGENT_SUITE"] = SUITE_TOKEN
        kernel = AgentKernel(tmp_path, env)
        try:
            kernel.run("%load_ext escouade_nb\nimport asyncio, json\n"
                       "sales = {'north': 120.5, 'south': -30.0}\n")
            kernel.run(f"a = %escouade {harness} --via {shlex.quote(shlex.join(launcher))} "
                       f"--cwd {shlex.quote(str(work))} --as {harness}-ssh\nawait a.ready()", timeout=180)
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
            print(f"\n{harness} through ssh ({forwarding} forwarding): {r['state']}")
            assert r["state"][0] == "connected", r
            piped = forwarding == "forbidden" or harness in NO_FORWARD
            assert r["state"][1].startswith("over the agent's own pipe" if piped else "through ssh's reverse forward"), r
            assert f"{FINAL_PREFIX} list_variables returned:" in r["text"] and "sales" in r["text"], r["text"]
            if forwarding == "forbidden":  # and a run_code over the pipe, behind exactly one card
                _runs_behind_one_card(kernel)
        finally:
            try:
                kernel.run("await a.close()", allow_error=True, timeout=60)
            finally:
                kernel.shutdown()


RUN = "piped = sum(sales.values())\nprint('piped', piped)"


def _runs_behind_one_card(kernel: AgentKernel) -> None:
    """``run_code`` asked through the agent's pipe: one "Run code in the kernel" card, nothing run
    before it is allowed, then the code runs in the kernel's namespace and its output reaches the model."""
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
    out = kernel.run(
        "card.choose(next(o for o in card.options if o['kind'] == 'allow_once')['optionId'])\n"
        f"r = await asyncio.wait_for(t.wait(), {TURN_TIMEOUT})\n"
        "print('RESULT', json.dumps({'text': r.text, 'piped': piped, 'cards': sum(\n"
        "  1 for i in r.items if type(i).__name__ == 'Permission' and i.request.title == 'Run code in the kernel')}))",
        timeout=TURN_TIMEOUT + 30)
    r = json.loads(out.text.split("RESULT", 1)[1])
    assert r["piped"] == 90.5 and r["cards"] == 1, r
    assert f"{FINAL_PREFIX} run_code returned:" in r["text"] and "piped 90.5" in r["text"], r["text"]
