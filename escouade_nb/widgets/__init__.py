"""ipywidgets views: they subscribe to model changes and render throttled; they never speak ACP."""

from .agent_view import AgentView, TurnView, throttle_for, views_of
from .views import MessageView, PermissionView, PlanView, ToolCallView, TranscriptView

__all__ = ["AgentView", "TurnView", "TranscriptView", "MessageView", "ToolCallView", "PermissionView", "PlanView",
           "throttle_for", "views_of"]
