"""A squad's listing shows as its HTML table in a kernel, with or without ``%load_ext``:
the engine keeps the rows and the text, the views' layer registers the HTML printer."""

from __future__ import annotations

import pytest
from kernel_client import Kernel

pytestmark = pytest.mark.kernel


def _html_of_result(res) -> str:
    for msg in res.messages:
        if msg["msg_type"] == "execute_result":
            return msg["content"]["data"].get("text/html", "")
    return ""


def test_a_listing_is_a_table_without_load_ext(tmp_path, monkeypatch):
    monkeypatch.setenv("ESCOUADE_NB_CONFIG_DIR", str(tmp_path / "config"))
    kernel = Kernel(tmp_path)
    try:
        res = kernel.run("from escouade_nb import get_squad\nget_squad().listing()")
        assert res.error is None, res.error
        html = _html_of_result(res)
        assert "<table" in html and ">fake<" in html, html[:500]
        assert "Harnesses" in res.text  # its text/plain is the engine's own
    finally:
        kernel.shutdown()
