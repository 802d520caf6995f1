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

import os
import shlex
import sys

import pytest

from agent_configs import AGENTS, DROP, SUITE_TOKEN
from kernel_tool_checks import lists_variables, runs_behind_one_card
from ssh_servers import sshd
from test_agents import AgentKernel

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
            r = lists_variables(kernel)
            print(f"\n{harness} through ssh ({forwarding} forwarding): {r['state']}")
            piped = forwarding == "forbidden" or harness in NO_FORWARD
            assert r["state"][1].startswith("over the agent's own pipe" if piped else "through ssh's reverse forward"), r
            if forwarding == "forbidden":  # and a run_code over the pipe, behind exactly one card
                runs_behind_one_card(kernel)
        finally:
            try:
                kernel.run("await a.close()", allow_error=True, timeout=60)
            finally:
                kernel.shutdown()

