"""The agent's files and terminals as the conversation shows them.

* A write through our ``fs/write_text_file`` is shown as a diff in the tool card that
  aims at that path (a card of its own when none does).
* A private project's fence holds for what goes through us; an edit that completes
  without a write through us was done by the agent itself: the conversation says so,
  once per session.
* A terminal embedded in a tool call (``{"type": "terminal"}`` content) has its output
  and exit copied into the card, live, and kept after the terminal is released.
* A diff of the notebook this kernel runs (:func:`kernel_notebook_path`) marks its tool
  call (``ToolCall.kernel_notebook``): its cards say "this is the notebook you are in".

One :class:`Workspace` per session (it holds that session's written paths and terminals).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.conversation import Change, Conversation, ToolCall
from ..core.notebook import kernel_notebook
from ..core.render_text import is_notebook_path
from .kernel_access import user_namespace

if TYPE_CHECKING:
    from ..wire.terminals import TerminalEvent, TerminalManager

EDIT_KINDS = ("edit", "delete", "move")
WRITE_ORIGIN = "write"
"""The :attr:`~..core.conversation.ToolCall.origin` of the call we show for a write no call of the agent names."""
"""ACP tool kinds that change files."""


def paths_of(call: ToolCall) -> list[str]:
    """The files a tool call aims at: its locations, diff paths, and path-like inputs."""
    paths = [str(loc["path"]) for loc in call.locations if loc.get("path")]
    paths += [str(c["path"]) for c in call.content if c.get("type") == "diff" and c.get("path")]
    if isinstance(call.raw_input, dict):
        for key in ("path", "file_path", "filePath", "filename", "notebook_path"):
            if isinstance(call.raw_input.get(key), str):
                paths.append(call.raw_input[key])
    return paths


def kernel_notebook_path() -> Path | None:
    """The notebook this kernel runs (:func:`~..core.notebook.kernel_notebook` over the
    IPython user namespace, the environment and the kernel's working folder), symlinks
    resolved; None outside a kernel or when the kernel does not know it (nbclient, nbval)."""
    ns, _hidden = user_namespace()
    ref = kernel_notebook(ns, os.environ, Path.cwd())
    return Path(os.path.realpath(ref.path)) if ref is not None else None


def inside(path: str, folder: Path) -> bool:
    """Whether ``path`` (relative ones taken in ``folder``) is ``folder`` or below it,
    after resolving ``..`` and symlinks."""
    p = Path(path)
    p = (p if p.is_absolute() else folder / p).resolve()
    return p == folder or folder in p.parents


class Workspace:
    """``conversation``: the agent's; ``cwd``: its folder; ``name``: how notices name it;
    ``fenced``: a private project's fence holds; ``terminals``: the session's manager."""

    def __init__(self, conversation: Conversation, cwd: Path, *, name: str, fenced: bool,
                 terminals: TerminalManager) -> None:
        self.conversation = conversation
        self.cwd = cwd
        self.name = name
        self.fenced = fenced
        self.terminals = terminals
        self.written: set[str] = set()
        self.fence_told = False

    def changed(self, changes: list[Change]) -> None:
        """A conversation change: terminals to show, the kernel's notebook, the fence check."""
        self._terminals_shown(changes)
        self._kernel_notebook_marked(changes)
        if self.fenced and not self.fence_told:
            self._check_fence(changes)

    def _kernel_notebook_marked(self, changes: list[Change]) -> None:
        """Set ``kernel_notebook`` on the tool calls whose diffs write the notebook this
        kernel runs (looked up only when a changed call has a ``.ipynb`` diff)."""
        kernel: Path | None = None
        looked_up = False
        for change in changes:
            call = change.item
            if not isinstance(call, ToolCall):
                continue
            paths = [str(c["path"]) for c in call.diffs if is_notebook_path(c.get("path"))]
            if not paths:
                continue
            if not looked_up:
                kernel, looked_up = kernel_notebook_path(), True
            found = None
            if kernel is not None:
                found = next((p for p in paths if Path(os.path.realpath(p if Path(p).is_absolute()
                                                                        else self.cwd / p)) == kernel), None)
            call.kernel_notebook = found

    def _check_fence(self, changes: list[Change]) -> None:
        for change in changes:
            call = change.item
            if isinstance(call, ToolCall) and call.kind in EDIT_KINDS and call.status == "completed" \
                    and not any(c.get("type") == "diff" and c.get("path") in self.written for c in call.content):
                self.fence_told = True
                self.conversation.add_notice(
                    f"{self.name} changed files by itself, not through escouade_nb: the fence of this private "
                    f"project does not hold for those.", level="warning")
                return

    def file_written(self, path: Path, old: str | None, new: str) -> None:
        """A write through ``fs/write_text_file``: a diff in its tool card."""
        target = str(path)
        self.written.add(target)
        ours = [c for c in self.conversation.own_calls.values() if c.origin == WRITE_ORIGIN]
        for call in [*reversed(list(self.conversation.tool_calls.values())), *reversed(ours)]:
            if target in [str(Path(p) if Path(p).is_absolute() else self.cwd / p) for p in paths_of(call)]:
                if not any(c.get("type") == "diff" and c.get("path") == target for c in call.content):
                    self.conversation.add_tool_content(call, {"type": "diff", "path": target, "oldText": old,
                                                              "newText": new})
                return
        self.conversation.apply_own(WRITE_ORIGIN, {
            "sessionUpdate": "tool_call", "toolCallId": f"escouade-write-{len(self.conversation.items)}",
            "title": f"Wrote {target}", "kind": "edit", "status": "completed", "locations": [{"path": target}],
            "content": [{"type": "diff", "path": target, "oldText": old, "newText": new}]})

    def terminal_event(self, event: TerminalEvent) -> None:
        """Terminal output or exit: the tool cards that embed that terminal take it."""
        for call in self.conversation.tool_calls.values():
            if any(c.get("type") == "terminal" and c.get("terminalId") == event.terminal_id for c in call.content):
                if self._store_terminal(call, event.terminal_id):
                    self.conversation.touch(call)

    def snapshot(self, terminal_id: str) -> tuple[str, bool, Any] | None:
        """(output, truncated, exit status) of a terminal of this session, or None."""
        try:
            return self.terminals.snapshot(terminal_id)
        except Exception:
            return None

    def _store_terminal(self, call: ToolCall, terminal_id: str) -> bool:
        snap = self.snapshot(terminal_id)
        if snap is None:
            return False
        output, truncated, status = snap
        try:
            term = self.terminals.get(terminal_id)
            command = term.command if term.shell else shlex.join([term.command, *term.args])
        except Exception:
            command = None
        state = {"output": output, "truncated": truncated, "running": status is None, "command": command,
                 "exit_code": getattr(status, "exit_code", None), "signal": getattr(status, "signal", None)}
        if call.terminals.get(terminal_id) == state:
            return False
        call.terminals[terminal_id] = state
        return True

    def _terminals_shown(self, changes: list[Change]) -> None:
        """A tool call that embeds a terminal we already ran (content sent after it ended)."""
        for change in changes:
            call = change.item
            if isinstance(call, ToolCall):
                for c in call.content:
                    tid = c.get("terminalId") if c.get("type") == "terminal" else None
                    if tid and tid not in call.terminals and self._store_terminal(call, str(tid)):
                        self.conversation.touch(call)
