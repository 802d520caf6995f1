"""The wheel ships the top-level plugins/ and widgets/ inside the package, and an installed
wheel finds them there the same way a checkout (editable install) finds them at the top."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(out), str(ROOT)], check=True, timeout=300,
                   cwd=out)
    (found,) = out.glob("escouade_nb-*.whl")
    return found


def shipped_files(folder: str) -> set[str]:
    listed = subprocess.run(["git", "ls-files", folder], cwd=ROOT, capture_output=True, text=True, check=True)
    return {line for line in listed.stdout.splitlines() if line}


def test_the_wheel_holds_every_shipped_plugin_and_front_end_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    plugins = shipped_files("plugins")
    front = shipped_files("widgets")
    assert plugins and front
    missing = [f for f in plugins if f"escouade_nb/{f}" not in names]
    missing += [f for f in front if f"escouade_nb/widgets/static/{f.removeprefix('widgets/')}" not in names]
    assert missing == []
    for name in ("goose", "fake", "team-rules", "codex", "gemini", "claude-agent", "opencode", "kimi",
                 "mistral-vibe", "fast-agent"):
        assert f"escouade_nb/plugins/{name}/escouade-plugin.json" in names
    with zipfile.ZipFile(wheel) as zf:  # Escouade's goose manifest, byte for byte
        assert zf.read("escouade_nb/plugins/goose/escouade-plugin.json") == (
            ROOT / "plugins" / "goose" / "escouade-plugin.json").read_bytes()
    assert not [n for n in names if n.startswith(("plugins/", "widgets/", "tests/", "notebooks/"))]


def test_the_wheel_installs_the_prebuilt_jupyterlab_extension(wheel):
    """labextension/prebuilt (built by the package build, never committed) lands where JupyterLab
    finds prebuilt extensions, with its install.json: ``pip install`` alone enables it."""
    names = set(zipfile.ZipFile(wheel).namelist())
    data = next(n.split("/", 1)[0] for n in names if n.endswith(".data/data/share/jupyter/labextensions/"
                                                                    "escouade-nb/package.json"))
    assert not shipped_files("labextension/prebuilt")  # the build makes it: no bundle in git
    built = {p.relative_to(ROOT).as_posix() for p in (ROOT / "labextension" / "prebuilt").rglob("*") if p.is_file()}
    assert any(f.startswith("labextension/prebuilt/static/remoteEntry.") for f in built), built
    missing = [f for f in built | {"labextension/install.json"}
               if f"{data}/data/share/jupyter/labextensions/escouade-nb/"
                  f"{f.removeprefix('labextension/prebuilt/').removeprefix('labextension/')}" not in names]
    assert missing == []
    assert not [n for n in names if "node_modules" in n or n.startswith("labextension/")]


def test_the_wheel_says_the_package_is_typed(wheel):
    """PEP 561: ``py.typed`` ships, so a type checker reads the package's own annotations."""
    assert "escouade_nb/py.typed" in zipfile.ZipFile(wheel).namelist()


def test_an_installed_wheel_finds_its_shipped_plugins_inside_the_package(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("import escouade_nb.manifest as m, escouade_nb._resources as r; "
            "print(m.SHIPPED_PLUGINS_DIR); print(r.shipped_dir('widgets')); "
            "print(sorted(h.short_id for h in m.discover().harnesses))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "HOME": str(tmp_path),
                              "ESCOUADE_NB_PLUGINS_DIR": str(tmp_path / "none")})
    assert out.returncode == 0, out.stderr
    plugins_dir, widgets_dir, harnesses = out.stdout.splitlines()
    assert plugins_dir == str(site / "escouade_nb" / "plugins")
    assert widgets_dir == str(site / "escouade_nb" / "widgets" / "static")
    assert "goose" in harnesses and "fake" in harnesses


def test_a_checkout_finds_them_at_the_top():
    from escouade_nb._resources import shipped_dir
    from escouade_nb.manifest import SHIPPED_PLUGINS_DIR

    assert SHIPPED_PLUGINS_DIR == ROOT / "plugins" and shipped_dir("widgets") == ROOT / "widgets"
