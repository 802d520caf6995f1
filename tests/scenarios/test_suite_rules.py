"""The suite's own rules (tests/conftest.py), each shown failing on a small suite of its own run by a
real pytest: a test that starts a kernel without the ``kernel`` marker fails (the tier cannot drift
from what the tests do; tests/kernel is marked by its folder), and under pytest-xdist each worker has
its own scratch folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
INI = """[pytest]
pythonpath = tests
addopts = -p no:cacheprovider --strict-markers
markers =
    kernel: runs a real Jupyter kernel
    agents: drives released agents
"""
STARTS = """from kernel_client import Kernel


def start(tmp_path):
    Kernel(tmp_path).shutdown()
"""


def small_suite(root: Path, files: dict[str, str]) -> Path:
    """``root`` holding the suite's conftest and kernel client, and ``files`` (path → text) under tests/."""
    (root / "tests").mkdir(parents=True)
    for helper in ("conftest.py", "kernel_client.py", "view_helpers.py", "remote_places.py"):
        shutil.copy(TESTS / helper, root / "tests" / helper)
    (root / "pytest.ini").write_text(INI)
    for name, text in files.items():
        (root / "tests" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "tests" / name).write_text(text)
    return root


def pytest_in(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ESCOUADE_NB_TEST", "PYTEST_"))}
    env.pop("ESCOUADE_NB_TRANSCRIPTS_DIR", None)  # as a fresh run: its conftest makes its own scratch
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rf", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=240)


@pytest.mark.timeout(300)
def test_a_test_that_starts_a_kernel_without_the_marker_fails(tmp_path: Path):
    root = small_suite(tmp_path / "suite", {
        "starts.py": STARTS,
        "test_elsewhere.py": "import pytest\nfrom starts import start\n\n\n"
                             "def test_unmarked(tmp_path):\n    start(tmp_path)\n\n\n"
                             "@pytest.mark.kernel\ndef test_marked(tmp_path):\n    start(tmp_path)\n\n\n"
                             "def test_no_kernel():\n    pass\n",
        "kernel/test_in_the_tier.py": "from starts import start\n\n\n"
                                      "def test_by_its_folder(tmp_path):\n    start(tmp_path)\n",
    })
    ran = pytest_in(root, "-n", "0")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "1 failed, 3 passed" in ran.stdout, ran.stdout
    assert "FAILED tests/test_elsewhere.py::test_unmarked" in ran.stdout, ran.stdout
    assert "tests/test_elsewhere.py::test_unmarked started 1 kernel(s) without the `kernel` marker" in ran.stdout
    tier = pytest_in(root, "-n", "0", "-m", "kernel", "--collect-only")
    assert "2/4 tests collected" in tier.stdout, tier.stdout
    assert "test_marked" in tier.stdout and "test_by_its_folder" in tier.stdout


def test_each_xdist_worker_has_its_own_scratch(tmp_path: Path):
    seen = tmp_path / "seen"
    seen.mkdir()
    root = small_suite(tmp_path / "suite", {
        "test_scratch.py": "import json, os\n\n\ndef test_where():\n"
                           f"    out = os.path.join({str(seen)!r}, os.environ['PYTEST_XDIST_WORKER'])\n"
                           "    with open(out, 'w') as fh:\n"
                           "        json.dump([os.environ['ESCOUADE_NB_TRANSCRIPTS_DIR'],"
                           " os.environ['ESCOUADE_NB_TEST_SESSION']], fh)\n",
    })
    ran = pytest_in(root, "-n", "2", "--dist", "each")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (one, session_one), (two, session_two) = [json.loads(p.read_text()) for p in sorted(seen.iterdir())]
    assert one != two and session_one != session_two  # a folder and an orphan-check mark of its own
    assert not Path(one).exists() and not Path(two).exists()  # scratch: gone with the worker
