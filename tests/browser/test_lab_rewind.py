"""*Rewind to here* in JupyterLab: the shipped fake agent writes two files over two turns in
a folder outside git (its checkpoints in a shadow repository elsewhere); on the first
prompt, *Rewind to here* opens its confirm step, *Rewind* puts the folder back as it was
before that turn (empty), and the view marks both turns rewound and says what was done."""

from __future__ import annotations

import os
from browser_waits import until


TURNS = """for what in ("edit notes.txt", "edit second.txt"):
    turn = demo.send(what)
    card = await demo.next_permission(timeout=20)
    card.choose("allow_once")
    await turn
print(sorted(os.listdir(demo.cwd)), [c.turn for c in demo.checkpoints])"""


def test_rewind_to_here_in_the_view_puts_the_folder_back(nb):
    page = nb.page
    nb.open(["%load_ext escouade_nb\nimport os", f"demo = %escouade fake --cwd {nb.work} --as rewinder", TURNS])
    nb.run_cell(0)
    nb.run_cell(1)
    view = nb.agent_view(1)
    nb.run_cell(2)
    until(lambda: "['notes.txt', 'second.txt'] [1, 2]" in nb.output(2).inner_text(), "two turns, two checkpoints")
    first = view.locator(".esc-user").first
    until(lambda: first.locator(".esc-rewind > summary").count() == 1, "Rewind to here on the first prompt")
    until(lambda: view.locator(".esc-rewind").count() == 2, "one Rewind to here per turn")  # the second's may draw later
    confirm = first.get_by_role("button", name="Rewind", exact=True)
    assert not confirm.is_visible()  # behind its confirm step
    first.locator(".esc-rewind > summary").click()
    until(confirm.is_visible, "the confirm step opens")
    assert "go on from here" in first.locator(".esc-rewind-ask").inner_text()
    confirm.click()
    until(lambda: view.get_by_text("Rewound to before turn 1", exact=False).count() == 1, "the view says so")
    until(lambda: view.locator(".esc-user .esc-rewound-badge").count() == 2, "both turns marked rewound")
    assert sorted(os.listdir(nb.work)) == []  # as it was before the first turn
    assert view.locator(".esc-rewind").count() == 0  # rewound prompts offer no rewind
    assert view.locator(".esc-rewound").count() >= 2
    nb.shot(view, "rewind")
    assert not nb.errors, nb.errors
    page.keyboard.press("Escape")
