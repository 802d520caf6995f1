"""The package's layers, checked on its source: no import goes up the layer order, and no
module-level import cycle exists. The order (each layer imports only those below it) has its
one home in docs/DESIGN.md ("Layers"); RANKS below is its machine form.

``escouade_nb/__init__`` is a lazy façade (its module level imports only ``_lazy``);
``tools/`` are console programs above everything; ``plugin_sdk`` runs inside every rule
plugin's process and imports only the plugin wire models, the line framing and the version.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "escouade_nb"

RANKS = {"_version": 0, "_resources": 0, "_lazy": 0, "_threads": 0, "core": 1, "manifest": 1, "wire": 2, "kernel_mcp": 2,
         "permissions": 3, "engine": 4, "widgets": 5, "magics": 6, "tools": 7, "_errors": 0}
PLUGIN_SDK_MAY_IMPORT = {"escouade_nb.permissions.protocol", "escouade_nb.wire.framing", "escouade_nb._version",
                         "escouade_nb._lazy",
                         "escouade_nb", "escouade_nb.permissions", "escouade_nb.wire"}


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def imports(path: Path, root: Path = PACKAGE) -> list[tuple[str, bool]]:
    """(imported module, at module level and not under TYPE_CHECKING) of a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    me = module_name(path, root)
    package = me if is_package(path) else me.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, False)
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for sub in child.body:
                    visit_one(sub, False)
                for sub in child.orelse:
                    visit_one(sub, top)
            else:
                visit_one(child, top)

    def visit_one(node: ast.AST, top: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((a.name, top) for a in node.names if a.name.startswith("escouade_nb"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("escouade_nb"):
                for a in node.names:  # from PACKAGE import x: x may be a module of it (from ..engine import agent)
                    sub = f"{target}.{a.name}"
                    where = root.parent / sub.replace(".", "/")
                    found.append((sub if where.with_suffix(".py").exists() or where.is_dir() else target, top))
        else:
            visit(node, top)

    visit(tree, True)
    return found


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "plugins" not in p.relative_to(PACKAGE).parts[:1])


def test_every_module_belongs_to_a_layer():
    loose = [module_name(p) for p in sources()
             if layer(module_name(p)) not in RANKS and module_name(p) not in ("escouade_nb", "escouade_nb.plugin_sdk")]
    assert loose == [], "modules outside the layers (give them one, and say so in DESIGN.md)"


def test_no_import_goes_up_the_layer_order():
    wrong = []
    for path in sources():
        me = module_name(path)
        for target, top in imports(path):
            if me == "escouade_nb.plugin_sdk":
                if target not in PLUGIN_SDK_MAY_IMPORT:
                    wrong.append(f"{me} -> {target} (plugin_sdk stays standalone)")
                continue
            if me == "escouade_nb":
                if top and target != "escouade_nb._lazy":
                    wrong.append(f"{me} -> {target} at import time (the package façade is lazy)")
                continue
            mine, theirs = layer(me), layer(target)
            if theirs is None or mine is None or theirs == "plugin_sdk":
                continue
            if mine != theirs and RANKS[theirs] >= RANKS[mine]:
                wrong.append(f"{me} -> {target}")
    assert wrong == []


def test_no_module_level_import_cycle():
    graph: dict[str, set[str]] = {}
    for path in sources():
        graph[module_name(path)] = {t for t, top in imports(path) if top}
    # importing a.b.c runs a/__init__ and a/b/__init__ first
    for name in list(graph):
        parts = name.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            if parent in graph and parent != name:
                graph[name].add(parent)
    cycles, state = [], {}

    def dfs(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                dfs(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            dfs(node, [node])
    # a package importing its own submodules (its __init__ re-exports) is not a cycle of layers
    real = [c for c in cycles if not all(step.startswith(c.split(" -> ")[0]) for step in c.split(" -> "))]
    assert real == []


def test_the_checker_sees_a_bad_import(tmp_path):
    """The checks above can fail: a core module importing the engine, lazily or not, is seen."""
    probe = tmp_path / "escouade_nb" / "core" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("from ..engine.agent import Agent\n\ndef f():\n    from .. import magics\n")
    (tmp_path / "escouade_nb" / "magics.py").write_text("")
    root = tmp_path / "escouade_nb"
    assert imports(probe, root) == [("escouade_nb.engine.agent", True), ("escouade_nb.magics", False)]
    assert RANKS[layer("escouade_nb.engine.agent")] > RANKS[layer(module_name(probe, root))]


def test_importing_the_package_loads_no_engine():
    """``import escouade_nb`` loads neither the ACP SDK, anyio, ipywidgets nor the engine;
    the first use of a public name does."""
    import subprocess
    import sys

    code = ("import sys, escouade_nb; heavy = lambda: sorted(m for m in sys.modules if m.split('.')[0] in "
            "('acp', 'anyio', 'ipywidgets', 'IPython', 'pydantic') or m.startswith('escouade_nb.') "
            "and m != 'escouade_nb._lazy'); "
            "print(heavy()); escouade_nb.Agent; print('acp' in sys.modules, escouade_nb.__version__ != '')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    first, second = out.stdout.splitlines()
    assert first == "[]" and second == "True True"


def test_the_engines_face_is_lazy():
    """``import escouade_nb.engine`` (the face the views and magics import) loads none of its modules; the
    first use of a name loads the module that has it."""
    import subprocess
    import sys

    code = ("import sys, escouade_nb.engine as e; inner = lambda: sorted(m for m in sys.modules "
            "if m.startswith('escouade_nb.engine.')); print(inner()); e.Squad; "
            "print('escouade_nb.engine.squad' in inner())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines() == ["[]", "True"]


def test_no_anyio_worker_threads_in_the_product():
    """AnyIO's worker threads are not daemons and idle 10 s before they end: a kernel that
    used one waits for it at exit, gets killed by its manager first, and its atexit
    handlers — the ones that kill the agents' process groups — never run (seen: an agent
    left behind after a kernel shutdown). The product runs blocking work with
    ``asyncio.to_thread`` (the loop's executor, joined at exit)."""
    offenders = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                 if "anyio.to_thread" in p.read_text(encoding="utf-8")]
    assert offenders == [], offenders


def _sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of ``graph`` (its strongly connected sets of two or more nodes)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def file_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package modules it imports, EVERY import counted (function-level and
    under TYPE_CHECKING too); a package's own ``__init__`` is not an edge of its modules."""
    paths = sorted(p for p in root.rglob("*.py"))
    graph: dict[str, set[str]] = {module_name(p, root): set() for p in paths}
    for path in paths:
        me = module_name(path, root)
        graph[me] = {t for t, _top in imports(path, root) if t != me and t in graph and not me.startswith(t + ".")}
    return graph


def test_no_circle_of_files_when_every_import_counts():
    assert _sccs(file_graph()) == []


def test_only_agent_and_squad_import_the_agent_facade():
    """The engine's parts take the agent's state through ``engine/interfaces.py``'s
    Protocols; only ``engine/squad.py`` (which makes agents) imports ``engine/agent.py``."""
    graph = file_graph()
    engine = [m for m in graph if m.startswith("escouade_nb.engine.")]
    wrong = [m for m in engine if "escouade_nb.engine.agent" in graph[m]
             and m not in ("escouade_nb.engine.agent", "escouade_nb.engine.squad")]
    assert wrong == []


def test_the_circle_and_facade_checks_can_fail(tmp_path):
    """A part importing the façade under TYPE_CHECKING, and two modules importing each other
    in functions, are seen."""
    engine = tmp_path / "escouade_nb" / "engine"
    engine.mkdir(parents=True)
    (engine / "agent.py").write_text("from . import cards\n")
    (engine / "cards.py").write_text("from typing import TYPE_CHECKING\n"
                                     "if TYPE_CHECKING:\n    from .agent import Agent\n")
    (engine / "a.py").write_text("def f():\n    from . import b\n")
    (engine / "b.py").write_text("def g():\n    from .a import f\n")
    graph = file_graph(tmp_path / "escouade_nb")
    assert "escouade_nb.engine.agent" in graph["escouade_nb.engine.cards"]
    assert sorted(_sccs(graph)) == [["escouade_nb.engine.a", "escouade_nb.engine.b"],
                                    ["escouade_nb.engine.agent", "escouade_nb.engine.cards"]]


def test_the_checks_see_a_module_imported_from_its_package(tmp_path):
    """``from ..engine import agent`` (a module named from its package, not the package's
    ``__init__``) is an import of that module, for the façade rule and the circle check."""
    engine = tmp_path / "escouade_nb" / "engine"
    engine.mkdir(parents=True)
    (engine / "__init__.py").write_text("")
    (engine / "agent.py").write_text("from escouade_nb.engine import cards\n")
    (engine / "cards.py").write_text("def f():\n    from ..engine import agent\n")
    graph = file_graph(tmp_path / "escouade_nb")
    assert graph["escouade_nb.engine.cards"] == {"escouade_nb.engine.agent"}
    assert _sccs(graph) == [["escouade_nb.engine.agent", "escouade_nb.engine.cards"]]


# -- the rooms (docs/DESIGN.md, "Layers" and "Folders"), every import counted ---------------------------------------

KERNEL_MCP_MAY_IMPORT = {"core", "_errors", "_version", "_resources", "_lazy", "_threads"}
"""The layers ``kernel_mcp`` may import (beside its own modules): it knows its owner (the engine's
agent session) and the notebook's page only through its Protocols (``ToolOwner``, ``LiveNotebook``)."""
FACE_ONLY = ("widgets", "magics", "tools")
"""Layers that import of the engine only its face, ``escouade_nb.engine`` (its lazy ``__all__``)."""
WINGS = {
    "launch": set(),
    "review": {"interfaces", "kernel_git"},
    "worktrees": {"interfaces", "cards", "kernel_git", "launch"},
}
"""The engine's wings and what each may import of the rest of the engine (a module of the engine's root, or a
wing, all of whose modules it may import): launch nothing (it never sees the agent's handle, it is given what it
needs, typed by ``engine/launch/interfaces.py``); no wing imports the engine's root above these base modules."""


def room_rule_breaks(root: Path = PACKAGE) -> list[str]:
    """Every import (function-level and under TYPE_CHECKING too) that breaks a rule of the rooms above."""
    graph = file_graph(root)
    engine = "escouade_nb.engine"
    wrong = []
    for me, targets in sorted(graph.items()):
        parts = me.split(".")
        for target in sorted(targets):
            theirs = layer(target)
            if len(parts) > 1 and parts[1] == "kernel_mcp" and theirs not in KERNEL_MCP_MAY_IMPORT | {"kernel_mcp"}:
                wrong.append(f"{me} -> {target} (kernel_mcp imports only {sorted(KERNEL_MCP_MAY_IMPORT)})")
            if len(parts) > 1 and parts[1] in FACE_ONLY and target.startswith(engine + "."):
                wrong.append(f"{me} -> {target} ({parts[1]} imports only the engine's face, {engine})")
            if len(parts) > 3 and parts[1] == "engine" and parts[2] in WINGS and target.startswith(engine + "."):
                room = target.split(".")[2]
                if room != parts[2] and room not in WINGS[parts[2]]:
                    wrong.append(f"{me} -> {target} (the {parts[2]} wing imports of the engine only "
                                 f"{sorted(WINGS[parts[2]])})")
    return wrong


def test_every_room_imports_only_what_it_may():
    assert room_rule_breaks() == []


def test_the_rooms_are_what_the_rules_name():
    """The rules above name rooms that exist: a renamed wing or base module would leave its rule empty."""
    engine = PACKAGE / "engine"
    assert RANKS["kernel_mcp"] < RANKS["engine"] and (PACKAGE / "kernel_mcp" / "server.py").is_file()
    for wing, allowed in WINGS.items():
        assert (engine / wing / "__init__.py").is_file(), wing
        assert all((engine / f"{m}.py").is_file() or (engine / m / "__init__.py").is_file() for m in allowed), wing
    for face in ("escouade_nb.engine", "escouade_nb.kernel_mcp"):  # every name of a face resolves
        module = importlib.import_module(face)
        assert module.__all__ and all(getattr(module, name) is not None for name in module.__all__), face


def test_the_room_rules_can_fail(tmp_path):
    """A synthetic tree where each rule is broken once (lazily, under TYPE_CHECKING, or at module level) and kept
    once: every break is seen, nothing kept is."""
    root = tmp_path / "escouade_nb"
    files = {
        "core/notebook.py": "",
        "wire/framing.py": "",
        "kernel_mcp/__init__.py": "",
        "kernel_mcp/server.py": "from ..core import notebook\nfrom . import tools\n"
                                "def f():\n    from ..engine import squad\n",
        "kernel_mcp/tools.py": "from ..wire.framing import x\n",
        "engine/__init__.py": "",
        "engine/squad.py": "from .launch import launcher\nfrom .worktrees import worktree\n",
        "engine/state.py": "",
        "engine/interfaces.py": "",
        "engine/kernel_git.py": "",
        "engine/launch/__init__.py": "",
        "engine/launch/launcher.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                     "    from ..interfaces import AgentHandle\n",
        "engine/launch/sandbox.py": "from . import launcher\ndef g():\n    from ..state import AgentState\n",
        "engine/worktrees/__init__.py": "",
        "engine/worktrees/worktree.py": "from ..kernel_git import git\nfrom ..launch.launcher import agent_env\n",
        "engine/worktrees/agent_worktrees.py": "from ..interfaces import WorktreeAgent\n"
                                               "def k():\n    from ..state import AgentState\n",
        "engine/agent.py": "",
        "tools/__init__.py": "",
        "tools/fake.py": "from ..engine import Agent\ndef t():\n    from ..engine.agent import Agent\n",
        "engine/review/__init__.py": "",
        "engine/review/checkpoints.py": "from ..kernel_git import git\nfrom ..worktrees.worktree import Worktree\n",
        "widgets/__init__.py": "",
        "widgets/view.py": "from ..engine import Agent\nfrom ..kernel_mcp import server\n",
        "widgets/table.py": "def h():\n    from ..engine.squad import Squad\n",
        "magics.py": "from .engine.squad import get_squad\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    seen = [line.split(" (")[0] for line in room_rule_breaks(root)]
    assert seen == ["escouade_nb.engine.launch.launcher -> escouade_nb.engine.interfaces",
                    "escouade_nb.engine.launch.sandbox -> escouade_nb.engine.state",
                    "escouade_nb.engine.review.checkpoints -> escouade_nb.engine.worktrees.worktree",
                    "escouade_nb.engine.worktrees.agent_worktrees -> escouade_nb.engine.state",
                    "escouade_nb.kernel_mcp.server -> escouade_nb.engine.squad",
                    "escouade_nb.kernel_mcp.tools -> escouade_nb.wire.framing",
                    "escouade_nb.magics -> escouade_nb.engine.squad",
                    "escouade_nb.tools.fake -> escouade_nb.engine.agent",
                    "escouade_nb.widgets.table -> escouade_nb.engine.squad"]
