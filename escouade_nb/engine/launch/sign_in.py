"""A terminal sign-in: an ACP auth method of type ``terminal``, run by the client.

For ``{"type": "terminal", "id", "name", "args"?, "env"?}`` the client runs the agent's
OWN command (its argv, ``via`` launcher included) plus ``args``, with ``env`` (an object)
over the agent's environment, in a terminal of its own: never ``authenticate``. A
sandboxed agent's sign-in runs in its sandbox (bwrap with the binds, hidden folders and
read-only git files of its own command line, and a network of its own cut as the agent's
is — its own pasta, the declared ports: :func:`.sandbox.client_reach`), the method's
``env`` checked as a terminal request's (no variable the loader reads). Exit status 0 is success; the client then
reconnects (a restart: a new process and ``initialize``) and sends once more the prompt
the agent refused with ``auth_required``.

:class:`TerminalSignIn` is one such run. Its output is a tool card of the conversation
(title "Sign in: NAME", the terminal embedded as ``{"type": "terminal"}`` content, live);
what the program reads on stdin is written with :meth:`TerminalSignIn.send` (the agent's
``sign_in_input(text)``, the view's text box). The run owns its terminal manager: a
cancelled sign-in kills the program's process group.
"""

from __future__ import annotations

import itertools
import shlex
from typing import TYPE_CHECKING, Any

from ...wire.errors import AgentError
from ...wire.terminals import TerminalEvent, TerminalManager
from .launcher import agent_env, launch_argv
from .sandbox import far_command, SandboxError, client_reach, sandboxed

if TYPE_CHECKING:
    from ...core.conversation import ToolCall
    from .interfaces import SignInAgent

_runs = itertools.count(1)
ORIGIN = "sign-in"
"""The :attr:`~...core.conversation.ToolCall.origin` of a sign-in's terminal call."""


