"""ipywidgets views: they subscribe to model changes with tokens, render throttled and let
go on ``close()``; they never speak ACP nor run a process."""

from .agent_view import AgentView, TurnView, current_cell, throttle_for, views_of
from .views import MessageView, PermissionView, PlanView, ToolCallView, TranscriptView

__all__ = ["AgentView", "TurnView", "TranscriptView", "MessageView", "ToolCallView", "PermissionView", "PlanView",
           "throttle_for", "views_of", "current_cell"]
