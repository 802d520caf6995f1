"""``%escouade install`` in a real kernel, without the network: the listing of the shipped
registry copy; a binary-only entry refused in one line; an install whose npm (a stand-in on
the kernel's PATH, tests/fixtures/fake_npm.py, printing its lines over time) streams into the
cell's output while it runs and ends with what was installed, its version and where; the
harness found by ``%escouade`` at once."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from kernel_client import kernel_with_env

pytestmark = pytest.mark.kernel

FAKE_NPM = Path(__file__).resolve().parents[1] / "fixtures" / "fake_npm.py"


def test_install_lists_refuses_and_streams_an_install_into_the_cell(tmp_path):
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_NPM))} \"$@\"\n")
    npm.chmod(0o755)
    agents = tmp_path / "agents"
    agents.mkdir()
    tool = {"id": "tool", "name": "Tool", "version": "1.0.0", "description": "A tool agent.",
            "distribution": {"npx": {"package": "@scope/tool@1.0.0", "args": ["--acp"]}}}
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_NPM_LOG": str(tmp_path / "npm.log"),
           "FAKE_NPM_PAUSE": "1", "ESCOUADE_NB_AGENTS_DIR": str(agents),
           "ESCOUADE_NB_PLUGINS_DIR": str(tmp_path / "plugins")}
    k = kernel_with_env(tmp_path, env)
    try:
        k.run("%load_ext escouade_nb", timeout=120)
        k.run("%escouade install")
        got = k.drain_iopub(60, until=lambda m: m["msg_type"] == "update_display_data")
        (listing,) = [m["content"]["data"]["text/plain"] for m in got.messages if m["msg_type"] == "update_display_data"]
        assert listing.startswith("ACP registry (shipped copy: "), listing
        assert "  claude-code-acp  0.16.0    npm @zed-industries/claude-code-acp@0.16.0" in listing
        assert "  codex-acp        0.9.2     binary archives only: not installed by escouade_nb" in listing

        k.run("%escouade install codex-acp")
        got = k.drain_iopub(60, until=lambda m: m["msg_type"] == "update_display_data"
                            and "escouade:" in m["content"]["data"].get("text/plain", ""))
        refused = got.messages[-1]["content"]["data"]["text/plain"]
        assert refused.startswith("escouade: registry entry 'codex-acp': distribution: only binary"), refused
        assert "\n" not in refused

        # the per-user cached copy is the one read: the stand-in npm installs from it
        (agents / "registry.json").write_text(json.dumps({"version": "1.0.0", "agents": [tool], "extensions": []}))
        out = k.run("%escouade install tool")
        assert "installing tool from the ACP registry…" in out.text
        got = k.drain_iopub(120, until=lambda m: m["msg_type"] == "update_display_data"
                            and m["content"]["data"].get("text/plain", "").startswith("installed "))
        shown = [m["content"]["data"]["text/plain"] for m in got.messages if m["msg_type"] == "update_display_data"]
        running, final = shown[:-1], shown[-1]
        assert running and all(s.startswith("installing tool") and "npm http fetch" in s for s in running), shown
        folder = next((agents / "tool").glob("1.0.0-*"))
        assert final.startswith(f"installed Tool 1.0.0 (npx @scope/tool@1.0.0) in {folder} in "), final
        assert final.split("\n")[0].endswith("start it with %escouade tool") and "added 1 package" in final
        html = got.messages[-1]["content"]["data"]["text/html"]
        assert "installed Tool 1.0.0" in html and "<pre" in html

        out = k.run("%escouade")
        assert "tool" in out.text and str(agents / "bin" / "tool-acp") in out.text, out.text
    finally:
        k.shutdown()
