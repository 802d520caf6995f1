"""What one session of an agent gets of the kernel: :class:`KernelAccess`.

The MCP servers it is given on ``session/new`` / ``session/load`` — the kernel's own
server ``escouade`` (:mod:`..kernel_mcp.server`: variables, cells, ``run_code``) and the
user's servers of ``mcp.json`` (:mod:`..manifest.mcp_servers`) — and the engine side of
the kernel's tools: the card of a ``run_code`` call in the agent's conversation, the
agent's own permission requests for those tools, whether the agent connected.

Rules (from the seed's "What Escouade holds", ``reference/mcp-in-the-kernel.md`` and issue
21, "Consent that holds"):

* the kernel's server goes to the session in ``mcpServers`` with its bearer token in the
  HTTP entry's ``headers``; an agent without HTTP MCP, or one that copies its
  ``mcpServers`` onto a command line (``acp.mcpInArgv``: claude-agent), gets the stdio
  bridge ``escouade-mcp-bridge`` whose env names a 0600 token file, never the token: the
  token is in no argv or environment of the agent's processes, no transcript (redacted),
  no log;
* what you approve is what runs: a ``run_code`` card shows the code the server will run,
  whole, frozen (:func:`run_request`); nothing the agent sends later changes it;
* exactly one card per ``run_code`` call, whatever the agent, and a request is matched by
  what it asks for, never by words in its title (:func:`identify`): the agent's own
  permission request that provably asks our ``run_code`` (named so on a whole field,
  arguments that fit the tool's schema) IS the card — rule plugins, the mode, then you —
  and its allowance lets exactly that code run once when the server receives it; a
  ``run_code`` the server receives without one gets its own card (in the agent's announced
  call when there is one). A provable request for a read tool goes through the rule
  plugins, then escouade_nb allows it (reading the kernel is what the server is for); so does
  one for an edit of the open notebook (``insert_cell``, ``edit_cell``, ``delete_cell``: not
  asked before, reviewed after — Keep or Reject in the notebook). Anything else is a normal
  request;
* every call is on record (:mod:`.kernel_record`): the transcript and the journal;
* through a launcher (``--via``) carried over the agent's own pipe: the agent runs under the
  relay (:mod:`.launch.pipe_relay`, its source the first bytes of its stdin), the entry is
  ``{"type": "acp", "serverId"}`` and the agent's ``mcp/*`` requests are answered by this
  session's channel (:class:`~..kernel_mcp.acp_channel.AcpChannel`, this grant) — no port, no
  token (an agent by URL the same: its server, ``escouade-acp-serve``, runs it under the relay and
  the relay's hello is taken from its connection); through ``ssh`` a reverse forward
  (:mod:`.launch.ssh_forward`) is used instead where the server allows it and the agent takes
  HTTP (the HTTP entry names the forward's remote end, the token in its headers). Not offered
  outside a kernel unless asked; what cannot be offered is said once.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio

from ..core.conversation import Message, ToolCall, frozen_request
from ..manifest.mcp_servers import read_mcp_config, secrets_of, to_acp
from ..manifest.models import ManifestError
from ..permissions.request import mcp_arguments_of, mcp_tool_of
from ..wire.kernel_calls import ORIGIN
from .kernel_record import KernelRecord
from ..kernel_mcp.server import Grant, KernelServer, Refused, ipython_shell, run_result_text
from ..kernel_mcp.acp_channel import AcpChannel, ChannelError
from .launch.launcher import is_ssh, launch_argv, relay_command, relay_preamble
from ..wire.url_bridge import url_of
from .launch.ssh_forward import ForwardFailed, ReverseForward

if TYPE_CHECKING:
    from .interfaces import KernelToolsAgent, LiveSession
    from .cards import PermissionCard

log = logging.getLogger(__name__)

SERVER = "escouade"
"""The kernel's MCP server's name in ``mcpServers`` (its tools are ``mcp__escouade__*``)."""
KERNEL_TOOLS = ("list_variables", "inspect_variable", "notebook_cells", "run_code", "insert_cell", "edit_cell",
                "delete_cell", "execute_cell", "task_status", "task_cancel")
READ_TOOLS = frozenset({"list_variables", "inspect_variable", "notebook_cells"})
TASK_TOOLS = frozenset({"task_status", "task_cancel"})
"""Coming back to the agent's own run left running: reading it, or stopping it (always allowed)."""
EDIT_TOOLS = frozenset({"insert_cell", "edit_cell", "delete_cell"})
"""Changes to the open notebook: not asked before they are made (the user reviews each one after,
Keep or Reject), but through the rule plugins and on record like any call."""
TOOL_ARGUMENTS: dict[str, tuple[dict[str, tuple[type, ...]], frozenset[str]]] = {
    "list_variables": ({"include_all": (bool,)}, frozenset()),
    "inspect_variable": ({"name": (str,), "rows": (int,), "attributes": (bool,)}, frozenset({"name"})),
    "notebook_cells": ({"start": (int, type(None)), "end": (int, type(None)), "source": (str,)}, frozenset()),
    "run_code": ({"code": (str,), "wait": (int, float, type(None))}, frozenset({"code"})),
    "insert_cell": ({"source": (str,), "cell_type": (str,), "after_cell_id": (str, type(None))}, frozenset({"source"})),
    "edit_cell": ({"cell_id": (str,), "source": (str,), "base_sha256": (str,)},
                  frozenset({"cell_id", "source", "base_sha256"})),
    "delete_cell": ({"cell_id": (str,), "base_sha256": (str,)}, frozenset({"cell_id", "base_sha256"})),
    "execute_cell": ({"cell_id": (str,), "wait": (int, float, type(None))}, frozenset({"cell_id"})),
    "task_status": ({"task_id": (str,), "wait": (int, float)}, frozenset({"task_id"})),
    "task_cancel": ({"task_id": (str,)}, frozenset({"task_id"})),
}
"""Each kernel tool's arguments (the input schemas of :mod:`..kernel_mcp.server`): name ->
accepted types, and the required names. A request states a kernel tool's arguments only
when one of its candidates (:func:`~..permissions.request.mcp_arguments_of`) fits this
whole: no other key, every type right, nothing required missing."""
RUN_TITLE = "Run code in the kernel"
CELL_TITLE = "Run a cell in the notebook"
UNREVIEWED_TITLE = "Run an unreviewed cell in the notebook (an agent change pending your Keep or Reject)"
APPROVAL_LIFETIME = 120.0
"""Seconds an allowance of the agent's own ``run_code`` request waits for the server's call
(which follows it within milliseconds); it also ends with its tool call (finished,
cancelled) and with the prompt turn."""
CONNECT_GRACE = 20.0
"""Seconds after ``session/new`` within which an agent given the kernel's server is
expected to connect to it; after that the conversation says it did not (a wrong token or
an agent that ignores HTTP servers both look like success on ACP's side)."""
RUN_OPTIONS = [
    {"optionId": "run", "name": "Run", "kind": "allow_once"},
    {"optionId": "run-session", "name": "Run without asking again in this session", "kind": "allow_always"},
    {"optionId": "dont-run", "name": "Don't run", "kind": "reject_once"},
]
"""The options of a "Run code in the kernel" card (the kernel's own, not the agent's)."""


