"""``%escouade install NAME``: an agent of the ACP registry installed per user, no root, no ``-g``.

What is installed is :func:`~escouade_nb.manifest.registry.install_plan`'s checked plan of the
registry's entry (its ``uvx`` package with pip when it has one, else its ``npx`` package with
npm; a binary-only entry is refused). The layout, under :func:`~escouade_nb.manifest.registry.agents_dir`::

    <agents>/<id>/<version>-XXXXXX/   the install: a Python venv (pip) or an npm prefix (npm --prefix)
    <agents>/<id>/current            symlink to the install in use, swapped by one rename(2)
    <agents>/<id>/install.log        the last install's output (kept, also when it failed)
    <agents>/bin/<program>           symlink through <id>/current to the program (locate looks here first)

An install is built in a fresh folder at the path it keeps (venvs are not relocatable) and
swapped in only once complete, then its harness manifest is written (atomically) into the user
plugins folder: a failed or cancelled install leaves the previous one, its manifest and its
program as they were, and writes nothing. npm and pip run as argv (never through a shell), in a
process group of their own, their output streamed line by line to ``on_line``; cancelling kills
the group. The same version installed already is a no-op; another version replaces it.

:func:`refresh_registry` fetches the registry from its CDN (in a thread, a short timeout),
validates it against the shipped schema and caches it per user (0600); when it cannot, it
says so in one line and the copy in use stays.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ..._errors import EscouadeError
from ...manifest import load_manifest, user_plugins_dir
from ...manifest.registry import (KNOWN_AS, PLUGIN_PREFIX, REGISTRY_URL, InstallPlan, Registry, RegistryError,
                                  agents_bin_dir, agents_dir, cached_registry_path, install_plan, load_registry,
                                  manifest_for, npm_program, validate_registry)
from ...wire.process import spawn, terminate_group
from .harness_update import track_group, untrack_group

INSTALL_TIMEOUT = 900.0
"""How long npm or pip may run (seconds) before its process group is killed."""
REFRESH_TIMEOUT = 5.0
"""How long fetching the registry from its CDN may take (seconds)."""

__all__ = ["INSTALL_TIMEOUT", "InstallError", "InstallResult", "install_agent", "refresh_registry",
           "installed_agents", "registry_listing"]


class InstallError(EscouadeError):
    """An install that did not happen; ``str()`` is one line (and names the log when there is one)."""


@dataclass(frozen=True)
class InstallResult:
    """An install done: the plan, the program's path, the install's folder, the manifest
    written, the seconds it took, and ``already`` when that version was installed already."""

    plan: InstallPlan
    program: Path
    folder: Path
    manifest: Path
    harness: str
    seconds: float
    already: bool = False

    def __str__(self) -> str:
        what = f"{self.plan.display_name} {self.plan.version} ({self.plan.kind} {self.plan.package})"
        if self.already:
            return f"{what} is installed already in {self.folder}; start it with %escouade {self.harness}"
        return (f"installed {what} in {self.folder} in {self.seconds:.0f} s; manifest {self.manifest}; "
                f"start it with %escouade {self.harness}")


def _marker(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / ".installed").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def installed_agents() -> dict[str, dict[str, Any]]:
    """Registry id → what its ``current`` install's marker says (version, package, program, path)."""
    out: dict[str, dict[str, Any]] = {}
    root = agents_dir()
    if not root.is_dir():
        return out
    for child in sorted(root.iterdir()):
        marker = _marker(child / "current") if (child / "current").is_symlink() else None
        if marker is not None:
            out[child.name] = {**marker, "path": str((child / "current").resolve())}
    return out


def registry_listing(registry: Registry) -> str:
    """What the registry offers, one line per agent: id, name, version, how it installs here
    (or why not), the version installed."""
    installed = installed_agents()
    lines = [f"ACP registry ({registry.source} copy: {registry.path}); %escouade install NAME installs one:"]
    if registry.note:
        lines.append(f"  note: {registry.note}")
    for entry in sorted(registry.agents, key=lambda e: str(e.get("id"))):
        distribution = entry.get("distribution") or {}
        try:
            plan = install_plan(entry)
            how = f"{'pip' if plan.kind == 'uvx' else 'npm'} {plan.package}"
        except RegistryError as exc:
            how = ("binary archives only: not installed by escouade_nb" if set(distribution) == {"binary"}
                   else f"refused: {exc}")
        mine = installed.get(str(entry.get("id")))
        have = f"  [installed {mine.get('version')}]" if mine else ""
        lines.append(f"  {entry.get('id', '?'):<16} {str(entry.get('version', '?')):<9} {how}{have}")
    return "\n".join(lines)


