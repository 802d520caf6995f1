"""The real-agents suite: released ACP agents (and a goose-shaped stand-in) driven in real
kernels against the scripted model server. ``pytest -m agents`` runs only it; an agent
that is not installed (``scripts/install-agents.sh``) is skipped with a one-line reason."""

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from agent_configs import SUITE_TOKEN  # noqa: E402
from kernel_client import process_alive  # noqa: E402
from model_server import ModelServer  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "agents: drives released ACP agents (skipped when not installed)")


def _agent_processes() -> set[int]:
    """Live processes (not zombies) whose environment holds this run's token."""
    needle = f"ESCOUADE_AGENT_SUITE={SUITE_TOKEN}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0") and process_alive(int(entry.name)):
            found.add(int(entry.name))
    return found


@pytest.fixture(scope="session", autouse=True)
def no_orphan_agent_programs():
    """No agent program (nor a child it started), nor an agent kernel, may outlive the suite."""
    yield
    deadline = time.monotonic() + 10
    left = _agent_processes()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _agent_processes()
    details = []
    for pid in sorted(left):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            details.append(f"{pid}: {cmd[:200]}")
        except OSError:
            pass
    assert not left, "agent processes left behind:\n" + "\n".join(details)


@pytest.fixture(scope="session")
def model_server():
    with ModelServer() as server:
        yield server
