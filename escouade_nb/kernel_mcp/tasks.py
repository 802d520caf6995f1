"""Cell runs as tasks the agent can wait on: a ``run_code`` (or ``execute_cell``) called with
``wait`` that is still running then answers at once with a ``task_id``; ``task_status`` and
``task_cancel`` let the agent that started it come back (:class:`Tasks`, one per server).

A task belongs to the grant whose call started it: another grant's ``task_status`` or
``task_cancel`` of it is refused with the same words as an unknown id (nothing tells it the
task exists). A grant revoked (its agent closed) ends its tasks (their runs interrupted: status
``ended``); a kernel restart ends them all with the process (the new server knows none, and
says that a restart ends tasks).

MCP's own ``tasks`` (spec 2025-11-25: ``tasks/get``, ``tasks/result``, ``tasks/cancel``) is not
served by the ``mcp`` SDK pinned here (2.3 has the types and an extension hook, no server side),
and the released agents do not ask for it: plain tools work with every client.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .run import Run, run_result_text
from .tools import ToolFailure

KEPT_ENDED = 50
"""Ended tasks each grant keeps (their result readable again), the oldest dropped first."""
CANCEL_WAIT = 10.0
"""Seconds ``task_cancel`` waits for the run to stop before answering (it answers anyway)."""

BY_USER = "the user (Interrupt in the agent's view)"
"""Who stopped a task whose Interrupt the user pressed in the agent's view (``cancelled_by``; the run's
``KeyboardInterrupt`` says "interrupted by" it): its end is ``interrupted``, not ``cancelled``."""

STATES = ("running", "done", "interrupted", "cancelled", "ended")
"""A task's status: ``running``; ``done`` (the run ended by itself, with or without an error);
``interrupted`` (Jupyter's Interrupt, the user's Interrupt in the agent's view, or the request's own
cancellation); ``cancelled`` (the agent's ``task_cancel``); ``ended`` (its agent's session closed)."""


@dataclass(eq=False)
class RunTask:
    """One run the agent left running: ``tool`` (``run_code`` or ``execute_cell``), its
    ``arguments``, the ``job`` (the asyncio task answering ``(text, status)``), ``run`` (a
    ``run_code``'s captures and interrupt; None for a cell run by the page), ``grant`` (whose)."""

    task_id: str
    tool: str
    arguments: dict[str, Any]
    grant: Any
    job: asyncio.Task
    run: Run | None = None
    started: float = field(default_factory=time.monotonic)
    ended_at: float | None = None
    state: str = "running"
    text: str = ""
    ran: str = "error"  # how the run itself ended: "ok", or "error" (it raised, was interrupted, failed)
    seen: tuple[int, int] = (0, 0)  # stdout, stderr characters already answered
    cancelled_by: str | None = None

    def since(self) -> tuple[str, str]:
        """stdout and stderr written since the last answer that gave them (and marks them given)."""
        if self.run is None:
            return "", ""
        out, err = self.run.out, self.run.err
        got = out.text(self.seen[0]) if out.size > self.seen[0] else "", \
            err.text(self.seen[1]) if err.size > self.seen[1] else ""
        self.seen = (out.size, err.size)
        return got

    def stop(self, by: str) -> bool:
        """Interrupt the run, ``by`` whom (kept as ``cancelled_by``: the agent's ``task_cancel``, or
        :data:`BY_USER`); False when it is not running, or is a cell run by the page (no run of ours)."""
        if self.state != "running" or self.run is None or self.cancelled_by is not None:
            return self.state == "running" and self.cancelled_by is not None
        self.cancelled_by = by
        self.run.interrupt(by)
        return True

    def structured(self) -> dict[str, Any]:
        """``{"task_id", "tool", "status", "seconds"}`` (seconds it ran: until now, or until its end)."""
        end = self.ended_at if self.ended_at is not None else time.monotonic()
        return {"task_id": self.task_id, "tool": self.tool, "status": self.state,
                "seconds": round(end - self.started, 1)}


class Tasks:
    """The tasks of one server (loop-thread only). ``ended(task)`` is called once per task when
    its run ends (the owner is told there)."""

    def __init__(self, ended: Callable[[RunTask], None]) -> None:
        self._tasks: dict[str, RunTask] = {}
        self._ended = ended
        self._gone: list[Any] = []  # grants ended with tasks still running (forgotten once those end)

    def __len__(self) -> int:
        return sum(1 for t in self._tasks.values() if t.state == "running")

    def add(self, tool: str, arguments: dict[str, Any], grant: Any, job: asyncio.Task, run: Run | None,
            started: float | None = None) -> RunTask:
        """A task of ``grant`` for ``job`` (its run began at ``started``, ``time.monotonic()``; now if None)."""
        task = RunTask(f"task-{secrets.token_hex(8)}", tool, dict(arguments), grant, job, run)
        if started is not None:
            task.started = started
        self._tasks[task.task_id] = task
        job.add_done_callback(lambda _job: self._finish(task))
        return task

    def _finish(self, task: RunTask) -> None:
        task.ended_at = time.monotonic()
        job = task.job
        if job.cancelled():
            task.text = task.text or "the run was stopped before it ended"
            task.state = "ended" if task.state == "running" else task.state
        else:
            exc = job.exception()
            if exc is not None:
                task.text = str(exc) if isinstance(exc, ToolFailure) else f"{type(exc).__name__}: {exc}"
                task.state = task.state if task.state != "running" else "done"
            else:
                answer = job.result()
                task.text = answer[0] if isinstance(answer, tuple) else str(getattr(answer, "text", answer))
                task.ran = str(answer[1] if isinstance(answer, tuple) else getattr(answer, "status", "ok"))
                images = getattr(answer, "images", None)
                if images:
                    task.text += f"\n({len(images)} image output{'s' if len(images) > 1 else ''}: read them with " \
                                 "notebook_cells(source=\"live\"))"
                if task.state == "running":
                    interrupted = task.run.interrupted if task.run is not None else None
                    if interrupted is None:
                        task.state = "done"
                    elif task.cancelled_by:
                        task.state = "interrupted" if task.cancelled_by == BY_USER else "cancelled"
                    else:
                        task.state = "ended" if interrupted.startswith("the agent's session") else "interrupted"
        self._ended(task)
        if any(g is task.grant for g in self._gone):  # its session is over: nobody can ask for it again
            self._tasks.pop(task.task_id, None)
            if not self.of(task.grant):
                self._gone = [g for g in self._gone if g is not task.grant]
            return
        ended = [t for t in self._tasks.values() if t.grant is task.grant and t.state != "running"]
        for old in ended[:-KEPT_ENDED]:
            self._tasks.pop(old.task_id, None)

    def get(self, task_id: str, grant: Any) -> RunTask:
        """The caller's task ``task_id``; :class:`ToolFailure` ``refused`` when there is none of
        this grant (another agent's task gets the same words as an unknown one)."""
        task = self._tasks.get(task_id) if isinstance(task_id, str) else None
        if task is None or task.grant is not grant:
            raise ToolFailure(f"no task {str(task_id)[:80]!r} of this agent in this kernel (task ids come from "
                              "run_code or execute_cell called with wait; a kernel restart or the end of the "
                              "agent's session ends its tasks)", "refused")
        return task

    def of(self, grant: Any) -> list[RunTask]:
        return [t for t in self._tasks.values() if t.grant is grant]

    def end_grant(self, grant: Any) -> None:
        """The grant ended (its agent closed): its running tasks are interrupted (status
        ``ended``) and its tasks forgotten once they end."""
        for task in self.of(grant):
            if task.state == "running":
                if task.run is not None:
                    task.run.interrupt("the agent's session closing")
                else:
                    task.job.cancel()
            else:
                self._tasks.pop(task.task_id, None)
        if self.of(grant):
            self._gone.append(grant)

    def close(self) -> None:
        """The server stops: every running task is interrupted."""
        for task in list(self._tasks.values()):
            if task.state == "running":
                if task.run is not None:
                    task.run.interrupt("the agent's session closing")
                else:
                    task.job.cancel()


def status_text(task: RunTask, out: str, err: str) -> str:
    """What ``task_status``/``task_cancel`` answer the model: the task's status line, the
    output since the last answer, and once ended its result."""
    seconds = task.structured()["seconds"]
    if task.state == "running":
        head = f"task {task.task_id} ({task.tool}): running for {seconds:.0f} s"
        tail = "call task_status again to see more (wait=N waits up to N s for its end), or task_cancel to stop it"
    else:
        why = {"done": "done", "interrupted": f"interrupted by {BY_USER}" if task.cancelled_by == BY_USER
               else "interrupted (Jupyter's Interrupt)",
               "cancelled": f"cancelled by {task.cancelled_by or 'the agent'}",
               "ended": "ended: its agent's session closed"}[task.state]
        head = f"task {task.task_id} ({task.tool}): {why}"
        tail = ""
    parts = [head]
    if task.state == "running":
        since = run_result_text({"stdout": out, "stderr": err}) if out or err else "(no new output)"
        parts.append("output since the last look:\n" + since)
    else:
        parts.append("result:\n" + (task.text or "(no output)"))
    if tail:
        parts.append(tail)
    return "\n".join(parts)
