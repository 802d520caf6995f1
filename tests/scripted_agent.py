"""The scripted agent, shared by every test that plays an ACP exchange line by line.

``fixtures/script_agent.py`` plays a scenario (a list of runs of steps) over real pipes,
fails loudly (exit 99, a stderr line, a ``fail`` status) when the client writes something
the transcript does not expect, and logs every line the client wrote. :class:`Script`
writes a scenario and the harness manifest that starts it; the fixture ``script`` of
``tests/conftest.py`` makes one per test. Transcripts are written in the cases' own notation:

* ``C> {...}``: a message the client must write (a subset match; for a client request
  the id is the client's own and an ``A>`` response to the example id uses it);
* ``C*> {...}``: consecutive ones may arrive in any order;
* ``A> ...``: a line the agent writes as is (``$WS`` and captured values replaced);
  ``A~> ...`` writes it one byte per ``os.write``; consecutive ``A+> ...`` lines go in
  a single write;
* ``E> ...``: a line on the agent's stderr;
* ``!> {...}``: a raw step of the scripted agent (``sleep``, ``quiet``, ``exit``…);
* ``[P]``: the standard prelude (initialize, session/new, the prompt ``go``).
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from deadlines import run as run  # re-exported: the scripted tests' runner and poll
from deadlines import until as until
from escouade_nb.engine.agent import Agent
from escouade_nb.engine.squad import Squad, SquadError
from escouade_nb.manifest import HarnessRef, load_manifest

SCRIPT_AGENT = Path(__file__).resolve().parent / "fixtures" / "script_agent.py"

INIT = ('C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":'
        '{"fs":{"readTextFile":true,"writeTextFile":true}}}}')
"""The client's initialize, as in the cases' prelude but without ``"terminal": true``:
terminals are checked by F09 only, so that the other cases do not depend on them."""

INIT_RESULT = ('A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false,'
               '"promptCapabilities":{"image":false,"audio":false,"embeddedContext":false}},"authMethods":[]}}')
P_INIT = INIT + "\n" + INIT_RESULT
P_NEW = ('C> {"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"$WS","mcpServers":[]}}\n'
         'A> {"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}')
P_PROMPT = ('C> {"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1",'
            '"prompt":[{"type":"text","text":"go"}]}}')
PRELUDE = "\n".join([P_INIT, P_NEW, P_PROMPT])

_RESPONSE = re.compile(r'^\{"jsonrpc":"2\.0","id":(\d+),"(?:result|error)"')
_serial = itertools.count()


def steps_of(transcript: str) -> list[dict[str, Any]]:
    """The scripted agent's steps for a transcript in the cases' notation."""
    steps: list[dict[str, Any]] = []
    client_ids: set[int] = set()
    group: list[dict[str, Any]] | None = None  # C*> lines in a row
    batch: list[str] | None = None  # A+> lines in a row
    for line in transcript.replace("[P]", PRELUDE).splitlines():
        line = line.strip()
        if not line or line.startswith("--"):
            continue
        tag, _, rest = line.partition("> ")
        if tag != "C*":
            group = None
        if tag != "A+":
            batch = None
        if tag in ("A", "A~", "A+"):
            m = _RESPONSE.match(rest)
            if m and int(m.group(1)) in client_ids:  # a response to a client request: its real id
                rest = rest.replace(f'"id":{m.group(1)},', f'"id":$ID.c{m.group(1)},', 1)
            if tag == "A":
                steps.append({"send": rest})
            elif tag == "A~":
                steps.append({"send_bytewise": rest})
            elif batch is None:
                batch = [rest]
                steps.append({"send_batch": batch})
            else:
                batch.append(rest)
        elif tag in ("C", "C*"):
            want = json.loads(rest)
            name = None
            if "method" in want and "id" in want and want["id"] != "$ABSENT":  # the client picks its own ids
                client_ids.add(want["id"])
                name = f"c{want.pop('id')}"
            if tag == "C":
                steps.append({"expect": want, **({"as": name} if name else {})})
            elif group is None:
                group = [want]
                steps.append({"expect_all": group})
            else:
                group.append(want)
        elif tag == "E":
            steps.append({"stderr": rest + "\n"})
        elif tag == "!":
            steps.append(json.loads(rest))
        else:
            raise ValueError(f"not a transcript line: {line[:80]}")
    return steps


class Script:
    """A scenario for the scripted agent, its harness, and what the client wrote."""

    def __init__(self, tmp_path: Path, *runs: str | list[dict[str, Any]], ws: Path | None = None,
                 forbid: list[dict[str, Any]] | None = None, variables: dict[str, str] | None = None,
                 name: str = "script", acp: dict[str, Any] | None = None) -> None:
        n = next(_serial)
        self.dir = tmp_path / f"script-{n}"
        self.dir.mkdir(parents=True)
        self.ws = (ws or tmp_path / "ws").resolve()
        self.ws.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "log.jsonl"
        self.scenario = self.dir / "scenario.json"
        self.scenario.write_text(json.dumps({
            "log": str(self.log),
            "vars": {"WS": str(self.ws), **(variables or {})},
            "forbid": forbid or [],
            "runs": [steps_of(r) if isinstance(r, str) else r for r in runs],
        }))
        manifest = self.dir / "plugin" / "escouade-plugin.json"
        manifest.parent.mkdir()
        manifest.write_text(json.dumps({
            "id": f"dev.escouade_nb.tests.{name}", "name": "Scripted agent",
            "contributes": {"harnesses": [{
                "id": name, "name": "Scripted", "locate": {"names": ["python3"]},
                "acp": {"args": [str(SCRIPT_AGENT), str(self.scenario)], **(acp or {})}}]}}))
        loaded = load_manifest(manifest)
        self.ref = HarnessRef(manifest=loaded, harness=loaded.contributes.harnesses[0], path=manifest,
                              source="extra")

    def install(self, plugins: Path) -> None:
        """Put the harness in a plugin folder (``$ESCOUADE_NB_PLUGINS_DIR`` of a kernel)."""
        folder = plugins / self.ref.harness.id
        folder.mkdir(parents=True)
        (folder / "escouade-plugin.json").write_text(self.ref.path.read_text())

    def install_sandboxed(self, plugins: Path) -> None:
        """:meth:`install`, its own files (scenario, log: under tmp_path, which a sandbox's private
        /tmp hides) made its manifest's state folder through a variable of its ``acp.env``
        (``SCRIPT_STATE``), so that it still reads and writes them under ``--sandbox``."""
        manifest = json.loads(self.ref.path.read_text())
        manifest["contributes"]["harnesses"][0]["acp"].update(
            {"env": {"SCRIPT_STATE": str(self.dir)}, "stateFolders": ["${SCRIPT_STATE}"]})
        self.ref.path.write_text(json.dumps(manifest))
        self.install(plugins)

    def agent(self, **kwargs: Any) -> Agent:
        """An :class:`Agent` of this script's harness in its workspace (``kwargs`` go to ``Agent``);
        the caller closes it (or uses :meth:`running`)."""
        return Agent(self.ref, program=sys.executable, cwd=self.ws, **kwargs)

    @asynccontextmanager
    async def running(self, **kwargs: Any) -> AsyncIterator[Agent]:
        """:meth:`agent` for the length of an ``async with`` block: closed when it ends, also on
        a failed assert (no scripted agent outlives its test)."""
        agent = self.agent(**kwargs)
        try:
            yield agent
        finally:
            await agent.close()

    def entries(self, direction: str = "in", run: int | None = None) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        out = []
        for line in self.log.read_text().splitlines():
            entry = json.loads(line)
            if entry["dir"] == direction and (run is None or entry["run"] == run):
                out.append(entry)
        return out

    def received(self, run: int | None = None) -> list[dict[str, Any]]:
        """Every message the client wrote (parsed), in order."""
        return [json.loads(e["line"]) for e in self.entries("in", run)]

    def statuses(self) -> list[dict[str, Any]]:
        path = Path(str(self.log) + ".status")
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def assert_ok(self, runs: int = 1) -> None:
        """Every run played all its steps and nothing failed after."""
        statuses = self.statuses()
        fails = [s for s in statuses if s["status"] != "ok"]
        assert not fails, f"the scripted agent failed: {fails}"
        assert sorted({s["run"] for s in statuses}) == list(range(runs)), statuses


async def refused_start(name: str, **start: Any) -> tuple[str, dict[str, Any]]:
    """``Squad().start(name, **start)``, which must fail (:class:`SquadError`): its message and
    the squad's agents after it (the squad closed)."""
    squad = Squad()
    try:
        with pytest.raises(SquadError) as caught:
            squad.start(name, **start)
        return str(caught.value), dict(squad.agents)
    finally:
        await squad.aclose()


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def responses_to(messages: list[dict[str, Any]], rpc_id: Any) -> list[dict[str, Any]]:
    return [m for m in messages if m.get("id") == rpc_id and "method" not in m]


