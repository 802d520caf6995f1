"""The kernel's MCP server for an agent started ``--via "ssh …"``, against real sshds on
127.0.0.1 (``tests/ssh_servers.py``), through the product in a real kernel: the shipped
``fake`` agent runs on the "remote" side of the connection (sshd's child: the remote host's
PATH, set by the server's ``SetEnv``, finds it) and reaches the kernel through the launcher's
reverse forward (``ssh -R 127.0.0.1:0:127.0.0.1:PORT``, ``escouade_nb/engine/launch/ssh_forward.py``):
it lists the kernel's variables, its ``run_code`` shows the one card and runs in the user's
namespace, through a shared master connection (``ControlPath``) too; the ``escouade`` entry it received names the remote end; the token is in no argv
on either side (``ps`` here, and ``ps`` run through ssh there); Restart makes a new forward
with a new token (the old one gets 401); through a server that forbids forwarding (``AllowTcpForwarding
no``, ``PermitListen none``) the relay beside the agent carries the tools over its own pipe.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kernel_client import KERNEL_TOOLS_SETUP, kernel_with_env, wait_for
from ssh_servers import sshd

pytestmark = pytest.mark.kernel

BIN = str(Path(sys.executable).parent)  # escouade-fake-agent is here: the "remote host" has it on its PATH
REMOTE_PATH = f"SetEnv PATH={BIN}:/usr/local/bin:/usr/bin:/bin\n"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernel-tools-ssh")
    ws = root / "ws"
    ws.mkdir()
    env = {"ESCOUADE_NB_PLUGINS_DIR": str(root / "plugins"), "ESCOUADE_NB_CONFIG_DIR": str(root / "config"),
           "ESCOUADE_NB_TRANSCRIPTS_DIR": str(root / "transcripts")}
    with sshd(root / "sshd-open", REMOTE_PATH) as open_ssh, \
            sshd(root / "sshd-no-forwarding", REMOTE_PATH + "AllowTcpForwarding no\n") as no_forwarding, \
            sshd(root / "sshd-no-listen", REMOTE_PATH + "PermitListen none\n") as no_listen:
        k = kernel_with_env(ws, env)
        try:
            k.run(KERNEL_TOOLS_SETUP)
            k.run(f"a = %escouade fake --via {shlex.quote(shlex.join(open_ssh))} --as remote\nawait a.ready()",
                  timeout=90)
            wait_for(k, "a.kernel_tools_state[0] == 'connected'", timeout=30)
            yield k, {"open": open_ssh, "AllowTcpForwarding no": no_forwarding, "PermitListen none": no_listen}
        finally:
            k.run("await a.close()", allow_error=True)
            k.shutdown()


def _facts(kernel) -> dict:
    """What the kernel knows of agent ``a``'s current session: token, the kernel server's
    URL, the forward's ports, the ssh client's argv, the entry the agent was sent."""
    return json.loads(kernel.run(
        "_k = a.live.kernel\n"
        "_sent = [json.loads(l) for l in a.transcript.path.read_text().splitlines() if 'session/new' in l]\n"
        "print(json.dumps({'token': _k.grant.token, 'url': _k._server.url, 'local': _k.forward.local_port,\n"
        "  'remote': _k.forward.remote_port, 'argv': a.live.session.argv, 'pid': a.pid,\n"
        "  'sent': json.dumps(_sent[-1])}))\n", timeout=30).text.strip().splitlines()[-1])


def _ps_here() -> str:
    return subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, text=True, check=True).stdout


def _ps_there(launcher: list[str]) -> str:
    """``ps`` run on the agent's host, through ssh (the same sshd the agent came through)."""
    return subprocess.run([*launcher, "ps -eww -o pid=,args="], capture_output=True, text=True, check=True,
                          timeout=30).stdout


def test_a_via_ssh_agent_lists_the_kernels_variables_through_the_reverse_forward(setup):
    kernel, _ = setup
    facts = _facts(kernel)
    local = int(re.search(r":(\d+)/mcp$", facts["url"]).group(1))
    assert facts["local"] == local
    # the local ssh asked for the forward to the kernel's loopback server; the remote end is another port
    argv = facts["argv"]
    assert argv[argv.index("-R") + 1] == f"127.0.0.1:0:127.0.0.1:{local}"
    assert facts["remote"] and facts["remote"] != local
    # the entry the agent received names the remote end (the token itself is redacted in the transcript)
    assert f'"url": "http://127.0.0.1:{facts["remote"]}/mcp"' in facts["sent"].replace('\\"', '"'), facts["sent"]
    # reported back: the head's "kernel tools ✓" says where on the agent's host
    state = json.loads(kernel.run("print(json.dumps(a.kernel_tools_state))").text)
    assert state == ["connected", f"through ssh's reverse forward: 127.0.0.1:{facts['remote']} on the agent's host "
                                  "leads to this kernel's server"], state
    out = kernel.run("r = await a.send('variables')\nprint(r.text)", timeout=60).text
    assert "df" in out and "DataFrame" in out, out
    out = kernel.run("r = await a.send('inspect df')\nprint(r.text)", timeout=60).text
    assert "(3, 2)" in out and "revenue" in out and "north" in out, out