def fits(tool: str, arguments: Mapping[str, Any]) -> bool:
    """Whether ``arguments`` are a whole, valid input of the kernel tool ``tool``
    (:data:`TOOL_ARGUMENTS`; a bool is not an int here)."""
    spec = TOOL_ARGUMENTS.get(tool)
    if spec is None or not isinstance(arguments, Mapping):
        return False
    types, required = spec
    if not required <= set(arguments) or not set(arguments) <= set(types):
        return False
    for name, value in arguments.items():
        if isinstance(value, bool) and bool not in types[name]:
            return False
        if not isinstance(value, types[name]):
            return False
    return True


def run_request(call: ToolCall, code: str) -> ToolCall:
    """The frozen request of a "Run code in the kernel" card: ``call``'s id, our title,
    kind ``execute``, the exact ``code`` as ``rawInput`` — nothing else of the agent's."""
    return frozen_request(call, title=RUN_TITLE, kind="execute", raw_input={"code": code}, content=[],
                          locations=[], meta=None, extra={}, mcp=(SERVER, "run_code"), kernel_notebook=None)


def cell_request(call: ToolCall, cell_id: str, source: str, unreviewed: bool) -> ToolCall:
    """The frozen request of a "Run a cell in the notebook" card: ``call``'s id, our title (saying
    when the cell is unreviewed), kind ``execute``, ``rawInput`` ``{"source", "cell_id",
    "unreviewed"}``: the cell's whole source as the page showed it when asked (what rule plugins see
    as ``mcp__escouade__execute_cell``'s input) — nothing else of the agent's."""
    return frozen_request(call, title=UNREVIEWED_TITLE if unreviewed else CELL_TITLE, kind="execute",
                          raw_input={"source": source, "cell_id": cell_id, "unreviewed": unreviewed}, content=[],
                          locations=[], meta=None, extra={}, mcp=(SERVER, "execute_cell"), kernel_notebook=None)


def _cell_key(cell_id: str, source: str) -> tuple[str, str, str]:
    """An allowance's key for a cell run: the cell and the SHA-256 of the source the card showed."""
    import hashlib

    return ("cell", cell_id, hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest())


def identify(call: Any, known: ToolCall | None = None) -> tuple[str, dict[str, Any]] | None:
    """``(tool, arguments)`` when ``call`` (a tool call, or a permission request's
    ``toolCall``) provably asks for a tool of the kernel's server: named as ours on a whole
    field (by the request itself, or by ``known``, the agent's own announced call with the
    request's id — mistral-vibe's requests carry only the id, kimi's the tool's name in a
    sentence of its own) and stating arguments that fit the tool whole (:func:`fits`:
    from the request, else from ``known``). None otherwise — a request is matched by what it
    asks for, never by words in its title. The shapes of the seven released agents are in
    ``tests/kernel/test_gate.py`` (measured)."""
    ours = {SERVER: KERNEL_TOOLS}
    found = mcp_tool_of(call, ours)
    if found is None and known is not None:
        found = mcp_tool_of(known, ours)
    if found is None or found[1] not in KERNEL_TOOLS:
        return None
    tool = found[1]
    if not all(_raw_is_ours(source, tool) for source in (call, known) if source is not None):
        return None  # a field that is not this tool's input (a shell "command" beside it…): not ours
    stated = [(tier, i, arguments) for i, source in enumerate((call, known)) if source is not None
              for tier, arguments in mcp_arguments_of(source, tool)]
    fitting = [(tier, i, arguments) for tier, i, arguments in stated if fits(tool, arguments)]
    if not fitting:
        return None
    best = min(fitting, key=lambda s: (s[0], s[1]))[2]  # fields first, a title last
    if any(tier < 2 and arguments != best for tier, _, arguments in fitting):
        return None  # two different inputs stated: which one would be approved is not provable
    return tool, best


_CODEX_APPROVAL = frozenset({"turn_id", "server_name", "id", "request"})
_CODEX_CALL = frozenset({"server", "tool", "arguments"})


def _raw_is_ours(call: Any, tool: str) -> bool:
    """Whether ``call``'s ``rawInput`` is wholly a statement of ``tool``'s input: absent or
    empty, the input itself (:func:`fits`), codex's call ``{server, tool, arguments}`` or
    codex's approval ``{turn_id, server_name, id, request}`` for our server — nothing
    else beside it."""
    raw = getattr(call, "raw_input", None)
    if raw is None or raw == {}:
        return True
    if not isinstance(raw, dict):
        return False
    if fits(tool, raw):
        return True
    keys = set(raw)
    if keys <= _CODEX_CALL and raw.get("server") == SERVER and raw.get("tool") == tool:
        return isinstance(raw.get("arguments"), dict) and fits(tool, raw["arguments"])
    if keys <= _CODEX_APPROVAL and raw.get("server_name") == SERVER and isinstance(raw.get("request"), dict):
        meta = raw["request"].get("_meta")
        return isinstance(meta, dict) and isinstance(meta.get("tool_params"), dict) and fits(tool, meta["tool_params"])
    return False


