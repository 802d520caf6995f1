"""The agent's dials: Escouade's modes, the agent's own modes, config options, models."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import acp

from ..permissions.request import normalise
from ..wire.session import dump
from .workspace import EDIT_KINDS, inside, paths_of

if TYPE_CHECKING:
    from ..manifest import HarnessRef
    from .interfaces import ControlledAgent
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


ESCOUADE_MODES = ("default", "acceptEdits", "bypassPermissions", "readOnly")
CLIENT_SIDE = ("default", "acceptEdits", "bypassPermissions")
"""Escouade's modes the client can apply by itself (answering permission requests)."""


def acp_mode_of(harness: HarnessRef, mode: str) -> str | None:
    """The agent's own mode id an Escouade ``mode`` maps to in the manifest, or None."""
    acp_spec = harness.acp
    return acp_spec.read_only_mode if mode == "readOnly" else (acp_spec.modes or {}).get(mode)


def escouade_modes(harness: HarnessRef) -> dict[str, str]:
    """Escouade's modes a harness offers, with their menu text: ``default``,
    ``acceptEdits``, ``bypassPermissions`` when the manifest maps them to an ACP mode
    (``acp.modes``), ``readOnly`` when it has ``acp.readOnlyMode``. A mode without a
    mapping is not offered."""
    h = harness.harness
    mapping = harness.acp.modes or {}
    meanings = {m.id: (m.meaning_text() or m.id) for m in h.mode_caps()}
    out: dict[str, str] = {mode: meanings.get(mode, mode) for mode in ("default", "acceptEdits", "bypassPermissions")
                           if mode in mapping}
    if harness.acp.read_only_mode:
        out["readOnly"] = meanings.get("readOnly", "Read only: the agent changes nothing.")
    return out


