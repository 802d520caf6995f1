"""Launchers (``--via``): the command line of an agent run elsewhere, and how it ends there.

A launcher is a prefix that carries stdin and stdout (``ssh host``, ``podman exec -i CONTAINER``,
``docker exec -i CONTAINER``, ``kubectl exec -i POD --``, ``srun -N1 --unbuffered``) put before
the agent's own command. Ending the local launcher is not ending the agent: a killed ``ssh``
client leaves the remote command running (without a terminal, sshd signals nothing to it; it
only closes its pipes, and an agent that is stuck, or ignores end of input, lives on); a killed
``podman exec`` / ``docker exec`` / ``kubectl exec`` client leaves its process in the container.

So for every launcher the far command is wrapped in :data:`REMOTE_WRAPPER`, plain POSIX ``sh``
run on the other side (nothing to install there: ``sh``, ``mktemp``, ``mkfifo``, ``cat``,
``kill``): the agent runs in its own process group (``setsid``, where the far side has it —
Linux does; elsewhere only the agent's own process is signalled) reading a FIFO that a ``cat``
feeds from the launcher's stdin; when that input ends — our ``close()`` closes the launcher's
stdin, or the pipe drops because Stop, Restart or kernel shutdown killed the local launcher —
the agent gets end of input, has :data:`~...wire.process.EOF_GRACE` seconds to exit, then its
whole far group gets SIGTERM and, 3 s later, SIGKILL: the same ending as a local agent's. The
agent's stdout and stderr are the launcher's own, untouched (no terminal: ``ssh -t``,
``podman exec -t``, ``srun --pty`` would echo our messages back and rewrite newlines, so none
is used). ``ssh`` joins its arguments into one remote command line, so there the words are
quoted for the remote shell; every other launcher passes its words as they are
(``podman exec -i C sh -c WRAPPER escouade_nb PROGRAM ARGS…``).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ...wire.process import agent_environment
from ...wire.url_bridge import url_of

if TYPE_CHECKING:
    from .interfaces import LaunchedAgent

REMOTE_WRAPPER = r"""
d=$(mktemp -d) && mkfifo "$d/in" || exit 125
if command -v setsid >/dev/null 2>&1; then setsid "$@" <"$d/in" & else "$@" <"$d/in" & fi
a=$!
exec 3>"$d/in" 4<&0
rm -rf "$d"
( cat <&4 >&3; exec 3>&- 4<&-
  i=0; while kill -0 "$a" 2>/dev/null && [ "$i" -lt 20 ]; do sleep 0.1; i=$((i+1)); done
  kill -TERM -"$a" "$a" 2>/dev/null; i=0
  while kill -0 "$a" 2>/dev/null && [ "$i" -lt 30 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL -"$a" "$a" 2>/dev/null ) >/dev/null 2>&1 & w=$!
exec 3>&- 4<&-
wait "$a"; s=$?
kill -KILL "$w" 2>/dev/null
exit "$s"
"""
"""The far side of every launcher (see the module's docstring): ``sh -c
REMOTE_WRAPPER escouade_nb PROGRAM ARGS…``. Exits with the agent's exit code (125 when
the FIFO cannot be made)."""

SSH_WRAPPER = REMOTE_WRAPPER
"""The name it had when only ``ssh`` was wrapped."""


RELAY_BOOTSTRAP = """import os,sys
h=b""
while not h.endswith(b"\\n"):
 c=os.read(0,1)
 if not c:sys.exit(125)
 h+=c
n=int(h);s=b""
while len(s)<n:
 c=os.read(0,n-len(s))
 if not c:sys.exit(125)
 s+=c
if sys.version_info<(3,8):
 os.write(1,b'{"jsonrpc":"2.0","method":"_escouade/relay","params":{"absent":"python3 older than 3.8"}}\\n')
 os.execvp(sys.argv[1],sys.argv[1:])
exec(compile(s,"escouade-relay","exec"),{"__name__":"__escouade_relay__","RELAY_SOURCE":s})"""
"""The relay's bootstrap (``python3 -c``): reads ``<length>\\n<source>`` from its stdin byte-exact
(nothing of the ACP stream after it is consumed) and runs it as :mod:`.pipe_relay`; under
Python < 3.8 it runs the agent itself instead (no kernel tools)."""

RELAY_SH = r"""if command -v python3 >/dev/null 2>&1; then exec python3 -c "$0" "$@"; fi
IFS= read -r n || exit 125
dd bs=1 count="$n" of=/dev/null 2>/dev/null
echo '{"jsonrpc":"2.0","method":"_escouade/relay","params":{"absent":"no python3"}}'
echo "escouade_nb: no python3 on the agent's side: the kernel's tools are not carried over this pipe" >&2
exec "$@"
"""
"""``sh -c RELAY_SH BOOTSTRAP PROGRAM ARGS…``: the relay under ``python3`` when the far side has
one; else the relay's source is read and dropped (``dd``, byte-exact), the relay's hello says it is
absent (``{"absent": "no python3"}``, before the agent's first byte) and the agent runs alone."""


def relay_command(command: Sequence[str]) -> list[str]:
    """``command`` (the agent's program and arguments) run under the relay
    (:mod:`.pipe_relay`, sent over the pipe: :func:`relay_preamble`)."""
    return ["sh", "-c", RELAY_SH, RELAY_BOOTSTRAP, *command]


def relay_preamble() -> bytes:
    """What the kernel writes on the launcher's stdin before any ACP: ``<length>\\n`` and the
    relay's source (:mod:`.pipe_relay`, ~10 kB). ``OSError`` if the file cannot be read."""
    source = (Path(__file__).parent / "pipe_relay.py").read_bytes()
    return b"%d\n" % len(source) + source


def is_ssh(via: Sequence[str]) -> bool:
    """Whether the launcher is the OpenSSH client (``ssh …``, by its program's name)."""
    return bool(via) and os.path.basename(via[0]) == "ssh"


def launch_argv(via: Sequence[str], command: Sequence[str]) -> list[str]:
    """The local command line that runs ``command`` (the agent's program and
    arguments) through launcher ``via`` under :data:`REMOTE_WRAPPER`: ``command`` itself
    without a launcher; ``[*via, "sh", "-c", REMOTE_WRAPPER, "escouade_nb", *command]``;
    for ``ssh`` that far command as one remote command line, every word quoted."""
    if not via:
        return list(command)
    if url_of(via) is not None:  # an agent by URL: its carrier drops the words after "--", its server runs it
        return [*via, *command]
    return far_argv(via, ["sh", "-c", REMOTE_WRAPPER, "escouade_nb", *command])


def far_argv(via: Sequence[str], command: Sequence[str]) -> list[str]:
    """The local command line that runs ``command`` as it is on the far side of ``via``
    (no wrapper: a short command, e.g. :mod:`.far_side`'s probe): ``[*via, *command]``, or
    for ``ssh`` ``[*via, <command quoted for the remote shell>]``."""
    if is_ssh(via):
        return [*via, shlex.join(command)]
    return [*via, *command]


def agent_env(agent: LaunchedAgent) -> dict[str, str]:
    """The environment of ``agent``'s process (its ``harness`` and ``extra_env``): the kernel's, less its
    manifest's ``acp.removeEnv``, plus its ``acp.env`` and the start's (``--account``…).
    What its start, its terminal sign-in and its sandboxed worktree setup all get."""
    acp_spec = agent.harness.acp
    if acp_spec is None:
        return {**os.environ, **agent.extra_env}
    return agent_environment(acp_spec.remove_env or (), {**(acp_spec.env or {}), **agent.extra_env})
