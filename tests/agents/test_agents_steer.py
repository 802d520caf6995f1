"""Goose's steering through the product in a real kernel: ``goose_like_agent.py`` (goose's
ACP wire as goose's public source has it; goose itself is on no registry used here) names
its run, ``agent.steer`` sends ``_goose/unstable/session/steer`` with that run id while
the turn waits on a card, the text reaches the next model call of the same turn, and the
conversation shows it once, steered (goose's echo folded in)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from agent_configs import DROP, SUITE_TOKEN
from kernel_client import Kernel, wait_for

pytestmark = pytest.mark.agents

HERE = Path(__file__).resolve().parent


class _Kernel(Kernel):
    """A kernel whose environment (inherited by the agents it starts) is ``env``."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:  # same as Kernel, another environment
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=str(cwd), env={**env, "PYTHONUNBUFFERED": "1"})
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.displays = {}  # what a front-end holds of each display (Kernel's, read by its run())


def test_goose_steer_goes_into_the_running_turn(model_server, tmp_path):
    bin_dir, home, work = tmp_path / "bin", tmp_path / "home", tmp_path / "work"
    for folder in (bin_dir, home, work):
        folder.mkdir()
    launcher = bin_dir / "goose"  # `goose` exists only on this kernel's PATH
    launcher.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                        f"{shlex.quote(str(HERE / 'goose_like_agent.py'))} \"$@\"\n")
    launcher.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in DROP}
    env.update({"HOME": str(home), "OPENAI_HOST": model_server.url, "GOOSE_MODE": "approve",
                "GOOSE_MODEL": "fake-model", "GOOSE_PATH_ROOT": str(home / "goose"),
                "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "ESCOUADE_AGENT_SUITE": SUITE_TOKEN,
                "ESCOUADE_NB_TRANSCRIPTS_DIR": str(tmp_path / "transcripts"),
                "ESCOUADE_NB_JOURNAL_DIR": str(tmp_path / "journal"),
                "ESCOUADE_NB_CONFIG_DIR": str(tmp_path / "config"), "ESCOUADE_NB_PLUGINS_DIR": str(tmp_path / "p")})
    kernel = _Kernel(work, env)
    try:
        kernel.run("%load_ext escouade_nb\nimport json\nfrom escouade_nb.core.render_text import render_items\n"
                   f"g = %escouade goose --cwd {shlex.quote(str(work))} --as gsteer\nawait g.ready()\n"
                   "sent = []\ng.transport.observers.append(lambda d, m: d == 'out' and sent.append(m))", timeout=60)
        kernel.run("turn = g.send('ESC-SHELL please')\ncard = await g.next_permission(timeout=30)", timeout=60)
        assert kernel.run("print(g.steering)").text.strip() == "_goose/unstable/session/steer"
        assert kernel.run("print(g.steer('also say PINEAPPLE') is turn)").text.strip() == "True"
        wait_for(kernel, "any(getattr(i, 'steered', False) for i in g.conversation.items)")
        kernel.run("card.choose('allow_once')\nawait turn", timeout=60)
        out = kernel.run("print(turn.stop_reason)\nprint(g.steering)\n"
                         "print(json.dumps([m['params'] for m in sent if m.get('method', '').endswith('/steer')]))\n"
                         "print(any(m.get('method') == 'session/cancel' for m in sent))\n"
                         "print(render_items(g.conversation.items))").text
        lines = out.splitlines()
        assert lines[0] == "end_turn" and lines[1] == "None", out  # goose said its run ended
        steer = json.loads(lines[2])[0]
        assert lines[3] == "False", out  # nothing was stopped
        assert steer["expectedRunId"].startswith("run_") and steer["prompt"] == [
            {"type": "text", "text": "also say PINEAPPLE"}] and steer["sessionId"]
        assert out.count("you (steered): also say PINEAPPLE") == 1 and "you: also say" not in out, out
        assert out.index("you (steered)") < out.rindex("ESC-DONE"), out  # the turn went on after it
        kernel.run("await g.close()", timeout=30)
    finally:
        kernel.shutdown()