async def refresh_registry(url: str = REGISTRY_URL, timeout: float = REFRESH_TIMEOUT) -> tuple[Registry, str]:
    """Fetch the registry (in a thread: the loop never waits on the network), validate it,
    cache it per user (mode 0600, written atomically) and return it with a one-line note;
    when it cannot be fetched or does not validate, the registry in use (cached or shipped)
    and a note saying why."""
    def fetch() -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(url, timeout=timeout) as response:
            return validate_registry(json.loads(response.read(8 * 1024 * 1024)))

    try:
        data = await asyncio.wait_for(asyncio.to_thread(fetch), timeout + 1)
    except Exception as exc:  # unreachable, timed out, not JSON, not the schema
        registry = await asyncio.to_thread(load_registry)
        why = str(exc) or type(exc).__name__
        return registry, f"the registry could not be fetched from {url} ({why}); using the {registry.source} copy"
    path = cached_registry_path()
    await asyncio.to_thread(_write_private, path, json.dumps(data, indent=1))
    return Registry(data["agents"], "cached", path), f"registry fetched from {url} ({len(data['agents'])} agents)"


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _prepare_manifest(path: Path, data: dict[str, Any]) -> Path:
    """A manifest written beside *path* under a temporary name and checked by the loader
    (a broken one is never put in place); ``os.replace`` it onto *path* to commit it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".escouade-plugin.", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.chmod(tmp, 0o644)
        load_manifest(tmp)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _swap_link(link: Path, target: str) -> None:
    """Point the symlink *link* at *target* by one rename(2)."""
    tmp = link.with_name(f".{link.name}.new-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link)


_DIVERTING = {"npm_config_global", "npm_config_prefix", "npm_config_location", "npm_config_dry_run", "pip_user",
              "pip_target", "pip_prefix", "pip_root", "pip_dry_run", "pip_editable"}
"""The kernel's npm and pip settings reach npm and pip (a registry or index of the user's own, a cache, a proxy),
but for those that would install elsewhere than the per-user folder (``-g``, ``--user``, ``--target``…)."""


async def _run(argv: list[str], cwd: Path, log: Any, on_line: Callable[[str], object] | None,
               timeout: float) -> int | None:
    """Run *argv* (no shell) in its own process group, each output line to the log and
    ``on_line``; its exit code, None when it timed out. Cancelling kills the group."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in _DIVERTING}
    env.update({"NO_UPDATE_NOTIFIER": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "NO_COLOR": "1"})
    process = await spawn(argv, cwd=cwd, env=env)
    track_group(process.pid)  # killed at exit (a kernel shut down mid-install) unless ended before
    log.write(f"$ {' '.join(argv)}\n")

    async def read(stream: Any) -> None:
        buffer = b""
        try:
            async for chunk in stream:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    line = raw.decode("utf-8", "replace").rstrip("\r")
                    log.write(line + "\n")
                    if on_line is not None:
                        on_line(line)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        if buffer:
            log.write(buffer.decode("utf-8", "replace") + "\n")

    try:
        if process.stdin is not None:
            await process.stdin.aclose()
        with anyio.move_on_after(timeout) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(read, process.stdout)
                tg.start_soon(read, process.stderr)
                await process.wait()
        if scope.cancelled_caught:
            return None
        return process.returncode
    finally:
        with anyio.CancelScope(shield=True):
            await terminate_group(process, 3.0)
            untrack_group(process.pid)


def _lock(folder: Path) -> int:
    """An exclusive lock on ``folder/.lock`` (one install of an agent at a time), not waited for:
    :class:`InstallError` when another holds it. Returns the descriptor to close."""
    import fcntl

    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise InstallError(f"another install of {folder.name} is under way (lock {folder / '.lock'})") from None
    return fd


def _base_manifest(plan: InstallPlan, harnesses: dict[str, tuple[dict[str, Any], str]]) -> tuple[
        dict[str, Any] | None, str | None]:
    found = harnesses.get(KNOWN_AS.get(plan.agent_id, plan.agent_id))
    return (found[0], found[1]) if found else (None, None)


async def install_agent(agent_id: str, *, on_line: Callable[[str], object] | None = None,
                        described: dict[str, tuple[dict[str, Any], str]] | None = None,
                        registry: Registry | None = None, timeout: float = INSTALL_TIMEOUT) -> InstallResult:
    """Install the registry's agent *agent_id* (see the module); ``on_line(line)`` sees npm's
    or pip's output as it comes. *described*: harness id → (manifest JSON, harness id) of the
    harnesses escouade_nb already describes (an entry of the same id takes that manifest as its
    base, :func:`~escouade_nb.manifest.registry.manifest_for`). :class:`RegistryError` for an
    entry that is refused, :class:`InstallError` for an install that failed (the log named);
    nothing is changed then."""
    if registry is None:
        registry = await asyncio.to_thread(load_registry)
    plan = install_plan(registry.entry(agent_id))
    root = agents_dir()
    home = root / plan.agent_id
    await asyncio.to_thread(home.mkdir, parents=True, exist_ok=True)
    lock = await asyncio.to_thread(_lock, home)
    try:
        return await _install_locked(plan, home, root, on_line, described or {}, timeout)
    finally:
        os.close(lock)


