"""The ACP agent registry's entries as data: read, checked, and turned into an install plan
and a harness manifest (``%escouade install``; the installing itself is
:mod:`escouade_nb.engine.launch.registry_install`).

The registry (https://github.com/agentclientprotocol/registry) is one JSON document,
``{"version", "agents": [entry...], "extensions": [...]}``; each entry has an ``id``, a
``version`` and a ``distribution`` of ``npx`` (``{package, args, env}``: an npm package),
``uvx`` (the same shape: a PyPI package) and/or ``binary`` (an archive per OS). A copy ships
with the package (``registry_data/registry.json``, its commit and licence in
``registry_data/NOTICE``); a fresher one fetched from the registry's CDN is cached per user
(:func:`cached_registry_path`) and preferred when it validates.

An entry is untrusted DATA: what reaches npm, pip or the agent's command line is checked
here first (:func:`install_plan`), and an entry that could make npm or pip install something
other than a registry package (a ``file:``, URL, git or path spec, a name starting with
``-``), put a shell metacharacter in the agent's arguments, or set a variable that changes
which program or library runs (``PATH``, ``LD_PRELOAD``, ``NODE_OPTIONS``…) is refused with
a :class:`RegistryError` naming the field. Nothing here runs a process or touches the network.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .._errors import EscouadeError

REGISTRY_URL = "https://cdn.agentclientprotocol.com/registry/v1/latest/registry.json"
"""Where the registry's CDN serves the current registry."""

DATA_DIR = Path(__file__).parent / "registry_data"
SHIPPED_REGISTRY = DATA_DIR / "registry.json"
"""The copy shipped with the package (see ``registry_data/NOTICE``: commit 3de1678, 2026-02-07)."""

AGENTS_DIR_ENV = "ESCOUADE_NB_AGENTS_DIR"
"""Environment variable overriding the folder agents are installed in."""

PLUGIN_PREFIX = "acp-registry-"
"""Folder name (in the user plugins folder) and plugin id prefix of a manifest written by an install."""

Kind = Literal["npx", "uvx"]

KNOWN_AS = {"claude-code-acp": "claude-agent", "codex-acp": "codex"}
"""Registry ids whose agent a shipped harness describes under another id (the same program
lineage: claude-code-acp was renamed claude-agent-acp); any other registry id is matched with
a harness of the same id. Such an install takes the shipped manifest as its base
(:func:`manifest_for`): its measured quirks (``mcpInArgv``, ``fs``, ``removeEnv``…) are kept."""


class RegistryError(EscouadeError):
    """A registry (or one of its entries) that cannot be used; ``str()`` is one line."""


def agents_dir() -> Path:
    """Where ``%escouade install`` puts agents: ``$ESCOUADE_NB_AGENTS_DIR``, else
    ``<jupyter data dir>/escouade_nb/agents`` (``~/.local/share/jupyter/…`` on Linux: the
    XDG data folder). Per user; it may not exist."""
    env = os.environ.get(AGENTS_DIR_ENV)
    if env:
        return Path(env).expanduser()
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "escouade_nb" / "agents"


def agents_bin_dir() -> Path:
    """The folder of the installed agents' programs (one symlink per program, to the
    current install): :func:`~.locate.locate_program` looks here first."""
    return agents_dir() / "bin"


def cached_registry_path() -> Path:
    """The per-user copy of the registry last fetched (mode 0600)."""
    return agents_dir() / "registry.json"


# -- reading ---------------------------------------------------------------------------------------


def _validator() -> Any:
    import jsonschema
    from referencing import Registry, Resource

    schemas = {name: json.loads((DATA_DIR / name).read_text("utf-8"))
               for name in ("registry.schema.json", "agent.schema.json")}
    refs = Registry().with_resources(
        (uri, Resource.from_contents(schemas[name]))
        for name in schemas for uri in (name, schemas[name]["$id"]))
    top = schemas["registry.schema.json"]
    cls = jsonschema.validators.validator_for(top)
    return cls(top, registry=refs)


