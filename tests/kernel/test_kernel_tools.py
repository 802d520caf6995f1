"""The kernel as the agent's MCP server, through the product in a real kernel: the shipped
``fake`` agent lists and inspects a live variable, asks to run code (one card, clicked
Allow, the result reaches the agent), is denied by a rule plugin (and told), and the
bearer token is in no argv, transcript or log; a wrong or missing token gets 401. An
agent whose manifest says ``mcpInArgv`` (the fake agent copying its ``mcpServers`` onto a
child's command line, as claude-agent does) gets the stdio bridge with its token in a 0600
file: the token is in no argv and no environment of its process tree, and the file is gone
when the agent stops."""

from __future__ import annotations

import json
import os
import stat
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kernel_client import kernel_with_env, act, buttons_of, wait_for

pytestmark = pytest.mark.kernel

PLUGIN = textwrap.dedent('''
    from escouade_nb.plugin_sdk import allow, ask, decide, deny, run

    @decide
    def rules(req):
        if req.tool == "mcp__escouade__run_code":
            if "forbidden" in req.input.get("code", ""):
                return deny("no such code from agents in this notebook")
            return ask()
        return ask()

    run()
''')


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernel-tools")
    ws = root / "ws"
    ws.mkdir()
    plugins = root / "plugins" / "kernel-rules"
    plugins.mkdir(parents=True)
    (plugins / "plugin.py").write_text(PLUGIN)
    (plugins / "escouade-plugin.json").write_text(json.dumps({
        "id": "test.kernel-rules", "name": "Kernel rules", "version": "1.0.0",
        "permissions": {"decide": True}, "program": {"python": "plugin.py"}}))
    # the fake agent as an agent that puts its mcpServers on a command line (claude-agent's SDK does)
    argv_agent = root / "plugins" / "fake-argv"
    argv_agent.mkdir()
    (argv_agent / "escouade-plugin.json").write_text(json.dumps({
        "id": "test.fake-argv", "name": "Fake, mcpServers in argv", "version": "1.0.0",
        "contributes": {"harnesses": [{
            "id": "fake-argv", "name": "Fake argv", "locate": {"names": ["escouade-fake-agent"]},
            "acp": {"args": [], "env": {"ESCOUADE_FAKE_MCP_IN_ARGV": "1"}, "mcpInArgv": True}}]}}))
    transcripts = root / "transcripts"
    env = {"ESCOUADE_NB_PLUGINS_DIR": str(root / "plugins"), "ESCOUADE_NB_CONFIG_DIR": str(root / "config"),
           "ESCOUADE_NB_TRANSCRIPTS_DIR": str(transcripts)}
    k = kernel_with_env(ws, env)
    k.run("%load_ext escouade_nb\nimport json, time\nimport pandas as pd\n"
          "df = pd.DataFrame({'region': ['north', 'south', 'east'], 'revenue': [120.5, -30.0, 44.0]})\n"
          "from escouade_nb.widgets import views_of\n"
          "async def next_open(agent):  # the next card still waiting (reads are settled by escouade_nb)\n"
          "    while (card := await agent.next_permission(timeout=60)).answered:\n"
          "        pass\n"
          "    return card")
    out = k.run(f"%escouade plugins on kernel-rules --project {ws}").text
    assert "on" in out
    k.run("a = %escouade fake --as kt\nawait a.ready()")
    wait_for(k, "a.kernel_tools_state[0] == 'connected'", timeout=30)
    yield k, ws, transcripts
    k.run("await a.close()", allow_error=True)
    k.shutdown()


def test_the_agent_lists_and_inspects_a_live_variable(setup):
    kernel, _, _ = setup
    out = kernel.run("r = await a.send('variables')\nprint(r.text)").text
    assert "df" in out and "DataFrame" in out
    out = kernel.run("r = await a.send('inspect df')\nprint(r.text)\n"
                     "print([i.answered_by for i in r.items if type(i).__name__ == 'Permission'])").text
    assert "(3, 2)" in out and "revenue" in out and "float64" in out and "north" in out
    # the agent's own request for a read tool was answered by escouade_nb, no card for you
    assert "escouade_nb (a read of the kernel's own server)" in out
    assert kernel.run("print(a.pending_cards)").text.strip() == "[]"


def test_run_code_shows_one_card_clicked_allow_and_the_output_reaches_the_agent(setup):
    kernel, _, _ = setup
    kernel.run("t = a.send('run code total = df.revenue.sum()\\nprint(\"total:\", total)')\n"
               "card = await next_open(a)")
    out = kernel.run("print(card.request.title, '|', card.request.raw_input, '|', "
                     "[o['name'] for o in card.options])\nprint(len(a.pending_cards))").text
    assert "Run code in the kernel | {'code': 'total = df.revenue.sum()\\nprint(\"total:\", total)'}" in out
    assert "['Run', 'Run without asking again in this session', \"Don't run\"]" in out
    assert out.strip().endswith("1")  # exactly one card: the agent's own request was folded into it
    wait_for(kernel, "views_of(a)[0].feed.find(views_of(a)[0].feed.key(card.permission)) is not None")
    model_id, html = json.loads(kernel.run("view = views_of(a)[0]\n"
                                           "print(json.dumps([view.model_id, view.card_html(card)]))").text)
    buttons = {b["label"]: b for b in buttons_of(html)}
    assert list(buttons) == ["Run", "Run without asking again in this session", "Don't run"]
    act(kernel, model_id, {"act": "choose", "key": buttons["Run"]["key"], "value": buttons["Run"]["value"]})
    wait_for(kernel, "t.done", timeout=30)
    out = kernel.run("r = await t\nprint(r.stop_reason, '|', r.text)\nprint(card.label)\nprint(total)\n"
                     "print(repr(views_of(a)[0]))").text
    assert "end_turn | mcp__escouade__run_code returned: stdout:\ntotal: 134.5" in out
    assert "Allowed by you: Run" in out
    assert out.splitlines()[3] == "134.5"  # it ran in the user's namespace
    assert "total: 134.5" in out.split("Run code in the kernel", 1)[1]  # the output on the card's tool call


