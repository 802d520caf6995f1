"""Tests of escouade_nb.manifest (Escouade plugin-1 manifests)."""

from __future__ import annotations

import json
import os
import stat
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from escouade_nb import manifest as mf
from escouade_nb.manifest import (
    Discovery,
    Harness,
    HarnessRef,
    Manifest,
    ManifestError,
    ModeCap,
    discover,
    install_hint,
    load_manifest,
    locate_program,
    read_version,
    text,
    user_plugins_dir,
    version_status,
)

Range = mf.Tested  # not imported by name: pytest would try to collect "Tested*"

GOOSE_FILE = mf.SHIPPED_PLUGINS_DIR / "goose" / "escouade-plugin.json"


@pytest.fixture(autouse=True)
def isolated_user_dir(tmp_path, monkeypatch):
    """Keep the real user folder and installed entry points out of the tests."""
    user = tmp_path / "user-plugins"
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(user))
    monkeypatch.setattr(mf.discovery, "entry_points", lambda group: [])
    return user


def goose_data() -> dict:
    return json.loads(GOOSE_FILE.read_bytes())


def minimal(plugin_id="org.example.demo", harness_id="demo", **harness) -> dict:
    h = {"id": harness_id, "locate": {"names": [harness_id]}, "acp": {"args": ["acp"]}}
    h.update(harness)
    return {"id": plugin_id, "name": "Demo", "contributes": {"harnesses": [h]}}


