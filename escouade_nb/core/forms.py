"""The forms of the agent's questions (ACP ``elicitation/create``, form mode): what a
requested schema asks for, and whether an answer meets it.

Answers are validated with ``jsonschema`` (the schema's own ``$schema`` dialect, else
JSON Schema 2020-12), formats included (``email``, ``uri``, ``date``, ``date-time``…,
as far as the installed ``jsonschema`` format checkers go). ``jsonschema`` is imported on
first use: its import takes ~0.7 s in a Jupyter environment (its format checkers), so
the engine imports it in a thread as soon as a form arrives (:func:`load`).

Pure and synchronous: no I/O.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["check", "errors", "field_label", "load", "parse_text", "required"]


def load() -> None:
    """Import ``jsonschema`` (at most once; call it in a thread ahead of :func:`check`)."""
    importlib.import_module("jsonschema")


def required(schema: dict[str, Any] | None) -> list[str]:
    """The names of the fields the schema requires (its ``required``), in its order."""
    return [str(f) for f in (schema or {}).get("required") or []]


def field_label(schema: dict[str, Any] | None, name: str) -> str:
    """What the form calls a field: its ``title``, else its name."""
    spec = ((schema or {}).get("properties") or {}).get(name) or {}
    return str(spec.get("title") or name)


def errors(schema: dict[str, Any] | None, content: dict[str, Any]) -> list[str]:
    """Every way ``content`` fails ``schema``, one line each naming its field
    (``"field 'replicas': 'three' is not of type 'integer'"``); ``[]`` when it meets it.
    A required field missing comes first, as ``"required field(s) missing: a, b"``. A
    schema that is not valid JSON Schema is not held against the answer: only its
    ``required`` list is checked (and a warning logged)."""
    schema = schema or {}
    out: list[str] = []
    missing = [f for f in required(schema) if f not in content]
    if missing:
        out.append(f"required field(s) missing: {', '.join(missing)}")
    from jsonschema import FormatChecker, exceptions, validators

    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as exc:
        log.warning("the agent's form schema is not valid JSON Schema (%s); only its required fields are checked",
                    exc.message)
        return out
    found = sorted(cls(schema, format_checker=FormatChecker()).iter_errors(content),
                   key=lambda e: [str(p) for p in e.absolute_path])
    for error in found:
        if error.validator == "required" and not error.absolute_path:
            continue  # said above, all at once
        path = list(error.absolute_path)
        where = f"field {path[0]!r}" + "".join(f"[{p!r}]" for p in path[1:]) if path else "the form"
        out.append(f"{where}: {error.message}")
    return out


def check(schema: dict[str, Any] | None, content: dict[str, Any]) -> None:
    """``ValueError`` (every failure, ``"; "``-joined, each naming its field) when
    ``content`` does not meet ``schema``."""
    problems = errors(schema, content)
    if problems:
        raise ValueError("; ".join(problems))


def parse_text(name: str, spec: dict[str, Any], text: str) -> Any:
    """What the user typed in a text box, as the value the field's schema ``type`` asks
    for: an ``int`` for ``integer``, an ``int`` or ``float`` for ``number``, the text for
    anything else. ``ValueError`` naming the field when it is not one."""
    kind = spec.get("type")
    text = text.strip() if kind in ("integer", "number") else text
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"field {name!r}: {text!r} is not an integer") from None
    if kind == "number":
        try:
            return int(text)
        except ValueError:
            pass
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"field {name!r}: {text!r} is not a number") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"field {name!r}: {text!r} is not a number JSON can carry")
        return value
    return text