class Controls:
    """Modes, config options and the model of one agent (what the view's dials show).

    ``mode`` is Escouade's mode (``default``, ``acceptEdits``, ``bypassPermissions``,
    ``readOnly``) the agent is in, mapped back from its own (None: a mode of its own
    that none maps to; see :meth:`follow`), and that the client applies to permission
    requests; ``models`` the agent's own raw ``models`` state when it sends one (goose's,
    in the ``session/new`` answer).
    Every setter shows the change at once and rolls it back, with a notice, when the
    agent refuses."""

    def __init__(self, agent: ControlledAgent) -> None:
        self.agent = agent
        self.mode: str | None = "default"  # None: the agent is in a mode of its own that none maps to
        self.chosen: str | None = None  # the Escouade mode last chosen (a restart sets it again)
        self.models: dict[str, Any] | None = None
        self.opened = False  # a session told what modes the agent has
        self._told: str | None = None  # the agent's unmapped mode the conversation was told of
        self._local = False  # the client is setting the agent's mode itself (optimistic, rollback)
        agent.conversation.subscribe(self._changed, chunks=False)  # the mode and options only

    # -- Escouade's modes ---------------------------------------------------------------------
    def _agent_mode_ids(self) -> set[str]:
        """The mode ids the agent can be switched to: its ``availableModes`` and the values
        of its config option of category ``mode``."""
        conv = self.agent.conversation
        ids = {m.get("id") for m in (conv.modes or {}).get("availableModes") or []}
        option = self._mode_option()
        if option is not None:
            ids |= {value for value, _ in flatten_options(option.get("options") or [])}
        return {i for i in ids if isinstance(i, str)}

    def escouade_modes(self) -> dict[str, str]:
        """Escouade's modes this harness offers, with their menu text (see
        :func:`escouade_modes`) — once a session is open, only those that work: a mode
        whose agent mode the agent has, or, for an agent with no mode to switch at all
        (no ``availableModes``, no config option of category ``mode``), the modes the client
        applies by itself (``default``, ``acceptEdits``, ``bypassPermissions``), said so in
        their menu text; never ``readOnly`` then (nothing would keep the agent from writing)."""
        offered = escouade_modes(self.agent.harness)
        if not self.opened:
            return offered
        ids = self._agent_mode_ids()
        if ids:
            return {m: text for m, text in offered.items() if acp_mode_of(self.agent.harness, m) in ids}
        name = self.agent.harness.display_name
        return {m: f"{text} (applied by escouade_nb to permission requests: {name} has no mode to switch)"
                for m, text in offered.items() if m in CLIENT_SIDE}

    def agent_mode(self) -> str | None:
        """The agent's own current mode: ``currentModeId``, else the value of its config
        option of category ``mode``; None when it says none."""
        option = self._mode_option()
        conv = self.agent.conversation
        if conv.current_mode_id is not None and (option is None or self._has_mode(conv.current_mode_id)):
            return conv.current_mode_id
        value = option.get("currentValue") if option is not None else None
        return value if isinstance(value, str) else conv.current_mode_id

    def follow(self) -> None:
        """Show the Escouade mode the agent is really in: its own mode mapped back
        through the manifest (``acp.modes``, ``acp.readOnlyMode``). A mode none maps to
        makes :attr:`mode` None (the menus show none, the client answers nothing by
        itself) and is said once in the conversation. An agent that says no mode, or whose
        manifest maps none, keeps the one chosen (``default`` at first)."""
        current = self.agent_mode()
        harness = self.agent.harness
        if current is None or not self.opened or not escouade_modes(harness):
            return  # a harness mapping no Escouade mode has no Mode menu: it stays "default"
        mapped = next((m for m in ESCOUADE_MODES if m in self.escouade_modes()
                       and acp_mode_of(harness, m) == current), None)
        if mapped is None:
            mapped = next((m for m in ESCOUADE_MODES if acp_mode_of(harness, m) == current), None)
        if mapped is not None:
            self._told = None
        elif self._told != current:
            self._told = current
            offered = ", ".join(f"{m} = {acp_mode_of(harness, m)!r}" for m in self.escouade_modes()) or "none"
            self.agent.conversation.add_notice(
                f"The agent is in its own mode {current!r}, which none of Escouade's modes maps to ({offered}): the "
                f"Mode menu shows none, and escouade_nb answers no permission request by itself.", level="warning")
        if mapped != self.mode:
            self.mode = mapped
            self.agent.notify_status()

    def session_opened(self) -> None:
        """A session is open: from now on the modes offered and shown are what it says."""
        self.opened = True
        self._told = None
        self.mode = "default"  # until the agent says otherwise
        self.follow()

    def _changed(self, changes: list[Any]) -> None:
        if not self._local and any(c.kind == "state" and c.name in ("mode", "config_options") for c in changes):
            self.follow()

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
        acp_mode = acp_mode_of(self.agent.harness, mode)
        previous, self.mode = self.mode, mode
        self.agent.notify_status()
        # an agent with no mode to switch is sent nothing: the client applies the mode alone
        if (self.opened and not self._agent_mode_ids()) or (acp_mode is not None  # an offered mode is mapped
                                                             and await self.set_mode(acp_mode)):
            self.chosen = mode  # a restart sets it again
            return True
        self.mode = previous
        self.agent.notify_status()
        return False

    async def policy(self, card: PermissionCard) -> None:
        """The Escouade mode as a permission policy (after the rule plugins): in
        ``bypassPermissions`` — when you chose it, never when the agent switched itself
        there — every request is allowed; in ``acceptEdits`` an edit whose
        paths are all inside the agent's folder."""
        call = card.request or card.tool_call  # what was asked, frozen
        if self.mode == "bypassPermissions" and self.chosen == "bypassPermissions":
            # only when YOU chose it: an agent that switches itself there (its own current_mode_update)
            # is shown in that mode, but is allowed nothing by it
            card.choose(card.first_of("allow_once", "allow_always"), by="the mode (bypass permissions)")
        elif self.mode == "acceptEdits" and call is not None and self.is_edit(call):
            paths = paths_of(call)
            if paths and all(inside(p, self.agent.cwd) for p in paths):
                card.choose(card.first_of("allow_once", "allow_always"), by="the mode (accept edits)")

    def is_edit(self, call: Any) -> bool:
        """Whether a tool call changes files: its ACP kind (edit, delete, move), else the
        tool it is by the manifest's ``acp.tools`` map or its name (goose's writes come as
        kind ``other``, titled "Write") — the tools rule plugins see as ``kind: edit``."""
        if call.kind in EDIT_KINDS:
            return True
        return normalise(call, self.agent.harness.acp.tools or {}).kind == "edit"

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
        self._local_set(lambda: conv.set_current_mode(mode_id))
        try:
            await session.conn.set_session_mode(session_id=session.session_id, mode_id=mode_id)
        except (acp.RequestError, ConnectionError) as exc:
            self._local_set(lambda: conv.set_current_mode(previous))
            conv.add_notice(f"The agent refused the mode {mode_id!r}: {exc}", level="warning")
            return False
        self.follow()
        return True

    def _local_set(self, change: Any) -> Any:
        """Run ``change`` (the client setting the agent's mode or an option, optimistically
        or rolling back) without taking it for the agent's word."""
        self._local = True
        try:
            return change()
        finally:
            self._local = False

    async def set_config_option(self, config_id: str, value: str | bool) -> bool:
        """``session/set_config_option`` (``ValueError`` for an option the agent does
        not have): shown at once, replaced by the agent's answer (the full list)."""
        session = await self.agent.ready_session()
        conv = self.agent.conversation
        try:
            previous = self._local_set(lambda: conv.set_config_value(config_id, value))
        except KeyError:
            raise ValueError(f"the agent has no config option {config_id!r}") from None
        try:  # our transport: abandoned (cancelled), it is withdrawn with $/cancel_request
            response = await session.set_config_option(config_id, value)
        except (acp.RequestError, ConnectionError, TimeoutError) as exc:
            self._local_set(lambda: conv.set_config_value(config_id, previous))
            conv.add_notice(f"The agent refused {config_id} = {value!r}: {exc}", level="warning")
            return False
        except asyncio.CancelledError:
            self._local_set(lambda: conv.set_config_value(config_id, previous))
            conv.add_notice(f"{config_id} = {value!r} abandoned: the agent was told ($/cancel_request).")
            raise
        options = getattr(response, "config_options", None)
        if options:
            conv.apply({"sessionUpdate": "config_option_update", "configOptions": [dump(o) for o in options]})
        else:
            self.follow()
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
        return None, [(m.id, m.label_text()) for m in manifest]

    async def set_model(self, model_id: str) -> bool:
        """Change the model: the manifest's ``acp.modelOption`` config option when given
        (or the agent's option of category ``model``), else ``session/set_model`` — not
        in the SDK's typed API (removed from the spec, still used by Goose), sent through
        our own transport (:meth:`AgentSession.request`)."""
        session = await self.agent.ready_session()
        conv = self.agent.conversation
        option_id = self.agent.harness.acp.model_option
        ids = {o.get("id") for o in conv.config_options}
        if option_id is None or option_id not in ids:
            option_id = next((o.get("id") for o in conv.config_options if o.get("category") == "model"), None)
        if option_id is not None:
            return await self.set_config_option(option_id, model_id)
        if self.models is None:  # session/set_model is gone from ACP: only for an agent that gave a models state
            raise ValueError(f"{self.agent.name} offers no model choice: no config option of category 'model' "
                             f"(and no models state for session/set_model)")
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