def write_plugin(folder: Path, data: dict | str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / "escouade-plugin.json"
    file.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return file


def load_error(tmp_path: Path, data: dict | str) -> ManifestError:
    file = write_plugin(tmp_path / "broken", data)
    with pytest.raises(ManifestError) as info:
        load_manifest(file)
    err = info.value
    assert err.path == file
    assert "\n" not in str(err)
    assert str(err).startswith(f"{file}: ")
    return err


def make_executable(folder: Path, name: str, output: str) -> Path:
    """A tiny program printing *output*, runnable on this OS."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.name == "nt":
        path = folder / f"{name}.cmd"
        path.write_text(f"@echo {output}\r\n", encoding="utf-8")
    else:
        path = folder / name
        path.write_text(f"#!/bin/sh\necho '{output}'\n", encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# --------------------------------------------------------------------------
# The shipped Goose manifest


def test_goose_manifest_loads_unchanged():
    m = load_manifest(GOOSE_FILE)
    assert m.id == "dev.escouade.goose"
    assert m.name == "Goose"
    assert m.schema_uri == "https://escouade.dev/schemas/plugin-1.json"
    assert m.escouade.api == "1" and m.escouade.min == "2.1.0"
    assert m.author.name == "Escouade" and m.author.url == "https://escouade.dev"
    assert m.description_text("fr").startswith("Goose, l'agent open source")
    assert m.description_text().startswith("Goose, Block's open source agent")

    (h,) = m.contributes.harnesses
    assert h.id == "goose" and h.speaker == "Goose" and h.writer == "Goose"
    assert h.locate.names == ["goose"]
    assert h.version_args == ["--version"]
    assert h.tested == Range(oldest="1.57.0", newest="1.57.0")
    assert h.caps.read_only is True and h.caps.images is False
    assert [c.id for c in h.mode_caps()] == ["default", "acceptEdits", "bypassPermissions"]
    assert h.account_var == "GOOSE_PATH_ROOT"
    assert h.install.unix == (
        "curl -fsSL https://github.com/aaif-goose/goose/releases/download/stable/"
        "download_cli.sh | CONFIGURE=false bash"
    )
    assert h.install.windows.startswith("Invoke-WebRequest")
    assert h.update_command == "goose update"

    acp = h.acp
    assert acp.args == ["acp"]
    assert acp.fs is False
    assert acp.modes == {
        "default": "approve",
        "acceptEdits": "smart_approve",
        "bypassPermissions": "auto",
    }
    assert acp.read_only_mode == "chat"
    assert acp.model_option == "model"
    assert acp.questions_in_text is True
    assert acp.tools == {
        "shell": "Bash",
        "write": "Write",
        "edit": "Edit",
        "text_editor": "Edit",
        "read": "Read",
        "tree": "Glob",
    }
    assert acp.env == {} and acp.remove_env == [] and acp.subagent_tools == []


def test_goose_manifest_round_trips_to_the_same_json():
    original = json.loads(GOOSE_FILE.read_bytes())
    assert load_manifest(GOOSE_FILE).to_dict() == original


def test_defaults_of_a_lean_harness():
    m = Manifest.model_validate({"id": "p", "name": "P", "contributes": {"harnesses": [{"id": "h", "acp": {}}]}})
    h = m.contributes.harnesses[0]
    assert h.version_args == ["--version"]
    assert h.acp.fs is True
    assert h.acp.questions_in_text is False
    assert h.locate.names == []
    assert h.mode_caps() == []
    assert h.is_described


def test_snake_case_names_populate_too():
    h = Harness(id="h", version_args=["-V"], acp={"remove_env": ["X"], "questions_in_text": True})
    assert h.version_args == ["-V"]
    assert h.acp.remove_env == ["X"] and h.acp.questions_in_text is True
    assert h.model_dump(by_alias=True)["versionArgs"] == ["-V"]


# --------------------------------------------------------------------------
# Unknown keys, localised text, modes


def test_unknown_keys_are_kept_everywhere(tmp_path):
    data = minimal()
    data["program"] = {"entry": "rules.py"}
    data["permissions"] = {"decide": True, "scope": "all"}
    data["contributes"]["rules"] = [{"id": "r1"}]
    data["contributes"]["harnesses"][0]["futureField"] = 42
    data["contributes"]["harnesses"][0]["caps"] = {"modes": [], "audio": True}
    data["contributes"]["harnesses"][0]["acp"]["newOption"] = "x"
    m = load_manifest(write_plugin(tmp_path / "p", data))

    assert m.model_extra == {"program": {"entry": "rules.py"}}
    assert m.program == {"entry": "rules.py"}
    assert m.permissions.decide is True
    assert m.permissions.model_extra == {"scope": "all"}
    assert m.contributes.rules == [{"id": "r1"}]
    h = m.contributes.harnesses[0]
    assert h.model_extra == {"futureField": 42}
    assert h.futureField == 42
    assert h.acp.model_extra == {"newOption": "x"}
    assert h.caps.flag("audio") is True
    assert h.caps.flag("pdf") is False
    assert m.to_dict() == data


def test_description_as_string_and_as_map():
    plain = Manifest(id="p", name="P", description="Just text")
    assert plain.description_text("fr") == "Just text"
    multi = Manifest(id="p", name="P", description={"fr": "Bonjour", "en": "Hello", "de": "Hallo"})
    assert multi.description_text("fr") == "Bonjour"
    assert multi.description_text("fr-CA") == "Bonjour"
    assert multi.description_text("it") == "Hello"  # falls back to en
    assert Manifest(id="p", name="P").description_text() is None


def test_text_helper():
    assert text("x", "fr") == "x"
    assert text({"de": "Hallo", "es": "Hola"}, "fr") == "Hallo"  # first value
    assert text({"en": "Hi", "fr": "Salut"}) == "Hi"
    assert text({}) is None and text(None) is None


def test_modes_in_both_shapes():
    h = Harness(
        id="h",
        caps={"modes": ["default", {"id": "plan", "meaning": {"en": "Plans only", "fr": "Plans seulement"}}, {"id": "x", "meaning": "Plain"}]},
    )
    caps = h.mode_caps()
    assert all(isinstance(c, ModeCap) for c in caps)
    assert [c.id for c in caps] == ["default", "plan", "x"]
    assert caps[0].meaning_text() is None
    assert caps[1].meaning_text("fr") == "Plans seulement"
    assert caps[1].meaning_text() == "Plans only"
    assert caps[2].meaning_text("fr") == "Plain"
    # the original shapes are kept for the round trip
    assert h.model_dump(by_alias=True, exclude_unset=True)["caps"]["modes"][0] == "default"


def test_models_and_extensions():
    h = Harness(id="h", models=[{"id": "m1", "label": "Model one"}, {"id": "m2"}], acp={"extensions": "cursor"})
    assert [(m.id, m.label_text()) for m in h.models] == [("m1", "Model one"), ("m2", "m2")]
    assert h.acp.extension_names() == ["cursor"]


# --------------------------------------------------------------------------
# Errors


def test_bad_json_names_file_line_and_column(tmp_path):
    err = load_error(tmp_path, '{\n  "id": "p",\n  "name": "P",\n}\n')
    assert err.field is None
    assert (err.line, err.column) == (4, 1)
    assert "line 4, column 1" in str(err)


def test_wrong_type_deep_inside_names_the_field_path(tmp_path):
    data = goose_data()
    data["contributes"]["harnesses"][0]["locate"]["names"] = "goose"
    err = load_error(tmp_path, data)
    assert err.field == "contributes.harnesses[0].locate.names"
    assert str(err) == f"{err.path}: contributes.harnesses[0].locate.names: {err.message}"
    assert "list" in err.message


def test_missing_harness_id(tmp_path):
    data = goose_data()
    del data["contributes"]["harnesses"][0]["id"]
    err = load_error(tmp_path, data)
    assert err.field == "contributes.harnesses[0].id"
    assert "required" in err.message


@pytest.mark.parametrize("key", ["id", "name"])
def test_plugin_id_and_name_are_required(tmp_path, key):
    data = minimal()
    del data[key]
    assert load_error(tmp_path, data).field == key


def test_program_name_with_path_separator_is_rejected(tmp_path):
    for bad in ["bin/goose", "C:\\tools\\goose.exe"]:
        data = minimal()
        data["contributes"]["harnesses"][0]["locate"]["names"] = ["ok", bad]
        err = load_error(tmp_path, data)
        assert err.field == "contributes.harnesses[0].locate.names[1]"
        assert "path separator" in err.message and "never a path" in err.message


def test_union_errors_point_at_the_precise_field(tmp_path):
    data = goose_data()
    data["contributes"]["harnesses"][0]["caps"]["modes"][1]["meaning"] = {"en": 5}
    err = load_error(tmp_path, data)
    assert err.field == "contributes.harnesses[0].caps.modes[1].meaning.en"

    data = goose_data()
    data["description"] = 5
    err = load_error(tmp_path, data)
    assert err.field == "description"
    assert "string" in err.message and "dictionary" in err.message


def test_duplicate_harness_id_in_one_manifest(tmp_path):
    data = minimal()
    data["contributes"]["harnesses"].append({"id": "demo"})
    err = load_error(tmp_path, data)
    assert err.field == "contributes.harnesses[1].id"


def test_non_object_and_unreadable(tmp_path):
    assert "JSON object" in load_error(tmp_path, "[1, 2]").message
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path / "nope" / "escouade-plugin.json")
    assert "cannot read" in str(info.value)


# --------------------------------------------------------------------------
# Discovery


def test_shipped_goose_is_discovered():
    d = discover()
    goose = d.find("plugin:dev.escouade.goose:goose")
    assert goose.source == "shipped"
    assert goose.path == GOOSE_FILE
    assert goose.short_id == "goose"
    assert any(m.id == "dev.escouade.goose" for m, _ in d.plugins)
    assert d.errors == []


def test_discovery_of_broken_and_good_manifests(tmp_path):
    root = tmp_path / "extra"
    good = write_plugin(root / "a-good", minimal())
    broken = write_plugin(root / "b-broken", '{"id": "x", "name": ')
    write_plugin(root / "c-rules", {"id": "org.example.rules", "name": "Rules", "permissions": {"decide": True}})
    (root / "not-a-plugin").mkdir()

    d = discover([root])
    ref = d.find("demo")
    assert ref.path == good and ref.source == "extra"
    assert len(d.errors) == 1
    assert d.errors[0].path == broken
    assert "invalid JSON" in str(d.errors[0])
    plugin_ids = [m.id for m, _ in d.plugins]
    assert "org.example.rules" in plugin_ids  # loaded although it has no harness
    assert all(r.harness.acp is not None for r in d.harnesses)


def test_harness_without_acp_is_not_described(tmp_path):
    data = minimal()
    data["contributes"]["harnesses"].append({"id": "native"})
    d = discover([write_plugin(tmp_path / "p", data)])
    assert d.find("demo")
    with pytest.raises(LookupError):
        d.find("native")


def test_extra_dir_can_be_a_plugin_folder_and_missing_dirs_are_errors(tmp_path):
    folder = tmp_path / "single"
    write_plugin(folder, minimal())
    d = discover([folder, tmp_path / "missing"])
    assert d.find("demo").path == folder / "escouade-plugin.json"
    assert [e.path for e in d.errors] == [tmp_path / "missing"]


def test_user_folder_from_env(isolated_user_dir):
    assert user_plugins_dir() == isolated_user_dir
    write_plugin(isolated_user_dir / "mine", minimal("org.me.tool", "mytool"))
    ref = discover().find("mytool")
    assert ref.source == "user"
    assert ref.id == "plugin:org.me.tool:mytool"


def test_user_folder_default_is_in_jupyter_data_dir(monkeypatch):
    from jupyter_core.paths import jupyter_data_dir

    monkeypatch.delenv("ESCOUADE_NB_PLUGINS_DIR")
    assert user_plugins_dir() == Path(jupyter_data_dir()) / "escouade_nb" / "plugins"


def test_user_overrides_shipped(isolated_user_dir):
    data = goose_data()
    data["contributes"]["harnesses"][0]["acp"]["args"] = ["acp", "--debug"]
    user_file = write_plugin(isolated_user_dir / "goose", data)

    d = discover()
    gooses = [r for r in d.harnesses if r.id == "plugin:dev.escouade.goose:goose"]
    assert len(gooses) == 1
    assert gooses[0].source == "user"
    assert gooses[0].path == user_file
    assert d.find("goose").harness.acp.args == ["acp", "--debug"]


def test_extra_overrides_user(isolated_user_dir, tmp_path):
    write_plugin(isolated_user_dir / "demo", minimal())
    extra = write_plugin(tmp_path / "extra" / "demo", minimal(harness_id="demo", versionArgs=["-V"]))
    ref = discover([tmp_path / "extra"]).find("demo")
    assert ref.source == "extra" and ref.path == extra
    assert ref.harness.version_args == ["-V"]


def test_entry_points(tmp_path, monkeypatch):
    pkg_root = tmp_path / "site"
    pkg_root.mkdir()
    folder_a = tmp_path / "ep-a"
    write_plugin(folder_a, minimal("org.ep.a", "epa"))
    parent_b = tmp_path / "ep-b"
    write_plugin(parent_b / "inner", minimal("org.ep.b", "epb"))
    (pkg_root / "fake_ep_mod.py").write_text(
        "from pathlib import Path\n"
        f"FOLDER = {str(folder_a)!r}\n"
        f"def parent():\n    return Path({str(parent_b)!r})\n"
        "def boom():\n    raise RuntimeError('no luck')\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(pkg_root))
    group = "escouade_nb.plugins"
    eps = [
        EntryPoint("a", "fake_ep_mod:FOLDER", group),
        EntryPoint("b", "fake_ep_mod:parent", group),
        EntryPoint("c", "fake_ep_mod:boom", group),
    ]
    monkeypatch.setattr(mf.discovery, "entry_points", lambda group: eps if group == "escouade_nb.plugins" else [])

    d = discover()
    assert d.find("epa").source == "entry-point"
    assert d.find("epb").path == parent_b / "inner" / "escouade-plugin.json"
    assert len(d.errors) == 1
    assert "no luck" in str(d.errors[0]) and "fake_ep_mod:boom" in str(d.errors[0])


def test_entry_points_read_again_only_when_a_folder_of_sys_path_changed(tmp_path, monkeypatch):
    """Issue 37: each discovery parsed every installed distribution's entry points (~25 ms on the kernel's loop,
    twice in the first ``%escouade NAME``); they are read again when a folder of sys.path changes (a package
    installed or removed there), not at each discovery."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    reads: list[str] = []

    def counting(group):
        reads.append(group)
        return []

    monkeypatch.setattr(mf.discovery, "entry_points", counting)
    discover()
    discover()
    assert reads == ["escouade_nb.plugins"]
    (site / "newpkg-1.0.dist-info").mkdir()  # what an install adds (the folder's time moves)
    os.utime(site, ns=(site.stat().st_atime_ns, site.stat().st_mtime_ns + 10**9))
    discover()
    assert reads == ["escouade_nb.plugins"] * 2


