"""The kernel's bearer token is in no command line and no environment of a released agent's
process tree, from ``session/new`` to the end of its first kernel-tool call.

For each of the seven agents (skipped when not installed): a thread in the kernel polls
``/proc`` every few milliseconds from before ``%escouade`` starts the agent, keeping every
distinct ``cmdline`` and ``environ`` of the kernel's descendants (and of any process that
carries this run's ``ESCOUADE_AGENT_SUITE`` marker); the agent calls ``inspect_variable``
(any card that waits is allowed); then no kept text may hold the grant's token. Measured on
main: claude-agent 0.23.1 had it in Claude Code's ``--mcp-config`` argv (its manifest now
says ``mcpInArgv``: it gets the stdio bridge and a token file); the stdio bridge had it in
its environment (it now reads ``ESCOUADE_MCP_TOKEN_FILE``). What each agent got (HTTP entry
or the bridge) is printed and added to ``agent-report.json``. codex and claude-agent run it under
``--sandbox`` too (``+sandbox``): bwrap's own command line carries no environment.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil

import pytest

from agent_configs import AGENTS, DROP, SUITE_TOKEN, sandbox_flags
from model_server import FINAL_PREFIX
from test_agents import REPORT, TURN_TIMEOUT, AgentKernel

pytestmark = pytest.mark.agents

SCANNER = r'''
import hashlib, os, threading, time
_seen, _stop = {}, threading.Event()
_root = os.getpid()
_mark = ("ESCOUADE_AGENT_SUITE=" + os.environ["ESCOUADE_AGENT_SUITE"]).encode()
def _scan():
    n = 0
    while not _stop.is_set():
        n += 1
        kids = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat", "rb") as f:
                        kids.setdefault(int(f.read().rsplit(b")", 1)[1].split()[1]), []).append(int(d))
                except (OSError, IndexError, ValueError):
                    pass
        tree, todo = set(), [_root]
        while todo:
            for c in kids.get(todo.pop(), ()):
                if c not in tree:
                    tree.add(c)
                    todo.append(c)
        if n % 20 == 0:  # a process that left the tree (reparented) but carries this run's marker
            for p in {p for ps in kids.values() for p in ps} - tree - {_root}:
                try:
                    with open(f"/proc/{p}/environ", "rb") as f:
                        if _mark in f.read().split(b"\0"):
                            tree.add(p)
                except OSError:
                    pass
        for p in tree:
            for kind in ("cmdline", "environ"):
                try:
                    with open(f"/proc/{p}/{kind}", "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                _seen.setdefault((p, kind, hashlib.sha1(data).digest()), data)
        time.sleep(0.003)
_scanner = threading.Thread(target=_scan, daemon=True, name="token scan")
_scanner.start()
def token_seen(token):
    """[(pid, 'cmdline'|'environ', the argv's first 120 chars)] of every text that held token."""
    t = token.encode()
    argv = {p: d for (p, k, _), d in _seen.items() if k == "cmdline"}
    return [(p, k, argv.get(p, b"").replace(b"\0", b" ")[:120].decode(errors="replace"))
            for (p, k, _), d in _seen.items() if t in d]
'''


@pytest.mark.parametrize("harness", [*AGENTS, "codex+sandbox", "claude-agent+sandbox"])
def test_the_token_is_in_no_argv_or_environment_of_the_agents_process_tree(harness, model_server, tmp_path):
    harness, _, variant = harness.partition("+")  # "+sandbox": under bwrap, whose own argv is scanned too
    if variant == "sandbox" and (shutil.which("bwrap") is None or shutil.which("pasta") is None):
        pytest.skip("bubblewrap or passt's pasta is not installed (apt-get install bubblewrap passt)")
    spec = AGENTS[harness]
    bin_dir = spec.bin_dir()
    if bin_dir is None:
        pytest.skip(f"{harness} is not installed (scripts/install-agents.sh {harness})")
    env = {k: v for k, v in os.environ.items() if k not in DROP}
    env.update(spec.env(tmp_path / "home", model_server.url))
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["ESCOUADE_AGENT_SUITE"] = SUITE_TOKEN  # inherited by the agents: see conftest
    work = tmp_path / "work"
    work.mkdir()
    kernel = AgentKernel(tmp_path, env)
    try:
        kernel.run("%load_ext escouade_nb\nimport asyncio, json\nimport pandas as pd\n"
                   "df = pd.DataFrame({'region': ['north', 'south', 'east'], 'revenue': [120.5, -30.0, 44.0]})\n"
                   + SCANNER)
        kernel.run(f"a = %escouade {harness} --cwd {shlex.quote(str(work))} --as {harness}-token"
                   f"{sandbox_flags(model_server.url) if variant == 'sandbox' else ''}\n"
                   f"await a.ready()", timeout=120)
        out = kernel.run(
            "t = a.send('ESC-MCP inspect_variable {\"name\": \"df\"} Describe df from the kernel.')\n"
            "async def _allow():  # a card that waits for the user (not the subject here) is allowed\n"
            "    while True:\n"
            "        card = await a.next_permission()\n"
            "        await asyncio.sleep(0.05)\n"
            "        if not card.answered:\n"
            "            card.choose(next(o for o in card.options if o['kind'] == 'allow_once')['optionId'])\n"
            "_allower = asyncio.ensure_future(_allow())\n"
            f"r = await asyncio.wait_for(t.wait(), {TURN_TIMEOUT})\n"
            "_allower.cancel()\n"
            "_stop.set()\n_scanner.join()\n"
            "_token = a.live.kernel.grant.token\n"
            "print('RESULT', json.dumps({'text': r.text, 'seen': token_seen(_token), 'texts': len(_seen),\n"
            "  'pids': len({p for p, _, _ in _seen}), 'agent_seen': any(p == a.pid for p, _, _ in _seen),\n"
            "  'http': a.agent_capabilities.get('mcpCapabilities', {}).get('http'),\n"
            "  'in_argv': getattr(a.harness.harness.acp, 'mcp_in_argv', False)}))", timeout=TURN_TIMEOUT + 30)
        r = json.loads(out.text.split("RESULT", 1)[1])
        got = "the stdio bridge" if (r["in_argv"] or not r["http"]) else "the HTTP entry"
        REPORT.setdefault(harness, {})["token_scan"] = {"got": got, "texts_scanned": r["texts"],
                                                        "processes": r["pids"], "seen": r["seen"]}
        print(f"\n{harness}: got {got}; {r['pids']} processes, {r['texts']} distinct cmdline/environ texts; "
              f"token seen in {r['seen']}")
        assert r["agent_seen"], "the scan never saw the agent's own process"
        assert f"{FINAL_PREFIX} inspect_variable returned:" in r["text"] and "df: pandas.DataFrame" in r["text"], \
            r["text"]  # the call reached the kernel's server: the scan covered it
        assert r["seen"] == [], f"{harness}: the token was in {r['seen']}"
    finally:
        try:
            kernel.run("await a.close()", allow_error=True, timeout=60)
        finally:
            kernel.shutdown()
