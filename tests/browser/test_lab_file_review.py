"""Review after the fact in JupyterLab (``--review``, engine/review/file_review.py): the shipped fake agent edits a CRLF
file through our fs (it adds a line); its view's review strip lists the file with its diff; Reject clicked there puts the bytes
back (CRLF intact) and the conversation says so; the agent edits it again and Keep keeps it; nothing stays drawn."""

from __future__ import annotations
from browser_waits import until


EDIT = """t = w.send('edit notes.txt')
card = await w.next_permission(timeout=30)
card.choose('allow_once')
await t
print('pending', [e.rel for e in w.pending_edits])"""


def test_reject_and_keep_a_file_in_the_agents_view(nb):
    notes = nb.work / "notes.txt"
    notes.write_bytes(b"first line\r\nsecond line\r\n")
    nb.open(["%load_ext escouade_nb", f"w = %escouade fake --cwd {nb.work} --as w --review", EDIT, EDIT])
    nb.run_cell(0)
    nb.run_cell(1)
    view = nb.agent_view(1)
    nb.run_cell(2)
    until(lambda: "pending ['notes.txt']" in nb.output(2).inner_text(), "the file pends review after the turn")
    review = view.locator(".esc-review")
    until(lambda: "1 change pending review" in review.inner_text(), "the view lists the file")
    row = review.locator(".esc-review-file[data-file='notes.txt']")
    assert "edit of notes.txt" in row.inner_text()
    row.locator("summary").click()  # the diff, folded under the file
    until(lambda: row.locator(".esc-diff-add").count() >= 1, "the diff shown")
    diff = row.locator(".esc-diff").inner_text()
    assert "+Edited by the fake agent." in diff and "first line" in diff and "@@ -1,2 +1,3 @@" in diff

    row.get_by_role("button", name="Reject", exact=True).click()
    until(lambda: review.inner_text().strip() == "", "nothing stays drawn after the Reject")
    assert notes.read_bytes() == b"first line\r\nsecond line\r\n"
    until(lambda: view.get_by_text("File review: edit of notes.txt rejected (put back as it was)").count() == 1,
          "the conversation says it was put back")

    nb.run_cell(3)
    until(lambda: "pending ['notes.txt']" in nb.output(3).inner_text(), "the second edit pends review")
    row = view.locator(".esc-review .esc-review-file[data-file='notes.txt']")
    row.get_by_role("button", name="Keep", exact=True).click()
    until(lambda: view.locator(".esc-review").inner_text().strip() == "", "nothing stays drawn after the Keep")
    assert notes.read_bytes() == b"first line\r\nsecond line\r\nEdited by the fake agent.\n"  # as the agent wrote it
    until(lambda: view.get_by_text("File review: edit of notes.txt kept").count() == 1, "the Keep is said")
    assert not nb.errors, nb.errors
