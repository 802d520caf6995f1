"""The whole suite's set-up: scratch folders for what the agents write, no agent left behind,
nothing written into the checkout, the kernel tier (the ``kernel`` marker), and the shared fixtures
(``script``, ``own_processes``, ``no_orphan_plugins``; ``podman_box``, ``docker_box``, ``slurm_cluster`` from
``remote_places``; the one async runner is ``deadlines.run``). The helpers themselves are
modules of this folder (on ``pythonpath``): import them by name, never from a conftest.

Under pytest-xdist each worker is a process of its own: its own scratch folder, its own session
mark (so its orphan check sees its own agents only); the checkout is checked once, by the process
that started the run."""

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kernel_client import environ_of, left_behind, process_alive, processes_named

# transcripts of the agents the tests start go to a scratch folder of this process, kernels included
# (an xdist worker inherits the environment of the process that started it: a folder that process made
# for itself, named in _SCRATCH_MARK, is replaced by the worker's own; one the user named is kept)
_SCRATCH_MARK = "ESCOUADE_NB_TEST_SCRATCH"
_scratch_is_ours = os.environ.get(_SCRATCH_MARK) == os.environ.get("ESCOUADE_NB_TRANSCRIPTS_DIR")
if "ESCOUADE_NB_TRANSCRIPTS_DIR" not in os.environ or _scratch_is_ours:
    _TRANSCRIPTS = tempfile.mkdtemp(prefix="escouade-test-transcripts-")
    os.environ["ESCOUADE_NB_TRANSCRIPTS_DIR"] = os.environ[_SCRATCH_MARK] = _TRANSCRIPTS
    import atexit
    import shutil

    atexit.register(shutil.rmtree, _TRANSCRIPTS, ignore_errors=True)  # scratch: gone with the run
    # the user's own MCP servers (mcp.json) never reach the agents of a test: an empty config
    # unless a test names its own (kernels started by the tests inherit this)
    if "ESCOUADE_NB_MCP_CONFIG" not in os.environ or _scratch_is_ours:
        os.environ["ESCOUADE_NB_MCP_CONFIG"] = os.path.join(_TRANSCRIPTS, "no-mcp.json")
elif "ESCOUADE_NB_MCP_CONFIG" not in os.environ:
    os.environ["ESCOUADE_NB_MCP_CONFIG"] = os.path.join(os.environ["ESCOUADE_NB_TRANSCRIPTS_DIR"], "no-mcp.json")

# every process this test session starts (kernels, agents, their children) inherits this
# mark, so the orphan check below sees ours only, not those of a test run next to it
SESSION_MARK = f"ESCOUADE_NB_TEST_SESSION={os.getpid()}-{os.urandom(4).hex()}"
os.environ["ESCOUADE_NB_TEST_SESSION"] = SESSION_MARK.partition("=")[2]
SCRIPT_AGENT_MARK = "ESCOUADE_NB_SCRIPT_AGENT=1"  # set by fixtures/script_agent.py for itself and its children
FIXTURE_PLUGINS = str(Path(__file__).resolve().parent / "fixtures" / "plugins")
# the real places to run an agent elsewhere, one of each per session, for any test that names them:
# podman_box, docker_box, slurm_cluster (tests/remote_places.py; each skipped in one line where it cannot run)
pytest_plugins = ["remote_places"]


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


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


_CHECKOUT_BEFORE = pytest.StashKey[set[str] | None]()


def pytest_sessionstart(session: pytest.Session) -> None:
    """No test, notebook or demo writes into the checkout: scratch goes to temp folders. The
    checkout's state is taken when the run starts (once: not in an xdist worker) and compared at
    its end, when it started clean (as CI's fresh clone does)."""
    if not _is_xdist_worker(session.config):
        session.config.stash[_CHECKOUT_BEFORE] = _checkout_changes()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _is_xdist_worker(session.config) or session.config.stash.get(_CHECKOUT_BEFORE, None) != set():
        return  # a worker, not a checkout, or one being edited: nothing to compare against
    after = _checkout_changes() or set()
    if os.environ.get("ESCOUADE_BROWSER_UPDATE_DOCS") == "1":  # asked for: the README's pictures taken again
        after = {line for line in after if not (line.endswith(".png") and " docs/" in f" {line[3:]}")}
    if after:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = f"the test run wrote into the checkout: {sorted(after)}"
        if reporter is not None:
            reporter.write_sep("=", message, red=True)
        else:
            print(message)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# The kernel tier: the ``kernel`` marker. Every test of tests/kernel and every notebook run by nbval
# carries it (added here); a test elsewhere that starts a kernel carries it itself. It cannot drift: a
# test that starts a kernel (jupyter_client's local provisioner, whoever calls it: the tests' Kernel,
# nbclient, a module fixture) without the marker fails, saying so.
_KERNEL_TIER = Path(__file__).resolve().parent / "kernel"
_KERNEL_STARTS = [0]  # kernels started in this process
_STARTS_BEFORE = pytest.StashKey[int]()


def _count_kernel_starts() -> None:
    from jupyter_client.provisioning.local_provisioner import LocalProvisioner

    launch = LocalProvisioner.launch_kernel

    async def counted(self: Any, cmd: list[str], **kwargs: Any) -> Any:
        _KERNEL_STARTS[0] += 1
        return await launch(self, cmd, **kwargs)

    LocalProvisioner.launch_kernel = counted  # type: ignore[method-assign]


_count_kernel_starts()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if type(item).__module__.startswith("nbval") or _KERNEL_TIER in item.path.parents:
            item.add_marker(pytest.mark.kernel)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_STARTS_BEFORE] = _KERNEL_STARTS[0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    started = _KERNEL_STARTS[0] - item.stash.get(_STARTS_BEFORE, _KERNEL_STARTS[0])
    tier = item.get_closest_marker("kernel") or item.get_closest_marker("agents")  # the agents' own tier: kernels too
    if call.when == "call" and report.passed and started and tier is None:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} started {started} kernel(s) without the `kernel` marker: mark it "
                           "@pytest.mark.kernel (or move it to tests/kernel), so `-m kernel` selects the kernel tier")
    return report


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
