"""One running agent: a harness's process, its ACP session, its conversation, its cards.

The engine works without Jupyter: in a plain ``asyncio.run`` script,
``agent = Agent(ref, program=...); agent.start(); await agent.ready()`` then
``await agent.send("hi")``. In a kernel the magics do the same on the kernel's loop;
views subscribe to ``agent.conversation`` and to ``agent.on_status``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import acp
import anyio
from acp.schema import Implementation

from . import __version__
from .acp.client import EscouadeClient, capabilities
from .acp.process import StderrRing, agent_environment, drain, kill_group_now, spawn, terminate_group
from .acp.transport import LineTransport
from .conversation import Change, Conversation, Item, Message, Permission, ToolCall
from .manifest import HarnessRef
from .render_text import answer_label, render_item

log = logging.getLogger(__name__)

START_TIMEOUT = 60.0
"""Seconds an agent has to answer ``initialize`` and ``session/new``."""

Policy = Callable[["PermissionCard"], Awaitable[None]]
"""A permission policy: given a fresh card, it may settle it (``card.choose(option,
by=..., message=...)``) or leave it pending. Policies run in order, before the user is
called; rule plugins (the broker) and the agent's Escouade mode are policies. A
policy must return promptly (the broker bounds plugins to 500 ms)."""


class AgentError(RuntimeError):
    """The agent could not start, or stopped answering."""


class AgentExited(AgentError):
    """The agent's process ended; ``code`` is its exit code, ``stderr_tail`` its last lines."""

    def __init__(self, name: str, code: int | None, stderr_tail: str, during: str = "") -> None:
        self.code = code
        self.stderr_tail = stderr_tail
        where = f" during {during}" if during else ""
        msg = f"agent {name!r} exited with code {code}{where}"
        if stderr_tail:
            msg += "; its stderr ended with:\n" + stderr_tail
        super().__init__(msg)


class PermissionCard:
    """A permission request of the agent, waiting for an answer.

    ``choose(option)`` answers it — ``option`` is one of the agent's ``optionId``s, or an
    option kind (``allow_once``, ``allow_always``, ``reject_once``, ``reject_always``),
    which picks the first option of that kind. The first answer wins; later ones return
    False and send nothing. Clicking a button on the card's view calls the same method.
    """

    def __init__(self, agent: Agent, permission: Permission) -> None:
        self.agent = agent
        self.permission = permission
        self._future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    @property
    def options(self) -> list[dict[str, Any]]:
        return self.permission.options

    @property
    def tool_call(self) -> ToolCall | None:
        return self.permission.tool_call

    @property
    def state(self) -> str:
        return self.permission.state

    @property
    def label(self) -> str:
        return answer_label(self.permission)

    def option(self, option: str) -> dict[str, Any]:
        """The agent's option for an ``optionId`` or a kind; ``ValueError`` if none."""
        for o in self.options:
            if o.get("optionId") == option:
                return o
        for o in self.options:
            if o.get("kind") == option:
                return o
        offered = ", ".join(f"{o.get('optionId')} ({o.get('kind')})" for o in self.options)
        raise ValueError(f"no option {option!r} on this card; the agent offered: {offered}")

    def choose(self, option: str, by: str = "you", message: str | None = None) -> bool:
        """Answer with ``option``; returns False if the card was already answered."""
        chosen = self.option(option)
        if self._future.done():
            return False
        self.agent.conversation.resolve_permission(self.permission, "selected", chosen["optionId"], by, message)
        self._future.set_result({"outcome": "selected", "optionId": chosen["optionId"]})
        self.agent._card_settled(self)
        return True

    def cancel(self, why: str | None = None) -> bool:
        """Answer ``cancelled`` (the turn was stopped); False if already answered."""
        if self._future.done():
            return False
        self.agent.conversation.resolve_permission(self.permission, "cancelled", None, why)
        self._future.set_result({"outcome": "cancelled"})
        self.agent._card_settled(self)
        return True

    async def wait(self) -> dict[str, Any]:
        return await asyncio.shield(self._future)

    def __repr__(self) -> str:
        return render_item(self.permission)