def validate_registry(data: Any) -> dict[str, Any]:
    """*data* checked against the registry's own schema (shipped beside the copy);
    :class:`RegistryError` naming the first faulty field, else *data*."""
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = "/".join(str(p) for p in err.absolute_path) or "(top)"
        raise RegistryError(f"registry: {where}: {err.message}")
    return data


@dataclass(frozen=True)
class Registry:
    """A registry read: its ``agents`` (entries as the registry gives them) and where it
    came from (``source``: ``"shipped"`` or ``"cached"``; ``path``; ``note``: one line
    when a fresher copy could not be used)."""

    agents: list[dict[str, Any]]
    source: str
    path: Path
    note: str | None = None

    def entry(self, agent_id: str) -> dict[str, Any]:
        """The entry of id *agent_id*; :class:`RegistryError` listing the ids otherwise."""
        for entry in self.agents:
            if entry.get("id") == agent_id:
                return entry
        known = ", ".join(sorted(str(e.get("id")) for e in self.agents))
        raise RegistryError(f"no agent {agent_id!r} in the ACP registry ({self.source} copy); it has: {known}")


def read_registry_file(path: Path) -> dict[str, Any]:
    """One registry file, parsed and validated; :class:`RegistryError` otherwise."""
    try:
        data = json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise RegistryError(f"{path}: cannot read the registry: {exc}") from None
    return validate_registry(data)


def load_registry() -> Registry:
    """The registry to use: the per-user cached copy when there is one and it validates,
    else the shipped copy (with a one-line ``note`` when a cached copy was there but broken).
    Reads files only; never the network."""
    cached = cached_registry_path()
    note = None
    if cached.is_file():
        try:
            return Registry(read_registry_file(cached)["agents"], "cached", cached)
        except RegistryError as exc:
            note = f"the cached registry is not used ({exc}); the shipped copy is"
    return Registry(read_registry_file(SHIPPED_REGISTRY)["agents"], "shipped", SHIPPED_REGISTRY, note)


# -- checking an entry -----------------------------------------------------------------------------

_NPM_NAME = r"(?:@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*"
_NPM_SPEC = re.compile(rf"^({_NPM_NAME})(?:@([0-9A-Za-z][0-9A-Za-z.+_-]*))?$")
_PYPI_SPEC = re.compile(r"^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(?:(==|@)([0-9A-Za-z][0-9A-Za-z.+!_-]*))?$")
_SAFE_ARG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=:/@+,-]*$|^--?[A-Za-z0-9][A-Za-z0-9._=:/@+,-]*$")
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_ENV_REFUSED = {"PATH", "HOME", "SHELL", "USER", "LOGNAME", "TMPDIR", "PWD", "IFS", "ENV", "BASH_ENV",
                "NODE_OPTIONS", "NODE_PATH", "NODE_EXTRA_CA_CERTS", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP",
                "PYTHONUSERBASE", "VIRTUAL_ENV", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
                "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "GIT_SSH", "GIT_SSH_COMMAND", "EDITOR",
                "VISUAL", "PAGER", "BROWSER"}
_ENV_REFUSED_PREFIXES = ("LD_", "DYLD_", "PYTHON", "NODE_", "NPM_CONFIG_", "PIP_", "UV_", "ESCOUADE", "JPY_",
                         "JUPYTER")
_ID = re.compile(r"^[a-z][a-z0-9-]*$")


@dataclass(frozen=True)
class InstallPlan:
    """What installing one registry entry means, checked.

    ``kind``: ``"npx"`` (npm) or ``"uvx"`` (pip); ``package``: the name npm or pip gets
    (``name@version`` / ``name==version``); ``name`` the package's name alone; ``version``
    the entry's; ``args`` and ``env`` what the agent is started with; ``program`` the
    program's name (npx/uvx's rule: the package's name, without its ``@scope/``; for npm,
    the package's only ``bin`` when it has one — :func:`npm_program`)."""

    agent_id: str
    display_name: str
    version: str
    kind: Kind
    package: str
    name: str
    program: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    description: str = ""
    repository: str | None = None
    license: str | None = None


