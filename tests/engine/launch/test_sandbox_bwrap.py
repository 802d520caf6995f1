"""A sandbox per agent (``--sandbox``, engine/launch/sandbox.py): scripted agents run under the
real bubblewrap over real pipes, writing by themselves (their own shell commands, the
``run`` step of tests/fixtures/script_agent.py) inside and outside their folder."""

import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from escouade_nb.engine.launch.sandbox import Sandbox, bwrap_argv, expand_state_folder, git_protected, resolv_conf
from escouade_nb.engine.squad import Squad, SquadError
from escouade_nb.manifest import ManifestError, load_manifest
from git_repos import base_repo, git, use_git_env
from scripted_agent import refused_start
from deadlines import run

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("pasta") is None,
                                 reason="bubblewrap or passt's pasta is not installed "
                                        "(apt-get install bubblewrap passt)")

SECRET = "sandbox-secret-3f9a1c"  # in the agent's environment: never on a command line


def prelude(cwd: str = "$WS") -> str:
    from scripted_agent import P_INIT
    return "\n".join([
        P_INIT,
        f'C> {{"jsonrpc":"2.0","id":1,"method":"session/new","params":{{"cwd":"{cwd}","mcpServers":[]}}}}',
        'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}',
        'C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1",'
        '"prompt":[{"type":"text","text":"go"}]}}'])


def own_commands(*argvs: list[str], cwd: str = "$WS") -> str:
    """A run: the prelude, each command run by the agent itself (its output said in the
    conversation), then the turn's end."""
    steps = "\n".join(f"!> {json.dumps({'run': argv})}" for argv in argvs)
    return (f"{prelude(cwd)}\n{steps}\n"
            'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}')


@pytest.fixture
def sandboxed(script, tmp_path, monkeypatch):
    """``sandboxed(*runs)``: a scripted harness installed for the squad, whose own files
    (its scenario and log, under tmp_path, which the private /tmp hides) are its manifest's
    state folder, through a variable of its manifest's ``env``."""
    plugins = tmp_path / "plugins"
    monkeypatch.setenv("ESCOUADE_NB_PLUGINS_DIR", str(plugins))
    monkeypatch.setenv("ESCOUADE_NB_JOURNAL_DIR", str(tmp_path / "journal"))
    monkeypatch.setenv("SANDBOX_TEST_SECRET", SECRET)

    def make(*runs, ws=None, name="boxed"):
        s = script(*runs, ws=ws, name=name)
        s.install_sandboxed(plugins)
        return s
    return make


def said(agent) -> str:
    return "\n".join(getattr(i, "text", "") for i in agent.conversation.items if type(i).__name__ == "Message")


# -- the command line, pure --------------------------------------------------------------------------


def test_the_private_tmp_is_mounted_before_the_folders_and_no_environment_is_on_the_command_line(tmp_path):
    folder = Path("/tmp/x/ws")
    argv = bwrap_argv("/usr/bin/bwrap", ["agent", "acp"], folder=folder,
                      writable=[Path("/home/u/.codex"), Path("/tmp/x/ws/sub")], readable=[Path("/tmp/venv")])
    assert argv[:10] == ["/usr/bin/bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    assert argv.index("--tmpfs") < argv.index("/tmp/venv") < argv.index(str(folder)) < argv.index("/tmp/x/ws/sub")
    assert argv[argv.index("/tmp/venv") - 1] == "--ro-bind"
    assert argv[argv.index(str(folder)) - 1] == "--bind"
    assert {"--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent"} <= set(argv)  # its network is pasta's or none; the host's SysV IPC unseen
    assert "--setenv" not in argv and "--clearenv" not in argv
    assert argv[-3:] == ["--", "agent", "acp"]
    assert "--info-fd" not in argv  # no network given: offline
    online = bwrap_argv("bwrap", ["a"], folder=folder, network_fds=(7, 8))
    assert online[online.index("--info-fd") + 1] == "7" and online[online.index("--block-fd") + 1] == "8"


def test_git_protected_is_the_main_git_folder_whole_and_a_worktree_admins_files(tmp_path):
    """A folder in a main worktree (the top or a subfolder): the repository's ``.git`` whole; a
    worktree (its ``.git`` a file): nothing of the main one; an admin folder: its own files."""
    repo = tmp_path / "repo"
    (repo / ".git" / "worktrees" / "w").mkdir(parents=True)
    (repo / "sub").mkdir()
    admin = repo / ".git" / "worktrees" / "w"
    (admin / "commondir").write_text("../..\n")
    (admin / "gitdir").write_text(str(tmp_path / "wt" / ".git") + "\n")
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / ".git").write_text(f"gitdir: {admin}\n")
    assert git_protected([repo]) == [repo / ".git"]
    assert git_protected([repo / "sub", repo]) == [repo / ".git"]
    assert git_protected([tmp_path / "wt"]) == []
    assert git_protected([admin]) == [admin / "commondir", admin / "gitdir"]
    assert git_protected([tmp_path / "elsewhere"]) == []


