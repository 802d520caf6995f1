"""The incoming-message policy of one ACP session, on raw JSON-RPC dicts.

The transport hands every object from the agent to :meth:`Router.intercept` before the
SDK sees it. The router decides, synchronously and in arrival order:

* ``session/update`` notifications are folded here (``fold(update)``), never by the SDK
  (which dispatches one task per notification, reordering them and dropping unknown
  kinds). Updates that come before ``session/new`` (or ``load``) answers are kept and
  folded by :meth:`opened` (some agents stream right away); an update for another
  session is dropped.
* ``$/cancel_request`` (the agent withdraws a request it sent): ``withdrawn(tool_call_id)``
  is told when the request was a ``session/request_permission``, so its card is closed;
  a withdrawal that arrives before the card exists is remembered (:meth:`take_withdrawn`).
* a ``session/request_permission``'s ``toolCall`` is kept as it came in ``tool_calls``
  (by ``toolCallId``), for the fields the SDK's model drops (the stable ``name``).
* child sessions (ACP subagents): a ``subagent_update`` on our session announces a child
  (its ``sessionId`` goes in ``children``); the child's own ``session/update``s are folded
  with ``fold_child(session_id, update)`` and its requests (a permission, ``fs/*``,
  ``terminal/*``) go on to the SDK like ours.
* a request naming another ``sessionId`` than ours or a child's is refused with JSON-RPC
  invalid-params (``refuse(rpc_id, error)``) without handling it.

Everything else goes on to the SDK's connection.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from acp import RequestError

log = logging.getLogger(__name__)


class Router:
    """``fold(update)`` takes a ``session/update``'s ``update`` object (any JSON value);
    ``refuse(rpc_id, error)`` must answer request ``rpc_id`` with ``error`` (a JSON-RPC
    error object) — the session sends it; ``withdrawn(tool_call_id)`` closes that request's
    card and returns whether there was one (if not, the withdrawal is remembered)."""

    def __init__(self, *, fold: Callable[[Any], None], refuse: Callable[[Any, dict[str, Any]], None],
                 withdrawn: Callable[[str], bool], tool_calls: dict[str, dict[str, Any]] | None = None,
                 fold_child: Callable[[str, Any], None] = lambda session_id, update: None,
                 children: set[str] | None = None) -> None:
        self._fold = fold
        self._fold_child = fold_child
        self.children = children if children is not None else set()  # child session ids (subagents)
        self._refuse = refuse
        self._withdrawn_cb = withdrawn
        self.session_id: str | None = None
        self._early: list[tuple[Any, Any]] = []
        self._permission_rpc: dict[Any, str] = {}  # JSON-RPC id -> toolCallId of permission requests
        self._withdrawn_early: set[str] = set()
        self.tool_calls = tool_calls if tool_calls is not None else {}  # toolCallId -> a permission's raw toolCall
        self.dropped = 0  # updates for another session

    def intercept(self, message: dict[str, Any]) -> bool:
        """True when the message was handled here (the SDK must not see it)."""
        method = message.get("method")
        params = message.get("params")
        if not isinstance(params, dict):
            params = {}
        if method == "session/update" and "id" not in message:
            session = params.get("sessionId")
            if self.session_id is None:
                self._early.append((session, params.get("update")))
            elif session in (None, self.session_id):
                update = params.get("update")
                if isinstance(update, dict) and update.get("sessionUpdate") == "subagent_update":
                    self._note_child(update)
                self._fold(update)
            elif session in self.children:
                self._fold_child(session, params.get("update"))
            else:
                self.dropped += 1
                log.debug("dropped an update for unknown session %r", session)
            return True
        if method == "$/cancel_request" and "id" not in message:
            tool_call_id = self._permission_rpc.pop(params.get("requestId"), None)
            if tool_call_id is not None and not self._withdrawn_cb(tool_call_id):
                self._withdrawn_early.add(tool_call_id)  # its card is still on its way
            return True
        if isinstance(method, str) and "id" in message and self.session_id is not None:
            session = params.get("sessionId")
            if session is not None and session != self.session_id and session not in self.children:
                error = RequestError.invalid_params({"sessionId": session, "reason": f"unknown session {session!r}"})
                self._refuse(message["id"], error.to_error_obj())
                return True
        if method == "session/request_permission" and "id" in message:
            tool_call = params.get("toolCall")
            if not isinstance(tool_call, dict):
                tool_call = {}
            self._permission_rpc[message["id"]] = str(tool_call.get("toolCallId", ""))
            self.tool_calls[str(tool_call.get("toolCallId", ""))] = tool_call  # as it came: the SDK drops ``name``
        return False

    def _note_child(self, update: Any) -> None:
        if isinstance(update, dict) and update.get("sessionUpdate") == "subagent_update" \
                and isinstance(update.get("sessionId"), str) and update["sessionId"]:
            self.children.add(update["sessionId"])

    def take_withdrawn(self, tool_call_id: str) -> bool:
        """Whether the agent already withdrew the permission request of ``tool_call_id``
        (its ``$/cancel_request`` came before the card was made); forgets it."""
        if tool_call_id in self._withdrawn_early:
            self._withdrawn_early.discard(tool_call_id)
            return True
        return False

    def opened(self, session_id: str) -> None:
        """The session exists: fold the updates that came before, in order (those of
        another session are dropped)."""
        self.session_id = session_id
        self.flush_early(session_id)

    def flush_early(self, session_id: str | None) -> None:
        """Fold the updates kept so far for ``session_id`` without opening (a
        ``session/load`` replay that came before its answer); another session's are dropped."""
        early, self._early = self._early, []
        for session, update in early:
            if session in (None, session_id):
                self._note_child(update)
                self._fold(update)
            elif session in self.children:
                self._fold_child(session, update)
            else:
                self.dropped += 1
                log.debug("dropped an early update for session %r (ours is %r)", session, session_id)
