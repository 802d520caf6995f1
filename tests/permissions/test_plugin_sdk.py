"""The plugin SDK (command splitter, prefixes, the JSON-RPC loop), team-rules' judgement,
and the ``escouade-plugin`` bench on team-rules as a real process."""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from escouade_nb.manifest import SHIPPED_PLUGINS_DIR
from escouade_nb.plugin_sdk import Plugin, allow, ask, deny, matches, split_commands

TEAM_RULES = SHIPPED_PLUGINS_DIR / "team-rules"
BENCH = Path(sys.executable).with_name("escouade-plugin")
BENCH_CMD = [str(BENCH)] if BENCH.exists() else [sys.executable, "-m", "escouade_nb.tools.plugin_bench"]


@pytest.mark.parametrize("line, commands", [
    ("rm -rf build", [["rm", "-rf", "build"]]),
    ("npm test && rm -rf /", [["npm", "test"], ["rm", "-rf", "/"]]),
    ("a || b; c | d & e |& f", [["a"], ["b"], ["c"], ["d"], ["e"], ["f"]]),
    ("npm test\ncargo test", [["npm", "test"], ["cargo", "test"]]),
    # quotes and escapes: operators inside are text
    ("echo 'a && rm -rf x'", [["echo", "a && rm -rf x"]]),
    ('echo "a; b" \\; c', [["echo", "a; b", ";", "c"]]),
    ('echo "x\\"; rm -rf y"', [["echo", 'x"; rm -rf y']]),
    ("git commit -m 'fix: a | b'", [["git", "commit", "-m", "fix: a | b"]]),
    # substitutions are commands too, even inside double quotes
    ('echo "$(rm -rf y)"', [["rm", "-rf", "y"], ["echo", "$(…)"]]),
    ("ls `git push -f`", [["git", "push", "-f"], ["ls", "$(…)"]]),
    ("diff <(ls a) <(ls b)", [["ls", "a"], ["ls", "b"], ["diff", "$(…)", "$(…)"]]),
    ("echo $(( 1 + 2 ))", [["echo", "0"]]),
    # subshells, groups, keywords, assignments, wrappers, paths
    ("(cd x && rm -rf y)", [["cd", "x"], ["rm", "-rf", "y"]]),
    ("{ npm test; }", [["npm", "test"]]),
    ("if npm test; then git log; fi", [["npm", "test"], ["git", "log"]]),
    ("CI=1 FOO=bar npm test", [["npm", "test"]]),
    ("sudo /bin/rm -rf x", [["rm", "-rf", "x"]]),
    ("env -i A=1 npm test", [["npm", "test"]]),
    ("ls # rm -rf /", [["ls"]]),
    # heredoc bodies are text, not commands
    ("cat <<EOF > notes.txt\nrm -rf /\nEOF\nnpm test", [["cat", ">", "notes.txt"], ["npm", "test"]]),
    ("cat <<'END' | sh\nrm -rf /\nEND", [["cat"], ["sh"]]),
    ("cat <<-EOF\n\trm -rf /\n\tEOF\nls", [["cat"], ["ls"]]),
    ("python - <<EOF && git reset --hard\nprint(1)\nEOF\nls", [["python", "-"], ["git", "reset", "--hard"], ["ls"]]),
    ("cat <<EOF\nrm -rf /\nEOF && npm test", [["cat"]]),  # not the delimiter line: still the body
    ("cat <<<'rm -rf /'", [["cat", "<<<rm -rf /"]]),
    ("echo a \\\n  b", [["echo", "a", "b"]]),
    ("", []),
])
def test_split_commands(line, commands):
    assert split_commands(line) == commands


@pytest.mark.parametrize("command, prefix, ok", [
    ("npm test", "npm test", True),
    ("npm test -- -u", "npm test", True),
    ("npm testing", "npm test", False),
    ("npm", "npm test", False),
    ("git push --force origin", "git push --force", True),
    ("git push --force-with-lease", "git push --force", False),
    ("'npm' \"test\"", "npm test", True),
])
def test_prefixes_on_word_boundaries(command, prefix, ok):
    assert matches(split_commands(command)[0], prefix) is ok


