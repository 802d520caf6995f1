"""A Reject walks the agent's folder without following a symlink (issue 32, red team RT-1): a
sandboxed ``--review`` agent changes ``sub/f.txt``, creates ``sub/g.txt``, then, after its turn,
``mv sub sub_old && ln -s /outside sub``. The user's Reject of either is refused — "a symbolic link
in its path", the file named, the edit still pending — and the files outside are untouched (the old
bytes are not written there, the new file's namesake is not deleted). So is the Reject of a Python
source, whose compiled forms (``__pycache__/*.pyc``) outside are not removed."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import sys

import pytest
from scripted_agent import P_INIT, P_NEW, until

from escouade_nb.engine.review.file_review import FileChanged

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: no --sandbox here")
END_2 = 'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'
PROMPT_2 = 'C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1","prompt":"$ANY"}}'


def _step(step: dict) -> str:
    return "!> " + json.dumps(step)


def _write(path: str, data: bytes) -> str:
    return _step({"file": path, "b64": base64.b64encode(data).decode()})


@needs_bwrap
def test_a_reject_does_not_write_or_delete_through_a_folder_the_sandboxed_agent_swapped_for_a_symlink(
        script, tmp_path, monkeypatch):
    from escouade_nb.engine.squad import Squad

    out = tmp_path / "outside"
    out.mkdir()
    (out / "f.txt").write_bytes(b"C-outside\n")
    (out / "g.txt").write_bytes(b"G-outside\n")
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    plugins = tmp_path / "plugins"
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    s = script("\n".join([
        "[P]",
        _write("$WS/sub/f.txt", b"C-outside\n"),  # now the same bytes as the file outside
        _write("$WS/sub/g.txt", b"G-outside\n"),  # a new file, the same as another outside
        END_2,
        # after its answer was read (the turn's review taken: $CTL/go), from its own process: the folder
        # becomes a symlink to outside
        _step({"wait_file": "$CTL/go", "timeout": 60}),
        _step({"run": ["sh", "-c", f"mv sub sub_old && ln -s {out} sub"]}),
        _step({"hang": True}),
    ]), name="boxed", variables={"CTL": str(ctl)})
    s.install_sandboxed(plugins)
    (s.ws / "sub").mkdir()
    (s.ws / "sub" / "f.txt").write_bytes(b"B-user\n")

    async def go():
        squad = Squad()
        try:
            # $CTL: the test's signal, outside the agent's folder (not one of its changes), in its sandbox's reach
            agent = squad.start("boxed", cwd=s.ws, sandbox=True, review=True, add_dirs=[str(ctl)])
            assert agent.sandbox is not None
            await agent.ready()
            await agent.send("go")
            edits = {e.rel: e for e in agent.pending_edits}
            assert {"sub/f.txt", "sub/g.txt"} <= set(edits)
            (ctl / "go").touch()
            await until(lambda: (s.ws / "sub").is_symlink(), timeout=60, what="the agent's swap")
            for rel in ("sub/f.txt", "sub/g.txt"):
                with pytest.raises(FileChanged) as refused:
                    await edits[rel].reject()
                assert "a symbolic link in its path" in str(refused.value) and rel in str(refused.value)
                assert edits[rel].state == "pending"
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()

    asyncio.run(asyncio.wait_for(go(), 90))
    assert (out / "f.txt").read_bytes() == b"C-outside\n", "a Reject wrote outside the agent's folder"
    assert (out / "g.txt").read_bytes() == b"G-outside\n", "a Reject deleted a file outside the agent's folder"
    assert (s.ws / "sub_old" / "f.txt").read_bytes() == b"C-outside\n"


def test_a_reject_of_a_source_and_of_a_hunk_does_not_touch_files_behind_a_symlinked_folder(script, tmp_path):
    """The same swap planted between turns by hand (no sandbox needed): the Reject of a Python
    source's edit (which also removes its compiled forms) and of one hunk are refused; the source,
    its ``.pyc`` and the text file outside stay as they were."""
    out = tmp_path / "outside"
    (out / "__pycache__").mkdir(parents=True)
    pyc = f"m.{sys.implementation.cache_tag}.pyc"
    outside = {"m.py": b"x = 'outside'\n", f"__pycache__/{pyc}": b"outside pyc", "t.txt": b"1\n2\n3\n4\n5\n6\n7\n8\n9\n"}
    for rel, data in outside.items():
        (out / rel).write_bytes(data)
    s = script("\n".join([P_INIT, P_NEW, PROMPT_2,
                          _write("$WS/sub/m.py", b"x = 'outside'\n"),
                          _write("$WS/sub/t.txt", b"1\n2\n3\n4\n5\n6\n7\n8\n9\n"), END_2]))
    (s.ws / "sub").mkdir()
    (s.ws / "sub" / "m.py").write_bytes(b"x = 'user'\n")
    (s.ws / "sub" / "t.txt").write_bytes(b"one\n2\n3\n4\n5\n6\n7\n8\nnine\n")

    async def go():
        async with s.running(review=True) as agent:
            await agent.send("go")
            edits = {e.rel: e for e in agent.pending_edits}
            os.rename(s.ws / "sub", s.ws / "sub_old")
            os.symlink(out, s.ws / "sub")
            with pytest.raises(FileChanged, match="a symbolic link in its path"):
                await edits["sub/m.py"].reject()
            assert len(edits["sub/t.txt"].hunks) == 2
            with pytest.raises(FileChanged, match="a symbolic link in its path"):
                await edits["sub/t.txt"].hunks[0].reject()
            return edits

    edits = asyncio.run(asyncio.wait_for(go(), 60))
    assert {rel: (out / rel).read_bytes() for rel in outside} == outside
    assert edits["sub/m.py"].state == "pending"
