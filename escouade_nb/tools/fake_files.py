"""The fake agent's file and terminal scenarios: ``edit``/``write`` through the client's
``fs/*`` (or the disk when it offers none), ``terminal args|line|limit|kill|release|fail``,
``write outside P``, ``write [bad] notebook P``, ``crlf FILE``, ``latin1 FILE``.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

from acp import RequestError, start_tool_call, text_block, tool_content, tool_diff_content, update_tool_call
from acp.schema import ToolCallLocation, ToolCallUpdate

from .fake_session import FakeParts, _is_not_found, _Turn
from .fake_words import _TOKEN_STRIP, EDIT_MARKER, find_file_name


class FilesAndTerminals(FakeParts):
    """The scenarios that touch files (the client's ``fs/*``) and run commands (its
    terminals). Keywords: "terminal args|line|limit|kill|release|fail", "write outside
    PATH", "write [bad] notebook PATH", "crlf FILE", "latin1 FILE" / "non-utf8 FILE"
    (checked after the modes' keywords); "edit" / "write" (checked last but the greeting)."""

    _TERMINAL_RE = re.compile(r"\bterminal\s+(args|line|limit|kill|release|fail)\b[ \t]*(.*)",
                              re.IGNORECASE | re.DOTALL)
    _OUTSIDE_RE = re.compile(r"\bwrite\s+outside\s+(\S+)", re.IGNORECASE)
    _NOTEBOOK_RE = re.compile(r"\bwrite\s+(bad\s+)?notebook\s+(\S+)", re.IGNORECASE)
    _ENCODING_RE = re.compile(r"\b(crlf|latin1|non-utf8)\b", re.IGNORECASE)
    OUTSIDE_TEXT = "Written outside by the fake agent.\n"

    async def _dispatch_files_terminals(self, turn: _Turn, text: str) -> str | None:
        m = self._TERMINAL_RE.search(text)
        if m:
            return await self._terminal(turn, m.group(1).lower(), m.group(2).strip())
        m = self._NOTEBOOK_RE.search(text)
        if m:
            return await self._write_notebook(turn, m.group(2).strip(_TOKEN_STRIP), bad=bool(m.group(1)))
        m = self._OUTSIDE_RE.search(text)
        if m:
            return await self._write_outside(turn, m.group(1).strip(_TOKEN_STRIP))
        m = self._ENCODING_RE.search(text)
        if m:
            name = find_file_name(text)
            if m.group(1).lower() == "crlf":
                return await self._crlf(turn, name)
            return await self._non_utf8(turn, name)
        return None

    @staticmethod
    def _terminal_request(shape: str, rest: str) -> tuple[str, list[str] | None, int | None]:
        """(command, args, outputByteLimit) of each terminal scenario."""
        if shape == "args":
            return "echo", (rest.split() or ["hello", "from", "args"]), None
        if shape == "line":
            return (rest or "echo hello && echo world"), None, None
        if shape == "limit":  # 50 lines "Né\n"; 17 bytes cut inside an "é"
            return "printf", ["%sé\\n", *(str(i) for i in range(1, 51))], 17
        if shape == "kill":
            return "sleep", ["30"], None
        if shape == "release":
            return "echo started; sleep 30", None, None
        return "echo oops >&2; exit 3", None, None  # fail

    async def _terminal(self, turn: _Turn, shape: str, rest: str) -> str:
        import shlex

        from acp.schema import TerminalToolCallContent

        if not self.can_terminal:
            await turn.say("The client offers no terminal, so I cannot run commands.")
            return "end_turn"
        command, args, limit = self._terminal_request(shape, rest)
        shown = shlex.join([command, *args]) if args else command
        try:
            created = await self.conn.create_terminal(session_id=turn.sid, command=command, args=args,
                                                      cwd=turn.session.cwd, output_byte_limit=limit)
        except RequestError as exc:
            await turn.say(f"The client would not run `{shown}`: {exc}")
            return "end_turn"
        tid = created.terminal_id
        call_id = turn.session.next_tool_call_id()
        content = [TerminalToolCallContent(type="terminal", terminal_id=tid)]
        await turn.send(start_tool_call(call_id, f"Run {shown}", kind="execute", status="in_progress",
                                        content=content, raw_input={"command": command, "args": args or []}))
        if shape == "release":
            for _ in range(250):  # until it has started (at most 5 s)
                if "started" in (await self.conn.terminal_output(session_id=turn.sid, terminal_id=tid)).output:
                    break
                await asyncio.sleep(0.02)
            await self.conn.release_terminal(session_id=turn.sid, terminal_id=tid)
            try:
                await self.conn.terminal_output(session_id=turn.sid, terminal_id=tid)
                after = "it still answered"
            except RequestError as exc:
                after = f"the client says: {exc}"
            await turn.send(update_tool_call(call_id, status="completed", content=content))
            await turn.say(f"Released `{shown}` while it was running ({tid}). Asking for its output after "
                           f"the release, {after}")
            return "end_turn"
        if shape == "kill":
            await asyncio.sleep(0.2)
            await self.conn.kill_terminal(session_id=turn.sid, terminal_id=tid)
        status = await self.conn.wait_for_terminal_exit(session_id=turn.sid, terminal_id=tid)
        out = await self.conn.terminal_output(session_id=turn.sid, terminal_id=tid)
        await self.conn.release_terminal(session_id=turn.sid, terminal_id=tid)
        ok = status.exit_code == 0
        await turn.send(update_tool_call(call_id, status="completed" if ok else "failed", content=content,
                                         raw_output={"exitCode": status.exit_code, "signal": status.signal,
                                                     "truncated": out.truncated}))
        how = (f"was killed by {status.signal}" if status.signal else f"exited with code {status.exit_code}")
        note = " (truncated: the newest bytes only)" if out.truncated else ""
        await turn.say(f"`{shown}` {how}. Output{note}:\n```\n{out.output}```")
        return "end_turn"

    async def _write_outside(self, turn: _Turn, path: str) -> str:
        call_id = turn.session.next_tool_call_id()
        title = f"Write {path}"
        await turn.send(start_tool_call(call_id, title, kind="edit", status="pending",
                                        content=[tool_diff_content(path, self.OUTSIDE_TEXT, None)],
                                        raw_input={"path": path, "content": self.OUTSIDE_TEXT}))
        if not self.can_write:
            await turn.send(update_tool_call(call_id, status="failed"))
            await turn.say("The client does not offer fs/write_text_file.")
            return "end_turn"
        try:  # the path exactly as given: a relative one is the client's to resolve
            await self.conn.write_text_file(session_id=turn.sid, path=path, content=self.OUTSIDE_TEXT)
        except RequestError as exc:
            await turn.send(update_tool_call(call_id, status="failed",
                                             content=[tool_content(text_block(str(exc)))]))
            await turn.say(f"The client refused to write {path}: {exc}")
            return "end_turn"
        await turn.send(update_tool_call(call_id, status="completed"))
        await turn.say(f"Wrote {path}.")
        return "end_turn"

    NOTEBOOK_EDIT = "\n# edited by the fake agent"

    @classmethod
    def _notebook_text(cls, old: str | None, bad: bool) -> tuple[str, str]:
        """(new notebook text as nbformat writes it, what was done). A bad one: a code
        cell without ``outputs`` (valid JSON, not a valid notebook)."""
        import json

        def code(cell_id: str, source: str) -> dict[str, Any]:
            return {"cell_type": "code", "execution_count": None, "id": cell_id, "metadata": {}, "outputs": [],
                    "source": source}

        def md(cell_id: str, source: str) -> dict[str, Any]:
            return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": source}

        nb: Any = None
        if old is not None and not bad:
            try:
                nb = json.loads(old)
            except ValueError:
                nb = None
        if bad:
            cell = code("fake-bad", "print('no outputs field')")
            del cell["outputs"]
            nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
            done = "a code cell without outputs"
        elif isinstance(nb, dict) and isinstance(nb.get("cells"), list):
            cells = nb["cells"]
            first = next((c for c in cells if isinstance(c, dict) and c.get("cell_type") == "code"), None)
            steps = []
            if first is not None:
                src = first.get("source", "")
                first["source"] = ("".join(src) if isinstance(src, list) else src) + cls.NOTEBOOK_EDIT
                first["outputs"], first["execution_count"] = [], None
                steps.append(f"changed cell {first.get('id', '?')} and cleared its outputs")
            ids = {c.get("id") for c in cells if isinstance(c, dict)}
            new_id = next(f"fake-added-{n}" for n in range(1, len(ids) + 2) if f"fake-added-{n}" not in ids)
            cells.append(md(new_id, "Added by the fake agent."))
            steps.append(f"added cell {new_id}")
            done = ", ".join(steps)
        else:
            nb = {"cells": [md("fake-title", "# A notebook of the fake agent"), code("fake-code", "print(6 * 7)")],
                  "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
                  "nbformat": 4, "nbformat_minor": 5}
            done = "a new notebook of 2 cells"
        return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n", done

    async def _write_notebook(self, turn: _Turn, name: str, bad: bool) -> str:
        path = os.path.normpath(os.path.join(turn.session.cwd, os.path.expanduser(name)))
        if not (self.can_read and self.can_write):
            await turn.say("The client does not offer fs/*.")
            return "end_turn"
        try:
            old = await self._read(turn.sid, path)
        except RequestError as exc:
            await turn.say(f"I could not read {name}: {exc}")
            return "end_turn"
        new, done = self._notebook_text(old, bad)
        call_id = turn.session.next_tool_call_id()
        title = f"Edit {name}"
        diff = [tool_diff_content(path, new, old)]
        locations = [ToolCallLocation(path=path)]
        raw_input = {"path": path, "content": new}
        await turn.send(start_tool_call(call_id, title, kind="edit", status="pending", content=diff,
                                        locations=locations, raw_input=raw_input))
        if not bad:
            decision = await turn.ask(ToolCallUpdate(tool_call_id=call_id, title=title, kind="edit", content=diff,
                                                     locations=locations, raw_input=raw_input))
            if decision != "allow":
                await turn.send(update_tool_call(call_id, status="failed"))
                if decision == "cancelled":
                    return "cancelled"
                await turn.say(f"I left {name} alone.")
                return "end_turn"
        try:
            await self.conn.write_text_file(session_id=turn.sid, path=path, content=new)
        except RequestError as exc:
            await turn.send(update_tool_call(call_id, status="failed", content=[tool_content(text_block(str(exc)))]))
            await turn.say(f"The client refused to write {name}: {exc}")
            return "end_turn"
        await turn.send(update_tool_call(call_id, status="completed", content=diff))
        await turn.say(f"Wrote notebook {name}: {done}.")
        return "end_turn"

    async def _crlf(self, turn: _Turn, name: str) -> str:
        """Read a file, write it back with a line added and LF endings (as many agents
        do), read it again: the reply tells which line endings each read saw."""
        path = os.path.normpath(os.path.join(turn.session.cwd, name))

        def endings(text: str) -> str:
            lines = text.count("\n")
            crlf = text.count("\r\n")
            kind = "CRLF" if lines and crlf == lines else "LF" if not crlf else "mixed"
            return f"{lines} lines, {kind}"

        if not (self.can_read and self.can_write):
            await turn.say("The client does not offer fs/*.")
            return "end_turn"
        try:
            old = (await self.conn.read_text_file(session_id=turn.sid, path=path)).content
        except RequestError as exc:
            await turn.say(f"I could not read {name}: {exc}")
            return "end_turn"
        new = old.replace("\r\n", "\n") + EDIT_MARKER
        call_id = turn.session.next_tool_call_id()
        diff = [tool_diff_content(path, new, old)]
        await turn.send(start_tool_call(call_id, f"Edit {name}", kind="edit", status="in_progress", content=diff,
                                        locations=[ToolCallLocation(path=path)],
                                        raw_input={"path": path, "content": new}))
        try:
            await self.conn.write_text_file(session_id=turn.sid, path=path, content=new)
            again = (await self.conn.read_text_file(session_id=turn.sid, path=path)).content
        except RequestError as exc:
            await turn.send(update_tool_call(call_id, status="failed"))
            await turn.say(f"I could not write {name}: {exc}")
            return "end_turn"
        await turn.send(update_tool_call(call_id, status="completed", content=diff))
        await turn.say(f"Read {name}: {endings(old)}. Wrote it back with a line added, sent with LF endings. "
                       f"Read it again: {endings(again)}.")
        return "end_turn"

    async def _non_utf8(self, turn: _Turn, name: str) -> str:
        path = os.path.normpath(os.path.join(turn.session.cwd, name))
        if not (self.can_read and self.can_write):
            await turn.say("The client does not offer fs/*.")
            return "end_turn"
        try:
            content = (await self.conn.read_text_file(session_id=turn.sid, path=path)).content
        except RequestError as exc:
            reply = f"The client could not read {name}: {exc}."
            try:
                await self.conn.write_text_file(session_id=turn.sid, path=path, content="replaced\n")
                reply += " It let me overwrite it."
            except RequestError as exc2:
                reply += f" Overwriting it was refused too: {exc2}."
            await turn.say(reply)
            return "end_turn"
        await turn.say(f"Read {name} ({len(content)} characters): it is valid UTF-8.")
        return "end_turn"

    async def _edit(self, turn: _Turn, name: str) -> str:
        path = os.path.normpath(os.path.join(turn.session.cwd, os.path.expanduser(name)))
        try:
            old = await self._read(turn.sid, path)
        except (RequestError, OSError, UnicodeDecodeError) as exc:
            await turn.say(f"I could not read {name}: {exc}")
            return "end_turn"
        new = (old or "") + EDIT_MARKER
        call_id = turn.session.next_tool_call_id()
        title = f"Edit {name}"
        diff = [tool_diff_content(path, new, old)]
        locations = [ToolCallLocation(path=path)]
        raw_input = {"path": path, "content": new}
        turn.check()
        await turn.send(
            start_tool_call(
                call_id,
                title,
                kind="edit",
                status="pending",
                content=diff,
                locations=locations,
                raw_input=raw_input,
            )
        )
        decision = await turn.ask(
            ToolCallUpdate(
                tool_call_id=call_id,
                title=title,
                kind="edit",
                content=diff,
                locations=locations,
                raw_input=raw_input,
            )
        )
        if decision == "allow":
            try:
                await self._write(turn.sid, path, new)
            except (RequestError, OSError) as exc:
                await turn.send(update_tool_call(call_id, status="failed"))
                await turn.say(f"I could not write {name}: {exc}")
                return "end_turn"
            await turn.send(update_tool_call(call_id, status="completed", content=diff))
            await turn.say(f"Edited {name}.")
            return "end_turn"
        await turn.send(update_tool_call(call_id, status="failed"))
        if decision == "cancelled":
            return "cancelled"
        await turn.say(f"I left {name} alone.")
        return "end_turn"

    async def _read(self, session_id: str, path: str) -> str | None:
        if self.can_read:
            try:
                response = await self.conn.read_text_file(session_id, path)
            except RequestError as exc:
                if _is_not_found(exc):
                    return None
                raise
            return response.content
        try:
            with open(path, encoding="utf-8", newline="") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    async def _write(self, session_id: str, path: str, content: str) -> None:
        if self.can_write:
            await self.conn.write_text_file(session_id, path, content)
            return
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write(content)