def _refuse(agent_id: str, where: str, why: str) -> RegistryError:
    return RegistryError(f"registry entry {agent_id!r}: {where}: {why}; not installed")


def _check_args(agent_id: str, where: str, args: Any) -> list[str]:
    if args is None:
        return []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise _refuse(agent_id, where, "must be a list of strings")
    for arg in args:
        if not _SAFE_ARG.match(arg):
            raise _refuse(agent_id, where, f"argument {arg!r} holds characters an agent's flag does not need "
                                           "(only letters, digits and . _ = : / @ + , - are taken)")
    return list(args)


def _check_env(agent_id: str, where: str, env: Any) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise _refuse(agent_id, where, "must be an object of strings")
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise _refuse(agent_id, where, f"variable name {key!r} is not NAME in capitals")
        if key in _ENV_REFUSED or key.startswith(_ENV_REFUSED_PREFIXES):
            raise _refuse(agent_id, where, f"{key} would change which program, library or settings run")
        if not isinstance(value, str) or any(c in value for c in "\0\n\r"):
            raise _refuse(agent_id, where, f"{key}'s value must be one line of text")
    return dict(env)


def _pick(distribution: dict[str, Any], prefer: Kind | None) -> Kind | None:
    order: list[Kind] = ["uvx", "npx"]  # Python first: pip-only where the entry allows it
    if prefer is not None:
        order = [prefer]
    for kind in order:
        if kind in distribution:
            return kind
    return None


def install_plan(entry: Any, *, prefer: Kind | None = None) -> InstallPlan:
    """The checked :class:`InstallPlan` of one registry *entry*: its ``uvx`` distribution
    (installed with pip: no node needed) when it has one, else its ``npx`` one; *prefer*
    picks one. :class:`RegistryError` (one line, naming the entry and the field) for an entry
    with only a ``binary`` distribution, or a hostile or malformed one (see the module)."""
    if not isinstance(entry, dict):
        raise RegistryError("a registry entry must be a JSON object")
    agent_id = entry.get("id")
    if not isinstance(agent_id, str) or not _ID.match(agent_id):
        raise RegistryError(f"registry entry id {agent_id!r} is not lowercase letters, digits and -")
    version = entry.get("version")
    if not isinstance(version, str) or not re.match(r"^[0-9]+\.[0-9]+\.[0-9]+[0-9A-Za-z.+-]*$", version):
        raise _refuse(agent_id, "version", f"{version!r} is not a version")
    distribution = entry.get("distribution")
    if not isinstance(distribution, dict) or not distribution:
        raise _refuse(agent_id, "distribution", "missing")
    kind = _pick(distribution, prefer)
    if kind is None:
        offered = ", ".join(sorted(distribution))
        if prefer is not None:
            raise _refuse(agent_id, "distribution", f"no {prefer} distribution (it offers {offered})")
        raise _refuse(agent_id, "distribution",
                      f"only {offered}: escouade_nb installs npm (npx) and PyPI (uvx) packages, never a "
                      "downloaded binary archive (its provenance cannot be checked the way a registry package's is)")
    dist = distribution[kind]
    if not isinstance(dist, dict):
        raise _refuse(agent_id, f"distribution.{kind}", "must be an object")
    package = dist.get("package")
    where = f"distribution.{kind}.package"
    if not isinstance(package, str) or not package:
        raise _refuse(agent_id, where, "missing")
    if kind == "npx":
        match = _NPM_SPEC.match(package)
        if not match:
            raise _refuse(agent_id, where, f"{package!r} is not an npm package name[@version] "
                                           "(a path, URL, git or file: spec, or a leading - is refused)")
        name = match.group(1)
        program = name.rsplit("/", 1)[-1]
    else:
        match = _PYPI_SPEC.match(package)
        if not match:
            raise _refuse(agent_id, where, f"{package!r} is not a PyPI name[==version] "
                                           "(a path, URL, extras, markers or a leading - is refused)")
        name = match.group(1)
        program = name
        if match.group(2) == "@":
            package = f"{name}=={match.group(3)}"
    args = _check_args(agent_id, f"distribution.{kind}.args", dist.get("args"))
    env = _check_env(agent_id, f"distribution.{kind}.env", dist.get("env"))
    text = lambda key: entry[key] if isinstance(entry.get(key), str) else None  # noqa: E731
    return InstallPlan(agent_id=agent_id, display_name=text("name") or agent_id, version=version, kind=kind,
                       package=package, name=name, program=program, args=args, env=env,
                       description=text("description") or "", repository=text("repository"),
                       license=text("license"))


