"""The views' wire to the front-end: the ops a conversation turns into rebuild exactly what it
holds, cost about a reply's own size, reach a late view as one snapshot, and say honestly who
answered; one widget model per view, none per item. The browser side is tests/browser."""

from __future__ import annotations

import asyncio
import html
import json
import re
import zlib

from ipywidgets.widgets.widget import _instances  # the live widget models of this process
import pytest

from escouade_nb.core.conversation import Conversation
from escouade_nb.widgets import front, render
from escouade_nb.widgets.feed import Feed, form_values, tool_status, utf16_len


class Page:
    """What the front-end keeps of an agent or turn view, by the rules of widgets/escouade.js:
    items by key; a message's blocks (HTML) and tail (text, counted in UTF-16 units)."""

    def __init__(self) -> None:
        self.items: dict[str, dict] = {}

    def apply(self, ops: list) -> None:
        for op in ops:
            kind, key = op[0], op[1]
            if kind == "it":
                blocks = re.search(r'<div class="esc-blocks">(.*?)</div><div class="esc-tail">(.*?)</div><div class="esc-extra">',
                                   op[2], re.S)
                self.items[key] = {"html": op[2], "meta": op[3],
                                   "blocks": blocks.group(1) if blocks else "",
                                   "tail": html.unescape(blocks.group(2)) if blocks else ""}
            elif kind == "tx":
                self.items[key]["tail"] += op[2]
            elif kind == "ex":
                self.items[key]["html"] += op[2]
            elif kind == "fz":
                item = self.items[key]
                item["blocks"] += op[2]
                tail16 = item["tail"].encode("utf-16-le")[2 * op[3]:]
                item["tail"] = tail16.decode("utf-16-le")

    def text(self, key: str) -> str:
        """The message as a person reads it: its blocks' text, then its tail."""
        item = self.items[key]
        blocks = html.unescape(re.sub(r"<[^>]+>", "", item["blocks"]))
        return blocks + item["tail"]


def chunks(text: str, size: int):
    for i in range(0, len(text), size):
        yield text[i:i + size]


def stream(conv: Conversation, text: str, size: int = 20, every: int = 1) -> tuple[Feed, Page, list]:
    """Stream ``text`` into ``conv`` in chunks, collecting ops every ``every`` chunks."""
    feed = Feed(conv, speaker="fake")
    page = Page()
    sent: list = []
    for n, piece in enumerate(chunks(text, size)):
        conv.apply({"sessionUpdate": "agent_message_chunk", "messageId": "m1",
                    "content": {"type": "text", "text": piece}})
        if n % every == 0:
            ops, _size, more = feed.ops()
            while True:
                page.apply(ops)
                sent.extend(ops)
                if not more:
                    break
                ops, _size, more = feed.ops()
    conv.close_messages()
    while True:
        ops, _size, more = feed.ops()
        page.apply(ops)
        sent.extend(ops)
        if not more:
            break
    return feed, page, sent


PROSE = ("Streaming replies are drawn as they come. " * 8 + "\n\n") * 12 + "A last line with emoji 🙂 and «quotes»."


def words(text: str) -> list[str]:
    return re.findall(r"\w+|[🙂«»]", text)


@pytest.mark.parametrize("size,every", [(1, 1), (20, 1), (20, 7), (5000, 1)])
def test_streamed_reply_is_rebuilt_exactly_whatever_the_pace(size, every):
    conv = Conversation()
    feed, page, _ = stream(conv, PROSE, size, every)
    key = feed.key(conv.items[0])
    assert words(page.text(key)) == words(PROSE)
    assert page.items[key]["tail"] == ""  # closed: all of it rendered as markdown
    assert "<p>" in page.items[key]["blocks"]


