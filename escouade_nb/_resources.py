"""Where the files shipped beside the code are: the plugin folders and the views' front-end.

In an installed wheel they sit inside the package (``escouade_nb/plugins``,
``escouade_nb/widgets/static``); in a checkout, and so in an editable install, they are
the repository's top-level ``plugins/`` and ``widgets/`` (the design card's layout). One
function knows both places.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_IN_WHEEL = {"plugins": _PACKAGE / "plugins", "widgets": _PACKAGE / "widgets" / "static"}


def package_home() -> Path:
    """The folder that holds the ``escouade_nb`` package: a checkout's root in an editable install,
    ``site-packages`` in a wheel's (known from this module, which sits at the package's top, wherever a
    module that asks sits in the package's rooms)."""
    return _PACKAGE.parent


def shipped_dir(name: str) -> Path:
    """The folder of shipped ``name`` (``"plugins"`` or ``"widgets"``): inside the
    package when installed from a wheel, else the checkout's top-level folder.
    ``KeyError`` for another name. A checkout is told by the ``pyproject.toml`` beside
    the package (a stale ``escouade_nb/plugins`` left by an older layout is ignored).
    The folder returned may be missing in a broken install: "nothing shipped"."""
    inside = _IN_WHEEL[name]
    top = _PACKAGE.parent / name
    if (_PACKAGE.parent / "pyproject.toml").is_file() and top.is_dir():  # a checkout (editable install)
        return top
    return inside
