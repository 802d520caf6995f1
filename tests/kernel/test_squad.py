"""The squad in a real kernel: start options, launcher, accounts, squad view, resume, update."""

import os
import re
import sysconfig

import pytest

from kernel_client import Kernel, kernel_with_env, write_updatable_harness

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def squad_kernel(tmp_path_factory):
    """One kernel for the module's tests (a kernel start is seconds)."""
    root = tmp_path_factory.mktemp("squad")
    plugins = root / "plugins"
    write_updatable_harness(plugins, accountVar="FAKE_ACCOUNT_HOME")
    # a launcher (`env`) finds the agent on the kernel's PATH, as a remote host would on its own
    env = {"PATH": sysconfig.get_path("scripts") + os.pathsep + os.environ.get("PATH", ""),
           "ESCOUADE_NB_PLUGINS_DIR": str(plugins), "ESCOUADE_NB_ACCOUNTS_DIR": str(root / "accounts"),
           "ESCOUADE_NB_TRANSCRIPTS_DIR": str(root / "transcripts")}
    (root / "ws").mkdir()
    k = kernel_with_env(root / "ws", env)
    k.root = root
    k.run("%load_ext escouade_nb\nimport asyncio, os")
    yield k
    k.shutdown()


@pytest.fixture
def kernel(squad_kernel):
    """The module's kernel; the agents a test started are closed after it, as before each test's own kernel."""
    yield squad_kernel
    squad_kernel.run("from escouade_nb import get_squad\n"
                     "await asyncio.gather(*(a.close() for a in get_squad().agents.values()))", allow_error=True)


def test_start_options_mode_via_account(kernel):
    out = kernel.run(
        "a = %escouade fake --mode acceptEdits --as moded\nawait a.ready()\nimport time\nend = time.monotonic() + 30\n"
        "while a.conversation.current_mode_id != 'accept-edits' and time.monotonic() < end:\n"
        "    await asyncio.sleep(0.02)\n"
        "print(a.escouade_mode, a.conversation.current_mode_id)\n"
        "v = %escouade fake --via env --as remote\nawait v.ready()\n"
        "print(v.argv()[0], v.uses_client_fs, v.client.capabilities if hasattr(v.client, 'capabilities') else '')\n"
        "from escouade_nb.widgets import views_of\nprint(repr(views_of(v)[0]).splitlines()[0])\n"
        "w1 = %escouade updatable --account work --as work\nw2 = %escouade updatable --account home --as home\n"
        "await w1.ready(); await w2.ready()\n"
        "env1 = open(f'/proc/{w1.pid}/environ', 'rb').read().split(b'\\0')\n"
        "env2 = open(f'/proc/{w2.pid}/environ', 'rb').read().split(b'\\0')\n"
        "print([e.decode() for e in env1 if e.startswith(b'FAKE_ACCOUNT_HOME=')])\n"
        "print([e.decode() for e in env2 if e.startswith(b'FAKE_ACCOUNT_HOME=')])").text
    assert "acceptEdits accept-edits" in out
    assert "env False" in out  # a launcher: the files are not ours, no client fs
    assert "remote · Fake · via env · idle" in out
    acc = kernel.root / "accounts" / "updatable"
    assert f"['FAKE_ACCOUNT_HOME={acc / 'work'}']" in out and f"['FAKE_ACCOUNT_HOME={acc / 'home'}']" in out
    assert (acc / "work").is_dir() and (acc / "home").is_dir()
    bad = kernel.run("%escouade fake --mode sideways").text
    assert "does not offer the mode 'sideways'" in bad
    bad = kernel.run("%escouade fake --account work").text
    assert "has no accountVar" in bad


def test_squad_view_lists_agents(kernel):
    out = kernel.run("a = %escouade fake --as one\nb = %escouade fake --as two\nawait a.ready(); await b.ready()\n"
                     "t = b.send('run npm test')\ncard = await b.next_permission(timeout=60)\n"
                     "from escouade_nb.widgets.squad_view import SquadView\nfrom escouade_nb import get_squad\n"
                     "print(repr(SquadView(get_squad())))\ncard.choose('reject_once')\nawait t").text
    assert re.search(r"one\s+fake\s+idle\s+mode=ask cards=0", out)
    assert re.search(r"two\s+fake\s+waiting for you\s+mode=ask cards=1", out)
    shown = kernel.run("%escouade squad").text
    assert shown.lstrip().startswith("Squad:")  # after the companion output (no text of its own)


def test_update_command_shown_then_run(kernel):
    out = kernel.run("%escouade update updatable").text  # at once: the version is read in the background
    assert "update with `echo updating the agent && echo done`" in out
    out = kernel.run("from escouade_nb.widgets.update_view import UpdateView\nimport gc\n"
                     "import time\nend = time.monotonic() + 60\n"
                     "while not (shown := [v for v in gc.get_objects() if isinstance(v, UpdateView) and v.before])"
                     " and time.monotonic() < end:\n    await asyncio.sleep(0.1)\n"
                     "print(repr(shown[-1]), shown[-1].companion_bundle()['text/html'])").text
    assert "Updatable 0.1.0: update with `echo updating the agent && echo done`" in out and "0.1.0 —" in out
    out = kernel.run("%escouade update updatable --yes\n"
                     "from escouade_nb.widgets.update_view import UpdateView\nimport gc\n"
                     "import time\nend = time.monotonic() + 60\n"
                     "while not (done := [v for v in gc.get_objects() if isinstance(v, UpdateView) and v.result])"
                     " and time.monotonic() < end:\n    await asyncio.sleep(0.1)\n"
                     "print(repr(done[-1]))").text
    assert "exit code 0; version now 0.1.0" in out
    assert "gives no updateCommand" in kernel.run("%escouade update fake").text


def test_resume_after_kernel_restart(tmp_path, monkeypatch):
    monkeypatch.setenv("ESCOUADE_NB_TRANSCRIPTS_DIR", str(tmp_path / "transcripts"))
    k = Kernel(tmp_path)
    try:
        k.run("%load_ext escouade_nb\na = %escouade fake --as keeper\nr = await a.send('hello from before')\n"
              "t = a.send('edit notes.txt')\ncard = await a.next_permission(timeout=60)\ncard.choose('allow_once')\n"
              "await t")
    finally:
        k.shutdown()
    k = Kernel(tmp_path)
    try:
        listing = k.run("%load_ext escouade_nb\n%escouade resume").text
        # its name, when its transcript was last written, its first prompt, its folder, the file (issue 16, 26)
        assert re.search(r"keeper\s+\d{4}-\d\d-\d\d \d\d:\d\d  “hello from before”  in \.  \(keeper-\S+\.jsonl\)",
                         listing)
        out = k.run("import asyncio\na = %escouade resume keeper\nawait a.ready()\n"
                    "from escouade_nb.core.render_text import render_items\nprint(render_items(a.conversation.items))\n"
                    "print('STATUS', a.status)\nr = await a.send('hello after')\nprint('AFTER', r.stop_reason)").text
        assert "you: hello from before" in out and "You said: hello from before" in out
        assert "[permission] Edit notes.txt: Allowed once by you" in out
        assert "cannot reload a session (no loadSession): a new session was started" in out
        assert "STATUS idle" in out and "AFTER end_turn" in out
        k.run("await a.close()")
    finally:
        k.shutdown()
