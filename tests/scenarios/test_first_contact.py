"""First contact, as a new user meets escouade_nb from a clean clone (issue 14, "First
contact"): terminal IPython (a real ``ipython`` process), the README's session pasted
into a real kernel, the hint after a stopped agent, the usage text, ``scripts/demo.sh``."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from escouade_nb.magics import USAGE, _start_parser

ROOT = Path(__file__).resolve().parents[2]
IPYTHON = Path(sys.executable).parent / "ipython"

BROKEN = {"id": "dev.example.brokenfake", "name": "Broken fake", "contributes": {"harnesses": [
    {"id": "brokenfake", "name": "Broken fake", "locate": {"names": ["escouade-fake-agent"]},
     "acp": {"args": "--oops"}}]}}


def _cells(out: str) -> dict[int, str]:
    """What each numbered input of a piped IPython session printed (``In [N]:`` to the next)."""
    parts = re.split(r"^In \[(\d+)\]: ", out, flags=re.M)
    return {int(n): text.strip() for n, text in zip(parts[1::2], parts[2::2], strict=False)}


@pytest.fixture(scope="module")
def terminal_ipython(tmp_path_factory) -> dict[int, str]:
    """One terminal IPython session (no event loop runs between its cells), fed on stdin."""
    if not IPYTHON.exists():
        pytest.skip(f"no ipython next to {sys.executable}")
    tmp = tmp_path_factory.mktemp("ipython")
    plugins = tmp / "plugins"
    (plugins / "brokenfake").mkdir(parents=True)
    (plugins / "brokenfake" / "escouade-plugin.json").write_text(json.dumps(BROKEN))
    lines = [
        "%load_ext escouade_nb",  # 1
        "%escouade goose",  # 2: not installed
        "%escouade fake",  # 3: installed
        "%escouade brokenfake",  # 4: defined by a broken manifest
        "from escouade_nb import Agent, get_squad",  # 5
        'a = Agent(get_squad().find("fake"), program="escouade-fake-agent")',  # 6
        'a.send("hi")',  # 7
        'get_squad().start("fake")',  # 8
        "print(sorted(get_squad().agents))",  # 9: nothing was left half-started
        "exit",
    ]
    env = {**os.environ, "ESCOUADE_NB_PLUGINS_DIR": str(plugins), "IPYTHONDIR": str(tmp / "ipython"),
           "PYTHONUNBUFFERED": "1",  # prompts (stdout) and messages (stderr) in the order they came
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin{os.pathsep}/bin"}  # goose: not on it
    done = subprocess.run([str(IPYTHON), "--no-banner", "--simple-prompt", "--colors=NoColor"], cwd=tmp,
                          input="\n".join(lines) + "\n", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stdout
    return _cells(done.stdout)


WHERE = re.compile(r"needs a running event loop, and none runs here\. escouade_nb runs agents on a Jupyter "
                   r"kernel's event loop.*JupyterLab, Jupyter Notebook, VS Code's notebooks, or `jupyter console`"
                   r".*Terminal IPython has no such loop.*run `jupyter console` instead")


def test_terminal_ipython_checks_what_it_can_then_says_where_escouade_works(terminal_ipython):
    goose = terminal_ipython[2].splitlines()
    # first what could be checked without a loop: not installed, and the install command
    assert goose[0].startswith("escouade: Goose: no program named goose on PATH. Install it with: curl -fsSL")
    assert goose[1].startswith("escouade: %escouade ") and WHERE.search(goose[1])
    (fake,) = terminal_ipython[3].splitlines()  # found and installed: only where it works
    assert WHERE.search(fake)
    assert "Traceback" not in "\n".join(terminal_ipython.values())


def test_agent_send_outside_a_loop_is_a_clear_error(terminal_ipython):
    (line,) = terminal_ipython[7].splitlines()  # IPython shows the error's own line, no traceback
    assert line.startswith("NoEventLoop: agent.send() ") and WHERE.search(line)
    (line,) = terminal_ipython[8].splitlines()
    assert line.startswith("NoEventLoop: starting an agent of 'fake' ") and WHERE.search(line)
    assert terminal_ipython[9] == "[]"  # no agent registered by the start that could not run


def test_a_harness_of_a_broken_manifest_points_at_the_file_and_field(terminal_ipython):
    line = terminal_ipython[4].splitlines()[0]
    assert re.fullmatch(r"escouade: unknown harness 'brokenfake': its manifest is broken — \S+/brokenfake/"
                        r"escouade-plugin\.json: contributes\.harnesses\[0\]\.acp\.args: Input should be a valid "
                        r"list; known harnesses: .*\bfake\b.*", line), line


def test_the_usage_names_every_start_option():
    for action in _start_parser()._actions:
        for flag in action.option_strings:
            assert flag in USAGE, f"the usage text does not name {flag}"


# -- in a real kernel -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    from kernel_client import Kernel

    k = Kernel(tmp_path_factory.mktemp("first-contact"))
    yield k
    k.run("from escouade_nb import get_squad\nfor a in list(get_squad().agents.values()):\n    await a.close()",
          allow_error=True)
    k.shutdown()


def _readme_session() -> tuple[list[str], str]:
    """The README's "A session": its python blocks (in order) and the text block after them."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## A session", 1)[1].split("\n## ", 1)[0]
    python = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    (shown,) = re.findall(r"```text\n(.*?)```", section, flags=re.S)
    return python, shown


