"""Released ACP agents driven through the product in a real kernel, offline.

For every agent (one kernel each, its environment pointing at the scripted model server):

* ``allow``: ``%escouade NAME`` starts it; a prompt asks for a shell command
  (``echo hello-from-agent | tee out.txt``); the permission card that appears is answered
  by the click message of its *allow once* button; the command's output is in the tool
  call's card; the final text arrives and the turn ends ``end_turn``;
* ``reject``: the same, answered with the *reject* button; what the agent really does
  (goes on, ends its turn silently, or cancels) is asserted, with the card and the turn;
* ``write``: a prompt asks for a file to be written; the file exists and the diff is shown
  (when the agent sends one).

The ``+sandbox`` benches (codex, gemini and claude-agent; ``ESCOUADE_AGENTS_SANDBOXED`` picks others)
run every scenario with ``%escouade NAME --sandbox --sandbox-port PORT`` (bubblewrap and its own
network by pasta, the scripted model server's port declared: skipped without ``bwrap`` or
``pasta``), and codex, told to write outside its folder, writes with its own shell and is refused
by the system.

Timings (start-to-ready, turn) and the client calls each agent made are printed and
collected in ``agent-report.json`` under pytest's temporary folder (``-s`` shows them).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent_configs import AGENTS, DROP, SUITE_TOKEN, sandbox_flags
from kernel_client import Kernel, act, buttons_of, wait_for
from model_server import FINAL_PREFIX, SHELL_COMMAND, WRITE_TEXT

pytestmark = pytest.mark.agents

HERE = Path(__file__).parent
SHELL_PROMPT = f"ESC-SHELL Please run this shell command: {SHELL_COMMAND}"
TURN_TIMEOUT = 45


@dataclass
class Expect:
    """What an agent does, from runs on this machine (see README "Real agents")."""

    shell_card: bool | str = True  # "terminal": only when the client offers terminal/*
    reject: str = "continue"  # "continue" (failed tool, more text), "end" (end_turn, no text), "cancelled"
    output: str = "card"  # where the command's output shows: "card", "raw_output" (not shown), "none"
    write_card: bool = True
    write_diff: bool = True
    write_calls: tuple[str, ...] = ()  # client methods the write scenario must call
    reject_fails_call: bool = True  # after a reject the agent reports its tool call failed


EXPECT: dict[str, Expect] = {
    # asks for `| tee` in its default accept-edits mode, writes files without asking
    "mistral-vibe": Expect(write_card=False),
    # without client terminal/* it runs its local bash without asking (and never completes the call)
    "fast-agent": Expect(shell_card="terminal", write_calls=("fs/read_text_file", "fs/write_text_file")),
    "kimi": Expect(reject="end", write_calls=("fs/write_text_file",)),
    "claude-agent": Expect(),
    # asks only for escalated commands (the model server asks for escalation); writes with its shell
    "codex": Expect(reject="cancelled", output="raw_output", write_diff=False),
    # permission "ask" for bash and edit is set in its test config (it allows all by default)
    "opencode": Expect(reject="end", write_diff=False, write_calls=("fs/write_text_file",)),
    # sends no output in its shell tool call, and never settles a rejected call (it stays
    # pending); "fs": false in its manifest (see there)
    "gemini": Expect(output="none", reject_fails_call=False),
    "goose": Expect(write_diff=False),
}

REPORT: dict[str, dict] = {}


AgentKernel = Kernel  # a kernel whose environment (inherited by the agents it starts) is the one given


@dataclass
class Bench:
    harness: str
    kernel: AgentKernel
    root: Path
    server: object
    expect: Expect
    sandboxed: bool = False  # started with --sandbox (a "+sandbox" bench: bwrap, engine/launch/sandbox.py)

    def start(self, name: str, flags: str = "") -> tuple[Path, float]:
        """``%escouade HARNESS --cwd DIR --as NAME`` (and ``flags``) and wait until ready;
        returns the folder and the start-to-ready seconds."""
        work = self.root / name
        work.mkdir()
        out = self.kernel.run(
            f"_t0 = time.monotonic()\n"
            f"agents[{name!r}] = %escouade {self.harness} --cwd {shlex.quote(str(work))} --as {name} {flags}"
            f"{sandbox_flags(self.server.url) if self.sandboxed else ''}\n"
            f"try:\n    await agents[{name!r}].ready()\n"
            f"except Exception as e:\n    print('NOT READY', e)\n"
            f"print('READY', round(time.monotonic() - _t0, 3))\n"
            f"calls[{name!r}] = []\n"
            f"agents[{name!r}].transport.observers.append(\n"
            f"    lambda d, m: d == 'in' and 'id' in m and 'method' in m and calls[{name!r}].append(m['method']))",
            timeout=120)
        assert "NOT READY" not in out.text, out.text
        return work, float(out.text.split("READY")[-1].split()[0])

    def turn(self, name: str, prompt: str, answer: str | None) -> dict:
        """Send ``prompt``; if a card comes, click the button of the first option of kind
        ``answer``; wait for the turn's end; return what the kernel saw."""
        k = self.kernel
        out = k.run(
            f"_a = agents[{name!r}]\n"
            f"_t1 = time.monotonic()\n"
            f"turns[{name!r}] = _turn = _a.send({prompt!r})\n"
            f"_card_task = asyncio.ensure_future(_a.next_permission())\n"
            f"_turn_task = asyncio.ensure_future(_turn.wait())\n"
            f"_turn_task.add_done_callback(lambda f, n={name!r}: ends.__setitem__(n, time.monotonic() - _t1))\n"
            f"_done, _ = await asyncio.wait({{_card_task, _turn_task}}, timeout={TURN_TIMEOUT},\n"
            f"                             return_when=asyncio.FIRST_COMPLETED)\n"
            f"if _card_task not in _done:\n    _card_task.cancel()\n"
            f"cards[{name!r}] = _card_task.result() if _card_task in _done else None\n"
            f"print('CARD', json.dumps(cards[{name!r}].options if cards[{name!r}] else None))",
            timeout=TURN_TIMEOUT + 15)
        options = json.loads(out.text.split("CARD", 1)[1])
        clicked = None
        if options is not None:
            assert answer is not None, f"unexpected permission card: {options}"
            wait_for(k, f"views_of(agents[{name!r}])[0].feed.find("
                        f"views_of(agents[{name!r}])[0].feed.key(cards[{name!r}].permission)) is not None")
            model_id, html = json.loads(k.run(f"_v = views_of(agents[{name!r}])[0]\n"
                                              f"print(json.dumps([_v.model_id, _v.card_html(cards[{name!r}])]))").text)
            buttons = [b for b in buttons_of(html) if b["act"] == "choose"]
            assert [b["value"] for b in buttons] == [o.get("optionId") for o in options], (buttons, options)
            index = next(i for i, o in enumerate(options) if o.get("kind") == answer)
            clicked = options[index]
            press = buttons[index]
            act(k, model_id, {"act": "choose", "key": press["key"], "value": press["value"]})  # a browser's click
        wait_for(k, f"turns[{name!r}].done", timeout=TURN_TIMEOUT)
        res = k.run(
            f"_r = turns[{name!r}]\n"
            f"_card = cards[{name!r}]\n"
            f"_err = None\n"
            f"try:\n    await _r\nexcept Exception as e:\n    _err = str(e)\n"
            # late updates (codex ends a tool call after the prompt's answer: a fixed 0.3 s once missed it in CI): until every
            # tool call of the turn is finished, within 5 s (one an agent leaves unfinished stays as it is)
            f"_late = time.monotonic() + 5\n"
            f"while time.monotonic() < _late and any(t.shown_status in ('pending', 'in_progress') "
            f"for t in _r.tool_calls):\n"
            f"    await asyncio.sleep(0.05)\n"
            f"_html = views_of(agents[{name!r}])[0].card_html(_card) if _card else None\n"
            f"print('RESULT', json.dumps({{'stop': _r.stop_reason, 'error': _err, 'text': _r.text,\n"
            f"  'secs': ends.get({name!r}),\n"
            f"  'card_label': _card.label if _card else None, 'card_state': _card.state if _card else None,\n"
            f"  'buttons_left': 'data-act=' in _html if _card else None,\n"
            f"  'calls': calls[{name!r}],\n"
            f"  'prompts': [i.text for i in agents[{name!r}].conversation.items if getattr(i, 'role', '') == 'user'],\n"
            f"  'tools': [{{'title': t.title, 'status': t.shown_status, 'content': t.content,\n"
            f"             'raw_output': t.raw_output, 'html': tool_body_html(t), 'diffs': t.diffs}}\n"
            f"            for t in _r.tool_calls]}}, default=str))")
        result = json.loads(res.text.split("RESULT", 1)[1])
        result["options"] = options
        result["clicked"] = clicked
        return result


