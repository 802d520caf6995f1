"""A sandboxed agent reads the kernel's own world through its client file system (issue 32, red
team RT-14): ``fs/read_text_file`` of ``/proc/self/environ`` is the kernel's environment (its
secrets), ``/proc/PID/cmdline`` every process's command line. The sandbox has its own ``/proc``
and ``/dev``; its client file system reads none of the kernel's ``/proc``, ``/dev``, ``/sys``
(``hidden_by_sandbox``)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil

import pytest

from escouade_nb.engine.squad import Squad
from scripted_agent import END, P_INIT, P_NEW, P_PROMPT, responses_to

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("pasta") is None,
                                 reason="bubblewrap or passt's pasta is not installed (apt-get install bubblewrap passt)")

SECRET = "kernel-secret-4f1c9e"


@needs_bwrap
def test_a_sandboxed_agents_client_fs_reads_nothing_of_the_kernels_proc_dev_or_sys(script, tmp_path, monkeypatch):
    monkeypatch.setenv("ESCOUADE_TEST_SECRET", SECRET)
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    plugins = tmp_path / "plugins"
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
    paths = ["/proc/self/environ", "/proc/self/cmdline", f"/proc/{os.getpid()}/environ", "/proc/1/cmdline",
             "/dev/null", "/sys/kernel/uevent_seqnum"]
    lines = [P_INIT, P_NEW, P_PROMPT]
    for i, path in enumerate(paths):
        lines += ["A> " + json.dumps({"jsonrpc": "2.0", "id": 100 + i, "method": "fs/read_text_file",
                                      "params": {"sessionId": "s1", "path": path}}),
                  'C> {"jsonrpc":"2.0","id":%d}' % (100 + i)]
    lines += ["A> " + json.dumps({"jsonrpc": "2.0", "id": 120, "method": "fs/read_text_file",
                                  "params": {"sessionId": "s1", "path": "$WS/mine.txt"}}),
              'C> {"jsonrpc":"2.0","id":120}', END]
    s = script("\n".join(lines), name="boxed")
    (s.ws / "mine.txt").write_text("mine\n")
    s.install_sandboxed(plugins)

    async def go():
        squad = Squad()
        try:
            agent = squad.start("boxed", cwd=s.ws, sandbox=True)
            await agent.ready()
            await agent.send("go")
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()

    asyncio.run(asyncio.wait_for(go(), 60))
    received = s.received()
    assert SECRET not in json.dumps(received)
    for i, path in enumerate(paths):
        (answer,) = responses_to(received, 100 + i)
        assert answer.get("error", {}).get("data", {}).get("reason") == "hidden_by_sandbox", (path, answer)
    (answer,) = responses_to(received, 120)
    assert answer.get("result", {}).get("content") == "mine\n", answer
