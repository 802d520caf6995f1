"""``%escouade update NAME``: show a harness's update command; run it once confirmed."""

from __future__ import annotations

import asyncio
import os

import ipywidgets as w

from ..manifest import HarnessRef, locate_program, read_version
from .render import esc, pre
from .views import FullText, on_loop


async def run_update(ref: HarnessRef) -> tuple[int, str, str | None]:
    """Run the manifest's ``updateCommand`` through the shell (it is a shell line, like
    the install commands); returns (exit code, output, version read afterwards)."""
    proc = await asyncio.create_subprocess_shell(ref.harness.update_command, stdout=asyncio.subprocess.PIPE,
                                                 stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
                                                 env=dict(os.environ), start_new_session=True)
    out, _ = await proc.communicate()
    program = locate_program(ref.harness)
    version = await asyncio.to_thread(read_version, program, ref.harness.version_args) if program else None
    return proc.returncode, out.decode("utf-8", "replace"), version


class UpdateView(FullText, w.VBox):
    """The update command, a Run button, then its output and the version read after."""

    def __init__(self, ref: HarnessRef, before: str | None) -> None:
        super().__init__(layout=w.Layout(border="1px solid #d0d7de", padding="6px"))
        self.ref = ref
        self.before = before
        self.result: tuple[int, str, str | None] | None = None
        self.head = w.HTML(f"<b>{esc(ref.harness.display_name)}</b> {esc(before or 'version unknown')} — "
                           f"update with:{pre(ref.harness.update_command)}")
        self.run_button = w.Button(description="Run it", button_style="warning", layout=w.Layout(width="auto"))
        self.run_button.on_click(on_loop(lambda _b: self.start()))
        self.out = w.HTML()
        self.children = [self.head, self.run_button, self.out]
        self._task: asyncio.Task | None = None

    def start(self) -> asyncio.Task:
        if self._task is None:
            self.run_button.disabled = True
            self.out.value = "<i>running…</i>"
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self._task

    async def _run(self) -> None:
        self.result = code, output, version = await run_update(self.ref)
        verdict = "updated" if code == 0 else f"failed (exit code {code})"
        self.out.value = (f"<div>{esc(verdict)}; version now: <b>{esc(version or 'unknown')}</b></div>"
                          f"{pre(output[-4000:])}")

    def __repr__(self) -> str:
        lines = [f"{self.ref.harness.display_name} {self.before or 'version unknown'}: update with "
                 f"`{self.ref.harness.update_command}`"]
        if self.result is not None:
            lines.append(f"exit code {self.result[0]}; version now {self.result[2] or 'unknown'}")
        return "\n".join(lines)