def test_resolv_conf_is_bound_back_only_from_a_hidden_folder():
    real = Path("/etc/resolv.conf").resolve()
    assert resolv_conf([Path("/nowhere")]) == []
    assert resolv_conf([real.parent]) == ([real] if real.is_file() else [])


def test_hidden_folders_are_emptied_before_what_is_bound_back_into_them_and_git_files_bound_last():
    folder = Path("/run/user/1000/proj")  # an agent's folder under a hidden one
    argv = bwrap_argv("bwrap", ["a"], folder=folder, hidden=[Path("/run/user/1000"), Path("/home/u/rt")],
                      files=[Path("/home/u/rt/token-x")], protected=[folder / ".git" / "config"],
                      drop_caps=True)
    pairs = list(zip(argv, argv[1:], strict=False))
    assert pairs.index(("--tmpfs", "/run/user/1000")) < pairs.index(("--bind", str(folder)))
    assert pairs.index(("--tmpfs", "/home/u/rt")) < pairs.index(("--ro-bind", "/home/u/rt/token-x"))
    assert pairs.index(("--bind", str(folder))) < pairs.index(("--ro-bind", f"{folder}/.git/config"))
    assert ("--cap-drop", "ALL") in pairs
    assert "--cap-drop" not in bwrap_argv("bwrap", ["a"], folder=folder, drop_caps=False)


def test_declared_ports_are_checked_kept_by_the_transcript_and_read_from_the_magic():
    from escouade_nb.engine.squad import _ports
    from escouade_nb.magics import _start_parser

    box = Sandbox(ports=(11434, 8000))
    assert Sandbox.from_record(box.record()) == box and Sandbox.from_record({"offline": False}) == Sandbox()
    assert Sandbox.from_record({"ports": [0, "x", 70000, True, 22]}) == Sandbox(ports=(22,))  # a header is data
    assert _ports(["11434", 8000, 8000]) == (11434, 8000)
    for bad in (0, 65536, "x", True):
        with pytest.raises(SquadError, match="not a TCP port"):
            _ports([bad])
    args = _start_parser().parse_args(["codex", "--sandbox-port", "11434", "--sandbox-port", "8000"])
    assert args.sandbox_ports == [11434, 8000] and not args.sandbox  # the ports imply --sandbox (squad.start)


def test_state_folders_expand_with_the_agents_environment():
    env = {"HOME": "/home/u", "CODEX_HOME": "/data/codex", "EMPTY": ""}
    assert expand_state_folder("~/.gemini", env) == Path("/home/u/.gemini")
    assert expand_state_folder("${CODEX_HOME:-~/.codex}", env) == Path("/data/codex")
    assert expand_state_folder("${EMPTY:-~/.codex}/sessions", env) == Path("/home/u/.codex/sessions")
    assert expand_state_folder("${XDG_DATA_HOME:-~/.local/share}/opencode", env) == Path("/home/u/.local/share/opencode")
    assert expand_state_folder("${UNSET}", env) is None


@pytest.mark.parametrize("bad", ["/etc", "~", "~/", "~/a/../b", "$HOME/x", "${X:-/etc}", "relative"])
def test_a_bad_state_folder_is_refused_naming_the_file_and_the_field(tmp_path, bad):
    path = tmp_path / "escouade-plugin.json"
    path.write_text(json.dumps({"id": "p", "name": "P", "contributes": {"harnesses": [
        {"id": "h", "acp": {"args": [], "stateFolders": ["~/.ok", bad]}}]}}))
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    assert "contributes.harnesses[0].acp.stateFolders[1]" in str(err.value) and "\n" not in str(err.value)