@pytest.mark.kernel
def test_the_readme_session_runs_as_pasted(kernel, tmp_path):
    blocks, shown = _readme_session()
    work = str(tmp_path / "fresh" / "work")  # not there yet, as /tmp/work on a fresh machine
    for block in blocks:
        out = kernel.run(block.replace("/tmp/work", work))
        assert "escouade:" not in out.text and "usage:" not in out.text, out.text
    out = kernel.run("from escouade_nb import render_items\nprint(render_items(result.items))").text
    assert out.strip() == shown.strip().replace("/tmp/work", work)


@pytest.mark.kernel
def test_the_stopped_agent_hint_names_code_that_works(kernel, tmp_path):
    kernel.run(f"%load_ext escouade_nb\ng = %escouade fake --as hinted --cwd {tmp_path}\nawait g.ready()\n"
               "try:\n    await g.send('crash')\nexcept Exception as exc:\n    print(type(exc).__name__)")
    out = kernel.run("%%escouade hinted\nhello again").text
    assert "agent 'hinted' is exited" in out
    code = re.findall(r"`([^`]+)`", out.split("agent 'hinted' is exited", 1)[1])
    assert code and "get_squad().get('hinted').restart()" in code[-1], out
    kernel.run("\n".join(code))  # the hint's code, as written, runs
    assert kernel.run("print(g.status, 'crash' in repr(g.conversation.items))").text.split() == ["idle", "True"]


# -- scripts/demo.sh ---------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_demo_prints_the_quickstart_notebooks_url(tmp_path):
    """``bash scripts/demo.sh --no-browser``: a real JupyterLab, in a virtual environment of
    its own (this one's packages seen through a ``.pth``, so the install needs no network)."""
    jupyter = Path(sys.executable).parent / "jupyter"
    if importlib.util.find_spec("jupyterlab") is None or not jupyter.exists():
        pytest.skip("JupyterLab is not installed (the demo's [lab] extra)")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    site = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    (site / "zz-shared.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (venv / "bin" / "jupyter").symlink_to(jupyter)
    port = _free_port()
    env = {**os.environ, "ESCOUADE_VENV": str(venv), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces")}
    proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "demo.sh"), "--no-browser", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    seen: list[str] = []
    url = None
    try:
        deadline = time.monotonic() + 180
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            m = re.search(rf"http://127\.0\.0\.1:{port}/\S+", line)
            if m:
                url = m.group(0)
        assert url is not None, "".join(seen[-30:])
        assert re.fullmatch(rf"http://127\.0\.0\.1:{port}/lab/tree/notebooks/01-quickstart\.ipynb\?token=\w+", url)
        while True:  # the server serves it (it may log its URL a moment before it listens)
            try:
                with urllib.request.urlopen(url, timeout=30) as answer:
                    assert answer.status == 200
                break
            except urllib.error.URLError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # our own process group (start_new_session)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
