"""What ``Squad.check`` (run before a start, the magic's first look) says of the folder it is given."""

from __future__ import annotations

import pytest

from escouade_nb.engine.squad import Squad, SquadError


def test_a_file_given_as_the_folder_is_named_a_file(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a folder\n")
    with pytest.raises(SquadError, match="is a file, not a folder"):
        Squad().check("fake", cwd=notes)
    with pytest.raises(SquadError, match="does not exist"):
        Squad().check("fake", cwd=tmp_path / "missing")
