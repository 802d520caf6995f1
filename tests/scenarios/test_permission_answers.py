"""What a permission answer must be (issue 14, "Permissions"), each played by a scripted
agent over real pipes against the real engine, with real rule plugin processes:

* a denial always reaches the agent — ``reject_once``, or ``cancelled`` when the agent
  offered no reject option — and the card says who denied it, after a resume too;
* a rule plugin is told what the ACP tool call says (kind, title, locations, diff paths),
  so that three calls without ``rawInput`` are told apart;
* a card's label says what the chosen option said, never more.
"""

from __future__ import annotations

import asyncio
import json
import re

from fixtures.plugins.cards import make_rules
from scripted_agent import P_INIT, P_NEW, P_PROMPT, run, until

from escouade_nb.core.conversation import Conversation
from escouade_nb.core.render_text import render_item
from escouade_nb.manifest.project import Project
from escouade_nb.permissions import Journal, PluginStates, RulePlugins
from escouade_nb.wire import transcript as tr

ALLOW_ONLY = ('[{"optionId":"yes","name":"Allow","kind":"allow_once"},'
              '{"optionId":"always","name":"Allow always","kind":"allow_always"}]')
WITH_REJECT = ALLOW_ONLY[:-1] + ',{"optionId":"no","name":"Reject","kind":"reject_once"}]'


def _ask(rid: int, call: dict, options: str = ALLOW_ONLY) -> str:
    return (f'A> {{"jsonrpc":"2.0","id":{rid},"method":"session/request_permission","params":{{"sessionId":"s1",'
            f'"toolCall":{json.dumps(call)},"options":{options}}}}}')


END = 'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'


async def _started(rules: RulePlugins, *ids: str) -> RulePlugins:
    rules.start_soon()
    for pid in ids:
        await asyncio.wait_for(rules.host.processes[pid].wait_ready(), 60)
    return rules


# -- a denial always reaches the agent -------------------------------------------------------------------

def test_a_rule_plugins_denial_reaches_an_agent_that_offers_no_reject_option(tmp_path, script):
    call = {"toolCallId": "x1", "title": "Run rm -rf build", "kind": "execute", "status": "pending",
            "rawInput": {"command": "rm -rf build fast=deny"}}
    told = "Refused by Fixture fast through Escouade: fast says no"
    s = script(f"""
{P_INIT}
{P_NEW}
{P_PROMPT}
{_ask(100, call)}
C> {{"jsonrpc":"2.0","id":100,"result":{{"outcome":{{"outcome":"cancelled"}},"_meta":{{"escouade":{{"by":"Fixture fast via Escouade","denied":true,"message":"{told}"}}}}}}}}
{END}
""")

    async def go():
        rules = await _started(make_rules(tmp_path, "fast"), "test.fixture.fast")
        agent = s.agent(policies=[rules.broker], project=Project.for_folder(s.ws))
        try:
            turn = agent.send("go")
            card = await agent.next_permission(timeout=60)
            await until(lambda: card.state != "pending", 60, "the plugin's denial to answer the card")
            assert (await turn).stop_reason == "end_turn"
            assert card.state == "cancelled" and card.permission.denied
            assert card.label == "Denied by Fixture fast via Escouade — fast says no"
            assert render_item(card.permission) == ("[permission] Run rm -rf build: Denied by Fixture fast via "
                                                    "Escouade — fast says no")
            journal = rules.journal.text("test.fixture.fast")
            assert re.search(r"Decision  refused Bash rm -rf build fast=deny \(\d+ ms\): fast says no", journal)
            assert "the user is asked" not in journal
            path = agent.transcript.path
        finally:
            await agent.close()
            await rules.aclose()
        # after a kernel restart, the transcript says the same
        again = Conversation()
        tr.replay(tr.read(path), again)
        (perm,) = [i for i in again.items if type(i).__name__ == "Permission"]
        assert perm.denied and perm.state == "cancelled" and perm.answered_by == "Fixture fast via Escouade"

    run(go())
    s.assert_ok()


