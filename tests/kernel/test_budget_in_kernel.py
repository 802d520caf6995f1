"""Budgets in a real kernel (issue 24.4): the shipped fake agent reports 1,200 tokens a turn in
its prompt answers; ``set_budget`` pauses it on the budget card, drawn in its view with
Continue and Stop; a click on Continue (the message the browser sends) re-arms it; the head,
the squad table and its text say the spend against the budget; ``get_squad().set_budget``
sums the squad."""

import json

import pytest

from kernel_client import act, scratch_kernel, wait_for
from view_helpers import buttons_of

pytestmark = pytest.mark.kernel


def test_budget_card_in_the_view_continue_clicked_and_the_squad_sum(tmp_path):
    (tmp_path / "ws").mkdir()
    k = scratch_kernel(tmp_path)
    try:
        k.run("%load_ext escouade_nb\nimport asyncio, json\nfrom escouade_nb import get_squad\n"
              "from escouade_nb.widgets import views_of")
        out = k.run("a = %escouade fake --as a\nawait a.ready()\na.set_budget(tokens=1000)\n"
                    "t = await a.send('hello')\ncard = await a.next_permission(timeout=60)\n"
                    "print('TOKENS', t.tokens, a.status)\nprint('OPTIONS', [o['optionId'] for o in card.options])\n"
                    "print('CARD', repr(card))").text
        assert "TOKENS 1200 waiting" in out
        assert "OPTIONS ['continue', 'stop']" in out
        assert "Budget reached: 1,200 of 1,000 tokens (its budget)" in out
        model_id, html, head = json.loads(k.run(
            "v = views_of(a)[0]\nprint(json.dumps([v.model_id, v.card_html(card), v.state()['head']['budget']]))").text)
        assert head == {"text": "1,200 of 1,000 tokens", "over": True, "squad": None}
        buttons = {b["label"]: b for b in buttons_of(html)}
        assert set(buttons) >= {"Continue (another 1,000 tokens)", "Stop (send nothing)"}  # no turn runs
        button = buttons["Continue (another 1,000 tokens)"]
        act(k, model_id, {"act": "choose", "key": button["key"], "value": button["value"]})
        wait_for(k, "card.answered")
        out = k.run("print('LABEL', card.label)\nprint('LIMITS', a.budget.limits, a.status)\n"
                    "print('HEAD', json.dumps(views_of(a)[0].state()['head']['budget']))\n"
                    "%escouade squad").text
        assert "LABEL Allowed by you: Continue (another 1,000 tokens)" in out
        assert "LIMITS {'tokens': 2200.0} idle" in out
        assert 'HEAD {"text": "1,200 of 2,200 tokens", "over": false, "squad": null}' in out
        assert "budget=1,200 of 2,200 tokens" in out
        # the squad's budget: a second agent's turn makes the sum pass it
        out = k.run("a.set_budget()\nget_squad().set_budget(tokens=2000)\nb = %escouade fake --as b\n"
                    "await a.send('hello again')\nprint('PAUSED A', a.budget.card is not None)\n"
                    "await b.send('hello')\ncard = await b.next_permission(timeout=60)\n"
                    "print('SQUAD', get_squad().budget.view()['text'])\nprint('CARD', repr(card))\n"
                    "%escouade squad").text
        assert "PAUSED A False" in out  # 1,200 of 2,000
        assert "SQUAD 2,400 of 2,000 tokens" in out
        assert "Budget reached: 2,400 of 2,000 tokens (the squad's budget)" in out
        assert "squad budget: 2,400 of 2,000 tokens" in out
        out = k.run("card.choose('stop')\nprint('LIMITS', get_squad().budget.limits, b.status)").text
        assert "LIMITS {'tokens': 2000.0} idle" in out
    finally:
        k.run("await asyncio.gather(*(x.close() for x in get_squad().agents.values()))", allow_error=True)
        k.shutdown()
