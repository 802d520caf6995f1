"""What every view shares: the releasing of subscriptions, the cell that shows a view, the
owner of the tasks a click starts — and the pieces of the views still drawn with ipywidgets
(sessions, comparison, update), which subscribe to the models with tokens. The agent, turn,
squad and journal views are one anywidget model each (:mod:`.front`).

Views let go: each keeps the :class:`~escouade_nb.core.observers.Subscription` tokens of
what it listens to (:class:`Releasing`), and its ``close()`` ends them and closes every
widget below it (ipywidgets' ``Box.close()`` closes only the box, and a child left open
stays in ipywidgets' registry with the callbacks that hold the view).
"""

from __future__ import annotations

import asyncio
import weakref
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import ipywidgets as w

from ..core.observers import Subscription
from .front import on_loop

__all__ = ["on_loop", "Releasing", "FullText", "close_tree", "current_run", "shown_in_cell",
           "Tasks", "clicks"]

log = logging.getLogger(__name__)


class FullText:
    """Mixin for displayed views: their ``text/plain`` is the whole plain-text repr
    (ipywidgets cuts it at 110 characters), for nbval, nbconvert and text frontends."""

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle:
            bundle["text/plain"] = repr(self)
        return bundle


def close_tree(widget: w.Widget) -> None:
    """Close ``widget`` and every widget below it (children, layout, style). A
    :class:`Releasing` view below is closed through its own ``close()``."""
    from .front import FrontView

    if isinstance(widget, (Releasing, FrontView)):  # a view closes what is its own (not the shared Layout)
        widget.close()
        return
    for child in tuple(getattr(widget, "children", None) or ()):
        if isinstance(child, w.Widget):
            close_tree(child)
    _close_parts(widget)
    widget.close()


def _close_parts(widget: w.Widget) -> None:
    """A widget's own layout and style are widgets too (made when it opened)."""
    from .front import is_shared

    for part in ("layout", "style"):
        value = getattr(widget, part, None)
        if isinstance(value, w.Widget) and not is_shared(value):
            value.close()


class Releasing:
    """Mixin for a view (before the ipywidgets base): ``hold(token)`` keeps a
    subscription's token (a :class:`~escouade_nb.core.observers.Subscription`, or any
    call that ends one); ``close()`` ends the subscriptions, closes every widget below
    and then the view itself. Closing twice is a no-op; ``closed`` tells."""

    def hold(self, token: Subscription | Callable[[], object]) -> Subscription | Callable[[], object]:
        self.__dict__.setdefault("_held", []).append(token)
        return token

    @property
    def closed(self) -> bool:
        return self.__dict__.get("_closed", False)

    def close(self) -> None:
        if self.__dict__.get("_closed"):
            return
        self.__dict__["_closed"] = True
        for token in self.__dict__.pop("_held", ()):
            token()
        try:
            self.release()
        except Exception:  # e.g. closed by ipywidgets' __del__ after a failed __init__
            log.exception("closing %s", type(self).__name__)
        for child in tuple(getattr(self, "children", None) or ()):
            if isinstance(child, w.Widget):
                close_tree(child)
        _close_parts(self)
        super().close()

    def release(self) -> None:
        """What a view lets go of besides its tokens and children (overridden)."""


_cells: dict[str, tuple[object, list[weakref.ref]]] = {}
"""cell id -> (the run of that cell that showed them, weak references to its views)."""


def current_run() -> tuple[str | None, object]:
    """(cell id, run) of the notebook cell being run: JupyterLab and Notebook 7 send the
    cell's id in the execute request's metadata; the run is that request's ``msg_id``.
    ``(None, None)`` in a script or a frontend that does not say."""
    try:
        from IPython import get_ipython
        kernel = getattr(get_ipython(), "kernel", None)
        parent = kernel.get_parent() if kernel is not None else None
    except Exception:
        return None, None
    cell = ((parent or {}).get("metadata") or {}).get("cellId")
    if not isinstance(cell, str) or not cell:
        return None, None
    return cell, ((parent or {}).get("header") or {}).get("msg_id")


def shown_in_cell(view: Releasing, cell: str | None, run: object = None) -> None:
    """``view`` is shown by notebook cell ``cell`` in its run ``run``: when the cell runs
    again (another run; ``run`` None counts as a new one each time), the views it showed
    before are closed — their output is gone, they must not stay subscribed. A view
    closed otherwise drops out by itself (weak references)."""
    if cell is None:
        return
    before, refs = _cells.get(cell, (None, []))
    if run is None or run != before:
        for ref in refs:
            old = ref()
            if old is not None and old is not view:
                old.close()
        refs = []
    refs = [r for r in refs if r() is not None] + [weakref.ref(view)]
    _cells[cell] = (run if run is not None else object(), refs)


class Tasks:
    """The owner of tasks a view starts: kept until done (asyncio keeps only a weak
    reference to a task), an error logged, ``cancel()`` ends those still running."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task] = set()

    def start(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: a task failed", self.name, exc_info=task.exception())

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def __len__(self) -> int:
        return len(self._tasks)


clicks = Tasks("widget clicks")
"""The owner of what a click starts on an agent (restart, stop, sign in, a mode, an
option, a model): operations of the agent, not of the view, so closing the view that was
clicked does not cancel them (a restart cut in the middle would leave the agent half
started). They are kept here until done; the agent's own ``close()`` ends what they wait
for, and at kernel exit the squad kills every agent process."""