def test_a_policys_denial_reaches_an_agent_that_offers_no_reject_option(script):
    """A policy of the engine's own (the Escouade mode is one) refuses with ``card.deny``."""
    call = {"toolCallId": "d1", "title": "Delete old.txt", "kind": "delete", "status": "pending",
            "locations": [{"path": "$WS/old.txt"}]}
    s = script(f"""
{P_INIT}
{P_NEW}
{P_PROMPT}
{_ask(100, call)}
C> {{"jsonrpc":"2.0","id":100,"result":{{"outcome":{{"outcome":"cancelled"}},"_meta":{{"escouade":{{"by":"the team's policy","denied":true,"message":"no deletes here"}}}}}}}}
{_ask(101, {**call, "toolCallId": "d2"}, WITH_REJECT)}
C> {{"jsonrpc":"2.0","id":101,"result":{{"outcome":{{"outcome":"selected","optionId":"no"}},"_meta":{{"escouade":{{"by":"the team's policy","denied":true,"message":"no deletes here"}}}}}}}}
{END}
""")

    async def no_deletes(card):
        if card.tool_call is not None and card.tool_call.kind == "delete":
            card.deny(by="the team's policy", message="no deletes here")

    async def go():
        async with s.running(policies=[no_deletes]) as agent:
            turn = agent.send("go")
            first = await agent.next_permission(timeout=60)
            second = await agent.next_permission(timeout=60)
            assert (await turn).stop_reason == "end_turn"
            # the same words whatever carried the refusal: cancelled (no reject option), or reject_once
            assert first.label == second.label == "Denied by the team's policy — no deletes here"
            assert (first.state, second.state) == ("cancelled", "selected")

    run(go())
    s.assert_ok()


# -- rule plugins tell tool calls apart -------------------------------------------------------------------

RULES = '''
import json, os
from escouade_nb.plugin_sdk import allow, ask, decide, deny, run

@decide
def rules(req):
    with open(os.environ["RULES_LOG"], "a") as fh:
        fh.write(json.dumps(req.wire()) + "\\n")
    if req.acp_kind == "delete":
        return deny("no deletes: " + ", ".join(req.locations))
    if req.acp_kind == "edit" and req.diff_paths and all("/src/" in p for p in req.diff_paths):
        return allow("edits in src/ are fine")
    return ask()

run()
'''


def test_rule_plugins_tell_tool_calls_apart(tmp_path, script, monkeypatch):
    """Three requests without ``rawInput`` — a delete, an edit, a write — once reached the
    plugin alike (``kind: edit, tool: Edit``); the ACP fields tell them apart."""
    plugin = tmp_path / "plugins" / "kinds"
    plugin.mkdir(parents=True)
    (plugin / "rules.py").write_text(RULES)
    (plugin / "escouade-plugin.json").write_text(json.dumps({
        "id": "test.kinds", "name": "Kind rules", "version": "1.0.0", "permissions": {"decide": True},
        "program": {"python": "rules.py", "env": ["RULES_LOG"]}}))
    log = tmp_path / "rules.log"
    monkeypatch.setenv("RULES_LOG", str(log))
    options = WITH_REJECT
    delete = {"toolCallId": "k1", "title": "Delete old.txt", "kind": "delete", "status": "pending",
              "locations": [{"path": "$WS/old.txt"}]}
    edit = {"toolCallId": "k2", "title": "Edit src/app.py", "kind": "edit", "status": "pending",
            "locations": [{"path": "$WS/src/app.py", "line": 3}],
            "content": [{"type": "diff", "path": "$WS/src/app.py", "oldText": "a = 1\n", "newText": "a = 2\n"}]}
    write = {"toolCallId": "k3", "title": "Write notes/new.md", "kind": "edit", "status": "pending",
             "content": [{"type": "diff", "path": "$WS/notes/new.md", "oldText": None, "newText": "hello\n"}]}
    s = script(f"""
{P_INIT}
{P_NEW}
{P_PROMPT}
{_ask(100, delete, options)}
C> {{"jsonrpc":"2.0","id":100,"result":{{"outcome":{{"outcome":"selected","optionId":"no"}}}}}}
{_ask(101, edit, options)}
C> {{"jsonrpc":"2.0","id":101,"result":{{"outcome":{{"outcome":"selected","optionId":"yes"}}}}}}
{_ask(102, write, options)}
C> {{"jsonrpc":"2.0","id":102,"result":{{"outcome":{{"outcome":"selected","optionId":"always"}}}}}}
{END}
""")

    async def go():
        rules = RulePlugins(journal=Journal(tmp_path / "journal"),
                            states=PluginStates(tmp_path / "config" / "plugins.json"), extra_dirs=[plugin])
        await _started(rules, "test.kinds")
        agent = s.agent(policies=[rules.broker], project=Project.for_folder(s.ws))
        try:
            turn = agent.send("go")
            cards = [await agent.next_permission(timeout=60) for _ in range(2)]
            third = await agent.next_permission(timeout=60)
            await until(lambda: not third.permission.deciding, 60, "the plugin to leave the write to the user")
            assert third.state == "pending"  # the plugin asked: the user decides
            third.choose("allow_always")
            assert (await turn).stop_reason == "end_turn"
            return [c.label for c in cards]
        finally:
            await agent.close()
            await rules.aclose()

    labels = run(go())
    ws = str(s.ws)
    assert labels == [f"Denied by Kind rules via Escouade — no deletes: {ws}/old.txt",
                      "Allowed by Kind rules via Escouade — edits in src/ are fine"]
    seen = [json.loads(line)["request"] for line in log.read_text().splitlines()]
    for r in seen:
        r.pop("id")
    assert seen == [
        # the seed's fields as they were, then what the ACP tool call says
        {"kind": "edit", "tool": "Edit", "input": {"file_path": f"{ws}/old.txt"},
         "acpKind": "delete", "title": "Delete old.txt", "locations": [f"{ws}/old.txt"], "diffPaths": [],
         "notebooks": [], "sizes": {"input.file_path": len(f"{ws}/old.txt")}, "truncated": []},
        {"kind": "edit", "tool": "Edit",
         "input": {"file_path": f"{ws}/src/app.py", "old_string": "a = 1\n", "new_string": "a = 2\n"},
         "acpKind": "edit", "title": "Edit src/app.py", "locations": [f"{ws}/src/app.py"],
         "diffPaths": [f"{ws}/src/app.py"], "notebooks": [],
         "sizes": {"input.file_path": len(f"{ws}/src/app.py"), "input.old_string": 6, "input.new_string": 6},
         "truncated": []},
        {"kind": "edit", "tool": "Write", "input": {"file_path": f"{ws}/notes/new.md", "content": "hello\n"},
         "acpKind": "edit", "title": "Write notes/new.md", "locations": [], "diffPaths": [f"{ws}/notes/new.md"],
         "notebooks": [], "sizes": {"input.file_path": len(f"{ws}/notes/new.md"), "input.content": 6},
         "truncated": []},
    ]
    s.assert_ok()


