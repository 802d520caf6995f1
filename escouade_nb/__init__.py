"""escouade_nb: run a squad of ACP coding agents from a Jupyter notebook.

``%load_ext escouade_nb`` registers the ``%escouade`` magics. From code::

    from escouade_nb import get_squad
    agent = get_squad().start("fake")         # on a running asyncio loop
    turn = agent.send("hello")
    result = await turn                        # .stop_reason, .text, .tool_calls
"""

__version__ = "0.1.0"

from .agent import Agent, AgentError, AgentExited, PermissionCard, Turn  # noqa: E402
from .squad import Squad, SquadError, get_squad  # noqa: E402

__all__ = ["Agent", "AgentError", "AgentExited", "PermissionCard", "Turn", "Squad", "SquadError", "get_squad",
           "load_ipython_extension"]


def load_ipython_extension(ipython) -> None:
    """Called by ``%load_ext escouade_nb``: registers the magics."""
    from .magics import load

    load(ipython)
