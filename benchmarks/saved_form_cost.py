"""What a view's saved form costs (issue 34, finding 5): the bytes one more one-line turn sends to the page on a
long conversation against a short one, and the saved ``.ipynb`` against its conversation's text — in real
kernels of this checkout, each figure beside its baseline of the same run.

    python benchmarks/saved_form_cost.py                    # a 1 MB thread (10,000 chunks of 100 characters)
    python benchmarks/saved_form_cost.py --chunks 2000 --json out.json

1. Bytes per turn. Four fresh kernels: a short thread (one short prompt) and a long one (``chunks N of 100``: N ×
   100 characters of reply), each with the hello of a page with escouade_nb's extension (``ext``: a ``comm_open``
   on ``escouade_nb.notebook``, the page's message) and without (``plain``: VS Code, Colab, nbclient). Then one
   more one-line turn, counted from its send to the saved form's last redraw: every ``comm_open``, ``comm_msg``,
   ``display_data`` and ``update_display_data`` on iopub (their packed content), whatever their parent. The short
   thread is the long one's baseline.
2. The saved notebook: ``%escouade fake`` and the long thread run by nbclient (``tools/finished_forms.py``, as
   ``scripts/run-notebooks.py`` runs the shipped notebooks), written by nbformat without widget state, as
   JupyterLab saves; its size against the conversation's text (the prompt and the reply, UTF-8).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from kernel_client import Kernel  # noqa: E402

COUNTED = ("comm_open", "comm_msg", "display_data", "update_display_data")
SETTLED = """
import asyncio
from escouade_nb.widgets import agent_view
for _ in range(6000):  # the turn over, the saved form's redraw (COMPANION_WAIT after it) gone
    views = list(agent_view._views.get(a, ()))
    if a.status == 'idle' and a.turns.current is None and views and all(v._companion_due is None for v in views):
        break
    await asyncio.sleep(0.05)
"""


def bytes_of(k: Kernel, code: str, timeout: float = 600) -> int:
    kc = k.kc
    msg_id = kc.execute(code)
    total, deadline = 0, time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["msg_type"] in COUNTED:
            total += len(kc.session.pack(msg["content"]))
        if (msg["msg_type"] == "status" and msg["parent_header"].get("msg_id") == msg_id
                and msg["content"]["execution_state"] == "idle"):
            return total


def one_more_turn(scratch: Path, hello: bool, chunks: int) -> int:
    ws = Path(tempfile.mkdtemp(dir=scratch))
    k = Kernel(ws)
    try:
        k.run("%load_ext escouade_nb")
        if hello:
            kc = k.kc
            kc.shell_channel.send(kc.session.msg("comm_open", {
                "comm_id": uuid.uuid4().hex, "target_name": "escouade_nb.notebook",
                "data": {"v": 1, "client": "bench-page",
                         "hello": {"path": "bench.ipynb", "panel": "p1", "forms": {}}}}))
        k.run(f"a = %escouade fake --cwd {ws}\nawait a.ready()")
        k.run(f"_ = await a.send('chunks {chunks} of 100')" if chunks else "_ = await a.send('a short one')",
              timeout=600)
        bytes_of(k, SETTLED)
        return bytes_of(k, "_ = await a.send('one more line')\n" + SETTLED)
    finally:
        k.run("await a.close()", allow_error=True)
        k.shutdown()


def saved_notebook(scratch: Path, chunks: int) -> tuple[int, int]:
    """(bytes of the saved .ipynb, bytes of its conversation's text)."""
    import nbformat

    from escouade_nb.tools.finished_forms import FinishedForms

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(f"%load_ext escouade_nb\na = %escouade fake --cwd {scratch}\n"
                                          "await a.ready()"),
                nbformat.v4.new_code_cell(f"r = await a.send('chunks {chunks} of 100')\n" + SETTLED
                                          + "\nprint(len(r.text.encode()))")]
    FinishedForms(nb, timeout=900, kernel_name="python3", store_widget_state=False,
                  resources={"metadata": {"path": str(scratch)}}).execute()
    path = scratch / "saved.ipynb"
    nbformat.write(nb, path)
    reply = int("".join(o.get("text", "") for o in nb.cells[1].outputs if o.get("output_type") == "stream").split()[-1])
    return path.stat().st_size, reply + len(f"chunks {chunks} of 100")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=10_000, help="chunks of 100 characters in the long thread")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="escouade-bench-saved-") as tmp:
        scratch = Path(tmp)
        res = {f"{label}_{size}": one_more_turn(scratch, hello, chunks)
               for label, hello in (("ext", True), ("plain", False))
               for size, chunks in (("short", 0), ("long", args.chunks))}
        res["ipynb"], res["conversation"] = saved_notebook(scratch, args.chunks)
    res["chunks"] = args.chunks
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    kb = args.chunks * 100 / 1e6
    for label, what in (("ext", "extension present"), ("plain", "without (display updates)")):
        print(f"one more turn, {what}: {res[label + '_long']:,} B after a {kb:g} MB thread, "
              f"{res[label + '_short']:,} B after a short one = {res[label + '_long'] / res[label + '_short']:.2f}×")
    print(f"saved .ipynb: {res['ipynb']:,} B for {res['conversation']:,} B of conversation = "
          f"{res['ipynb'] / res['conversation']:.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
