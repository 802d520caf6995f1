"""The views: agent, turn, squad, journal, side-by-side turns (compare), sessions and
update — one anywidget model each (:class:`.front.FrontView`; front-end in the top-level
``widgets/``), each with a saved form for a notebook reopened without its kernel. They
subscribe to model changes with tokens and let go on ``close()``; they never speak ACP nor
run a process."""

from .agent_view import AgentView, TurnView, current_cell, views_of

__all__ = ["AgentView", "TurnView", "views_of", "current_cell"]
