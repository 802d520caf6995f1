import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import os  # noqa: E402
import tempfile  # noqa: E402

# transcripts of the agents the tests start go to a scratch folder, kernels included
if "ESCOUADE_NB_TRANSCRIPTS_DIR" not in os.environ:
    _TRANSCRIPTS = tempfile.mkdtemp(prefix="escouade-test-transcripts-")
    os.environ["ESCOUADE_NB_TRANSCRIPTS_DIR"] = _TRANSCRIPTS
    import atexit
    import shutil

    atexit.register(shutil.rmtree, _TRANSCRIPTS, ignore_errors=True)  # scratch: gone with the run

# the user's own MCP servers (mcp.json) never reach the agents of a test: an empty config
# unless a test names its own (kernels started by the tests inherit this)
if "ESCOUADE_NB_MCP_CONFIG" not in os.environ:
    os.environ["ESCOUADE_NB_MCP_CONFIG"] = os.path.join(os.environ["ESCOUADE_NB_TRANSCRIPTS_DIR"], "no-mcp.json")

from kernel_client import process_alive, processes_named  # noqa: E402

# every process this test session starts (kernels, agents, their children) inherits this
# mark, so the orphan check below sees ours only, not those of a test run next to it
SESSION_MARK = f"ESCOUADE_NB_TEST_SESSION={os.getpid()}-{os.urandom(4).hex()}"
os.environ["ESCOUADE_NB_TEST_SESSION"] = SESSION_MARK.partition("=")[2]
SCRIPT_AGENT_MARK = "ESCOUADE_NB_SCRIPT_AGENT=1"  # set by fixtures/script_agent.py for itself and its children


def _environ(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace").split("\0")
    except OSError:
        return []


def _left_behind(before: set[int]) -> set[int]:
    """Fake agents, and scripted agents with everything they spawned, of this session."""
    left = {pid for pid in processes_named("escouade-fake-agent") if SESSION_MARK in _environ(pid)} - before
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            env = _environ(int(entry.name))
            if SESSION_MARK in env and SCRIPT_AGENT_MARK in env and process_alive(int(entry.name)):
                left.add(int(entry.name))
    return left


@pytest.fixture(scope="session", autouse=True)
def no_orphan_agents():
    """No fake or scripted agent (nor a child of one) may outlive the test session."""
    before = set(processes_named("escouade-fake-agent"))
    yield
    import time

    deadline = time.monotonic() + 10
    left = _left_behind(before)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _left_behind(before)
    assert not left, f"agent processes left behind: {sorted(left)}"


def _checkout_changes() -> set[str] | None:
    """``git status --porcelain`` lines of the checkout (tracked changes and untracked,
    not ignored, files), or None outside a git checkout."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=root,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return set(out.stdout.splitlines()) if out.returncode == 0 else None


@pytest.fixture(scope="session", autouse=True)
def nothing_written_into_the_checkout():
    """No test, notebook or demo writes into the checkout: scratch goes to temp folders.
    Checked when the run starts from a clean checkout (as CI's fresh clone does)."""
    before = _checkout_changes()
    yield
    if before != set():
        return  # not a checkout, or one being edited: nothing to compare against
    after = _checkout_changes() or set()
    assert not after, f"the test run wrote into the checkout: {sorted(after)}"