async def _install_locked(plan: InstallPlan, home: Path, root: Path, on_line: Callable[[str], object] | None,
                          described: dict[str, tuple[dict[str, Any], str]], timeout: float) -> InstallResult:
    started = time.monotonic()
    base, base_harness = _base_manifest(plan, described)
    plugin_dir = (user_plugins_dir() / (base_harness and _plugin_folder(base) or PLUGIN_PREFIX + plan.agent_id))
    manifest_path = plugin_dir / "escouade-plugin.json"
    current = home / "current"
    marker = _marker(current) if current.is_symlink() else None
    if (marker and marker.get("package") == plan.package and marker.get("kind") == plan.kind
            and (agents_bin_dir() / str(marker.get("program"))).exists() and manifest_path.is_file()):
        return InstallResult(plan, agents_bin_dir() / str(marker["program"]), current.resolve(), manifest_path,
                             base_harness or plan.agent_id, 0.0, already=True)
    build = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix=f"{plan.version}-", dir=home))
    log_path = home / "install.log"
    ok = False
    try:
        with open(log_path, "w", encoding="utf-8") as log:
            if plan.kind == "npx":
                npm = shutil.which("npm")
                if npm is None:
                    raise InstallError(f"{plan.agent_id} is an npm package and npm is not on PATH (node >= 20 "
                                       "and npm are needed)")
                steps = [[npm, "install", "--prefix", str(build), "--no-audit", "--no-fund", "--loglevel=http",
                          "--no-update-notifier", plan.package]]
            else:
                python = str(build / "bin" / "python")
                steps = [[sys.executable, "-m", "venv", str(build)],
                         [python, "-m", "pip", "install", "--progress-bar", "off", plan.package]]
            for argv in steps:
                code = await _run(argv, build, log, on_line, timeout)
                if code != 0:
                    why = f"timed out after {timeout:g} s" if code is None else f"exit code {code}"
                    raise InstallError(f"install of {plan.agent_id} {plan.version} failed ({Path(argv[0]).name} "
                                       f"{why}); nothing was changed; log: {log_path}")
        if plan.kind == "npx":
            try:
                package_json = json.loads((build / "node_modules" / plan.name / "package.json").read_text("utf-8"))
            except (OSError, ValueError) as exc:
                raise InstallError(f"{plan.package}: installed, but its package.json cannot be read ({exc})") from None
            program = npm_program(plan, package_json)
            relative = Path("node_modules") / ".bin" / program
        else:
            program = plan.program
            relative = Path("bin") / program
        if not (build / relative).exists():
            raise InstallError(f"{plan.package}: installed, but it has no program {program!r}; log: {log_path}")
        link = agents_bin_dir() / program
        if link.is_symlink():
            owner = Path(os.readlink(link)).parts
            if len(owner) > 1 and owner[1] != plan.agent_id:
                raise InstallError(f"program {program!r} is already installed by registry agent {owner[1]!r}; "
                                   f"nothing was changed")
        (build / ".installed").write_text(json.dumps(
            {"agent": plan.agent_id, "version": plan.version, "kind": plan.kind, "package": plan.package,
             "program": program, "relative": str(relative)}) + "\n", "utf-8")
        os.chmod(build, 0o755)
        ready = _prepare_manifest(manifest_path, manifest_for(plan, program, build, base, base_harness))
        previous = current.resolve() if current.is_symlink() else None
        # the swap, then the manifest: the program first exists under its name, then is described
        try:
            agents_bin_dir().mkdir(parents=True, exist_ok=True)
            _swap_link(current, build.name)
            ok = True  # from here the new install is the one in use
            _swap_link(link, str(Path("..") / plan.agent_id / "current" / relative))
            os.replace(ready, manifest_path)
        finally:
            ready.unlink(missing_ok=True)
        if previous is not None and previous != build and previous.parent == home:
            await asyncio.to_thread(shutil.rmtree, previous, True)
        return InstallResult(plan, link, build, manifest_path, base_harness or plan.agent_id,
                             time.monotonic() - started)
    finally:
        if not ok:
            with anyio.CancelScope(shield=True):
                await asyncio.to_thread(shutil.rmtree, build, True)


def _plugin_folder(base: dict[str, Any] | None) -> str:
    """The user plugin folder that overrides the manifest *base* (named after its plugin id)."""
    return "override-" + str((base or {}).get("id", "plugin"))
