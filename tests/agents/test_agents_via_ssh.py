"""Released agents started ``--via "ssh …"`` reach the kernel's MCP server through the
launcher's reverse forward (``escouade_nb/engine/launch/ssh_forward.py``).

Per agent (skipped when not installed): a real sshd on 127.0.0.1 (``tests/ssh_servers.py``)
whose ``SetEnv`` gives the "remote" logins the agent's test environment (the scripted model
server, a temporary HOME, the install folder on PATH, this run's suite marker): what a remote
host configured for the agent has. The agent is started from a kernel through that sshd and
told (``ESC-MCP``) to call ``list_variables``: the answer, from the kernel's namespace, must
reach it. An agent that takes no HTTP MCP servers or puts them on a command line (mistral-vibe,
claude-agent) is not offered the server through ssh, said in one line.
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

NO_FORWARD = {"claude-agent", "mistral-vibe"}  # mcpInArgv / no HTTP MCP (docs/kernel-mcp-server.md)


def _set_env(env: dict[str, str]) -> str:
    """The sshd_config ``SetEnv`` line for ``env`` (one line: sshd uses the first ``SetEnv`` it
    reads; each word double-quoted)."""
    for name, value in env.items():
        if '"' in value or "\n" in value:
            pytest.skip(f"{name}'s value cannot be written in an sshd_config SetEnv")
    return "SetEnv " + " ".join(f'"{name}={value}"' for name, value in env.items()) + "\n"


@pytest.mark.parametrize("harness", list(AGENTS))
def test_a_released_agent_through_ssh_lists_the_kernels_variables(harness, model_server, tmp_path):
    spec = AGENTS[harness]
    bin_dir = spec.bin_dir()
    if bin_dir is None:
        pytest.skip(f"{harness} is not installed (scripts/install-agents.sh {harness})")
    remote = {**spec.env(tmp_path / "home", model_server.url), "ESCOUADE_AGENT_SUITE": SUITE_TOKEN,
              "PATH": f"{bin_dir}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}/usr/bin:/bin"}
    work = tmp_path / "work"
    work.mkdir()
    with sshd(tmp_path / "sshd", _set_env(remote)) as launcher:
        env = {k: v for k, v in os.environ.items() if k not in DROP}  # the kernel's: no agent configuration
        env["ESCOUADE_AGENT_SUITE"] = SUITE_TOKEN
        kernel = AgentKernel(tmp_path, env)
        try:
            kernel.run("%load_ext escouade_nb\nimport asyncio, json\n"
                       "sales = {'north': 120.5, 'south': -30.0}\n")
            kernel.run(f"a = %escouade {harness} --via {shlex.quote(shlex.join(launcher))} "
                       f"--cwd {shlex.quote(str(work))} --as {harness}-ssh\nawait a.ready()", timeout=180)
            if harness in NO_FORWARD:
                state = json.loads(kernel.run("print(json.dumps(a.kernel_tools_state))").text)
                assert state == ["not offered", "through ssh it is offered as an HTTP server only, and this agent "
                                                "takes no HTTP MCP servers or puts them on a command line "
                                                "(acp.mcpInArgv)"], state
                return
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
                "print('RESULT', json.dumps({'text': r.text, 'state': a.kernel_tools_state,\n"
                "  'url': a.live.kernel.forward.url, 'local': a.live.kernel._server.url}))",
                timeout=TURN_TIMEOUT + 30)
            r = json.loads(out.text.split("RESULT", 1)[1])
            print(f"\n{harness} through ssh: {r['state']}, entry {r['url']} (the kernel's server: {r['local']})")
            assert r["state"][0] == "connected", r
            assert r["url"] != r["local"]
            assert f"{FINAL_PREFIX} list_variables returned:" in r["text"] and "sales" in r["text"], r["text"]
        finally:
            try:
                kernel.run("await a.close()", allow_error=True, timeout=60)
            finally:
                kernel.shutdown()
