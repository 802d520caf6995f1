"""The plugin host and the broker with real plugin processes (``tests/fixtures/plugins``):
fast, hanging, crashing mid-decision, printing garbage; deny wins; the user's click
first; the 3 s start allowance; on/off, private projects, revoke; updates."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest
from fixtures.plugins.cards import HERE, Card, make_rules
from kernel_client import process_alive
from deadlines import run, until

from escouade_nb.core.conversation import ToolCall
from escouade_nb.manifest.project import Project

FIXTURES = str(HERE)
CLOCK = r"\d\d:\d\d:\d\d"


pytestmark = pytest.mark.usefixtures("no_orphan_plugins")  # tests/conftest.py


async def started(rules, *ids: str):
    rules.start_soon()
    for pid in ids:
        proc = rules.host.processes[pid]
        await asyncio.wait_for(proc.wait_ready(), 60)
    return rules


def decisions(rules, plugin: str) -> list[str]:
    return [re.sub(f"^{CLOCK}  ", "", e.text()) for e in rules.journal.entries(plugin, "Decision")]


def test_fast_plugin_allow_deny_ask(tmp_path: Path):
    async def main():
        rules = await started(make_rules(tmp_path, "fast"), "test.fixture.fast")
        project = Project.for_folder(tmp_path)
        try:
            cards = {}
            for word in ("allow", "deny", "ask"):
                card = Card(f"fast={word}", project=project)
                t0 = time.monotonic()
                await rules.broker(card)
                cards[word] = (card, time.monotonic() - t0)
            return cards, decisions(rules, "test.fixture.fast"), rules.journal.path("test.fixture.fast")
        finally:
            await rules.aclose()

    cards, lines, path = run(main())
    allow, t_allow = cards["allow"]
    assert allow.choices == [("allow-once", "Fixture fast via Escouade", None)]  # never widened to "always"
    deny, _ = cards["deny"]
    assert deny.choices == [("reject-once", "Fixture fast via Escouade", "fast says no")]  # never "cancelled"
    assert deny.reply == "Refused by Fixture fast through Escouade: fast says no"  # what the agent is told
    assert allow.reply == "Allowed by Fixture fast through Escouade."
    ask, _ = cards["ask"]
    assert ask.choices == [] and ask.state == "pending"  # the user decides
    assert t_allow < 0.4  # one fast plugin: no waiting for a deadline
    assert [re.sub(r"\(\d+ ms\)", "(N ms)", x) for x in lines] == [
        "Decision  allowed Bash fast=allow (N ms)",
        "Decision  refused Bash fast=deny (N ms): fast says no",
        "Decision  did not decide Bash fast=ask (N ms): it answered ask; the user is asked",
    ]
    # persisted as JSON lines, one file per plugin
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["Start", "Decision", "Decision", "Decision", "Stop"]
    assert rows[2]["verdict"] == "refused" and rows[2]["message"] == "fast says no" and rows[2]["tool"] == "Bash"
    assert rows[2]["target"] == "fast=deny" and rows[2]["delayMs"] >= 0 and rows[2]["applied"] is True


def test_hanging_plugin_is_asked_and_the_user_decides_after_500_ms(tmp_path: Path):
    async def main():
        rules = await started(make_rules(tmp_path, "hang", "fast"), "test.fixture.hang", "test.fixture.fast")
        project = Project.for_folder(tmp_path)
        try:
            card = Card("cargo build fast=ask", project=project)
            t0 = time.monotonic()
            await rules.broker(card)
            elapsed = time.monotonic() - t0
            # a hanging plugin does not block a denial from another one
            card2 = Card("x fast=deny", project=project)
            t1 = time.monotonic()
            task = asyncio.ensure_future(rules.broker(card2))
            while card2.state == "pending" and time.monotonic() - t1 < 2:
                await asyncio.sleep(0.005)
            deny_at = time.monotonic() - t1
            await task
            return card, elapsed, card2, deny_at, decisions(rules, "test.fixture.hang")
        finally:
            await rules.aclose()

    card, elapsed, card2, deny_at, lines = run(main())
    assert card.state == "pending"
    assert 0.5 <= elapsed < 1.5
    assert card2.choices[0][0] == "reject-once" and deny_at < 0.4
    assert lines == [
        "Decision  did not decide Bash cargo build fast=ask: no answer in time; the user is asked",
        "Decision  did not decide Bash x fast=deny: no answer in time; Fixture fast refused it",
    ]


def test_plugin_crashing_mid_decision_is_restarted_and_the_user_is_asked(tmp_path: Path):
    async def main():
        rules = await started(make_rules(tmp_path, "crash"), "test.fixture.crash")
        project = Project.for_folder(tmp_path)
        proc = rules.host.processes["test.fixture.crash"]
        try:
            first_pid = proc.pid
            card = Card("crash=crash", project=project)
            await rules.broker(card)
            await asyncio.wait_for(proc.wait_ready(), 60)  # restarted after a back-off
            second_pid = proc.pid
            card2 = Card("crash=allow", project=project)
            await rules.broker(card2)
            return card, card2, first_pid, second_pid, rules.journal.text("test.fixture.crash"), proc.restarts
        finally:
            await rules.aclose()

    card, card2, pid1, pid2, text, restarts = run(main())
    assert card.state == "pending"  # the request in flight goes to the user
    assert card2.choices[0][0] == "allow-once"
    assert pid1 != pid2 and not process_alive(pid1) and restarts == 1
    assert re.search(f"{CLOCK}  Decision  did not decide Bash crash=crash" r" \(\d+ ms\): a crash; the user is asked", text)
    assert "Crash  exited with code 3; restarting in 0.25 s (stderr: crash: crashing on purpose)" in text
    assert text.count("Start  started") == 2


def test_garbage_errors_and_answers_that_are_none_of_the_three_count_as_ask(tmp_path: Path):
    async def main():
        rules = await started(make_rules(tmp_path, "garbage"), "test.fixture.garbage")
        project = Project.for_folder(tmp_path)
        try:
            out = {}
            for b in ("garbage", "invalid", "notdict", "error", "allow"):
                card = Card(f"garbage={b}", project=project)
                await rules.broker(card)
                out[b] = card
            return out, decisions(rules, "test.fixture.garbage"), rules.journal.text("test.fixture.garbage", "Output")
        finally:
            await rules.aclose()

    cards, lines, output = run(main())
    assert [cards[b].state for b in ("garbage", "invalid", "notdict", "error")] == ["pending"] * 4
    assert cards["allow"].choices[0][0] == "allow-once"  # the host survived the garbage
    strip = [re.sub(r"\(\d+ ms\)", "(N ms)", x) for x in lines]
    assert strip == [
        "Decision  did not decide Bash garbage=garbage: no answer in time; the user is asked",
        "Decision  did not decide Bash garbage=invalid (N ms): an answer that is none of the three; the user is asked",
        "Decision  did not decide Bash garbage=notdict (N ms): an answer that is none of the three; the user is asked",
        "Decision  did not decide Bash garbage=error (N ms): an error: rules unreadable; the user is asked",
        "Decision  allowed Bash garbage=allow (N ms)",
    ]
    assert "Output  ignored a line that is not JSON-RPC: this is not JSON" in output


def test_deny_wins_one_allow_is_enough_whatever_the_order(tmp_path: Path):
    async def main():
        rules = await started(make_rules(tmp_path, "alpha", "beta", "gamma", budget=30),  # answers all in time
                              "test.fixture.alpha", "test.fixture.beta", "test.fixture.gamma")
        project = Project.for_folder(tmp_path)
        out = {}
        try:
            for name, cmd in [
                ("late deny beats early allow", "alpha=allow beta=sleep:0.2:deny gamma=allow"),
                ("early deny beats late allow", "alpha=sleep:1:allow beta=deny"),
                ("one allow is enough", "alpha=ask beta=sleep:0.1:allow gamma=error"),
                ("all ask", "alpha=ask beta=invalid gamma=ask"),
                ("two denials: the first plugin's message", "alpha=sleep:0.1:deny beta=deny"),
            ]:
                card = Card(cmd, project=project)
                t0 = time.monotonic()
                task = asyncio.ensure_future(rules.broker(card))
                while card.state == "pending" and not task.done():
                    await asyncio.sleep(0.002)
                settled = time.monotonic() - t0
                await task
                out[name] = (card, settled)
            return out, decisions(rules, "test.fixture.alpha")
        finally:
            await rules.aclose()

    out, alpha = run(main())
    card, _ = out["late deny beats early allow"]
    assert card.choices == [("reject-once", "Fixture beta via Escouade", "beta says no")]
    card, settled = out["early deny beats late allow"]
    assert card.choices[0][:2] == ("reject-once", "Fixture beta via Escouade") and settled < 1  # before alpha's
    card, _ = out["one allow is enough"]
    assert card.choices == [("allow-once", "Fixture beta via Escouade", None)]
    card, _ = out["all ask"]
    assert card.state == "pending" and card.choices == []
    card, _ = out["two denials: the first plugin's message"]
    assert card.choices[0][1:] == ("Fixture beta via Escouade", "beta says no")  # beta's came first
    assert re.sub(r"\(\d+ ms\)", "(N ms)", alpha[0]) == (
        "Decision  allowed Bash alpha=allow beta=sleep:0.2:deny gamma=allow (N ms) — not applied: "
        "Fixture beta refused it")


def test_a_user_click_before_the_plugins_wins_and_their_answer_is_journaled_not_applied(tmp_path: Path,
                                                                                         monkeypatch):
    log = tmp_path / "sent.log"
    monkeypatch.setenv("FIXTURE_LOG", str(log))  # what the plugin was sent: it thinks from then on

    async def main():
        rules = await started(make_rules(tmp_path, "alpha", budget=30), "test.fixture.alpha")  # its 1 s in time
        project = Project.for_folder(tmp_path)
        try:
            card = Card("rm -rf build alpha=sleep:1:deny", project=project)
            task = asyncio.ensure_future(rules.broker(card))
            await until(lambda: log.exists() and "permissions/decide" in log.read_text(), what="the plugin asked")
            assert card.choose("allow_once")  # the user clicks while the plugin thinks
            await task
            return card, decisions(rules, "test.fixture.alpha"), rules.broker.history[-1]
        finally:
            await rules.aclose()

    card, lines, decision = run(main())
    assert card.choices == [("allow-once", "you", None)]
    assert decision.verdict.decision == "deny" and decision.applied is False
    assert re.sub(r"\(\d+ ms\)", "(N ms)", lines[0]) == (
        "Decision  refused Bash rm -rf build alpha=sleep:1:deny (N ms): alpha says no — not applied: "
        "you answered first")


def test_a_plugin_not_started_yet_has_three_seconds_once(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("FIXTURE_START_DELAY_SLOWSTART", "1.0")
    monkeypatch.setenv("FIXTURE_START_DELAY_ALPHA", "3.5")

    async def main():
        rules = make_rules(tmp_path, "slowstart", "alpha")  # nothing started: the first request starts them
        rules.host.refresh()
        for p in rules.host.processes.values():
            await p.stop()  # as if the squad had not started them yet
        project = Project.for_folder(tmp_path)
        try:
            card = Card("x slowstart=allow alpha=allow", project=project)
            t0 = time.monotonic()
            await rules.broker(card)
            first = time.monotonic() - t0
            card2 = Card("y slowstart=ask alpha=allow", project=project)  # alpha is still starting: no 3 s again
            t1 = time.monotonic()
            await rules.broker(card2)
            second = time.monotonic() - t1
            return card, first, card2, second, decisions(rules, "test.fixture.alpha")
        finally:
            await rules.aclose()

    card, first, card2, second, alpha = run(main())
    assert card.choices[0][:2] == ("allow-once", "Fixture slowstart via Escouade")
    assert 2.9 <= first < 4.5  # slowstart answered after its 1 s start; alpha had 3 s and missed them
    assert card2.state == "pending" and second < 0.4
    assert alpha[0] == "Decision  did not decide Bash x slowstart=allow alpha=allow: no answer in time; " \
                       "Fixture slowstart allowed it"
    assert alpha[1] == "Decision  did not decide Bash y slowstart=ask alpha=allow: not running: starting; " \
                       "the user is asked"


def test_plans_and_questions_never_go_to_plugins(tmp_path: Path, monkeypatch):
    log = tmp_path / "requests.log"
    monkeypatch.setenv("FIXTURE_LOG", str(log))

    async def main():
        rules = await started(make_rules(tmp_path, "fast"), "test.fixture.fast")
        project = Project.for_folder(tmp_path)
        try:
            plan = Card(project=project, tool_call=ToolCall("t", tool_call_id="p", title="exit_plan_mode",
                                                            kind="switch_mode", raw_input={"plan": "fast=allow"}))
            question = Card(project=project, tool_call=ToolCall("t", tool_call_id="q", title="Which one?", kind="other",
                                                                meta={"claudeCode": {"toolName": "AskUserQuestion"}}))
            command = Card("fast=allow", project=project)
            for c in (plan, question, command):
                await rules.broker(c)
            return plan, question, command
        finally:
            await rules.aclose()

    plan, question, command = run(main())
    assert plan.state == question.state == "pending"
    assert command.choices
    decides = [x for x in log.read_text().splitlines() if '"permissions/decide"' in x]
    assert len(decides) == 1 and "fast=allow" in decides[0] and '"plan"' not in decides[0]


def test_on_off_per_project_private_projects_and_revoke(tmp_path: Path, monkeypatch):
    log = tmp_path / "requests.log"
    monkeypatch.setenv("FIXTURE_LOG", str(log))
    a = tmp_path / "a"
    b = tmp_path / "b"
    secret = tmp_path / "secret"
    for d in (a, b, secret):
        d.mkdir()
    # a project's own config may mark it private, never turn a plugin on
    (secret / ".escouade.yml").write_text("name: Secret\nprivate: true\nplugins:\n  test.fixture.fast: on\n"
                                          "  fast:\n    on: true\n")

    async def main():
        rules = await started(make_rules(tmp_path, "fast"), "test.fixture.fast")
        pa, pb, ps = Project.for_folder(a), Project.for_folder(b), Project.for_folder(secret)
        flagged = Project.for_folder(b, private=True)
        asked = {}
        try:
            async def ask(label, project):
                card = Card(f"{label} fast=allow", project=project)
                await rules.broker(card)
                asked[label] = card.state != "pending"

            await ask("a-default", pa)  # an installed plugin is on by default
            await ask("secret-default", ps)  # …but never for a private project
            await ask("flagged-default", flagged)  # private by the start flag
            rules.turn("fast", False, pa)
            await ask("a-off", pa)
            await ask("b-still-on", pb)
            rules.turn("fast", True, ps)
            await ask("secret-on", ps)
            rules.grant("fast", False)  # take back "Decides your agents' permissions"
            await until(lambda: rules.host.processes["test.fixture.fast"].state == "stopped"
                        and not rules.host.retiring, what="the revoked plugin stopped and gone")
            proc = rules.host.processes["test.fixture.fast"]
            stopped = proc.state
            await ask("b-revoked", pb)
            rules.grant("fast", True)
            await asyncio.wait_for(proc.wait_ready() if proc.running else rules.host.processes[
                "test.fixture.fast"].wait_ready(), 10)
            await ask("b-granted", pb)
            return asked, stopped, rules.states.path
        finally:
            await rules.aclose()

    asked, stopped, settings = run(main())
    assert asked == {"a-default": True, "secret-default": False, "flagged-default": False, "a-off": False,
                     "b-still-on": True, "secret-on": True, "b-revoked": False, "b-granted": True}
    assert ps_private(secret)
    assert stopped == "stopped"  # revoked: no longer runs
    sent = [x for x in log.read_text().splitlines() if '"permissions/decide"' in x]
    assert len(sent) == 4 and not any("secret-default" in x or "flagged-default" in x for x in sent)
    data = json.loads(settings.read_text())  # the state lives in the user's config, not in the project
    assert data["plugins"]["test.fixture.fast"]["decide"] is True
    assert not (secret / "plugins.json").exists()


def ps_private(folder: Path) -> bool:
    p = Project.for_folder(folder)
    return p.private and p.name == "Secret"


def test_an_updated_plugin_is_restarted_and_a_foreign_protocol_is_refused(tmp_path: Path, monkeypatch):
    import shutil

    folder = tmp_path / "plugins" / "fast"
    shutil.copytree(HERE / "fast", folder)
    (folder / "plugin.py").write_text((folder / "plugin.py").read_text().replace(
        "os.path.dirname(os.path.dirname(os.path.abspath(__file__)))", repr(str(HERE))))

    async def main():
        from escouade_nb.permissions import Journal, PluginStates, RulePlugins
        rules = RulePlugins(journal=Journal(tmp_path / "j"), states=PluginStates(tmp_path / "c" / "p.json"),
                            extra_dirs=[folder])
        rules.start_soon()
        proc = rules.host.processes["test.fixture.fast"]
        await asyncio.wait_for(proc.wait_ready(), 60)
        pid1 = proc.pid
        try:
            manifest = json.loads((folder / "escouade-plugin.json").read_text())
            manifest["version"] = "1.0.1"
            (folder / "escouade-plugin.json").write_text(json.dumps(manifest))
            monkeypatch.setenv("FIXTURE_PROTOCOL_FAST", "2")
            rules.start_soon()  # finds the update
            new = rules.host.processes["test.fixture.fast"]
            await until(lambda: new.state == "failed" and not process_alive(pid1)
                        and "speaks plugin protocol" in rules.journal.text("test.fixture.fast"),
                        what="the old plugin gone, the new one refused and journaled")
            return pid1, proc, new, rules.journal.text("test.fixture.fast")
        finally:
            await rules.aclose()

    pid1, old, new, text = run(main())
    assert new is not old and not process_alive(pid1)
    assert new.state == "failed"
    assert "Stop  updated on disk: restarting" in text
    assert "Error  speaks plugin protocol version 2; escouade_nb speaks version 1: not used" in text


def test_a_plugin_installed_while_the_squad_runs_is_started(tmp_path: Path, monkeypatch):
    import shutil

    from escouade_nb.permissions import Journal, PluginStates, RulePlugins, broker

    monkeypatch.setattr(broker, "WATCH_PERIOD", 0.05)
    root = tmp_path / "installed"
    root.mkdir()

    async def main():
        rules = RulePlugins(journal=Journal(tmp_path / "j"), states=PluginStates(tmp_path / "c" / "p.json"),
                            extra_dirs=[root])
        rules.start_soon()
        try:
            assert "test.fixture.fast" not in rules.host.processes
            folder = root / "fast"
            shutil.copytree(HERE / "fast", folder)
            (folder / "plugin.py").write_text((folder / "plugin.py").read_text().replace(
                "os.path.dirname(os.path.dirname(os.path.abspath(__file__)))", repr(str(HERE))))
            await until(lambda: getattr(rules.host.processes.get("test.fixture.fast"), "state", None) == "ready",
                        what="the installed plugin ready")
            card = Card("fast=allow", project=Project.for_folder(tmp_path))
            await rules.broker(card)
            return card
        finally:
            await rules.aclose()

    card = run(main())
    assert card.choices and card.choices[0][0] == "allow-once"


def test_a_plugin_gets_a_minimal_environment_and_what_its_manifest_declares(tmp_path: Path, monkeypatch):
    import os

    from escouade_nb.permissions.host import BASE_ENV, PYTHON_ENV

    monkeypatch.setenv("FAKE_API_KEY", "secret")  # a kernel secret
    monkeypatch.setenv("FIXTURE_DECLARED", "yes")  # named in the fixture's program.env
    monkeypatch.delenv("FIXTURE_DECLARED_UNSET", raising=False)  # named, but not set in the kernel
    monkeypatch.setenv("LC_TIME", "C")

    async def main():
        rules = await started(make_rules(tmp_path, "envdump"), "test.fixture.envdump")
        try:
            proc = rules.host.processes["test.fixture.envdump"]
            return await proc.call("permissions/decide", {"request": {"id": "r", "kind": "command", "tool": "Bash",
                                                                      "input": {"command": "env"}}})
        finally:
            await rules.aclose()

    result = run(main())
    env = result["environ"]
    assert "FAKE_API_KEY" not in env and "secret" not in env.values()
    assert "ESCOUADE_NB_TEST_SESSION" not in env  # nothing of the kernel's own either
    assert env["FIXTURE_DECLARED"] == "yes" and "FIXTURE_DECLARED_UNSET" not in env
    assert env["LC_TIME"] == "C"
    for name in ("PATH", "HOME"):
        assert env[name] == os.environ[name]
    allowed = set(BASE_ENV) | set(PYTHON_ENV) | {"FIXTURE_DECLARED"}
    assert {k for k in env if not k.startswith("LC_")} <= allowed, sorted(env)


def test_the_environment_rule_and_the_manifest_field(tmp_path: Path):
    from escouade_nb.manifest import Manifest
    from escouade_nb.permissions.host import plugin_environment, rule_plugin_spec

    kernel = {"PATH": "/bin", "HOME": "/h", "LANG": "fr_FR.UTF-8", "LC_ALL": "C", "TMPDIR": "/t",
              "OPENAI_API_KEY": "sk-1", "PYTHONPATH": "/src", "RULES_URL": "https://r"}
    assert plugin_environment(base=kernel) == {"PATH": "/bin", "HOME": "/h", "LANG": "fr_FR.UTF-8", "LC_ALL": "C",
                                               "TMPDIR": "/t"}
    assert plugin_environment(["RULES_URL", "NOT_SET"], python=True, base=kernel) == {
        "PATH": "/bin", "HOME": "/h", "LANG": "fr_FR.UTF-8", "LC_ALL": "C", "TMPDIR": "/t", "PYTHONPATH": "/src",
        "RULES_URL": "https://r"}
    (tmp_path / "rules.py").write_text("")
    base = {"id": "x.y", "name": "Y", "permissions": {"decide": True}}
    spec = rule_plugin_spec(Manifest.model_validate({**base, "program": {"python": "rules.py", "env": ["RULES_URL"]}}),
                            tmp_path / "escouade-plugin.json")
    assert spec.error is None and spec.env == ("RULES_URL",) and spec.python
    assert spec.environment(kernel)["RULES_URL"] == "https://r" and "OPENAI_API_KEY" not in spec.environment(kernel)
    bad = rule_plugin_spec(Manifest.model_validate({**base, "program": {"python": "rules.py", "env": ["A=1"]}}),
                           tmp_path / "escouade-plugin.json")
    assert bad.argv is None and "program.env lists variable names" in bad.error


def test_stopping_a_plugin_no_longer_wanted_is_owned_by_the_host(tmp_path: Path):
    async def main():
        rules = await started(make_rules(tmp_path, "fast"), "test.fixture.fast")
        proc = rules.host.processes["test.fixture.fast"]
        pid = proc.pid
        rules.grant("fast", False)  # no longer wanted: stopped in a task the host holds
        retiring = list(rules.host.retiring.values())
        await rules.aclose()
        return pid, retiring, proc, dict(rules.host.retiring)

    pid, retiring, proc, left = run(main())
    assert retiring == [proc] and left == {}
    assert proc.state == "stopped" and not process_alive(pid)


def test_kill_now_also_kills_a_plugin_being_stopped(tmp_path: Path):
    async def main():
        rules = await started(make_rules(tmp_path, "hang"), "test.fixture.hang")
        proc = rules.host.processes["test.fixture.hang"]
        pid = proc.pid
        rules.grant("hang", False)
        assert list(rules.host.retiring.values()) == [proc]
        rules.kill_now()  # as at interpreter exit: synchronous
        alive = process_alive(pid)
        await rules.aclose()
        return alive, pid

    alive, pid = run(main())
    assert not alive and not process_alive(pid)
