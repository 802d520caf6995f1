"""The whole suite's set-up: scratch folders for what the agents write, no agent left behind,
nothing written into the checkout, and the shared fixtures (``script``, ``own_processes``,
``no_orphan_plugins``). The helpers themselves are modules of this folder (on ``pythonpath``):
import them by name, never from a conftest."""

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kernel_client import environ_of, left_behind, process_alive, processes_named

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

# every process this test session starts (kernels, agents, their children) inherits this
# mark, so the orphan check below sees ours only, not those of a test run next to it
SESSION_MARK = f"ESCOUADE_NB_TEST_SESSION={os.getpid()}-{os.urandom(4).hex()}"
os.environ["ESCOUADE_NB_TEST_SESSION"] = SESSION_MARK.partition("=")[2]
SCRIPT_AGENT_MARK = "ESCOUADE_NB_SCRIPT_AGENT=1"  # set by fixtures/script_agent.py for itself and its children
FIXTURE_PLUGINS = str(Path(__file__).resolve().parent / "fixtures" / "plugins")


def _left_behind(before: set[int]) -> set[int]:
    """Fake agents, and scripted agents with everything they spawned, of this session."""
    left = {pid for pid in processes_named("escouade-fake-agent") if SESSION_MARK in environ_of(pid)} - before
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            env = environ_of(int(entry.name))
            if SESSION_MARK in env and SCRIPT_AGENT_MARK in env and process_alive(int(entry.name)):
                left.add(int(entry.name))
    return left


@pytest.fixture(scope="session", autouse=True)
def no_orphan_agents():
    """No fake or scripted agent (nor a child of one) may outlive the test session."""
    before = set(processes_named("escouade-fake-agent"))
    yield
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
    if os.environ.get("ESCOUADE_BROWSER_UPDATE_DOCS") == "1":  # asked for: the README's pictures taken again
        after = {line for line in after if not (line.endswith(".png") and " docs/" in f" {line[3:]}")}
    assert not after, f"the test run wrote into the checkout: {sorted(after)}"


@pytest.fixture
def script(tmp_path: Path) -> Callable[..., Any]:
    """The scripted agent of this test: ``script(*runs, **options)`` is
    ``Script(tmp_path, *runs, **options)`` (``tests/scripted_agent.py``: the runs' notation,
    the options, :meth:`Script.running` for an agent closed at the end of a block)."""

    from scripted_agent import Script  # imports the engine: not before the environment above is set

    def make(*runs: Any, **options: Any) -> Script:
        return Script(tmp_path, *runs, **options)

    return make


@pytest.fixture
def own_processes(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], set[int]]:
    """This test's own processes: a mark put in the environment for the test's length (every
    process it starts from then on, and their children, inherit it); the fixture is a function
    of a command-line fragment giving the live PIDs that carry the mark — another test, or
    another test run on the machine, starts processes of its own."""
    mark = f"{os.getpid()}-{os.urandom(4).hex()}"
    monkeypatch.setenv("ESCOUADE_NB_TEST_MARK", mark)

    def mine(fragment: str) -> set[int]:
        return set(processes_named(fragment, marked=f"ESCOUADE_NB_TEST_MARK={mark}"))

    return mine


@pytest.fixture(scope="module")
def no_orphan_plugins() -> Iterator[None]:
    """No process of the fixture rule plugins (``tests/fixtures/plugins``) outlives the module's tests."""
    before = set(processes_named(FIXTURE_PLUGINS))
    yield
    left = left_behind(FIXTURE_PLUGINS, before)
    assert not left, f"plugin processes left behind: {sorted(left)}"