def test_a_burst_bigger_than_the_budget_is_rendered_over_several_batches():
    conv = Conversation()
    text = ("word " * 30 + "\n\n") * 200  # ~31 KB in one chunk
    feed = Feed(conv)
    page = Page()
    conv.apply({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hi.\n\n"}})
    page.apply(feed.ops()[0])
    conv.apply({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})
    batches = 0
    more = True
    while more:
        ops, _size, more = feed.ops()
        page.apply(ops)
        batches += 1
        assert sum(len(o[2]) for o in ops if o[0] == "fz") < 12_000  # a budget's worth of HTML per batch
    assert batches > 3
    assert words(page.text(feed.key(conv.items[0]))) == words("Hi.\n\n" + text)


def test_a_long_code_block_is_sent_as_text_once_then_highlighted_once():
    conv = Conversation()
    code = "```python\n" + "".join(f"def f{i}(x):\n    return x * {i}  # square-ish\n" for i in range(400)) + "```\n"
    feed, page, sent = stream(conv, code, 20, 5)
    raw = sum(len(o[2]) for o in sent if o[0] == "tx")
    frozen = [o for o in sent if o[0] == "fz"]
    assert len(code) - 100 <= raw <= len(code)  # the growing block: each character at most once as text
    assert len(frozen) == 1 and 'class="k"' in frozen[0][2]  # highlighted by Pygments, once, when it closed
    assert "def" in page.text(feed.key(conv.items[0]))
    from escouade_nb.widgets.render import HIGHLIGHT_MAX, markdown
    huge = "```python\n" + "x = 1\n" * (HIGHLIGHT_MAX // 6 + 1) + "```\n"
    assert '<span' not in markdown(huge) and "x = 1" in markdown(huge)  # too big to highlight: escaped


def test_utf16_drop_counts_astral_characters_as_javascript_does():
    assert utf16_len("a🙂b") == 4
    conv = Conversation()
    feed, page, _ = stream(conv, "🙂" * 50 + "\n\n" + "🙂 end", 3, 1)
    assert page.text(feed.key(conv.items[0])).replace("\n", "") == "🙂" * 50 + "🙂 end"


def test_a_late_view_gets_what_the_others_have():
    conv = Conversation()
    feed = Feed(conv)
    live = Page()
    for piece in chunks(PROSE[:900], 20):
        conv.apply({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": piece}})
        live.apply(feed.ops()[0])
    late = Page()
    late.apply([["it", k, h, m] for k, h, m in feed.snapshot_items()])  # what a snapshot carries
    key = feed.key(conv.items[0])
    assert late.items[key]["tail"] == live.items[key]["tail"]
    for piece in chunks(PROSE[900:], 20):  # then both follow the same ops
        conv.apply({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": piece}})
        ops = feed.ops()[0]
        live.apply(ops)
        late.apply(ops)
    assert words(late.text(key)) == words(live.text(key)) == words(PROSE)


def test_agent_html_is_escaped_and_links_checked():
    conv = Conversation()
    evil = "<script>alert(1)</script> <img src=x onerror=alert(2)> [x](javascript:alert(3))\n\n"
    feed, page, _ = stream(conv, evil, 7)
    blocks = page.items[feed.key(conv.items[0])]["blocks"]
    assert "<script>" not in blocks and "&lt;script&gt;" in blocks
    assert "<img" not in blocks and 'href="javascript' not in blocks


def edit_card(conv: Conversation):
    conv.apply({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Edit notes.txt", "kind": "edit",
                "status": "pending", "content": [{"type": "diff", "path": "/w/notes.txt", "oldText": "a\n",
                                                  "newText": "a\nb\n"}]})
    return conv.add_permission({"toolCallId": "c1"}, [
        {"optionId": "allow", "name": "Allow once", "kind": "allow_once"},
        {"optionId": "reject", "name": "Reject", "kind": "reject_once"}])


def test_a_permission_is_drawn_inside_its_tool_call_card_once():
    conv = Conversation()
    perm = edit_card(conv)
    feed = Feed(conv, speaker="fake")
    items = {k: (h, m) for k, h, m in feed.snapshot_items()}
    tool_html, tool_meta = items[feed.key(conv.tool_calls["c1"])]
    assert items[feed.key(perm)] == ("", {"c": "perm", "h": 1})  # not on its own
    assert tool_meta["p"] == 1 and tool_html.count("esc-diff-add") == 1  # the diff once
    assert "waiting for you" in tool_html and 'data-act="choose"' in tool_html and "Allow once" in tool_html
    conv.resolve_permission(perm, "selected", "reject", answered_by="you")
    conv.apply({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "failed"})
    ops = dict((o[1], o) for o in feed.ops()[0])
    tool_html = ops[feed.key(conv.tool_calls["c1"])][2]
    assert "rejected by you" in tool_html and "● failed" not in tool_html
    assert "data-act" not in tool_html  # answered: no buttons, and no line repeating the head's words
    assert "Rejected by you" not in re.sub(r"<[^>]+>", "", tool_html)


def test_status_words_say_who_refused():
    conv = Conversation()
    perm = edit_card(conv)
    conv.resolve_permission(perm, "selected", "reject", answered_by="Team rules via Escouade",
                            message="rm is not allowed", denied=True)
    call = conv.tool_calls["c1"]
    call.status = "failed"
    assert tool_status(call, perm) == ("refused by Team rules", "refused")
    call.status = "completed"
    assert tool_status(call, perm) == (None, None)  # it ran: the agent's own status


def test_an_answered_form_shows_its_fields():
    from escouade_nb.core.conversation import Question

    conv = Conversation()
    q = conv.add_question(Question("", message="Which database?", mode="form", schema={
        "type": "object", "properties": {"db": {"type": "string", "title": "Database", "enum": ["sqlite", "pg"]},
                                         "n": {"type": "integer", "title": "Replicas"}}, "required": ["db"]}))
    feed = Feed(conv)
    assert form_values(q, {"db": "1", "n": "3"}) == {"db": "pg", "n": 3}
    with pytest.raises(ValueError, match="not an integer"):
        form_values(q, {"db": "0", "n": "three"})
    conv.resolve_question(q, "accept", {"db": "pg", "n": 3})
    html_ = feed.render(q)[0]
    text = re.sub(r"<[^>]+>", " ", html_)
    assert "Database" in text and "pg" in text and "Replicas" in text and "{" not in text


def test_outbox_batches_a_stream_and_sends_a_card_at_once():
    async def go():
        sent: list[list] = []
        box = front.Outbox(lambda ops: sent.append(ops))
        for _ in range(50):  # 50 small pushes within a batch window
            box.push([["tx", "k", "x" * 20]], 20)
            await asyncio.sleep(0.001)
        assert sent == []  # nothing yet: under FLUSH_BYTES and FLUSH_WAIT
        box.push([["it", "card", "<b>card</b>", {"p": 1}]], 0, urgent=True)
        await asyncio.sleep(front.FLUSH_SOON + 0.05)
        assert len(sent) == 1 and len(sent[0]) == 51  # one message carried them all
        box.push([["tx", "k", "y" * (front.FLUSH_BYTES + 1)]], front.FLUSH_BYTES + 1)
        assert len(sent) == 2  # enough text waiting: it leaves at once
    asyncio.run(go())


def test_big_messages_travel_deflated():
    class Probe(front.FrontView):
        def state(self):
            return {"items": [["k", "<p>" + "hello " * 2000 + "</p>", {}]]}

    view = Probe(kind="agent")
    out: list = []
    view.send = lambda content, buffers=None: out.append((content, buffers))
    view.snapshot("r1")
    content, buffers = out[-1]
    assert content == {"k": "snap", "seq": 0, "z": 1}
    assert json.loads(zlib.decompress(bytes(buffers[0])))["state"]["items"][0][0] == "k"
    assert view.sent_bytes < 2_000  # 12 KB of HTML, deflated
    view.close()
    assert view.comm is None


def test_one_widget_model_per_view_none_per_item(tmp_path):
    from acp_clients import fake_agent  # the real fake agent
    from escouade_nb.widgets import AgentView, TurnView

    async def go():
        agent = fake_agent(tmp_path, record=False)
        await agent.ready()
        front.shared_layout()  # the one Layout all views share (made once per kernel)
        before = set(_instances)
        view = AgentView(agent)
        opened = set(_instances) - before
        turn = agent.send("edit notes.txt")
        card = await agent.next_permission(timeout=60)
        tv = TurnView(turn)
        await asyncio.sleep(0.1)
        view.press(card, "choose", "allow_once")
        await turn
        await agent.send("plan")
        await asyncio.sleep(0.5)
        now = set(_instances) - before
        assert len(opened) == 1  # the view, and no Layout of its own
        assert len(now) == 2  # ... and the turn view: nothing per item, per card, per turn
        assert "Allowed once by you" in repr(view) and "Allowed once by you" in repr(tv)
        for v in (view, tv):
            v.close()
        assert set(_instances) - before == set()
        await agent.close()
    asyncio.run(asyncio.wait_for(go(), 60))


def test_plain_paragraphs_shortcut_gives_markdown_its_exact_html():
    """Prose without a mark skips markdown-it's parse: the HTML must be byte for byte what
    markdown-it gives (random prose with Unicode spaces, quotes, digits, list-like words)."""
    import random

    from escouade_nb.widgets import render

    rng = random.Random(7)
    words = ["alpha", "Gamma", "delta,", "eps.", "2024", "x-y", "über", '"quoted"', "it's", "a+b", "100%", "(paren)",
             "http://x.org/a", "x=y", "🙂", "$5", "@me", "?", "^", "\u00a0nbsp", "\u3000", "\u2028ls", "\x0bvt", "\x85",
             "1)", "2.", "-x", "+y", "=z", ">q", "*b*", "_i_", "`c`", "&amp;", "<b>", "[l](u)"]
    plain = 0
    for _ in range(3000):
        lines = [rng.choice(["", " ", "\u00a0"]) if rng.random() < 0.15 else
                 " " * rng.choice([0, 0, 1, 3, 4]) + " ".join(rng.choice(words) for _ in range(rng.randint(1, 7)))
                 + rng.choice(["", " ", "  "]) for _ in range(rng.randint(1, 6))]
        text = "\n".join(lines) + rng.choice(["", "\n", "\n\n"])
        fast = render._plain_paragraphs(text)
        if fast is not None:
            plain += 1
            assert fast == render._md.render(text), repr(text)
    assert plain > 80  # the shortcut was taken often enough to mean something
    assert render._plain_paragraphs("a\x00b") is None  # markdown-it writes U+FFFD for it: its own parse
    assert render.markdown("One.\n\nTwo \"q\".\n\n") == '<div class="esc-md"><p>One.</p>\n<p>Two &quot;q&quot;.</p>\n</div>'


@pytest.mark.parametrize("size", [7, 300, 100_000])
def test_streaming_never_cuts_where_the_rendering_would_change(size):
    """A long table stays one table, a fence holding ``` stays one code block, a long log
    line is never broken inside a word — whatever the chunking (one burst included)."""
    table = "| file | lines | state |\n|---|---|---|\n" + "".join(f"| src/m{i}.py | {i} | ok |\n" for i in range(200))
    fence = "````markdown\nHere is code:\n```python\nx = 1\n```\n````\n\n"
    log = "".join(f"log line {i:04d} of a long run without a blank line\n" for i in range(600))
    for text in (table + "\nAfter the table.\n", fence + "Then prose.\n", log):
        conv = Conversation()
        feed, page, _ = stream(conv, text, size)
        blocks = page.items[feed.key(conv.items[0])]["blocks"]
        whole = render.markdown(text)
        if text.startswith("|"):
            assert blocks.count("<tr>") == 201 == whole.count("<tr>")
        elif text.startswith("````"):
            assert blocks.count("<pre") == 1 and "<h1" not in blocks and "Then prose" in blocks
        else:
            assert "line 0312 of" in html.unescape(re.sub(r"<[^>]+>", "", blocks))  # no word split at a cut
            assert words(page.text(feed.key(conv.items[0]))) == words(text)


def test_an_image_mid_reply_is_sent_once_and_the_text_keeps_streaming():
    conv = Conversation()
    feed = Feed(conv)
    page = Page()
    sent: list = []
    image = {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo" * 2000}
    for n, piece in enumerate(chunks(PROSE * 3, 40)):
        conv.apply({"sessionUpdate": "agent_message_chunk", "messageId": "m", "content": {"type": "text", "text": piece}})
        if n == 3:
            conv.apply({"sessionUpdate": "agent_message_chunk", "messageId": "m", "content": image})
        ops = feed.ops()[0]
        page.apply(ops)
        sent.extend(ops)
    key = feed.key(conv.items[0])
    assert sum(o[2].count("data:image/png") for o in sent if o[0] in ("it", "ex")) == 1  # the image once
    assert sum(o[0] == "it" for o in sent) == 1  # and the message never drawn whole again
    assert words(page.text(key)) == words(PROSE * 3)


def test_a_subagents_question_is_pinned_with_its_owner_and_its_form_error_shown_there():
    """A subagent's pending question marks the item that draws it as waiting (the pin), its
    key is found through the parent's feed, and an error under its form redraws that item —
    never a stray item of the parent's keyed like the child's."""
    from escouade_nb.core.conversation import Question

    conv = Conversation()
    conv.apply({"sessionUpdate": "subagent_update", "sessionId": "c1", "title": "explorer"})
    sub = conv.subagents["c1"]
    feed = Feed(conv, speaker="fake")
    feed.snapshot_items()  # drawn once: its nested feed exists
    q = sub.conversation.add_question(Question("", message="Which file?", mode="form", schema={
        "type": "object", "properties": {"n": {"type": "integer", "title": "Count"}}}))
    ops = feed.ops()[0]
    (owner,) = [o for o in ops if o[0] == "it"]
    assert owner[1] == feed.key(sub) and owner[3]["p"] == 1 and "Which file?" in owner[2]
    key = feed.key_of(q)
    assert key == f"{feed.key(sub)}/{q.key}" and feed.find(key) is q
    feed.form_error(q, "field 'n': 'x' is not an integer")
    ops = feed.ops()[0]
    assert [o[1] for o in ops if o[0] == "it"] == [feed.key(sub)]
    assert "is not an integer" in html.unescape(ops[0][2])


def test_the_squad_counts_a_parent_card_and_a_subagent_card_with_the_same_key():
    """Both wait, both count; the oldest is shown, its buttons keyed by the card itself."""
    from types import SimpleNamespace

    from escouade_nb.widgets.squad_view import SquadView

    parent, child = Conversation(), Conversation()
    p1 = edit_card(parent)
    p2 = edit_card(child)
    assert p1.key == p2.key  # each conversation counts its own keys
    agent = SimpleNamespace(name="a", harness=SimpleNamespace(harness=SimpleNamespace(speaker="A")),
                            pending_cards=[SimpleNamespace(permission=p1), SimpleNamespace(permission=p2)],
                            pending_questions=[])
    view = SquadView(SimpleNamespace(agents={}))
    try:
        card = view._oldest_card([agent])
        assert card["count"] == 2 and card["key"] == f"c{id(p1)}/{p1.key}"
        assert SquadView._pending_item(agent, f"c{id(p2)}/{p2.key}") is p2
    finally:
        view.close()
