"""The views' light module (the front-end once per page where escouade_nb's extension is): which
module a view carries, the whole module sent when a page asks, the tag the extension's build
computes the same way."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from escouade_nb._resources import shipped_dir
from escouade_nb.widgets import front
from escouade_nb.widgets.squad_view import SquadView

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pages_say():
    said = {"hello": False}
    front.use_extension_pages(lambda: said["hello"])
    yield said
    front.use_extension_pages(None)


def test_a_view_carries_the_light_module_once_a_page_said_hello(pages_say):
    before = SquadView(SimpleNamespace(agents={}))
    pages_say["hello"] = True
    after = SquadView(SimpleNamespace(agents={}))
    try:
        js, _css = front.front_end()
        assert (before._esm, before._css) == (front.packed_module(), "")  # before the hello: the whole module
        assert after._esm == front.light_module() and after._css == ""
        assert len(after._esm) < 2000 < len(js)
        assert front.front_end_tag() in after._esm and front.VIEWS_KEY in after._esm
    finally:
        before.close()
        after.close()


def test_without_pages_the_whole_module():
    front.use_extension_pages(None)
    view = SquadView(SimpleNamespace(agents={}))
    try:
        assert (view._esm, view._css) == (front.packed_module(), "")
    finally:
        view.close()


def test_without_the_extension_a_view_carries_the_module_packed_in_64_kb():
    """Issue 37: where no page has the extension (VS Code, Colab, nbclient), a view's module is the loader
    with ``escouade.js``, a NUL and ``escouade.css`` deflated inside, base64 (≤ 64 KB of JSON in its
    ``comm_open``, against ~102 KB for the two files as they are); unpacked, the build's files byte for byte."""
    import base64
    import json
    import zlib

    js, css = front.front_end()
    module = front.FrontView._esm
    assert front.FrontView._css == ""
    assert len(json.dumps(module)) <= 64_000 < len(json.dumps(js)) + len(json.dumps(css))
    packed = re.findall(r'^const PACKED = "([A-Za-z0-9+/=]+)";$', module, re.M)
    assert len(packed) == 1
    assert zlib.decompress(base64.b64decode(packed[0])) == js.encode("utf-8") + b"\0" + css.encode("utf-8")
    assert front.front_end_tag() in module and front.VIEWS_KEY in module  # the page's copy first, when it has one
    assert re.findall(r"^export default \{$", module, re.M) == ["export default {"]


def test_a_page_without_the_module_gets_it_from_the_kernel(pages_say):
    pages_say["hello"] = True
    view = SquadView(SimpleNamespace(agents={}))
    sent: list = []
    view.send = lambda content, buffers=None: sent.append(content)
    try:
        view._on_message(view, {"k": "esm?"})
        js, css = front.front_end()
        assert sent == [{"k": "esm", "tag": front.front_end_tag(), "js": js, "css": css}]
    finally:
        view.close()


def test_a_failing_check_means_the_whole_module():
    def broken() -> bool:
        raise RuntimeError("no pages")

    front.use_extension_pages(broken)
    try:
        assert front.extension_present() is False
    finally:
        front.use_extension_pages(None)


def test_the_tag_is_the_one_the_extension_build_computes():
    """labextension/webpack.config.js: SHA-256 over escouade.js's bytes, a NUL, escouade.css's bytes."""
    folder = shipped_dir("widgets")
    digest = hashlib.sha256((folder / "escouade.js").read_bytes() + b"\0" + (folder / "escouade.css").read_bytes())
    assert front.front_end_tag() == digest.hexdigest()[:16]


def test_the_served_module_is_one_es_module_built_from_the_current_sources():
    """widgets/escouade.js is bundled from widgets/src (labextension/build.mjs): one ES module with one default
    export and no import left to resolve (anywidget loads it from a blob URL), not older than any of its
    sources (the build's own rule, labextension/stale.py: a test run after an edit of widgets/src without an
    install would test the old views; scripts/test.sh installs first, which rebuilds it)."""
    from hatch_jupyter_builder.utils import is_stale

    folder = shipped_dir("widgets")
    js, _css = front.front_end()
    assert re.findall(r"^export .*$", js, re.M) == ["export { src as default };"]
    assert not re.search(r"^\s*import\b|\bimport\(\s*[\"']\.", js, re.M)
    if folder == ROOT / "widgets":  # a checkout: its sources are here
        assert not is_stale(folder / "escouade.js", folder / "src"), "widgets/src changed: pip install -e . rebuilds"
        assert not is_stale(folder / "escouade.js", folder / "escouade.css")


class _Comm:
    def __init__(self, opened: list) -> None:
        self.opened = opened

    def close(self) -> None:
        pass


def test_the_pages_are_pinged_once_by_the_views_until_one_of_ours_said_hello(monkeypatch):
    from escouade_nb.widgets import notebook_pages

    opened: list = []
    manager = SimpleNamespace(register_target=lambda name, fn: None)
    pages = notebook_pages.NotebookPages(open_comm=lambda data: opened.append(data) or _Comm(opened),
                                         comm_manager=manager)
    pages.start()
    assert opened == []  # started: nothing sent yet
    assert pages.views_extension() is False and len(opened) == 1  # the first view pings
    assert pages.views_extension() is False and len(opened) == 1  # no page of ours answered: never again
    pages.pages["c"] = notebook_pages.Page(client="c", path="nb.ipynb", panel="p", comm=None, order=0)
    assert pages.views_extension() is True and len(opened) == 1
    pages.pages.clear()  # that page left (a reload): pinged again, at most every VIEWS_PING_EVERY s
    monkeypatch.setattr(notebook_pages, "VIEWS_PING_EVERY", 0.0)
    assert pages.views_extension() is False and len(opened) == 2