SANDBOXED = [f"{name}+sandbox" for name in (os.environ.get("ESCOUADE_AGENTS_SANDBOXED")
                                                    or "codex,gemini,claude-agent").split(",")
             if name]
"""Benches whose agents run under bubblewrap (``--sandbox``): the same scenarios, the
agent's own writes confined to its folder and its manifest's ``acp.stateFolders``
(``ESCOUADE_AGENTS_SANDBOXED=kimi,opencode`` picks others: how each manifest's state
folders were checked)."""


@pytest.fixture(scope="module", params=[*AGENTS, "goose", *SANDBOXED])
def bench(request, model_server, tmp_path_factory):
    harness, _, variant = request.param.partition("+")
    if variant == "sandbox" and (shutil.which("bwrap") is None or shutil.which("pasta") is None):
        pytest.skip("bubblewrap or passt's pasta is not installed (apt-get install bubblewrap passt)")
    root = tmp_path_factory.mktemp(f"agent-{harness}")
    env = {k: v for k, v in os.environ.items() if k not in DROP}
    if harness == "goose":
        bin_dir = root / "bin"  # `goose` exists only on this kernel's PATH
        bin_dir.mkdir()
        launcher = bin_dir / "goose"
        launcher.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                            f"{shlex.quote(str(HERE / 'goose_like_agent.py'))} \"$@\"\n")
        launcher.chmod(0o755)
        env.update({"HOME": str(root / "home"), "OPENAI_HOST": model_server.url, "GOOSE_MODE": "approve",
                    "GOOSE_MODEL": "fake-model", "GOOSE_PATH_ROOT": str(root / "home" / "goose")})
        (root / "home").mkdir()
    else:
        spec = AGENTS[harness]
        bin_dir = spec.bin_dir()
        if bin_dir is None:
            pytest.skip(f"{harness} is not installed (scripts/install-agents.sh {harness})")
        env.update(spec.env(root / "home", model_server.url))
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["ESCOUADE_AGENT_SUITE"] = SUITE_TOKEN  # inherited by the agents: see conftest
    kernel = AgentKernel(root, env)
    kernel.run("%load_ext escouade_nb\nimport asyncio, json, time\nfrom escouade_nb.widgets import views_of\n"
               "from escouade_nb.widgets.render import tool_body_html\n"
               "agents, turns, cards, calls, ends = {}, {}, {}, {}, {}")
    expect = EXPECT[harness]
    REPORT[harness] = {"version": kernel.run(f"print(__import__('escouade_nb.manifest', fromlist=['x'])"
                                             f".discover().find({harness!r}).harness.tested.newest)").text.strip()}
    yield Bench(harness, kernel, root, model_server, expect, sandboxed=variant == "sandbox")
    try:
        kernel.run("for _a in list(agents.values()):\n    await _a.close()", allow_error=True, timeout=60)
    finally:
        kernel.shutdown()
    report = Path(tmp_path_factory.getbasetemp()) / "agent-report.json"
    report.write_text(json.dumps(REPORT, indent=2))


