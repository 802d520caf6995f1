"""``%escouade install NAME`` of three real ACP registry entries, from the npm registry into a
temporary per-user folder, then each started from the manifest the install wrote and prompted
once through the scripted model server (tests/agents/model_server.py), in a real kernel.

The entries are the registry's own (https://github.com/agentclientprotocol/registry):
claude-code-acp 0.16.0 from the copy shipped with the package (commit 3de1678, 2026-02-07), and,
since the npm registry these machines reach holds neither qwen-code 0.9.1 nor github-copilot
1.425.0 of that copy, the registry's entries of the same agents at earlier commits — qwen-code
0.8.2 (099769c, 2026-01-30) and github-copilot 1.419.0 (57eecc5, 2026-02-02) — given to the
kernel as its per-user cached registry. GitHub Copilot signs in with GitHub only: it is started
and its ``initialize`` answered, and its prompt is refused for want of a sign-in (said in one
line); the other two answer the scripted model's reply.

Each entry is skipped, with one line, when the npm registry does not answer for its package.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from agent_configs import DROP, LOOPBACK_ONLY, SUITE_TOKEN, AGENTS
from kernel_client import Kernel, wait_for

pytestmark = [pytest.mark.agents, pytest.mark.timeout(600)]

QWEN_0_8_2 = {  # the registry's qwen-code/agent.json at 099769cb2415ec880eb75f9a8b67e25fb1b0873b
    "id": "qwen-code", "name": "Qwen Code", "version": "0.8.2", "description": "Alibaba's Qwen coding assistant",
    "repository": "https://github.com/QwenLM/qwen-code", "authors": ["Alibaba Qwen Team"], "license": "Apache-2.0",
    "distribution": {"npx": {"package": "@qwen-code/qwen-code@0.8.2", "args": ["--acp", "--experimental-skills"]}}}
COPILOT_1_419_0 = {  # the registry's github-copilot/agent.json at 57eecc58c15c7b0c239c192b7f2a84c69f53c47a
    "id": "github-copilot", "name": "GitHub Copilot", "version": "1.419.0", "description": "GitHub's AI pair programmer",
    "repository": "https://github.com/github/copilot-language-server-release", "authors": ["Microsoft"],
    "license": "proprietary",
    "distribution": {"npx": {"package": "@github/copilot-language-server@1.419.0", "args": ["--acp"]}}}


def _qwen(home: Path, url: str) -> dict[str, str]:
    settings = home / ".qwen" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"security": {"auth": {"selectedType": "openai"}},
                                    "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
                                    "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}))
    return {"OPENAI_API_KEY": "fake-key", "OPENAI_BASE_URL": f"{url}/v1", "OPENAI_MODEL": "fake-model"}


def _shipped_entry(agent_id: str) -> dict:
    from escouade_nb.manifest.registry import SHIPPED_REGISTRY

    return next(a for a in json.loads(SHIPPED_REGISTRY.read_text())["agents"] if a["id"] == agent_id)


@pytest.fixture(scope="module")
def bench(model_server, tmp_path_factory):
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    root = tmp_path_factory.mktemp("registry-install")
    agents = root / "agents"
    agents.mkdir()
    entries = [_shipped_entry("claude-code-acp"), QWEN_0_8_2, COPILOT_1_419_0]
    (agents / "registry.json").write_text(json.dumps({"version": "1.0.0", "agents": entries, "extensions": []}))
    home = root / "home"
    env = {k: v for k, v in os.environ.items() if k not in DROP}
    env.update(AGENTS["claude-agent"].env(home, model_server.url))  # HOME, XDG folders, loopback only, Claude's
    env.update(_qwen(home, model_server.url))
    env.update({"ESCOUADE_NB_AGENTS_DIR": str(agents), "ESCOUADE_NB_PLUGINS_DIR": str(root / "plugins"),
                "ESCOUADE_AGENT_SUITE": SUITE_TOKEN})
    # npm reaches its registry with the machine's own settings (its cache the default one); the agents are
    # started with the proxies that lead nowhere (_start_and_prompt), so they reach nothing but loopback
    for key in LOOPBACK_ONLY:
        env.pop(key, None)
        if key in os.environ:
            env[key] = os.environ[key]
    env["npm_config_cache"] = str(Path(os.environ.get("npm_config_cache") or Path.home() / ".npm"))
    kernel = Kernel(root, env)
    kernel.run("%load_ext escouade_nb\nimport asyncio, json, os, time\nfrom escouade_nb.engine import get_squad\n"
               "agents = {}")
    yield kernel, root, model_server
    try:
        kernel.run("for _a in list(agents.values()):\n    await _a.close()", allow_error=True, timeout=60)
    finally:
        kernel.shutdown()


def _reachable(package: str) -> None:
    try:
        out = subprocess.run(["npm", "view", package, "version"], capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.skip(f"the npm registry did not answer for {package} in 90 s")
    if out.returncode != 0:
        pytest.skip(f"the npm registry has no {package} here: {(out.stderr.strip().splitlines() or ['?'])[0]}")


def _install(kernel: Kernel, agent_id: str) -> str:
    """``%escouade install AGENT`` and its outcome, as the cell's output holds it at the end."""
    before = set(kernel.displays)
    kernel.run(f"%escouade install {agent_id}")
    wait_for(kernel, "not [t for t in get_squad()._tasks if t.get_name().startswith('escouade install')]",
             timeout=420)
    kernel.run("pass")  # the last display update read
    shown = [kernel.displays[d].get("text/plain", "") for d in kernel.displays if d not in before]
    assert len(shown) == 1, shown
    return shown[0]


