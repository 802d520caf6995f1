"""A real IPython kernel driven the way a frontend drives it (jupyter_client): execute
cells, read iopub, send the messages a view's front-end sends (``act``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager

from view_helpers import buttons_of as buttons_of  # re-exported: the kernel tests read cards with it


@dataclass
class Result:
    text: str = ""  # stdout + stderr + text/plain of results and displays
    error: str | None = None  # "Ename: evalue"
    comm_msgs: int = 0  # comm_open + comm_msg on iopub during the cell, whatever their parent
    comm_bytes: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    comms: list[tuple[float, dict[str, Any]]] = field(default_factory=list)  # (read at, comm_open/msg/close)


def kernel_with_env(cwd: Path, env: dict[str, str]) -> Kernel:
    """A :class:`Kernel` started with ``env`` added to this process's environment (which
    is put back as it was at once: only the kernel keeps it)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return Kernel(cwd)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


NEXT_OPEN = ("async def next_open(agent):  # the next card still waiting (reads are settled by escouade_nb)\n"
             "    while (card := await agent.next_permission(timeout=60)).answered:\n"
             "        pass\n"
             "    return card")
"""Kernel code: ``next_open(agent)``, the agent's next card still waiting."""

KERNEL_TOOLS_SETUP = (
    "%load_ext escouade_nb\nimport json\nimport pandas as pd\n"
    "df = pd.DataFrame({'region': ['north', 'south', 'east'], 'revenue': [120.5, -30.0, 44.0]})\n" + NEXT_OPEN)
"""The first cell of a kernel whose agent uses the kernel's tools: escouade_nb loaded, a
DataFrame ``df`` to list, and ``next_open(agent)``, the next card still waiting."""


def fake_with_tools(kernel: Kernel, name: str, also: str = "") -> None:
    """In ``kernel``: escouade_nb loaded, ``also`` run (kernel code, its lines ending in a
    newline), :data:`NEXT_OPEN`, and ``a``, the shipped ``fake`` agent named ``name``, ready and
    connected to the kernel's tools."""
    kernel.run(f"%load_ext escouade_nb\n{also}{NEXT_OPEN}\na = %escouade fake --as {name}\nawait a.ready()",
               timeout=120)
    wait_for(kernel, "a.kernel_tools_state[0] == 'connected'", timeout=60)


def start_task(kernel: Kernel, code: str) -> tuple[str, str]:
    """The fake agent ``a`` (:func:`fake_with_tools`) asks ``run long code`` of ``code``, its
    card is allowed, and the turn ends with the run left running as a task: ``(task_id, the
    turn's text)``; the card is ``card`` in the kernel."""
    out = kernel.run(f"t = a.send('run long code\\n' + {code!r})\ncard = await next_open(a)\n"
                     "card.choose('run')\nprint((await t).text)", timeout=120).text
    found = re.search(r"task-[0-9a-f]+", out)
    assert found is not None, out
    return found.group(0), out


def scratch_kernel(tmp: Path) -> Kernel:
    """A :class:`Kernel` in ``tmp/ws`` whose rule plugins, config, transcripts and journal
    are folders of ``tmp``: a kernel started again on the same ``tmp`` finds what the last
    one left (a restart, a resume)."""
    env = {"ESCOUADE_NB_PLUGINS_DIR": str(tmp / "plugins"), "ESCOUADE_NB_CONFIG_DIR": str(tmp / "config"),
           "ESCOUADE_NB_TRANSCRIPTS_DIR": str(tmp / "transcripts"), "ESCOUADE_NB_JOURNAL_DIR": str(tmp / "journal")}
    return kernel_with_env(tmp / "ws", env)