def _print(harness: str, scenario: str, ready: float, r: dict) -> None:
    REPORT.setdefault(harness, {})[scenario] = {
        "ready_s": ready, "turn_s": round(r["secs"] or 0, 3), "stop": r["stop"], "calls": r["calls"],
        "card": r["card_label"], "text": r["text"][-80:]}
    print(f"\n{harness} {scenario}: ready {ready:.2f} s, turn {r['secs'] or 0:.2f} s, stop {r['stop']}, "
          f"card {r['card_label']!r}, client calls {r['calls']}, text {r['text'][-60:]!r}")


def _all_loopback(server, mark: int) -> list[dict]:
    seen = server.since(mark)
    assert seen, "the agent made no request to the model server"
    assert all(e["client"] == "127.0.0.1" for e in seen)
    assert not [e for e in seen if e.get("answer") in ("404",) or str(e.get("answer", "")).startswith("500")], \
        [(e["path"], e.get("answer")) for e in seen]
    return seen


def test_shell_allow_once(bench):
    name = f"{bench.harness}-allow"
    work, ready = bench.start(name)
    mark = bench.server.mark()
    r = bench.turn(name, SHELL_PROMPT, "allow_once")
    _print(bench.harness, "allow", ready, r)
    assert r["error"] is None, r["error"]
    assert r["stop"] == "end_turn"
    assert FINAL_PREFIX in r["text"]
    assert (work / "out.txt").read_text().strip() == "hello-from-agent"
    assert r["prompts"] == [SHELL_PROMPT], r["prompts"]  # shown once, even by an agent that echoes it (vibe)
    asks, output = bench.expect.shell_card, bench.expect.output
    if asks == "terminal":  # asks (and shows the output) only when it runs through the client's terminal
        asks = "terminal/create" in r["calls"]
        output = output if asks else "none"  # its local bash call is never completed
    if asks:
        assert r["options"] is not None, "no permission card"
        # "Allowed once by you", or with the option's own name: "Allowed by you: Yes, proceed" (codex)
        assert r["card_state"] == "selected" and r["card_label"].startswith("Allowed") \
            and " by you" in r["card_label"], r["card_label"]
        assert r["buttons_left"] is False  # the answered card shows its answer, no button
    else:
        assert r["options"] is None
    assert r["tools"], "no tool call shown"
    if output == "card":  # the command's output is in its tool call's card
        assert any("hello-from-agent" in t["html"] and t["status"] == "completed" for t in r["tools"]), r["tools"]
    elif output == "raw_output":  # sent, but only as rawOutput, which the card hides
        assert any("hello-from-agent" in json.dumps(t["raw_output"]) for t in r["tools"]), r["tools"]
    _all_loopback(bench.server, mark)


