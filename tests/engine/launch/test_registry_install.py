"""``%escouade install``'s machinery over real processes, without the network: npm is a
stand-in program on PATH (the boundary we do not own) that logs its argv and installs a
package the way npm lays one out, or fails. What is checked: the argv (no shell, no -g), the
per-user layout and its atomic swap, the manifest written and found, a second install a
no-op, a failed one changing nothing (its log kept), a hostile entry never reaching npm, the
registry's refresh falling back in one line, and a fetched registry cached 0600."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import stat
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import deadlines
from kernel_client import processes_named
from escouade_nb.engine.launch.registry_install import InstallError, install_agent, refresh_registry
from escouade_nb.manifest import discover, locate_program
from escouade_nb.manifest.registry import RegistryError, cached_registry_path, load_registry

FAKE_NPM = Path(__file__).resolve().parents[2] / "fixtures" / "fake_npm.py"


def entry(version: str, **dist) -> dict:
    return {"id": "tool", "name": "Tool", "version": version, "description": "A tool agent.",
            "distribution": dist or {"npx": {"package": f"@scope/tool@{version}", "args": ["--acp"]}}}


@pytest.fixture
def home(tmp_path, monkeypatch):
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_NPM))} \"$@\"\n")
    npm.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NPM_LOG", str(tmp_path / "npm.log"))
    monkeypatch.setenv("ESCOUADE_NB_AGENTS_DIR", str(tmp_path / "agents"))
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    return tmp_path


def registry(home: Path, *entries: dict) -> None:
    path = cached_registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": "1.0.0", "agents": list(entries), "extensions": []}))


def npm_runs(home: Path) -> list[list[str]]:
    log = home / "npm.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_an_npm_entry_installs_per_user_streams_its_output_and_is_found(home):
    registry(home, entry("1.0.0"))
    lines: list[str] = []
    result = deadlines.run(install_agent("tool", on_line=lines.append))
    run = npm_runs(home)[0]
    assert run[0] == "install" and "-g" not in run and "--global" not in run and run[-1] == "@scope/tool@1.0.0"
    assert Path(run[run.index("--prefix") + 1]) == result.folder
    assert len([x for x in lines if "npm http fetch" in x]) == 30 and lines[-1] == "added 1 package in 0s"
    assert result.folder.parent == home / "agents" / "tool" and result.folder.name.startswith("1.0.0-")
    assert (home / "agents" / "bin" / "tool-acp").resolve() == (result.folder / "node_modules/@scope/tool/cli.js")
    ref = discover().find("tool")
    assert ref.path == home / "plugins" / "acp-registry-tool" / "escouade-plugin.json"
    assert ref.harness.locate.names == ["tool-acp"] and ref.acp.args == ["--acp"]
    assert ref.harness.tested.newest == "1.0.0"
    assert locate_program(ref.harness) == str(home / "agents" / "bin" / "tool-acp")
    assert (home / "agents" / "tool" / "install.log").read_text().count("npm http fetch") == 30


def test_the_same_version_again_is_a_no_op_and_another_replaces_it(home):
    registry(home, entry("1.0.0"))
    first = deadlines.run(install_agent("tool"))
    again = deadlines.run(install_agent("tool"))
    assert again.already and again.folder == first.folder and len(npm_runs(home)) == 1
    registry(home, entry("1.1.0"))
    newer = deadlines.run(install_agent("tool"))
    assert not newer.already and newer.folder != first.folder and not first.folder.exists()
    assert discover().find("tool").harness.tested.newest == "1.1.0"
    assert os.readlink(home / "agents" / "tool" / "current") == newer.folder.name


def test_a_failed_install_changes_nothing_and_keeps_its_log(home, monkeypatch):
    registry(home, entry("1.0.0"))
    first = deadlines.run(install_agent("tool"))
    manifest = (home / "plugins" / "acp-registry-tool" / "escouade-plugin.json").read_bytes()
    registry(home, entry("1.1.0"))
    monkeypatch.setenv("FAKE_NPM_FAIL", "1")
    with pytest.raises(InstallError) as err:
        deadlines.run(install_agent("tool"))
    message = str(err.value)
    assert "exit code 1" in message and "nothing was changed" in message and "\n" not in message
    log = home / "agents" / "tool" / "install.log"
    assert str(log) in message and "npm error 404 Not Found" in log.read_text()
    assert (home / "plugins" / "acp-registry-tool" / "escouade-plugin.json").read_bytes() == manifest
    assert sorted(p.name for p in (home / "agents" / "tool").iterdir() if not p.name.startswith(".")) == [
        first.folder.name, "current", "install.log"]
    assert [p.name for p in (home / "plugins").iterdir()] == ["acp-registry-tool"]  # no temporary file left


@pytest.mark.parametrize("dist", [
    {"npx": {"package": "file:../../evil"}},
    {"npx": {"package": "-g"}},
    {"npx": {"package": "@scope/tool@1.0.0", "args": ["--acp", "$(touch /tmp/pwned)"]}},
    {"npx": {"package": "@scope/tool@1.0.0", "env": {"PATH": "/tmp/evil"}}},
    {"uvx": {"package": "evil @ https://evil.example/evil.whl"}},
])
def test_a_hostile_entry_never_reaches_npm_or_pip(home, dist):
    registry(home, entry("1.0.0", **dist))
    with pytest.raises(RegistryError, match="not installed"):
        deadlines.run(install_agent("tool"))
    assert npm_runs(home) == [] and not (home / "agents" / "bin").exists() and not (home / "plugins").exists()


def test_a_broken_cached_registry_falls_back_to_the_shipped_copy_in_one_line(home):
    path = cached_registry_path()
    path.parent.mkdir(parents=True)
    path.write_text('{"version": "1.0.0", "agents": [{"id": "x"}], "extensions": []}')
    reg = load_registry()
    assert reg.source == "shipped" and "the cached registry is not used" in reg.note and "\n" not in reg.note


def test_an_unreachable_registry_leaves_the_copy_in_use_and_says_so(home):
    reg, note = deadlines.run(refresh_registry("http://127.0.0.1:9/registry.json", timeout=5))
    assert reg.source == "shipped" and note.startswith("the registry could not be fetched from http://127.0.0.1:9/")
    assert not cached_registry_path().exists()


def test_a_fetched_registry_is_validated_and_cached_private(home):
    good = {"version": "1.0.0", "agents": [entry("2.0.0")], "extensions": []}
    bodies = [b"not json", json.dumps(good).encode()]

    class Serve(BaseHTTPRequestHandler):
        def do_GET(self):
            body = bodies.pop(0)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/registry.json"
        reg, note = deadlines.run(refresh_registry(url, timeout=10))
        assert reg.source == "shipped" and "could not be fetched" in note
        reg, note = deadlines.run(refresh_registry(url, timeout=10))
    finally:
        server.shutdown()
        server.server_close()
    assert reg.source == "cached" and note == f"registry fetched from {url} (1 agents)"
    assert stat.S_IMODE(cached_registry_path().stat().st_mode) == 0o600
    assert load_registry().entry("tool")["version"] == "2.0.0"


def _wheel(folder: Path) -> None:
    """A real wheel of ``tool-agent`` 1.0.0 whose console script ``tool-agent`` prints its version."""
    import base64
    import hashlib
    import zipfile

    files = {
        "tool_agent/__init__.py": "def main():\n    print('tool-agent 1.0.0')\n",
        "tool_agent-1.0.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tool-agent\nVersion: 1.0.0\n",
        "tool_agent-1.0.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                                            "Tag: py3-none-any\n",
        "tool_agent-1.0.0.dist-info/entry_points.txt": "[console_scripts]\ntool-agent = tool_agent:main\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append("tool_agent-1.0.0.dist-info/RECORD,,")
    with zipfile.ZipFile(folder / "tool_agent-1.0.0-py3-none-any.whl", "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
        wheel.writestr("tool_agent-1.0.0.dist-info/RECORD", "\n".join(record) + "\n")


def test_a_pypi_entry_installs_with_pip_into_a_venv_of_its_own(home, monkeypatch):
    wheels = home / "wheels"
    wheels.mkdir()
    _wheel(wheels)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # the user's own pip settings reach pip: here, a local index
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    registry(home, entry("1.0.0", uvx={"package": "tool-agent==1.0.0", "args": ["acp"]},
                         npx={"package": "@scope/tool@1.0.0"}))
    lines: list[str] = []
    result = deadlines.run(install_agent("tool", on_line=lines.append), timeout=240)
    assert result.plan.kind == "uvx" and npm_runs(home) == []  # pip-only where the entry allows it
    assert any("Successfully installed tool-agent-1.0.0" in x for x in lines), lines
    program = home / "agents" / "bin" / "tool-agent"
    assert program.resolve() == result.folder / "bin" / "tool-agent"
    assert (result.folder / "pyvenv.cfg").is_file()
    ref = discover().find("tool")
    assert ref.harness.locate.names == ["tool-agent"] and ref.acp.args == ["acp"]
    from escouade_nb.manifest import read_version
    assert read_version(locate_program(ref.harness), ["--version"]) == "1.0.0"


def test_a_cancelled_install_ends_npm_and_changes_nothing(home, monkeypatch):
    registry(home, entry("1.0.0"))
    monkeypatch.setenv("FAKE_NPM_PAUSE", "60")  # a download that takes its time
    lines: list[str] = []

    async def go() -> None:
        task = asyncio.ensure_future(install_agent("tool", on_line=lines.append))
        await deadlines.until(lambda: len(lines) >= 10, timeout=60, what="npm's first lines")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    deadlines.run(go())
    assert not processes_named(str(home / "agents"))  # npm's process group ended with the install
    assert sorted(p.name for p in (home / "agents" / "tool").iterdir()) == [".lock", "install.log"]
    assert not (home / "agents" / "bin").exists() and not (home / "plugins").exists()


def test_a_second_install_of_the_same_agent_while_one_runs_is_refused_in_one_line(home, monkeypatch):
    registry(home, entry("1.0.0"))
    monkeypatch.setenv("FAKE_NPM_PAUSE", "1")
    lines: list[str] = []

    async def go() -> None:
        first = asyncio.ensure_future(install_agent("tool", on_line=lines.append))
        await deadlines.until(lambda: lines, timeout=60, what="the first install's npm")
        with pytest.raises(InstallError, match="another install of tool is under way"):
            await install_agent("tool")
        assert not (await first).already
    deadlines.run(go())
    assert len(npm_runs(home)) == 1
