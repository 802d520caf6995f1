"""The agent's dials: Escouade's modes, the agent's own modes, config options, models."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import acp

from ..wire.session import dump
from .workspace import EDIT_KINDS, inside, paths_of

if TYPE_CHECKING:
    from ..manifest import HarnessRef
    from .agent import Agent
    from .cards import PermissionCard


def flatten_options(options: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """A select option list (flat, or grouped ``{group, name, options}``) as (value, label)."""
    out: list[tuple[str, str]] = []
    for o in options:
        if "options" in o and "value" not in o:
            out.extend((v, f"{o.get('name', o.get('group'))} / {label}") for v, label in flatten_options(o["options"]))
        elif "value" in o:
            out.append((o["value"], o.get("name") or o["value"]))
    return out


def escouade_modes(harness: HarnessRef) -> dict[str, str]:
    """Escouade's modes a harness offers, with their menu text: ``default``,
    ``acceptEdits``, ``bypassPermissions`` when the manifest maps them to an ACP mode
    (``acp.modes``), ``readOnly`` when it has ``acp.readOnlyMode``. A mode without a
    mapping is not offered."""
    h = harness.harness
    mapping = h.acp.modes or {}
    meanings = {m.id: (m.meaning_text() or m.id) for m in h.mode_caps()}
    out = {mode: meanings.get(mode, mode) for mode in ("default", "acceptEdits", "bypassPermissions")
           if mode in mapping}
    if h.acp.read_only_mode:
        out["readOnly"] = meanings.get("readOnly", "Read only: the agent changes nothing.")
    return out


class Controls:
    """Modes, config options and the model of one agent (what the view's dials show).

    ``mode`` is Escouade's mode (``default``, ``acceptEdits``, ``bypassPermissions``,
    ``readOnly``) the client applies to permission requests; ``models`` the agent's own
    raw ``models`` state when it sends one (goose's, in the ``session/new`` answer).
    Every setter shows the change at once and rolls it back, with a notice, when the
    agent refuses."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.mode = "default"
        self.models: dict[str, Any] | None = None

    # -- Escouade's modes ---------------------------------------------------------------------
    def escouade_modes(self) -> dict[str, str]:
        """Escouade's modes this harness offers, with their menu text (see :func:`escouade_modes`)."""
        return escouade_modes(self.agent.harness)

    async def set_escouade_mode(self, mode: str) -> bool:
        """Switch to one of :meth:`escouade_modes` (``ValueError`` for another): the
        mapped ACP mode is set on the agent, and the client applies the mode to
        permission requests. Returns False (and says why in the conversation) if the
        agent refused; the mode shown is then the previous one."""
        offered = self.escouade_modes()
        h = self.agent.harness.harness
        if mode not in offered:
            raise ValueError(f"{h.display_name} does not offer the mode {mode!r}; "
                             f"it offers: {', '.join(offered) or 'none'}")
        acp_mode = h.acp.read_only_mode if mode == "readOnly" else (h.acp.modes or {})[mode]
        previous, self.mode = self.mode, mode
        self.agent.notify_status()
        if await self.set_mode(acp_mode):
            return True
        self.mode = previous
        self.agent.notify_status()
        return False

    async def policy(self, card: PermissionCard) -> None:
        """The Escouade mode as a permission policy (after the rule plugins): in
        ``bypassPermissions`` every request is allowed; in ``acceptEdits`` an edit whose
        paths are all inside the agent's folder."""
        call = card.tool_call
        if self.mode == "bypassPermissions":
            card.choose(card.first_of("allow_once", "allow_always"), by="the mode (bypass permissions)")
        elif self.mode == "acceptEdits" and call is not None and call.kind in EDIT_KINDS:
            paths = paths_of(call)
            if paths and all(inside(p, self.agent.cwd) for p in paths):
                card.choose(card.first_of("allow_once", "allow_always"), by="the mode (accept edits)")

    @property
    def applies(self) -> bool:
        """Whether the mode answers permission requests (it is a policy)."""
        return self.mode in ("acceptEdits", "bypassPermissions")

    # -- the agent's own modes and config options --------------------------------------------------
    def _mode_option(self) -> dict[str, Any] | None:
        return next((o for o in self.agent.conversation.config_options if o.get("category") == "mode"), None)

    def _has_mode(self, mode_id: str) -> bool:
        modes = self.agent.conversation.modes or {}
        return any(m.get("id") == mode_id for m in modes.get("availableModes") or [])

    async def set_mode(self, mode_id: str) -> bool:
        """Set the agent's own mode: ``session/set_mode``, or the config option of
        category ``mode`` when the agent has one (config options supersede modes)."""
        option = self._mode_option()
        conv = self.agent.conversation
        if option is not None and (conv.modes is None or not self._has_mode(mode_id)):
            return await self.set_config_option(option["id"], mode_id)
        session = await self.agent.ready_session()
        previous = conv.current_mode_id
        conv.set_current_mode(mode_id)
        try:
            await session.conn.set_session_mode(session_id=session.session_id, mode_id=mode_id)
        except (acp.RequestError, ConnectionError) as exc:
            conv.set_current_mode(previous)
            conv.add_notice(f"The agent refused the mode {mode_id!r}: {exc}", level="warning")
            return False
        return True

    async def set_config_option(self, config_id: str, value: str | bool) -> bool:
        """``session/set_config_option`` (``ValueError`` for an option the agent does
        not have): shown at once, replaced by the agent's answer (the full list)."""
        session = await self.agent.ready_session()
        conv = self.agent.conversation
        try:
            previous = conv.set_config_value(config_id, value)
        except KeyError:
            raise ValueError(f"the agent has no config option {config_id!r}") from None
        try:
            response = await session.conn.set_config_option(config_id=config_id, session_id=session.session_id,
                                                            value=value)
        except (acp.RequestError, ConnectionError) as exc:
            conv.set_config_value(config_id, previous)
            conv.add_notice(f"The agent refused {config_id} = {value!r}: {exc}", level="warning")
            return False
        options = getattr(response, "config_options", None)
        if options:
            conv.apply({"sessionUpdate": "config_option_update", "configOptions": [dump(o) for o in options]})
        return True

    # -- models ------------------------------------------------------------------------------------
    def set_models(self, models: dict[str, Any] | None) -> None:
        """The agent's raw ``models`` state (from a session answer)."""
        self.models = models
        self.agent.conversation.notify_state("models")

    def model_choices(self) -> tuple[str | None, list[tuple[str, str]]]:
        """(current model id, [(id, label)…]) from the agent's config option of category
        ``model``, else its ``models`` state, else the manifest's ``models``."""
        option = next((o for o in self.agent.conversation.config_options if o.get("category") == "model"), None)
        if option is not None:
            return option.get("currentValue"), flatten_options(option.get("options") or [])
        if self.models:
            available = self.models.get("availableModels") or []
            return self.models.get("currentModelId"), [(m.get("modelId"), m.get("name") or m.get("modelId"))
                                                       for m in available if m.get("modelId")]
        manifest = self.agent.harness.harness.models or []
        return None, [(m.id, m.label_text() if hasattr(m, "label_text") else m.id) for m in manifest]

    async def set_model(self, model_id: str) -> bool:
        """Change the model: the manifest's ``acp.modelOption`` config option when given
        (or the agent's option of category ``model``), else ``session/set_model`` — not
        in the SDK's typed API (removed from the spec, still used by Goose), sent through
        our own transport (:meth:`AgentSession.request`)."""
        session = await self.agent.ready_session()
        conv = self.agent.conversation
        option_id = self.agent.harness.harness.acp.model_option
        ids = {o.get("id") for o in conv.config_options}
        if option_id is None or option_id not in ids:
            option_id = next((o.get("id") for o in conv.config_options if o.get("category") == "model"), None)
        if option_id is not None:
            return await self.set_config_option(option_id, model_id)
        previous = (self.models or {}).get("currentModelId")
        if self.models is not None:
            self.models["currentModelId"] = model_id
            conv.notify_state("models")
        try:
            await session.request("session/set_model", {"sessionId": session.session_id, "modelId": model_id})
        except (acp.RequestError, ConnectionError, TimeoutError) as exc:
            if self.models is not None:
                self.models["currentModelId"] = previous
                conv.notify_state("models")
            conv.add_notice(f"The agent refused the model {model_id!r}: {exc}", level="warning")
            return False
        return True
