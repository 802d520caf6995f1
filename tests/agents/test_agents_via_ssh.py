"""Released agents started ``--via LAUNCHER`` reach the kernel's MCP server: through ssh's reverse
forward (``escouade_nb/engine/launch/ssh_forward.py``) where the server allows it and the agent
takes HTTP, else over their own pipe (the relay beside them, ``escouade_nb/engine/launch/pipe_relay.py``:
MCP-over-ACP) — through ``ssh``, ``podman exec -i`` and ``srun`` alike.

One test body, parametrized over the places (:data:`PLACES`; skipped when the agent is not
installed, or the place cannot run here):

* ``allowed`` / ``forbidden``: a real sshd on 127.0.0.1 (``tests/ssh_servers.py``) whose ``SetEnv``
  gives the "remote" logins the agent's test environment (the scripted model server, a temporary
  HOME, the install folder on PATH, this run's suite marker): what a remote host configured for the
  agent has; ``forbidden`` adds ``AllowTcpForwarding no``;
* ``podman``: ``podman exec -i --env=NAME=VALUE… CONTAINER`` into the released agents' container
  (``agents_box``, tests/agents/conftest.py: the test image with only its own ``python3``, the agents'
  install folder and this machine's ``node`` mounted read-only, the host's network so the agent
  reaches the scripted model on 127.0.0.1); the environment is given by ``--env`` (``podman exec``
  passes none of the kernel's);
* ``srun``: ``srun -N1 --unbuffered`` on the test Slurm (``slurm_cluster``, tests/remote_places.py):
  the step runs on this host and gets the kernel's environment (``--export=ALL``, srun's default),
  so the agent's test environment is the kernel's.

The agent is told (``ESC-MCP``) to call ``list_variables``: the answer, from the kernel's namespace,
must reach it. An agent that takes no HTTP MCP servers or puts them on a command line (mistral-vibe,
claude-agent) gets it over its own pipe; so do codex, gemini and claude-agent through an sshd that
forbids forwarding, through podman and through srun, where they also ask for ``run_code``, which
runs behind exactly one card.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Callable, Iterator

import pytest

from agent_configs import AGENTS, AGENTS_DIR, DROP, SUITE_TOKEN, AgentSpec
from kernel_tool_checks import lists_variables, runs_behind_one_card
from ssh_servers import sshd
from test_agents import AgentKernel

pytestmark = pytest.mark.agents

NO_FORWARD = {"claude-agent", "mistral-vibe"}  # mcpInArgv / no HTTP MCP (docs/kernel-mcp-server.md): the pipe
FORBIDDEN = ("codex", "gemini", "claude-agent")  # also played through an sshd with AllowTcpForwarding no
PLACES = ("forbidden", "podman", "srun")  # where FORBIDDEN are played with only the pipe, and run code
CASES = [(harness, "allowed") for harness in AGENTS] + [(harness, place) for place in PLACES for harness in FORBIDDEN]


def _set_env(env: dict[str, str]) -> str:
    """The sshd_config ``SetEnv`` line for ``env`` (one line: sshd uses the first ``SetEnv`` it
    reads; each word double-quoted)."""
    for name, value in env.items():
        if '"' in value or "\n" in value:
            pytest.skip(f"{name}'s value cannot be written in an sshd_config SetEnv")
    return "SetEnv " + " ".join(f'"{name}={value}"' for name, value in env.items()) + "\n"


@contextlib.contextmanager
def _place(place: str, spec: AgentSpec, remote: dict[str, str], request,
           tmp_path) -> Iterator[tuple[list[str], dict[str, str], Callable[[], list[str]]]]:
    """The launcher of ``place`` whose far side gives ``spec``'s agent the environment ``remote``, what
    the kernel's environment needs added for it (srun's step inherits the kernel's), and what is
    running there (the container's processes that are the agent's, Slurm's jobs; ssh: not looked at)."""
    if place in ("allowed", "forbidden"):
        config = _set_env(remote) + ("AllowTcpForwarding no\n" if place == "forbidden" else "")
        with sshd(tmp_path / "sshd", config) as launcher:
            yield launcher, {}, lambda: ["(not looked at)"]
    elif place == "podman":
        box = request.getfixturevalue("agents_box")
        yield ([*box.launcher[:-1], *(f"--env={name}={value}" for name, value in remote.items()), box.name], {},
               lambda: [line for line in box.ps() if not line.startswith(("sh ", "python3 "))  # not the wrapper, relay
                        and any(f in line for f in (str(AGENTS_DIR), *spec.processes))])
    else:
        cluster = request.getfixturevalue("slurm_cluster")
        yield cluster.launcher, {**cluster.env, **remote}, cluster.jobs


@pytest.mark.parametrize("harness, place", CASES)
def test_a_released_agent_elsewhere_lists_the_kernels_variables(harness, place, model_server, tmp_path, request):
    spec = AGENTS[harness]
    bin_dir = spec.bin_dir()
    if bin_dir is None:
        pytest.skip(f"{harness} is not installed (scripts/install-agents.sh {harness})")
    if place == "podman" and AGENTS_DIR not in bin_dir.parents:
        pytest.skip(f"{harness} is on PATH ({bin_dir}), not in {AGENTS_DIR}: the container mounts only that folder")
    # the relay's python3 and the agents' node: this machine's (the venv's python3 first, as the kernel's);
    # in the container its own /usr/bin/python3 and the node mounted at /usr/local/bin/node
    tools = "/usr/local/bin" if place == "podman" else os.path.dirname(sys.executable)
    remote = {**spec.env(tmp_path / "home", model_server.url), "ESCOUADE_AGENT_SUITE": SUITE_TOKEN,
              "PATH": f"{bin_dir}{os.pathsep}{tools}{os.pathsep}/usr/bin:/bin"}
    work = tmp_path / "work"
    work.mkdir()
    with _place(place, spec, remote, request, tmp_path) as (launcher, kernel_env, running_there):
        env = {k: v for k, v in os.environ.items() if k not in DROP}  # the kernel's: no agent configuration
        env.update(kernel_env)
        env["ESCOUADE_AGENT_SUITE"] = SUITE_TOKEN
        kernel = AgentKernel(tmp_path, env)
        try:
            kernel.run("%load_ext escouade_nb\nimport asyncio, json\n"
                       "sales = {'north': 120.5, 'south': -30.0}\n")
            kernel.run(f"a = %escouade {harness} --via {shlex.quote(shlex.join(launcher))} "
                       f"--cwd {shlex.quote(str(work))} --as {harness}-{place}\nawait a.ready()", timeout=180)
            r = lists_variables(kernel)
            there = running_there()
            print(f"\n{harness} through {place}: {r['state']}; there: {there}")
            assert there, f"nothing of {harness} runs through {place}"
            piped = place != "allowed" or harness in NO_FORWARD
            assert r["state"][1].startswith("over the agent's own pipe" if piped else "through ssh's reverse forward"), r
            if place != "allowed":  # and a run_code over the pipe, behind exactly one card
                runs_behind_one_card(kernel)
        finally:
            try:
                kernel.run("await a.close()", allow_error=True, timeout=60)
            finally:
                kernel.shutdown()

