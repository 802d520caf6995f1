"""nbclient as JupyterLab keeps a notebook: the finished forms of the views.

A view's saved form is redrawn after its cell has ended (a ``%%escouade`` turn's end, a
listing whose versions arrive later): an ``update_display_data`` whose parent is the cell
that started the task. JupyterLab applies it to the output holding that display id;
nbclient keeps only the messages of the cell it runs. :class:`FinishedForms` applies them
too, so a notebook run by it (``scripts/run-notebooks.py``, the saved-form tests) is saved
as a person saving from JupyterLab gets it. Needs nbclient (the ``test`` extra, or
JupyterLab); relies on nbclient's ``_async_poll_output_msg`` (0.10, 0.11).
"""

from __future__ import annotations

from typing import Any

from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionComplete
from nbformat import NotebookNode

__all__ = ["FinishedForms"]


class FinishedForms(NotebookClient):
    """nbclient, plus the ``update_display_data`` messages whose parent is an earlier
    cell (a view's form replaced after its cell ended): applied to the output holding that
    display id. ``late``: the indices of the cells whose outputs were updated (during the
    cell or after it: nbval compares neither)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.late: set[int] = set()

    async def _async_poll_output_msg(self, parent_msg_id: str, cell: NotebookNode,
                                     cell_index: int) -> None:  # nbclient 0.10/0.11
        assert self.kc is not None  # the cell runs: the kernel client is up
        while True:
            msg = await self.kc.iopub_channel.get_msg(timeout=None)
            display_id = (msg["content"].get("transient") or {}).get("display_id")
            if msg["header"]["msg_type"] == "update_display_data" and display_id in self._display_id_map:
                self.late.update(self._display_id_map[display_id])  # nbval never applies an update
            if msg["parent_header"].get("msg_id") == parent_msg_id:
                try:
                    self.process_message(msg, cell, cell_index)
                except CellExecutionComplete:
                    return
            elif msg["header"]["msg_type"] == "update_display_data" and display_id in self._display_id_map:
                self._update_display_id(display_id, msg)