class TerminalSignIn:
    """One run of the terminal auth ``method`` (its wire dict) of ``agent``. ``argv``
    and ``env`` are what runs; ``call`` the tool card showing it (after :meth:`run`
    started); ``exit_code`` once it ended (negative: killed by that signal number)."""

    def __init__(self, agent: SignInAgent, method: dict[str, Any]) -> None:
        self.agent = agent
        self.method = method
        acp = agent.harness.acp
        args = [str(a) for a in method.get("args") or []]
        self.argv = launch_argv(agent.via, [agent.program, *acp.args, *args])
        self.env = {**agent_env(agent),
                    **{str(k): str(v) for k, v in (method.get("env") or {}).items()}}
        self.call: ToolCall | None = None
        self.exit_code: int | None = None
        self._terminals: TerminalManager | None = None
        self._terminal_id: str | None = None
        self.stopped = False  # ended by the agent's close()

    @property
    def running(self) -> bool:
        return self._terminal_id is not None and self.exit_code is None

    @property
    def command_line(self) -> str:
        extra = " ".join(f"{k}={shlex.quote(v)}" for k, v in (self.method.get("env") or {}).items())
        return (extra + " " if extra else "") + shlex.join(self.argv)

    async def run(self) -> int:
        """Run the program to its end; returns its exit code (0: signed in). ``OSError``
        text and the like become :class:`AgentError` saying what could not run."""
        conversation = self.agent.conversation
        name = self.method.get("name") or self.method.get("id")
        base, env = self.env, None
        reach: tuple[Any, Any] = (None, None)
        if self.agent.sandbox is not None and self.agent.via:  # bwrap over there, as its process runs there
            far = self.agent.far_side
            if far is None:
                raise AgentError(f"sign-in with {self.method.get('id')!r} could not start: the far side of "
                                 f"{shlex.join(self.agent.via)} was not probed for --sandbox (Restart the agent)")
            acp = self.agent.harness.acp
            self.argv = launch_argv(self.agent.via, far_command(
                [self.agent.program, *acp.args, *(str(a) for a in self.method.get("args") or [])],
                folder=self.agent.cwd, home=far.home, state_folders=list(acp.state_folders or ()),
                also=list(self.agent.add_dirs), run_dirs=far.run_dirs, offline=self.agent.sandbox.offline))
        elif self.agent.sandbox is not None:  # in the agent's sandbox, as its process runs
            base = agent_env(self.agent)
            env = [{"name": str(k), "value": str(v)} for k, v in (self.method.get("env") or {}).items()]
            live = self.agent.live  # the kernel's token folder, hidden as from its process
            try:  # the binds of its own command line, not of the agent's args: they choose nothing bound
                binds = await sandboxed(self.agent, launch_argv(self.agent.via, [self.agent.program,
                                                                                 *self.agent.harness.acp.args]), base,
                                        token_folder=live.token_folder if live is not None else None)
            except SandboxError as exc:
                conversation.add_notice(f"Sign-in {name!r} could not start", level="error", detail=str(exc))
                raise AgentError(f"sign-in with {self.method.get('id')!r} could not start: {exc}") from None
            reach = client_reach(binds)
        async with TerminalManager(self.agent.cwd, env=base, id_prefix="sign-in", confinement=reach[0],
                                   wrap=reach[1]) as terminals:
            self._terminals = terminals
            try:
                self._terminal_id = await terminals.create(self.argv[0], args=self.argv[1:], env=env, stdin=True)
            except Exception as exc:  # acp.RequestError: the program cannot be run (raised below, out of the group)
                conversation.add_notice(f"Sign-in {name!r} could not start", level="error", detail=str(exc))
                failed = AgentError(f"sign-in with {self.method.get('id')!r} could not start: {exc}")
            else:
                return await self._follow(terminals, name)
        raise failed

    async def _follow(self, terminals: TerminalManager, name: Any) -> int:
        """:meth:`run` once the program started: its card, its end."""
        conversation = self.agent.conversation
        assert self._terminal_id is not None
        tcid = f"escouade-sign-in-{next(_runs)}"
        self.call = call = conversation.apply_own(ORIGIN, {
            "sessionUpdate": "tool_call", "toolCallId": tcid, "title": f"Sign in: {name}", "kind": "execute",
            "status": "in_progress", "rawInput": {"command": self.command_line},
            "content": [{"type": "terminal", "terminalId": self._terminal_id}]})
        watch = terminals.subscribe(self._event)
        try:
            status = await terminals.wait_for_exit(self._terminal_id)
        finally:
            watch.close()
            self._store()
        code = status.exit_code if status.exit_code is not None else -1  # killed by a signal
        self.exit_code = code
        conversation.set_status(call, "completed" if code == 0 else "failed")
        return code

    async def send(self, text: str) -> None:
        """Write ``text`` and a newline to the program's stdin. :class:`AgentError` when
        it is not running."""
        if not self.running or self._terminals is None or self._terminal_id is None:
            raise AgentError("no terminal sign-in is running")
        try:
            await self._terminals.write(self._terminal_id, (text + "\n").encode())
        except Exception as exc:  # acp.RequestError: its input is closed
            raise AgentError(f"the sign-in program takes no more input: {exc}") from None

    async def stop(self) -> None:
        """End the program (its process group: SIGTERM, then SIGKILL): the agent is
        closed. :meth:`run` then returns its status (not 0: no restart)."""
        self.stopped = True
        if self.running and self._terminals is not None and self._terminal_id is not None:
            await self._terminals.kill(self._terminal_id)

    def kill_now(self) -> None:
        """SIGKILL the program's group at once (interpreter exit)."""
        if self._terminals is not None:
            self._terminals.kill_now()

    def _event(self, event: TerminalEvent) -> None:
        if event.terminal_id == self._terminal_id:
            self._store()

    def _store(self) -> None:
        if self.call is None or self._terminals is None or self._terminal_id is None:
            return
        output, truncated, status = self._terminals.snapshot(self._terminal_id)
        self.call.terminals[self._terminal_id] = {
            "output": output, "truncated": truncated, "running": status is None,
            "exit_code": getattr(status, "exit_code", None), "signal": getattr(status, "signal", None)}
        self.agent.conversation.touch(self.call)


async def sign_in_with_terminal(agent: SignInAgent, method: dict[str, Any]) -> None:
    """Run the terminal auth ``method``; on exit 0 restart ``agent`` (reconnect,
    re-initialize) and send once more the prompt it refused for want of a sign-in
    (``agent.sign_in_retry`` is that turn). :class:`AgentError` when the program fails."""
    job = TerminalSignIn(agent, method)
    agent.sign_in_started(job)
    try:
        code = await job.run()
    finally:
        agent.sign_in_ended()
    name = method.get("name") or method.get("id")
    if job.stopped:
        agent.conversation.add_notice(f"Sign-in {name!r} stopped: the agent was closed", level="warning")
        raise AgentError(f"sign-in with {method.get('id')!r} was stopped: agent {agent.name!r} was closed")
    if code != 0:
        agent.conversation.add_notice(f"Sign-in {name!r} failed (exit code {code})", level="error")
        raise AgentError(f"sign-in with {method.get('id')!r} failed: {shlex.join(job.argv)} exited with code {code}")
    agent.conversation.add_notice(f"Signed in ({name}): reconnecting.")
    prompt = agent.take_auth_prompt()
    await agent.restart()
    if prompt is not None:  # once: a new refusal keeps it again for the next sign-in
        agent.retry_after_sign_in(prompt)