def test_every_shipped_manifest_declares_its_state_folders():
    """Measured for each (docs/real-agents.md); goose's is Escouade's own file, unchanged."""
    from escouade_nb._resources import shipped_dir

    declared = {}
    for manifest in sorted(shipped_dir("plugins").glob("*/escouade-plugin.json")):
        for harness in load_manifest(manifest).described_harnesses():
            if manifest.parent.name != "goose":
                assert "state_folders" in harness.acp.model_fields_set, f"{manifest}: {harness.id} has no stateFolders"
            declared[harness.id] = harness.acp.state_folders
    assert {"mistral-vibe", "fast-agent", "kimi", "claude-agent", "codex", "opencode", "gemini", "fake"} <= set(declared)


# -- real bwrap ---------------------------------------------------------------------------------------


@pytest.fixture
def outside_tmp():
    """A scratch folder outside /tmp (the sandbox's /tmp is its own): /var/tmp/…, removed after."""
    folder = Path(tempfile.mkdtemp(prefix="escouade-sandbox-test-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@needs_bwrap
def test_writes_by_itself_outside_its_folder_fail_inside_they_work_and_it_sees_no_kernel_process(sandboxed, tmp_path,
                                                                                                outside_tmp):
    outside, hidden = outside_tmp / "escaped.txt", tmp_path / "next-to-ws.txt"
    s = sandboxed(own_commands(
        ["sh", "-c", "echo inside > inside.txt && echo wrote-inside"],
        ["sh", "-c", f"echo out > {outside}"],
        ["sh", "-c", f"echo out > {hidden} && echo wrote-private-tmp"],
        ["sh", "-c", f"test -e /proc/{os.getpid()}/environ && echo kernel-visible || echo no-kernel; "
                     "ls /proc | grep -E '^[0-9]+$' | sort -n | tail -1"],
        ["sh", "-c", "echo secret=$SANDBOX_TEST_SECRET; ps -eo args"]))

    async def go():
        squad = Squad()
        try:
            agent = squad.start("boxed", cwd=s.ws, sandbox=True)
            assert agent.sandbox is not None
            await agent.ready()
            # the whole process group's command lines, seen from outside: bwrap's has no environment
            cmdlines = [Path(f"/proc/{p}/cmdline").read_bytes() for p in _group(agent.pid)]
            assert cmdlines and all(SECRET.encode() not in c for c in cmdlines)
            assert any(c.startswith(shutil.which("bwrap").encode()) for c in cmdlines)
            await agent.send("go")
            text = said(agent)
            from escouade_nb.widgets import AgentView
            from escouade_nb.widgets.agent_view import status_line
            view = AgentView(agent)
            head, first = view.head(), repr(view).splitlines()[0]
            view.close()
            return text, head, first, status_line(agent)
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()
    text, head, first, line = run(go())
    assert "wrote-inside" in text and (s.ws / "inside.txt").read_text() == "inside\n"
    assert "Read-only file system" in text and not outside.exists()  # refused by the OS, said, absent
    assert "wrote-private-tmp" in text and not hidden.exists()  # its /tmp is its own
    assert "no-kernel" in text and int(re.search(r"no-kernel\s*(\d+)", text).group(1)) < 100
    assert f"secret={SECRET}" in text  # the environment is inherited…
    assert "bwrap --ro-bind" in text and SECRET not in text.split("secret=")[1].split("\n", 1)[1]  # …not an argv
    assert "sandboxed" in head["where"] and "sandboxed" in first and "sandboxed" in line


def _group(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[2]) == os.getpgid(pid):
                found.append(int(entry.name))
    return found


@needs_bwrap
@pytest.mark.parametrize("where", ["var-tmp", "tmp"])
def test_a_sandboxed_worktree_agent_commits_but_cannot_touch_the_main_worktree(sandboxed, tmp_path, monkeypatch,
                                                                              outside_tmp, where):
    use_git_env(monkeypatch)
    # a repository under /tmp is read-only too
    repo = base_repo((outside_tmp if where == "var-tmp" else tmp_path) / "proj", {"notes.txt": "a\n"})
    git("config", "user.name", "t", cwd=repo)
    s = sandboxed(own_commands(
        ["sh", "-c", "echo x > new.txt && git add new.txt && git commit -qm by-agent && echo committed"],
        ["sh", "-c", f"echo y >> {repo / 'notes.txt'}"],
        ["git", "log", "--format=%s", "main"],
        cwd="$ANY"))

    async def go():
        squad = Squad()
        try:
            agent = squad.start("boxed", cwd=repo, worktree=True, sandbox=True)
            await agent.ready()
            await agent.send("go")
            return said(agent), agent.worktree.branch
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()
    text, branch = run(go())
    assert "committed" in text, text
    log = subprocess.run(["git", "log", "--format=%s", branch], cwd=repo, capture_output=True, text=True).stdout
    assert log.split() == ["by-agent", "base"]
    assert "Read-only file system" in text and (repo / "notes.txt").read_text() == "a\n"
    assert "[exit 0] base" in text  # the main worktree's history is readable
    s.assert_ok()


def test_without_bwrap_the_start_fails_in_one_line_naming_the_package_and_nothing_starts(sandboxed, monkeypatch):
    s = sandboxed(own_commands(["true"]))
    monkeypatch.setenv("PATH", "/nonexistent-bin")
    message, agents = run(refused_start("boxed", cwd=s.ws, sandbox=True))
    assert "bubblewrap" in message and "\n" not in message and agents == {}
    assert not s.log.exists()  # the scripted agent never ran


def test_sandbox_with_via_asks_no_bwrap_here_the_far_side_is_probed(sandboxed, monkeypatch):
    """bwrap runs on the far side (tests/engine/launch/test_via_sandbox.py), never around the local
    launcher: no local bwrap is looked for; the launcher's own failure is what stops this one."""
    from escouade_nb.wire.errors import AgentError

    s = sandboxed(own_commands(["true"]))
    monkeypatch.setenv("PATH", "/nonexistent-bin")

    async def go():
        squad = Squad()
        try:
            agent = squad.start("boxed", cwd=s.ws, sandbox=True, via="ssh somewhere")
            with pytest.raises(AgentError):
                await agent.ready()
            return agent.error
        finally:
            await squad.aclose()
    message = run(go())
    assert message.startswith("ssh somewhere: the launcher 'ssh' cannot run here") and "bubblewrap" not in message


@needs_bwrap
def test_the_project_file_turns_the_sandbox_on(sandboxed):
    s = sandboxed(own_commands(["sh", "-c", "echo x > /etc/escouade-sandbox-probe"]))
    (s.ws / ".escouade.yml").write_text("sandbox: true\n")

    async def go():
        squad = Squad()
        try:
            agent = squad.start("boxed", cwd=s.ws)
            await agent.send("go")
            return agent.sandbox, said(agent)
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()
    box, text = run(go())
    assert box == Sandbox() and "Read-only file system" in text


def test_the_token_folder_is_made_before_the_first_token_and_kept_for_it(tmp_path, monkeypatch):
    """What a sandbox binds read-only before the agent starts: the stdio bridge's token file
    appears in it later."""
    from escouade_nb.kernel_mcp.token_files import TokenFiles

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    files = TokenFiles()
    try:
        folder = files.make_folder()
        assert folder.parent == tmp_path and folder.stat().st_mode & 0o777 == 0o700
        assert files.make_folder() == folder and files.write("t0ken").parent == folder
    finally:
        files.remove_all()
    assert not folder.exists()


@needs_bwrap
def test_a_resumed_sandboxed_agent_is_sandboxed_again(sandboxed):
    """The transcript's header keeps the sandbox: ``%escouade resume`` runs it under bwrap again."""
    from scripted_agent import P_INIT

    again = "\n".join([P_INIT, 'C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS"}}',
                       'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s2"}}'])
    s = sandboxed(own_commands(["true"]), again)
    name = f"boxed-resume-{os.getpid()}"

    async def go():
        squad = Squad()
        try:
            first = squad.start("boxed", cwd=s.ws, name=name, sandbox=True)
            await first.send("go")
            await first.close()
            resumed = squad.resume(name)
            await resumed.ready()
            from escouade_nb.widgets.agent_view import status_line
            cmdline = Path(f"/proc/{resumed.pid}/cmdline").read_bytes().split(b"\0")
            return resumed.sandbox, cmdline, status_line(resumed)
        finally:
            await asyncio.gather(*(a.close() for a in squad.agents.values()))
            await squad.aclose()
    box, cmdline, line = run(go())
    assert box == Sandbox() and cmdline[0] == shutil.which("bwrap").encode() and b"--unshare-pid" in cmdline
    assert "sandboxed" in line
