"""Per-agent test configuration: where the installed agent is, and the environment and
config files (in a temporary HOME) that point it at the scripted model server with
telemetry and update checks off. None of this is in the shipped manifests.

Agents are found in ``${ESCOUADE_AGENTS_DIR:-~/.cache/escouade_nb/agents}/<agent>/bin``
(``scripts/install-agents.sh``), else on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

SUITE_TOKEN = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
"""Put in every agent kernel's environment as ``ESCOUADE_AGENT_SUITE``: the agents and
everything they start inherit it, so the orphan check (conftest) tells this run's
processes from those of another test run on the same machine."""

AGENTS_DIR = Path(os.environ.get("ESCOUADE_AGENTS_DIR") or Path.home() / ".cache" / "escouade_nb" / "agents")

# Sent to every agent: a temporary HOME and XDG folders, no proxy for loopback, and
# proxies that lead nowhere for proxy-aware clients, so nothing leaves the machine.
# (Not every client honours proxy variables; the model endpoints are loopback anyway.)
LOOPBACK_ONLY = {
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "ALL_PROXY": "http://127.0.0.1:9",
    "DO_NOT_TRACK": "1",
    "NO_COLOR": "1",
}

# Variables of the developer's own machine that must not reach an agent under test.
DROP = ["OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN",
        "GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "MISTRAL_API_KEY", "KIMI_API_KEY",
        "CODEX_HOME", "CLAUDE_CONFIG_DIR", "VIBE_HOME", "KIMI_SHARE_DIR", "OPENCODE_CONFIG",
        "FAST_AGENT_HOME", "FAST_AGENT_MODEL", "GOOSE_PATH_ROOT", "XDG_RUNTIME_DIR"]


@dataclass
class AgentSpec:
    name: str  # harness id (plugins/<name>) and install folder
    program: str  # the program the manifest locates
    configure: Callable[[Path, str], dict[str, str]]  # (home, server url) -> env
    version: str  # the version installed by scripts/install-agents.sh
    processes: list[str] = field(default_factory=list)  # command-line fragments of its processes

    def bin_dir(self) -> Path | None:
        """The folder holding the program: the install cache, else PATH; None if absent."""
        own = AGENTS_DIR / self.name
        if (own / ".installed").is_file() and (own / "bin" / self.program).exists():
            return own / "bin"
        found = shutil.which(self.program)
        return Path(found).parent if found else None

    def env(self, home: Path, server_url: str) -> dict[str, str]:
        home.mkdir(parents=True, exist_ok=True)
        xdg = {k: str(home / sub) for k, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share"),
                                                  ("XDG_CACHE_HOME", ".cache"), ("XDG_STATE_HOME", ".local/state"))}
        for folder in xdg.values():
            Path(folder).mkdir(parents=True, exist_ok=True)
        return {"HOME": str(home), **xdg, **LOOPBACK_ONLY, **self.configure(home, server_url)}


def sandbox_flags(model_url: str) -> str:
    """The start flags of a ``+sandbox`` bench: ``--sandbox`` and the scripted model server's
    port on the host's 127.0.0.1 declared (``--sandbox-port``): the sandbox's network
    forwards it, and no other port of the host's loopback but the kernel's MCP server's."""
    port = urlsplit(model_url).port
    return f" --sandbox --sandbox-port {port}"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- the agents ------------------------------------------------------------------------


def _vibe(home: Path, url: str) -> dict[str, str]:
    vibe_home = home / "vibe"
    _write(vibe_home / "config.toml", f"""\
active_model = "fake"
enable_telemetry = false
enable_update_checks = false
enable_auto_update = false

[[providers]]
name = "fake"
api_base = "{url}/v1"
api_key_env_var = ""
api_style = "openai"
backend = "generic"

[[models]]
name = "fake-model"
provider = "fake"
alias = "fake"
""")
    return {"VIBE_HOME": str(vibe_home)}


def _fast_agent(home: Path, url: str) -> dict[str, str]:
    return {"FAST_AGENT_MODEL": "generic.fake-model", "GENERIC_BASE_URL": f"{url}/v1",
            "GENERIC_API_KEY": "fake", "FAST_AGENT_HOME": str(home / "fast-agent")}


def _kimi(home: Path, url: str) -> dict[str, str]:
    share = home / "kimi"
    _write(share / "config.toml", f"""\
default_model = "fake"
telemetry = false

[providers.fake]
type = "openai_legacy"
base_url = "{url}/v1"
api_key = "fake"

[models.fake]
provider = "fake"
model = "fake-model"
max_context_size = 128000
""")
    # kimi acp checks for a Kimi login token before every session/new, whatever the
    # provider; it is never sent to the model server.
    _write(share / "credentials" / "kimi-code.json", json.dumps({"access_token": "test-token"}))
    return {"KIMI_SHARE_DIR": str(share)}


def _claude(home: Path, url: str) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "fake-key", "CLAUDE_CONFIG_DIR": str(home / "claude"),
            "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1"}


def _codex(home: Path, url: str) -> dict[str, str]:
    codex_home = home / "codex"
    _write(codex_home / "config.toml", f"""\
model = "fake-model"
model_provider = "fake"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = "{url}/v1"
wire_api = "responses"
env_key = "FAKE_LLM_API_KEY"

[analytics]
enabled = false
""")
    return {"CODEX_HOME": str(codex_home), "FAKE_LLM_API_KEY": "fake"}


def _opencode(home: Path, url: str) -> dict[str, str]:
    config = _write(home / "opencode.json", json.dumps({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
                              "options": {"baseURL": f"{url}/v1", "apiKey": "fake"},
                              "models": {"fake-model": {"name": "fake-model"}}}},
        "model": "fake/fake-model",
        "small_model": "fake/fake-model",
        "autoupdate": False,
        "share": "disabled",
        # opencode allows everything by default; asking is what the suite tests
        "permission": {"bash": "ask", "edit": "ask"},
    }))
    return {"OPENCODE_CONFIG": str(config), "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_SHARE": "1", "OPENCODE_DISABLE_CLAUDE_CODE": "1"}


def _gemini(home: Path, url: str) -> dict[str, str]:
    _write(home / ".gemini" / "settings.json", json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }))
    return {"GOOGLE_GEMINI_BASE_URL": url, "GEMINI_API_KEY": "fake-key", "GEMINI_CLI_NO_RELAUNCH": "true"}


AGENTS: dict[str, AgentSpec] = {s.name: s for s in [
    AgentSpec("mistral-vibe", "vibe-acp", _vibe, "3.0.2", ["vibe-acp"]),
    AgentSpec("fast-agent", "fast-agent-acp", _fast_agent, "0.10.48", ["fast-agent-acp"]),
    AgentSpec("kimi", "kimi", _kimi, "1.51.0", ["kimi acp", "bin/kimi"]),
    AgentSpec("claude-agent", "claude-agent-acp", _claude, "0.23.1", ["claude-agent-acp", "claude-agent-sdk"]),
    AgentSpec("codex", "codex-acp", _codex, "0.16.0", ["codex-acp"]),
    AgentSpec("opencode", "opencode", _opencode, "1.18.33", ["opencode acp", "opencode-linux"]),
    AgentSpec("gemini", "gemini", _gemini, "0.61.0", ["gemini-cli", "bin/gemini"]),
]}
