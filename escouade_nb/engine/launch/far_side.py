"""The far side of a launcher (``--via``), looked at before the agent starts there: :func:`probe`.

One short command through the launcher itself (``[*via, "sh", "-c", PROBE, …]``, quoted for
``ssh``) locates the harness's program *there* (its manifest's ``locate.names``, in order, on the
far side's ``PATH``), reads its version there (the manifest's ``versionArgs``) and says whether
``bwrap`` is there (``--sandbox`` with a launcher sandboxes on the far side). What it learns is
a :class:`FarSide`; what stops the start is a :class:`FarSideError` whose message is one line:

* the launcher could not run the command at all — an unreachable host (``ssh``'s ``connect to
  host …``), a container that is not running (``podman``/``docker``: ``… is not running``, ``no
  such container``), an allocation refused (``srun: error: Unable to allocate resources: …``),
  a pod that is not there: the launcher's own last line on stderr, after the launcher's words;
* the program is on none of those names on the far side's ``PATH``.

Nothing is left behind: the probe is a plain command that ends (it is killed, with the
launcher, after :data:`PROBE_TIMEOUT` seconds), and it starts nothing on the far side but
``sh`` and the program's ``--version``.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ..._errors import EscouadeError
from .launcher import far_argv

__all__ = ["PROBE", "PROBE_TIMEOUT", "FarSide", "FarSideError", "far_sandbox_refusal", "probe"]

PROBE_TIMEOUT = 60.0
"""Seconds the probe may take, launcher included (an ``ssh`` login, an ``srun`` allocation on
a busy cluster); past them it is killed and the start fails in one line."""

PROBE = r"""
try=$1; names=$2; shift 2
p=
for n in $names; do p=$(command -v "$n" 2>/dev/null) && [ -n "$p" ] && break; p=; done
if ! command -v bwrap >/dev/null 2>&1; then echo "escouade-bwrap no"
elif [ -z "$try" ]; then echo "escouade-bwrap yes"
elif e=$(bwrap --unshare-user --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --unshare-pid --die-with-parent \
         --cap-drop ALL -- true 2>&1); then echo "escouade-bwrap yes"
else echo "escouade-bwrap fails $(printf '%s\n' "$e" | tail -n 1)"; fi
if [ -n "$try" ]; then
  echo "escouade-home $HOME"
  [ -d "$try" ] && echo "escouade-folder yes"
  for d in /run /var/run "$XDG_RUNTIME_DIR" "$JUPYTER_RUNTIME_DIR" "${JUPYTER_DATA_DIR:-/nonexistent}/runtime" \
           "${XDG_DATA_HOME:-$HOME/.local/share}/jupyter/runtime"; do
    [ -n "$d" ] && [ -d "$d" ] && [ ! -L "$d" ] && echo "escouade-dir $d"; done
fi
[ -n "$p" ] || { echo "escouade-missing"; exit 0; }
echo "escouade-program $p"
[ "$#" -gt 0 ] || exit 0
echo "escouade-version-begin"
"$p" "$@" </dev/null 2>&1
echo "escouade-version-end $?"
"""
"""The probe run on the far side: ``sh -c PROBE escouade_nb FOLDER "NAME NAME…" VERSIONARG…``. It prints
``escouade-bwrap yes|no`` (with a ``FOLDER``: ``--sandbox`` asked there, ``yes`` only when a bare
sandbox — a user namespace, a fresh ``/proc`` — runs, else ``escouade-bwrap fails LAST LINE``), then
with a ``FOLDER`` ``escouade-home HOME``, ``escouade-folder yes`` when that folder is there and
``escouade-dir D`` for each of ``/run``, ``/var/run``, ``$XDG_RUNTIME_DIR`` and Jupyter's runtime
folders there (``$JUPYTER_RUNTIME_DIR``, ``$JUPYTER_DATA_DIR/runtime``, ``<data home>/jupyter/runtime``)
that is a folder there (what the sandbox hides); then ``escouade-program PATH`` (or ``escouade-missing``), then the
program's version output between ``escouade-version-begin`` and ``escouade-version-end CODE``.
Exits 0 whenever it ran: any other exit is the launcher's."""

_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?")


class FarSideError(EscouadeError):
    """The agent cannot start on the far side; the message is one line saying why."""


