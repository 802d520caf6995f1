"""``%escouade update NAME``: show a harness's update command; run it once confirmed.

The view only shows: the run itself (a shell line in its own process group, bounded in
time, killed on cancel) is :class:`~escouade_nb.engine.harness_update.UpdateJob`, which
the view owns: closing the view cancels a run still going.
"""

from __future__ import annotations

import asyncio

import ipywidgets as w

from ..engine.harness_update import UPDATE_TIMEOUT, UpdateJob, UpdateResult
from ..manifest import HarnessRef
from .render import esc, pre
from .views import FullText, Releasing, on_loop


class UpdateView(FullText, Releasing, w.VBox):
    """The update command, a Run button, then its output and the version read after.
    ``timeout`` bounds the run (seconds); ``result`` is its
    :class:`~escouade_nb.engine.harness_update.UpdateResult` once done."""

    def __init__(self, ref: HarnessRef, before: str | None, *, timeout: float = UPDATE_TIMEOUT) -> None:
        super().__init__(layout=w.Layout(border="1px solid var(--jp-border-color2, #d0d7de)", padding="6px"))
        self.ref = ref
        self.before = before
        self.timeout = timeout
        self.result: UpdateResult | None = None
        self.job: UpdateJob | None = None
        self.head = w.HTML()
        self._draw_head()
        self.run_button = w.Button(description="Run it", button_style="warning", layout=w.Layout(width="auto"))
        self.run_button.on_click(on_loop(lambda _b: self.start()))
        self.out = w.HTML()
        self.children = [self.head, self.run_button, self.out]

    def _draw_head(self) -> None:
        self.head.value = (f"<b>{esc(self.ref.harness.display_name)}</b> {esc(self.before or 'version unknown')} — "
                           f"update with:{pre(self.ref.harness.update_command)}")

    def set_before(self, version: str | None) -> None:
        """The version installed now, once read (the view shows it)."""
        self.before = version
        if not self.closed:
            self._draw_head()

    def start(self) -> asyncio.Task:
        """Run the update (once); returns the task that runs it."""
        if self.job is None:
            self.run_button.disabled = True
            self.out.value = "<i>running…</i>"
            self.job = UpdateJob(self.ref, self.timeout)
            self.job.add_done_callback(self._show)
        return self.job.task

    def _show(self, job: UpdateJob) -> None:
        self.result = result = job.result
        if result is None or self.closed:
            return
        self.out.value = (f"<div>{esc(result.verdict)}; version now: <b>{esc(result.version or 'unknown')}</b></div>"
                          f"{pre(result.output[-4000:])}")

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
