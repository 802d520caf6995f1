"""PEP 562 lazy names for a package façade: a name is imported on first use, then kept."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, names: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: ``names`` maps a public name to the
    submodule (relative to ``package``) that defines it; the value found is stored in
    ``namespace`` (the package's globals) so the next lookup is a plain one.
    ``AttributeError`` for any other name."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    return __getattr__