def test_run_code_denied_by_a_rule_plugin_and_the_agent_told(setup):
    kernel, _, _ = setup
    out = kernel.run("r = await a.send('run code forbidden = 1')\nprint(r.text)\n"
                     "print([(i.answered_by, i.message) for i in r.items if type(i).__name__ == 'Permission'])\n"
                     "print('forbidden' in globals())").text
    assert "no such code from agents in this notebook" in out.splitlines()[0]
    # the agent's own request was the card (folded by identity): refused there, it never called the server
    assert "did not call mcp__escouade__run_code: permission refused" in out.splitlines()[0]
    assert "('Kernel rules via Escouade', 'no such code from agents in this notebook')" in out
    assert out.strip().endswith("False")  # never ran


def test_the_token_is_in_no_argv_transcript_or_log_and_a_wrong_token_gets_401(setup):
    kernel, _, transcripts = setup
    info = json.loads(kernel.run(
        "g = a.live.kernel.grant\nprint(json.dumps({'token': g.token, 'url': a.live.kernel._server.url, "
        "'pid': a.pid, 'stderr': a.stderr.tail(), 'transcript': str(a.transcript.path)}))\n"
        "a.transcript.flush()").text)
    token = info["token"]
    assert len(token) >= 32
    cmdlines = [Path(f"/proc/{info['pid']}/cmdline").read_bytes()]
    for child in Path(f"/proc/{info['pid']}/task").iterdir():
        children = Path(f"/proc/{info['pid']}/task/{child.name}/children").read_text().split()
        cmdlines += [Path(f"/proc/{c}/cmdline").read_bytes() for c in children if Path(f"/proc/{c}").exists()]
    assert all(token.encode() not in c for c in cmdlines)
    wait_for(kernel, "a.transcript._lines == []", timeout=10)
    written = Path(info["transcript"]).read_text()
    assert '"mcpServers"' in written and "«redacted»" in written and token not in written
    for path in transcripts.rglob("*"):
        if path.is_file():
            assert token not in path.read_text(errors="replace"), path
    assert token not in info["stderr"]
    assert token not in kernel.run("print('ok')").text
    for header in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": token}):
        request = urllib.request.Request(info["url"], data=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
                                         headers={"Content-Type": "application/json",
                                                  "Accept": "application/json, text/event-stream", **header})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401


def _process_tree(root: int) -> list[int]:
    """``root`` and every live descendant of it (from ``/proc/*/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def test_an_agent_that_puts_its_mcp_servers_in_argv_gets_the_token_in_a_0600_file_only(setup):
    kernel, _, transcripts = setup
    kernel.run("b = %escouade fake-argv --as kt-argv\nawait b.ready()")
    wait_for(kernel, "b.kernel_tools_state[0] == 'connected'", timeout=30)
    out = kernel.run("r = await b.send('inspect df')\nprint(r.text)").text
    assert "(3, 2)" in out and "revenue" in out, out  # the bridge read its token from the file
    info = json.loads(kernel.run(
        "g = b.live.kernel.grant\nprint(json.dumps({'token': g.token, 'pid': b.pid, 'transcript': str(b.transcript.path),"
        " 'file': str(getattr(b.live.kernel._server, 'token_files', None) and"
        " b.live.kernel._server.token_files.path_of(g.token))}))\nb.transcript.flush()").text)
    token, token_file = info["token"], Path(info["file"])
    seen = {}
    for pid in _process_tree(info["pid"]):
        try:
            seen[pid] = (Path(f"/proc/{pid}/cmdline").read_bytes(), Path(f"/proc/{pid}/environ").read_bytes())
        except OSError:  # ended meanwhile
            continue
    for pid, (argv, env) in seen.items():
        assert token.encode() not in argv, f"the token is in the argv of {pid}: {argv[:200]!r}"
        assert token.encode() not in env, f"the token is in the environment of {pid}"
    # the scan saw the agent's copy of its mcpServers on a command line, and the bridge
    assert any(b"--mcp-config" in argv and b"ESCOUADE_MCP_TOKEN_FILE" in argv for argv, _ in seen.values()), seen
    assert any(f"ESCOUADE_MCP_TOKEN_FILE={token_file}".encode() in env.split(b"\0") for _, env in seen.values())
    # the file: the token only, mode 0600, in a folder of this user's only (0700)
    assert token_file.read_text() == token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
    assert token_file.stat().st_uid == token_file.parent.stat().st_uid == os.getuid()
    wait_for(kernel, "b.transcript._lines == []", timeout=10)
    assert token not in Path(info["transcript"]).read_text()
    kernel.run("await b.close()")
    assert not token_file.exists()  # the grant ended with the session
    for pid in seen:
        if pid != info["pid"]:
            wait_for(kernel, f"not __import__('os').path.exists('/proc/{pid}/cmdline') or "
                             f"open('/proc/{pid}/cmdline', 'rb').read() == b''", timeout=10)
