"""``%escouade connect`` in a real kernel, against a real ``escouade-acp-serve`` (started here)
serving the shipped fake agent: the view's head says where the agent runs (``at HOST:PORT``,
not the token's file nor the token), the kernel's tools are offered over the connection, a prompt is
answered; after the server restarts, the view's feed says the connection was lost and then
"Reconnected"; a token file readable by others is refused in one line, no traceback."""

from __future__ import annotations

import json

import pytest
from acp_clients import AGENT_CMD
from acp_servers import acp_server
from kernel_client import Kernel, wait_for

pytestmark = pytest.mark.kernel


def test_connect_shows_where_and_reconnects(tmp_path):
    with acp_server(tmp_path, AGENT_CMD) as served:
        token = served.token_file.read_text().strip()
        loose = tmp_path / "loose"
        loose.write_text(token)
        loose.chmod(0o644)
        kernel = Kernel(tmp_path)
        try:
            kernel.run("%load_ext escouade_nb\nimport asyncio, json\nfrom escouade_nb.widgets import views_of")
            bad = kernel.run(f"%escouade connect far {served.url} --token-file {loose}")
            assert bad.error is None and "mode 0644: make it 0600" in bad.text, bad.text
            out = kernel.run(f"a = %escouade connect far {served.url} --token-file {served.token_file} "
                             f"--harness fake\nawait a.ready()\nview = views_of(a)[0]\n"
                             "r = await a.send('hello over the wire')\n"
                             "print('RESULT', json.dumps({'head': view.head()['where'] + repr(view), 'text': r.text,\n"
                             "  'tools': list(a.kernel_tools_state)}))", timeout=120)
            got = json.loads(out.text.split("RESULT", 1)[1])
            assert f"at 127.0.0.1:{served.port}" in got["head"], got
            assert str(served.token_file) not in got["head"] and token not in out.text
            assert "You said: hello over the wire" in got["text"]
            assert got["tools"][0] in ("offered", "connected"), got  # over the connection (the server's relay)
            assert got["tools"][1].startswith("over the agent's own ACP connection"), got
            served.restart()
            wait_for(kernel, "any(getattr(i, 'text', '').startswith('Reconnected to 127.0.0.1') "
                             "for i in a.conversation.items)", timeout=120)
            feed = kernel.run("print(repr(view))").text
            assert f"The connection to 127.0.0.1:{served.port} was lost: reconnecting." in feed, feed
            assert "Reconnected to 127.0.0.1" in feed, feed
        finally:
            kernel.run("await a.close()", allow_error=True, timeout=60)
            kernel.shutdown()
