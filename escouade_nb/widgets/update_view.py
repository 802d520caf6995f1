"""``%escouade update NAME``: show a harness's update command; run it once confirmed — one
widget model (:class:`~.front.FrontView`, kind ``update``) drawn by ``widgets/escouade.js``.

The view only shows: the run itself (a shell line in its own process group, bounded in
time, killed on cancel) is :class:`~escouade_nb.engine.launch.harness_update.UpdateJob`, which
the view owns: closing the view cancels a run still going.

Saved form: the companion output before the widget says the command and, once the run has
ended, its outcome (the verdict, the version after it, the output's last lines) as text;
its ``text/plain`` the same. Nothing transient is saved ("running…" lives in the widget only).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..engine import UPDATE_TIMEOUT, UpdateJob, UpdateResult
from ..manifest import HarnessRef
from .front import HIDE_ORPHAN, FrontView, static_page
from .render import esc, pre
from .views import CurrentText

OUTPUT_TAIL = 4000
"""Characters of the run's output shown (its end)."""


class UpdateView(CurrentText, FrontView):
    """The update command, a Run button, then its output and the version read after.
    ``timeout`` bounds the run (seconds); ``result`` is its
    :class:`~escouade_nb.engine.launch.harness_update.UpdateResult` once done. Action ``run``
    (the button; :meth:`start` for code)."""

    def __init__(self, ref: HarnessRef, before: str | None, *, timeout: float = UPDATE_TIMEOUT) -> None:
        super().__init__(kind="update")
        self.ref = ref
        self.before = before
        self.timeout = timeout
        self.result: UpdateResult | None = None
        self.job: UpdateJob | None = None
        self.actions["run"] = lambda _m: self.start()

    def set_before(self, version: str | None) -> None:
        """The version installed now, once read (the view shows it)."""
        self.before = version
        self._changed()

    def start(self) -> asyncio.Task:
        """Run the update (once); returns the task that runs it."""
        if self.job is None:
            self.job = UpdateJob(self.ref, self.timeout)
            self.job.add_done_callback(self._show)
            self._changed()
        return self.job.task

    def _show(self, job: UpdateJob) -> None:
        self.result = job.result
        self._changed()

    def _changed(self) -> None:
        if not self.closed:
            self.push([], 0, True)
            self.update_companion(final=self.result is not None)

    # -- to the browser ---------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        r = self.result
        return {"harness": self.ref.harness.display_name, "before": self.before,
                "command": self.ref.harness.update_command,
                "running": self.job is not None and r is None, "started": self.job is not None,
                "result": None if r is None else {"verdict": r.verdict, "version": r.version, "code": r.code,
                                                   "output": r.output[-OUTPUT_TAIL:]}}

    def collect(self) -> tuple[list, bool]:
        return self.state_if_changed("up", self.state())

    # -- saved form -------------------------------------------------------------------------------
    def companion_bundle(self, final: bool = False) -> dict[str, str]:
        h = self.ref.harness
        head = (f"<div><b>{esc(h.display_name)}</b> {esc(self.before or 'version unknown')} — update with:"
                f"{pre(h.update_command or '')}</div>")
        r = self.result
        if r is None:
            body = head + ("<div class='esc-dim'>Not run here (the update runs once you press Run it while its kernel "
                           "runs).</div>")
            text = ""  # the widget's own text/plain follows
        else:
            body = head + (f"<div>{esc(r.verdict)}; version now: <b>{esc(r.version or 'unknown')}</b></div>"
                           f"{pre(r.output[-OUTPUT_TAIL:])}")
            text = repr(self)
        html = static_page(f'<div class="esc-view esc-update esc-saved">{body}</div>') + HIDE_ORPHAN
        return {"text/plain": text, "text/html": html}

    def release(self) -> None:
        if self.job is not None and not self.job.done:
            self.job.cancel()

    def __repr__(self) -> str:
        lines = [f"{self.ref.harness.display_name} {self.before or 'version unknown'}: update with "
                 f"`{self.ref.harness.update_command}`"]
        r = self.result
        if r is not None:
            head = f"exit code {r.code}" if r.code is not None else r.verdict
            lines.append(f"{head}; version now {r.version or 'unknown'}")
        return "\n".join(lines)
