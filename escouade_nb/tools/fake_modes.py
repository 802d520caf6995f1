"""The fake agent's modes, config options, plans to approve and questions: ``session/set_mode``,
``session/set_config_option``, and the scenarios ``present plan``, ``ask me``, ``open
link``, ``question block``, ``switch mode``, ``which mode``.
"""

from __future__ import annotations

from typing import Any

from acp import RequestError, start_tool_call, text_block, tool_content, update_tool_call
from acp.schema import AllowedOutcome, PermissionOption, ToolCallUpdate

from .fake_session import FakeParts, _Session, _Turn


class ModesAndQuestions(FakeParts):
    """Two independent axes, as in the plan-mode seed: the mode (ask / accept-edits /
    yolo / plan / read-only) and the sandbox config option; switching one never
    touches the other. The model is a config option of category "model"."""

    MODES = (("ask", "Ask", "Asks before every tool."), ("accept-edits", "Accept edits", "Edits without asking."),
             ("yolo", "YOLO", "Never asks."), ("plan", "Plan", "Plans first, presents the plan for approval."),
             ("read-only", "Read only", "Changes nothing."))

    def _modes_state(self, session: _Session) -> Any:
        from acp.schema import SessionMode, SessionModeState
        return SessionModeState(current_mode_id=session.mode, available_modes=[
            SessionMode(id=i, name=n, description=d) for i, n, d in self.MODES])

    def _config_options(self, session: _Session) -> list[Any]:
        from acp.schema import (SessionConfigOptionBoolean, SessionConfigOptionSelect, SessionConfigSelectGroup,
                                SessionConfigSelectOption)
        opts: list[Any] = [
            SessionConfigOptionSelect(id="sandbox", name="Sandbox", category="sandbox", type="select",
                                      current_value=session.config["sandbox"], options=[
                                          SessionConfigSelectOption(value=v, name=v)
                                          for v in ("read-only", "workspace-write", "full-access")]),
            SessionConfigOptionSelect(id="model", name="Model", category="model", type="select",
                                      current_value=session.config["model"], options=[
                                          SessionConfigSelectGroup(group="small", name="Small", options=[
                                              SessionConfigSelectOption(value="fake-small", name="Fake small")]),
                                          SessionConfigSelectGroup(group="large", name="Large", options=[
                                              SessionConfigSelectOption(value="fake-large", name="Fake large")])]),
        ]
        caps = self.client_capabilities
        if caps and caps.session and caps.session.config_options and caps.session.config_options.boolean is not None:
            opts.append(SessionConfigOptionBoolean(id="verbose", name="Verbose", type="boolean",
                                                   current_value=bool(session.config["verbose"])))
        return opts

    async def set_session_mode(self, mode_id: str, session_id: str, **kwargs: Any) -> Any:
        from acp.schema import CurrentModeUpdate, SetSessionModeResponse
        session = self._session(session_id)
        if mode_id not in {m[0] for m in self.MODES}:
            raise RequestError.invalid_params({"modeId": mode_id, "reason": "unknown mode"})
        session.mode = mode_id
        await self.conn.session_update(session_id, CurrentModeUpdate(session_update="current_mode_update",
                                                                     current_mode_id=mode_id))
        return SetSessionModeResponse()

    async def set_config_option(self, config_id: str, session_id: str, value: Any, **kwargs: Any) -> Any:
        from acp.schema import SetSessionConfigOptionResponse
        session = self._session(session_id)
        allowed: dict[str, set[Any]] = {"sandbox": {"read-only", "workspace-write", "full-access"},
                                        "model": {"fake-small", "fake-large"}, "verbose": {True, False}}
        if config_id not in allowed or value not in allowed[config_id]:
            raise RequestError.invalid_params({"configId": config_id, "value": value, "reason": "not allowed"})
        session.config[config_id] = value
        return SetSessionConfigOptionResponse(config_options=self._config_options(session))

    async def _dispatch_modes(self, turn: _Turn, low: str) -> str | None:
        if "present plan" in low or "exit plan" in low:
            return await self._present_plan(turn)
        if "ask me" in low:
            return await self._elicit_form(turn)
        if "open link" in low:
            return await self._elicit_url(turn)
        if "question block" in low:
            return await self._question_block(turn)
        if "switch mode" in low:
            from acp.schema import CurrentModeUpdate
            turn.session.mode = "plan"
            await turn.send(CurrentModeUpdate(session_update="current_mode_update", current_mode_id="plan"))
            await turn.say("I switched myself to plan mode.")
            return "end_turn"
        if "which mode" in low:
            s = turn.session
            await turn.say(f"mode={s.mode} sandbox={s.config['sandbox']} model={s.config['model']}")
            return "end_turn"
        return None

    async def _present_plan(self, turn: _Turn) -> str:
        plan_md = "## Plan\n\n1. Read `notes.txt`\n2. Add a summary line\n3. Run the tests"
        call_id = turn.session.next_tool_call_id()
        await turn.send(start_tool_call(call_id, "exit_plan_mode", kind="switch_mode", status="pending",
                                        content=[tool_content(text_block(plan_md))],
                                        raw_input={"plan": plan_md}))
        options = [PermissionOption(option_id="approve", name="Approve", kind="allow_once"),
                   PermissionOption(option_id="keep-planning", name="Keep planning", kind="reject_once")]
        response = await self.conn.request_permission(
            turn.sid, ToolCallUpdate(tool_call_id=call_id, title="exit_plan_mode", kind="switch_mode",
                                     raw_input={"plan": plan_md}), options)
        outcome = response.outcome
        if turn.cancelled or not isinstance(outcome, AllowedOutcome):
            await turn.send(update_tool_call(call_id, status="failed"))
            return "cancelled"
        if outcome.option_id == "approve":
            from acp.schema import CurrentModeUpdate
            await turn.send(update_tool_call(call_id, status="completed"))
            if turn.session.mode == "plan":
                turn.session.mode = "ask"
                await turn.send(CurrentModeUpdate(session_update="current_mode_update", current_mode_id="ask"))
            await turn.say("Plan approved; starting with step 1.")
            return "end_turn"
        feedback = ((response.field_meta or {}).get("escouade") or {}).get("message")
        await turn.send(update_tool_call(call_id, status="failed"))
        await turn.say(f"Keeping on planning. Feedback received: {feedback}" if feedback
                       else "Keeping on planning (no feedback received).")
        return "end_turn"

    async def _elicit_form(self, turn: _Turn) -> str:
        from acp.schema import ElicitationFormSessionMode
        schema = {"type": "object", "title": "Database", "required": ["database"], "properties": {
            "database": {"type": "string", "title": "Database", "enum": ["postgres", "sqlite"]},
            "replicas": {"type": "integer", "title": "Replicas", "minimum": 0, "default": 1},
            "migrate": {"type": "boolean", "title": "Run migrations", "default": False},
            "note": {"type": "string", "title": "Note"}}}
        mode = ElicitationFormSessionMode(session_id=turn.sid, requested_schema=schema)
        answer = await self.conn.create_elicitation("Which database should I use?", mode)
        if answer.action == "accept":
            content = getattr(answer, "content", None) or {}
            await turn.say("You chose: " + ", ".join(f"{k}={content[k]}" for k in sorted(content)))
        elif answer.action == "decline":
            await turn.say("You declined to answer; I will pick sqlite.")
        else:
            return "cancelled"
        return "end_turn"

    async def _elicit_url(self, turn: _Turn) -> str:
        from acp.schema import ElicitationUrlSessionMode
        mode = ElicitationUrlSessionMode(session_id=turn.sid, elicitation_id="login-1",
                                         url="https://example.com/login")
        answer = await self.conn.create_elicitation("Please sign in, then come back.", mode)
        await turn.say(f"Sign-in answer: {answer.action}.")
        return "end_turn"

    async def _question_block(self, turn: _Turn) -> str:
        await turn.say('Before I go on, I need a decision.\n\n<escouade_question>{"questions": ['
                       '{"id": "db", "question": "Which database?", "options": ["postgres", "sqlite"]}, '
                       '{"id": "name", "question": "Name of the new table?"}]}</escouade_question>', pieces=4)
        return "end_turn"