def load_team_rules():
    spec = importlib.util.spec_from_file_location("team_rules_under_test", TEAM_RULES / "team_rules.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.load(TEAM_RULES)
    return mod


@pytest.mark.parametrize("line, decision, message", [
    ("rm -rf build", "deny", "no rm -rf here"),
    ("npm test", "allow", None),
    ("cargo build", "ask", None),
    ("npm test && cargo build", "ask", None),
    ("npm test && git status", "allow", None),
    ("npm test | tee log", "ask", None),
    ("git status; rm -rf .", "deny", "no rm -rf here"),
    ("git push -f", "deny", "No force push in this team: push a new commit instead."),
    ("echo `git reset --hard`", "deny", "no git reset --hard here"),
    ("cat <<EOF\nrm -rf /\nEOF", "ask", None),
    ("echo 'rm -rf /'", "ask", None),
])
def test_team_rules_judge_each_command(line, decision, message):
    mod = load_team_rules()
    answer = mod.judge(line, mod.RULES)
    assert answer.decision == decision
    assert answer.message == message


def test_team_rules_never_allows_a_cut_command_and_the_sdk_shows_the_marks():
    from escouade_nb.plugin_sdk import DecideRequest

    mod = load_team_rules()

    def request(command: str, truncated: list[str]) -> DecideRequest:
        return DecideRequest.model_validate({"request": {
            "id": "r", "kind": "command", "tool": "Bash", "input": {"command": command},
            "sizes": {"input.command": 9_000_000}, "truncated": truncated}})

    whole = request("npm test", [])
    assert whole.whole and whole.truncated == [] and whole.sizes == {"input.command": 9_000_000}
    assert mod.team_rules(whole).decision == "allow"
    cut = request("npm test … (8999992 more characters)", ["input.command"])
    assert not cut.whole and cut.truncated == ["input.command"]
    assert mod.team_rules(cut).decision == "ask"  # the part it saw is allowed: not enough
    assert mod.team_rules(request("rm -rf / … (8999992 more characters)", ["input.command"])).decision == "deny"


def test_team_rules_reads_its_rules_at_start(tmp_path: Path):
    mod = load_team_rules()
    (tmp_path / "rules.json").write_text(json.dumps({"deny": [{"command": "make clean", "message": "no"}],
                                                     "allow": ["make"]}))
    mod.load(tmp_path)
    assert mod.judge("make clean", mod.RULES).decision == "deny"
    assert mod.judge("make -j4", mod.RULES).decision == "allow"
    assert mod.judge("rm -rf build", mod.RULES).decision == "ask"


def test_sdk_loop_speaks_the_protocol(tmp_path: Path):
    plugin = Plugin("t")
    seen = {}

    @plugin.on_start
    def start(folder):
        seen["folder"] = folder

    @plugin.decide
    def rule(req):
        print("a print goes to stderr, not to the wire")
        if req.command.startswith("boom"):
            raise RuntimeError("boom")
        return {"rm": deny("no"), "ok": allow(), "str": "allow", "none": None}.get(req.command.split()[0], ask())

    def decide(rid, cmd):
        return {"jsonrpc": "2.0", "id": rid, "method": "permissions/decide",
                "params": {"request": {"id": "r", "kind": "command", "tool": "Bash", "input": {"command": cmd}}}}

    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": 1, "plugin": {"id": "t", "folder": str(tmp_path)}}},
             decide(2, "rm -rf x"), decide(3, "ok go"), decide(4, "str"), decide(5, "none"), decide(6, "boom"),
             {"jsonrpc": "2.0", "method": "some/notification"},
             {"jsonrpc": "2.0", "id": 7, "method": "nope"},
             {"jsonrpc": "2.0", "id": 8, "method": "shutdown"},
             decide(9, "ok never read")]
    inp = io.BytesIO(b"".join(json.dumps(m).encode() + b"\n" for m in lines) + b"not json\n")
    out = io.BytesIO()
    assert plugin.run(inp, out) == 0
    replies = [json.loads(x) for x in out.getvalue().splitlines()]
    assert seen["folder"] == tmp_path
    assert replies[0] == {"jsonrpc": "2.0", "id": 1, "result": {
        "protocolVersion": 1, "capabilities": {"permissions": {"decide": True}}}}
    assert [r.get("result") for r in replies[1:5]] == [
        {"decision": "deny", "message": "no"}, {"decision": "allow"}, {"decision": "allow"}, {"decision": "ask"}]
    assert replies[5]["id"] == 6 and replies[5]["error"]["code"] == -32603 and "boom" in replies[5]["error"]["message"]
    assert replies[6]["id"] == 7 and replies[6]["error"]["code"] == -32601
    assert replies[7] == {"jsonrpc": "2.0", "id": 8, "result": None}
    assert len(replies) == 8  # nothing after shutdown


