"""The ACP registry's entries are data: the shipped copy validates against the registry's own
schema, and an entry that could make npm or pip install anything but a registry package, put a
shell metacharacter on the agent's command line or change which program or library runs is
refused in one line naming its field (escouade_nb/manifest/registry.py)."""

from __future__ import annotations

import json

import pytest

from escouade_nb.manifest.registry import (SHIPPED_REGISTRY, RegistryError, install_plan, manifest_for,
                                           read_registry_file, validate_registry)


def entry(**distribution) -> dict:
    return {"id": "some-agent", "name": "Some Agent", "version": "1.2.3", "description": "d",
            "distribution": distribution}


def test_the_shipped_copy_is_the_registry_of_2026_02_07_and_validates():
    data = read_registry_file(SHIPPED_REGISTRY)
    versions = {a["id"]: a["version"] for a in data["agents"]}
    assert versions["claude-code-acp"] == "0.16.0" and versions["gemini"] == "0.27.3"
    assert len(versions) == 11 and data["extensions"] == []
    broken = json.loads(SHIPPED_REGISTRY.read_text())
    broken["agents"][0]["distribution"] = {"curl": {"package": "x"}}
    with pytest.raises(RegistryError, match="agents/0/distribution"):
        validate_registry(broken)


def test_an_npm_and_a_pypi_entry_give_their_plan():
    plan = install_plan(entry(npx={"package": "@scope/tool@1.2.3", "args": ["--acp", "--mode=x"],
                                   "env": {"TOOL_NO_UPDATE": "1"}}))
    assert (plan.kind, plan.package, plan.name, plan.program) == ("npx", "@scope/tool@1.2.3", "@scope/tool", "tool")
    assert plan.args == ["--acp", "--mode=x"] and plan.env == {"TOOL_NO_UPDATE": "1"}
    both = install_plan(entry(npx={"package": "tool@1.2.3"}, uvx={"package": "py-tool@1.2.3"}))
    assert (both.kind, both.package, both.program) == ("uvx", "py-tool==1.2.3", "py-tool")  # pip-only first
    assert install_plan(entry(npx={"package": "tool@1.2.3"}, uvx={"package": "py-tool"}), prefer="npx").kind == "npx"


def test_a_binary_only_entry_is_refused_in_one_line_with_the_reason():
    with pytest.raises(RegistryError) as err:
        install_plan(entry(binary={"linux-x86_64": {"archive": "https://example.org/a.tar.gz", "cmd": "./a"}}))
    assert "only binary" in str(err.value) and "never a downloaded binary archive" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("package", [
    "-g", "--registry=https://evil.example/", "file:../evil", "file:/tmp/evil.tgz", "../evil", "/tmp/evil",
    "https://evil.example/evil.tgz", "git+https://evil.example/evil.git", "github:evil/evil", "evil/evil",
    "tool@1.0.0 --global", "tool@1.0.0;rm -rf ~", "tool@>=1 <2", "tool@npm:other", ""])
def test_a_hostile_npm_package_is_refused(package):
    with pytest.raises(RegistryError, match="distribution.npx.package"):
        install_plan(entry(npx={"package": package}))


@pytest.mark.parametrize("package", [
    "-e", "--index-url=https://evil.example/simple", "--extra-index-url", "./evil", "/tmp/evil.whl",
    "evil @ https://evil.example/evil.whl", "git+https://evil.example/evil.git", "tool[extra]==1.0",
    "tool==1.0; python_version>'3'", "tool==1.0 --pre", "tool>=1.0", "https://evil.example/e.tar.gz"])
def test_a_hostile_pypi_package_is_refused(package):
    with pytest.raises(RegistryError, match="distribution.uvx.package"):
        install_plan(entry(uvx={"package": package}))


@pytest.mark.parametrize("arg", ["--acp; rm -rf ~", "$(id)", "`id`", "a|b", "a&b", "a>b", "--x\n--y", "two words",
                                 "*", "~/x", "'q'", "--x=$HOME"])
def test_an_argument_with_a_shell_metacharacter_is_refused(arg):
    with pytest.raises(RegistryError, match="distribution.npx.args"):
        install_plan(entry(npx={"package": "tool@1.2.3", "args": ["--acp", arg]}))


@pytest.mark.parametrize("name", ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES", "NODE_OPTIONS",
                                  "PYTHONPATH", "HOME", "npm_config_registry", "NPM_CONFIG_REGISTRY", "BASH_ENV",
                                  "ESCOUADE_NB_PLUGINS_DIR", "lower", "A-B"])
def test_an_environment_that_changes_what_runs_is_refused(name):
    with pytest.raises(RegistryError, match="distribution.uvx.env"):
        install_plan(entry(uvx={"package": "tool==1.2.3", "env": {name: "/tmp/evil"}}))


def test_a_manifest_written_from_an_entry_locates_a_name_and_records_the_install(tmp_path):
    plan = install_plan(entry(npx={"package": "@scope/tool@1.2.3", "args": ["--acp"]}))
    data = manifest_for(plan, "tool", tmp_path / "1.2.3-x")
    harness = data["contributes"]["harnesses"][0]
    assert harness["locate"] == {"names": ["tool"]} and harness["tested"] == {"oldest": "1.2.3", "newest": "1.2.3"}
    assert harness["acp"]["args"] == ["--acp"] and harness["acp"]["mcpInArgv"] is True
    assert harness["installed"]["path"] == str(tmp_path / "1.2.3-x")
    base = {"id": "dev.shipped", "name": "Tool", "contributes": {"harnesses": [
        {"id": "tool", "locate": {"names": ["old-tool"]}, "tested": {"oldest": "2.0.0", "newest": "2.0.0"},
         "updateCommand": "npm i -g tool@latest", "acp": {"args": ["acp"], "fs": False, "mcpInArgv": True}}]}}
    over = manifest_for(plan, "tool", tmp_path / "1.2.3-x", base, "tool")["contributes"]["harnesses"][0]
    assert over["tested"] == {"oldest": "2.0.0", "newest": "2.0.0"}  # what was measured stays: a warning says older
    assert over["acp"] == {"args": ["--acp"], "fs": False, "mcpInArgv": True, "env": {}}
    assert "updateCommand" not in over and over["locate"] == {"names": ["tool"]}
