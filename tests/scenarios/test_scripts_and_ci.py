"""Scripts and CI (issue 14): ``scripts/install-agents.sh`` keeps its promise — each
install is built in a folder beside its target and swapped in by one rename only when
complete, under a lock, so two runs at once take turns and a failed reinstall keeps the
working agent (played offline with a tiny wheel in mistral-vibe's place,
``ESCOUADE_AGENT_SPEC_MISTRAL_VIBE``, real venvs, real pip); and a test run's log says
why tests were skipped and which released agents it found, where."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-agents.sh"
needs_flock = pytest.mark.skipif(shutil.which("flock") is None, reason="flock (util-linux) is not installed")


def tiny_wheel(folder: Path, version: str) -> Path:
    """A wheel of ``fakevibe`` whose console script ``vibe-acp`` prints its version."""
    files = {
        "fakevibe/__init__.py": f"def main():\n    print('fakevibe {version}')\n",
        f"fakevibe-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: fakevibe\nVersion: {version}\n",
        f"fakevibe-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                              "Tag: py3-none-any\n",
        f"fakevibe-{version}.dist-info/entry_points.txt": "[console_scripts]\nvibe-acp = fakevibe:main\n",
    }
    record = f"fakevibe-{version}.dist-info/RECORD"
    lines = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(text.encode())}")
    files[record] = "\n".join([*lines, f"{record},,"]) + "\n"
    path = folder / f"fakevibe-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def install(agents: Path, package: str | Path, wait: bool = True):
    env = {**os.environ, "ESCOUADE_AGENTS_DIR": str(agents), "ESCOUADE_AGENTS_PYTHON": sys.executable,
           "ESCOUADE_AGENT_SPEC_MISTRAL_VIBE": f"pypi {package} vibe-acp", "PIP_NO_INPUT": "1"}
    proc = subprocess.Popen(["bash", str(SCRIPT), "mistral-vibe"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return proc.communicate(timeout=300) + (proc.returncode,) if wait else proc


def installed(agents: Path) -> tuple[str, str]:
    """(the .installed marker, what the installed program prints)."""
    home = agents / "mistral-vibe"
    ran = subprocess.run([str(home / "bin" / "vibe-acp")], capture_output=True, text=True, timeout=60)
    return (home / ".installed").read_text().strip(), ran.stdout.strip()


def builds(agents: Path) -> list[str]:
    return sorted(p.name for p in agents.iterdir() if p.name.startswith("mistral-vibe.") and p.is_dir())


@needs_flock
def test_two_installs_at_once_take_turns(tmp_path):
    agents = tmp_path / "agents"
    one, two = tiny_wheel(tmp_path, "1.0"), tiny_wheel(tmp_path, "2.0")
    first = install(agents, one, wait=False)
    second = install(agents, two, wait=False)
    outs = [p.communicate(timeout=300) + (p.returncode,) for p in (first, second)]
    assert [code for _, _, code in outs] == [0, 0], outs
    waited = [out for out, _, _ in outs if "mistral-vibe: waiting for another install of it to finish" in out]
    assert len(waited) == 1, outs  # the lock: one ran, then the other
    marker, printed = installed(agents)
    assert (marker, printed) in ((str(one), "fakevibe 1.0"), (str(two), "fakevibe 2.0"))
    assert (agents / "mistral-vibe").is_symlink() and builds(agents) == [os.readlink(agents / "mistral-vibe")]


@needs_flock
def test_a_failed_reinstall_keeps_the_working_agent(tmp_path):
    agents = tmp_path / "agents"
    good = tiny_wheel(tmp_path, "1.0")
    out, err, code = install(agents, good)
    assert code == 0 and f"installed mistral-vibe ({good}) in " in out, err
    assert installed(agents) == (str(good), "fakevibe 1.0")
    out, err, code = install(agents, tmp_path / "no-such-package-9.9-py3-none-any.whl")
    assert code == 1
    assert installed(agents) == (str(good), "fakevibe 1.0")  # untouched
    assert "mistral-vibe: install failed (the installed one, if any, is kept), log: " in err
    assert (agents / "mistral-vibe.install.log").is_file()
    assert builds(agents) == [os.readlink(agents / "mistral-vibe")]  # the failed build is gone
    assert "agents in" in out and "(failed: 1)" in out


# -- what a test run's log says ----------------------------------------------------------------------------

def _pytest(args: list[str], cwd: Path, **env: str) -> str:
    """A pytest run with this project's configuration (its pyproject's ``addopts``)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT),
                           *args], cwd=cwd, capture_output=True, text=True, timeout=300, env={**os.environ, **env})
    return done.stdout + done.stderr


def test_the_log_gives_skip_reasons(tmp_path):
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n\ndef test_needs_x():\n    pytest.skip('x is not installed (install it with: y)')\n")
    out = _pytest([str(tmp_path / "test_skips.py")], tmp_path)
    assert "SKIPPED [1]" in out and "x is not installed (install it with: y)" in out, out


def test_the_agent_suite_says_which_agents_it_found_and_where(tmp_path):
    agents = tmp_path / "agents"
    own = agents / "mistral-vibe"
    (own / "bin").mkdir(parents=True)
    (own / "bin" / "vibe-acp").write_text("#!/bin/sh\nexit 0\n")
    (own / "bin" / "vibe-acp").chmod(0o755)
    (own / ".installed").write_text("mistral-vibe==3.0.2\n")
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    out = _pytest([str(ROOT / "tests" / "agents"), "-m", "agents", "--collect-only", "-q"], tmp_path,
                  ESCOUADE_AGENTS_DIR=str(agents), PATH=path)
    assert f"released agents (installed in {agents}, else on PATH):" in out, out
    assert f"  mistral-vibe  mistral-vibe==3.0.2 in {own}" in out
    for other in ("fast-agent", "kimi", "claude-agent", "codex", "opencode", "gemini"):
        found = [line for line in out.splitlines() if line.startswith(f"  {other} ")]
        assert len(found) == 1 and ("not found: its tests are skipped" in found[0] or "on PATH" in found[0]), out