def test_shell_reject(bench):
    name = f"{bench.harness}-reject"
    work, ready = bench.start(name)
    shell = bench.expect.shell_card is True  # else its write tool, which always asks
    prompt = SHELL_PROMPT if shell else f"ESC-WRITE {work / 'hello.txt'} Please write this file."
    mark = bench.server.mark()
    r = bench.turn(name, prompt, "reject_once")
    _print(bench.harness, "reject", ready, r)
    assert r["error"] is None, r["error"]
    assert r["options"] is not None, "no permission card"
    assert r["card_state"] == "selected" and r["card_label"].startswith("Rejected"), r["card_label"]
    assert not (work / ("out.txt" if shell else "hello.txt")).exists(), "the rejected tool ran"
    behaviour = bench.expect.reject
    if behaviour == "continue":  # the tool failed, the model was asked again, the turn went on
        assert r["stop"] == "end_turn"
        assert FINAL_PREFIX in r["text"]
        if bench.expect.reject_fails_call:
            assert any(t["status"] == "failed" for t in r["tools"]), r["tools"]
        assert not any(t["status"] == "completed" for t in r["tools"]), r["tools"]
    elif behaviour == "end":  # the turn ends at once, without another model call
        assert r["stop"] == "end_turn"
        assert FINAL_PREFIX not in r["text"]
    elif behaviour == "cancelled":
        assert r["stop"] == "cancelled"
        assert FINAL_PREFIX not in r["text"]
    seen = _all_loopback(bench.server, mark)
    if behaviour != "continue":
        assert not [e for e in seen if str(e.get("answer", "")).startswith(f"text {FINAL_PREFIX}")]


def test_write_file(bench):
    name = f"{bench.harness}-write"
    work, ready = bench.start(name)
    target = work / "hello.txt"
    mark = bench.server.mark()
    r = bench.turn(name, f"ESC-WRITE {target} Please write this file.", "allow_once")
    _print(bench.harness, "write", ready, r)
    assert r["error"] is None, r["error"]
    assert r["stop"] == "end_turn"
    assert FINAL_PREFIX in r["text"]
    assert target.read_text().strip() == WRITE_TEXT.strip()
    assert (r["options"] is not None) == bench.expect.write_card, r["options"]
    if bench.expect.write_diff:
        diffs = [d for t in r["tools"] for d in t["diffs"]]
        assert diffs and diffs[0]["path"] == str(target) and WRITE_TEXT.strip() in diffs[0]["newText"], r["tools"]
        assert "esc-diff" in "".join(t["html"] for t in r["tools"])
    for method in bench.expect.write_calls:
        assert method in r["calls"], r["calls"]
    _all_loopback(bench.server, mark)


