import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import os  # noqa: E402
import tempfile  # noqa: E402

# transcripts of the agents the tests start go to a scratch folder, kernels included
os.environ.setdefault("ESCOUADE_NB_TRANSCRIPTS_DIR", tempfile.mkdtemp(prefix="escouade-test-transcripts-"))

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