def test_bench_passes_on_team_rules_and_prints_each_delay():
    proc = subprocess.run([*BENCH_CMD, "test", str(TEAM_RULES)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    recorded = [x for x in (TEAM_RULES / "decisions.jsonl").read_text().splitlines() if x.strip()]
    played = [x for x in lines if x.startswith(("ok ", "FAIL"))]
    assert len(played) == len(recorded) >= 15
    assert all(x.startswith("ok ") and " ms" in x for x in played)
    assert any("deny" in x and "rm -rf build" in x and "no rm -rf here" in x for x in played)
    assert lines[-1].startswith(f"{len(recorded)} decisions, {len(recorded)} ok, 0 failed")


def test_bench_fails_on_a_wrong_answer_and_on_a_slow_one(tmp_path: Path):
    fixtures = Path(__file__).parents[1] / "fixtures" / "plugins"
    decisions = tmp_path / "d.jsonl"
    decisions.write_text("\n".join(json.dumps(x) for x in [
        {"request": {"tool": "Bash", "input": {"command": "fast=allow"}}, "expect": {"decision": "allow"}},
        {"request": {"tool": "Bash", "input": {"command": "fast=deny"}}, "expect": {"decision": "allow"}},
        {"request": {"tool": "Bash", "input": {"command": "fast=sleep:0.6:allow"}}, "expect": {"decision": "allow"}},
    ]))
    proc = subprocess.run([*BENCH_CMD, "test", str(fixtures / "fast"), "--decisions", str(decisions)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    played = [x for x in proc.stdout.splitlines() if x.startswith(("ok ", "FAIL"))]
    assert played[0].startswith("ok ")
    assert played[1].startswith("FAIL") and "expected allow" in played[1]
    assert played[2].startswith("FAIL") and "slower than 500 ms" in played[2]


def test_bench_dev_plays_decisions_by_hand():
    script = "\n".join([
        'decide {"request": {"tool": "Bash", "input": {"command": "rm -rf build"}}}',
        "decide Bash npm test",
        "decide not json {",
        "decide {broken",
        "quit",
    ]) + "\n"
    proc = subprocess.run([*BENCH_CMD, "dev", str(TEAM_RULES)], input=script, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert '→ {"decision": "deny", "message": "no rm -rf here"}' in out
    assert '→ {"decision": "allow"}' in out
    assert "→ {\"decision\": \"ask\"}" in out  # "not json {" is the short form: tool "not"
    assert "not a request" in out


ENGINE_MODULES = ("acp", "anyio", "ipywidgets", "escouade_nb.engine", "escouade_nb.permissions.host",
                  "escouade_nb.permissions.broker", "escouade_nb.permissions.jsonrpc", "escouade_nb.widgets",
                  "escouade_nb.manifest", "escouade_nb.core")


def test_the_sdk_imports_nothing_of_the_engine(tmp_path: Path):
    code = ("import escouade_nb.plugin_sdk, sys, json; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('acp', 'anyio', 'ipywidgets', "
            "'escouade_nb'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    assert "escouade_nb.plugin_sdk" in loaded and "escouade_nb.permissions.protocol" in loaded
    assert not [m for m in loaded if m.startswith(ENGINE_MODULES)], loaded
    assert set(loaded) <= {"escouade_nb", "escouade_nb._lazy", "escouade_nb._version", "escouade_nb.plugin_sdk", "escouade_nb.permissions",
                           "escouade_nb.permissions.protocol", "escouade_nb.wire", "escouade_nb.wire.framing"}


def test_the_sdk_and_the_host_share_one_set_of_wire_models():
    from escouade_nb import plugin_sdk
    from escouade_nb.permissions import protocol, request
    from escouade_nb.permissions.host import InitializeParams

    assert plugin_sdk.DecideRequest is protocol.DecideParams is request.DecideParams
    assert plugin_sdk.Answer is protocol.DecideResult
    assert InitializeParams is protocol.InitializeParams
    assert plugin_sdk.PROTOCOL_VERSION == protocol.PROTOCOL_VERSION == 1


def test_the_sdk_reads_its_stdin_in_any_chunks_over_a_real_pipe(tmp_path: Path):
    """Lines cut anywhere (inside a multibyte character, between CR and LF), a line too
    long for the wire (answered with an error of id null, once) and the lines after it."""
    import time

    script = tmp_path / "echo_rules.py"
    script.write_text("from escouade_nb.plugin_sdk import ask, decide, deny, run\n\n"
                      "@decide\n"
                      "def rule(req):\n"
                      "    return deny(req.command) if req.command.startswith('é') else ask()\n\n"
                      "run()\n", encoding="utf-8")

    def decide_line(rid, command):
        return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "permissions/decide", "params": {
            "request": {"id": "r", "kind": "command", "tool": "Bash", "input": {"command": command}}}},
            ensure_ascii=False).encode("utf-8")

    from escouade_nb.permissions.protocol import MAX_LINE

    first = decide_line(1, "é€😀 rm -rf") + b"\r\n"
    cut = first.index("€".encode()) + 1  # inside the euro sign
    chunks = [first[:cut], first[cut:-1], first[-1:],  # CR and LF apart
              b'{"jsonrpc": "2.0", "id": 99, "method": "permissions/decide", "params": "' + b"x" * (MAX_LINE + 10),
              b"x" * 1000, b'"}\n',
              b"\n", decide_line(2, "npm test") + b"\n" + decide_line(3, "éa")[:5], decide_line(3, "éa")[5:] + b"\n",
              b'{"jsonrpc": "2.0", "id": 4, "method": "shutdown"}\n']
    proc = subprocess.Popen([sys.executable, "-u", str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        for chunk in chunks:
            proc.stdin.write(chunk)
            proc.stdin.flush()
            time.sleep(0.02)  # each chunk its own read
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    replies = [json.loads(x) for x in out.splitlines()]
    assert replies[0] == {"jsonrpc": "2.0", "id": 1, "result": {"decision": "deny", "message": "é€😀 rm -rf"}}
    assert replies[1]["id"] is None and replies[1]["error"]["code"] == -32600  # the long line, told once
    assert "longer than" in replies[1]["error"]["message"]
    assert replies[2:] == [{"jsonrpc": "2.0", "id": 2, "result": {"decision": "ask"}},
                           {"jsonrpc": "2.0", "id": 3, "result": {"decision": "deny", "message": "éa"}},
                           {"jsonrpc": "2.0", "id": 4, "result": None}]
