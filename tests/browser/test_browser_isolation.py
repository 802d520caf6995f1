"""The suite's own promise (conftest.py): one JupyterLab and one chromium for the whole run,
and a test that leaves a kernel or a tab behind does not reach the next test: the next one
starts on the same server and browser with no kernel, no session, none of the processes of
the first, in a page (and context) of its own — and its own notebook runs."""

from __future__ import annotations

from typing import Any

import pytest

DOCUMENTS = "() => Array.from(window.jupyterapp.shell.widgets('main')).filter(w => w.context).map(w => w.title.label)"
LEFT: dict[str, Any] = {}  # what the first test leaves behind, for the second to look for


def test_a_test_leaves_a_kernel_and_tabs_behind(nb, lab, browser):
    nb.open(["left = 'behind'"])  # its notebook's kernel, its tab
    nb.run_cell(0)
    lab.api("POST", "/api/kernels", {"name": "python3"})  # and a kernel of no session
    extra = nb.lab_page.context.new_page()  # and a second tab
    extra.goto(f"{lab.url}/api/status")
    assert len(lab.api("GET", "/api/kernels")) == 2
    LEFT.update(kernels={k["id"] for k in lab.api("GET", "/api/kernels")},
                pids=set(lab.processes()) - {lab.proc.pid}, context=nb.lab_page.context,
                server=lab.proc.pid, browser=browser)
    assert LEFT["pids"], "the kernels run as processes of the server"


def test_the_next_test_finds_none_of_it(nb, lab, browser):
    if not LEFT:
        pytest.skip("runs after test_a_test_leaves_a_kernel_and_tabs_behind")
    assert lab.proc.pid == LEFT["server"] and browser is LEFT["browser"], "the same server and chromium"
    assert lab.api("GET", "/api/kernels") == [] and lab.api("GET", "/api/sessions") == []
    assert not set(lab.processes()) & LEFT["pids"], "the kernels' processes are gone"
    assert LEFT["context"].pages == [], "the first test's tabs are closed"
    assert nb.lab_page.context is not LEFT["context"] and nb.lab_page.context.pages == [nb.page]
    assert nb.page.evaluate(DOCUMENTS) == [], "no document open in this test's page (a launcher may be)"
    nb.open(["mine = 2 * 21\nprint(mine)"])
    nb.run_cell(0)
    assert nb.output(0).inner_text().strip() == "42"
