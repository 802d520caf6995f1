"""Is this agent installed, and which version: locate its program, read its version,
compare with the manifest's ``tested`` range, say how to install it."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sysconfig
from collections.abc import Callable, Mapping
from typing import Any, Literal

from .models import Harness, Tested
from .registry import agents_bin_dir

def _scripts_dir() -> str | None:
    """The running Python environment's scripts folder (``bin``/``Scripts``)."""
    try:
        return sysconfig.get_path("scripts")
    except Exception:
        return None


def locate_program(harness: Harness) -> str | None:
    """Absolute path of the harness program, or ``None`` if not found.

    For each name of ``locate.names``, in order: the folder of the agents
    ``%escouade install`` installed (:func:`~.registry.agents_bin_dir`: the
    user installed them for this), then ``shutil.which`` on the PATH, then the
    running Python environment's scripts folder (a kernel started from a venv
    without activation may not have it on the PATH).
    """
    scripts = _scripts_dir()
    installed = agents_bin_dir()
    for name in harness.locate.names:
        found = shutil.which(name, path=str(installed)) if installed.is_dir() else None
        found = found or shutil.which(name)
        if not found and scripts and os.path.isdir(scripts):
            found = shutil.which(name, path=scripts)
        if found:
            return os.path.abspath(found)
    return None


_VERSION_RE = re.compile(r"\d+\.\d+(?:\.\d+)?")


def _version_in(returncode: int | None, out: bytes) -> str | None:
    """The first ``N.N[.N]`` of a ``--version`` run's output; None unless it exited 0."""
    if returncode != 0:
        return None
    match = _VERSION_RE.search(out.decode("utf-8", errors="replace"))
    return match.group(0) if match else None


def read_version(program: str, version_args: list[str], timeout: float = 10) -> str | None:
    """Run ``program *version_args`` and return the first ``N.N[.N]`` of its
    output (stdout and stderr), or ``None`` on any failure: not runnable,
    non-zero exit, timeout, or no version in the output.  Never raises."""
    kwargs: dict[str, Any] = {}
    if os.name == "nt":
        kwargs["creationflags"] = getattr(subprocess, "CREATE_NO_WINDOW", 0)
    try:
        proc = subprocess.Popen(
            [program, *version_args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            **kwargs,
        )
    except Exception:
        return None
    try:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            try:
                proc.communicate(timeout=2)
            except Exception:
                pass
            return None
        return _version_in(proc.returncode, out)
    except Exception:
        return None
    finally:
        if proc.poll() is None:
            try:
                proc.kill()
            except Exception:
                pass
        if proc.stdout is not None:
            proc.stdout.close()


async def read_version_async(program: str, version_args: list[str], timeout: float = 10) -> str | None:
    """:func:`read_version` without blocking the event loop: the program runs as an
    asyncio subprocess (in a thread where the loop cannot run subprocesses, e.g. a
    selector loop on Windows). ``None`` on any failure, like :func:`read_version`.
    Cancelling it kills the program."""
    try:
        proc = await asyncio.create_subprocess_exec(
            program, *version_args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
    except NotImplementedError:  # a loop without subprocess support
        return await asyncio.to_thread(read_version, program, version_args, timeout)
    except Exception:
        return None
    try:
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            return None
        return _version_in(proc.returncode, out)
    except asyncio.CancelledError:
        raise
    except Exception:
        return None
    finally:
        if proc.returncode is None:
            try:
                proc.kill()
                await asyncio.wait_for(proc.wait(), 2)  # reaped, so nothing of it outlives the loop
            except (Exception, asyncio.CancelledError):
                pass  # (cancelled again meanwhile: the first cancellation still propagates)


def _numeric_key(version: str) -> tuple[int, ...]:
    """Dotted numeric version -> comparable tuple, trailing zeros dropped.
    Raises ``ValueError`` when *version* has no leading number."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", version)
    if not match:
        raise ValueError(version)
    parts = [int(p) for p in match.group(1).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _version_key() -> Callable[[str], Any]:
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover - packaging is normally there
        return _numeric_key

    def key(version: str) -> Any:
        try:
            return Version(version)
        except InvalidVersion:
            raise ValueError(version) from None

    return key


def version_status(
    version: str | None, tested: Tested | Mapping[str, str] | None
) -> Literal["tested", "older", "newer", "unknown"]:
    """Compare *version* with the ``tested`` range of a harness.

    ``"older"`` below ``tested.oldest``, ``"newer"`` above ``tested.newest``,
    ``"tested"`` within (a missing bound is open), ``"unknown"`` when the
    version is missing or unparsable, or no bound is given.  Versions compare
    numerically (``1.10`` > ``1.9``; ``1.57`` == ``1.57.0``).
    """
    if not version or tested is None:
        return "unknown"
    if isinstance(tested, Mapping):
        tested = Tested.model_validate(dict(tested))
    if not tested.oldest and not tested.newest:
        return "unknown"
    key = _version_key()
    try:
        current = key(version)
        if tested.oldest and current < key(tested.oldest):
            return "older"
        if tested.newest and current > key(tested.newest):
            return "newer"
    except ValueError:
        return "unknown"
    return "tested"


def install_hint(harness: Harness, *, os_name: str | None = None) -> str | None:
    """The install command for this OS: ``install.windows`` when
    ``os.name == "nt"``, else ``install.unix``; ``None`` when not given.
    *os_name* overrides ``os.name``."""
    if harness.install is None:
        return None
    if (os_name or os.name) == "nt":
        return harness.install.windows
    return harness.install.unix
