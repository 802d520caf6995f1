"""The broker: a permission :data:`~escouade_nb.engine.cards.Policy` that asks the rule plugins.

On every permission request of an agent, the broker asks every plugin that may decide
and is on for the agent's project, all at once. Each has 500 ms (a plugin not started
yet has, once, 3 s to start and answer). A denial wins whatever the order; otherwise
one allowance is enough; otherwise the card is left to the user. A plan to approve and a
question of the agent never go to plugins.

The verdict is mapped onto the agent's own options by kind — allow -> ``allow_once``
(never widened to "always"; none offered: the user decides), deny -> ``reject_once``, or,
when the agent offered no ``reject_once``, the ``cancelled`` outcome, the one other answer
that reaches it (never widened to ``reject_always``) — and given with
``card.choose(option, …)`` / ``card.deny(…)``, ``by="<plugin> via Escouade",
message=<the plugin's message>, reply=<what the agent is told>``: the card says "Denied by Team rules via Escouade — no
rm -rf here", the agent is told "Refused by Team rules through Escouade: no rm -rf here",
carried in the ACP answer's ``_meta.escouade.message`` (ACP's permission outcome has only
``outcome`` and ``optionId``; ``_meta`` is the protocol's extension point). The card is
anything that satisfies :class:`~.interfaces.PermissionRequest`. If the user
answered on the card first, that answer stands; the plugins' answers are journaled, marked
not applied. Every plugin's answer (or silence) is one ``Decision`` line of its journal.

Plugins judge every field whole (:func:`~.request.fit_params`): the request is sent with
each text whole and ``request.sizes``, encoded once for all plugins. A request over
:data:`~.protocol.MAX_REQUEST` bytes has its longest texts cut and named in
``request.truncated``: then no allowance is honoured — a plugin must not decide on part
of a text — a denial still wins, and otherwise the user decides, the card's ``note`` and
the journal saying why ("too large for rule plugins to judge whole: input.code
(5,000,000 characters)"). A journal line keeps the one-line target, and for each field
longer than that its length and the SHA-256 of its whole text (``fields``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import anyio
from pydantic import ValidationError

from ..core.observers import Observers, Subscription
from ..manifest.project import Project, ProjectFileError
from .host import PluginCrashed, PluginHost, PluginNotRunning, PluginProcess, PluginRefused, PluginSpec
from .interfaces import PermissionAgent, PermissionRequest
from .journal import Journal
from .protocol import DECIDE, AgentInfo, DecideParams, DecideResult, ProjectInfo, RequestInfo
from .request import Fitted, Normalised, fit_params, normalise, text_size, tool_call_fields, too_large
from .states import PluginStates
from .verdict import Answer, Tally, Verdict

__all__ = ["BUDGET", "FIRST_BUDGET", "DecideResult", "Decision", "Broker", "RuleGuard", "RulePlugins",
           "card_by", "agent_message"]

BUDGET = 0.5
"""Seconds each plugin has to answer a request."""
FIRST_BUDGET = 3.0
"""Seconds a plugin not started yet has, once, to start and answer."""
METHOD = DECIDE
WATCH_PERIOD = 2.0
"""Seconds between two looks at the plugin folders and the settings file."""
OFF_LOOP_FROM = 256 * 1024
"""Characters of a request's texts from which it is encoded (and hashed) in a worker
thread: the loop then waits only for one encoding at a time, never several in a row."""


def card_by(plugin_name: str) -> str:
    """Who answered, as the card says it: ``"Team rules via Escouade"``."""
    return f"{plugin_name} via Escouade"


def agent_message(plugin_name: str, decision: str, message: str | None) -> str:
    """What the agent is told: ``"Refused by Team rules through Escouade: no rm -rf here"``."""
    verb = "Refused" if decision == "deny" else "Allowed"
    return f"{verb} by {plugin_name} through Escouade" + (f": {message}" if message else ".")


class RuleGuard(NamedTuple):
    """A rule plugin that answers an agent's permissions: its manifest ``id`` and its
    display ``name`` (a tuple ``(id, name)``)."""

    id: str
    name: str


def _on_command(plugin: str, folder: Path) -> str:
    import shlex
    return f"%escouade plugins on {plugin} --project {shlex.quote(str(folder))}"


@dataclass
class Decision:
    """One request put to the plugins: what was asked, every answer, the verdict, and
    whether it was applied to the card (False: the user, or the turn's end, came first)."""

    request_id: str
    tool: str
    target: str
    plugins: list[str]
    answers: dict[str, Answer] = field(default_factory=dict)
    verdict: Verdict | None = None
    applied: bool = False
    option_id: str | None = None
    started: float = 0.0
    settled_ms: float | None = None
    """Milliseconds from the request to the card's answer (None: not settled by plugins)."""
    total_ms: float = 0.0
    truncated: list[str] = field(default_factory=list)
    """The fields cut to fit the request (:func:`~.request.fit_params`); empty: all whole."""
    sizes: dict[str, int] = field(default_factory=dict)
    """Characters of each string of the input, whole."""
    unjudged: str | None = None
    """Why no allowance could be honoured (the request was cut), as the card says it."""
    prepare_ms: float = 0.0
    """Milliseconds spent encoding (and cutting, hashing) the request before it was sent."""
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    """For each field longer than the target shows: ``{"chars": N, "sha256": hex}`` of its whole text."""


class Broker:
    """The permission policy of the squad's agents (``Agent(..., policies=[broker])``)."""

    def __init__(self, host: PluginHost, states: PluginStates, journal: Journal, *,
                 budget: float = BUDGET, first_budget: float = FIRST_BUDGET) -> None:
        self.host = host
        self.states = states
        self.journal = journal
        self.budget = budget
        self.first_budget = first_budget
        self.history: deque[Decision] = deque(maxlen=1000)
        self._agent_ids: weakref.WeakKeyDictionary[PermissionAgent, str] = weakref.WeakKeyDictionary()
        self._listeners: Observers[[Decision]] = Observers("broker")

    # -- who decides --------------------------------------------------------------------
    def plugins_for(self, project: Project) -> list[PluginProcess]:
        """The plugins on for ``project`` (granted, runnable), by id."""
        out = []
        for pid in sorted(self.host.specs):
            spec = self.host.specs[pid]
            if spec.argv is None or not self.states.is_on(pid, project, default=spec.default_on):
                continue
            proc = self.host.processes.get(pid)
            if proc is None:
                proc = self.host.processes[pid] = PluginProcess(spec, self.journal)
            out.append(proc)
        return out

    def guarding(self, project: Project) -> list[RuleGuard]:
        """The rule plugins that answer permissions for ``project`` (granted, on for it,
        runnable), by id — what :meth:`plugins_for` asks, without its side effects: no
        process made or started, no rescan of the plugin folders (a stat of the settings
        file at most)."""
        return [RuleGuard(pid, spec.name) for pid, spec in sorted(self.host.specs.items())
                if spec.argv is not None and self.states.is_on(pid, project, default=spec.default_on)]

    def hint(self, project: Project, folder: Path | None = None) -> str | None:
        """None when a rule plugin guards ``project``; else one line saying how to turn
        one on for it: ``%escouade plugins on PLUGIN --project FOLDER`` (``folder``: the
        folder that is that project, default its own), ``grant`` first for a plugin whose
        permission was taken back. Side-effect free, as :meth:`guarding`."""
        if self.guarding(project):
            return None
        folder = Path(folder or project.folder)
        where = f"No rule plugin guards project {project.name} ({folder})"
        if self.states.error:
            return f"{where}: the rule plugins' settings file is broken ({self.states.error})"
        usable = {pid: spec for pid, spec in sorted(self.host.specs.items()) if spec.argv is not None}
        if not usable:
            return f"{where}: no rule plugin is installed (`%escouade plugins` lists them)"
        if len(usable) == 1:
            (pid, spec), = usable.items()
            on = _on_command(spec.folder.name, folder)
            if not self.states.granted(pid):
                return (f"{where}: {spec.name}'s permission to decide was taken back; "
                        f"`%escouade plugins grant {spec.folder.name}`, then `{on}`")
            return f"{where}: `{on}` turns {spec.name} on for it"
        names = ", ".join(spec.folder.name for spec in usable.values())
        return f"{where}: `{_on_command('PLUGIN', folder)}` turns one on for it (rule plugins: {names})"

    def agent_id(self, agent: PermissionAgent) -> str:
        """A stable id of ``agent`` for this kernel (a uuid, the same for each request)."""
        try:
            return self._agent_ids.setdefault(agent, str(uuid.uuid4()))
        except TypeError:
            return str(uuid.uuid5(uuid.NAMESPACE_OID, repr(agent)))

    def subscribe(self, fn: Callable[[Decision], None]) -> Subscription:
        """Call ``fn(decision)`` after each request put to the plugins; returns the token."""
        return self._listeners.subscribe(fn)

    # -- the policy -----------------------------------------------------------------------
    async def __call__(self, card: PermissionRequest) -> None:
        agent = card.agent
        call = card.permission.request or card.permission.tool_call  # what was asked, frozen
        if call is None:
            return
        ref = agent.harness
        acp = ref.harness.acp if ref is not None else None
        norm = normalise(call, acp.tools if acp is not None else {})
        if norm.reserved:
            return  # a plan to approve or a question: the user's
        try:
            project = agent.project or Project.for_folder(agent.cwd or Path.cwd())
        except ProjectFileError:
            return  # a .escouade.yml that is not YAML: no rule plugin decides, the user does
        plugins = self.plugins_for(project)
        if not plugins:
            return
        params = DecideParams(
            request=RequestInfo(id=f"req_{uuid.uuid4().hex[:12]}", kind=norm.kind, tool=norm.tool, input=norm.input,
                                **tool_call_fields(call)),
            project=ProjectInfo(**project.wire()),
            # a subagent's request names it: "parent › child" (PermissionCard.agent_name)
            agent=AgentInfo(id=self.agent_id(agent), name=getattr(card, "agent_name", None) or agent.name or "agent"),
        )
        await self.decide(card, norm, params, plugins, agent_name=params.agent.name, project_name=project.name)

    async def decide(self, card: PermissionRequest, norm: Normalised, params: DecideParams,
                     plugins: list[PluginProcess], *, agent_name: str = "", project_name: str = "") -> Decision:
        """Ask ``plugins`` at once, settle ``card`` as soon as the verdict is known,
        journal every answer. Returns the :class:`Decision`. Every field goes whole, up
        to :data:`~.protocol.MAX_REQUEST` bytes; past it (fields cut) no allowance is
        honoured and the card's ``permission.note`` says why the user decides."""
        p0 = time.monotonic()
        wire = params.wire()
        if text_size(wire) > OFF_LOOP_FROM:
            fitted, digests = await asyncio.to_thread(_prepare, wire)
        else:
            fitted, digests = _prepare(wire)
        t0 = time.monotonic()
        unjudged = too_large(fitted)
        decision = Decision(request_id=params.request.id, tool=norm.tool, target=norm.target,
                            plugins=[p.id for p in plugins], started=t0, truncated=list(fitted.truncated),
                            sizes=dict(fitted.sizes), unjudged=unjudged, prepare_ms=(t0 - p0) * 1000,
                            fields=digests)
        tally = Tally(decision.plugins)
        names = {p.id: p.spec.name for p in plugins}

        def settle(verdict: Verdict) -> None:
            if decision.verdict is not None:
                return
            decision.verdict = verdict
            if verdict.decision == "ask" or verdict.by is None:
                return
            decision.applied, decision.option_id = self._apply(card, verdict, names[verdict.by.plugin])
            if decision.applied:
                decision.settled_ms = (time.monotonic() - t0) * 1000

        async def one(proc: PluginProcess) -> None:
            answer = await self._ask(proc, fitted.data, t0)
            decision.answers[proc.id] = answer
            if unjudged is not None and answer.outcome == "allow":  # decided on part of a text: not honoured
                answer = dataclasses.replace(answer, outcome="ask")
            verdict = tally.add(answer)
            if verdict is not None:
                settle(verdict)

        async with anyio.create_task_group() as tg:
            for proc in plugins:
                tg.start_soon(one, proc)
        settle(tally.final())
        if unjudged is not None and card.permission.state == "pending":
            card.permission.note = unjudged  # shown when the user is called
        decision.total_ms = (time.monotonic() - t0) * 1000
        self._journal(card, decision, names, agent_name, project_name)
        self.history.append(decision)
        self._listeners.emit(decision)
        return decision

    async def _ask(self, proc: PluginProcess, data: bytes, t0: float) -> Answer:
        if proc.state == "ready":
            budget = self.budget
        elif not proc.ever_ready and not proc.grace_used and proc.state in ("stopped", "starting"):
            proc.grace_used = True  # once: a plugin not started yet gets time to start
            budget = self.first_budget
            proc.ensure_running()
        else:
            return Answer(proc.id, "not_running", detail=proc.describe())
        sent: float | None = None
        try:
            with anyio.fail_after(max(0.0, t0 + budget - time.monotonic())):
                await proc.wait_ready()
                sent = time.monotonic()
                result = await proc.call(METHOD, encoded=data)
        except TimeoutError:
            return Answer(proc.id, "late")
        except PluginCrashed:
            return Answer(proc.id, "crash", delay_ms=_ms(sent))
        except PluginNotRunning as exc:
            return Answer(proc.id, "not_running", detail=str(exc))
        except PluginRefused as exc:
            return Answer(proc.id, "error", delay_ms=_ms(sent), detail=exc.message or f"code {exc.code}")
        delay = _ms(sent)
        try:
            answer = DecideResult.model_validate(result)
        except ValidationError:  # none of the three, or not an answer at all
            return Answer(proc.id, "invalid", delay_ms=delay)
        return Answer(proc.id, answer.decision, message=answer.message, delay_ms=delay)

    def _apply(self, card: PermissionRequest, verdict: Verdict, name: str) -> tuple[bool, str | None]:
        message = verdict.by.message if verdict.by else None
        if verdict.decision == "deny":  # reject_once, else cancelled: a denial always reaches the agent
            chosen = card.deny(by=card_by(name), message=message, reply=agent_message(name, "deny", message))
            return chosen, card.permission.option_id if chosen else None
        kind = "allow_once"
        option = next((o for o in card.permission.options if o.get("kind") == kind), None)
        if option is None:
            return False, None  # never widened to "always": the user decides
        try:
            chosen = card.choose(option["optionId"], by=card_by(name), message=message,
                                 reply=agent_message(name, verdict.decision, message))
        except ValueError:
            return False, None
        return chosen, option["optionId"]

    def _journal(self, card: PermissionRequest, d: Decision, names: dict[str, str], agent: str,
                 project: str) -> None:
        answered_by = card.permission.answered_by
        state = card.permission.state
        if not d.applied and state != "pending":
            first = "you answered first" if answered_by in (None, "you") else f"{answered_by} answered first"
            if state == "cancelled":
                first = "the request was cancelled first"
        else:
            first = None
        settled_by = d.verdict.by if d.verdict and d.applied else None
        for pid in d.plugins:
            a = d.answers.get(pid) or Answer(pid, "late")
            fields: dict[str, Any] = dict(tool=d.tool, target=d.target, delay_ms=a.delay_ms, request_id=d.request_id,
                                          agent=agent or None, project=project or None,
                                          fields=d.fields or None, truncated=d.truncated or None)
            if a.decided:
                applied = settled_by is a
                then = None
                if not applied:
                    if first:
                        then = first
                    elif d.verdict and d.verdict.by is not None and d.verdict.by is not a:
                        verb = "refused" if d.verdict.decision == "deny" else "allowed"
                        then = f"{names[d.verdict.by.plugin]} {verb} it"
                    elif d.unjudged and a.outcome == "allow":
                        then = f"{d.unjudged}; the user is asked"
                    else:
                        then = "the agent offers no such option; the user is asked"
                self.journal.add(pid, "Decision", verdict="allowed" if a.outcome == "allow" else "refused",
                                 message=a.message, applied=applied, then=then, **fields)
            else:
                if first:
                    then = first
                elif settled_by is not None and d.verdict is not None:
                    verb = "refused" if d.verdict.decision == "deny" else "allowed"
                    then = f"{names[settled_by.plugin]} {verb} it"
                else:
                    then = "the user is asked"
                self.journal.add(pid, "Decision", verdict="did not decide", reason=a.reason, then=then, **fields)


def _prepare(wire: dict[str, Any]) -> tuple[Fitted, dict[str, dict[str, Any]]]:
    """The request as sent (:func:`~.request.fit_params`) and, for the journal, the length
    and SHA-256 (of the UTF-8 text) of each field longer than a journal line shows."""
    fitted = fit_params(wire)
    digests = {path: {"chars": len(text), "sha256": hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()}
               for path, text in fitted.long.items()}
    return fitted, digests


def _ms(since: float | None) -> float | None:
    return None if since is None else (time.monotonic() - since) * 1000


class RulePlugins:
    """Everything rule plugins need in one kernel: the journal, the user's plugin states,
    the host and the broker. Created with the squad; nothing runs until
    :meth:`start_soon` is called on a running loop."""

    def __init__(self, *, journal: Journal | None = None, states: PluginStates | None = None,
                 extra_dirs: list[Path] | None = None) -> None:
        self.journal = journal or Journal()
        self.states = states or PluginStates()
        self.host = PluginHost(self.journal, self.states, list(extra_dirs or []))
        self.broker = Broker(self.host, self.states, self.journal)
        self.started = False
        self._watcher: asyncio.Task | None = None

    def start_soon(self) -> None:
        """Find the plugins and start those that decide for some project, on the running
        loop; from then on, every :data:`WATCH_PERIOD` seconds, a plugin installed,
        updated or switched on (here or in another kernel) is started, one removed or
        switched off everywhere is stopped. Once started, a call rescans the plugins only
        when their folders or the settings changed (a cheap stamp, not a full discovery)."""
        if not self.started or self.host.disk_stamp() != self.host.stamp:
            self.host.refresh()
        self.started = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._watcher is None or self._watcher.done() or self._watcher.get_loop() is not loop:
            self._watcher = loop.create_task(self._watch(), name="rule plugins watcher")

    async def _watch(self) -> None:
        while True:
            await anyio.sleep(WATCH_PERIOD)
            if self.host.disk_stamp() != self.host.stamp:
                try:
                    self.host.refresh()
                except Exception:  # a broken folder must not kill the watcher
                    pass

    def find(self, name: str) -> str:
        """A plugin id from its id, its folder name, the last part of its id, or its name."""
        if not self.host.specs:
            self.host.refresh()
        specs = self.host.specs
        if name in specs:
            return name
        low = name.lower()
        for pid, spec in specs.items():
            if low in (spec.folder.name.lower(), pid.rsplit(".", 1)[-1].lower(), spec.name.lower()):
                return pid
        known = ", ".join(sorted(s.folder.name for s in specs.values())) or "none"
        raise LookupError(f"no rule plugin {name!r} (rule plugins: {known})")

    def turn(self, name: str, on: bool, project: Project) -> str:
        pid = self.find(name)
        self.states.set_project(pid, project, on)
        self.start_soon()
        return pid

    def grant(self, name: str, granted: bool) -> str:
        pid = self.find(name)
        self.states.set_decide(pid, granted)
        self.start_soon()
        return pid

    async def aclose(self) -> None:
        """Stop the watcher and every plugin; the journal is flushed."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None and not watcher.done():
            watcher.cancel()
            await asyncio.wait([watcher])  # ended; a cancel of the caller still propagates
        await self.host.aclose()
        await self.journal.aclose()

    def kill_now(self) -> None:
        """At interpreter exit (no loop): kill every plugin's group, flush the journal."""
        self.host.kill_now()
        self.journal.flush()


@dataclass
class PluginRow:
    """One line of ``%escouade plugins``."""

    id: str
    short: str
    name: str
    shipped: bool
    granted: bool
    on: bool
    why: str
    process: str
    error: str | None = None


class PluginsListing:
    """What ``%escouade plugins`` shows: the rule plugins, whether each decides for the
    project, why, and its process. Its HTML is the views'
    (:func:`~..widgets.tables.plugins_html`)."""

    def __init__(self, project: Project, rows: list[PluginRow], settings: Path, errors: list[str],
                 note: str | None = None) -> None:
        self.project, self.rows, self.settings, self.errors = project, rows, settings, errors
        self.note = note  # what ``plugins on|off`` did, and to which project (its first lines)

    def __repr__(self) -> str:
        p = self.project
        lines = [*(self.note.splitlines() if self.note else []),
                 f"Rule plugins for project {p.name} ({p.folder}){' — private' if p.private else ''}:"]
        if not self.rows:
            lines.append("  none found")
        for r in self.rows:
            state = "on " if r.on else "off"
            lines.append(f"  {r.short:<14} {r.name:<16} {state} ({r.why}); {r.process}")
        for e in self.errors:
            lines.append(f"  ! {e}")
        lines.append(f"Settings: {self.settings}")
        return "\n".join(lines)


def _why(states: PluginStates, pid: str, spec: PluginSpec, project: Project) -> tuple[bool, str]:
    st = states.state(pid)
    if states.error:
        return False, "the settings file is broken"
    if not st.decide:
        return False, "its permission to decide was taken back"
    own = st.projects.get(project.id)
    if own is not None:
        return own.on, f"turned {'on' if own.on else 'off'} for this project"
    if project.private:
        return False, "private project: only a plugin turned on for it"
    default = st.default if st.default is not None else spec.default_on
    origin = "your default" if st.default is not None else ("shipped: off until turned on" if spec.shipped
                                                            else "installed")
    return default, origin


def listing(rules: RulePlugins, project: Project, note: str | None = None) -> PluginsListing:
    rules.host.refresh()
    rows = []
    for pid in sorted(rules.host.specs):
        spec = rules.host.specs[pid]
        on, why = _why(rules.states, pid, spec, project)
        proc = rules.host.processes.get(pid)
        rows.append(PluginRow(id=pid, short=spec.folder.name, name=spec.name, shipped=spec.shipped,
                              granted=rules.states.granted(pid), on=on and spec.argv is not None, why=why,
                              process=proc.describe() if proc else "stopped", error=spec.error))
    errors = [e for e in rules.host.errors if e]
    if rules.states.error:
        errors.append(rules.states.error)
    return PluginsListing(project, rows, rules.states.path, errors, note)
