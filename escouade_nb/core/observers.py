"""One observer helper with one error policy: who listens, a token to stop listening.

``Observers.subscribe(fn)`` returns a :class:`Subscription`; calling it (or its
``close()``) removes ``fn``, once, however often it is called. ``emit(*args)`` calls
every subscriber in subscription order with a snapshot of the list, so a subscriber may
unsubscribe (itself or another) while being called. ``emit_hot(*args)`` does the same for
the subscribers made with ``hot=True`` (the default) only: the owner's commonest event,
which a subscriber made with ``hot=False`` never looks at (a streamed reply's next chunk).
A subscriber that raises is logged with the owner's name and does not stop the others:
the error policy of every observer list of escouade_nb (the ipywidgets
``CallbackDispatcher`` logs the same way).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, ParamSpec

log = logging.getLogger(__name__)

P = ParamSpec("P")


class Subscription:
    """The token of one subscription: ``sub()`` or ``sub.close()`` ends it. ``active``
    tells whether it still holds."""

    __slots__ = ("_owner", "_fn", "hot")

    def __init__(self, owner: Observers, fn: Callable, hot: bool = True) -> None:
        self._owner: Observers | None = owner
        self._fn: Callable | None = fn
        self.hot = hot

    @property
    def active(self) -> bool:
        return self._owner is not None

    def close(self) -> None:
        owner, self._owner = self._owner, None
        self._fn = None  # a closed token holds nothing alive
        if owner is not None:
            owner._remove(self)

    __call__ = close

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Observers(Generic[P]):
    """An ordered list of callbacks ``fn(*args)``; ``name`` says whose they are in logs."""

    def __init__(self, name: str = "observers") -> None:
        self.name = name
        self._subs: list[Subscription] = []
        self._hot: list[Subscription] = []  # those of _subs made with hot=True, in the same order

    def subscribe(self, fn: Callable[P, object], *, hot: bool = True) -> Subscription:
        """Call ``fn(*args)`` at each :meth:`emit`; with ``hot=False``, not at :meth:`emit_hot`."""
        sub = Subscription(self, fn, hot)
        self._subs.append(sub)
        if hot:
            self._hot.append(sub)
        return sub

    def _remove(self, sub: Subscription) -> None:
        try:
            self._subs.remove(sub)
        except ValueError:
            pass
        if sub.hot:
            try:
                self._hot.remove(sub)
            except ValueError:
                pass

    def emit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        for sub in self._subs.copy():
            fn = sub._fn
            if fn is None:  # removed by an earlier subscriber of this emit
                continue
            try:
                fn(*args, **kwargs)
            except Exception:
                log.exception("%s: a subscriber failed", self.name)

    def emit_hot(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """:meth:`emit` to the subscribers made with ``hot=True`` only (the same loop: it is on
        the path of every chunk of a streamed reply)."""
        for sub in self._hot.copy():
            fn = sub._fn
            if fn is None:
                continue
            try:
                fn(*args, **kwargs)
            except Exception:
                log.exception("%s: a subscriber failed", self.name)

    def clear(self) -> None:
        for sub in list(self._subs):
            sub.close()

    def __len__(self) -> int:
        return len(self._subs)

    def __bool__(self) -> bool:
        return bool(self._subs)