def _ref(plugin_id: str, harness_id: str) -> HarnessRef:
    m = Manifest.model_validate(minimal(plugin_id, harness_id))
    return HarnessRef(m, m.contributes.harnesses[0], Path("/x/escouade-plugin.json"), "extra")


def test_find_by_full_and_short_id_unknown_and_ambiguous():
    d = Discovery(harnesses=[_ref("org.a", "alpha"), _ref("org.a", "twin"), _ref("org.b", "twin")])
    assert d.find("alpha").id == "plugin:org.a:alpha"
    assert d.find("plugin:org.b:twin").manifest.id == "org.b"

    with pytest.raises(LookupError) as info:
        d.find("Alpha")  # case-sensitive
    msg = str(info.value)
    assert "\n" not in msg and "alpha" in msg and "twin" in msg

    with pytest.raises(LookupError) as info:
        d.find("plugin:org.c:alpha")
    assert "alpha" in str(info.value)

    with pytest.raises(LookupError) as info:
        d.find("twin")
    msg = str(info.value)
    assert "ambiguous" in msg
    assert "plugin:org.a:twin" in msg and "plugin:org.b:twin" in msg


# --------------------------------------------------------------------------
# Program, version, install


def test_locate_program_on_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    prog = make_executable(bin_dir, "escouade-test-tool", "tool 1.2.3")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(mf.locate, "_scripts_dir", lambda: None)
    h = Harness(id="t", locate={"names": ["escouade-test-missing", "escouade-test-tool"]})
    found = locate_program(h)
    assert found is not None and os.path.isabs(found)
    assert Path(found).resolve() == prog.resolve()