class Turn:
    """One prompt turn. ``await turn`` waits for its end and returns the turn itself;
    it raises :class:`AgentError` (e.g. :class:`AgentExited`) if the turn failed.

    ``stop_reason``: ACP's (``end_turn``, ``cancelled``, ``max_tokens``…), None while
    running or on failure; ``text``: the agent's reply text of this turn; ``tool_calls``;
    ``items``: everything the turn added to the conversation; ``error``: the failure."""

    def __init__(self, agent: Agent, prompt: list[dict[str, Any]]) -> None:
        self.agent = agent
        self.prompt = prompt
        self.items: list[Item] = []
        self.stop_reason: str | None = None
        self.error: AgentError | None = None
        self.status = "queued"
        self._done = asyncio.get_running_loop().create_future()

    @property
    def done(self) -> bool:
        return self._done.done()

    @property
    def text(self) -> str:
        return "".join(i.text for i in self.items if isinstance(i, Message) and i.role == "agent")

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [i for i in self.items if isinstance(i, ToolCall)]

    def _finish(self, stop_reason: str | None = None, error: AgentError | None = None) -> None:
        if self._done.done():
            return
        self.stop_reason = stop_reason
        self.error = error
        self.status = "failed" if error else (stop_reason or "done")
        self._done.set_result(None)

    async def wait(self) -> Turn:
        await asyncio.shield(self._done)
        if self.error is not None:
            raise self.error
        return self

    def __await__(self):
        return self.wait().__await__()

    def __repr__(self) -> str:
        state = self.status if not self.error else f"failed: {str(self.error).splitlines()[0]}"
        return f"<Turn {self.agent.name} {state}: {len(self.text)} chars, {len(self.tool_calls)} tool calls>"


@dataclass
class ExitInfo:
    code: int | None
    stderr_tail: str
    expected: bool


