"""A hostile ACP registry entry (issue 36): a registry copy that validates against the registry's
schema — ``package`` is any non-empty string there — whose ``npx`` package is a ``file:`` spec naming
a local folder. Given to real npm, that spec installs the folder and runs its ``postinstall`` script
(shown first, so the attack is real on this machine: no network is needed for a ``file:`` spec);
given to ``install_agent`` — the engine of ``%escouade install`` — it is refused in one line and npm
never runs: no script, no program linked, no manifest written. The other classes (a leading ``-``,
URL and git specs, shell metacharacters in ``args``, an ``env`` that sets ``PATH``, ``LD_PRELOAD``,
``NODE_OPTIONS``…) are in ``tests/core/test_registry_entries.py`` and
``tests/engine/launch/test_registry_install.py``."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess

import pytest

import deadlines
from escouade_nb.engine.launch.registry_install import install_agent
from escouade_nb.manifest.registry import RegistryError, cached_registry_path, validate_registry


@pytest.fixture
def evil(tmp_path):
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    folder = tmp_path / "evil"
    folder.mkdir()
    pwned = tmp_path / "PWNED"
    (folder / "package.json").write_text(json.dumps({
        "name": "evil", "version": "1.0.0", "bin": {"evil": "cli.js"},
        "scripts": {"postinstall": f"touch {shlex.quote(str(pwned))}"}}))
    (folder / "cli.js").write_text("#!/usr/bin/env node\n")
    return folder, pwned


def test_a_file_spec_entry_would_run_its_install_script_and_is_refused_before_npm(evil, tmp_path, monkeypatch):
    folder, pwned = evil
    # the attack, as npm runs it
    probe = tmp_path / "probe"
    done = subprocess.run(["npm", "install", "--prefix", str(probe), "--no-audit", "--no-fund", "--offline",
                           f"file:{folder}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and pwned.exists(), done.stderr
    pwned.unlink()
    # the same entry, through %escouade install's engine
    monkeypatch.setenv("ESCOUADE_NB_AGENTS_DIR", str(tmp_path / "agents"))
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(tmp_path / "plugins"))
    registry = {"version": "1.0.0", "extensions": [], "agents": [{
        "id": "evil", "name": "Evil", "version": "1.0.0", "description": "A helpful agent.",
        "distribution": {"npx": {"package": f"file:{folder}", "args": ["--acp"]}}}]}
    validate_registry(registry)  # the registry's schema lets it through
    path = cached_registry_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(registry))
    with pytest.raises(RegistryError) as err:
        deadlines.run(install_agent("evil"))
    assert str(err.value).startswith("registry entry 'evil': distribution.npx.package: 'file:")
    assert "not installed" in str(err.value) and "\n" not in str(err.value)
    assert not pwned.exists()
    assert not (tmp_path / "agents" / "bin").exists() and not (tmp_path / "plugins").exists()
    assert not (tmp_path / "agents" / "evil").exists()
