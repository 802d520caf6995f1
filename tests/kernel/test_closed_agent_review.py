"""A closed agent's changes to the notebook stay settleable, in a real kernel with the shipped
``fake`` agent, the page played by the test with the comm messages escouade_nb's JupyterLab
extension sends (labextension/src/index.js): its hello on the channel's target, then a click's
``{"decide": {"cell", "keep"}}``; the kernel answers each with a ``settle`` operation on that
page's comm, which the test answers as the page does. After ``await agent.close()`` the Keep
and the Reject are still settled through the agent's review (its ``pending_edits`` true), the
Reject is on record as not told to the agent (it has no next turn), and the review is held
by the kernel even once the user's variable is gone."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kernel_client import Kernel, scratch_kernel, wait_for

pytestmark = pytest.mark.kernel

TARGET = "escouade_nb.notebook"


def page_says(k: Kernel, comm_id: str, data: dict[str, Any]) -> None:
    """A message of the page on its comm (what the extension's ``send`` sends)."""
    k.kc.shell_channel.send(k.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"v": 1, **data}}))


def next_operation(k: Kernel, comm_id: str, timeout: float = 60) -> dict[str, Any]:
    """The next operation the kernel sends on the page's comm (iopub ``comm_msg``)."""
    got: list[dict[str, Any]] = []

    def found(msg: dict[str, Any]) -> bool:
        content = msg["content"]
        if msg["msg_type"] == "comm_msg" and content.get("comm_id") == comm_id and "op" in content.get("data", {}):
            got.append(content["data"])
            return True
        return False

    k.drain_iopub(timeout, until=found)
    assert got, f"no operation from the kernel within {timeout} s"
    return got[0]


def test_a_closed_agents_changes_are_kept_and_rejected_from_the_page_and_on_record(tmp_path: Path):
    (tmp_path / "ws").mkdir()
    k = scratch_kernel(tmp_path)
    try:
        k.run("%load_ext escouade_nb")
        k.run("a = %escouade fake --as writer\nawait a.ready()", timeout=90)
        # the page opens its comm and says hello, as index.js's openComm does
        comm_id = "page-comm-1"
        k.kc.shell_channel.send(k.kc.session.msg("comm_open", {
            "comm_id": comm_id, "target_name": TARGET,
            "data": {"v": 1, "client": "page-1", "hello": {"path": "nb.ipynb", "panel": "p1", "tab": "t1",
                                                           "pending": ["c-new", "c-edit"]}}}))
        wait_for(k, "any(p.client == 'page-1' for p in __import__('escouade_nb.widgets.notebook_pages', "
                    "fromlist=['_pages'])._pages.pages.values())", timeout=30)
        # two changes the page made for the agent (what the kernel's MCP server records on the page's reply)
        k.run("from escouade_nb.widgets import notebook_pages\n"
              "a.edit_review.add('c-new', 'insert', notebook_pages._pages)\n"
              "a.edit_review.add('c-edit', 'edit', notebook_pages._pages)\n"
              "await a.close()\nprint(a.status, len(a.pending_edits))")
        assert "2" in k.run("print(len(a.pending_edits))").text
        k.run("del a\nimport gc\ngc.collect()")  # the user's variable gone: the kernel still holds the review

        # Keep clicked in the page: the kernel settles it, a `settle` on the page's comm
        page_says(k, comm_id, {"client": "page-1", "decide": {"cell": "c-new", "keep": True}})
        op = next_operation(k, comm_id)
        assert (op["op"], op["cell"], op["keep"], op["to"]) == ("settle", "c-new", True, "page-1"), op
        page_says(k, comm_id, {"client": "page-1", "reply": op["req"], "ok": True, "cell_id": "c-new",
                               "outcome": "kept", "changed_by_user": False})
        # Reject clicked: settled the same, and said not told to the closed agent
        page_says(k, comm_id, {"client": "page-1", "decide": {"cell": "c-edit", "keep": False}})
        op = next_operation(k, comm_id)
        assert (op["op"], op["cell"], op["keep"]) == ("settle", "c-edit", False), op
        page_says(k, comm_id, {"client": "page-1", "reply": op["req"], "ok": True, "cell_id": "c-edit",
                               "outcome": "rejected", "changed_by_user": False})
        wait_for(k, "not notebook_pages.pending_edit('c-edit') and not notebook_pages.pending_edit('c-new')",
                 timeout=30)

        # on record: the transcript's settle lines, the Reject marked not told
        deadline = time.monotonic() + 30
        settles: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            (path,) = (tmp_path / "transcripts").glob("writer-*.jsonl")
            settles = [json.loads(line)["data"] for line in path.read_text(encoding="utf-8").splitlines()
                       if '"settle"' in line]
            settles = [s for s in settles if s.get("phase") == "settle"]
            if len(settles) == 2:
                break
            time.sleep(0.2)
        assert [(s["cell"], s["outcome"], s.get("told")) for s in settles] == [
            ("c-new", "kept", None), ("c-edit", "rejected", False)], settles
        notices = [json.loads(line)["data"]["text"] for line in path.read_text(encoding="utf-8").splitlines()
                   if '"notice"' in line and "Notebook review" in line]
        assert "Notebook review: edit of cell c-edit rejected (taken back) after the agent closed (not told to the " \
               "agent)" in notices, notices
        # nothing left held: the closed review leaves the kernel's registry once all is answered
        assert k.run("from escouade_nb.engine.review import cell_review\nprint(len(cell_review._held))"
                     ).text.strip() == "0"
    finally:
        k.shutdown()
