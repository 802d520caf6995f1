"""``%load_ext``'s worker thread imports beside the kernel's own parses (issue 37's thread, CPython gh-106905).

Seen failing before ``_threads.collector_paused``: on CPython 3.11.7 the main thread's ``ast.parse``
(IPython compiling a cell) failed with ``SystemError: AST constructor recursion depth mismatch``
within the thread's first imports, three runs out of three.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import threading

from escouade_nb._threads import collector_paused

# A fresh interpreter (nothing imported yet), a collector callback that runs Python code (as a finalizer
# may: the moment another thread gets in), %load_ext's preload in a thread, the main thread parsing a module
# the whole time, as IPython parses each cell.
RACE = r"""
import ast, gc, pathlib, random, sys, threading
def callback(phase, info):
    sorted(str(random.random()) for _ in range(50))
gc.callbacks.append(callback)
source = pathlib.Path(ast.__file__).read_text()
from escouade_nb import magics
failures = []
def preload():
    try:
        magics._preload()
    except SystemError as error:
        failures.append(f"thread: {error}")
thread = threading.Thread(target=preload)
thread.start()
parses = 0
while thread.is_alive() and not failures:
    try:
        ast.parse(source)
        parses += 1
    except SystemError as error:
        failures.append(f"main: {error}")
thread.join()
print(parses, failures)
sys.exit(1 if failures or not parses else 0)
"""


def test_load_ext_thread_imports_beside_the_kernels_own_parses() -> None:
    done = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def test_the_collector_is_off_while_any_block_runs_and_back_as_it_was() -> None:
    assert gc.isenabled()
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            release.wait(60)

    thread = threading.Thread(target=other)
    with collector_paused():
        thread.start()
        assert inside.wait(60)
        assert not gc.isenabled()
    assert not gc.isenabled(), "the other thread's block still runs"
    release.set()
    thread.join(60)
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled(), "a collector the user turned off stays off"
    finally:
        gc.enable()
