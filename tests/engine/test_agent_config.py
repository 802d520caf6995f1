"""One agent: its start parameters in one frozen :class:`AgentConfig` checked once, read-only
on the agent; its parts typed by Protocols the size of their use; its optional capabilities
declared in one table and absent as a typed None, never reached by a string name."""

import dataclasses
import inspect
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import escouade_nb
from escouade_nb.engine import interfaces
from escouade_nb.engine.launch import interfaces as launch_interfaces
from escouade_nb.engine.agent import Agent, AgentConfig, AgentError
from escouade_nb.engine.state import AgentState
from escouade_nb.manifest import discover

ENGINE = Path(escouade_nb.__file__).parent / "engine"


@pytest.fixture(scope="module")
def ref():
    return discover().find("fake")


@pytest.mark.parametrize(("field", "value"), [
    ("system_prompt_mode", "replace"), ("start_timeout", -1), ("start_timeout", "soon"), ("via", "ssh host"),
    ("mcp", "all"), ("env", {"A": 1}), ("record", "yes"), ("review", None), ("fs", "no"), ("name", 3),
    ("add_dirs", "extra"), ("policies", ["not callable"]), ("policies", print), ("policies", 3),
    ("project", "/tmp"), ("program", None),
])
def test_a_bad_start_value_is_refused_naming_its_field(ref, tmp_path, field, value):
    with pytest.raises(AgentError, match=rf"AgentConfig\.{field}\b"):
        AgentConfig(ref, **{"program": "unused", "cwd": tmp_path, field: value})
    with pytest.raises(AgentError, match=rf"AgentConfig\.{field}\b"):  # Agent's keywords are the config's
        Agent(ref, **{"program": "unused", "cwd": tmp_path, field: value})


def test_the_config_is_canonical_and_frozen(ref, tmp_path):
    (tmp_path / "extra").mkdir()
    config = AgentConfig(ref, program="unused", cwd=str(tmp_path), via=["ssh", "host"], add_dirs=["extra"],
                         env={"A": "1"}, start_timeout=0, kernel_tools=False)
    assert config.name == ref.short_id and config.cwd == tmp_path.resolve()
    assert config.add_dirs == ((tmp_path / "extra").resolve(),) and config.via == ("ssh", "host")
    assert config.start_timeout is None  # 0: no limit
    agent = Agent(config)  # the agent gives its sequences as lists, as it always has: copies
    assert agent.via == ["ssh", "host"] and agent.add_dirs == [(tmp_path / "extra").resolve()] and agent.mcp is None
    agent.via.append("x")
    assert agent.via == ["ssh", "host"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.program = "other"  # type: ignore[misc]


def test_agent_of_a_config_is_the_same_agent_and_its_start_is_read_only(ref, tmp_path):
    config = AgentConfig(ref, program="unused", cwd=tmp_path, name="scout", kernel_tools=False)
    agent, again = Agent(config), Agent(ref, program="unused", cwd=tmp_path, name="scout", kernel_tools=False)
    assert agent.config == again.config and agent.name == "scout" and agent.cwd == tmp_path.resolve()
    for name in ("program", "cwd", "name", "via", "project", "policies", "sandbox", "extra_env"):
        with pytest.raises(AttributeError, match="start parameter"):
            setattr(agent, name, None)
    assert agent.program == "unused"  # the refused assignment changed nothing


def test_agent_re_declares_none_of_its_state():
    """Agent is AgentState's subclass: no forwarding property of the state's attributes."""
    assert issubclass(Agent, AgentState)
    forwarded = [n for n, v in vars(Agent).items() if isinstance(v, property) and n in dir(AgentState)]
    assert forwarded == []
    init = inspect.signature(Agent.__init__).parameters
    assert list(init) == ["self", "harness", "start"]  # the keywords are written once: AgentConfig's fields


def test_a_missing_capability_is_a_typed_none(ref, tmp_path):
    agent = Agent(ref, program="unused", cwd=tmp_path, kernel_tools=False)
    assert agent.file_watch is None and agent.sandbox is None and agent.worktree is None
    assert agent.sign_in_job is None and agent.early_desk is None
    assert Agent(ref, program="unused", cwd=tmp_path, review=True, kernel_tools=False).file_watch is not None
    table = {name: typing.get_type_hints(getattr(interfaces.OptionalParts, name).fget, vars(interfaces))["return"]
             for name in ("file_watch", "edit_review", "folder_checkpoints", "sandbox", "worktree", "sign_in_job",
                          "early_desk")}
    assert all(type(None) in typing.get_args(kind) or kind is typing.Any for kind in table.values()), table


def test_no_part_reaches_an_agent_capability_by_a_string_name():
    capabilities = ("edit_review", "checkpoints", "file_watch", "budget", "sandbox", "worktree", "live", "review",
                    "forker", "_state", "public")
    found = []
    for path in sorted(ENGINE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        found += [f"{path.name}: {m.group(0)}" for m in
                  re.finditer(r"(?:getattr|hasattr)\([^,()]*,\s*[\"'](\w+)[\"']", text) if m.group(1) in capabilities]
    assert found == []


def _members(protocol: type) -> set[str]:
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass not in (typing.Protocol, typing.Generic, object):
            names |= {n for n in vars(klass) if not n.startswith("_")} | set(getattr(klass, "__annotations__", {}))
    return names


def test_each_part_takes_a_protocol_the_size_of_its_use():
    from escouade_nb.engine import controls, record, resume
    from escouade_nb.engine.launch import launcher, versions

    assert not hasattr(interfaces, "AgentHandle")  # the 73-member handle is gone
    def taken(module, fn):  # the parts import their Protocol under TYPE_CHECKING
        return typing.get_type_hints(fn, {**vars(module), **vars(interfaces), **vars(launch_interfaces)})["agent"]

    sizes = {"launcher": (taken(launcher, launcher.agent_env), 2),
             "versions": (taken(versions, versions.ProgramVersions.check_at_start), 5),
             "record": (taken(record, record.ConversationRecord.__init__), 3),
             "controls": (taken(controls, controls.Controls.__init__), 6),
             "resume": (taken(resume, resume.rebuild), 8)}
    assert {part: len(_members(p)) for part, (p, _most) in sizes.items()} == \
        {part: most for part, (_p, most) in sizes.items()}


def test_mypy_holds_the_protocols_and_the_read_only_start(tmp_path):
    """A part given an object that lacks its Protocol's members, and a start parameter set on
    an agent, are type errors (the package itself is checked by scripts/check.sh)."""
    pytest.importorskip("mypy")
    probe = tmp_path / "probe.py"
    probe.write_text("from escouade_nb.engine.agent import Agent\n"
                     "from escouade_nb.engine.launch.versions import ProgramVersions\n\n\n"
                     "def f(agent: Agent, versions: ProgramVersions) -> None:\n"
                     "    agent.program = 'x'\n"
                     "    versions.check_at_start(object(), 'p', [])\n"
                     "    versions.check_at_start(agent, 'p', [])\n")
    out = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "--no-incremental",
                          "--config-file", "/dev/null", "--ignore-missing-imports", str(probe)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert [e.split(":")[1] for e in errors] == ["6", "7"], out.stdout
    assert "VersionedAgent" in errors[1]
