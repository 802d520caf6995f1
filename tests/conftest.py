import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from kernel_client import processes_named  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def no_orphan_agents():
    """No fake agent may outlive the test session."""
    before = set(processes_named("escouade-fake-agent"))
    yield
    import time

    deadline = time.monotonic() + 10
    left = set(processes_named("escouade-fake-agent")) - before
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = set(processes_named("escouade-fake-agent")) - before
    assert not left, f"agent processes left behind: {sorted(left)}"
