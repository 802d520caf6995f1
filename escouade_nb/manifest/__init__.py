"""Harness manifests (Escouade's ``escouade-plugin.json``, schema plugin-1): the pydantic
models (:mod:`.models`), where manifests are found (:mod:`.discovery`), the program and
its version (:mod:`.locate`), the project a folder belongs to (:mod:`.project`), and the ACP
registry's entries as data (:mod:`.registry`: the shipped copy, an entry checked into an install plan).

The bottom layer: it imports nothing else of escouade_nb.
"""

from .discovery import (ENTRY_POINT_GROUP, SHIPPED_PLUGINS_DIR, USER_PLUGINS_ENV, Discovery, HarnessRef, discover,
                        user_plugins_dir)
from .locate import install_hint, locate_program, read_version, version_status
from .models import (MANIFEST_FILENAME, AcpConfig, Author, Caps, Contributes, EscouadeCompat, Harness, Install,
                     LocalizedText, Locate, Manifest, ManifestError, ModeCap, ModelChoice, Permissions, Tested,
                     load_manifest, text)

__all__ = [
    "MANIFEST_FILENAME", "ENTRY_POINT_GROUP", "USER_PLUGINS_ENV", "SHIPPED_PLUGINS_DIR", "LocalizedText", "text",
    "ManifestError", "Author", "EscouadeCompat", "Locate", "Tested", "ModeCap", "Caps", "ModelChoice", "Install",
    "AcpConfig", "Harness", "Contributes", "Permissions", "Manifest", "load_manifest", "HarnessRef", "Discovery",
    "discover", "user_plugins_dir", "locate_program", "read_version", "version_status", "install_hint",
]
