"""Every git the package starts goes through one runner (engine/kernel_git.py), which decides
what configuration it reads: no other module spawns git by itself."""

import re
from pathlib import Path

import escouade_nb

SPAWN = re.compile(r"""(create_subprocess_exec|subprocess\.(run|Popen|call|check_output|check_call))\(\s*\[?\s*["']git["']""")


def test_no_module_but_kernel_git_spawns_git():
    root = Path(escouade_nb.__file__).parent
    spawning = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if SPAWN.search(p.read_text()))
    assert spawning == ["engine/kernel_git.py"]
