"""``escouade-plugin``: the bench of a rule plugin.

``escouade-plugin test DIR [--decisions FILE]``
    starts the plugin of folder DIR as escouade_nb does (``initialize``, then
    ``permissions/decide``), plays the recorded decisions (``DIR/decisions.jsonl`` by
    default: one JSON object a line, the ``permissions/decide`` params — ``project`` and
    ``agent`` may be left out — plus ``"expect": {"decision": ..., "message"?: ...}``),
    checks each answer and prints its delay. Exits 1 if an answer differs or takes
    more than 500 ms.

``escouade-plugin dev DIR``
    starts the plugin and lets you play decisions by hand, one a line:
    ``decide {"request": {"tool": "Bash", "input": {"command": "rm -rf build"}}}`` or
    the short form ``decide Bash rm -rf build``; ``restart``, ``help``, ``quit``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, TextIO

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..manifest import MANIFEST_FILENAME, ManifestError, load_manifest
from ..permissions.broker import BUDGET
from ..permissions.host import PluginCrashed, PluginError, PluginProcess, PluginRefused, rule_plugin_spec
from ..permissions.journal import Journal
from ..permissions.protocol import DECIDE, DecideResult
from ..permissions.request import family_of

START_LIMIT = 10.0
TOOL_FIELD = {"Bash": "command", "Edit": "file_path", "Write": "file_path", "Read": "file_path",
              "MultiEdit": "file_path", "Grep": "pattern", "Glob": "pattern", "WebFetch": "url", "WebSearch": "query"}


class Expect(BaseModel):
    decision: str
    message: str | None = None


class Recorded(BaseModel):
    """One recorded decision: the ``permissions/decide`` params and what to expect."""

    model_config = ConfigDict(extra="allow")

    request: dict[str, Any]
    project: dict[str, Any] = Field(default_factory=lambda: {"id": "bench", "name": "bench", "private": False})
    agent: dict[str, Any] = Field(default_factory=lambda: {"id": "bench", "name": "bench"})
    ticket: dict[str, Any] | None = None
    expect: Expect | None = None

    def params(self) -> dict[str, Any]:
        req = dict(self.request)
        req.setdefault("id", f"req_{uuid.uuid4().hex[:12]}")
        req.setdefault("tool", "Bash")
        req.setdefault("kind", family_of(req["tool"]))
        req.setdefault("input", {})
        out: dict[str, Any] = {"request": req, "project": self.project, "agent": self.agent}
        if self.ticket is not None:
            out["ticket"] = self.ticket
        return out


def _describe(params: dict[str, Any]) -> str:
    req = params["request"]
    tool = req.get("tool", "")
    inp = req.get("input") or {}
    aim = inp.get(TOOL_FIELD.get(tool, ""), "") or next((v for v in inp.values() if isinstance(v, str)), "")
    return f"{tool} {' '.join(str(aim).split())}".strip()


class _Bench:
    def __init__(self, folder: Path, out: TextIO) -> None:
        self.folder = folder.resolve()
        self.out = out
        manifest_path = self.folder / MANIFEST_FILENAME
        try:
            manifest = load_manifest(manifest_path)
        except ManifestError as exc:
            raise SystemExit(f"escouade-plugin: {exc}") from None
        spec = rule_plugin_spec(manifest, manifest_path)
        if spec is None:
            raise SystemExit(f"escouade-plugin: {manifest_path}: not a rule plugin (permissions.decide is not true)")
        if spec.error:
            raise SystemExit(f"escouade-plugin: {spec.error}")
        self.spec = spec
        self._journal_dir = tempfile.TemporaryDirectory(prefix="escouade-plugin-")
        self.journal = Journal(Path(self._journal_dir.name))
        self.proc = PluginProcess(spec, self.journal)

    def say(self, line: str = "") -> None:
        print(line, file=self.out, flush=True)

    async def start(self) -> float:
        t0 = time.monotonic()
        self.proc = PluginProcess(self.spec, self.journal)
        self.proc.ensure_running()
        with anyio.fail_after(START_LIMIT):
            await self.proc.wait_ready()
        return (time.monotonic() - t0) * 1000

    async def decide(self, params: dict[str, Any], limit: float = 5.0) -> tuple[str, Any, float]:
        """``(kind, value, ms)``: kind is ``answer`` (value a DecideResult), ``invalid``,
        ``error``, ``crash`` or ``late``."""
        t0 = time.monotonic()
        try:
            with anyio.fail_after(limit):
                result = await self.proc.call(DECIDE, params)
        except TimeoutError:
            return "late", None, (time.monotonic() - t0) * 1000
        except PluginRefused as exc:
            return "error", exc.message, (time.monotonic() - t0) * 1000
        except PluginCrashed as exc:
            return "crash", str(exc), (time.monotonic() - t0) * 1000
        ms = (time.monotonic() - t0) * 1000
        try:
            answer = DecideResult.model_validate(result)
        except ValidationError:  # none of the three, or not an answer
            return "invalid", result, ms
        return "answer", answer, ms

    async def stop(self) -> None:
        await self.proc.stop()
        await self.journal.aclose()  # every line written before the folder goes
        self._journal_dir.cleanup()


async def run_test(folder: Path, decisions: Path | None, out: TextIO) -> int:
    bench = _Bench(folder, out)
    path = decisions or bench.folder / "decisions.jsonl"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        bench.say(f"escouade-plugin: cannot read the recorded decisions {path}: {exc.strerror or exc}")
        return 2
    recorded: list[Recorded] = []
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            recorded.append(Recorded.model_validate_json(line))
        except ValidationError as exc:
            bench.say(f"escouade-plugin: {path}:{n}: {exc.errors()[0]['msg']}")
            return 2
    bench.say(f"{bench.spec.name} ({bench.spec.id}) — {len(recorded)} recorded decisions from {path}")
    try:
        try:
            started = await bench.start()
        except (TimeoutError, PluginError) as exc:
            bench.say(f"FAIL  the plugin did not answer initialize within {START_LIMIT:g} s: {exc}")
            for line in bench.journal.text().splitlines():
                bench.say(f"      {line}")
            return 1
        bench.say(f"started in {started:.0f} ms")
        failures = 0
        delays = []
        for rec in recorded:
            params = rec.params()
            kind, value, ms = await bench.decide(params)
            delays.append(ms)
            what = _describe(params)
            got = value.decision if kind == "answer" else kind
            message = value.message if kind == "answer" else (value if isinstance(value, str) else None)
            problems = []
            if rec.expect is not None:
                if got != rec.expect.decision:
                    problems.append(f"expected {rec.expect.decision}")
                elif rec.expect.message is not None and message != rec.expect.message:
                    problems.append(f"expected the message {rec.expect.message!r}")
            if ms > BUDGET * 1000:
                problems.append(f"slower than {BUDGET * 1000:.0f} ms")
            status = "FAIL" if problems else "ok"
            failures += bool(problems)
            line = f"{status:<5} {got:<7} {what:<40} {ms:8.1f} ms"
            if message:
                line += f"  {message}"
            if problems:
                line += f"  <- {'; '.join(problems)}"
            bench.say(line)
            if kind == "crash":
                break
        if delays:
            ordered = sorted(delays)
            bench.say(f"{len(delays)} decisions, {len(delays) - failures} ok, {failures} failed; "
                      f"median {ordered[len(ordered) // 2]:.1f} ms, slowest {ordered[-1]:.1f} ms "
                      f"(limit {BUDGET * 1000:.0f} ms)")
        return 1 if failures or len(delays) < len(recorded) else 0
    finally:
        await bench.stop()


DEV_HELP = """commands:
  decide {"request": {"tool": "Bash", "input": {"command": "rm -rf build"}}}   the params (project/agent optional)
  decide TOOL TEXT      short form: decide Bash npm test · decide Write src/x.py · decide WebFetch https://…
  restart               stop and start the plugin again (it reads its rules again)
  journal               what the host journaled (starts, crashes, stray output)
  help · quit"""


def _dev_params(text: str) -> dict[str, Any]:
    text = text.strip()
    if text.startswith("{"):
        return Recorded.model_validate_json(text).params()
    tool, _, rest = text.partition(" ")
    if not tool:
        raise ValueError("decide what? e.g. decide Bash npm test")
    field = TOOL_FIELD.get(tool, "input")
    return Recorded(request={"tool": tool, "input": {field: rest.strip()}}).params()


async def run_dev(folder: Path, inp: TextIO, out: TextIO) -> int:
    bench = _Bench(folder, out)
    interactive = inp.isatty()
    try:
        try:
            started = await bench.start()
        except (TimeoutError, PluginError) as exc:
            bench.say(f"the plugin did not start: {exc}")
            return 1
        bench.say(f"{bench.spec.name} started in {started:.0f} ms (pid {bench.proc.pid}). Type help for the commands.")
        while True:
            if interactive:
                out.write("> ")
                out.flush()
            line = await asyncio.to_thread(inp.readline)
            if not line:
                return 0
            word, _, rest = line.strip().partition(" ")
            if not word:
                continue
            if word in ("quit", "exit"):
                return 0
            if word == "help":
                bench.say(DEV_HELP)
            elif word == "journal":
                bench.say(bench.journal.text() or "(nothing)")
            elif word == "restart":
                await bench.proc.stop()
                bench.say(f"restarted in {await bench.start():.0f} ms (pid {bench.proc.pid})")
            elif word == "decide":
                try:
                    params = _dev_params(rest)
                except (ValueError, ValidationError) as exc:
                    bench.say(f"not a request: {str(exc).splitlines()[0]}")
                    continue
                if bench.proc.state != "ready":
                    try:
                        with anyio.fail_after(START_LIMIT):
                            await bench.proc.wait_ready()
                    except (TimeoutError, PluginError):
                        bench.say(f"the plugin is {bench.proc.describe()}")
                        continue
                kind, value, ms = await bench.decide(params)
                if kind == "answer":
                    late = f" — over {BUDGET * 1000:.0f} ms: Escouade would ask the user" if ms > BUDGET * 1000 else ""
                    bench.say(f"→ {json.dumps(value.model_dump(exclude_none=True), ensure_ascii=False)} "
                              f"({ms:.1f} ms){late}")
                else:
                    bench.say(f"→ {kind}: {value} ({ms:.1f} ms) — counts as ask")
            else:
                bench.say(f"unknown command {word!r}; type help")
    finally:
        await bench.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="escouade-plugin", description="The bench of an escouade_nb rule plugin.")
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("test", help="play the recorded decisions of a plugin folder and measure them")
    t.add_argument("folder", type=Path)
    t.add_argument("--decisions", type=Path, help="recorded decisions (default: FOLDER/decisions.jsonl)")
    d = sub.add_parser("dev", help="play decisions by hand")
    d.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.command == "test":
        return asyncio.run(run_test(args.folder, args.decisions, sys.stdout))
    return asyncio.run(run_dev(args.folder, sys.stdin, sys.stdout))


if __name__ == "__main__":
    sys.exit(main())
