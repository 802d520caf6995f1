"""``%escouade`` and ``%%escouade``: parse, call the squad, display. No logic of their own.

Usage::

    %escouade                                  list harnesses and running agents
    %escouade NAME [--cwd DIR] [--as AGENT]    start an agent of harness NAME, show its view, return it
    %escouade stop AGENT                       stop an agent (its whole process group)
    %escouade export AGENT PATH.ipynb          write the agent's conversation as a notebook
    %%escouade NAME|AGENT                      send the cell as a prompt; show the turn
    %escouade --help                           every subcommand (%escouade SUBCOMMAND --help: one)

The subcommands are a table, :data:`COMMANDS` (the words that call one, its usage lines,
its handler): a line is dispatched from it and the usage text (:data:`USAGE`) is generated
from it. A usage error prints one line and this usage, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import html
import importlib
import logging
import shlex
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import display

from .permissions.commands import PLUGINS_USAGE, CommandError, journal_command, plugins_command
from . import engine  # the engine's lazy face: its modules load in %load_ext's thread (load)
from ._errors import EscouadeError
from ._threads import collector_paused
from .core.status import ENDED, NAME_FREE
from .wire.errors import NoEventLoop

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Squad

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Subcommand:
    """One subcommand of ``%escouade``: the words that call it (none: the start, whose
    first word is a harness), its lines of the usage text, and its handler
    (``handler(magics, squad, words)``, ``words`` as typed, the subcommand's own word
    first; what it returns is the magic's value)."""

    names: tuple[str, ...]
    usage: str
    handler: Callable[[EscouadeMagics, Squad, list[str]], object] | None

    def help(self) -> str:
        """Its usage lines, headed as the whole usage text is."""
        return "usage:\n" + self.usage


HELP_FLAGS = ("-h", "--help")
"""What asks for the usage: ``%escouade --help`` (or ``help [SUBCOMMAND]``),
``%escouade SUBCOMMAND --help``, ``%%escouade --help``."""


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # never exit the kernel, never print a traceback
        raise _UsageError(message)


def _start_parser() -> _Parser:
    p = _Parser(prog="%escouade", add_help=False)
    p.add_argument("name")
    p.add_argument("--cwd")
    p.add_argument("--as", dest="as_name")
    p.add_argument("--private", action="store_true")
    p.add_argument("--mode")
    p.add_argument("--via")
    p.add_argument("--account")
    p.add_argument("--fs", dest="fs", action="store_true", default=None,
                   help="offer client fs even through a launcher")
    p.add_argument("--mcp", action="append", metavar="SERVER",
                   help="give only these servers of your mcp.json (repeatable; 'none': none of them)")
    p.add_argument("--no-kernel-tools", dest="kernel_tools", action="store_false", default=None,
                   help="do not give the agent the kernel's MCP server")
    p.add_argument("--worktree", nargs="?", const=True, default=False, metavar="BRANCH",
                   help="its own git worktree and branch (default escouade/AGENT) off HEAD")
    p.add_argument("--add-dir", dest="add_dirs", action="append", default=[], metavar="DIR",
                   help="another folder of the session (ACP additionalDirectories; repeatable)")
    p.add_argument("--system-prompt", metavar="TEXT", help="ACP systemPrompt where the agent takes one")
    p.add_argument("--system-prompt-mode", choices=("append", "override"), default="append")
    p.add_argument("--review", action="store_true",
                   help="the files it changes in each turn pend your Keep or Reject (agent.pending_edits)")
    p.add_argument("--sandbox", action="store_true",
                   help="run it under bubblewrap: read-only but its folder, its state folders and a private /tmp; "
                        "its own network (pasta): the host's loopback cut but for the kernel's tools")
    p.add_argument("--sandbox-port", dest="sandbox_ports", action="append", type=int, default=[], metavar="PORT",
                   help="a port of the host's 127.0.0.1 the sandboxed agent may reach (a local model; repeatable; "
                        "implies --sandbox)")
    return p


def _prompt_parser() -> _Parser:
    p = _Parser(prog="%%escouade", add_help=False)
    p.add_argument("name")
    p.add_argument("--with", dest="variables", default="", metavar="VARS",
                   help="kernel variables sent along, comma-separated (their summaries)")
    p.add_argument("--cells", default="", metavar="RANGE", help="execution counts whose In/Out are sent along")
    p.add_argument("--steer", action="store_true", help="send now, into the running turn (agent.steer)")
    return p


def _restart_hint(squad, gone) -> str:
    """How to restart an ended agent, in words that work as written: its view's Restart
    button, and — while the squad still knows it by its name — the code to paste."""
    if squad.agents.get(gone.name) is gone:
        return (f"its Restart button, or `from escouade_nb import get_squad` then "
                f"`await get_squad().get({gone.name!r}).restart()`,")
    return "its view's Restart button"


def _usage(message: str) -> None:
    print(f"escouade: {message}\n{USAGE}", file=sys.stderr)


def _loop_or_none():
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@magics_class
class EscouadeMagics(Magics):
    @line_cell_magic
    def escouade(self, line: str, cell: str | None = None):
        loaded(self.shell)  # %load_ext's imports, if its thread is still at them
        try:
            words = shlex.split(line)
        except ValueError as exc:
            _usage(str(exc))
            return None
        try:
            if cell is not None:
                return self._prompt(words, cell)
            return self._line(words)
        except _UsageError as exc:
            _usage(str(exc))
        except engine.SquadError as exc:
            print(f"escouade: {exc}", file=sys.stderr)
        return None

    def _line(self, words: list[str]) -> object:
        """A line of ``%escouade``: dispatched by :data:`COMMANDS` (its first word, else
        the start of an agent of the harness it names); ``--help`` anywhere after the
        subcommand's word shows that subcommand's usage."""
        if words and words[0] in (*HELP_FLAGS, "help"):
            _help(words[1:])
            return None
        command = _BY_NAME.get(words[0], START) if words else LISTING
        if any(w in HELP_FLAGS for w in words[1:]):
            print(command.help())
            return None
        assert command.handler is not None
        return command.handler(self, engine.get_squad(), words)

    def _listing(self, squad: Squad, words: list[str]) -> None:
        """``%escouade``: the harnesses at once; the versions not read yet arrive in this
        same display when read."""
        listing = squad.listing()
        handle = display(listing, display_id=not listing.complete or None)
        if handle is not None and not listing.complete:
            listing.on_change.subscribe(lambda changed: handle.update(changed))

    def _stop(self, squad: Squad, words: list[str]) -> None:
        if len(words) != 2:
            raise _UsageError("stop takes one agent name")
        agent = squad.get(words[1])
        if agent.status in NAME_FREE:  # no process to stop
            print(f"{agent.name} is already {agent.status}")
            return
        self._need_loop()
        squad.stop_soon(agent.name)
        print(f"stopping {agent.name}")

    def _squad_view(self, squad: Squad, words: list[str]) -> None:
        if len(words) != 1:
            raise _UsageError("squad takes no argument")
        from .widgets.squad_view import SquadView
        _show(SquadView(squad))

    def _resume(self, squad: Squad, words: list[str]) -> object:
        if words[1:] in ([], ["--all"]):  # name, last write, first prompt, folder (files' heads only)
            from .engine import listing_text
            print(listing_text(squad.resumable_summaries(everywhere=words[1:] == ["--all"])))
            return None
        if len(words) == 4 and words[2] == "--session":  # one of the agent's own sessions (session/list)
            self._need_loop()
            agent = squad.open_session(words[1], words[3])
        else:
            if len(words) not in (2, 4) or (len(words) == 4 and words[2] != "--from"):
                raise _UsageError("resume takes one agent name (and optionally --from FILE, or --session ID), "
                                  "or --all")
            self._need_loop()
            agent = squad.resume(words[1], words[3] if len(words) == 4 else None)
        from .widgets import AgentView
        _show(AgentView(agent))
        return agent

    def _update(self, squad: Squad, words: list[str]) -> None:
        """``update NAME [--yes]``: the harness's update command shown (the version
        installed now filled in once read), run at once with ``--yes``; what is checked
        and read is the squad's (:meth:`~.engine.squad.Squad.update_soon`)."""
        if len(words) not in (2, 3) or (len(words) == 3 and words[2] != "--yes"):
            raise _UsageError("update takes one harness name, and optionally --yes")
        try:
            ref, before = squad.update_soon(words[1])
        except NoEventLoop as exc:  # terminal IPython: said after what was checked without a loop
            raise engine.SquadError(str(exc)) from None
        from .widgets.update_view import UpdateView
        view = UpdateView(ref, None)
        before.add_done_callback(lambda read: view.set_before(None if read.cancelled() else read.result()))
        _show(view)
        if len(words) == 3:
            view.start()

    def _install(self, squad: Squad, words: list[str]) -> None:
        """``install [NAME] [--refresh]``: what the ACP registry offers, or one of its agents
        installed per user (:meth:`~.engine.squad.Squad.install`), npm's or pip's output streamed
        into this cell's output as it comes, then what was installed, its version and where."""
        refresh = "--refresh" in words[1:]
        rest = [w for w in words[1:] if w != "--refresh"]
        if len(rest) > 1:
            raise _UsageError("install takes one registry agent id (none: the list), and optionally --refresh")
        self._need_loop()
        if not rest:
            handle = display({"text/plain": "the ACP registry…"}, raw=True, display_id=True)

            async def listing() -> None:
                try:
                    text = await squad.registry_listing(refresh)
                except EscouadeError as exc:
                    text = f"escouade: {exc}"
                handle.update({"text/plain": text}, raw=True)
            squad._own(listing(), "escouade install listing", cancel=False)
            return
        name = rest[0]
        progress = InstallLog(f"installing {name} from the ACP registry…")

        async def go() -> None:
            try:
                result = await squad.install(name, on_line=progress.line, refresh=refresh)
                progress.end(str(result), keep_log=not result.already)
            except EscouadeError as exc:
                progress.end(f"escouade: {exc}", keep_log=True)
        squad._own(go(), f"escouade install {name}")

    def _rules(self, squad: Squad, words: list[str]) -> None:
        """``plugins …`` and ``journal …`` (:mod:`~.permissions.commands`)."""
        try:
            if words[0] == "plugins":
                running = [a for a in squad.agents.values() if a.status not in ENDED]  # on: those it misses
                display(plugins_command(squad.rules, words[1:], running))  # a listing: its own text and HTML
            else:
                from .widgets.journal_view import JournalView
                query = journal_command(squad.rules, words[1:])
                _show(JournalView(query.journal, plugin=query.plugin, kind=query.kind, names=query.names))
        except CommandError as exc:
            raise _UsageError(str(exc)) from None

    def _start(self, squad: Squad, words: list[str]) -> object:
        args = _start_parser().parse_args(words)
        self._need_loop(lambda: squad.check(args.name, cwd=args.cwd, name=args.as_name, via=args.via))
        agent = squad.start(args.name, cwd=args.cwd, name=args.as_name, private=args.private, mode=args.mode,
                            via=args.via, account=args.account, fs=args.fs, mcp=args.mcp,
                            kernel_tools=args.kernel_tools, worktree=args.worktree, add_dirs=args.add_dirs,
                            system_prompt=args.system_prompt, system_prompt_mode=args.system_prompt_mode,
                            review=args.review, sandbox=args.sandbox, sandbox_ports=args.sandbox_ports)
        from .widgets import AgentView
        _show(AgentView(agent))
        return agent

    def _connect(self, squad: Squad, words: list[str]) -> object:
        """``%escouade connect NAME URL --token-file FILE [--harness H] [--cwd DIR] [--mode MODE]``:
        an agent served elsewhere (``Squad.connect``), shown like a started one."""
        p = _Parser(prog="%escouade connect", add_help=False)
        p.add_argument("name")
        p.add_argument("url")
        p.add_argument("--token-file", required=True)
        p.add_argument("--harness")
        p.add_argument("--cwd")
        p.add_argument("--mode")
        args = p.parse_args(words[1:])
        self._need_loop()
        agent = squad.connect(args.name, args.url, token_file=args.token_file, harness=args.harness, cwd=args.cwd,
                              mode=args.mode)
        from .widgets import AgentView
        _show(AgentView(agent))
        return agent

    def _prompt(self, words: list[str], cell: str) -> None:
        if any(w in HELP_FLAGS for w in words):
            print(PROMPT.help())
            return None
        args = _prompt_parser().parse_args(words)
        variables = [v.strip() for v in args.variables.split(",") if v.strip()]
        text = cell.strip()
        if not text:
            raise _UsageError("the cell is empty: write the prompt under %%escouade NAME")
        self._need_loop()
        squad = engine.get_squad()
        name = args.name
        if "," in name and args.steer:
            raise _UsageError("--steer steers one agent")
        if "," in name:  # several agents, one prompt: side by side
            names = [n.strip() for n in name.split(",") if n.strip()]
            try:
                turns = squad.ask_soon(names, text, variables=variables, cells=args.cells)
            except (KeyError, ValueError) as exc:
                raise _UsageError(str(exc).strip("'\"")) from None
            from .widgets.compare_view import CompareView
            view = CompareView(turns)
            squad.restat_soon(turns, view.finish)  # the comparison freezes, the saved form is made
            _show(view)
            return None
        agent = squad.agents.get(name)
        if agent is None or agent.status in ENDED:
            gone = agent
            agent = squad.start(gone.harness.short_id if gone is not None else name)
            if gone is not None:
                print(f"escouade: agent {gone.name!r} is {gone.status}; started {agent.name!r} "
                      f"({_restart_hint(squad, gone)} keeps the old conversation)", file=sys.stderr)
        if args.steer and (variables or args.cells):
            raise _UsageError("--steer sends the cell's text alone (no --with, no --cells)")
        try:
            turn = agent.steer(text) if args.steer else agent.send(text, variables=variables, cells=args.cells)
        except (KeyError, ValueError) as exc:
            raise _UsageError(str(exc).strip("'\"")) from None
        from .widgets import TurnView
        _show(TurnView(turn))
        return None

    def _fork(self, squad: Squad, words: list[str]) -> object:
        """``fork AGENT [--as NAME]``: the new agent's view, at once."""
        p = _Parser(prog="%escouade fork", add_help=False)
        p.add_argument("agent")
        p.add_argument("--as", dest="as_name")
        args = p.parse_args(words[1:])
        self._need_loop()
        agent = squad.fork(args.agent, args.as_name)
        from .widgets import AgentView
        _show(AgentView(agent))
        return agent

    def _worktree_command(self, squad: Squad, words: list[str]) -> None:
        """``merge|rebase AGENT``, ``discard AGENT [--force]``: run by a task of the
        squad's, the outcome printed in this cell's output when known."""
        verb, rest = words[0], words[1:]
        force = "--force" in rest
        rest = [w for w in rest if w != "--force"]
        if len(rest) != 1 or (force and verb != "discard"):
            raise _UsageError(f"{verb} takes one agent name"
                              + (" (and optionally --force)" if verb == "discard" else ""))
        agent = squad.get(rest[0])
        if agent.worktree is None:
            raise engine.SquadError(f"agent {agent.name!r} has no worktree (start it with --worktree)")
        self._need_loop()
        handle = display({"text/plain": f"{verb} of {agent.name}'s worktree…"}, raw=True, display_id=True)

        async def go() -> None:
            try:
                if verb == "discard":
                    await squad.discard(agent.name, force=force)
                    text = f"discarded {agent.name}'s worktree and branch"
                else:
                    text = str(await getattr(squad, verb)(agent.name))
            except engine.SquadError as exc:
                text = f"escouade: {exc}"
            handle.update({"text/plain": text}, raw=True)
        squad._own(go(), f"escouade {verb} {agent.name}", cancel=False)

    def _sessions(self, squad: Squad, words: list[str]) -> None:
        """``sessions AGENT [--cursor C] [--all]``: one page of the agent's own sessions
        (ACP ``session/list``), shown in this cell's output when it arrives."""
        everywhere = "--all" in words
        words = [w for w in words[1:] if w != "--all"]
        if len(words) not in (1, 3) or (len(words) == 3 and words[1] != "--cursor"):
            raise _UsageError("sessions takes one agent name, and optionally --cursor CURSOR and --all")
        agent = squad.get(words[0])
        self._need_loop()
        from .widgets.views import current_run, shown_in_cell

        cell, run = current_run()
        handle = display({"text/plain": f"asking {agent.name} for its sessions…"}, raw=True, display_id=True)
        widget = display({"text/plain": ""}, raw=True, display_id=True)  # the list's widget, once it came

        def done(page, error) -> None:
            if error is not None:
                handle.update({"text/plain": f"escouade: {error}"}, raw=True)
                return
            from .widgets.sessions_view import SessionsView  # rows that open, and delete where offered

            view = SessionsView(squad, agent, page)
            shown_in_cell(view, cell, run)
            view.show(handle, widget)  # its saved form (a static table, sessions_text), then the widget
        squad.sessions_soon(agent.name, done, cursor=words[2] if len(words) == 3 else None, everywhere=everywhere)
        return None

    def _written(self, squad: Squad, words: list[str]) -> None:
        """``written [PATH]``: what each agent wrote (the cells kept with their provenance),
        in that saved notebook or, with no path, this kernel's open one; read off the loop
        (:func:`~.kernel_mcp.written_reads.read_written`) and shown in this cell's output when read."""
        if len(words) > 2:
            raise _UsageError("written takes one notebook path, or none (this kernel's notebook)")
        self._need_loop()
        from .kernel_mcp.written_reads import read_written
        from .widgets.views import clicks

        path = words[1] if len(words) == 2 else None
        handle = display({"text/plain": f"reading {path or 'this notebook'}…"}, raw=True, display_id=True)

        async def read() -> None:
            written = await read_written(path, ns=self.shell.user_ns if self.shell is not None else None)
            if handle is not None:
                handle.update(written)
        clicks.start(read())  # its owner: a task of the views' (logged if it fails)

    def _export(self, squad: Squad, words: list[str]) -> None:
        """``export AGENT PATH.ipynb [--force]``: checked now, written by a task of the
        squad's; this cell's output says when it is written (or why not)."""
        force = "--force" in words
        rest = [w for w in words[1:] if w != "--force"]
        if len(rest) != 2:
            raise _UsageError("export takes one agent name and one PATH.ipynb (and optionally --force)")
        name, path = rest
        agent = squad.get(name)
        if not path.lower().endswith(".ipynb"):
            raise _UsageError(f"export writes a Jupyter notebook: {path} does not end in .ipynb")
        from pathlib import Path

        if Path(path).exists() and not force:  # a stat: the write itself checks again, in its thread
            raise engine.SquadError(f"{path} exists already: add --force to replace it")
        self._need_loop()
        handle = display({"text/plain": f"exporting {agent.name}'s conversation to {path}…"}, raw=True,
                         display_id=True)

        def done(written, error) -> None:
            text = (f"exported {agent.name}'s conversation ({len(agent.conversation.items)} items) to {written}"
                    if error is None else f"escouade: export of {agent.name} failed: {error}")
            handle.update({"text/plain": text}, raw=True)
        squad.export_soon(agent.name, path, force=force, then=done)
        return None

    @staticmethod
    def _need_loop(check: Callable[[], object] | None = None) -> None:
        """Outside a running event loop (terminal IPython): what ``check()`` can tell
        without one (an unknown harness, a program not installed and its install command)
        is said first, then where %escouade works and what to do here."""
        if _loop_or_none() is not None:
            return
        if check is not None:
            try:
                check()
            except engine.SquadError as exc:
                print(f"escouade: {exc}", file=sys.stderr)
        raise engine.SquadError(str(NoEventLoop("%escouade")))


class InstallLog:
    """``%escouade install NAME``'s output: a display whose log (the newest ``TAIL`` lines of
    npm's or pip's output) is redrawn at most every ``EVERY`` seconds while it runs, then
    replaced by the outcome (what was installed, its version and where, or why not) and the
    log's end. Plain text and HTML; nothing transient stays once it has ended."""

    TAIL = 12
    EVERY = 0.5

    def __init__(self, head: str) -> None:
        self.head = head
        self.lines: list[str] = []
        self.count = 0
        self.ended = False
        self._later: asyncio.TimerHandle | None = None
        self.handle = display(self._bundle(head), raw=True, display_id=True)

    def _bundle(self, head: str, keep_log: bool = True) -> dict[str, str]:
        log = "\n".join(self.lines[-self.TAIL:]) if keep_log else ""
        more = f"({self.count} lines of output; the last {min(self.TAIL, len(self.lines))}:)" if log else ""
        text = "\n".join(x for x in (head, more, log) if x)
        body = f"<div>{html.escape(head)}</div>"
        if log:
            body += (f"<div class='esc-dim'>{html.escape(more)}</div>"
                     f"<pre style='max-height:16em;overflow:auto'>{html.escape(log)}</pre>")
        return {"text/plain": text, "text/html": f"<div class='esc-install'>{body}</div>"}

    def line(self, line: str) -> None:
        """One line of output (redrawn soon, not at once: npm prints hundreds)."""
        self.count += 1
        self.lines.append(line)
        del self.lines[:-self.TAIL]
        if self._later is None and not self.ended:
            self._later = asyncio.get_running_loop().call_later(self.EVERY, self._redraw)

    def _redraw(self) -> None:
        self._later = None
        if not self.ended:
            self.handle.update(self._bundle(self.head), raw=True)

    def end(self, outcome: str, *, keep_log: bool) -> None:
        """The outcome, once: it replaces the running form."""
        self.ended = True
        if self._later is not None:
            self._later.cancel()
        self.handle.update(self._bundle(outcome, keep_log), raw=True)


def _show(view) -> None:
    """Display a view as the output of the cell being run; when that cell runs again,
    the views it showed before are closed (their output is gone: they let go)."""
    from .widgets.views import current_run, shown_in_cell

    shown_in_cell(view, *current_run())
    display(view)


_START_USAGE = """\
  %escouade NAME [--cwd DIR] [--as AGENT] [--mode MODE] [--private] [--via LAUNCHER [--fs]] [--account ACCOUNT]
                 [--mcp SERVER]... [--no-kernel-tools] [--worktree [BRANCH]] [--sandbox] [--sandbox-port PORT]...
                                            start an agent of harness NAME and show it
                                            (--worktree: in its own git worktree and branch off HEAD)
                 [--add-dir DIR]... [--system-prompt TEXT [--system-prompt-mode append|override]] [--review]
                                            (--add-dir: another folder of the session, ACP additionalDirectories;
                                             --system-prompt: ACP systemPrompt where offered, else before the first prompt)
  (--private: a private project, never submitted to a rule plugin not turned on for it;
   --fs: offer the client's file system even through a launcher;
   --review: the files it changes in each turn pend your Keep or Reject, agent.pending_edits)
   --sandbox: under bubblewrap, the file system read-only but its folder, its state folders and a private /tmp,
   its own network: the host's loopback cut but for the kernel's tools and each --sandbox-port PORT)
"""  # noqa: E501  (the usage as printed: one line of it is longer)

START = Subcommand((), _START_USAGE, EscouadeMagics._start)
"""``%escouade NAME …``: what a line whose first word names no subcommand does."""
PROMPT = Subcommand(("%%escouade",), """\
  %%escouade NAME|AGENT[,AGENT...] [--with VAR,VAR] [--cells 3-5]
                                            send the cell as a prompt to that agent (with kernel context);
                                            to several: side by side, with a comparison
  %%escouade AGENT --steer                  send the cell now, into its running turn (else the turn is
                                            stopped and the cell sent next, marked steered)
""", None)
"""``%%escouade``: the cell magic (its usage only; :meth:`EscouadeMagics._prompt` runs it)."""

LISTING = Subcommand((), "  %escouade                                 list harnesses and running agents\n",
                     EscouadeMagics._listing)
"""``%escouade`` alone."""

COMMANDS: tuple[Subcommand, ...] = (
    LISTING,
    START,
    Subcommand(("stop",), "  %escouade stop AGENT                      stop an agent\n", EscouadeMagics._stop),
    Subcommand(("connect",), """\
  %escouade connect AGENT ws://HOST:PORT/ --token-file FILE [--harness NAME] [--cwd DIR] [--mode MODE]
                                            an agent served elsewhere (escouade-acp-serve), over ACP on a
                                            WebSocket; the bearer token in FILE (mode 0600); reconnects
""", EscouadeMagics._connect),
    Subcommand(("sessions",), """\
  %escouade sessions AGENT [--cursor C] [--all]
                                            the agent's own sessions for its folder (ACP session/list;
                                             --all: those it lists of other folders too, opened in theirs)
""", EscouadeMagics._sessions),
    Subcommand(("export",), """\
  %escouade export AGENT PATH.ipynb [--force]
                                            the agent's conversation as a notebook (--force: replace PATH)
""", EscouadeMagics._export),
    Subcommand(("written",), """\
  %escouade written [PATH.ipynb]            what each agent wrote: the cells kept, with their provenance
                                            (no path: this kernel's open notebook, else its saved file)
""", EscouadeMagics._written),
    Subcommand(("squad",), "  %escouade squad                           all agents of this kernel, live\n",
               EscouadeMagics._squad_view),
    Subcommand(("merge", "rebase"),
               "  %escouade merge|rebase AGENT              merge its worktree branch into the base / rebase it onto "
               "the base\n", EscouadeMagics._worktree_command),
    Subcommand(("discard",),
               "  %escouade discard AGENT [--force]         stop it, remove its worktree and branch (--force: "
               "uncommitted too)\n", EscouadeMagics._worktree_command),
    Subcommand(("fork",), "  %escouade fork AGENT [--as NAME]          a new agent of its harness carrying its "
               "conversation\n", EscouadeMagics._fork),
    Subcommand(("resume",), """\
  %escouade resume [AGENT]                  list this project's resumable agents, or rebuild one from its
                                            transcript (%escouade resume --all: other folders' agents too)
  %escouade resume AGENT --from FILE        rebuild that transcript (two agents of one name: pick one)
  %escouade resume AGENT --session ID       open that session of the agent's own (see sessions) in a new agent
""", EscouadeMagics._resume),
    Subcommand(("install",), """\
  %escouade install [NAME] [--refresh]      the ACP registry's agents, or one installed for you (npm or pip, no
                                            root; --refresh: the registry fetched first, else the copy at hand)
""", EscouadeMagics._install),
    Subcommand(("update",), "  %escouade update NAME [--yes]             show (and run) the harness's update command\n",
               EscouadeMagics._update),
    PROMPT,
    Subcommand(("plugins", "journal"), PLUGINS_USAGE + "\n", EscouadeMagics._rules),
    Subcommand(("help",), "  %escouade help [SUBCOMMAND]               this text, or one subcommand's "
               "(also: %escouade SUBCOMMAND --help)\n", None),
)
"""Every subcommand, in the order of the usage text (:data:`USAGE` is generated from it)."""

_BY_NAME = {name: command for command in COMMANDS if command.handler is not None for name in command.names}

USAGE = "usage:\n" + "".join(command.usage for command in COMMANDS).rstrip("\n")
"""The whole usage text: printed by ``%escouade --help`` and after every usage error."""


def _help(words: list[str]) -> None:
    """``%escouade help [SUBCOMMAND]``: the whole usage, or that subcommand's (``start``:
    the start of an agent, the form whose first word is a harness). A help flag after it
    (``help --help``) asks for the same."""
    words = [w for w in words if w not in HELP_FLAGS]
    if not words:
        print(USAGE)
        return
    command = START if words[0] == "start" else next((c for c in COMMANDS if words[0] in c.names), None)
    if len(words) > 1:
        raise _UsageError(f"help takes one subcommand, or none (got {len(words)} words)")
    if command is None:
        names = ", ".join(n for c in COMMANDS for n in c.names)
        raise _UsageError(f"help takes one subcommand ({names}, or start for the start of an agent), "
                          f"or none: {words[0]!r} is not one")
    print(command.help())


PRELOADED = ("escouade_nb.engine.squad", "escouade_nb.widgets.agent_view", "escouade_nb.widgets.squad_view",
             "escouade_nb.widgets.tables", "escouade_nb.widgets.notebook_pages")
"""What ``%load_ext escouade_nb``'s thread imports, in this order, one step each: the engine (the ACP SDK,
pydantic's models), the views (ipywidgets, markdown-it), the listings' HTML, the channel to the pages;
then the kernel's MCP server's side (:func:`~.kernel_mcp.server.preload_in_kernel`)."""

_loading: threading.Thread | None = None
_finished = False


def load(ipython) -> None:
    """``%load_ext escouade_nb``: register the magics (this module loads nothing heavy), then
    import the engine, the views and the kernel's MCP server (:data:`PRELOADED`: about two
    seconds, once) in a worker thread, so that neither this cell nor the first ``%escouade
    NAME`` holds the kernel's loop while they load. Imports in a thread still hold the GIL
    a few milliseconds at a time; what stalled the loop there was the cyclic GC's full
    collections (60–220 ms each, walking the whole heap): the thread moves what is alive out
    of the collector's scans (``gc.freeze()``) before its first step and after each one, so
    that a collection walks at most one step's new objects (see
    :func:`~.kernel_mcp.server.preload_in_kernel`). When they are loaded, the loop registers
    the listings' HTML and the channel to the notebook's pages (:mod:`.widgets.notebook_pages`:
    its comm target; the pages are pinged at the first live read). A ``%escouade`` (or
    :func:`loaded`) before that waits for the thread, then does the same. The squad itself
    is made at first use, not here: what a notebook sets after loading
    (``ESCOUADE_NB_CONFIG_DIR``, its plugins folder…) must count. Outside a kernel with a
    running loop (terminal IPython), all of it happens in this call."""
    global _loading
    ipython.register_magics(EscouadeMagics)
    loop = _loop_or_none()
    if loop is None or getattr(ipython, "kernel", None) is None:
        _preload()
        _finish(ipython)
        return
    if _loading is None:
        # the garbage already in the kernel, freed now (a fresh kernel's heap: ~5 ms): the thread freezes what
        # is alive before its first import, and a frozen cycle is never freed
        gc.collect()
        _hold_pages()
        from .core.notebook import pages_coming
        pages_coming(loaded)  # a live read before the channel is loaded waits for this thread, then for _finish
        _loading = threading.Thread(target=_preload_then_finish, args=(loop, ipython), name="escouade-load",
                                    daemon=True)
        _loading.start()


def loaded(ipython: Any = None) -> None:
    """Wait until :func:`load`'s thread has imported what it imports (the calling thread is
    held meanwhile: at most the rest of those ~2 s, once), then, given the shell, register
    what :func:`load` registers on the loop if that was not done yet. At once when
    ``%load_ext`` was not run, or from the loading thread itself."""
    loading = _loading
    if loading is not None and loading is not threading.current_thread():
        loading.join()
    if ipython is not None and loading is not None:
        _finish(ipython)


def _preload() -> None:
    with collector_paused():  # these imports parse ASTs: safe beside the kernel's own parses (_threads.py)
        gc.freeze()  # the kernel's heap as it is: out of the collector's scans (no full collection: its walk stalls)
        for name in PRELOADED:
            importlib.import_module(name)
            gc.freeze()
        from .widgets.front import static_page
        static_page("")  # its stylesheet, cut once (~25 ms): the first view's saved form needs it
        from .manifest import discover
        discover()  # the installed packages' entry points, read once (kept while sys.path's folders are unchanged)
        engine.preload_in_kernel(collect=False)


def _preload_then_finish(loop: asyncio.AbstractEventLoop, ipython: Any) -> None:
    try:
        _preload()
    except Exception:  # the first %escouade imports them again on the loop, and says what failed
        log.exception("%load_ext escouade_nb: loading the engine and the views failed")
    try:
        loop.call_soon_threadsafe(_finish, ipython)
    except RuntimeError:  # the loop is closed: the kernel is going away
        pass


_held_pages: list[tuple[Any, dict, list[dict]]] = []
"""Pages' comms opened while :func:`load`'s thread imports: (comm, its open message, what it sent since)."""


def _hold_pages() -> None:
    """Take the pages' comm target at once (:func:`load`): a page that says hello before the channel
    to the pages is loaded (a reopened notebook's page says it without waiting; a click's decision rides
    on its open) is held, with what it sends meanwhile, and handed over by :func:`_finish`; one that
    closes meanwhile is dropped."""
    from comm import get_comm_manager

    from .core.notebook import PAGES_TARGET

    def hold(comm: Any, msg: dict) -> None:
        early: list[dict] = []
        held = (comm, msg, early)
        comm.on_msg(early.append)
        comm.on_close(lambda _msg: _held_pages.remove(held) if held in _held_pages else None)
        _held_pages.append(held)

    get_comm_manager().register_target(PAGES_TARGET, hold)


def _finish(ipython: Any) -> None:
    """On the kernel's loop, once: the listings' HTML, the channel to the notebook's pages (the pages held
    meanwhile handed to it)."""
    global _finished
    if _finished:
        return
    _finished = True
    from .widgets.tables import register
    register(ipython)  # the listings' HTML
    from .widgets.notebook_pages import start_in_kernel
    pages = start_in_kernel(ipython)  # the channel to the notebook's page (labextension/): its comm target
    from .core.notebook import pages_coming
    pages_coming(None)  # the channel is there (or never comes: not a kernel)
    held, _held_pages[:] = _held_pages[:], []
    for comm, msg, early in held:
        if pages is not None:
            pages.adopt(comm, msg, early)
