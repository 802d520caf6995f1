"""The suite's one async runner and its polls: every wait is bounded by a deadline, never a
fixed number of sleeps (a test must pass on a loaded machine, and fail, not hang, when what it
waits for never comes)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio


def run(job: Awaitable[Any] | Callable[..., Awaitable[Any]], *args: Any, timeout: float = 120) -> Any:
    """Run ``job`` (a coroutine, or an async function called with ``args``) on a fresh asyncio
    loop and return its result; TimeoutError after ``timeout`` s (the test's deadline, not how
    long it takes: a passing test returns as soon as it is done). TypeError for arguments given with
    a coroutine (a timeout is given by keyword)."""
    if args and not callable(job):
        raise TypeError(f"run(coroutine, {args!r}): arguments go with an async function; timeout= by keyword")

    async def bounded() -> Any:
        with anyio.fail_after(timeout):
            return await (job(*args) if callable(job) else job)

    return anyio.run(bounded)


async def until(predicate: Callable[[], object], timeout: float = 30.0, what: str = "condition") -> None:
    """Return once ``predicate()`` is true (checked every 10 ms, the loop left free between);
    AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await anyio.sleep(0.01)


def wait_until(predicate: Callable[[], object], timeout: float = 30.0, what: str = "condition",
               every: float = 0.02) -> None:
    """:func:`until` for synchronous code: poll ``predicate()`` every ``every`` s until it is true;
    AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)
