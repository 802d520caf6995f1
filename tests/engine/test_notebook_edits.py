"""Cell-aware ``.ipynb`` edits: the cell-by-cell diff (core/notebook_diff), the check of a
notebook written through client fs (wire/fs), and the fake agent writing notebooks over
real pipes, its cards showing the edit cell by cell."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import anyio
import pytest
from acp import RequestError
from deadlines import run

from escouade_nb.core.conversation import Conversation
from escouade_nb.core.notebook_diff import notebook_diff
from escouade_nb.core.render_text import content_text, render_item, render_items
from escouade_nb.engine.agent import Agent
from escouade_nb.manifest import discover, locate_program
from escouade_nb.wire.fs import FileSystem, notebook_problem


def nb_text(cells: list[dict], minor: int = 5, **metadata) -> str:
    return json.dumps({"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": minor},
                      indent=1, sort_keys=True) + "\n"


def code(cid: str | None, source: str, outputs: list | None = None, count: int | None = None) -> dict:
    cell = {"cell_type": "code", "execution_count": count, "metadata": {}, "outputs": outputs or [],
            "source": source}
    if cid is not None:
        cell["id"] = cid
    return cell


def md(cid: str | None, source: str) -> dict:
    cell = {"cell_type": "markdown", "metadata": {}, "source": source}
    if cid is not None:
        cell["id"] = cid
    return cell


STREAM = {"output_type": "stream", "name": "stdout", "text": ["1\n"]}


# -- the cell-by-cell diff -----------------------------------------------------------------------

def test_added_removed_moved_changed_outputs_and_metadata() -> None:
    old = nb_text([md("a", "# Title"), code("b", ["x = 1\n", "print(x)"], [STREAM], 1), code("c", "y = 2"),
                   code("d", "del y"), md("e", "end")], kernelspec={"name": "python3"})
    new = nb_text([md("a", "# Title"), code("d", "del y"), code("b", "x = 2\nprint(x)"), code("n", "z = 3"),
                   md("e", "end")], kernelspec={"name": "other"})
    d = notebook_diff(old, new, "/w/a.ipynb")
    assert d.error is None and not d.new_file
    assert d.summary() == "1 cell changed, 1 added, 1 removed, 1 moved, 2 unchanged"
    assert d.changed_cell_ids == ("d", "b", "c", "n")
    assert d.text() == "\n".join([
        "notebook /w/a.ipynb: 1 cell changed, 1 added, 1 removed, 1 moved, 2 unchanged",
        "  cell 2 (code, id d) moved from 4",
        "  cell 3 (code, id b) changed",
        "    @@ -1,2 +1,2 @@",
        "    -x = 1",
        "    +x = 2",
        "     print(x)",
        "    outputs cleared (1 output before); execution count 1 → none",
        "  old cell 3 (code, id c) removed",
        "    -y = 2",
        "  cell 4 (code, id n) added",
        "    +z = 3",
        "  notebook metadata: kernelspec changed",
    ])
    assert d.text(kernel_notebook=True).splitlines()[1] == "  (this is the notebook you are in)"
    assert notebook_diff(old, new, "/w/a.ipynb") is d  # memoised: a redrawn card parses once


def test_outputs_added_changed_type_metadata_attachments() -> None:
    old = nb_text([code("a", "1", [STREAM], 1), code("b", "2"), md("c", "text"), md("d", "pic")])
    out2 = {"output_type": "execute_result", "data": {"text/plain": "2"}, "metadata": {}, "execution_count": 2}
    cells = [code("a", "1", [STREAM, out2], 2), code("b", "2", [out2], 2), code("c", "text"), md("d", "pic")]
    cells[3]["attachments"] = {"x.png": {"image/png": "AAAA"}}
    cells[0]["metadata"] = {"tags": ["slow"]}
    d = notebook_diff(old, nb_text(cells), "n.ipynb")
    details = {c.cell_id: c.details for c in d.cells}
    assert details["a"] == ("outputs changed (1 → 2)", "execution count 1 → 2", "metadata: tags added")
    assert details["b"] == ("1 output added", "execution count none → 2")
    assert details["c"] == ("type markdown → code",)
    assert details["d"] == ("attachments changed",)
    assert d.summary() == "4 cells changed"


def test_cells_without_ids_are_matched_by_source() -> None:
    old = nb_text([md(None, "# Title"), code(None, "import pandas as pd\ndf = pd.read_csv('x.csv')"),
                   code(None, "df.describe()")], minor=4)
    new = nb_text([md(None, "# Title"), code(None, "df.describe()"),
                   code(None, "import pandas as pd\ndf = pd.read_csv('sales.csv')")], minor=4)
    d = notebook_diff(old, new, "n.ipynb")
    assert d.summary() == "1 cell changed, 1 moved, 1 unchanged"
    changed = next(c for c in d.cells if c.kind == "changed")
    assert (changed.old_index, changed.new_index) == (1, 2)
    assert ("-", "df = pd.read_csv('x.csv')") in changed.source and ("+", "df = pd.read_csv('sales.csv')") in \
        changed.source
    assert d.changed_cell_ids == ()  # no ids to name
    # a cell with an id and one without may be the same cell (an agent dropped the id)
    d = notebook_diff(nb_text([code(None, "a = 1")], minor=4), nb_text([code("new", "a = 1")]), "n.ipynb")
    assert d.summary() == "no cell changed, 1 unchanged" and d.metadata == ("nbformat 4.4 → 4.5",)


def test_different_ids_are_different_cells_unless_all_ids_changed() -> None:
    old = nb_text([code("a", "x = 1"), code("b", "y = 2")])
    d = notebook_diff(old, nb_text([code("a", "x = 1"), code("z", "y = 2")]), "n.ipynb")
    assert [(c.kind, c.cell_id) for c in d.cells] == [("removed", "b"), ("added", "z")]  # b after a, as it was
    d = notebook_diff(old, nb_text([code("p", "x = 1"), code("q", "y = 3")]), "n.ipynb")  # every id regenerated
    assert [(c.kind, c.cell_id) for c in d.cells] == [("changed", "q")]
    assert d.metadata[0].startswith("cell ids: none in common")


def test_new_notebook_and_not_a_notebook_fall_back_to_the_text_diff() -> None:
    from escouade_nb.widgets.render import diff_html

    new = nb_text([md("t", "# T"), code("c", "")])
    d = notebook_diff(None, new, "new.ipynb")
    assert d.new_file and d.summary() == "2 cells"
    assert d.text().splitlines() == ["new notebook new.ipynb: 2 cells", "  cell 1 (markdown, id t) added",
                                     "    +# T", "  cell 2 (code, id c) added", "    (empty)"]
    # the cases are made before the loop rebinds new
    for old, new, why in (("{", new, "the old text is not valid JSON (Expecting property name enclosed in double "  # noqa: B020
                                     "quotes at line 1 column 2)"),
                          (new, "[1]", "the new text is JSON but not a notebook (a list, not an object)"),
                          (new, '{"a": 1}', 'the new text is JSON but not a notebook (no "cells" list)')):
        d = notebook_diff(old, new, "x.ipynb")
        assert d.error == why and d.cells == ()
        text = content_text({"type": "diff", "path": "x.ipynb", "oldText": old, "newText": new})
        assert text.splitlines()[:2] == ["diff x.ipynb", f"(not shown cell by cell: {why})"]
        assert any(line.startswith(("+", "-")) for line in text.splitlines()[2:])  # today's text diff
        html = diff_html({"type": "diff", "path": "x.ipynb", "oldText": old, "newText": new})
        assert "not shown cell by cell" in html and "esc-notebook-diff" not in html
    # a .json file is a text diff, whatever it holds
    assert content_text({"type": "diff", "path": "x.json", "oldText": None, "newText": new}).startswith(
        "new file x.json\n+{")


def test_text_renders_of_tool_and_permission_cards_show_cells_not_json() -> None:
    conv = Conversation()
    old = nb_text([code("a", "x = 1")])
    new = nb_text([code("a", "x = 2")])
    diff = {"type": "diff", "path": "/w/n.ipynb", "oldText": old, "newText": new}
    conv.apply({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Edit n.ipynb", "kind": "edit",
                "status": "pending", "content": [diff], "rawInput": {"path": "/w/n.ipynb", "content": new}})
    perm = conv.add_permission({"toolCallId": "t1"}, [{"optionId": "ok", "name": "Allow", "kind": "allow_once"}])
    call = conv.tool_calls["t1"]
    expected_cells = ["  notebook /w/n.ipynb: 1 cell changed", "    cell 1 (code, id a) changed",
                      "      @@ -1 +1 @@", "      -x = 1", "      +x = 2"]
    assert render_item(call).splitlines() == ["[tool] Edit n.ipynb (edit, pending)", *expected_cells]
    assert render_item(perm).splitlines() == ["[permission] Edit n.ipynb: [Allow]", *expected_cells]
    call.kernel_notebook = "/w/n.ipynb"  # set by the engine when it is the kernel's notebook
    assert "    (this is the notebook you are in)" in render_item(perm).splitlines()
    assert '"nbformat"' not in render_items(conv.items)


# -- the check of a written notebook ----------------------------------------------------------------

def test_notebook_problem_names_the_cell_and_field() -> None:
    good = [md("t", "# T"), code("c", "x = 1")]
    assert notebook_problem(nb_text(good)) is None
    assert notebook_problem("\ufeff" + nb_text(good)) is None  # a BOM is the file's, not the notebook's
    no_outputs = code("c", "x")
    del no_outputs["outputs"]
    bad_stream = code("c", "x", [{"output_type": "stream", "name": "stdout"}])
    cases = [
        ("{\n ]", "the text is not JSON (Expecting property name enclosed in double quotes at line 2 column 2)",
         ""),
        ("[]", "the text is a JSON list, not a notebook object", ""),
        (json.dumps({"cells": []}), 'no "nbformat" (the format version nbformat needs)', ""),
        (json.dumps({"cells": [], "nbformat": 4, "nbformat_minor": "5"}),
         'nbformat_minor: must be an integer, not "5"', "nbformat_minor"),
        (json.dumps({"cells": [], "metadata": {}, "nbformat": 9, "nbformat_minor": 0}),
         "nbformat: nbformat 9 is not a notebook format version nbformat knows (1, 2, 3, 4)", "nbformat"),
        (nb_text([good[0], no_outputs]), "cell 2 (id c): 'outputs' is a required property", "cells[1]"),
        (nb_text([good[0], bad_stream]), "cell 2 (id c), outputs[0]: 'text' is a required property",
         "cells[1].outputs[0]"),
        (nb_text([good[0], {**good[1], "cell_type": "cod"}]),
         'cell 2 (id c), cell_type: "cod" is not a cell type (one of code, markdown, raw)', "cells[1].cell_type"),
        (nb_text([good[0], code(None, "x")]), 'cell 2: no "id" (nbformat 4.5 requires one per cell)', "cells[1]"),
        (nb_text([good[0], code("t", "x")]), "cell 2 (id t), id: the same as cell 1's (ids must be unique)",
         "cells[1].id"),
        (nb_text(good, kernelspec={"name": "python3"}), "metadata.kernelspec: 'display_name' is a required property",
         "metadata.kernelspec"),
    ]
    for text, message, field_path in cases:
        problem = notebook_problem(text)
        assert problem is not None, text
        assert (problem.message, problem.field_path) == (message, field_path)
    assert notebook_problem(nb_text([code(None, "x")], minor=4)) is None  # ids came with 4.5


def test_fs_refuses_an_invalid_notebook_and_leaves_the_file(tmp_path: Path) -> None:
    target = tmp_path / "nb.ipynb"
    original = nb_text([code("c", "x = 1")]).encode()
    target.write_bytes(original)
    writes = []
    fs = FileSystem(tmp_path, on_write=lambda *w: writes.append(w))
    bad = code("c", "x = 2")
    del bad["outputs"]
    with pytest.raises(RequestError) as err:
        anyio.run(fs.write_text_file, "nb.ipynb", nb_text([bad]))
    assert err.value.code == -32602
    assert str(err.value) == ("Refused: nb.ipynb would not be a valid notebook, so it was not written: "
                              "cell 1 (id c): 'outputs' is a required property")
    assert err.value.data == {"path": "nb.ipynb", "reason": "invalid_notebook", "field": "cells[0]", "cell": 0,
                              "cellId": "c"}
    with pytest.raises(RequestError) as err:
        anyio.run(fs.write_text_file, str(tmp_path / "new" / "fresh.IPYNB"), "not json")
    assert err.value.data["line"] == 1 and err.value.data["reason"] == "invalid_notebook"
    assert target.read_bytes() == original and not (tmp_path / "new").exists() and writes == []
    # a symlink named .txt to a notebook is checked by its real path
    (tmp_path / "alias.txt").symlink_to(target)
    with pytest.raises(RequestError):
        anyio.run(fs.write_text_file, "alias.txt", "{}")
    assert target.read_bytes() == original
    # a valid notebook is written; other files are never checked
    anyio.run(fs.write_text_file, "nb.ipynb", nb_text([code("c", "x = 2")]))
    anyio.run(fs.write_text_file, "data.json", "not json either")
    assert json.loads(target.read_text())["cells"][0]["source"] == "x = 2"
    assert [w[0].name for w in writes] == ["nb.ipynb", "data.json"]


def test_the_check_runs_in_a_thread_and_the_loop_keeps_going(tmp_path: Path) -> None:
    """A 2,000-cell notebook: the event loop keeps ticking while it is checked."""
    cells = [code(f"c{i}", f"x{i} = {i}\n" * 5, [{"output_type": "stream", "name": "stdout", "text": "ok\n" * 20}], i)
             for i in range(2000)]
    text = nb_text(cells)
    fs = FileSystem(tmp_path)

    async def main():
        ticks = 0
        done = asyncio.Event()

        async def beat():
            nonlocal ticks
            while not done.is_set():
                await asyncio.sleep(0.001)
                ticks += 1
        task = asyncio.create_task(beat())
        await fs.write_text_file("big.ipynb", text)
        done.set()
        await task
        return ticks
    assert asyncio.run(main()) > 5
    assert (tmp_path / "big.ipynb").read_text() == text


# -- end to end: the fake agent writes notebooks through our client fs ---------------------------------

def fake(tmp_path: Path) -> Agent:
    ref = discover().find("fake")
    return Agent(ref, program=locate_program(ref.harness), cwd=tmp_path, record=False)


def test_e2e_fake_writes_a_notebook_shown_cell_by_cell(tmp_path: Path, monkeypatch) -> None:
    from escouade_nb.widgets import AgentView

    target = tmp_path / "analysis.ipynb"
    target.write_text(nb_text([md("title", "# Sales"), code("load", "df = load()", [STREAM], 3)],
                              kernelspec={"display_name": "Python 3", "language": "python", "name": "python3"}))
    other = tmp_path / "other.ipynb"
    monkeypatch.setenv("JPY_SESSION_NAME", str(target))  # as jupyter_server tells a kernel its notebook

    async def go():
        agent = fake(tmp_path)
        try:
            await agent.ready()
            view = AgentView(agent)
            turn = agent.send("write notebook analysis.ipynb")
            card = await agent.next_permission(timeout=60)
            text = repr(card)
            assert text.splitlines() == [
                "[permission] Edit analysis.ipynb: [Allow once] [Always allow] [Reject]",
                f"  notebook {target}: 1 cell changed, 1 added, 1 unchanged",
                "    (this is the notebook you are in)",
                "    cell 2 (code, id load) changed",
                "      @@ -1 +1,2 @@",
                "       df = load()",
                "      +# edited by the fake agent",
                "      outputs cleared (1 output before); execution count 3 → none",
                "    cell 3 (markdown, id fake-added-1) added",
                "      +Added by the fake agent.",
            ]
            html = view.card_html(card)  # the permission, inside its tool call's card
            assert "esc-notebook-diff" in html and "esc-pending" in html and "this is the notebook you are in" in html
            assert "cell 2 (code, id load) changed" in html and "&quot;nbformat&quot;" not in html
            assert card.tool_call.kernel_notebook == str(target)
            card.choose("allow_once")
            result = await turn
            assert result.text == ("Wrote notebook analysis.ipynb: changed cell load and cleared its outputs, "
                                   "added cell fake-added-1.")
            assert notebook_problem(target.read_text()) is None
            tool_html = view.card_html(card.tool_call)
            assert tool_html.count('class="esc-cell esc-cell-') == 2
            assert "{" not in tool_html.split("esc-notebook-diff")[1]  # no JSON shown
            view.close()
            # another notebook of the folder: cell by cell, but not "the notebook you are in"
            turn = agent.send("write notebook other.ipynb")
            card = await agent.next_permission(timeout=60)
            assert f"new notebook {other}: 2 cells" in repr(card) and "you are in" not in repr(card)
            assert card.tool_call.kernel_notebook is None
            card.choose("reject_once")
            assert (await turn).text == "I left other.ipynb alone."
            assert not other.exists()
        finally:
            await agent.close()
    run(go())


def test_e2e_an_invalid_notebook_is_refused_and_the_agent_is_told(tmp_path: Path) -> None:
    target = tmp_path / "nb.ipynb"
    original = nb_text([code("keep", "print('kept')")]).encode()
    target.write_bytes(original)

    async def go():
        agent = fake(tmp_path)
        try:
            await agent.ready()
            sent = []
            agent.transport.observers.append(lambda d, m: d == "out" and "error" in m and sent.append(m["error"]))
            result = await agent.send("write bad notebook nb.ipynb")
            why = (f"Refused: {target} would not be a valid notebook, so it was not written: "
                   f"cell 1 (id fake-bad): 'outputs' is a required property")
            assert result.text == f"The client refused to write nb.ipynb: {why}"
            assert sent == [{"code": -32602, "message": why,
                             "data": {"path": str(target), "reason": "invalid_notebook", "field": "cells[0]",
                                      "cell": 0, "cellId": "fake-bad"}}]
            shown = render_items(agent.conversation.items)
            assert "[tool] Edit nb.ipynb (edit, failed)" in shown and why in shown
        finally:
            await agent.close()
    run(go())
    assert target.read_bytes() == original


@pytest.mark.kernel
def test_a_write_to_the_kernels_own_notebook_says_so_in_a_kernel(tmp_path: Path, monkeypatch) -> None:
    """jupyter_server names the notebook in ``JPY_SESSION_NAME``; ipykernel copies it into
    ``__session__``: the card of a write to that notebook says it is the one you are in."""
    from kernel_client import Kernel

    target = tmp_path / "here.ipynb"
    target.write_text(nb_text([code("first", "x = 1")]))
    monkeypatch.setenv("JPY_SESSION_NAME", str(target))
    k = Kernel(tmp_path)
    try:
        assert k.run("print(__session__)").text.strip() == str(target)
        out = k.run("%load_ext escouade_nb\na = %escouade fake --as writer\nawait a.ready()\n"
                    "turn = a.send('write notebook here.ipynb')\ncard = await a.next_permission(timeout=60)\n"
                    "print(repr(card))\ncard.choose('allow_once')\nprint((await turn).text)\nawait a.close()").text
        assert "    (this is the notebook you are in)\n    cell 1 (code, id first) changed" in out
        assert "Wrote notebook here.ipynb: changed cell first" in out
    finally:
        k.shutdown()
    assert notebook_problem(target.read_text()) is None


def test_rule_plugins_get_the_notebook_and_the_changed_cells_ids():
    """A write of an .ipynb reaches a rule plugin with its path, the ids of the cells it
    changes and whether it is the kernel's own notebook (request.notebooks)."""
    import json as _json

    from escouade_nb.core.conversation import ToolCall
    from escouade_nb.permissions.protocol import DecideParams, RequestInfo
    from escouade_nb.permissions.request import normalise, tool_call_fields

    def nb(cells):
        return _json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells})

    old = nb([{"cell_type": "code", "id": "a1", "source": "x = 1", "metadata": {}, "outputs": [],
               "execution_count": None},
              {"cell_type": "markdown", "id": "b2", "source": "# t", "metadata": {}}])
    new = nb([{"cell_type": "code", "id": "a1", "source": "x = 2", "metadata": {}, "outputs": [],
               "execution_count": None},
              {"cell_type": "markdown", "id": "b2", "source": "# t", "metadata": {}},
              {"cell_type": "markdown", "id": "c3", "source": "new", "metadata": {}}])
    call = ToolCall("t", tool_call_id="c", title="Write analysis.ipynb", kind="edit",
                    content=[{"type": "diff", "path": "/w/analysis.ipynb", "oldText": old, "newText": new}])
    call.kernel_notebook = "/w/analysis.ipynb"
    norm = normalise(call, {})
    info = RequestInfo(id="r", kind=norm.kind, tool=norm.tool, input=norm.input, **tool_call_fields(call))
    wire = _json.loads(_json.dumps(DecideParams(request=info).wire()))
    (edit,) = wire["request"]["notebooks"]
    assert edit == {"path": "/w/analysis.ipynb", "changedCellIds": ["a1", "c3"], "kernelNotebook": True}
    assert DecideParams.model_validate(wire).notebooks[0].changed_cell_ids == ["a1", "c3"]  # as plugin_sdk reads it
