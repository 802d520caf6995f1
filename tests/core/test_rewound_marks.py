"""The marks a rewind leaves (engine/review/checkpoints.py): the turns from the one rewound to on are
marked rewound in the conversation, said "(rewound)" in the text, drawn with a badge in the
views (live and saved); *Rewind to here* is offered on a prompt with a checkpoint, live only."""

from escouade_nb.core.conversation import Conversation, Message
from escouade_nb.core.render_text import render_items
from escouade_nb.widgets.feed import Feed


def conversation_of_three_turns() -> Conversation:
    c = Conversation()
    for n in ("one", "two", "three"):
        c.add_user_message([{"type": "text", "text": n}]).checkpointed = True
        c.apply({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"reply {n}"}})
        c.close_messages()
    return c


def test_mark_rewound_marks_every_item_from_that_prompt_on_once():
    c = conversation_of_three_turns()
    seen = []
    c.subscribe(seen.extend)
    assert c.mark_rewound(2) == 2
    assert [i.rewound for i in c.items] == [False, False, True, True, True, True]
    assert len(seen) == 4
    assert c.mark_rewound(3) == 0 and c.mark_rewound(9) == 0 and c.mark_rewound(0) == 0  # nothing new
    assert render_items(c.items).splitlines() == ["you: one", "agent: reply one", "you (rewound): two",
                                                  "agent: reply two", "you (rewound): three", "agent: reply three"]


def test_the_views_mark_rewound_turns_and_offer_rewind_on_the_others_live_only():
    c = conversation_of_three_turns()
    c.mark_rewound(3)
    users = [i for i in c.items if isinstance(i, Message) and i.role == "user"]
    live, saved = Feed(c), Feed(c, interactive=False)
    first, last = live.render(users[0])[0], live.render(users[2])[0]
    assert 'data-act="rewind"' in first and "Rewind to here" in first and "esc-rewound" not in first
    assert 'data-act="rewind"' not in last and "esc-rewound-badge" in last and last.startswith('<div class="esc-rewound">')
    assert live.render(c.items[-1])[0].startswith('<div class="esc-rewound">')  # the rewound reply too
    assert all("Rewind to here" not in saved.render(u)[0] for u in users)  # a saved form: nobody rewinds
    assert "esc-rewound-badge" in saved.render(users[2])[0]
    users[1].checkpointed = False
    assert "Rewind to here" not in live.render(users[1])[0]  # no checkpoint, no rewind