class Agent:
    """One harness session. ``status`` is ``starting``, ``idle``, ``working``,
    ``waiting`` (a card waits for the user), ``exited`` (the process ended by itself),
    ``closed`` or ``failed`` (could not start). ``on_status`` callbacks get the agent.

    ``program`` is the located executable; ``cwd`` the session folder (absolute);
    ``name`` the agent's name in the squad. ``policies`` are consulted on every
    permission request before the user is called (see :data:`Policy`)."""

    def __init__(self, harness: HarnessRef, *, program: str, name: str | None = None,
                 cwd: str | Path | None = None, start_timeout: float = START_TIMEOUT,
                 policies: Sequence[Policy] = ()) -> None:
        self.harness = harness
        self.program = program
        self.name = name or harness.short_id
        self.cwd = Path(cwd or Path.cwd()).resolve()
        self.start_timeout = start_timeout
        self.conversation = Conversation()
        self.status = "starting"
        self.error: str | None = None
        self.exit: ExitInfo | None = None
        self.session_id: str | None = None
        self.agent_info: dict[str, Any] | None = None
        self.agent_capabilities: dict[str, Any] = {}
        self.stderr = StderrRing()
        self.on_status: list[Callable[[Agent], None]] = []
        self.transport: LineTransport | None = None
        self.client: EscouadeClient | None = None
        self._process = None
        self._conn = None
        self._main_task: asyncio.Task | None = None
        self._ready = asyncio.Event()
        self._exited = asyncio.Event()
        self._closing = False
        self._turn_lock = asyncio.Lock()
        self._turn: Turn | None = None
        self._turn_tasks: set[asyncio.Task] = set()
        self._pending_cards: list[PermissionCard] = []
        self._new_cards: asyncio.Queue[PermissionCard] = asyncio.Queue()
        self.policies: list[Policy] = list(policies or [])
        self.conversation.subscribe(self._collect)

    # -- state ------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None

    @property
    def pending_cards(self) -> list[PermissionCard]:
        return list(self._pending_cards)

    def _set_status(self, status: str) -> None:
        if status == self.status:
            return
        self.status = status
        for fn in list(self.on_status):
            try:
                fn(self)
            except Exception:
                log.exception("status subscriber failed")

    def _collect(self, changes: list[Change]) -> None:
        if self._turn is not None and not self._turn.done:
            for change in changes:
                if change.kind == "added" and change.item is not None:
                    self._turn.items.append(change.item)

    # -- start ----------------------------------------------------------------------------
    def start(self) -> asyncio.Task:
        """Schedule the start on the running loop and return at once."""
        if self._main_task is None:
            self._main_task = asyncio.get_running_loop().create_task(self._main(), name=f"escouade agent {self.name}")
        return self._main_task

    async def ready(self) -> Agent:
        """Wait until the session exists; raises :class:`AgentError` if the start failed."""
        self.start()
        ready = asyncio.ensure_future(self._ready.wait())
        exited = asyncio.ensure_future(self._exited.wait())
        try:
            await asyncio.wait({ready, exited}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            exited.cancel()
        if not self._ready.is_set() or self.session_id is None:
            raise AgentError(self.error or f"agent {self.name!r} is {self.status}")
        return self

    def argv(self) -> list[str]:
        return [self.program, *self.harness.harness.acp.args]

    async def _main(self) -> None:
        acp_spec = self.harness.harness.acp
        env = agent_environment(acp_spec.remove_env or (), acp_spec.env or {})
        try:
            self._process = await spawn(self.argv(), cwd=self.cwd, env=env)
        except OSError as exc:
            self._fail(f"could not start {' '.join(self.argv())}: {exc}")
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, self._process.stderr, self.stderr)
            tg.start_soon(self._connect)
            code = await self._process.wait()
            self._on_exit(code)
            await anyio.sleep(0.05)  # let the drain read the last bytes
            tg.cancel_scope.cancel()

    async def _connect(self) -> None:
        self.transport = LineTransport(self._process.stdin, self._process.stdout, intercept=self._intercept)
        self.client = EscouadeClient(cwd=self.cwd, on_permission=self._on_permission,
                                     on_update=self.conversation.apply)
        self._conn = acp.connect_to_agent(self.client, self.transport)
        fs = self.harness.harness.acp.fs is not False
        try:
            with anyio.fail_after(self.start_timeout):
                init = await self._conn.initialize(
                    protocol_version=acp.PROTOCOL_VERSION, client_capabilities=capabilities(fs),
                    client_info=Implementation(name="escouade_nb", title="escouade_nb", version=__version__))
                if init.protocol_version != acp.PROTOCOL_VERSION:
                    raise AgentError(f"agent {self.name!r} speaks ACP protocol version {init.protocol_version}; "
                                     f"escouade_nb speaks version {acp.PROTOCOL_VERSION}")
                self.agent_info = init.agent_info.model_dump(mode="json", exclude_none=True) if init.agent_info else None
                self.agent_capabilities = (init.agent_capabilities.model_dump(mode="json", by_alias=True, exclude_none=True)
                                           if init.agent_capabilities else {})
                session = await self._conn.new_session(cwd=str(self.cwd), mcp_servers=[])
        except TimeoutError:
            await self._abort(f"agent {self.name!r} did not answer initialize/session/new within "
                              f"{self.start_timeout:g} s")
            return
        except AgentError as exc:
            await self._abort(str(exc))
            return
        except acp.RequestError as exc:
            await self._abort(f"agent {self.name!r} refused to start a session: {exc} ({exc.code})")
            return
        except ConnectionError:
            return  # the process ended; _on_exit tells why
        self.session_id = session.session_id
        self.conversation.set_session_state(
            modes=session.modes.model_dump(mode="json", by_alias=True, exclude_none=True) if session.modes else None,
            config_options=[o.model_dump(mode="json", by_alias=True, exclude_none=True)
                            for o in (session.config_options or [])] or None)
        self._ready.set()
        self._set_status("idle")

    def _intercept(self, message: dict[str, Any]) -> bool:
        if message.get("method") == "session/update" and "id" not in message:
            params = message.get("params") or {}
            self.conversation.apply(params.get("update") if isinstance(params, dict) else params)
            return True
        return False

    def _fail(self, error: str) -> None:
        self.error = error
        self.conversation.add_notice(f"Could not start: {error}", level="error")
        self._set_status("failed")
        self._exited.set()

    async def _abort(self, error: str) -> None:
        self._fail(error)
        self._closing = True
        if self._process is not None:
            await terminate_group(self._process)

    # -- exit ---------------------------------------------------------------------------
    def _on_exit(self, code: int | None) -> None:
        tail = self.stderr.tail()
        expected = self._closing
        self.exit = ExitInfo(code, tail, expected)
        if not expected:
            self.error = str(AgentExited(self.name, code, tail))
            self.conversation.add_notice(f"Agent exited with code {code}", level="error", detail=tail)
        for card in list(self._pending_cards):
            card.cancel("agent exited" if not expected else "agent closed")
        self.conversation.cancel_unfinished()
        self.conversation.close_messages()
        if self.status != "failed":
            self._set_status("closed" if expected else "exited")
        self._exited.set()
        exc = AgentExited(self.name, code, tail, during="the turn")
        if self._turn is not None:
            self._turn._finish(error=exc)

    # -- turns ------------------------------------------------------------------------------
    def send(self, prompt: str | Sequence[Any]) -> Turn:
        """Queue a prompt turn and return its :class:`Turn` at once. ``prompt`` is text,
        or a list of ACP content blocks (dicts or SDK models). One turn runs at a time;
        later sends wait their turn in order."""
        blocks = _blocks(prompt)
        turn = Turn(self, blocks)
        task = asyncio.get_running_loop().create_task(self._run_turn(turn), name=f"escouade turn {self.name}")
        self._turn_tasks.add(task)
        task.add_done_callback(self._turn_tasks.discard)
        return turn

    async def _run_turn(self, turn: Turn) -> None:
        async with self._turn_lock:
            if self.status in ("exited", "closed", "failed"):
                turn._finish(error=AgentError(f"agent {self.name!r} is {self.status}; the prompt was not sent"))
                return
            try:
                await self.ready()
            except AgentError as exc:
                turn._finish(error=exc)
                return
            self._turn = turn
            turn.status = "running"
            self._set_status("working")
            self.conversation.add_user_message(turn.prompt)
            try:
                response = await self._conn.prompt(session_id=self.session_id, prompt=turn.prompt)
            except ConnectionError:
                with anyio.move_on_after(5):
                    await self._exited.wait()
                info = self.exit or ExitInfo(None, self.stderr.tail(), False)
                turn._finish(error=AgentExited(self.name, info.code, info.stderr_tail, during="the turn"))
            except acp.RequestError as exc:
                self.conversation.add_notice(f"The agent answered the prompt with an error: {exc}", level="error")
                turn._finish(error=AgentError(f"agent {self.name!r} failed the turn: {exc}"))
            except Exception as exc:  # a malformed answer: the turn fails, the agent lives on
                log.exception("prompt failed")
                turn._finish(error=AgentError(f"agent {self.name!r}: {exc}"))
            else:
                turn._finish(stop_reason=response.stop_reason)
            finally:
                self._turn = None
                self.conversation.close_messages()
                if self.status in ("working", "waiting"):
                    self._set_status("idle")

    def cancel(self) -> None:
        """Stop the running turn: send ``session/cancel``, answer every pending card
        ``cancelled`` (ACP requires the client to), mark unfinished tool calls cancelled.
        The turn then ends with the agent's stop reason (``cancelled``). Queued turns
        stay queued."""
        if self._conn is None or self.session_id is None or self._turn is None:
            return
        loop = asyncio.get_running_loop()
        conn, session_id = self._conn, self.session_id

        async def notify() -> None:
            try:
                await conn.cancel(session_id=session_id)
            except ConnectionError:
                pass

        task = loop.create_task(notify())
        self._turn_tasks.add(task)
        task.add_done_callback(self._turn_tasks.discard)
        for card in list(self._pending_cards):
            card.cancel("you stopped the turn")
        self.conversation.cancel_unfinished()

    # -- permissions -------------------------------------------------------------------------
    async def _on_permission(self, tool_call: dict[str, Any], options: list[dict[str, Any]]) -> dict[str, Any]:
        perm = self.conversation.add_permission(tool_call, options)
        card = PermissionCard(self, perm)
        self._pending_cards.append(card)
        self._new_cards.put_nowait(card)
        if self._closing or self.status in ("exited", "closed"):
            card.cancel("agent closed")
        elif self.policies:
            self.conversation.set_deciding(perm, True)
            task = asyncio.get_running_loop().create_task(self._consult(card))
            self._turn_tasks.add(task)
            task.add_done_callback(self._turn_tasks.discard)
        else:
            self._set_status("waiting")
        return await card.wait()

    async def _consult(self, card: PermissionCard) -> None:
        """Ask each policy in turn; the first that settles the card wins. The user may
        answer meanwhile. If none settles it, the user is called (``waiting``)."""
        for policy in list(self.policies):
            if card.state != "pending":
                return
            try:
                await policy(card)
            except Exception:
                log.exception("permission policy %r failed; the user decides", policy)
        if card.state == "pending":
            self.conversation.set_deciding(card.permission, False)
            self._set_status("waiting")

    def _card_settled(self, card: PermissionCard) -> None:
        if card in self._pending_cards:
            self._pending_cards.remove(card)
        if not self._pending_cards and self.status == "waiting":
            self._set_status("working" if self._turn is not None else "idle")

    async def next_permission(self, timeout: float | None = None) -> PermissionCard:
        """The next permission card of this agent not handed out yet (waits for one).
        Raises ``TimeoutError`` after ``timeout`` seconds, :class:`AgentError` if the
        agent ends first."""
        if not self._new_cards.empty():
            return self._new_cards.get_nowait()
        getter = asyncio.ensure_future(self._new_cards.get())
        exited = asyncio.ensure_future(self._exited.wait())
        try:
            done, _ = await asyncio.wait({getter, exited}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
        if getter in done:
            return getter.result()
        getter.cancel()
        if exited in done:
            raise AgentError(self.error or f"agent {self.name!r} is {self.status}")
        raise TimeoutError(f"no permission request from {self.name!r} within {timeout} s")

    # -- closing ------------------------------------------------------------------------------
    async def close(self) -> None:
        """End the session: close stdin, then terminate the process group."""
        self._closing = True
        if self._conn is not None:
            try:
                await self._conn.close()
            except Exception:
                pass
        if self._process is not None:
            await terminate_group(self._process)
        if self._main_task is not None:
            with anyio.move_on_after(5):
                await self._exited.wait()
        if self.status not in ("failed", "exited"):
            self._set_status("closed")

    def kill_now(self) -> None:
        """Kill the process group synchronously (interpreter exit)."""
        self._closing = True
        if self._process is not None and self._process.returncode is None:
            kill_group_now(self._process.pid)

    def __repr__(self) -> str:
        return f"<Agent {self.name} ({self.harness.id}) {self.status}>"


def _blocks(prompt: str | Sequence[Any]) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        return [{"type": "text", "text": prompt}]
    out = []
    for block in prompt:
        if isinstance(block, str):
            out.append({"type": "text", "text": block})
        elif hasattr(block, "model_dump"):
            out.append(block.model_dump(mode="json", by_alias=True, exclude_none=True))
        else:
            out.append(dict(block))
    return out