def npm_program(plan: InstallPlan, package_json: dict[str, Any]) -> str:
    """The program npx runs for *plan*, from its installed ``package.json``: the only ``bin``
    when there is one, else the one named as the package (without its scope).
    :class:`RegistryError` when neither."""
    bins = package_json.get("bin")
    if isinstance(bins, str):
        return plan.program
    if isinstance(bins, dict) and bins:
        names = [n for n in bins if isinstance(n, str) and re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", n)]
        if len(names) == 1:
            return names[0]
        if plan.program in names:
            return plan.program
    raise RegistryError(f"{plan.package}: its package.json names no program npx would run")


# -- the harness manifest --------------------------------------------------------------------------


def manifest_for(plan: InstallPlan, program: str, installed_in: Path,
                 base: dict[str, Any] | None = None, base_harness: str | None = None) -> dict[str, Any]:
    """The ``escouade-plugin.json`` (plugin-1) an install writes for *plan*, its program
    *program* (a name: found in :func:`agents_bin_dir`).

    Without *base*: a new plugin ``acp-registry-<id>``, harness ``<id>``, its ``tested``
    range the registry's version (the one installed). With *base* (the manifest of a
    harness escouade_nb already describes, *base_harness* its id): that manifest, the same
    plugin and harness ids (so it takes the shipped one's place), its modes, tools and
    measured ``tested`` range kept, its program and ``acp.args``/``acp.env`` the entry's.
    Either way ``installed`` says what was installed, from where, and where it is."""
    record = {"from": "acp-registry", "agent": plan.agent_id, "version": plan.version, "kind": plan.kind,
              "package": plan.package, "program": program, "path": str(installed_in)}
    how = "pip" if plan.kind == "uvx" else "npm"
    if base is None:
        harness: dict[str, Any] = {
            "id": plan.agent_id, "name": plan.display_name,
            "$comment": (f"Written by %escouade install from the ACP registry's entry {plan.agent_id} "
                         f"{plan.version} ({plan.kind} {plan.package}, installed with {how}). tested: the "
                         "version the registry lists, not a version escouade_nb measured; modes and tools are "
                         "not described (the agent's own are shown); mcpInArgv true until measured: the kernel's "
                         "MCP server goes to it as the stdio bridge with a token file, never a token in a header "
                         "it might put on a command line."),
            "locate": {"names": [program]},
            "tested": {"oldest": plan.version, "newest": plan.version},
            "acp": {"args": plan.args, "env": plan.env, "mcpInArgv": True},
            "installed": record,
        }
        return {"$schema": "https://escouade.dev/schemas/plugin-1.json", "id": PLUGIN_PREFIX + plan.agent_id,
                "name": plan.display_name, "version": plan.version, "description": {"en": plan.description},
                **({"license": plan.license} if plan.license else {}),
                **({"repository": plan.repository} if plan.repository else {}),
                "escouade": {"api": "1", "min": "2.1.0"}, "contributes": {"harnesses": [harness]}}
    out = json.loads(json.dumps(base))
    for harness in out.get("contributes", {}).get("harnesses", []):
        if harness.get("id") == base_harness:
            harness["locate"] = {"names": [program]}
            acp = harness.setdefault("acp", {})
            acp["args"] = plan.args
            acp["env"] = {**acp.get("env", {}), **plan.env}
            harness["installed"] = record
            harness.pop("install", None)  # installed by %escouade install, not by hand
            harness.pop("updateCommand", None)
    return out