def test_run_code_through_ssh_shows_its_card_and_runs_in_this_kernel(setup):
    kernel, _ = setup
    kernel.run("t = a.send('run code remote_total = df.revenue.sum()\\nprint(\"total:\", remote_total)')\n"
               "card = await next_open(a)", timeout=60)
    out = kernel.run("print(card.request.title, '|', card.request.raw_input)\nprint(len(a.pending_cards))").text
    assert "Run code in the kernel | {'code': 'remote_total = df.revenue.sum()\\nprint(\"total:\", remote_total)'}" \
        in out
    assert out.strip().endswith("1")
    out = kernel.run("card.choose('run')\nr = await t\nprint(r.text)\nprint(card.label)\nprint(remote_total)",
                     timeout=60).text
    assert "total: 134.5" in out and "Allowed by you: Run" in out
    assert out.strip().splitlines()[-1] == "134.5"  # it ran in this kernel's namespace


def test_the_token_is_in_no_argv_on_either_side(setup):
    kernel, launchers = setup
    if shutil.which("ps") is None:
        pytest.skip("no ps here (Debian: apt-get install procps)")
    facts = _facts(kernel)
    token = facts["token"]
    assert len(token) >= 32
    here, there = _ps_here(), _ps_there(launchers["open"])
    # both listings saw the processes they should: the local ssh with the forward, the remote agent
    assert f"-R 127.0.0.1:0:127.0.0.1:{facts['local']}" in here
    remote_agents = [line.split(None, 1) for line in there.splitlines() if "escouade-fake-agent" in line
                     and "sh -c" not in line]
    assert remote_agents, there
    assert token not in here and token not in there
    # the agent on the remote side is sshd's (it has the connection's SSH_CONNECTION) and its environment
    # does not hold the token either: it came in the session/new message's headers
    envs = [Path(f"/proc/{pid}/environ").read_bytes() for pid, _ in remote_agents if os.path.exists(f"/proc/{pid}")]
    assert any(b"SSH_CONNECTION=" in e for e in envs)
    assert all(token.encode() not in e for e in envs)


def test_restart_makes_a_new_forward_with_a_new_token(setup):
    kernel, _ = setup
    before = _facts(kernel)
    kernel.run("await a.restart()\nawait a.ready()", timeout=90)
    wait_for(kernel, "a.kernel_tools_state[0] == 'connected'", timeout=30)
    after = _facts(kernel)
    assert after["token"] != before["token"] and after["pid"] != before["pid"]
    assert after["remote"] and after["argv"][after["argv"].index("-R") + 1].endswith(f":{after['local']}")
    out = kernel.run("r = await a.send('variables')\nprint(r.text)", timeout=60).text
    assert "df" in out and "DataFrame" in out, out
    # the old token opens nothing any more
    request = urllib.request.Request(before["url"], data=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json, text/event-stream",
                                              "Authorization": f"Bearer {before['token']}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401


def test_through_a_shared_master_connection_too(setup, tmp_path):
    """A ``ControlPath`` master (two-factor logins rely on one) reports the port only at VERBOSE."""
    kernel, launchers = setup
    ssh, *options, destination = launchers["open"]
    control = ["-o", f"ControlPath={tmp_path / 'master'}"]
    subprocess.run([ssh, *options, *control, "-o", "ControlMaster=yes", "-fN", destination], check=True, timeout=30)
    try:
        via = shlex.join([ssh, *options, *control, destination])
        kernel.run(f"c = %escouade fake --via {shlex.quote(via)} --as through-master\nawait c.ready()", timeout=90)
        try:
            wait_for(kernel, "c.kernel_tools_state[0] == 'connected'", timeout=30)
            out = kernel.run("r = await c.send('variables')\nprint(r.text)\nprint(c.stderr.tail())", timeout=60).text
            assert "df" in out and "DataFrame" in out, out
            assert "Authenticated to" not in out  # it went through the master: no login of its own
        finally:
            kernel.run("await c.close()", allow_error=True)
    finally:
        subprocess.run([ssh, *options, *control, "-O", "exit", destination], capture_output=True, timeout=30)


@pytest.mark.parametrize("forbidden", ["AllowTcpForwarding no", "PermitListen none"])
def test_a_server_that_forbids_forwarding_gets_the_tools_over_the_agents_own_pipe(setup, forbidden):
    """The forward refused, the relay beside the agent carries the kernel's server over its stdio
    (issue 35; before it the agent ran without the kernel's tools, told why in one line)."""
    kernel, launchers = setup
    name = "refused-" + forbidden.split()[0].lower()
    kernel.run(f"b = %escouade fake --via {shlex.quote(shlex.join(launchers[forbidden]))} --as {name}\n"
               "await b.ready()", timeout=90)
    try:
        wait_for(kernel, "b.kernel_tools_state[0] == 'connected'", timeout=60)
        state = json.loads(kernel.run("print(json.dumps(b.kernel_tools_state))").text)
        assert state[1].startswith("over the agent's own pipe"), state
        notices = json.loads(kernel.run(
            "print(json.dumps([i.text for i in b.conversation.items if type(i).__name__ == 'Notice' "
            "and 'kernel' in i.text and not i.text.startswith('Runs via')]))").text)  # not where it runs
        assert notices == [], notices
        out = kernel.run("r = await b.send('variables')\nprint(r.text)", timeout=60).text
        assert "df" in out and "DataFrame" in out, out
    finally:
        kernel.run("await b.close()", allow_error=True)