def in_kernel() -> bool:
    """Whether an IPython shell with a user namespace runs in this process."""
    return getattr(ipython_shell(), "user_ns", None) is not None


def user_namespace() -> tuple[Mapping[str, Any], frozenset[str]]:
    """The kernel's user namespace and IPython's own names in it (``user_ns_hidden``);
    ``({}, ∅)`` outside IPython."""
    shell = ipython_shell()
    if getattr(shell, "user_ns", None) is None:
        return {}, frozenset()
    return shell.user_ns, frozenset(getattr(shell, "user_ns_hidden", {}) or ())


def context_blocks(variables: Sequence[str] = (), cells: Sequence[int] | str = (),
                   namespace: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Prompt blocks for notebook context: one embedded ``resource`` per variable
    (``kernel://variable/NAME``, the summary :func:`~..core.variables.summary_text` gives —
    what ``inspect_variable`` answers) and one for the cells (``kernel://cells/3-5``: In/Out
    of those execution counts). ``cells`` is a list of execution counts or a range text
    (``"3-5"``, ``"1,4-6"``). Agents without ``embeddedContext`` get them as
    text blocks naming them, by the prompt gate (:func:`~..core.prompt.gate`). Raises
    ``KeyError`` for a variable the kernel lacks and ``ValueError`` for a bad range or a cell that was not run."""
    from ..core import variables as kvars

    ns = user_namespace()[0] if namespace is None else namespace
    out: list[dict[str, Any]] = []
    for name in variables:
        if name not in ns:
            raise KeyError(f"no variable {name!r} in the kernel's namespace")
        text = kvars.summary_text(kvars.summarize(name, ns[name]))
        out.append({"type": "resource", "resource": {"uri": f"kernel://variable/{name}", "mimeType": "text/plain",
                                                     "text": text}})
    counts = kvars.parse_cell_range(cells) if isinstance(cells, str) else list(cells)
    if counts:
        history = {c["execution_count"]: c for c in kvars.cells_of(ns)}
        missing = [n for n in counts if n not in history]
        if missing:
            raise ValueError(f"no cell was run with execution count {', '.join(map(str, missing))} in this kernel"
                             f" (the last one is {max(history) if history else 0})")
        parts = []
        for n in counts:
            cell = history[n]
            parts.append(f"In [{n}]:\n{cell['source']}")
            if cell.get("output"):
                parts.append(f"Out[{n}]:\n{cell['output']}")
        label = cells if isinstance(cells, str) else ",".join(map(str, counts))
        out.append({"type": "resource", "resource": {"uri": f"kernel://cells/{label}", "mimeType": "text/plain",
                                                     "text": "\n\n".join(parts)}})
    return out


class KernelAccess:
    """The MCP side of one :class:`~.live.Live` (one process, one session).

    ``state`` says, for the views, what the agent has of the kernel's server:
    ``"off"`` (not asked), ``"not offered"`` (``why`` says why), ``"offered"``
    (sent; not connected yet), ``"connected"``."""

    def __init__(self, live: LiveSession) -> None:
        self.live = live
        self.agent: KernelToolsAgent = live.agent
        self.grant: Grant | None = None
        self.server_names: dict[str, tuple[str, ...]] = {}  # the servers given, with their known tools
        self.state = "pending" if self.agent.kernel_tools else "off"
        self.why = ""
        self.allow_all_runs = False  # the user chose "run without asking again in this session"
        self._runs = 0
        # run_code calls allowed, by code (an execute_cell's: by _cell_key), until they ran
        self._allowed: dict[Any, list[ToolCall]] = {}
        # the agent's own run_code (execute_cell) requests allowed, unused: (code or _cell_key, card,
        # time.monotonic() when allowed)
        self._approved: list[tuple[Any, PermissionCard, float]] = []
        self._server: Any = None
        self._server_task: asyncio.Task | None = None
        self.forward: ReverseForward | None = None  # an ssh launcher's reverse forward (before_spawn)
        self.channel: AcpChannel | None = None  # the kernel's server over the agent's own pipe (a launcher's relay)
        self.record = KernelRecord(self.agent)  # every call on record: transcript and journal
        if self.agent.kernel_tools:
            self._server_task = asyncio.get_running_loop().create_task(
                KernelServer.shared(), name=f"escouade kernel server for {self.agent.name}")

    # -- what is sent -------------------------------------------------------------------------
    async def servers(self) -> list[dict[str, Any]]:
        """The ``mcpServers`` of the session (wire dicts), their secrets registered with the
        transcript first. What cannot be offered is said in the conversation, once."""
        agent = self.agent
        caps = agent.agent_capabilities.get("mcpCapabilities") or {}
        entries: list[dict[str, Any]] = []
        said: list[str] = []
        kernel = await self._kernel_entry(caps, said)
        if kernel is not None:
            entries.append(kernel)
        if agent.mcp != []:
            try:
                configured = await asyncio.to_thread(read_mcp_config)
            except ManifestError as exc:
                configured = {}
                said.append(f"Your MCP servers were not given to the agent: {exc}")
            wanted = list(configured) if agent.mcp is None else list(agent.mcp)
            for name in wanted:
                server = configured.get(name)
                if server is None:
                    said.append(f"No MCP server {name!r} in your mcp.json (it has: {', '.join(configured) or 'none'}).")
                    continue
                kind = getattr(server, "type", "stdio")
                if kind != "stdio" and not caps.get(kind):
                    said.append(f"The MCP server {name!r} ({kind}) was not given: the agent does not take {kind} "
                                f"servers (mcpCapabilities.{kind} is not true).")
                    continue
                entries.append(to_acp(name, server))
                self.server_names[name] = ()
        for text in said:
            agent.conversation.add_notice(text, level="warning")
        if agent.transcript is not None:
            agent.transcript.redact(*(s for e in entries for s in secrets_of(e)),
                                    *([self.grant.token] if self.grant is not None else []))
        return entries

    async def sandbox_view(self) -> tuple[int | None, Path | None, Path | None]:
        """What a sandboxed agent gets of the kernel's MCP server: ``(port, token folder,
        token file)`` — the server's port on 127.0.0.1 (the one forwarded into its network),
        the folder the server keeps its token files in (hidden in the sandbox) and this
        session's own token file, written now (its grant made before the spawn), the only one
        bound back (read-only: the stdio bridge reads it). ``(None, None, None)`` when the
        agent gets no kernel tools or the server did not start."""
        if self._server_task is None or self.agent.via:
            return None, None, None
        try:
            server = await asyncio.shield(self._server_task)
            folder = await asyncio.to_thread(server.token_files.make_folder)
            self._server = server
            if self.grant is None:
                self.grant = server.grant(self)
                self.grant.on_connect.subscribe(self._connected)
            token_file = await server.token_file(self.grant)
        except Exception:  # said when the entry is made (_kernel_entry)
            return None, None, None
        return urlsplit(server.url).port, folder, token_file

    async def _kernel_entry(self, caps: Mapping[str, Any], said: list[str]) -> dict[str, Any] | None:
        agent = self.agent
        if self._server_task is None:
            return None
        session = self.live.session
        relayed = bool(agent.via) and session is not None and session.relay is not None \
            and not session.relay.get("absent")
        if url_of(agent.via) is not None and not relayed:
            self._not_offered(said, "the agent is reached by URL and its server runs it without the relay that "
                                    "carries them over the connection (escouade-acp-serve --no-relay, or another "
                                    "server; see docs/agents-elsewhere.md)")
            return None
        if agent.via and not is_ssh(agent.via) and not relayed:
            self._not_offered(said, "the agent runs through a launcher (--via) and no relay runs beside it: "
                                    f"{self._no_relay()} (see docs/agents-elsewhere.md)")
            return None
        try:
            server = await asyncio.shield(self._server_task)
        except Exception as exc:  # the server could not start: the agent still runs, without it
            log.exception("the kernel's MCP server did not start")
            self._not_offered(said, f"the kernel's MCP server did not start ({exc})")
            return None
        if agent.via:
            # through ssh, the reverse forward where the server allows it and the agent takes HTTP (measured and
            # tested since issue 21); else — every other launcher, a forward refused, an agent without HTTP — the
            # agent's own pipe, through the relay
            forward_said: list[str] = []
            if not (is_ssh(agent.via) and await self._forward_ready(caps, forward_said)):
                if not relayed:
                    said.extend(forward_said)
                    if not forward_said:
                        self._not_offered(said, self._no_relay())
                    return None
                return self._channel_entry(server)
        self._server = server
        if self.grant is None:
            self.grant = server.grant(self)
            self.grant.on_connect.subscribe(self._connected)
        self.server_names[SERVER] = KERNEL_TOOLS
        self.state = "offered"
        self._notify()
        # An agent that puts its mcpServers on a command line (acp.mcpInArgv: claude-agent's
        # SDK passes them as --mcp-config) would show an HTTP entry's header, or a stdio
        # entry's env, to every local user: it gets the stdio bridge with its token in a
        # 0600 file, the entry naming only the file. So does an agent without HTTP MCP.
        acp, grant = agent.harness.acp, self.grant
        if self.forward is not None:  # through ssh: the forward's remote end on the agent's host
            self.why = (f"through ssh's reverse forward: 127.0.0.1:{self.forward.remote_port} on the agent's host "
                        f"leads to this kernel's server")
            self._notify()
            return {"type": "http", "name": SERVER, "url": self.forward.url,
                    "headers": [{"name": "Authorization", "value": f"Bearer {grant.token}"}]}
        if caps.get("http") and not (acp is not None and acp.mcp_in_argv):
            return {"type": "http", "name": SERVER, "url": server.url,
                    "headers": [{"name": "Authorization", "value": f"Bearer {grant.token}"}]}
        try:
            token_file = await server.token_file(grant)
        except (OSError, RuntimeError) as exc:
            self._not_offered(said, f"its token file could not be written ({exc})")
            return None
        # every ACP agent takes stdio servers: the bridge relays to the kernel's HTTP server
        return {"name": SERVER, "command": sys.executable, "args": ["-m", "escouade_nb.tools.mcp_bridge"],
                "env": [{"name": "ESCOUADE_MCP_URL", "value": server.url},
                        {"name": "ESCOUADE_MCP_TOKEN_FILE", "value": str(token_file)}]}

    def _no_relay(self) -> str:
        """Why the relay is not there, from what its launcher said."""
        session = self.live.session
        absent = session.relay.get("absent") if session is not None and session.relay is not None else None
        if absent is None and self.agent.sandbox is not None:
            return ("the agent is sandboxed over there (--sandbox --via) and the relay that carries them over its "
                    "pipe does not run inside that sandbox")
        if absent == "no python3":
            return "the agent's side has no python3 for the relay that carries them over its pipe"
        if absent:
            return f"the agent's side cannot run the relay that carries them over its pipe ({str(absent)[:80]})"
        return "the relay that carries them over the agent's pipe did not start"

    def _channel_entry(self, server: Any) -> dict[str, Any]:
        """The ``acp`` entry of the kernel's server over the agent's own pipe (made once per
        process: its grant, its channel, its random ``serverId``)."""
        if self.grant is None:
            self.grant = server.grant(self)
            self.grant.on_connect.subscribe(self._connected)
        session = self.live.session
        if self.channel is None:
            self.channel = server.channel(self.grant, session.notify if session is not None else None)
        self._server = server
        self.server_names[SERVER] = KERNEL_TOOLS
        self.state = "offered"
        self.why = ("over the agent's own pipe: the relay beside it on the other side carries the kernel's MCP "
                    "server (MCP-over-ACP, no port opened, no token)")
        if url_of(self.agent.via) is not None:
            self.why = ("over the agent's own ACP connection: the relay its server (escouade-acp-serve) runs beside "
                        "it carries the kernel's MCP server (MCP-over-ACP, no port opened, no token)")
        self._notify()
        return self.channel.entry(SERVER)

    async def before_spawn(self, session: Any) -> None:
        """Before the process starts: an agent run through a launcher (``--via``) given the
        kernel's tools runs under the relay (:meth:`_relay`); an ``ssh`` launcher also gets the
        reverse forward to the kernel's server (:mod:`.launch.ssh_forward`: ``session.argv`` gains
        ``-R 127.0.0.1:0:127.0.0.1:PORT``, the session's stderr drain feeds the port reader).
        Waits for the server's start; a server that cannot start is said later, by
        :meth:`servers`. Other agents: nothing."""
        if self._server_task is None or not self.agent.via:
            return
        try:
            server = await asyncio.shield(self._server_task)
        except Exception:
            return
        await self._relay(session)
        if not is_ssh(self.agent.via):
            return
        port = urlsplit(server.url).port
        if port is None:
            return
        self.forward = ReverseForward(port)
        session.argv = self.forward.argv(session.argv)
        session.stderr.watchers.append(self.forward.feed)

    async def _relay(self, session: Any) -> None:
        """A launcher's agent (``--via``) runs under the relay (:mod:`.launch.pipe_relay`), its
        source the first bytes of its stdin: the kernel's server can then be carried over the
        agent's own pipe (MCP-over-ACP, :meth:`_mcp_over_acp`) whatever the launcher. Not when
        the command line was already changed by another part (it would not be the agent's). An
        agent by URL: its server (``escouade-acp-serve``) runs it under the relay; its hello is
        taken (it is the agent's side, as everything on that connection) and its ``mcp/*``
        answered, under this session's grant."""
        agent = self.agent
        acp = agent.harness.acp
        if url_of(agent.via) is not None:  # an agent by URL: its server runs the relay, nothing of ours is sent
            session.relay_expected = True
            session.mcp_over_acp = self._mcp_over_acp
            return
        if acp is None or list(session.argv) != agent.argv():
            return
        try:
            preamble = await asyncio.to_thread(relay_preamble)
        except OSError:
            log.exception("the relay's source could not be read")
            return
        session.argv = launch_argv(agent.via, relay_command([agent.program, *acp.args]))
        session.preamble = preamble
        session.mcp_over_acp = self._mcp_over_acp

    async def _mcp_over_acp(self, method: str, params: Any, request: bool) -> dict[str, Any] | None:
        """An ``mcp/*`` request of the agent (or of its relay): answered by this session's
        channel (:class:`~..kernel_mcp.acp_channel.AcpChannel`, this session's grant), or
        refused when none was offered."""
        if self.channel is None:
            raise ChannelError(-32602, f"{method}: no MCP server is offered over ACP to this session")
        return await self.channel.handle(method, params, request=request)

    async def _forward_ready(self, caps: Mapping[str, Any], said: list[str]) -> bool:
        """Whether an agent run through ``ssh`` gets the entry naming the reverse forward's
        remote end: its port reported, the agent taking HTTP servers and keeping them off its
        command lines (the stdio bridge would run on the other host, which has neither it nor
        its token file). Else False, said once."""
        if self.forward is None:  # before_spawn did not ask for it (the server's URL had no port)
            self._not_offered(said, "the reverse forward to it was not asked of ssh")
            return False
        acp = self.agent.harness.acp
        if not caps.get("http") or (acp is not None and acp.mcp_in_argv):
            self._not_offered(said, "through ssh it is offered as an HTTP server only, and this agent takes no HTTP "
                                    "MCP servers or puts them on a command line (acp.mcpInArgv)")
            return False
        try:
            await self.forward.port()
        except ForwardFailed as exc:
            self._not_offered(said, str(exc))
            return False
        return True

    def _not_offered(self, said: list[str], why: str) -> None:
        self.state, self.why = "not offered", why
        said.append(f"The kernel's tools (variables, cells, run_code) were not given to the agent: {why}.")
        self._notify()

    def opened(self) -> None:
        """The session exists: the agent should connect within :data:`CONNECT_GRACE`."""
        if self.state == "offered":
            self.live.session.start_soon(self._expect_connection)

    async def _expect_connection(self) -> None:
        await anyio.sleep(CONNECT_GRACE)
        if self.state == "offered" and self.live.current and not self.live.ended:
            self.agent.conversation.add_notice(
                f"The agent was given the kernel's MCP server but has not connected to it in {CONNECT_GRACE:g} s: "
                f"it may not see the kernel's tools.", level="warning")

    def _connected(self, grant: Any = None) -> None:
        self.state = "connected"
        self._notify()

    def _notify(self) -> None:
        self.agent.conversation.notify_state("kernel_tools")
        self.agent.notify_status()  # the header says it

    def close(self) -> None:
        """The session is over: its token no longer opens the server."""
        if self.channel is not None:
            self.channel.close()  # its connections end: a card waiting is withdrawn, calls under way cancelled
            self.channel = None
        if self.grant is not None:
            self._server.revoke(self.grant)
            self.grant = None
        if self._server_task is not None and not self._server_task.done():
            self._server_task.cancel()

    # -- the agent's own permission requests --------------------------------------------------
    def recognise(self, call: ToolCall) -> tuple[str, str] | None:
        """``(server, tool)`` when ``call`` is a tool of a server this session was given
        (noted on the call as ``call.mcp``, for rule plugins), else None. For the kernel's
        own server this is :meth:`identify` (the arguments must fit); the user's servers
        are told by name (:func:`~..permissions.request.mcp_tool_of`)."""
        if not self.server_names:
            return None
        found: tuple[str, str] | None = None
        if SERVER in self.server_names:
            mine = self.identify(call, self.agent.conversation.tool_calls.get(call.tool_call_id))
            if mine is not None:
                found = (SERVER, mine[0])
        if found is None:
            others = {name: tools for name, tools in self.server_names.items() if name != SERVER}
            found = mcp_tool_of(call, others) if others else None
        if found is not None:
            call.mcp = found
        return found

    def identify(self, call: Any, known: ToolCall | None = None) -> tuple[str, dict[str, Any]] | None:
        """:func:`identify` when this session was given the kernel's server, else None."""
        return identify(call, known) if SERVER in self.server_names else None

    async def agent_asks_run_code(self, tool_call: dict[str, Any], options: list[dict[str, Any]],
                                  code: str) -> dict[str, Any]:
        """The agent's own permission request, provably for ``run_code`` of this session's
        grant with ``code``: one card, the same as the server's own — "Run code in the
        kernel", the code whole, *Run* / *Run without asking again in this session* /
        *Don't run* — decided by the policies, then the user; the answer reaches the agent
        as its own option of that kind (an allowance as its ``allow_once``: the agent is
        never told "always"). Allowed, exactly this code may run once when the server
        receives it (:meth:`ask_run_code` takes the allowance: no second card)."""
        desk = self.live.desk
        known = self.agent.conversation.tool_calls.get(str(tool_call.get("toolCallId", "")))
        wire = {"toolCallId": tool_call.get("toolCallId")} if known is not None else tool_call
        call = known if known is not None else ToolCall("", tool_call_id=str(tool_call.get("toolCallId", "")))
        card = desk.new_card(wire, RUN_OPTIONS, mcp=(SERVER, "run_code"), request=run_request(call, code))
        self.record.card(card, code, request=True)
        if self.allow_all_runs:
            card.choose("run-session", by="you (earlier, for this session)")
        try:
            answer = await desk.decide(card)
        finally:
            self.record.answered(card)
        if self._allowed_by(card, answer):
            self._approved.append((code, card, time.monotonic()))
            option = next((o for o in options if o.get("kind") == "allow_once"), None) or \
                next((o for o in options if str(o.get("kind", "")).startswith("allow")), None)
            if option is not None:
                return {**answer, "optionId": option["optionId"]}
            return {"outcome": "cancelled", "_meta": answer.get("_meta")}  # nothing to say yes with
        refuse = next((o for o in options if o.get("kind") == "reject_once"), None)
        if answer.get("outcome") == "selected" and refuse is not None:
            return {**answer, "optionId": refuse["optionId"]}
        return {"outcome": "cancelled", "_meta": answer.get("_meta")}

    async def agent_asks_execute_cell(self, tool_call: dict[str, Any], options: list[dict[str, Any]],
                                      cell_id: str) -> dict[str, Any]:
        """The agent's own permission request, provably for ``execute_cell`` of ``cell_id``: the
        cell's source is read from the page now and the card shows it whole ("Run a cell in the
        notebook", saying when the cell is unreviewed; *Run* / *Run without asking again in this
        session* / *Don't run*), decided by the rule plugins, then the user; allowed, exactly that
        cell with exactly that source may run once when the server receives the call (no second
        card; a changed cell is refused as stale). When the cell cannot be read (no page, no such
        cell) there is nothing to show: the request is let through to the server, which answers
        that error, or asks with its own card if the page answers by then; so is one the server
        would refuse at once (a cell of the kernel running: its queue is held)."""
        known = self.agent.conversation.tool_calls.get(str(tool_call.get("toolCallId", "")))
        wire = {"toolCallId": tool_call.get("toolCallId")} if known is not None else tool_call
        call = known if known is not None else ToolCall("", tool_call_id=str(tool_call.get("toolCallId", "")))
        try:
            cell = await self._cell_to_run(cell_id)
            live = self._server.live_notebook() if self._server is not None else None
            running = getattr(live, "running", None)
            why = running() if callable(running) else None
            if why:  # the server refuses it at once: nothing to ask
                raise RuntimeError(why)
        except Exception as exc:
            log.debug("execute_cell's request: not to be run now (%s); passed on to the server", exc)
            # answered at once, on the record as any card (a resume rebuilds it so): nothing can run from it
            passed = self.live.desk.new_card(wire, options)
            option = next((o for o in options if o.get("kind") == "allow_once"), None)
            why = "nothing to run now: the kernel's server answers why"
            if option is None:
                passed.deny(by="escouade_nb", message=why)
            else:
                passed.choose(option["optionId"], by="escouade_nb", message=why)
            return await self.live.desk.decide(passed)
        source, unreviewed = cell["source"], bool(cell.get("pending"))
        return await self._ask_cell_request(wire, call, options, cell_id, source, unreviewed)

    async def _ask_cell_request(self, wire: dict[str, Any], call: ToolCall, options: list[dict[str, Any]],
                                cell_id: str, source: str, unreviewed: bool) -> dict[str, Any]:
        desk = self.live.desk
        card = desk.new_card(wire, RUN_OPTIONS, mcp=(SERVER, "execute_cell"),
                             request=cell_request(call, cell_id, source, unreviewed))
        self.record.card(card, source, request=True, tool="execute_cell",
                         arguments={"cell_id": cell_id, "unreviewed": unreviewed})
        if self.allow_all_runs:
            card.choose("run-session", by="you (earlier, for this session)")
        try:
            answer = await desk.decide(card)
        finally:
            self.record.answered(card)
        if self._allowed_by(card, answer):
            self._approved.append((_cell_key(cell_id, source), card, time.monotonic()))
            option = next((o for o in options if o.get("kind") == "allow_once"), None) or \
                next((o for o in options if str(o.get("kind", "")).startswith("allow")), None)
            if option is not None:
                return {**answer, "optionId": option["optionId"]}
            return {"outcome": "cancelled", "_meta": answer.get("_meta")}
        refuse = next((o for o in options if o.get("kind") == "reject_once"), None)
        if answer.get("outcome") == "selected" and refuse is not None:
            return {**answer, "optionId": refuse["optionId"]}
        return {"outcome": "cancelled", "_meta": answer.get("_meta")}

    async def _cell_to_run(self, cell_id: str) -> dict[str, Any]:
        """The cell as the page shows it now (the kernel server's channel), or an exception."""
        live = self._server.live_notebook() if self._server is not None else None
        read = getattr(live, "cell_to_run", None)
        if not callable(read):
            raise LookupError("no channel to a notebook page")
        return await read(cell_id)

    def turn_ended(self) -> None:
        """A prompt turn ended: the allowances of the agent's own ``run_code`` requests not
        used in it end too (a later call of the same code gets a card)."""
        self._approved.clear()

    def _allowed_by(self, card: PermissionCard, answer: dict[str, Any]) -> bool:
        """Whether ``answer`` allows; "run without asking again" chosen by you lets every
        later run of this session through."""
        chosen = card.permission.chosen or {}
        if answer.get("outcome") != "selected" or not str(chosen.get("kind", "")).startswith("allow"):
            return False
        if chosen.get("kind") == "allow_always" and card.permission.answered_by == "you":
            self.allow_all_runs = True
        return True

    def _prune_approved(self) -> None:
        """Forget the allowances of the agent's own requests that lapsed (older than
        :data:`APPROVAL_LIFETIME`, or their call no longer under way)."""
        now = time.monotonic()
        self._approved = [a for a in self._approved if now - a[2] <= APPROVAL_LIFETIME and a[1].tool_call is not None
                          and a[1].tool_call.shown_status in ("pending", "in_progress")]  # the call still under way

    async def _decide_run(self, card: Any, key: Any, what: str) -> None:
        """Decide a run's card (``run_code``'s or ``execute_cell``'s): returns when it is
        allowed (the allowance kept under ``key`` for the server's call), raises ``Refused``
        with who refused and why (``what``: "the code", "the cell", in the message)."""
        desk = self.live.desk
        if self.allow_all_runs:
            card.choose("run-session", by="you (earlier, for this session)")
        try:
            answer = await desk.decide(card)
        except asyncio.CancelledError:
            card.cancel("the agent gave up on the call")
            raise
        finally:
            self.record.answered(card)
        if self._allowed_by(card, answer):
            if card.tool_call is not None:
                self._allowed.setdefault(key, []).append(card.tool_call)
            return
        who = card.permission.answered_by or "you"
        message = card.permission.message
        if answer.get("outcome") == "cancelled":
            raise Refused(f"the call was cancelled ({message or 'the turn was stopped'}); {what} was not run")
        raise Refused(f"denied by {who}{': ' + message if message else ''}; {what} was not run")

    # -- the kernel server's owner (ToolOwner) -------------------------------------------------
    @property
    def name(self) -> str:
        return self.agent.name

    async def ask_run_code(self, code: str) -> None:
        """Returns when the server may run ``code`` (the agent's activity then knows the kernel
        works for it: never *stalled* meanwhile), raises ``Refused`` with who refused and why
        (:meth:`_ask_run_code`)."""
        await self._ask_run_code(code)
        self.agent.activity_watch.kernel_run(True)

    async def _ask_run_code(self, code: str) -> None:
        """Returns when the server may run ``code``, raises ``Refused`` with who refused
        and why. An allowance of the agent's own request for exactly this code (made by
        :meth:`agent_asks_run_code`) is used once; else the card "Run code in the kernel"
        — the code as the server received it, whole and frozen — in the agent's own tool
        call when it announced one for exactly this code, else on a call of its own. A
        cancelled call (the agent gave up on it) withdraws the card."""
        desk = self.live.desk
        if self.live.ended or desk.closed:
            raise Refused("the agent's session is over")
        self._prune_approved()
        for i, (approved, card, _) in enumerate(self._approved):
            if approved == code:
                del self._approved[i]
                if card.tool_call is not None:
                    self._allowed.setdefault(code, []).append(card.tool_call)
                return
        self._runs += 1
        call = self._agent_call("run_code", "code", code)
        if call is not None:
            wire: dict[str, Any] = {"toolCallId": call.tool_call_id}  # the agent's call keeps its own fields
        else:
            call = ToolCall("", tool_call_id=f"escouade-run-code-{self._runs}-{secrets.token_hex(6)}", origin=ORIGIN)
            wire = {"toolCallId": call.tool_call_id, "title": RUN_TITLE, "kind": "execute", "status": "pending",
                    "rawInput": {"code": code}}
        card = desk.new_card(wire, RUN_OPTIONS, mcp=(SERVER, "run_code"), request=run_request(call, code),
                             origin=call.origin)
        self.record.card(card, code)
        await self._decide_run(card, code, "the code")

    async def ask_execute_cell(self, cell_id: str, source: str, unreviewed: bool) -> None:
        """As :meth:`ask_run_code`, for ``execute_cell``: returns when the page may run cell
        ``cell_id`` whose source is ``source`` now; raises ``Refused``. An allowance of the
        agent's own request for this cell is used once when the card showed this very source;
        one that showed another source (the cell changed since) refuses: stale, nothing runs.
        Else one card "Run a cell in the notebook" with the source whole (in the agent's
        announced call for this cell, if any)."""
        desk = self.live.desk
        if self.live.ended or desk.closed:
            raise Refused("the agent's session is over")
        self._prune_approved()
        key = _cell_key(cell_id, source)
        for i, (approved, card, _) in enumerate(self._approved):
            if approved == key:
                del self._approved[i]
                if card.tool_call is not None:
                    self._allowed.setdefault(key, []).append(card.tool_call)
                return
        for i, (approved, _card, _) in enumerate(self._approved):
            if isinstance(approved, tuple) and approved[:2] == ("cell", cell_id):
                del self._approved[i]
                raise Refused(f"cell {cell_id} changed since the card you answered showed it (stale); "
                              "the cell was not run: read it again")
        self._runs += 1
        call = self._agent_call("execute_cell", "cell_id", cell_id)
        if call is not None:
            wire: dict[str, Any] = {"toolCallId": call.tool_call_id}
        else:
            call = ToolCall("", tool_call_id=f"escouade-run-cell-{self._runs}-{secrets.token_hex(6)}", origin=ORIGIN)
            wire = {"toolCallId": call.tool_call_id, "title": CELL_TITLE, "kind": "execute", "status": "pending",
                    "rawInput": {"cell_id": cell_id}}
        card = desk.new_card(wire, RUN_OPTIONS, mcp=(SERVER, "execute_cell"),
                             request=cell_request(call, cell_id, source, unreviewed), origin=call.origin)
        self.record.card(card, source, tool="execute_cell", arguments={"cell_id": cell_id, "unreviewed": unreviewed})
        await self._decide_run(card, key, "the cell")

    def ran_cell(self, cell_id: str, source: str, text: str, failed: bool) -> None:
        """The page ran the cell, or did not (``failed``: it raised, was stale, the page went away):
        ``text`` goes on the card's tool call (one we made is closed by us; the agent's own by the
        agent). A cell that ran is one the agent touched in this turn (the user's later change
        of it is told to the agent: :meth:`~.review.cell_review.EditReview.touch`)."""
        review = self.agent.edit_review
        if review is not None and not failed:
            review.touch(cell_id)
        key = _cell_key(cell_id, source)
        waiting = self._allowed.get(key)
        if not waiting:
            return
        call = waiting.pop(0)
        if not waiting:
            del self._allowed[key]
        conversation = self.agent.conversation
        conversation.add_tool_content(call, {"type": "content", "content": {"type": "text", "text": text}})
        if call.origin == ORIGIN:  # one we made (never told by its id: the agent's may look the same)
            call.status = "failed" if failed else "completed"
            conversation.touch(call)

    def _agent_call(self, tool: str, field: str, value: str) -> ToolCall | None:
        """The agent's own tool call for this ``run_code`` or ``execute_cell``, when it announced
        one: the newest unfinished call that provably asks our server's ``tool`` with exactly
        ``value`` as its ``field`` (the code; the cell id) (:meth:`identify`) and has no card yet."""
        for call in reversed(list(self.agent.conversation.tool_calls.values())):
            if call.status not in (None, "pending", "in_progress") or call.extra.get("escouade_card") \
                    or call.tool_call_id in self.live.desk.asked:
                continue
            found = self.identify(call)
            if found is not None and found[0] == tool and found[1].get(field) == value:
                call.extra["escouade_card"] = True
                call.mcp = (SERVER, tool)
                return call
        return None

    async def allow_read(self, tool: str, arguments: dict[str, Any]) -> None:
        """A read tool, or an edit of the open notebook (:data:`EDIT_TOOLS`, reviewed after):
        allowed (the agent's own request, if any, went through the rule plugins already); the
        notebook file only inside a private project's fence."""
        fence = self.agent.fence
        path = arguments.get("path")
        if fence is not None and isinstance(path, str):
            try:
                Path(path).resolve().relative_to(fence)
            except ValueError:
                raise Refused(f"{path} is outside this private project's folder {fence}") from None

    async def policy(self, card: PermissionCard) -> None:
        """The permission policy after the rule plugins (whose denial comes first and
        wins): the agent's own request for a read tool of the kernel's server — provably
        one (:meth:`identify`, noted on the frozen request) — is allowed once, by
        escouade_nb: reading the kernel is what the server is for."""
        asked = card.request
        if asked is None or asked.mcp is None or asked.mcp[0] != SERVER or \
                asked.mcp[1] not in READ_TOOLS | EDIT_TOOLS | TASK_TOOLS:
            return
        option = next((o for o in card.options if o.get("kind") == "allow_once"), None)
        if option is not None and card.state == "pending":
            card.choose(option["optionId"], by="escouade_nb (a read of the kernel's own server)"
                        if asked.mcp[1] in READ_TOOLS else
                        "escouade_nb (the agent's own task: its status, or stopping it)" if asked.mcp[1] in TASK_TOOLS
                        else "escouade_nb (an edit of the open notebook, reviewed after)")

    def ran_code(self, code: str, result: dict[str, Any]) -> None:
        """The code ran: its output goes on the card's tool call (a call the agent did
        not announce is closed by us; the agent's own is closed by the agent)."""
        self.agent.activity_watch.kernel_run(False)
        waiting = self._allowed.get(code)
        if not waiting:
            return
        call = waiting.pop(0)
        if not waiting:
            del self._allowed[code]
        text = run_result_text(result)
        conversation = self.agent.conversation
        conversation.add_tool_content(call, {"type": "content", "content": {"type": "text", "text": text}})
        if call.origin == ORIGIN:  # one we made (never told by its id: the agent's may look the same)
            call.status = "failed" if result.get("error") else "completed"
            conversation.touch(call)

    def edited(self, cell_id: str, change: str, live: Any) -> None:
        """The kernel's server made a change in the open notebook for this session: one of
        the agent's pending edits (``agent.pending_edits``)."""
        review = self.agent.edit_review
        if review is not None:
            review.add(cell_id, change, live)

    def provenance(self) -> dict[str, Any]:
        """Who makes a change now (a kept cell's metadata ``escouade``): the agent's name,
        its manifest's harness id, the ACP session id, the 1-based turn of the conversation."""
        agent = self.agent
        session = agent.session.session_id if agent.session is not None else None
        turns = sum(1 for item in agent.conversation.items if isinstance(item, Message) and item.role == "user")
        return {"agent": agent.name, "harness": agent.harness.short_id,
                "session": session if isinstance(session, str) else None, "turn": turns or None}

    def notice(self) -> str | None:
        """What the agent learns in its next tool result, once: the user's Reject of its changes."""
        review = self.agent.edit_review
        return review.take_notice() if review is not None else None

    def tool_done(self, tool: str, arguments: dict[str, Any], status: str, text: str) -> None:
        """The kernel's server ended a call (see ``ToolOwner``): on record."""
        self.record.done(tool, arguments, status, text)

    def task_started(self, task: Any) -> None:
        """A ``run_code`` was left running as ``task`` (the kernel's own :class:`~..kernel_mcp.tasks.RunTask`):
        its card's call follows it (see :meth:`.KernelRecord.task_started`); the agent's call is
        answered, so its own quiet spells count again."""
        self.agent.activity_watch.kernel_run(False)
        self.record.task_started(task)
