"""The sandbox binds back, read-only, the checkout an editable install imports escouade_nb from when it sits under
``/tmp`` (CI's fresh clone does): the private ``/tmp`` would hide it from the stdio bridge and the agent's tests.
Found from the package's top (``_resources.package_home``), not from how deep the asking module sits: the move of
``sandbox.py`` into ``engine/launch/`` once made it bind ``escouade_nb/`` instead of the checkout."""

import sys
from pathlib import Path

import escouade_nb
from escouade_nb._resources import package_home
from escouade_nb.engine.launch import sandbox


def test_the_package_home_holds_the_imported_package():
    assert (package_home() / "escouade_nb").resolve() == Path(escouade_nb.__file__).resolve().parent


def test_a_checkout_under_tmp_is_read_back_whole(monkeypatch, tmp_path):
    clone = Path("/tmp") / tmp_path.name  # a name under /tmp (never made: _under_tmp only reads paths)
    monkeypatch.setattr(sandbox, "_package_home", lambda: clone)
    monkeypatch.setattr(sys, "prefix", "/opt/elsewhere")
    assert sandbox._under_tmp([]) == [clone]
