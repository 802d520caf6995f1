"""Bearer tokens handed to a program as a file: :class:`TokenFiles`.

The stdio bridge (:mod:`..tools.mcp_bridge`) must learn its grant's token without it
being in any argv (``/proc/PID/cmdline`` is readable by every local user) or any
environment value (some agents forward a stdio entry's ``env`` onto a command line:
claude-agent's SDK passes the whole ``mcpServers`` config to Claude Code as
``--mcp-config <json>``). So the entry names a file, ``ESCOUADE_MCP_TOKEN_FILE``, and the
token is in that file only:

* one private folder per process (``tempfile.mkdtemp``: mode 0700, under
  ``$XDG_RUNTIME_DIR`` when it is set — a per-user tmpfs — else the temporary folder),
  made at the first file;
* one file per token, mode 0600 from its creation (``O_CREAT | O_EXCL``, never a
  wider mode in between), holding the token and nothing else (no newline);
* :meth:`remove` when the grant ends, :meth:`remove_all` when the server stops, and at
  interpreter exit (``atexit``) whatever is left, folder included. A process killed by
  SIGKILL cannot clean up: the folder stays, readable by its user only.

The methods do file I/O: call :meth:`write` off the event loop (``asyncio.to_thread``);
:meth:`remove` is one ``unlink`` (a grant's end, not a hot path).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path

__all__ = ["TokenFiles"]


class TokenFiles:
    """The token files of one owner (the kernel's MCP server). Thread-safe."""

    def __init__(self, prefix: str = "escouade-mcp-") -> None:
        self.prefix = prefix
        self._folder: Path | None = None
        self._files: dict[str, Path] = {}
        self._lock = threading.Lock()

    @property
    def folder(self) -> Path | None:
        """The private folder (None before the first file and after :meth:`remove_all`)."""
        return self._folder

    def path_of(self, token: str) -> Path | None:
        """The file holding ``token``, if one was written and not removed."""
        return self._files.get(token)

    def make_folder(self) -> Path:
        """The private folder, made now if it is not there (what a sandbox binds read-only
        before the agent starts: its token files appear in it later). ``OSError`` as :meth:`write`."""
        with self._lock:
            return self._made_folder()

    def _made_folder(self) -> Path:
        if self._folder is None or not self._folder.is_dir():
            runtime = os.environ.get("XDG_RUNTIME_DIR")
            where = runtime if runtime and os.path.isdir(runtime) and os.access(runtime, os.W_OK) else None
            self._folder = Path(tempfile.mkdtemp(prefix=self.prefix, dir=where))  # mode 0700
            atexit.register(self.remove_all)
        return self._folder

    def write(self, token: str) -> Path:
        """The file holding ``token`` (written once; the same path on later calls).
        Raises ``OSError`` when the folder or the file cannot be made."""
        with self._lock:
            known = self._files.get(token)
            if known is not None:
                return known
            self._made_folder()
            fd, name = tempfile.mkstemp(prefix="token-", dir=self._folder)  # O_EXCL, mode 0600
            try:
                os.fchmod(fd, 0o600)
                os.write(fd, token.encode("utf-8"))
            finally:
                os.close(fd)
            path = Path(name)
            self._files[token] = path
            return path

    def remove(self, token: str) -> None:
        """Delete the file of ``token`` (nothing if there is none)."""
        with self._lock:
            path = self._files.pop(token, None)
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def remove_all(self) -> None:
        """Delete every file and the folder (idempotent; also run at interpreter exit)."""
        with self._lock:
            self._files.clear()
            folder, self._folder = self._folder, None
        if folder is not None:
            atexit.unregister(self.remove_all)
            shutil.rmtree(folder, ignore_errors=True)
