"""Every run on record (issue 21, item 5): a run of the kernel's ``run_code`` allowed by the
user and one denied, with no rule plugin installed, are written down — the transcript file
has the code whole, who answered, the result's size and status; the journal has both
decisions; ``%escouade resume`` in a new kernel shows both cards as they read live, in
their place, with the code and the output; ``%escouade export`` shows who answered and the
refused run as refused. Real kernels, the shipped ``fake`` agent, its real MCP calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_client import Kernel, scratch_kernel, wait_for

pytestmark = pytest.mark.kernel

ALLOWED = 'x = 6 * 7\nprint("x is", x)'
DENIED = "import shutil\nshutil.rmtree('build')"
CARDS = ("[(i.request.tool_call_id, i.request.raw_input, answer_label(i)) for i in a.conversation.items "
         "if type(i).__name__ == 'Permission' and i.request.title == 'Run code in the kernel']")
ORDER = ("[type(i).__name__ + (':' + answer_label(i) if type(i).__name__ == 'Permission' else '') for i in a.conversation.items"
         " if type(i).__name__ in ('Permission', 'Message') and getattr(i, 'role', 'user') == 'user' or "
         "type(i).__name__ == 'Permission']")


def _records(tmp: Path) -> list[dict]:
    (path,) = (tmp / "transcripts").glob("rec-*.jsonl")
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [r["data"] for r in lines if r.get("kind") == "event" and r.get("event") == "kernel_tool"]


def _export(kernel: Kernel, name: str) -> list[tuple[str, str]]:
    kernel.run(f"%escouade export rec {name}")
    wait_for(kernel, f"__import__('os').path.exists({name!r})", timeout=30)
    nb = json.loads(Path(kernel.run("import os; print(os.getcwd())").text.strip(), name).read_text())
    return [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Kernel 1: the fake agent runs one code the user allows, one the user denies, one
    read; the cards' labels and order, and the export, as they were live. Kernel 2: the
    agent resumed from its transcript, the same looked at again."""
    tmp = tmp_path_factory.mktemp("record")
    (tmp / "ws").mkdir()
    (tmp / "plugins").mkdir()  # no rule plugin installed
    seen: dict = {"tmp": tmp}
    first = scratch_kernel(tmp)
    try:
        first.run("%load_ext escouade_nb\nfrom escouade_nb.core.render_text import answer_label\n"
                  "async def next_open(agent):\n"
                  "    while (card := await agent.next_permission(timeout=60)).answered:\n"
                  "        pass\n"
                  "    return card\n"
                  "a = %escouade fake --as rec\nawait a.ready()")
        wait_for(first, "a.kernel_tools_state[0] == 'connected'", timeout=30)
        first.run(f"t = a.send('run code ' + {ALLOWED!r})\ncard = await next_open(a)\ncard.choose('run')\n"
                  "r1 = await t")
        first.run(f"t = a.send('run code ' + {DENIED!r})\ncard = await next_open(a)\ncard.choose('dont-run')\n"
                  "r2 = await t")
        first.run("r3 = await a.send('variables')")
        out = first.run("print(r1.text)\nprint(r2.text)\nprint(x)").text
        assert "mcp__escouade__run_code returned: stdout:\nx is 42" in out
        # refused on the agent's own request (the card, folded by identity): it never called the server
        assert "I did not call mcp__escouade__run_code: permission refused." in out
        seen["live_cards"] = first.run(f"print({CARDS})").text.strip()
        seen["live_order"] = first.run(f"print({ORDER})").text.strip()
        seen["live_nb"] = _export(first, "live.ipynb")
        first.run("await a.close()", allow_error=True)
    finally:
        first.shutdown()
    second = scratch_kernel(tmp)
    try:
        second.run("%load_ext escouade_nb\nfrom escouade_nb.core.render_text import answer_label\n"
                   "a = %escouade resume rec")
        seen["resumed_cards"] = second.run(f"print({CARDS})").text.strip()
        seen["resumed_order"] = second.run(f"print({ORDER})").text.strip()
        seen["resumed_run"] = second.run(
            "c = [i for i in a.conversation.items if type(i).__name__ == 'Permission' and "
            f"i.request.raw_input == {{'code': {ALLOWED!r}}}]\n"
            "print([b['content']['text'] for i in c for b in i.tool_call.content if b.get('type') == 'content'])\n"
            "print([getattr(i.tool_call, 'kernel_run', None) for i in c])").text
        seen["resumed_nb"] = _export(second, "resumed.ipynb")
    finally:
        second.shutdown()
    return seen


