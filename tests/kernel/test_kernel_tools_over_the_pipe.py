"""The kernel's MCP server carried over the agent's own stdio (issue 35, part 2), in a real kernel,
through real pipes: the shipped ``fake`` agent started through a launcher that is only a command
prefix (``sh -c 'exec "$@"' sh``, a stand-in *prefix*: real processes, no network), and through a
real sshd that forbids forwarding (``AllowTcpForwarding no``, ``tests/ssh_servers.py``). The relay
(``escouade_nb/engine/launch/pipe_relay.py``, its source sent over the pipe) starts beside the
agent, rewrites the ``acp`` entry into a stdio MCP server of its own, and carries the MCP messages
as ``mcp/message`` on the same stdout: the agent lists a kernel variable and its ``run_code`` shows
one card and runs in the user's namespace; no port is opened, no token travels; a Stop leaves
nothing behind.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from kernel_client import KERNEL_TOOLS_SETUP, kernel_with_env, left_behind, processes_named, wait_for
from ssh_servers import sshd

pytestmark = pytest.mark.kernel

PREFIX = shlex.join(["sh", "-c", 'exec "$@"', "sh"])
BIN = str(Path(sys.executable).parent)
REMOTE_PATH = f"SetEnv PATH={BIN}:/usr/local/bin:/usr/bin:/bin\n"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernel-tools-pipe")
    (root / "ws").mkdir()
    env = {"ESCOUADE_NB_PLUGINS_DIR": str(root / "plugins"), "ESCOUADE_NB_CONFIG_DIR": str(root / "config"),
           "ESCOUADE_NB_TRANSCRIPTS_DIR": str(root / "transcripts"),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}  # the far side of a prefix is this host
    k = kernel_with_env(root / "ws", env)
    try:
        k.run(KERNEL_TOOLS_SETUP)
        yield k, root
    finally:
        k.shutdown()


def _drive(kernel, name: str) -> None:
    """Agent ``name`` (started already) lists ``df``, then runs code behind exactly one card."""
    wait_for(kernel, f"{name}.kernel_tools_state[0] == 'connected'", timeout=60)
    state = json.loads(kernel.run(f"print(json.dumps({name}.kernel_tools_state))").text)
    assert state[1].startswith("over the agent's own pipe"), state
    sent = kernel.run(f"print([l for l in {name}.transcript.path.read_text().splitlines() if 'session/new' in l][0])"
                      ).text
    assert '"type":"acp"' in sent.replace(" ", "") and "Bearer" not in sent and "http://" not in sent, sent
    out = kernel.run(f"r = await {name}.send('variables')\nprint(r.text)", timeout=90).text
    assert "df" in out and "DataFrame" in out, out
    kernel.run(f"t = {name}.send('run code piped_total = df.revenue.sum()\\nprint(\"total:\", piped_total)')\n"
               f"card = await next_open({name})", timeout=90)
    out = kernel.run(f"print(card.request.title, '|', card.request.raw_input)\nprint(len({name}.pending_cards))").text
    assert "Run code in the kernel | {'code': 'piped_total = df.revenue.sum()\\nprint(\"total:\", piped_total)'}" \
        in out, out
    assert out.strip().endswith("1"), out
    out = kernel.run("card.choose('run')\nr = await t\nprint(r.text)\nprint(card.label)\nprint(piped_total)",
                     timeout=90).text
    assert "total: 134.5" in out and "Allowed by you: Run" in out, out
    assert out.strip().splitlines()[-1] == "134.5"  # it ran in this kernel's namespace
    cards = kernel.run(f"print(sum(1 for i in {name}.conversation.items if type(i).__name__ == 'Permission' "
                       "and i.request.title == 'Run code in the kernel'))").text
    assert cards.strip() == "1", cards


def test_through_a_plain_prefix_the_agent_reads_and_runs_behind_one_card(kernel):
    k, _ = kernel
    before = set(processes_named("escouade-relay"))
    k.run(f"p = %escouade fake --via {shlex.quote(PREFIX)} --as piped\nawait p.ready()", timeout=90)
    try:
        _drive(k, "p")
        # the relay and its MCP endpoint run beside the agent, and nothing listens on the network for it
        argv = json.loads(k.run("print(json.dumps(p.live.session.argv))").text)
        assert argv[:4] == ["sh", "-c", 'exec "$@"', "sh"] and "-R" not in argv
        assert processes_named("relay.py --mcp"), "the relay's stdio MCP endpoint is not running"
    finally:
        k.run("await p.close()", allow_error=True)
    assert not left_behind("escouade-relay", before, timeout=30)
    assert not left_behind("relay.py --mcp", set(), timeout=30)


def test_through_ssh_with_forwarding_forbidden_the_pipe_carries_the_tools(kernel):
    k, root = kernel
    before = set(processes_named("escouade-relay"))
    with sshd(root / "sshd-no-forwarding", REMOTE_PATH + "AllowTcpForwarding no\n") as launcher:
        k.run(f"s = %escouade fake --via {shlex.quote(shlex.join(launcher))} --as no-forward\nawait s.ready()",
              timeout=120)
        try:
            _drive(k, "s")
            notices = json.loads(k.run(
                "print(json.dumps([i.text for i in s.conversation.items if type(i).__name__ == 'Notice' "
                "and 'kernel' in i.text and not i.text.startswith('Runs via')]))").text)  # not where it runs
            assert notices == [], notices  # nothing "not given": the pipe carried them
        finally:
            k.run("await s.close()", allow_error=True)
        # the relay on the far side (sshd's child) died with the pipe, and its agent with it
        assert not left_behind("escouade-relay", before, timeout=30)
        assert not left_behind("relay.py --mcp", set(), timeout=30)


def test_a_far_side_without_python3_is_said_in_one_line_and_the_agent_runs(kernel, tmp_path):
    k, _ = kernel
    bare = tmp_path / "bin"  # a far side with sh, dd, the launcher wrapper's tools, the agent, and no python3
    bare.mkdir()
    for tool in ("sh", "dd", "mktemp", "mkfifo", "rm", "cat", "sleep", "setsid"):
        (bare / tool).symlink_to(shutil.which(tool))
    (bare / "escouade-fake-agent").symlink_to(Path(BIN) / "escouade-fake-agent")
    via = shlex.join(["env", f"PATH={bare}"])
    k.run(f"n = %escouade fake --via {shlex.quote(via)} --as no-python\nawait n.ready()", timeout=90)
    try:
        state = json.loads(k.run("print(json.dumps(n.kernel_tools_state))").text)
        assert state == ["not offered", "the agent runs through a launcher (--via) and no relay runs beside it: the "
                         "agent's side has no python3 for the relay that carries them over its pipe (see "
                         "docs/agents-elsewhere.md)"], state
        notices = json.loads(k.run(
            "print(json.dumps([i.text for i in n.conversation.items if type(i).__name__ == 'Notice' "
            "and 'kernel' in i.text and not i.text.startswith('Runs via')]))").text)  # not where it runs
        assert len(notices) == 1 and "\n" not in notices[0] and "no python3" in notices[0], notices
        out = k.run("r = await n.send('hello')\nprint(r.stop_reason)", timeout=90).text
        assert "end_turn" in out  # the relay's source was dropped whole: the agent's ACP is intact
    finally:
        k.run("await n.close()", allow_error=True)
