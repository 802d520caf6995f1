"""One agent process and its one ACP session, as an async context manager.

``async with AgentSession(...) as s:`` spawns the program (its own process group, stderr
drained into a ring), opens one task group that owns everything of this process (the
stderr drain, the terminals, the exit watch, background jobs started with
:meth:`start_soon`), and puts our :class:`~.transport.LineTransport` under the SDK's
connection with a :class:`~.router.Router` in front. Leaving the block — normally, on
error or on cancellation — ends it in a ``finally``: the connection is closed, the
process group ended (stdin closed, :data:`~.process.EOF_GRACE` seconds to exit by itself,
then SIGTERM, then SIGKILL), the task group cancelled. A restart
makes a new ``AgentSession``: nothing of a dead process can survive by construction.

Inside: :meth:`initialize` (ACP ``initialize``; the protocol version is checked as it
came on the wire), :meth:`open` (``session/new``, or ``session/resume`` / ``session/load``
when resuming, as the agent offers), :meth:`authenticate`, :meth:`list_sessions`,
:meth:`delete_session`, :meth:`set_config_option`, :meth:`request` (raw JSON-RPC through
our own transport: what the SDK's typed API lacks or cannot carry — the models of
:mod:`~..core.acp_v1_25` —, answers read with the SDK's models), :meth:`close`
(``session/close`` first where offered).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import acp
import anyio
from anyio.streams.memory import MemoryObjectSendStream
from acp.schema import (ClientCapabilities, Implementation, InitializeResponse, ListSessionsResponse,
                        LoadSessionResponse, NewSessionResponse, ResumeSessionResponse,
                        SetSessionConfigOptionBooleanRequest, SetSessionConfigOptionResponse,
                        SetSessionConfigOptionSelectRequest)

from .._errors import EscouadeError
from .._version import __version__
from ..core.acp_v1_25 import (CancelRequestNotification, DeleteSessionRequest, SystemPrompt, merge_capabilities, offers,
                              offers_system_prompt)
from .errors import AgentError, AuthRequired
from .process import EOF_GRACE, StderrRing, drain, signal_group, spawn, terminate_group
from .router import Router
from .transport import LineTransport

log = logging.getLogger(__name__)

START_TIMEOUT = 60.0
"""Seconds an agent has to answer ``initialize`` and ``session/new``."""
CLOSE_TIMEOUT = 2.0
"""Seconds an agent has to answer ``session/close`` before its process group is ended anyway."""
MCP_OVER_ACP = ("mcp/connect", "mcp/message", "mcp/disconnect")
"""ACP's unstable MCP-over-ACP requests (agent → client), intercepted before the SDK (which does not route them)."""
MAX_MCP_IN_FLIGHT = 64
"""MCP-over-ACP messages of one session handled at once; more are refused (a flood is bounded)."""
RELAY_HELLO = "_escouade/relay"
"""The notification a launcher's relay (engine/launch/pipe_relay.py) writes first, before the agent's own
bytes: it runs, and carries the kernel's MCP server over this pipe. Taken only from a session that sent one a
:attr:`AgentSession.preamble`, once."""


class SessionClosed(EscouadeError):
    """The session was closed before its process was up: nothing to speak to."""


@dataclass
class ExitInfo:
    """How the process ended: ``code`` (negative: killed by that signal), the stderr
    tail, and whether we asked it to (``expected``: closed, restarted, stopped)."""

    code: int | None
    stderr_tail: str
    expected: bool


class SessionPage(NamedTuple):
    """A page of ``session/list``: ``sessions`` as wire dicts (``sessionId``, ``cwd``,
    ``title``?, ``updatedAt``? ISO 8601, ``additionalDirectories``?), and the cursor of
    the next page (None: the last one)."""

    sessions: list[dict[str, Any]]
    next_cursor: str | None


