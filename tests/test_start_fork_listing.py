"""Issue 26, items 9, 12 and 13, in a real kernel: what the squad lists and opens is this
project's (an agent's ``session/list`` rows of other folders, the transcripts of other
projects) and never a silent pick between two of one name; a slow start waits as long as
the agent's process lives, says so, and Stop ends it at once; a fork carries its parent's
conversation as context, apart from the user's words, never read as commands."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from kernel_client import kernel_with_env, wait_for
from test_failure_cases import P_INIT, Script

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine")
    ws = root / "project"
    ws.mkdir()
    env = {"ESCOUADE_NB_PLUGINS_DIR": str(root / "plugins"), "ESCOUADE_NB_CONFIG_DIR": str(root / "config"),
           "ESCOUADE_NB_TRANSCRIPTS_DIR": str(root / "transcripts"),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    k = kernel_with_env(ws, env)
    k.root, k.ws, k.plugins = root, ws, root / "plugins"
    k.run("%load_ext escouade_nb\nimport asyncio, json\nfrom escouade_nb import get_squad")
    yield k
    k.run("for a in list(get_squad().agents.values()):\n    await a.close()", allow_error=True)
    k.shutdown()


# -- item 13 ----------------------------------------------------------------------------------------
def test_a_fork_of_the_demo_agent_reads_its_carried_conversation_as_context_not_commands(kernel):
    """The fake's greeting names its ``crash`` scenario; the fork carries it and must not
    play it. The carried conversation is a block of its own, marked as context, ending
    with a separator and a blank line; the user's words are a block of their own, last."""
    out = kernel.run("demo = %escouade fake --as demo\nr = await demo.send('hello there')\n"
                     "print('crash' in r.text, r.stop_reason)").text
    assert out.split()[-2:] == ["True", "end_turn"]  # the greeting names `crash`
    out = kernel.run("sent = []\nchild = %escouade fork demo --as demo-fork\nawait child.ready()\n"
                     "child.transport.observers.append(lambda d, m: d == 'out' and m.get('method') == "
                     "'session/prompt' and sent.append(m['params']['prompt']))\n"
                     "r = await child.send('What is 2+2?')\n"
                     "print(r.stop_reason, child.status, json.dumps(sent[0]))").text
    stop, status, prompt = out.strip().splitlines()[-1].split(" ", 2)
    assert (stop, status) == ("end_turn", "idle")  # not played as `crash` (exit code 3)
    blocks = json.loads(prompt)
    assert blocks[-1] == {"type": "text", "text": "What is 2+2?"}  # the user's words, alone
    carried = [b for b in blocks[:-1] if (b.get("_meta") or {}).get("escouade", {}).get("context") == "fork"]
    assert len(carried) == 1
    text = carried[0]["text"] if carried[0]["type"] == "text" else carried[0]["resource"]["text"]
    assert "hello there" in text and "crash" in text and "forked from demo" in text
    assert text.endswith("--- end of the earlier conversation; my next message follows. ---\n\n")
    # the view shows the user's words as the user's message, not the carried conversation
    out = kernel.run("print(json.dumps([i.text for i in child.conversation.items if getattr(i, 'role', '') == "
                     "'user']))").text
    assert json.loads(out.strip().splitlines()[-1]) == ["What is 2+2?"]
