"""The kernel server's owner is known only through ``ToolOwner``: every call the server makes of
it is a member declared there (the optional ones in ``OPTIONAL_CALLS``, the one table), and the
engine's owner, ``KernelAccess``, has them all."""

import inspect
import re

from escouade_nb.engine.kernel_access import KernelAccess
from escouade_nb.kernel_mcp import server


def declared() -> set[str]:
    return {n for n in vars(server.ToolOwner) if not n.startswith("_")} | set(server.ToolOwner.__annotations__)


def calls_made(source: str) -> set[str]:
    """The owner's members the server's source calls by name, through its one lookup or around it."""
    return set(re.findall(r'_(?:tell_owner|owner_call)\([^,]+, "(\w+)"', source)) | \
        set(re.findall(r'getattr\((?:grant\.)?owner, "(\w+)"', source))


def test_every_call_of_the_owner_is_declared_on_tool_owner():
    source = inspect.getsource(server)
    made = calls_made(source)
    assert {"tool_done", "notice", "edited", "provenance", "ran_code", "ran_cell", "allow_read",
            "ask_execute_cell"} <= made
    assert made - {"name", "ask_run_code"} <= set(server.OPTIONAL_CALLS) <= declared()
    assert {"name", "ask_run_code"} | set(server.OPTIONAL_CALLS) == declared()


def test_the_engines_owner_has_every_member():
    assert declared() <= set(dir(KernelAccess))


def test_the_check_sees_an_undeclared_call():
    """A call by a name the Protocol does not declare is seen."""
    planted = 'x = _tell_owner(owner, "undeclared_hook")\ny = getattr(owner, "other")\n'
    assert calls_made(planted) == {"undeclared_hook", "other"}
    assert not calls_made(planted) <= declared()