class Kernel:
    """One kernel in ``cwd``. ``run(code)`` executes and waits for idle."""

    def __init__(self, cwd: Path, env: Mapping[str, str] | None = None, connection_file: Path | None = None) -> None:
        """A python3 kernel started in ``cwd`` with ``env`` as its whole environment (default: this
        process's; the agents it starts inherit it), its connection file at ``connection_file`` if given."""
        extra = {} if connection_file is None else {"connection_file": str(connection_file)}
        for attempt in (1, 2):  # jupyter_client picks free ports before the kernel binds them: under
            # several workers another process may take one first, and the kernel dies at start
            # ("Address already in use"); such a start is made once more, with new ports
            self.km = KernelManager(kernel_name="python3", **extra)
            self.km.start_kernel(cwd=str(cwd), env={**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"})
            self.kc = self.km.client()
            self.kc.start_channels()
            try:
                self.kc.wait_for_ready(timeout=60)
                break
            except RuntimeError as exc:
                self.kc.stop_channels()
                self.km.shutdown_kernel(now=True)
                if attempt == 2 or "died" not in str(exc):
                    raise
        # what a front-end holds of each display with an id: its last display_data or
        # update_display_data (read from iopub by run and drain_iopub, whatever the parent)
        self.displays: dict[str, dict[str, Any]] = {}

    @property
    def pid(self) -> int:
        return self.km.provisioner.process.pid

    def run(self, code: str, timeout: float = 60, allow_error: bool = False) -> Result:
        msg_id = self.kc.execute(code)
        res = Result()
        deadline = time.monotonic() + timeout
        while True:
            msg = self.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            kind = msg["msg_type"]
            self._count_comm(res, msg)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            res.messages.append(msg)
            content = msg["content"]
            if kind == "status" and content["execution_state"] == "idle":
                break
            if kind == "stream":
                res.text += content["text"]
            elif kind in ("execute_result", "display_data"):
                res.text += content["data"].get("text/plain", "") + "\n"
            elif kind == "error":
                res.error = f"{content['ename']}: {content['evalue']}"
        if res.error and not allow_error:
            raise AssertionError(f"cell failed: {res.error}\n{res.text}")
        return res

    def drain_iopub(self, seconds: float, until: Callable[[dict[str, Any]], bool] | None = None) -> Result:
        """Read iopub for ``seconds`` (background traffic, e.g. widget updates), or only until a
        message for which ``until`` is true (then at once: no waiting out the whole time)."""
        res = Result()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            except Exception:
                break
            self._count_comm(res, msg)
            res.messages.append(msg)
            if until is not None and until(msg):
                break
        return res

    def _count_comm(self, res: Result, msg: dict[str, Any]) -> None:
        """A widget message on iopub, whatever its parent: counted and kept (with when it was read);
        a display with an id: what a front-end holds of it (``displays``)."""
        kind = msg["msg_type"]
        display_id = (msg["content"].get("transient") or {}).get("display_id")
        if kind in ("display_data", "update_display_data") and display_id:
            if kind == "display_data" or display_id in self.displays:
                self.displays[display_id] = msg["content"]["data"]
        if kind in ("comm_open", "comm_msg"):
            res.comm_msgs += 1
            res.comm_bytes += len(self.kc.session.pack(msg["content"]))
        if kind in ("comm_open", "comm_msg", "comm_close"):
            res.comms.append((time.monotonic(), msg))

    def shutdown(self) -> None:
        try:
            self.kc.stop_channels()
        finally:
            self.km.shutdown_kernel(now=False)


def wait_for(kernel: Kernel, expr: str, timeout: float = 15) -> None:
    """Poll a kernel expression until it prints True; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if kernel.run(f"print(bool({expr}))").text.strip() == "True":
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {expr}")


def process_alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def environ_of(pid: int) -> list[str]:
    """The ``NAME=value`` entries of ``pid``'s environment ([] when it is gone or not ours to read)."""
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace").split("\0")
    except OSError:
        return []


def processes_named(fragment: str, marked: str | None = None) -> list[int]:
    """PIDs (not zombies) whose command line contains ``fragment`` and, when ``marked``
    (a ``NAME=value`` entry) is given, whose environment holds it."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if fragment in cmd and process_alive(int(entry.name)):
            if marked is None or marked in environ_of(int(entry.name)):
                out.append(int(entry.name))
    return out


def left_behind(fragment: str, before: set[int], timeout: float = 10) -> set[int]:
    """PIDs with ``fragment`` in their command line that were not in ``before`` and still run
    after up to ``timeout`` s (polled every 0.1 s): what a test's processes left behind."""
    deadline = time.monotonic() + timeout
    left = set(processes_named(fragment)) - before
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = set(processes_named(fragment)) - before
    return left


def write_updatable_harness(plugins: Path, **fields: Any) -> None:
    """A plugin ``test.updatable`` in ``plugins`` with the harness ``updatable``: the shipped fake
    agent found on PATH, whose update command echoes two lines; ``fields`` are added to the harness."""
    (plugins / "updatable").mkdir(parents=True)
    (plugins / "updatable" / "escouade-plugin.json").write_text(json.dumps({
        "id": "test.updatable", "name": "Updatable",
        "contributes": {"harnesses": [{
            "id": "updatable", "name": "Updatable", "locate": {"names": ["escouade-fake-agent"]},
            **fields, "updateCommand": "echo updating the agent && echo done", "acp": {"args": []}}]}}))


def update_message(kernel: Kernel, model_id: str, state: dict) -> None:
    """Send the message a browser sends when the user changes a widget's value."""
    msg = kernel.kc.session.msg("comm_msg", {"comm_id": model_id,
                                             "data": {"method": "update", "state": state, "buffer_paths": []}})
    kernel.kc.shell_channel.send(msg)


def act(kernel: Kernel, model_id: str, content: dict) -> None:
    """Send the message the views' front-end (``widgets/escouade.js``) sends when the user
    acts: a click on a card's button, Stop, a menu's choice (``{"act": NAME, ...}``)."""
    msg = kernel.kc.session.msg("comm_msg", {"comm_id": model_id,
                                             "data": {"method": "custom", "content": {"k": "act", **content}}})
    kernel.kc.shell_channel.send(msg)


class McpProcess:
    """The ``mcp`` SDK's client in a process of its own (``tests/fixtures/mcp_call.py``), talking to the kernel's
    server at ``url`` with ``token``: a JSON line per call on its stdin, a JSON line per answer on its stdout."""

    def __init__(self, url: str, token: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "fixtures" / "mcp_call.py"), url],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, "ESCOUADE_MCP_TOKEN": token})
        assert json.loads(self.proc.stdout.readline()) == {"ready": True}

    @classmethod
    def from_output(cls, text: str) -> McpProcess:
        """The client of the server whose ``URL …`` and ``TOKEN …`` lines a cell printed in ``text``."""
        lines = dict(line.split(" ", 1) for line in text.splitlines() if line[:4] in ("URL ", "TOKE"))
        return cls(lines["URL"], lines["TOKEN"])

    def send(self, tool: str, **arguments: Any) -> None:
        """Call ``tool``; its answer is read by :meth:`answer`."""
        self.proc.stdin.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")
        self.proc.stdin.flush()

    def answer(self) -> dict:
        """The next answer: ``{"text", "is_error", ...}``."""
        return json.loads(self.proc.stdout.readline())

    def call(self, tool: str, **arguments: Any) -> dict:
        self.send(tool, **arguments)
        return self.answer()

    def live(self) -> dict:
        """``notebook_cells(source="live")``'s JSON (asserted not an error)."""
        got = self.call("notebook_cells", source="live")
        assert not got["is_error"], got["text"]
        return json.loads(got["text"])

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)

    def kill(self) -> None:
        """The client gone at once (a call may still be waiting for its answer)."""
        self.proc.kill()
        self.proc.wait()