def test_the_sdk_reads_the_tool_call_fields():
    from escouade_nb.plugin_sdk import DecideRequest

    req = DecideRequest.model_validate({"request": {
        "id": "r", "kind": "edit", "tool": "Edit", "input": {"file_path": "/w/a.py"}, "acpKind": "move",
        "title": "Move a.py", "locations": ["/w/a.py", "/w/b.py"], "diffPaths": ["/w/b.py"]}})
    assert (req.acp_kind, req.title, req.locations, req.diff_paths) == ("move", "Move a.py", ["/w/a.py", "/w/b.py"],
                                                                        ["/w/b.py"])
    assert req.paths == ["/w/a.py", "/w/b.py"]
    old = DecideRequest.model_validate({"request": {"id": "r", "kind": "command", "tool": "Bash",
                                                    "input": {"command": "ls"}}})  # an older host's request
    assert (old.acp_kind, old.title, old.locations, old.diff_paths, old.paths) == (None, None, [], [], [])


# -- labels claim no more than was granted ----------------------------------------------------------------

SESSION_OPTIONS = ('[{"optionId":"once","name":"Allow once","kind":"allow_once"},'
                   '{"optionId":"session","name":"Allow for this session","kind":"allow_always"},'
                   '{"optionId":"no","name":"Reject","kind":"reject_once"}]')
PREFIX_OPTIONS = ('[{"optionId":"approved","name":"Yes","kind":"allow_once"},'
                  '{"optionId":"approved-for-prefix","name":"Yes, and don\'t ask again for commands that start '
                  'with `npm test`","kind":"allow_always"},{"optionId":"abort","name":"No, and tell Codex what to do '
                  'differently","kind":"reject_once"}]')
SILENT_OPTIONS = ('[{"optionId":"a","name":"","kind":"allow_always"},{"optionId":"b","name":" ","kind":"allow_once"},'
                  '{"optionId":"c","name":"Reject","kind":"reject_always"}]')


