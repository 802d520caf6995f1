"""Work of ours that runs in a worker thread of the user's kernel, made safe to run beside the kernel's own.

:func:`collector_paused` keeps Python's cyclic garbage collector off while such a thread builds
abstract syntax trees — as an import does through pydantic (its models' attribute docstrings are read
with :func:`ast.parse`) and :func:`inspect.signature` (a builtin's text signature) — and turns it back on
when the last such thread is done. CPython before 3.11.8 and 3.12.2 counts the AST constructor's
recursion in one place for all threads (CPython gh-106905): a collection inside one thread's
``ast.parse`` may run Python code (a finalizer, a ``gc.callbacks`` entry) and let another thread in,
and a second ``ast.parse`` meanwhile — IPython compiling the user's next cell — fails with
``SystemError: AST constructor recursion depth mismatch``. One ``ast.parse``, in C, lets no other thread
in unless it runs Python code, which only a collection does there: with the collector off, no two parses
interleave. The price, while such a thread works (``%load_ext``'s: about two seconds, once): a reference
cycle that becomes garbage then is freed only by a later collection — or never, when the thread freezes it
(:func:`gc.freeze`, ``magics._preload``) — and a ``gc.disable()`` of the user's meanwhile is undone.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_inside = 0
_was_enabled = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Within the block, the cyclic garbage collector is off (``gc.disable()``); the first of
    nested or concurrent blocks (any thread) turns it off, the last turns it back on if it was
    on before the first. Reference counting still frees what it frees; an explicit
    ``gc.collect()`` still runs (do not call it inside). Raises nothing of its own."""
    global _inside, _was_enabled
    with _lock:
        if _inside == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0 and _was_enabled:
                gc.enable()
