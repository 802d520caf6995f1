"""The wheel ships the top-level plugins/ and the views' served files (widgets/) inside the package, and an
installed wheel finds them there the same way a checkout (editable install) finds them at the top; it carries
the prebuilt JupyterLab extension, and installed where there is no node, JupyterLab loads it."""

import re
import shutil
import site
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
    assert plugins
    missing = [f for f in plugins if f"escouade_nb/{f}" not in names]
    assert missing == []
    # the views' served files, byte for byte: the module the build bundles from widgets/src (git-ignored, never
    # committed: its sources are) and its stylesheet; not the sources
    assert "widgets/escouade.js" not in shipped_files("widgets") and "widgets/src/index.js" in shipped_files("widgets")
    assert sorted(n for n in names if n.startswith("escouade_nb/widgets/static/")) == [
        "escouade_nb/widgets/static/escouade.css", "escouade_nb/widgets/static/escouade.js"]
    with zipfile.ZipFile(wheel) as zf:
        for served in ("escouade.js", "escouade.css"):
            assert zf.read(f"escouade_nb/widgets/static/{served}") == (ROOT / "widgets" / served).read_bytes()
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


def test_a_built_wheel_needs_no_node(wheel, tmp_path):
    """README's front page: node and npm build the JupyterLab extension and the views' module from a clone; a
    built wheel needs neither. The wheel goes (``pip --no-deps``) into a fresh venv whose PATH has no node or
    npm; its dependencies are read from this test environment's site-packages (a ``.pth`` line, after the
    venv's own: the editable install's hook there is not run, so ``escouade_nb`` is the wheel's). There
    JupyterLab lists the extension enabled and OK, from that venv's ``share/jupyter``, and the package serves
    the views' module from the wheel: one ES module (no import left to resolve), whose tag is the one the
    extension's copy was built with."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--disable-pip-version-check", "--no-index", str(wheel)], check=True, timeout=300)
    inside = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                            capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    (Path(inside) / "zz-test-environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {"PATH": str(venv / "bin"), "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8"}
    assert shutil.which("node", path=env["PATH"]) is None and shutil.which("npm", path=env["PATH"]) is None

    listed = subprocess.run([str(python), "-m", "jupyterlab.labextensions", "list"], capture_output=True,
                            text=True, timeout=120, env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = re.sub(r"\x1b\[[0-9;]*m", "", listed.stdout + listed.stderr).splitlines()  # its colours off
    ours = [i for i, line in enumerate(lines) if line.split()[:1] == ["escouade-nb"]]
    assert len(ours) == 1, lines
    assert re.search(r"\benabled\b.*\bOK\b", lines[ours[0]]), lines[ours[0]]
    folder = next(line.strip() for line in reversed(lines[:ours[0]]) if line.strip().startswith("/"))
    assert Path(folder) == venv / "share" / "jupyter" / "labextensions", lines

    code = ("import escouade_nb.widgets.front as f; js, css = f.front_end(); print(f.__file__); "
            "print(f.front_end_tag()); print(len(js)); print(js)")
    served = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, env=env,
                            cwd=tmp_path)
    assert served.returncode == 0, served.stderr
    where, tag, size, js = served.stdout.split("\n", 3)
    assert Path(where).is_relative_to(venv) and len(js) >= int(size) > 10000
    assert re.search(r"^export \{ \w+ as default \};$", js, re.M)
    assert not re.search(r"^\s*import\b|\bimport\(\s*[\"']\.", js, re.M)  # nothing left to resolve
    static = venv / "share" / "jupyter" / "labextensions" / "escouade-nb" / "static"
    assert any(f'"{tag}"' in p.read_text(encoding="utf-8") for p in static.glob("*.js"))