def dump(model: Any) -> dict[str, Any]:
    """An SDK model as its wire dict (camelCase, no nulls)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class AgentSession:
    """One process + one ACP session of the agent ``name``.

    ``client``: our ``acp.Client`` handlers (:class:`~.client.EscouadeClient`), whose
    ``terminals`` are served in this session's task group. ``fold(update)`` takes each
    ``session/update`` in arrival order; ``withdrawn(tool_call_id) -> bool`` closes the
    card of a permission request the agent withdrew. ``on_fatal(message)`` is told when
    the wire broke (a message too long to take: the agent is then stopped, rather than
    a silent hang); ``on_refused(size, envelope)`` of a request or notification over the
    wire's cap, refused unread (:class:`~.transport.LineTransport`); ``on_models(models)``
    of the agent's raw ``models`` state (goose);
    ``fold_child(session_id, update)`` takes the updates of a child session (a subagent
    announced by a ``subagent_update``);
    ``on_exit(info)`` of the process's end, before :attr:`exited` is set."""

    def __init__(self, *, name: str, argv: Sequence[str], cwd: Path, env: Mapping[str, str], client: Any,
                 fold: Callable[[Any], None], withdrawn: Callable[[str], bool],
                 on_fatal: Callable[[str], None] = lambda message: None,
                 on_refused: Callable[[int, dict[str, Any]], None] = lambda size, envelope: None,
                 on_models: Callable[[dict[str, Any]], None] = lambda models: None,
                 on_exit: Callable[[ExitInfo], None] = lambda info: None,
                 fold_child: Callable[[str, Any], None] = lambda session_id, update: None,
                 line_observers: Sequence[Callable[[str, bytes], None]] = (),
                 start_timeout: float = START_TIMEOUT) -> None:
        self.name = name
        self.argv = list(argv)
        self.cwd = Path(cwd)
        self.env = dict(env)
        self.client = client
        self.start_timeout = start_timeout
        self.stderr = StderrRing()
        self.router = Router(fold=fold, refuse=self._refuse, withdrawn=withdrawn,
                             tool_calls=getattr(client, "raw_tool_calls", None), fold_child=fold_child,
                             children=getattr(client, "child_sessions", None))
        self._on_fatal = on_fatal
        self._on_refused = on_refused
        self._on_models = on_models
        self._on_exit = on_exit
        self._line_observers = list(line_observers)
        self.process: Any = None
        self.confined: Any = None  # engine.launch.sandbox.Confined: pass_fds, spawned(), attach(), close()
        self.transport: LineTransport | None = None
        self.conn: Any = None
        self.session_id: str | None = None
        self.agent_info: dict[str, Any] | None = None
        self.agent_capabilities: dict[str, Any] = {}
        self.init_meta: dict[str, Any] = {}  # the initialize answer's top-level _meta (``steering.supported``)
        self.auth_methods: list[dict[str, Any]] = []
        self.protocol_version: Any = None  # initialize's protocolVersion as it came on the wire
        self.exit: ExitInfo | None = None
        self.exited = anyio.Event()
        self.closing = False
        self.fatal: str | None = None
        self.loaded = False  # the session was reattached with session/load
        self.resumed = False  # … with session/resume (no replay)
        self.additional_directories: list[str] = []  # sent on session setup (offered by the agent)
        self.system_prompt_sent = False  # a systemPrompt went with the session setup
        self._close_sent = False
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._ids = itertools.count(1)
        self._requests: dict[str, MemoryObjectSendStream[dict[str, Any]]] = {}
        self._on_answer: dict[str, Callable[[dict[str, Any]], None]] = {}  # rid -> called as its answer is read
        self._prompts: set[Any] = set()  # ids of session/prompt requests not answered yet
        self.prompt_answer: dict[str, Any] | None = None  # the last session/prompt result, as it came
        # bytes written to the program's stdin before ACP starts: a launcher's relay source (engine/launch/relayed.py)
        self.preamble = b""
        self.relay: dict[str, Any] | None = None  # the relay's hello (RELAY_HELLO), when one runs on the far side
        # a relay's hello is taken without a preamble of ours: an agent by URL, whose server (escouade-acp-serve)
        # runs it under the relay (all on that connection is the agent's side: its hello is trusted no further)
        self.relay_expected = False
        # MCP-over-ACP (mcp/connect, mcp/message, mcp/disconnect from the agent): handler(method, params, request)
        # -> the result (None for a notification), or raises an exception whose error() is the JSON-RPC error;
        # None: they are answered "method not found"
        self.mcp_over_acp: Callable[[str, Any, bool], Awaitable[dict[str, Any] | None]] | None = None
        self._mcp_in_flight = 0
        self._mcp_calls: dict[Any, anyio.CancelScope] = {}  # the agent's mcp/* request id -> its job's scope

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def __aenter__(self) -> AgentSession:
        """Spawn and connect. Raises ``OSError`` when the program cannot start,
        :class:`SessionClosed` when :meth:`close` came first (or during the spawn)."""
        if self.closing:
            self.end_confined()
            raise SessionClosed(f"agent {self.name!r} was closed before it started")
        confined = self.confined
        try:
            process = await spawn(self.argv, cwd=self.cwd, env=self.env,
                                  pass_fds=confined.pass_fds if confined is not None else ())
        except BaseException:
            if confined is not None:
                confined.close()
            raise
        if confined is not None:  # its network attached before its program starts (bwrap waits on it)
            confined.spawned()
            try:  # (self.process is set after: a Stop meanwhile waits for no exit, the check below ends it)
                await confined.attach()
            except BaseException as exc:
                with anyio.CancelScope(shield=True):
                    await terminate_group(process, grace=1.0)
                confined.close()
                if self.closing and isinstance(exc, Exception):  # stopped or closed while it was attached
                    raise SessionClosed(f"agent {self.name!r} was closed while it started") from None
                raise
        self.process = process
        if self.closing:  # closed while it spawned: it never speaks
            await terminate_group(self.process)
            self.end_confined()
            raise SessionClosed(f"agent {self.name!r} was closed while it started")
        stack = contextlib.AsyncExitStack()
        try:
            if self.preamble:  # before any ACP: what the launcher's bootstrap reads first
                await self.process.stdin.send(self.preamble)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            self._tg.start_soon(drain, self.process.stderr, self.stderr)
            await self._tg.start(self.client.terminals.serve)
            self.transport = LineTransport(self.process.stdin, self.process.stdout, intercept=self._intercept,
                                           on_skip=self._on_skip, on_refused=self._on_refused)
            self.transport.line_observers.extend(self._line_observers)
            self.transport.observers.append(self._observe)
            # elicitation/create is routed by the SDK only with its unstable flag
            self.conn = acp.connect_to_agent(self.client, self.transport, use_unstable_protocol=True)
            self._tg.start_soon(self._watch_exit)
        except BaseException:
            await self._end(stack)
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await self._end(stack)

    async def _end(self, stack: contextlib.AsyncExitStack) -> None:
        try:
            with anyio.CancelScope(shield=True):  # the group is ended even when we are cancelled
                self.closing = self.closing or self.exit is None
                if self.conn is not None:
                    with contextlib.suppress(Exception):
                        await self.conn.close()
                if self.process is not None:
                    await terminate_group(self.process, eof_grace=EOF_GRACE)
                    with anyio.move_on_after(1):
                        await self.exited.wait()  # the watch records how it ended
        finally:
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
            for send in self._requests.values():
                send.close()
            self._requests.clear()
            self.end_confined()
            await stack.aclose()

    def end_confined(self) -> None:
        """A sandbox's companion (pasta) ended with the process (idempotent; never raises)."""
        if self.confined is not None:
            self.confined.close()

    async def _watch_exit(self) -> None:
        code = await self.process.wait()
        signal_group(self.process.pid, signal.SIGKILL)  # what it left running in its group goes too
        self.end_confined()  # its pasta: never outlives it
        await anyio.sleep(0.05)  # let the drain read the last bytes
        self.exit = ExitInfo(code, self.stderr.tail(), self.closing)
        try:
            self._on_exit(self.exit)  # before anyone waiting on ``exited`` wakes: they see its effects
        finally:
            self.exited.set()

    def start_soon(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run a background job of this session in its task group (cancelled when the
        session ends). Outside the ``async with`` block the job is not run."""
        if self._tg is None or self.exited.is_set():
            log.debug("session of %s is over: %r not started", self.name, fn)
            return
        self._tg.start_soon(fn, *args)

    async def close(self) -> None:
        """Close stdin, give the agent :data:`~.process.EOF_GRACE` seconds to exit on end
        of input, then terminate the process group (SIGTERM, then SIGKILL); before the
        spawn, it never starts. First ``session/close`` when the agent offers it
        (``sessionCapabilities.close``; at most :data:`CLOSE_TIMEOUT` seconds, once)."""
        self.closing = True
        if self.session_id is not None and not self._close_sent and offers(self.agent_capabilities, "close"):
            self._close_sent = True
            with contextlib.suppress(Exception):  # an error or no answer: the process group ends anyway
                await self.request("session/close", {"sessionId": self.session_id}, timeout=CLOSE_TIMEOUT)
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await self.conn.close()
        if self.process is not None:
            await terminate_group(self.process, eof_grace=EOF_GRACE)
        self.end_confined()

    # -- handshake ------------------------------------------------------------------------------
    async def initialize(self, capabilities: ClientCapabilities, extra: Mapping[str, Any] | None = None) -> None:
        """ACP ``initialize``, sent through our own transport so that ``extra`` client
        capabilities the SDK's model lacks (:func:`~..core.acp_v1_25.client_capabilities`)
        are advertised too; the answer is read with the SDK's model, and
        ``agent_capabilities`` keeps what it would drop (``sessionCapabilities.systemPrompt``).
        Raises :class:`AgentError` when the agent speaks another protocol version,
        ``acp.RequestError`` on an error answer, ``TimeoutError`` after ``start_timeout``."""
        caps = merge_capabilities(dump(capabilities), dict(extra or {}))
        info = Implementation(name="escouade_nb", title="escouade_nb", version=__version__)
        result = await self.request("initialize", {"protocolVersion": acp.PROTOCOL_VERSION, "clientCapabilities": caps,
                                                   "clientInfo": dump(info)}, timeout=self.start_timeout)
        if self.protocol_error():
            raise AgentError(self.protocol_error())
        init = InitializeResponse.model_validate(result)
        self.agent_info = dump(init.agent_info) if init.agent_info else None
        raw = (result or {}).get("agentCapabilities")
        self.agent_capabilities = merge_capabilities(dump(init.agent_capabilities) if init.agent_capabilities else {},
                                                     raw if isinstance(raw, dict) else {})
        self.auth_methods = [dump(m) for m in (init.auth_methods or [])]
        meta = (result or {}).get("_meta")
        self.init_meta = meta if isinstance(meta, dict) else {}

    def protocol_error(self) -> str | None:
        """Why the agent cannot be spoken to: its ``initialize`` answer gave a protocol
        version (as it came on the wire) other than ours, an integer. None when fine."""
        version = self.protocol_version
        if version is None or (type(version) is int and version == acp.PROTOCOL_VERSION):
            return None
        return (f"agent {self.name!r} speaks ACP protocol version {version!r}; this client supports "
                f"[{acp.PROTOCOL_VERSION}], so the connection was closed")

    async def open(self, *, resume: str | None = None, before_load: Callable[[], None] = lambda: None,
                   mcp_servers: Sequence[Any] = (), additional_directories: Sequence[Path] = (),
                   system_prompt: SystemPrompt | None = None, replay: bool = False) -> Any:
        """Reattach to ``resume`` when given: ``session/resume`` when the agent offers it
        (``sessionCapabilities.resume``: no replay, ``self.resumed``), else ``session/load``
        when it advertises ``loadSession`` (``self.loaded``); ``before_load()`` runs first
        in both cases: a replay folds afresh, and is folded once by an agent that replays
        on ``session/resume`` although it must not; else (or without ``resume``) ``session/new``. ``replay``:
        the client has none of the session's history (a session of the agent's own list,
        no transcript): ``session/load`` is preferred then, for its replay.
        ``additional_directories`` (absolute) are sent only when the agent offers
        ``sessionCapabilities.additionalDirectories`` (``self.additional_directories``
        says what was sent), ``system_prompt`` only where it offers ``systemPrompt`` in
        that mode (``self.system_prompt_sent``). Sent through our own transport, the
        answer read with the SDK's model (``NewSessionResponse``…) and returned.
        Raises :class:`AuthRequired` on ACP's ``auth_required`` (-32000)."""
        caps = self.agent_capabilities
        extra: dict[str, Any] = {}
        if additional_directories and offers(caps, "additionalDirectories"):
            self.additional_directories = [str(d) for d in additional_directories]  # absolute (Agent resolved them)
            extra["additionalDirectories"] = self.additional_directories
        if system_prompt is not None and offers_system_prompt(caps, system_prompt.mode):
            extra["systemPrompt"] = system_prompt.wire()
            self.system_prompt_sent = True
        base = {"cwd": str(self.cwd), "mcpServers": list(mcp_servers)}
        answer: ResumeSessionResponse | LoadSessionResponse | NewSessionResponse
        try:
            with anyio.fail_after(self.start_timeout):
                if resume and offers(caps, "resume") and not (replay and caps.get("loadSession")):
                    before_load()  # resume must not replay: an agent that does anyway is folded as a load's
                    result = await self.request("session/resume", {"sessionId": resume, **base, **extra},
                                                timeout=self.start_timeout)
                    answer = ResumeSessionResponse.model_validate(result or {})
                    self.resumed = True
                    self.router.flush_early(resume)  # such a replay came before the answer
                    session_id = resume
                elif resume and caps.get("loadSession"):
                    before_load()
                    result = await self.request("session/load", {"sessionId": resume, **base, **extra},
                                                timeout=self.start_timeout)
                    answer = LoadSessionResponse.model_validate(result or {})
                    self.loaded = True
                    self.router.flush_early(resume)  # the replay came before the answer
                    session_id = resume
                else:
                    result = await self.request("session/new", {**base, **extra}, timeout=self.start_timeout)
                    answer = NewSessionResponse.model_validate(result)
                    session_id = answer.session_id
        except acp.RequestError as exc:
            if exc.code == acp.RequestError.auth_required().code:
                raise AuthRequired(f"agent {self.name!r}: {exc}", self.auth_methods) from None
            raise
        self.session_id = session_id
        return answer

    def opened(self) -> None:
        """The session's state is taken: fold the updates that came before its answer.
        Only after :meth:`open` (which set ``session_id``)."""
        assert self.session_id is not None, "opened() before open()"
        self.router.opened(self.session_id)

    async def authenticate(self, method_id: str) -> None:
        """ACP ``authenticate`` with one of the agent's ``authMethods``."""
        await self.conn.authenticate(method_id=method_id)

    # -- the session lifecycle (session/list, session/delete) ------------------------------------
    async def list_sessions(self, cursor: str | None = None, cwd: Path | None = None) -> SessionPage:
        """One page of ``session/list`` for ``cwd`` (default: the session folder), read
        with the SDK's model; ``AgentError`` when the agent does not offer it
        (``sessionCapabilities.list``), ``acp.RequestError`` on an error answer."""
        if not offers(self.agent_capabilities, "list"):
            raise AgentError(f"agent {self.name!r} does not list its sessions (no sessionCapabilities.list)")
        params = {"cwd": str(cwd or self.cwd), **({"cursor": cursor} if cursor is not None else {})}
        page = ListSessionsResponse.model_validate(await self.request("session/list", params) or {})
        return SessionPage([dump(info) for info in page.sessions], page.next_cursor)

    async def delete_session(self, session_id: str) -> None:
        """``session/delete`` (``AgentError`` when not offered: ``sessionCapabilities.delete``)."""
        if not offers(self.agent_capabilities, "delete"):
            raise AgentError(f"agent {self.name!r} cannot delete sessions (no sessionCapabilities.delete)")
        await self.request("session/delete", DeleteSessionRequest(session_id=session_id).wire())

    async def logout(self) -> None:
        """ACP ``logout`` (params and result ``{}``); ``AgentError`` when the agent does not
        offer it (``agentCapabilities.auth.logout``)."""
        if not isinstance((self.agent_capabilities.get("auth") or {}).get("logout"), dict):
            raise AgentError(f"agent {self.name!r} offers no logout (no agentCapabilities.auth.logout)")
        await self.request("logout", {})

    async def set_config_option(self, config_id: str, value: str | bool,
                                timeout: float = 30.0) -> SetSessionConfigOptionResponse:
        """``session/set_config_option`` (the SDK's request models: a ``bool`` is a boolean
        option), through our own transport so that a request the user abandons (the
        caller cancelled) is withdrawn with ``$/cancel_request``. Raises like :meth:`request`."""
        cls = SetSessionConfigOptionBooleanRequest if isinstance(value, bool) else SetSessionConfigOptionSelectRequest
        extra = {"type": "boolean"} if isinstance(value, bool) else {}
        params = dump(cls(config_id=config_id, session_id=self.session_id, value=value, **extra))
        result = await self.request("session/set_config_option", params, timeout=timeout)
        return SetSessionConfigOptionResponse.model_validate(result or {})

    # -- requests the SDK's typed API lacks ------------------------------------------------------
    async def request(self, method: str, params: dict[str, Any], timeout: float = 30.0,
                      on_answer: Callable[[dict[str, Any]], None] | None = None) -> Any:
        """Send a JSON-RPC request through our own transport (ids ``escouade-N``, never
        the SDK's integers) and return its ``result``; raises ``acp.RequestError`` on an
        error answer, ``ConnectionError`` if the agent is gone, ``TimeoutError``. A request
        abandoned (cancelled, or timed out) is withdrawn with ``$/cancel_request``.
        For methods the SDK's typed API does not have (``session/set_model``).
        ``on_answer(message)``: called with the answer as it is read, before the lines
        after it are folded (what it adds to the conversation lands in its wire place)."""
        if self.transport is None or not self.alive:
            raise ConnectionError(f"agent {self.name!r} is not running")
        rid = f"escouade-{next(self._ids)}"
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](1)
        self._requests[rid] = send
        if on_answer is not None:
            self._on_answer[rid] = on_answer
        try:
            await self.transport.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            with anyio.fail_after(timeout):
                async with receive:
                    try:
                        answer = await receive.receive()
                    except anyio.EndOfStream:
                        raise ConnectionError(f"agent {self.name!r} ended before answering {method}") from None
        except (anyio.get_cancelled_exc_class(), TimeoutError):  # abandoned: the agent may stop working on it
            self.start_soon(self._cancel_request, rid)
            raise
        finally:
            self._requests.pop(rid, None)
            self._on_answer.pop(rid, None)
            send.close()
        if "error" in answer:
            err = answer.get("error") or {}
            raise acp.RequestError(int(err.get("code", -32603)), str(err.get("message", "")), err.get("data"))
        return answer.get("result")

    async def _cancel_request(self, rid: str) -> None:
        """``$/cancel_request`` for our request ``rid`` (its late answer, if any, is dropped)."""
        if self.transport is not None and self.alive and not self.closing:
            with contextlib.suppress(Exception):
                await self.transport.send({"jsonrpc": "2.0", "method": "$/cancel_request",
                                           "params": CancelRequestNotification(request_id=rid).wire()})

    # -- incoming ------------------------------------------------------------------------------
    def _intercept(self, message: dict[str, Any]) -> bool:
        method = message.get("method")
        if method == "session/update":  # the commonest by far: none of the checks below is about it
            return self.router.intercept(message)
        rid = message.get("id")
        if isinstance(rid, str) and rid.startswith("escouade-") and "method" not in message:
            if rid in self._requests:  # else the answer of an abandoned request: dropped
                hook = self._on_answer.pop(rid, None)
                if hook is not None:
                    try:
                        hook(message)
                    except Exception:  # a bug of ours must not stop the reading
                        log.exception("answer hook failed")
                with contextlib.suppress(anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    self._requests[rid].send_nowait(message)
            return True
        if method == RELAY_HELLO and "id" not in message and (self.preamble or self.relay_expected) \
                and self.relay is None:
            params = message.get("params")
            self.relay = params if isinstance(params, dict) else {}
            return True
        if method in MCP_OVER_ACP:
            self._mcp_message(method, message)
            return True
        if method == "$/cancel_request" and "id" not in message:
            params = message.get("params")
            scope = self._mcp_calls.get(params.get("requestId")) if isinstance(params, dict) else None
            if scope is not None:  # the agent gave up on an MCP call: it is cancelled (a card waiting withdrawn)
                scope.cancel()
                return True
        return self.router.intercept(message)

    def _mcp_message(self, method: str, message: dict[str, Any]) -> None:
        """An MCP-over-ACP message from the agent: handed to :attr:`mcp_over_acp` in a job of
        this session (ended with it: the calls under way are cancelled), at most
        :data:`MAX_MCP_IN_FLIGHT` at once (more are refused, nothing queued); answered when
        it is a request. The agent's ``$/cancel_request`` naming it cancels it (answered
        -32800, request cancelled)."""
        request, rid = "id" in message, message.get("id")
        handler = self.mcp_over_acp
        if handler is None or self._mcp_in_flight >= MAX_MCP_IN_FLIGHT:
            if request:
                self._refuse(rid, {"code": -32601, "message": f"method not found: {method}"} if handler is None else
                             {"code": -32000, "message": f"{MAX_MCP_IN_FLIGHT} MCP-over-ACP requests are under way"})
            return
        self._mcp_in_flight += 1
        params = message.get("params")

        scope = anyio.CancelScope()
        key = rid if request and isinstance(rid, (str, int)) and rid not in self._mcp_calls else None
        if key is not None:
            self._mcp_calls[key] = scope

        async def answer() -> None:
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": rid,
                                     "error": {"code": -32800, "message": f"{method}: request cancelled"}}
            try:
                with scope:
                    try:
                        result = await handler(method, params, request)
                        reply = {"jsonrpc": "2.0", "id": rid, "result": result or {}}
                    except Exception as exc:
                        error = getattr(exc, "error", None)
                        reply = {"jsonrpc": "2.0", "id": rid, "error": error() if callable(error) else
                                 {"code": -32603, "message": f"{method} failed: {type(exc).__name__}"}}
                        if not callable(error):
                            log.exception("%s of %s failed", method, self.name)
            finally:
                self._mcp_in_flight -= 1
                if key is not None:
                    self._mcp_calls.pop(key, None)
            if request and self.transport is not None:
                with contextlib.suppress(ConnectionError):
                    await self.transport.send(reply)
        self.start_soon(answer)

    def notify(self, message: dict[str, Any]) -> None:
        """Send a JSON-RPC notification to the agent, in a job of this session (dropped once
        it is over)."""
        transport = self.transport
        if transport is None:
            return

        async def send() -> None:
            with contextlib.suppress(ConnectionError):
                await transport.send(message)
        self.start_soon(send)

    def _refuse(self, rpc_id: Any, error: dict[str, Any]) -> None:
        transport = self.transport  # set: the request came in through it
        if transport is None:
            return

        async def answer() -> None:
            with contextlib.suppress(ConnectionError):
                await transport.send({"jsonrpc": "2.0", "id": rpc_id, "error": error})
        self.start_soon(answer)

    def _observe(self, direction: str, message: dict[str, Any]) -> None:
        if direction == "out" and message.get("method") == "session/prompt" and "id" in message:
            self._prompts.add(message["id"])
            return
        result = message.get("result")
        if direction != "in" or not isinstance(result, dict):
            return
        if message.get("id") in self._prompts:  # the raw answer, for what the SDK's schema refuses
            self._prompts.discard(message["id"])
            self.prompt_answer = result
        if "protocolVersion" in result:
            self.protocol_version = result["protocolVersion"]  # initialize's, before the SDK reads it
        # goose's ``models`` in session/new (or load) answers: unstable, dropped by the SDK
        if isinstance(result.get("models"), dict):
            self._on_models(result["models"])

    def _on_skip(self, why: str) -> None:
        if why.startswith("line longer") and self.fatal is None and not self.closing:
            # the dropped message may be the answer a turn or a card waits for: rather than
            # a silent hang, the agent is stopped and its turn fails saying why
            self.fatal = f"transport error: a message from the agent was {why.removeprefix('line ')}"
            self._on_fatal(self.fatal)
            if self.alive:
                self.start_soon(terminate_group, self.process)