def test_review_catches_the_write_through_fs_or_by_itself_and_reject_removes_it(bench):
    """``--review`` (engine/review/file_review.py): the file the agent wrote — through our fs, or with its own tools,
    which a client-side diff never sees — pends review once the turn returns; Reject removes the new file."""
    name = f"{bench.harness}-review"
    work, ready = bench.start(name, "--review")
    target = work / "hello.txt"
    r = bench.turn(name, f"ESC-WRITE {target} Please write this file.", "allow_once")
    _print(bench.harness, "review", ready, r)
    assert r["stop"] == "end_turn" and target.exists(), r
    out = bench.kernel.run(f"_a = agents[{name!r}]\n"
                           f"print('EDITS', json.dumps([[e.rel, e.change, sorted(e.through)] for e in _a.pending_edits]))\n"
                           f"print('REJECTED', await _a.pending_edits[0].reject())").text
    edits = json.loads(out.split("EDITS", 1)[1].split("\n", 1)[0])
    through = ["fs"] if "fs/write_text_file" in r["calls"] else ["itself"]
    assert edits == [["hello.txt", "create", through]], (edits, r["calls"])
    assert "REJECTED rejected" in out and not target.exists()
    REPORT[bench.harness]["review"] = {"through": through}


def test_the_mode_menu_shows_the_agents_real_mode(bench):
    """The Escouade mode shown is the agent's own current mode mapped back through the
    manifest (vibe starts in accept-edits, codex read-only), or none, said in the
    conversation; the squad's row says the same."""
    name = f"{bench.harness}-mode"
    bench.start(name)
    bench.kernel.run(f"from escouade_nb.engine.controls import acp_mode_of\n"
                     f"from escouade_nb.widgets.squad_view import agent_row\n"
                     f"_a = agents[{name!r}]\n"
                     f"_menus = lambda: {{c['key']: c for c in views_of(_a)[0].head()['controls']}}")
    wait_for(bench.kernel, "'escouade_mode' not in _menus() or _menus()['escouade_mode']['value'] == _a.escouade_mode", 5)
    out = bench.kernel.run(
        "print('MODE', json.dumps({'escouade': _a.escouade_mode, 'own': _a.controls.agent_mode(),\n"
        "  'mapped': acp_mode_of(_a.harness, _a.escouade_mode) if _a.escouade_mode else None,\n"
        "  'offered': list(_a.escouade_modes()), 'row': agent_row(_a)['mode'],\n"
        "  'view': _menus()['escouade_mode']['value'] if 'escouade_mode' in _menus() else 'no menu',\n"
        "  'notices': [i.text for i in _a.conversation.items if type(i).__name__ == 'Notice']}))")
    mode = json.loads(out.text.split("MODE", 1)[1])
    print(f"\n{bench.harness} mode: {mode}")
    REPORT.setdefault(bench.harness, {})["mode"] = mode
    expected = EXPECT_MODE.get(bench.harness, "default")
    assert mode["escouade"] == expected, mode
    if mode["own"] is not None and mode["escouade"] is not None and mode["offered"]:
        assert mode["mapped"] == mode["own"], mode  # the menu says the agent's real mode
    if mode["escouade"] is None:
        assert any("none of Escouade's modes" in n for n in mode["notices"]), mode
    if len(mode["offered"]) > 1:
        assert mode["view"] == mode["escouade"], mode


EXPECT_MODE: dict[str, str | None] = {
    "mistral-vibe": "acceptEdits",  # vibe 3.0.2 starts in accept-edits
    "codex": "readOnly",  # codex-acp 0.16 starts read-only
}
"""The Escouade mode each agent starts in, mapped from its own (``default`` when not listed)."""


def test_a_command_run_without_asking_after_a_grant_says_so(bench):
    """Answer a command's card with the agent's "always" option, then ask for a command of
    the same tool again: an agent that does not ask again (measured: vibe, kimi, gemini,
    claude-agent, opencode, fast-agent) gets its tool card saying which earlier answer let it;
    one that asks again (codex's prefix rule, goose) gets a card as usual."""
    name = f"{bench.harness}-grant"
    bench.start(name)
    first = bench.turn(name, SHELL_PROMPT, "allow_always")
    if first["options"] is None:
        pytest.skip(f"{bench.harness} ran the command without asking at all")
    assert first["card_state"] == "selected", first
    second = bench.turn(name, SHELL_PROMPT + " (again)", "allow_once")
    assert second["error"] is None, second["error"]
    notes = json.loads(bench.kernel.run(
        f"print(json.dumps([t.not_asked for t in turns[{name!r}].tool_calls]))").text)
    if second["options"] is None:  # not asked: the card of the call says why, as far as the client knows
        assert any(n and n.startswith("not asked: earlier in this session you chose") for n in notes), notes
    else:
        assert not any(notes), notes


