"""Forms (ACP ``elicitation/create``) validate (issue 14, "Permissions"): an answer is
checked against the requested schema with ``jsonschema`` before anything is sent — a
required field missing, a wrong type (integer vs number), a value outside an enum, a bad
format each raise a clear error naming the field — and the form's widget blocks Submit
while a required field is empty and sends only what the user filled in. A scripted agent
over real pipes asks; what it receives is checked exactly."""

from __future__ import annotations

import html
import json

import pytest
from scripted_agent import P_INIT, P_NEW, P_PROMPT, Script, run, until

from escouade_nb.widgets import AgentView
from view_helpers import buttons_of, form_fields

SCHEMA = {
    "type": "object", "title": "Deploy", "required": ["name", "replicas"],
    "properties": {
        "name": {"type": "string", "title": "Name"},
        "replicas": {"type": "integer", "title": "Replicas", "minimum": 1, "default": 2},
        "ratio": {"type": "number", "title": "Ratio"},
        "color": {"type": "string", "title": "Color", "enum": ["red", "green"]},
        "email": {"type": "string", "title": "Contact", "format": "email"},
        "day": {"type": "string", "title": "Day", "format": "date"},
        "confirm": {"type": "boolean", "title": "Confirm", "default": False},
    },
}


def _asks(answer: dict) -> str:
    """The agent asks the form twice in one turn; the client must answer ``answer``, then ``cancel``."""
    ask = ('A> {"jsonrpc":"2.0","id":%d,"method":"elicitation/create","params":{"sessionId":"s1",'
           '"message":"Deploy where?","mode":"form","requestedSchema":' + json.dumps(SCHEMA) + '}}')
    return f"""
{P_INIT}
{P_NEW}
{P_PROMPT}
{ask % 200}
C> {{"jsonrpc":"2.0","id":200,"result":{json.dumps(answer)}}}
A> {{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"end_turn"}}}}
"""


def with_form(tmp_path, answer: dict, body) -> None:
    """The scripted agent asks the form (its client must answer ``answer``); ``body(view, q)``
    (a coroutine) answers it through an agent view as the browser would, once its card is
    drawn; the turn must end and the agent's script be met exactly."""
    s = Script(tmp_path, _asks(answer))

    async def go():
        async with s.running() as agent:
            view = AgentView(agent)
            turn = agent.send("go")
            q = await agent.next_question(timeout=60)
            try:
                await until(lambda: view.feed.find(view.feed.key(q.question)) is not None, 60, "the form")
                await body(view, q)
            finally:
                view.close()
            assert (await turn).stop_reason == "end_turn"

    run(go())
    s.assert_ok()


def test_a_form_answer_is_checked_against_its_schema_before_it_is_sent(script):
    good = {"name": "web", "replicas": 3, "ratio": 1, "color": "green", "email": "ops@example.com",
            "day": "2026-03-01"}
    s = script(_asks({"action": "accept", "content": good}))

    async def go():
        async with s.running() as agent:
            turn = agent.send("go")
            q = await agent.next_question(timeout=60)
            wrong = [
                ({"replicas": 3}, "required field(s) missing: name"),
                ({"name": "web", "replicas": "3"}, "field 'replicas': '3' is not of type 'integer'"),
                ({"name": "web", "replicas": 2.5}, "field 'replicas': 2.5 is not of type 'integer'"),
                ({"name": "web", "replicas": 0}, "field 'replicas': 0 is less than the minimum of 1"),
                ({"name": "web", "replicas": 1, "ratio": "1.5"}, "field 'ratio': '1.5' is not of type 'number'"),
                ({"name": "web", "replicas": 1, "color": "blue"}, "field 'color': 'blue' is not one of ['red', 'green']"),
                ({"name": "web", "replicas": 1, "email": "nobody"}, "field 'email': 'nobody' is not a 'email'"),
                ({"name": "web", "replicas": 1, "day": "March 1st"}, "field 'day': 'March 1st' is not a 'date'"),
                ({"name": 7, "replicas": True}, "field 'name': 7 is not of type 'string'; "
                                                "field 'replicas': True is not of type 'integer'"),
            ]
            for content, message in wrong:
                with pytest.raises(ValueError) as err:
                    q.accept(content)
                assert str(err.value) == message
                assert q.state == "pending"  # nothing was sent: the scripted agent would fail on it
            assert q.accept(good)  # a number may be an integer (ratio 1)
            assert (await turn).stop_reason == "end_turn"

    run(go())
    s.assert_ok()


def test_the_form_blocks_submit_until_required_fields_are_filled_and_sends_only_what_was_touched(tmp_path):
    # replicas is required and shows the schema's default (2): given as shown; the optional
    # fields the user did not touch (ratio, color, email, day; confirm shows its default) are left out
    async def body(view, q):
        card = view.card_html(q)
        # nothing invented: empty boxes, no choice made, no yes/no pressed; defaults shown as given
        shown, missing = form_fields(card)
        assert shown == {"replicas": "2"}, shown  # confirm shows "no" (its default) but is not given
        assert 'data-field="name" data-required="1"' in card and 'data-field="replicas" data-required="1"' in card
        assert missing == ["Name"]  # Submit is blocked (the front-end says "To fill in: Name")
        fields, missing = form_fields(card, {"name": "web"})
        assert missing == [] and fields == {"name": "web", "replicas": "2"}
        submit = next(b for b in buttons_of(card) if b["label"] == "Submit")
        fields, _ = form_fields(card, {"name": "web", "ratio": "abc"})  # typed: parsed as a number
        view.act({"k": "act", "act": submit["act"], "key": submit["key"], "fields": fields})
        assert q.state == "pending"  # nothing sent
        assert "field 'ratio': 'abc' is not a number" in html.unescape(view.card_html(q))
        fields, _ = form_fields(card, {"name": "web", "ratio": "0.5"})
        view.act({"k": "act", "act": submit["act"], "key": submit["key"], "fields": fields})
        await until(lambda: q.state == "accept", 60, "the answer")
        assert q.question.answer == {"name": "web", "replicas": 2, "ratio": 0.5}
        settled = view.card_html(q)
        assert buttons_of(settled) == [] and "data-field" not in settled  # settled: no form left

    with_form(tmp_path, {"action": "accept", "content": {"name": "web", "replicas": 2, "ratio": 0.5}}, body)


def test_an_emptied_required_field_blocks_submit_again(tmp_path):
    async def body(view, q):
        card = view.card_html(q)
        _, missing = form_fields(card, {"name": "web", "replicas": ""})  # the default cleared: nothing given
        assert missing == ["Replicas"]  # the front-end says "To fill in: Replicas"
        decline = next(b for b in buttons_of(card) if b["label"] == "Decline")
        view.act({"k": "act", "act": decline["act"], "key": decline["key"]})

    with_form(tmp_path, {"action": "decline"}, body)


def test_every_button_of_a_form_does_what_it_says_and_cancel_cancels_it(tmp_path):
    """The buttons the form's card shows name actions the view has (a click on one the
    view does not know would do nothing); Cancel answers ``cancel``."""
    async def body(view, q):
        buttons = buttons_of(view.card_html(q))
        assert [b["label"] for b in buttons] == ["Submit", "Decline", "Cancel"]
        unknown = [b["act"] for b in buttons if b["act"] not in view.actions]
        assert unknown == [], f"buttons no action answers: {unknown}"
        cancel = buttons[2]
        view.act({"k": "act", "act": cancel["act"], "key": cancel["key"]})
        await until(lambda: q.state == "cancel", 60, "the cancel")

    with_form(tmp_path, {"action": "cancel"}, body)
