"""The views: the agent, turn and squad views are one anywidget model each (front-end in
the top-level ``widgets/``); journal, sessions, comparison and update views are ipywidgets.
They subscribe to model changes with tokens and let go on ``close()``; they never speak ACP
nor run a process."""

from .agent_view import AgentView, TurnView, current_cell, views_of

__all__ = ["AgentView", "TurnView", "views_of", "current_cell"]
