"""One exception root: every public exception class of the package is an
``EscouadeError`` (found by walking the modules, so a new one cannot forget), and keeps
the bases it had, so older ``except`` clauses still catch it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import acp

import escouade_nb
from escouade_nb import EscouadeError


def public_exceptions() -> dict[str, type[BaseException]]:
    """``module.Name`` -> class, for every exception class a module of the package
    defines under a public name (control-flow ones private to a module, ``_Name``, left out)."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(escouade_nb.__path__, "escouade_nb."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and not name.startswith("_") \
                    and value.__module__ == module.__name__:
                found[f"{module.__name__}.{name}"] = value
    return found


def test_every_public_exception_class_is_an_escouade_error():
    found = public_exceptions()
    assert {"escouade_nb.wire.errors.AgentError", "escouade_nb.engine.squad.SquadError"} <= set(found)  # seen
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, EscouadeError))
    assert outside == [], f"derive these from escouade_nb.EscouadeError (keeping their bases): {outside}"


def test_the_families_keep_their_bases():
    from escouade_nb import AgentError, AgentExited
    from escouade_nb.core.status import InvalidTransition
    from escouade_nb.permissions.jsonrpc import RemoteError
    from escouade_nb.wire.fs import FenceError

    assert issubclass(AgentError, RuntimeError) and issubclass(AgentExited, AgentError)
    assert issubclass(InvalidTransition, RuntimeError)
    assert issubclass(FenceError, acp.RequestError) and issubclass(RemoteError, acp.RequestError)
    assert EscouadeError.__module__ == "escouade_nb._errors" and "EscouadeError" in escouade_nb.__all__
