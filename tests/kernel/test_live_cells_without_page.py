"""``notebook_cells(source="live")`` in a real kernel that no notebook page shows (a kernel
started by jupyter_client, as nbclient, nbval and VS Code start theirs): escouade_nb is
loaded, so the channel pings the pages, and none answers; the live read is a tool error
saying so in one line, and the other sources answer as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_client import Kernel, McpProcess

pytestmark = pytest.mark.kernel

FIXTURES = Path(__file__).parents[1] / "fixtures"

SETUP = """
%load_ext escouade_nb
from escouade_nb.kernel_mcp.server import KernelServer
class Owner:
    name = "kernel test"
    async def ask_run_code(self, code):
        return None
server = await KernelServer.shared()
grant = server.grant(Owner())
print("URL", server.url)
print("TOKEN", grant.token)
"""


def test_a_live_read_without_a_page_says_so_in_one_line(tmp_path):
    k = Kernel(tmp_path)
    client = None
    try:
        client = McpProcess.from_output(k.run(SETUP, timeout=120).text)
        call = client.call
        live = call("notebook_cells", source="live")
        assert live["is_error"], live
        text = live["text"].strip()
        assert "\n" not in text, text
        assert 'source="live" needs this notebook open in JupyterLab 4 or Notebook 7' in text, text
        assert "no such page answered" in text and 'source="file"' in text, text
        history = call("notebook_cells", source="history")
        assert not history["is_error"] and history["text"].startswith("History: "), history
        # the kernel kept no page, and no answer came from anywhere
        out = k.run("from escouade_nb.widgets import notebook_pages as _np\n"
                    "print('PAGES', len(_np._pages.pages), _np._pages.strays)")
        assert "PAGES 0 0" in out.text, out.text
    finally:
        if client is not None:
            client.close()
        k.shutdown()


HELD = """
import threading, escouade_nb.magics as _m
_gate = threading.Event()
_preload = _m._preload
def _held():  # %load_ext's thread held before it loads anything: the channel to the pages is not there yet
    _gate.wait(120)
    _preload()
_m._preload = _held
""" + SETUP + """
from escouade_nb.core import notebook as _nbc
_waiting = threading.Event()
_wait = _nbc.pages_coming_wait()
def _counted():  # a read waits for the channel: said, then waited
    _waiting.set()
    _wait()
_nbc.pages_coming(_counted)
"""


def test_a_live_read_while_load_ext_still_loads_waits_for_the_channel(tmp_path):
    """A live read that comes while ``%load_ext``'s thread still loads the channel to the pages (~2 s, here held)
    waits for it, then answers as the channel does — never that escouade_nb is not loaded (it is)."""
    k = Kernel(tmp_path)
    client = None
    try:
        client = McpProcess.from_output(k.run(HELD, timeout=120).text)
        client.send("notebook_cells", source="live")
        out = k.run("import asyncio\nprint('WAITING', await asyncio.to_thread(_waiting.wait, 60))", timeout=90)
        assert "WAITING True" in out.text, out.text  # the read waits for the channel the thread loads
        k.run("_gate.set()")  # the thread goes on: the channel comes, the read goes through it
        live = client.answer()
        assert live["is_error"], live
        assert 'source="live" needs this notebook open in JupyterLab 4 or Notebook 7' in live["text"], live
        assert "needs escouade_nb loaded" not in live["text"], live
    finally:
        if client is not None:
            client.close()
        k.shutdown()
