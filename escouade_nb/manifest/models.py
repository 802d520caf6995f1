"""Escouade plugin manifests (``escouade-plugin.json``, schema ``plugin-1``).

The format is Escouade's plugin-1 manifest, unchanged: a JSON object with
``$schema``, ``id``, ``name``, ``version``, ``description``, ``author``,
``license``, ``repository``, ``escouade`` {api, min}, ``contributes`` and,
for rule plugins, ``permissions``.  Each entry of ``contributes.harnesses``
that carries an ``acp`` object is a *described harness*: an ACP agent that
escouade_nb can locate, launch and talk to without any code.

Only ``id`` and ``name`` of a plugin and ``id`` of a harness are required;
everything else is optional.  Unknown keys, at any level, are kept (reachable
as attributes and through ``model_extra``) and never rejected, so a manifest
written for a newer Escouade still loads.

Python attributes are snake_case (``harness.version_args``,
``harness.acp.remove_env``); the JSON keys are camelCase.  Use
:meth:`Manifest.to_dict` (or ``model_dump(by_alias=True)``) to get the JSON
shape back.

:func:`load_manifest` reads one file, raising :class:`ManifestError`. Discovery
is in :mod:`.discovery`, program lookup and versions in :mod:`.locate`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from .._errors import EscouadeError

MANIFEST_FILENAME = "escouade-plugin.json"
"""Name of the manifest file inside a plugin folder."""

Source = Literal["shipped", "user", "entry-point", "extra"]

# --------------------------------------------------------------------------
# Localised text

LocalizedText = str | dict[str, str]
"""A plain string, or a per-language map such as ``{"en": ..., "fr": ...}``."""


def text(value: str | Mapping[str, str] | None, lang: str = "en") -> str | None:
    """Pick the text of *value* for *lang*.

    A string is returned as is.  For a per-language map, tries *lang*, then
    its base language (``"fr"`` for ``"fr-CA"``), then ``"en"``, then the
    first value.  ``None`` or an empty map gives ``None``.
    """
    if value is None or isinstance(value, str):
        return value
    if not value:
        return None
    candidates = [lang]
    if "-" in lang or "_" in lang:
        candidates.append(re.split(r"[-_]", lang, maxsplit=1)[0])
    candidates.append("en")
    for key in candidates:
        if key in value:
            return value[key]
    return next(iter(value.values()))


# --------------------------------------------------------------------------
# Errors


class ManifestError(EscouadeError):
    """A manifest that cannot be read or does not match plugin-1.

    Attributes:
        path: the manifest file (or a description of the source, for an
            entry point that failed to load).
        field: dotted path of the faulty field, such as
            ``contributes.harnesses[0].locate.names``, or ``None`` when the
            error is not about one field (unreadable file, JSON syntax).
        message: what is wrong, on one line.
        line, column: position of a JSON syntax error, else ``None``.

    ``str(err)`` is one line: ``<file>: <field>: <message>`` (or
    ``<file>: <message>`` without a field).

    ``harness_ids``: the harness ids the file names (``contributes.harnesses[*].id``)
    when it is JSON at all, so that a harness it fails to define can be traced to it.
    """

    harness_ids: tuple[str, ...] = ()

    def __init__(
        self,
        path: Path | str,
        field: str | None,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        super().__init__(path, field, message)
        self.path = path
        self.field = field or None
        self.message = " ".join(str(message).split())
        self.line = line
        self.column = column

    def __str__(self) -> str:
        if self.field:
            return f"{self.path}: {self.field}: {self.message}"
        return f"{self.path}: {self.message}"

    def __reduce__(self):  # keep keyword-only attributes when pickled
        return (
            _rebuild_manifest_error,
            (self.path, self.field, self.message, self.line, self.column),
        )


def _rebuild_manifest_error(path, field, message, line, column) -> ManifestError:
    return ManifestError(path, field, message, line=line, column=column)


# --------------------------------------------------------------------------
# Models


class _Model(BaseModel):
    """Base of the manifest models: camelCase keys, unknown keys kept."""

    model_config = ConfigDict(
        extra="allow",
        populate_by_name=True,
        alias_generator=to_camel,
        protected_namespaces=(),
    )


def _check_program_name(name: str) -> str:
    if not name.strip():
        raise ValueError("a program name cannot be empty")
    if "/" in name or "\\" in name:
        raise ValueError(
            f"program name {name!r} contains a path separator; a manifest gives "
            "program names looked up on the PATH, never a path"
        )
    return name


ProgramName = Annotated[str, AfterValidator(_check_program_name)]

_STATE_FOLDER = re.compile(r"^(~|\$\{[A-Za-z_][A-Za-z0-9_]*(:-~(/[^/${}]+)*)?\})(/[^/${}]+)*$")


def check_state_folder(spec: str) -> str:
    """An ``acp.stateFolders`` entry: ``~/PATH``, ``${VAR}[/PATH]`` or
    ``${VAR:-~/PATH}[/PATH]`` (no ``.`` or ``..`` part, not the home folder itself);
    ``ValueError`` otherwise."""
    if not _STATE_FOLDER.match(spec) or spec in ("~", "~/"):
        raise ValueError(f"state folder {spec!r} must be ~/PATH, ${{VAR}}/PATH or ${{VAR:-~/PATH}}/PATH "
                         "(a folder of the agent's own, never the home folder itself)")
    if any(part in (".", "..") for part in re.split(r"[/}]", spec)):
        raise ValueError(f"state folder {spec!r}: no '.' or '..' part")
    return spec


StateFolder = Annotated[str, AfterValidator(check_state_folder)]


class Author(_Model):
    """``author``: ``{name, url, ...}``."""

    name: str | None = None
    url: str | None = None


class EscouadeCompat(_Model):
    """``escouade``: ``{api, min}``, the plugin API and the oldest Escouade."""

    api: str | None = None
    min: str | None = None


class Locate(_Model):
    """``locate``: ``{names: [program names]}`` looked for on the PATH.

    A name containing ``/`` or ``\\`` is rejected: a manifest never gives a
    path.
    """

    names: list[ProgramName] = Field(default_factory=list)


class Tested(_Model):
    """``tested``: ``{oldest, newest}``, the versions the manifest was tried with."""

    oldest: str | None = None
    newest: str | None = None


class ModeCap(_Model):
    """One mode of ``caps.modes`` in its object shape: ``{id, meaning}``.

    ``meaning`` (what the menu of modes says) is a string or a per-language
    map.  A mode given as a bare string id is normalised to a ``ModeCap``
    without meaning by :meth:`Harness.mode_caps`.
    """

    id: str = Field(min_length=1)
    meaning: LocalizedText | None = None

    def meaning_text(self, lang: str = "en") -> str | None:
        """The meaning in *lang* (see :func:`text`), or ``None``."""
        return text(self.meaning, lang)


class Caps(_Model):
    """``caps``: its modes and what it can do.

    ``modes`` items are a string id or a :class:`ModeCap`.  ``readOnly``,
    ``images`` and ``pdf`` default to ``False`` ("what is not said, it does
    not do"); other capability flags are kept as extra attributes.
    """

    modes: list[Annotated[str, Field(min_length=1)] | ModeCap] = Field(default_factory=list)
    read_only: bool = False
    images: bool = False
    pdf: bool = False

    def flag(self, name: str) -> bool:
        """Value of capability *name* (camelCase key or snake_case attribute),
        ``False`` when not said."""
        if name in type(self).model_fields:
            return bool(getattr(self, name))
        for field_name, info in type(self).model_fields.items():
            if info.alias == name:
                return bool(getattr(self, field_name))
        return bool((self.model_extra or {}).get(name, False))


class ModelChoice(_Model):
    """An entry of ``models``: ``{id, label}``."""

    id: str = Field(min_length=1)
    label: LocalizedText | None = None

    def label_text(self, lang: str = "en") -> str:
        """The label in *lang*, falling back to the id."""
        return text(self.label, lang) or self.id


class Install(_Model):
    """``install``: the install command per OS, ``{windows, unix}``."""

    windows: str | None = None
    unix: str | None = None


class AcpConfig(_Model):
    """The ``acp`` object of a described harness.

    * ``args``: arguments of the program (``["acp"]``);
    * ``env`` / ``removeEnv``: variables set for it (never secrets) and
      variables of the app it must not get;
    * ``fs``: it reads and writes files through the client (default true);
    * ``modes``: Escouade mode -> ACP mode id (``session/set_mode``);
    * ``readOnlyMode``: the ACP mode that changes nothing;
    * ``modelOption``: the config option of the model
      (``session/set_config_option``), else ``session/set_model``;
    * ``questionsInText``: questions come as an ``<escouade_question>`` block
      at the end of a turn (default false);
    * ``tools``: agent tool name -> Claude Code tool name;
      ``subagentTools``: tools that start a subagent;
    * ``extensions``: vendor extensions (``"cursor"`` for ``cursor/*``);
    * ``mcpInArgv``: the agent puts the ``mcpServers`` entries it is given
      (an HTTP entry's ``headers``, a stdio entry's ``env``) on the command line
      of a process it starts, where every local user reads them in
      ``/proc/PID/cmdline`` (claude-agent 0.23.1: its SDK runs Claude Code with
      ``--mcp-config <json>``). Default false. When true the kernel's MCP server
      goes to it as the stdio bridge whose token is in a 0600 file (the entry
      carries only the file's path), never as an HTTP entry with the token in a
      header. Measured for each shipped agent by scanning the ``cmdline`` and
      ``environ`` of its whole process tree during a kernel-tool call.
    * ``stateFolders``: the folders the agent writes its own state in (config,
      sessions, logs, caches), the only ones outside its session folder and a
      private ``/tmp`` that it may write under ``--sandbox``: ``~/PATH``,
      ``${VAR}/PATH`` or ``${VAR:-~/PATH}/PATH`` (``~`` is the agent's ``HOME``;
      ``${CODEX_HOME:-~/.codex}``: the variable when set, else the default).
      Measured for each shipped agent (docs/real-agents.md).
    """

    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    remove_env: list[str] = Field(default_factory=list)
    fs: bool = True
    modes: dict[str, str] = Field(default_factory=dict)
    read_only_mode: str | None = None
    model_option: str | None = None
    questions_in_text: bool = False
    tools: dict[str, str] = Field(default_factory=dict)
    subagent_tools: list[str] = Field(default_factory=list)
    extensions: str | list[str] | None = None
    mcp_in_argv: bool = False
    state_folders: list[StateFolder] = Field(default_factory=list)

    def extension_names(self) -> list[str]:
        """``extensions`` as a list (empty when not given)."""
        if self.extensions is None:
            return []
        if isinstance(self.extensions, str):
            return [self.extensions]
        return list(self.extensions)


class Harness(_Model):
    """An entry of ``contributes.harnesses``.

    Only ``id`` is required.  ``versionArgs`` defaults to ``["--version"]``.
    The harness is a *described* ACP harness when it has an ``acp`` object
    (:attr:`is_described`).
    """

    id: str = Field(min_length=1)
    name: str | None = None
    speaker: str | None = None
    writer: str | None = None
    locate: Locate = Field(default_factory=Locate)
    version_args: list[str] = Field(default_factory=lambda: ["--version"])
    tested: Tested | None = None
    caps: Caps = Field(default_factory=Caps)
    models: list[ModelChoice] = Field(default_factory=list)
    account_var: str | None = None
    install: Install | None = None
    update_command: str | None = None
    acp: AcpConfig | None = None

    @property
    def is_described(self) -> bool:
        """True when the harness has an ``acp`` object."""
        return self.acp is not None

    @property
    def display_name(self) -> str:
        """``name``, falling back to ``id``."""
        return self.name or self.id

    def mode_caps(self) -> list[ModeCap]:
        """``caps.modes`` with bare string ids turned into :class:`ModeCap`."""
        return [m if isinstance(m, ModeCap) else ModeCap(id=m) for m in self.caps.modes]


class Contributes(_Model):
    """``contributes``: ``{harnesses: [...], ...}``; other kinds are kept."""

    harnesses: list[Harness] = Field(default_factory=list)


class Permissions(_Model):
    """Top-level ``permissions`` of a rule plugin, e.g. ``{"decide": true}``."""

    decide: bool = False


class Manifest(_Model):
    """An ``escouade-plugin.json`` (Escouade plugin-1).

    Only ``id`` and ``name`` are required.  ``description`` is a string or a
    per-language map (see :meth:`description_text`).
    """

    schema_uri: str | None = Field(default=None, alias="$schema")
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    version: str | None = None
    description: LocalizedText | None = None
    author: Author | None = None
    license: str | None = None
    repository: str | None = None
    escouade: EscouadeCompat | None = None
    contributes: Contributes = Field(default_factory=Contributes)
    permissions: Permissions | None = None

    def description_text(self, lang: str = "en") -> str | None:
        """The description in *lang* (see :func:`text`)."""
        return text(self.description, lang)

    def described_harnesses(self) -> list[Harness]:
        """The harnesses that have an ``acp`` object."""
        return [h for h in self.contributes.harnesses if h.is_described]

    def harness(self, harness_id: str) -> Harness:
        """The harness of id *harness_id*; raises ``KeyError`` if absent."""
        for h in self.contributes.harnesses:
            if h.id == harness_id:
                return h
        raise KeyError(harness_id)

    def to_dict(self) -> dict[str, Any]:
        """The manifest as JSON data: camelCase keys, only keys that were set
        (plus unknown keys), so a loaded file round-trips."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


# --------------------------------------------------------------------------
# Loading

_PLAIN_KEY = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]*$")


def _format_loc(parts: Iterable[str | int]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out


def _field_parts(loc: tuple[str | int, ...], data: Any, error_type: str) -> tuple[str | int, ...]:
    """Turn a pydantic ``loc`` into the path of the *input* data.

    pydantic inserts union member tags (``str``, ``dict[str,str]``,
    ``ModeCap``...) into ``loc``; they are dropped by walking the input data
    alongside: a key is kept when the data has it (or when it is the missing
    field), an index when the data is a list.
    """
    parts: list[str | int] = []
    current: Any = data
    last = len(loc) - 1
    for i, key in enumerate(loc):
        if isinstance(key, int) and isinstance(current, list) and 0 <= key < len(current):
            parts.append(key)
            current = current[key]
        elif isinstance(key, str) and isinstance(current, dict) and key in current:
            parts.append(key)
            current = current[key]
        elif i == last and error_type == "missing" and isinstance(key, str):
            parts.append(key)
        else:
            continue  # a union tag, or a position the input does not have
    return tuple(parts)


def _clean_msg(msg: str) -> str:
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    return msg


def _error_from_validation(path: Path, exc: ValidationError, data: Any) -> ManifestError:
    """One :class:`ManifestError` from a pydantic error list.

    When a union fails, pydantic reports every alternative; an error whose
    path is a strict prefix of another one's (``modes[1]`` "should be a
    string" beside ``modes[1].meaning.en``) is the less precise one and is
    dropped.  The first remaining field is reported, its alternatives joined
    by "or", and the count of other faulty fields appended.
    """
    if not isinstance(data, dict):
        return ManifestError(path, None, "a manifest must be a JSON object")
    located = [
        (_field_parts(tuple(e["loc"]), data, e["type"]), e)
        for e in exc.errors(include_url=False)
    ]
    paths = {p for p, _ in located}
    precise = [
        (p, e)
        for p, e in located
        if not any(len(o) > len(p) and o[: len(p)] == p for o in paths)
    ] or located
    first = precise[0][0]
    messages: list[str] = []
    for p, e in precise:
        if p != first:
            continue
        msg = "field required" if e["type"] == "missing" else _clean_msg(e["msg"])
        if msg not in messages:
            messages.append(msg)
    message = " or ".join(messages)
    others = len({p for p, _ in precise} - {first})
    if others:
        message += f" (and {others} more field error{'s' if others > 1 else ''})"
    return ManifestError(path, _format_loc(first) or None, message)


def _harness_ids_in(data: Any) -> tuple[str, ...]:
    """The harness ids a manifest's JSON names, valid or not (best effort)."""
    contributes = data.get("contributes") if isinstance(data, dict) else None
    harnesses = contributes.get("harnesses") if isinstance(contributes, dict) else None
    if not isinstance(harnesses, list):
        return ()
    return tuple(h["id"] for h in harnesses if isinstance(h, dict) and isinstance(h.get("id"), str))


def load_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read and validate one ``escouade-plugin.json`` (Escouade plugin-1).

    Returns the :class:`Manifest`.  Raises :class:`ManifestError` when the
    file cannot be read, is not valid JSON (the message gives line and
    column), does not match the format (the error names the field path, such
    as ``contributes.harnesses[0].locate.names``), or defines the same
    harness id twice.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ManifestError(path, None, f"cannot read: {exc.strerror or exc}") from exc
    try:
        source = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ManifestError(path, None, f"not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
    try:
        data = json.loads(source)
    except json.JSONDecodeError as exc:
        raise ManifestError(
            path,
            None,
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
            line=exc.lineno,
            column=exc.colno,
        ) from exc
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        error = _error_from_validation(path, exc, data)
        error.harness_ids = _harness_ids_in(data)
        raise error from None
    seen: set[str] = set()
    for i, harness in enumerate(manifest.contributes.harnesses):
        if harness.id in seen:
            raise ManifestError(
                path,
                f"contributes.harnesses[{i}].id",
                f"harness id {harness.id!r} is defined twice in this manifest",
            )
        seen.add(harness.id)
    return manifest


