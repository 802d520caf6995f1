"""The real-agents suite: released ACP agents (and a goose-shaped stand-in) driven in real
kernels against the scripted model server. ``pytest -m agents`` runs only it; an agent
that is not installed (``scripts/install-agents.sh``) is skipped with a one-line reason."""

import shutil
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from agent_configs import AGENTS, AGENTS_DIR, SUITE_TOKEN
from kernel_client import process_alive
from model_server import ModelServer
from remote_places import podman_container


def pytest_configure(config):
    config.addinivalue_line("markers", "agents: drives released ACP agents (skipped when not installed)")


def agents_found() -> list[str]:
    """One line per released agent: where this run found it (and what the install marker
    says), or that it did not — the pass count depends on it, so the log says it."""
    lines = [f"released agents (installed in {AGENTS_DIR}, else on PATH):"]
    for name, spec in AGENTS.items():
        where = spec.bin_dir()
        if where is None:
            lines.append(f"  {name:<13} not found: its tests are skipped (scripts/install-agents.sh {name})")
        elif where == AGENTS_DIR / name / "bin":
            marker = (AGENTS_DIR / name / ".installed").read_text().strip()
            lines.append(f"  {name:<13} {marker} in {(AGENTS_DIR / name).resolve()}")
        else:
            lines.append(f"  {name:<13} {where / spec.program} on PATH (tested with {spec.version})")
    return lines


def pytest_collection_finish(session):
    """Say which agents were found, when tests of this folder are to run."""
    here = Path(__file__).resolve().parent
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or not any(here in Path(str(item.fspath)).resolve().parents for item in session.items):
        return
    for line in agents_found():
        reporter.write_line(line)


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


@pytest.fixture(scope="session")
def agents_box(tmp_path_factory):
    """A podman container for the released agents: ``tests/remote_places.py``'s container (the test
    image, its own ``python3`` and nothing else; pytest's scratch folder mounted at its own path) with,
    read-only, the agents' install folder (:data:`AGENTS_DIR`, at its own path: the npm prefixes and
    codex's binary) and this machine's ``node`` (at ``/usr/local/bin/node``); the agents' configuration
    (``agent_configs``) is written in each test's scratch HOME, mounted already.

    Its network is the host's (``--network host``), not ``none``: an agent in a container needs its
    model provider, and here that is the scripted model server on the host's 127.0.0.1. The subject is
    the kernel's tools: the launcher (``podman exec``) offers no port, so the kernel gives them over the
    agent's own pipe, which the tests assert (the host's loopback being reachable changes nothing there)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node here: the released agents' container borrows this machine's")
    mounts = {AGENTS_DIR.resolve(): AGENTS_DIR, Path(node).resolve(): Path("/usr/local/bin/node")}
    with podman_container(tmp_path_factory.getbasetemp(), read_only=mounts, network="host") as box:
        yield box
