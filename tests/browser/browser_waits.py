"""The browser suite's one wait: poll a condition until it holds, bounded by a monotonic
deadline (never a fixed number of sleeps). Import it by name (``from browser_waits import until``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

POLL = 0.1  # seconds between two looks


def until(check: Callable[[], T], what: str, timeout: float = 30) -> T:
    """Call ``check()`` until it returns a truthy value and return that value.

    ``timeout`` is in seconds, counted on the monotonic clock from the call. Raises
    ``AssertionError`` naming ``what`` and the last value seen when the deadline passes
    (``check`` itself is always called at least once, and once more at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what} (last: {value!r})")
        time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))


FRAMES = """n => new Promise(done => { const next = k => k ? requestAnimationFrame(() => next(k - 1)) : done(); next(n); })"""


def frames(page, n: int = 2) -> None:
    """Return once ``page`` has drawn ``n`` more animation frames: whatever it had to lay
    out, apply or reveal on its next ``n`` frames is done (the views apply their messages
    once a frame and reveal streamed text over :data:`REVEAL` frames). Raises playwright's
    ``TimeoutError`` past the page's default timeout."""
    page.evaluate(FRAMES, n)


REVEAL = 30  # frames: more than the views' REVEAL_FRAMES (24), over which streamed text is revealed


def steady(page, measure: Callable[[], T], what: str, n: int = REVEAL, timeout: float = 30) -> T:
    """Measure until two measures ``n`` animation frames of ``page`` apart are equal, and
    return that value: the page has settled (a stream revealed, a layout done). ``timeout``
    in seconds; raises ``AssertionError`` naming ``what`` past it."""
    last: list = [measure()]

    def same() -> bool:
        frames(page, n)
        now = measure()
        if now == last[0]:
            return True
        last[0] = now
        return False

    until(same, f"{what} steady over {n} frames", timeout)
    return last[0]