def test_labels_say_what_the_option_said(script):
    def run_call(tcid: str, title: str) -> dict:
        return {"toolCallId": tcid, "title": title, "kind": "execute", "status": "pending",
                "rawInput": {"command": title}}

    s = script(f"""
{P_INIT}
{P_NEW}
{P_PROMPT}
{_ask(100, run_call("l1", "ls"), SESSION_OPTIONS)}
C> {{"jsonrpc":"2.0","id":100,"result":{{"outcome":{{"outcome":"selected","optionId":"session"}}}}}}
{_ask(101, run_call("l2", "npm test -- -u"), PREFIX_OPTIONS)}
C> {{"jsonrpc":"2.0","id":101,"result":{{"outcome":{{"outcome":"selected","optionId":"approved-for-prefix"}}}}}}
{_ask(102, run_call("l3", "pwd"), SILENT_OPTIONS)}
C> {{"jsonrpc":"2.0","id":102,"result":{{"outcome":{{"outcome":"selected","optionId":"a"}}}}}}
{_ask(103, run_call("l4", "whoami"), SILENT_OPTIONS)}
C> {{"jsonrpc":"2.0","id":103,"result":{{"outcome":{{"outcome":"selected","optionId":"b"}}}}}}
{_ask(104, run_call("l5", "id"), SESSION_OPTIONS)}
C> {{"jsonrpc":"2.0","id":104,"result":{{"outcome":{{"outcome":"selected","optionId":"once"}}}}}}
{_ask(105, run_call("l6", "rm x"), SILENT_OPTIONS)}
C> {{"jsonrpc":"2.0","id":105,"result":{{"outcome":{{"outcome":"selected","optionId":"c"}}}}}}
{END}
""")

    async def go():
        agent = s.agent()
        labels = []
        try:
            turn = agent.send("go")
            for option in ("session", "approved-for-prefix", "allow_always", "allow_once", "once", "reject_always"):
                card = await agent.next_permission(timeout=60)
                card.choose(option)
                labels.append(card.label)
            await turn
        finally:
            await agent.close()
        return labels, [render_item(i) for i in agent.conversation.items if type(i).__name__ == "Permission"]

    labels, shown = run(go())
    assert labels == [
        "Allowed by you: Allow for this session",  # not "Always allowed": the option said "for this session"
        "Allowed by you: Yes, and don't ask again for commands that start with `npm test`",  # codex's prefix rule
        "Always allowed by you",  # an empty name: the kind speaks
        "Allowed once by you",  # a blank one too
        "Allowed once by you",  # a name that says just its kind
        "Rejected by you: Reject",  # the name says "Reject", not "always"
    ]
    assert shown[0] == "[permission] ls: Allowed by you: Allow for this session"
    s.assert_ok()



GRANT = """
[P]
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"t1","title":"bash: npm test","kind":"execute","status":"pending","rawInput":{"command":"npm test"}}}}
A> {"jsonrpc":"2.0","id":100,"method":"session/request_permission","params":{"sessionId":"s1","toolCall":{"toolCallId":"t1"},"options":[{"optionId":"once","name":"Allow once","kind":"allow_once"},{"optionId":"session","name":"Allow for remainder of this session","kind":"allow_always"},{"optionId":"no","name":"Deny","kind":"reject_once"}]}}
C> {"jsonrpc":"2.0","id":100,"result":{"outcome":{"outcome":"selected","optionId":"session"}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call_update","toolCallId":"t1","status":"completed"}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"t2","title":"bash: npm test -- -u","kind":"execute","status":"in_progress","rawInput":{"command":"npm test -- -u"}}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call_update","toolCallId":"t2","status":"completed"}}}
A> {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"t3","title":"Read notes.txt","kind":"read","status":"completed","rawInput":{"path":"notes.txt"}}}}
A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}
"""


def test_a_call_the_agent_ran_without_asking_after_an_earlier_grant_says_so(script):
    """After "Allow for remainder of this session" on a command, the agent runs the next
    command without asking (vibe, kimi, gemini, claude-agent, opencode and fast-agent do;
    none says why): its tool card says which earlier answer let it, and nothing is said of a
    call of another tool."""
    s = script(GRANT)

    async def go():
        async with s.running() as agent:
            turn = agent.send("go")
            card = await agent.next_permission(timeout=60)
            card.choose("session")
            result = await turn
            return {c.tool_call_id: c for c in result.tool_calls}

    calls = run(go())
    s.assert_ok()
    assert calls["t1"].not_asked is None  # it had its card
    assert calls["t2"].not_asked == ("not asked: earlier in this session you chose \u201cAllow for remainder of this "
                                     "session\u201d on \u201cbash: npm test\u201d")
    assert calls["t3"].not_asked is None  # another tool: nothing claimed
    assert "not asked: earlier in this session you chose" in render_item(calls["t2"])