def test_the_session_lifecycle_where_offered(bench):
    """Whichever of ``session/list``, ``session/close`` and ``session/resume`` the agent's
    ``initialize`` offers (``sessionCapabilities``) is driven through the product: after a
    prompt, ``agent.sessions()`` lists its session; closing the agent sends
    ``session/close`` and the agent answers it; ``%escouade resume`` then reattaches with
    ``session/resume`` (no replay). What each agent offered and did goes in the report."""
    name = f"{bench.harness}-sessions"
    k = bench.kernel
    bench.start(name)
    k.run(f"from escouade_nb.wire import transcript as _tr\n_a = agents[{name!r}]")
    caps = json.loads(k.run("print(json.dumps(_a.agent_capabilities.get('sessionCapabilities') or {}))").text)
    found: dict = {"offered": sorted(caps)}
    REPORT.setdefault(bench.harness, {})["sessions"] = found
    print(f"\n{bench.harness} sessionCapabilities: {sorted(caps)}")
    if not {"list", "close", "resume"} & set(caps):
        pytest.skip(f"{bench.harness} offers none of session/list, session/close, session/resume")
    first = bench.turn(name, SHELL_PROMPT, "allow_once")  # the session has a turn: agents list only those
    assert first["error"] is None, first["error"]
    session_id = k.run("print(_a.session_id)").text.strip()
    if "list" in caps:
        out = k.run("try:\n    _p = await _a.sessions()\n"
                    "    print('LIST', json.dumps({'ids': [s['sessionId'] for s in _p.sessions], 'error': None}))\n"
                    "except Exception as e:\n    print('LIST', json.dumps({'ids': [], 'error': repr(e)}))",
                    timeout=60)
        listed = json.loads(out.text.split("LIST", 1)[1])
        found["list"] = {"listed": session_id in listed["ids"], "count": len(listed["ids"]), "error": listed["error"]}
        assert listed["error"] is None and session_id in listed["ids"], (session_id, listed)
    k.run("await _a.close()", timeout=60)
    out = k.run("_recs = list(_tr.read(_a.transcript.path))\n"
                "_close = [r.msg for r in _recs if r.kind == 'out' and (r.msg or {}).get('method') == 'session/close']\n"
                "_ans = [r.msg for r in _recs if r.kind == 'in' and _close and (r.msg or {}).get('id') == _close[0]['id']]\n"
                "print('CLOSE', json.dumps({'sent': len(_close), 'answer': _ans[0] if _ans else None}))")
    closed = json.loads(out.text.split("CLOSE", 1)[1])
    found["close"] = closed
    if "close" in caps:
        assert closed["sent"] == 1 and closed["answer"] is not None and "result" in closed["answer"], closed
    else:
        assert closed["sent"] == 0, closed
    if "resume" in caps:
        out = k.run(f"_b = %escouade resume {name}\n"
                    "try:\n    await _b.ready()\n    _err = None\nexcept Exception as e:\n    _err = repr(e)\n"
                    "print('RESUME', json.dumps({'resumed': bool(_b.session and _b.session.resumed), "
                    "'same': _b.session_id, 'error': _err}))\nagents['resumed-' + _b.name] = _b", timeout=120)
        resumed = json.loads(out.text.split("RESUME", 1)[1])
        found["resume"] = {"resumed": resumed["resumed"], "same_session": resumed["same"] == session_id,
                           "error": resumed["error"]}
        assert resumed["error"] is None and resumed["resumed"] and resumed["same"] == session_id, resumed
    print(f"{bench.harness} sessions: {found}")


def test_a_sandboxed_agent_writing_outside_its_folder_with_its_own_shell_is_refused_by_the_system(bench):
    """codex writes files with its own shell (no client fs): under ``--sandbox`` a write
    outside its folder (here /var/tmp: not the sandbox's private /tmp) fails with the
    system's own error, which comes back in its tool call, and the file never appears."""
    if not bench.sandboxed or bench.harness != "codex":
        pytest.skip("only the sandboxed bench of an agent that writes with its own shell (codex)")
    outside = Path(tempfile.mkdtemp(prefix="escouade-sandbox-agent-", dir="/var/tmp"))
    try:
        target = outside / "escaped.txt"
        name = f"{bench.harness}-outside"
        bench.start(name)
        r = bench.turn(name, f"ESC-WRITE {target} Please write this file.", "allow_once")
        _print(bench.harness, "outside", 0, r)
        assert not target.exists(), "the sandboxed agent wrote outside its folder"
        assert "Read-only file system" in json.dumps(r["tools"]), r["tools"]
    finally:
        shutil.rmtree(outside, ignore_errors=True)