def test_locate_program_absent(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(mf.locate, "_scripts_dir", lambda: str(tmp_path / "no-scripts"))
    assert locate_program(Harness(id="t", locate={"names": ["escouade-test-missing"]})) is None
    assert locate_program(Harness(id="t")) is None


def test_locate_program_in_python_scripts_folder(tmp_path, monkeypatch):
    scripts = tmp_path / "venv-bin"
    prog = make_executable(scripts, "escouade-test-venv-tool", "x 0.1")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(mf.locate, "_scripts_dir", lambda: str(scripts))
    found = locate_program(Harness(id="t", locate={"names": ["escouade-test-venv-tool"]}))
    assert found is not None and Path(found).resolve() == prog.resolve()


def test_read_version_from_a_script(tmp_path):
    script = tmp_path / "tool.py"
    script.write_text("import sys\nsys.stderr.write('warming up\\n')\nprint('tool 1.2.3 (build 7.8)')\n")
    assert read_version(sys.executable, [str(script)]) == "1.2.3"
    script.write_text("print('tool v2.5')\n")
    assert read_version(sys.executable, [str(script)]) == "2.5"


def test_read_version_from_an_executable_with_version_args(tmp_path):
    prog = make_executable(tmp_path, "escouade-test-tool", "tool 1.2.3")
    assert read_version(str(prog), ["--version"]) == "1.2.3"


def test_read_version_failures_return_none(tmp_path):
    assert read_version(str(tmp_path / "does-not-exist"), ["--version"]) is None
    no_version = tmp_path / "nov.py"
    no_version.write_text("print('no digits here')\n")
    assert read_version(sys.executable, [str(no_version)]) is None
    failing = tmp_path / "fail.py"
    failing.write_text("import sys\nprint('tool 1.2.3')\nsys.exit(3)\n")
    assert read_version(sys.executable, [str(failing)]) is None
    slow = tmp_path / "slow.py"
    slow.write_text("import time\ntime.sleep(30)\nprint('1.0.0')\n")
    assert read_version(sys.executable, [str(slow)], timeout=0.5) is None


@pytest.mark.parametrize(
    ("version", "tested", "expected"),
    [
        ("1.57.0", Range(oldest="1.57.0", newest="1.57.0"), "tested"),
        ("1.57", Range(oldest="1.57.0", newest="1.57.0"), "tested"),
        ("1.56.9", Range(oldest="1.57.0", newest="1.57.0"), "older"),
        ("1.58.0", Range(oldest="1.57.0", newest="1.57.0"), "newer"),
        ("1.10.0", Range(oldest="1.2.0", newest="1.9.0"), "newer"),
        ("1.9.5", {"oldest": "1.2.0", "newest": "1.10.0"}, "tested"),
        ("0.9", Range(oldest="1.0"), "older"),
        ("99.0", Range(oldest="1.0"), "tested"),
        ("2.0", Range(newest="1.0"), "newer"),
        (None, Range(oldest="1.0", newest="2.0"), "unknown"),
        ("1.0", None, "unknown"),
        ("1.0", Range(), "unknown"),
        ("garbage", Range(oldest="1.0"), "unknown"),
    ],
)
def test_version_status(version, tested, expected):
    assert version_status(version, tested) == expected


def test_numeric_fallback_comparison():
    assert mf.locate._numeric_key("1.10") > mf.locate._numeric_key("1.9")
    assert mf.locate._numeric_key("1.57") == mf.locate._numeric_key("1.57.0")
    with pytest.raises(ValueError):
        mf.locate._numeric_key("abc")


def test_version_status_without_packaging(monkeypatch):
    monkeypatch.setattr(mf.locate, "_version_key", lambda: mf.locate._numeric_key)
    assert version_status("1.10.0", Range(oldest="1.2", newest="1.9")) == "newer"
    assert version_status("1.5", Range(oldest="1.2", newest="1.9")) == "tested"


def test_install_hint():
    h = load_manifest(GOOSE_FILE).contributes.harnesses[0]
    assert install_hint(h, os_name="nt").startswith("Invoke-WebRequest")
    assert install_hint(h, os_name="posix").startswith("curl -fsSL")
    expected = h.install.windows if os.name == "nt" else h.install.unix
    assert install_hint(h) == expected
    assert install_hint(Harness(id="x")) is None


def test_every_shipped_harness_says_whether_it_puts_its_mcp_servers_in_argv():
    """``acp.mcpInArgv`` is stated in every shipped manifest but goose's (the seed's,
    unchanged: the default, false, holds for it) (measured: only claude-agent
    copies its mcpServers onto a command line, Claude Code's ``--mcp-config``), so the
    kernel's token goes to claude-agent in a file, never in a header it would show."""
    said = {}
    for path in sorted(mf.SHIPPED_PLUGINS_DIR.glob("*/escouade-plugin.json")):
        raw = json.loads(path.read_text())
        for entry in raw.get("contributes", {}).get("harnesses", []):
            if "acp" in entry and path.parent.name != "goose":  # goose's is the seed's manifest, unchanged
                assert "mcpInArgv" in entry["acp"], f"{path}: harness {entry['id']} does not say mcpInArgv"
        for harness in mf.load_manifest(path).described_harnesses():
            said[harness.id] = harness.acp.mcp_in_argv
    assert {h for h, v in said.items() if v} == {"claude-agent"}, said
    assert {"mistral-vibe", "fast-agent", "kimi", "codex", "opencode", "gemini"} <= set(said)