@dataclass(frozen=True)
class FarSide:
    """What the probe found on the far side of ``via``: the program's path there, its version
    (``N.N[.N]``, or None when it gave none), whether ``bwrap`` is on its ``PATH``; probed for
    ``--sandbox`` (a ``folder``): ``bwrap_fails`` (bwrap's last line when a bare sandbox cannot
    run there), ``home`` (``$HOME`` there), ``folder`` (the agent's folder is there, at the same
    path) and ``run_dirs`` (the folders of system sockets and Jupyter's runtime folders there, hidden
    from the agent)."""

    via: tuple[str, ...]
    program: str
    version: str | None
    bwrap: bool
    bwrap_fails: str | None = None
    home: str | None = None
    folder: bool = False
    run_dirs: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        """The launcher's words: ``podman exec -i box``."""
        return shlex.join(self.via)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def read(via: Sequence[str], names: Sequence[str], code: int | None, out: str, err: str) -> FarSide:
    """:class:`FarSide` from a probe's exit ``code``, stdout and stderr; :class:`FarSideError`
    (one line) when the launcher failed or the program is not there."""
    where = shlex.join(via)
    said = out.splitlines()
    if "escouade-missing" in said:
        raise FarSideError(f"{where}: no program named {', '.join(names)} on the PATH there")
    found = [line[len("escouade-program "):] for line in said if line.startswith("escouade-program ")]
    if code != 0 or not found:
        why = _last_line(err) or _last_line(out) or f"exited with code {code}"
        raise FarSideError(f"{where}: {why}")
    version = None
    if "escouade-version-begin" in said:
        begin = said.index("escouade-version-begin")
        ends = [i for i, line in enumerate(said) if line.startswith("escouade-version-end ")]
        if ends and ends[-1] > begin and said[ends[-1]].split()[-1] == "0":
            match = _VERSION.search("\n".join(said[begin + 1:ends[-1]]))
            version = match.group(0) if match else None
    fails = [line[len("escouade-bwrap fails"):].strip() for line in said if line.startswith("escouade-bwrap fails")]
    homes = [line[len("escouade-home "):] for line in said if line.startswith("escouade-home ")]
    return FarSide(via=tuple(via), program=found[0], version=version, bwrap="escouade-bwrap yes" in said,
                   bwrap_fails=(fails[0] or "bwrap failed") if fails else None, home=homes[0] if homes else None,
                   folder="escouade-folder yes" in said,
                   run_dirs=tuple(line[len("escouade-dir "):] for line in said if line.startswith("escouade-dir ")))


def far_sandbox_refusal(far: FarSide, folder: object) -> None:
    """:class:`FarSideError` (one line naming the place) when ``--sandbox`` cannot hold on the far
    side ``far`` probed for it: no bwrap there, a bwrap that cannot make a sandbox there (its last
    line: a container that masks ``/proc`` or forbids user namespaces), or no agent's ``folder``
    there at the same path."""
    if not far.bwrap and far.bwrap_fails is None:
        raise FarSideError(f"--sandbox: no bwrap in {far.where}; install bubblewrap there or drop --sandbox")
    if far.bwrap_fails is not None:
        raise FarSideError(f"--sandbox: bwrap cannot sandbox in {far.where} ({far.bwrap_fails}); a container "
                           f"needs user namespaces and an unmasked /proc (podman run --security-opt unmask=/proc/*), "
                           f"or drop --sandbox")
    if not far.folder:
        raise FarSideError(f"--sandbox: no folder {folder} in {far.where}; the agent's folder must be at the same "
                           f"path there (a shared mount) to be its writable folder")


async def probe(via: Sequence[str], names: Sequence[str], version_args: Sequence[str] = (),
                timeout: float = PROBE_TIMEOUT, sandbox_folder: str | None = None) -> FarSide:
    """Run :data:`PROBE` through launcher ``via`` (a non-empty argv) for the program ``names``
    (tried in order) and its ``version_args``, without blocking the loop. Returns a
    :class:`FarSide`; raises :class:`FarSideError` (one line) when the launcher cannot run it,
    the program is not there, or it takes over ``timeout`` s (then killed). ``sandbox_folder``
    (``--sandbox``: the agent's folder): bwrap is tried there and what the far sandbox needs is
    read (see :data:`PROBE`). Cancelling it kills the launcher."""
    if not via:
        raise ValueError("probe: no launcher")
    argv = far_argv(via, ["sh", "-c", PROBE, "escouade_nb", sandbox_folder or "", " ".join(names),
                                *version_args])
    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        raise FarSideError(f"{shlex.join(via)}: the launcher {via[0]!r} cannot run here: "
                           f"{exc.strerror or exc}") from None
    try:
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            raise FarSideError(f"{shlex.join(via)}: no answer within {timeout:g} s") from None
    finally:
        if proc.returncode is None:
            try:
                proc.kill()
                await asyncio.wait_for(proc.wait(), 5)
            except (Exception, asyncio.CancelledError):
                pass
    return read(via, names, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))
