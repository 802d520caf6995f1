"""``notebook_cells(source="live")`` in a real kernel that no notebook page shows (a kernel
started by jupyter_client, as nbclient, nbval and VS Code start theirs): escouade_nb is
loaded, so the channel pings the pages, and none answers; the live read is a tool error
saying so in one line, and the other sources answer as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernel_client import Kernel

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
        out = k.run(SETUP, timeout=120)
        lines = dict(line.split(" ", 1) for line in out.text.splitlines() if line[:4] in ("URL ", "TOKE"))
        client = subprocess.Popen([sys.executable, str(FIXTURES / "mcp_call.py"), lines["URL"]],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "ESCOUADE_MCP_TOKEN": lines["TOKEN"]})
        assert json.loads(client.stdout.readline()) == {"ready": True}

        def call(tool: str, **arguments: Any) -> dict:
            client.stdin.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")
            client.stdin.flush()
            return json.loads(client.stdout.readline())

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
            client.stdin.close()
            client.wait(10)
        k.shutdown()