def test_the_transcript_file_has_each_run_with_its_code_who_answered_and_how_it_ended(runs):
    records = _records(runs["tmp"])
    cards = [r for r in records if r["phase"] == "card"]
    assert [c["arguments"] for c in cards] == [{"code": ALLOWED}, {"code": DENIED}]
    assert [o["name"] for o in cards[0]["options"]] == ["Run", "Run without asking again in this session",
                                                        "Don't run"]
    assert cards[0]["title"] == "Run code in the kernel" and cards[0]["call"]
    answers = {r["call"]: r for r in records if r["phase"] == "answer"}
    results = {r["call"]: r for r in records if r["phase"] == "result"}
    allowed, denied = cards[0]["call"], cards[1]["call"]
    assert (answers[allowed]["answered_by"], answers[allowed]["option_id"]) == ("you", "run")
    assert (answers[denied]["answered_by"], answers[denied]["option_id"]) == ("you", "dont-run")
    assert results[allowed]["status"] == "ok" and results[allowed]["output"] == "stdout:\nx is 42"
    assert results[allowed]["chars"] == len("stdout:\nx is 42")
    assert denied not in results  # refused on the agent's own request: the server never received the call
    (read,) = [r for r in records if r["phase"] == "read"]
    assert (read["tool"], read["allowed_by"], read["status"]) == ("list_variables", "escouade_nb", "ok")
    assert read["chars"] > 0


def test_the_journal_has_each_decision_without_a_rule_plugin(runs):
    calls = [r["call"] for r in _records(runs["tmp"]) if r["phase"] == "card"]
    path = runs["tmp"] / "journal" / "kernel-tools.jsonl"
    journal = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    assert [(e["kind"], e["verdict"], e["tool"], e.get("by")) for e in journal] == [
        ("Answer", "allowed", "mcp__escouade__run_code", "you"),
        ("Answer", "refused", "mcp__escouade__run_code", "you"),
        ("Answer", "allowed", "mcp__escouade__list_variables", "escouade_nb")]
    assert [e.get("requestId") for e in journal] == [*calls, None]  # the cards' tool call ids
    assert journal[0]["target"] == 'x = 6 * 7 print("x is", x)' and journal[0]["agent"] == "rec"


def test_a_resume_shows_both_run_cards_as_they_read_live(runs):
    assert "Allowed by you: Run" in runs["live_cards"] and "Rejected by you: Don't run" in runs["live_cards"]
    assert runs["resumed_cards"] == runs["live_cards"]  # the same cards, code whole, same labels
    assert runs["resumed_order"] == runs["live_order"]  # in their place among the prompts and other cards
    assert "'stdout:\\nx is 42'" in runs["resumed_run"]  # the output on the card's call
    assert "'status': 'ok'" in runs["resumed_run"] and "'by': 'you'" in runs["resumed_run"]


def test_the_export_shows_who_answered_and_the_refused_run_as_refused(runs):
    for nb in (runs["live_nb"], runs["resumed_nb"]):
        assert [s for k, s in nb if k == "code"] == [ALLOWED]  # the denied code is no cell that would run
        assert any("Rejected by you: Don't run, not run" in s and "shutil.rmtree" in s for _, s in nb)
        assert any(s.startswith("**output** of the code above") and "Allowed by you: Run" in s
                   and "ran, 15 characters" in s for _, s in nb)
    assert [c for c in runs["resumed_nb"][1:] if not c[1].startswith("> **info:**")] == \
        [c for c in runs["live_nb"][1:] if not c[1].startswith("> **info:**")]