NO_PROXIES = {k: v for k, v in LOOPBACK_ONLY.items() if "proxy" not in k.lower()}
"""qwen-code 0.8.2 sends its model requests through ``HTTPS_PROXY`` whatever ``NO_PROXY`` says (its turn fails
with "Internal error" through the proxies that lead nowhere): it is started without them, its telemetry and usage
statistics off in its settings, its model the scripted server on 127.0.0.1."""


def _start_and_prompt(kernel: Kernel, root: Path, harness: str, name: str) -> dict:
    work = root / name
    work.mkdir()
    out = kernel.run(
        f"_saved = dict(os.environ)\n"
        f"os.environ.update({(NO_PROXIES if harness == 'qwen-code' else LOOPBACK_ONLY)!r})\n"
        f"_a = %escouade {harness} --cwd {shlex.quote(str(work))} --as {name}\n"
        f"agents[{name!r}] = _a\n"
        f"_res = {{}}\n"
        f"try:\n"
        f"    try:\n"
        f"        await asyncio.wait_for(_a.ready(), 180)\n"
        f"    finally:\n"
        f"        os.environ.clear()\n"
        f"        os.environ.update(_saved)\n"
        f"    _res['info'] = _a.agent_info\n"
        f"    _t = _a.send('Hello, who are you?')\n"
        f"    _r = await asyncio.wait_for(_t.wait(), 180)\n"
        f"    _res.update(stop=_r.stop_reason, text=_r.text)\n"
        f"except Exception as e:\n"
        f"    _res.update(error=f'{{type(e).__name__}}: {{e}}', info=_a.agent_info)\n"
        f"print('RESULT', json.dumps(_res, default=str))", timeout=420)
    return json.loads(out.text.split("RESULT", 1)[1])


@pytest.mark.parametrize("agent_id, package, harness, answers", [
    ("claude-code-acp", "@zed-industries/claude-code-acp@0.16.0", "claude-agent", True),
    ("qwen-code", "@qwen-code/qwen-code@0.8.2", "qwen-code", True),
    ("github-copilot", "@github/copilot-language-server@1.419.0", "github-copilot", False),
])
def test_a_registry_agent_installed_then_started_and_prompted(bench, agent_id, package, harness, answers):
    kernel, root, server = bench
    _reachable(package)
    outcome = _install(kernel, agent_id)
    assert outcome.startswith("installed "), outcome
    assert f"start it with %escouade {harness}" in outcome and str(root / "agents" / agent_id) in outcome
    program = root / "agents" / "bin" / json.loads(
        (root / "agents" / agent_id / "current" / ".installed").read_text())["program"]
    assert program.exists()
    again = _install(kernel, agent_id)  # the same version again: nothing run
    assert "is installed already" in again, again
    mark = server.mark()
    result = _start_and_prompt(kernel, root, harness, agent_id.replace("-", "_"))
    print(f"\n{agent_id}: {json.dumps(result)[:600]}")
    assert result.get("info") is not None, result  # it started and answered initialize
    if answers:
        assert result.get("stop") == "end_turn", result
        assert "Scripted reply." in result.get("text", ""), result
        assert server.since(mark), "no model request reached the scripted model server"
    else:
        assert "error" in result and "\n" not in result["error"], result