def _chunk(text: str, session: str = "s1") -> str:
    """An ``agent_message_chunk`` update of ``session``, as one compact JSON line."""
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}},
        ensure_ascii=False, separators=(",", ":"))


# -- lines of the end-2026 cases (tests/scenarios/test_acp_v1_25.py), reused by the resume tests --------
INIT_ANY = ('C> {"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}')
"""The client's initialize, whatever its capabilities."""

END = 'A> {"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'
"""The agent ends the first prompt turn (id 2)."""


def init_result(session_caps: str = "{}", load: bool = False) -> str:
    """The agent's initialize answer line, with ``sessionCapabilities`` (raw JSON) and ``loadSession``."""
    return ('A> {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":'
            + ("true" if load else "false") + ',"sessionCapabilities":' + session_caps + '},"authMethods":[]}}')


def update_line(update: str, session: str = "s1") -> str:
    """An ``A>`` line with a ``session/update`` carrying ``update`` (raw JSON)."""
    return f'A> {{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"{session}","update":{update}}}}}'


def chunk_line(text: str) -> str:
    """An ``A>`` line with an ``agent_message_chunk`` of ``text`` (no JSON escaping: plain text only)."""
    return update_line('{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"' + text + '"}}')


def conversation_text(conversation) -> str:
    """The conversation's text (``render_items``) without the client's own notices."""
    from escouade_nb.core.conversation import Notice
    from escouade_nb.core.render_text import render_items

    return render_items([i for i in conversation.items if not isinstance(i, Notice)])


def resume_and_send(s: Script, path, prompt: str, reply: str) -> str:
    """Resume the transcript at ``path`` with ``s``'s agent, send ``prompt`` (its answer must read ``reply``),
    close: the resumed conversation's :func:`conversation_text`."""

    async def go():
        agent = Agent.resume(path, s.ref, program=sys.executable)
        try:
            agent.start()
            await agent.ready()
            assert (await agent.send(prompt)).text == reply
            return conversation_text(agent.conversation)
        finally:
            await agent.close()

    return run(go())
