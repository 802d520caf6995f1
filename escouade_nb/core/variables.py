"""What a kernel variable is, said briefly: summaries of live values for the agent's tools
(``inspect_variable``, ``list_variables``, ``notebook_cells``) and for notebook context in
prompts. Pure and synchronous: values in, JSON-able dicts and text out.

Frames and arrays (pandas, numpy, polars, xarray, and anything shaped like them) are
recognised by duck typing — a ``shape`` of integers, then ``dtype``/``dtypes``/``columns``
/``head`` — and never imported here. Every look at a value is guarded: a ``repr`` or a
property that raises, a huge ``repr``, a ``len`` that lies, each gives a shorter summary,
never an exception.

What runs of the value's own code, exactly: ``repr`` (of the value; of each instance
attribute's value when ``attributes`` is asked), ``len``, the ``shape`` attribute, and for
values with a shape the ``dtype``, ``columns`` and ``dtypes`` attributes and ``head(rows)``
(or ``value[:rows]``) with the ``to_string()`` or ``repr`` of its result; ``vars(value)``
when ``attributes`` is asked (properties are never evaluated: their names are listed from
the class). Any of these may be slow or hang: these functions do not bound them — the
kernel's server runs them in worker threads with a time budget (``progress``, below, says
which look is under way), see :mod:`escouade_nb.kernel_mcp.server`.
"""

from __future__ import annotations

import reprlib
import sys
import types
from collections.abc import Container, Mapping, Sized
from typing import Any

__all__ = [
    "MAX_REPR",
    "summarize",
    "summary_text",
    "list_variables",
    "listed_names",
    "variable_row",
    "history_cells",
    "cells_of",
    "parse_cell_range",
    "type_name",
    "short_repr",
]

MAX_REPR = 2000
"""Characters of ``repr`` kept by default (the rest is cut, and the cut says so)."""
SUMMARY_REPR = 80
"""Characters of ``repr`` in a one-line summary."""
MAX_COLUMNS = 200
"""Columns (and dtypes) listed for a frame; the summary gives the full count."""
MAX_ATTRIBUTES = 200
"""Attributes listed when ``attributes=True``."""
MAX_OUTPUT = 2000
"""Characters of a cell's output (its ``repr``) kept by :func:`cells_of`."""
MAX_SOURCE = 20_000
"""Characters of a cell's source kept by :func:`cells_of`."""

_SCALARS = (int, float, complex, bool, type(None))
# What list_variables hides unless asked: modules, functions, classes, builtins.
_HIDDEN_KINDS = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
                 types.BuiltinMethodType, types.MethodWrapperType, types.WrapperDescriptorType)
# IPython's own names, for namespaces that come without ``user_ns_hidden`` (a plain dict).
_IPYTHON_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit"})


def _limited_repr(limit: int) -> reprlib.Repr:
    r = reprlib.Repr()
    r.maxlevel = 4
    r.maxdict = r.maxlist = r.maxtuple = r.maxset = r.maxfrozenset = r.maxdeque = r.maxarray = 50
    r.maxstring = r.maxother = max(10, min(limit, 200))  # each string or object inside a container
    r.maxlong = max(10, limit)
    return r


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how many there were in all."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [cut: {len(text):,} characters in all]"


def short_repr(value: object, limit: int = MAX_REPR) -> str:
    """``repr(value)`` cut to ``limit`` characters (a note says where it was cut).
    Built-in containers are shown by ``reprlib`` (at most 50 items per level, 4 levels
    deep) so a huge list is never rendered whole; strings and bytes are cut at their
    start. A ``repr`` that raises gives ``<TYPE object (repr failed: ERROR)>``."""
    try:
        if isinstance(value, (str, bytes, bytearray)):
            if len(value) > limit:
                return f"{value[:limit]!r}… [cut: {len(value):,} {'characters' if isinstance(value, str) else 'bytes'}]"
            return repr(value)
        if type(value) in (list, tuple, dict, set, frozenset) or isinstance(value, _SCALARS):
            text = _limited_repr(limit).repr(value)
        else:
            text = repr(value)
        if not isinstance(text, str):
            raise TypeError(f"__repr__ returned {type(text).__name__}")
    except Exception as exc:  # a broken __repr__ is the value's problem, not ours
        return f"<{type_name(value)} object (repr failed: {_error_text(exc)})>"
    return cut(text, limit)


def _error_text(exc: BaseException) -> str:
    try:
        message = str(exc)
    except Exception:
        message = ""
    name = type(exc).__name__
    return f"{name}: {message[:200]}" if message else name


def type_name(value: object) -> str:
    """``module.qualname`` of the value's type, shortened to the top-level package when
    that package exports the type under the same name (``pandas.DataFrame``, not
    ``pandas.core.frame.DataFrame``); built-ins are bare (``int``, ``dict``)."""
    cls = type(value)
    module = getattr(cls, "__module__", None) or ""
    qualname = getattr(cls, "__qualname__", None) or cls.__name__
    if module in ("builtins", ""):
        return qualname
    top = module.partition(".")[0]
    package = sys.modules.get(top)
    if package is not None and top != module:
        try:
            if getattr(package, qualname, None) is cls:
                return f"{top}.{qualname}"
        except Exception:
            pass
    return f"{module}.{qualname}"


def _safe(fn, default=None):
    try:
        return fn()
    except Exception:
        return default


def _shape(value: object) -> tuple[int, ...] | None:
    """A ``shape`` made of integers (numpy, pandas, polars, xarray, torch…), else None."""
    shape = _safe(lambda: getattr(value, "shape", None))
    if shape is None or isinstance(shape, (str, bytes)):
        return None
    try:
        dims = tuple(shape)
    except Exception:
        return None
    if len(dims) > 32 or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        # numpy ints are not int subclasses: accept anything index-like
        try:
            dims = tuple(int(d.__index__()) for d in dims)
        except Exception:
            return None
    return dims


def _len(value: object) -> int | None:
    if not isinstance(value, Sized):  # its type has ``__len__`` (an instance's own is not asked)
        return None
    n = _safe(lambda: len(value))
    return n if isinstance(n, int) else None


def _columns(value: object) -> list[str] | None:
    cols = _safe(lambda: getattr(value, "columns", None))
    if cols is None or isinstance(cols, (str, bytes)) or callable(cols):
        return None
    try:
        out = []
        for i, c in enumerate(cols):
            if i >= MAX_COLUMNS:
                break
            out.append(str(c))
        return out
    except Exception:
        return None


def _dtypes(value: object, columns: list[str] | None) -> dict[str, str] | None:
    """column -> dtype: pandas (a Series), xarray (a mapping), polars (a list, paired
    with ``columns``)."""
    dtypes = _safe(lambda: getattr(value, "dtypes", None))
    if dtypes is None or callable(dtypes) or isinstance(dtypes, (str, bytes)):
        return None
    try:
        items = getattr(dtypes, "items", None)
        if callable(items):
            out = {}
            for i, (k, v) in enumerate(items()):
                if i >= MAX_COLUMNS:
                    break
                out[str(k)] = str(v)
            return out or None
        if columns is not None:
            listed = [str(d) for _, d in zip(range(MAX_COLUMNS), dtypes, strict=False)]
            if len(listed) == len(columns):
                return dict(zip(columns, listed, strict=True))
    except Exception:
        return None
    return None


def _head(value: Any, rows: int, limit: int) -> str | None:
    """The first ``rows`` rows as text: ``head(rows)`` of a frame-like value (rendered
    by its ``to_string`` when it has one, else its repr), or ``value[:rows]`` of an
    array-like one. Only asked of values with a shape (never of arbitrary objects, whose
    ``head`` may do anything)."""
    head = _safe(lambda: getattr(value, "head", None))
    try:
        if callable(head):
            part = head(rows)
        elif hasattr(type(value), "__getitem__"):
            part = value[:rows]
        else:
            return None
        to_string = getattr(part, "to_string", None)
        text = to_string() if callable(to_string) else repr(part)
        return cut(text, limit) if isinstance(text, str) else None
    except Exception:
        return None


def _attributes(value: object) -> tuple[dict[str, str], int]:
    """Public attributes without running properties: the instance's own ``__dict__``
    (type and short repr of each) then the class's members (``method``, ``property``,
    or the class attribute's type). (entries, how many in all)."""
    out: dict[str, str] = {}
    total = 0
    own = _safe(lambda: vars(value), {}) or {}
    seen: set[str] = set()
    try:
        for name, attr in list(own.items()):
            if not isinstance(name, str) or name.startswith("_"):
                continue
            seen.add(name)
            total += 1
            if len(out) < MAX_ATTRIBUTES:
                out[name] = f"{type_name(attr)}: {short_repr(attr, SUMMARY_REPR)}"
    except Exception:
        pass
    for klass in _safe(lambda: type(value).__mro__, ()) or ():
        if klass is object:
            continue
        for name, member in list(_safe(lambda k=klass: vars(k), {}).items()):
            if not isinstance(name, str) or name.startswith("_") or name in seen:
                continue
            seen.add(name)
            total += 1
            if len(out) >= MAX_ATTRIBUTES:
                continue
            if isinstance(member, property) or type(member).__name__ in ("cached_property", "getset_descriptor",
                                                                           "member_descriptor"):
                out[name] = "property"
            elif isinstance(member, (staticmethod, classmethod)) or callable(member):
                out[name] = "method"
            else:
                out[name] = f"class attribute, {type_name(member)}"
    return out, total


def _one_line(text: str, limit: int = SUMMARY_REPR) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _summary(value: object, d: dict[str, Any]) -> str:
    """One line from what :func:`summarize` found (``d["repr"]`` is already computed:
    a ``repr`` is never asked twice)."""
    kind = d["type"].rpartition(".")[2]
    shape = d.get("shape")
    if shape == []:  # a 0-d array or a numpy scalar
        return f"{kind} = {_one_line(d['repr'])}"
    if shape is not None:
        dims = "×".join(f"{n:,}" for n in shape) if shape else "scalar"
        parts = [f"{kind} {dims}"]
        if "dtype" in d:
            parts.append(d["dtype"])
        cols = d.get("columns")
        if cols is not None:
            dtypes = d.get("dtypes") or {}
            shown = [f"{c}: {dtypes[c]}" if c in dtypes else c for c in cols[:6]]
            more = (shape[1] if len(shape) > 1 else len(cols)) - len(shown)
            parts.append("columns " + ", ".join(shown) + (f", … {more:,} more" if more > 0 else ""))
        return _one_line(", ".join(parts), 200)
    if isinstance(value, str):
        return f"str, {len(value):,} characters: {_one_line(repr(value[:60]))}{'…' if len(value) > 60 else ''}"
    if isinstance(value, (bytes, bytearray)):
        return f"{kind}, {len(value):,} bytes"
    if isinstance(value, _SCALARS):
        return f"{kind} = {_one_line(d['repr'])}"
    if "len" in d:
        noun = ("key" if isinstance(value, Mapping) else "item") + ("" if d["len"] == 1 else "s")
        return f"{kind}, {d['len']:,} {noun}: {_one_line(d['repr'])}"
    return f"{kind}: {_one_line(d['repr'])}"


def summarize(name: str, value: object, *, rows: int = 5, max_repr: int = MAX_REPR,
              attributes: bool = False, progress: dict[str, Any] | None = None) -> dict[str, Any]:
    """A JSON-able description of one value.

    Keys: ``name``, ``type`` (``module.qualname``, see :func:`type_name`), ``summary``
    (one line), ``repr`` (cut to ``max_repr`` characters; not when ``head`` is there: the
    head says it, and a frame's repr would format it again); when they apply: ``len``,
    ``shape`` (list of ints), ``dtype`` (str), ``columns`` (list of str, at most 200),
    ``dtypes`` (column -> dtype str), ``head`` (the first ``rows`` rows as text, for
    values with a shape), ``attributes`` (name -> short description, when asked) with
    ``attributes_total`` when more exist than are listed.

    ``rows`` must be ≥ 0 and ``max_repr`` ≥ 1 (``ValueError`` otherwise). Never raises
    because of the value itself.

    ``progress`` (a dict, for a caller in another thread that may stop waiting): set to
    ``{"found": the description filled so far, "step": the look under way}`` as the
    looks go — ``step`` is one of ``"type"``, ``"len"``, ``"shape"``, ``"dtype"``,
    ``"columns"``, ``"dtypes"``, ``"head"``, ``"repr"``, ``"attributes"``, then None."""
    if not isinstance(rows, int) or rows < 0:
        raise ValueError(f"rows must be an integer ≥ 0, got {rows!r}")
    if not isinstance(max_repr, int) or max_repr < 1:
        raise ValueError(f"max_repr must be an integer ≥ 1, got {max_repr!r}")
    d: dict[str, Any] = {"name": name}
    step = _stepper(d, progress)
    step("type")
    d["type"] = type_name(value)
    step("len")
    n = _len(value)
    if n is not None:
        d["len"] = n
    step("shape")
    shape = None if isinstance(value, (str, bytes, bytearray, Mapping, list, tuple, set, frozenset)) else _shape(value)
    if shape is not None:
        d["shape"] = list(shape)
        step("dtype")
        dtype = _safe(lambda: getattr(value, "dtype", None))
        if dtype is not None and not callable(dtype):
            d["dtype"] = _safe(lambda: str(dtype), "?")
        step("columns")
        columns = _columns(value)
        if columns is not None:
            d["columns"] = columns
        step("dtypes")
        dtypes = _dtypes(value, columns)
        if dtypes is not None:
            d["dtypes"] = dtypes
        if rows and shape:
            step("head")
            head = _head(value, rows, max_repr)
            if head is not None:
                d["head"] = head
    if "head" not in d:  # the head says it: a frame's repr would format it again (~0.5 ms for a 1,000-row one)
        step("repr")
        d["repr"] = short_repr(value, max_repr)
    d["summary"] = _summary(value, d)
    if attributes:
        step("attributes")
        attrs, total = _attributes(value)
        d["attributes"] = attrs
        if total > len(attrs):
            d["attributes_total"] = total
    step(None)
    return d


def _stepper(d: dict[str, Any], progress: dict[str, Any] | None):
    if progress is None:
        return lambda name: None
    progress["found"] = d
    progress["step"] = None

    def step(name: str | None) -> None:
        progress["step"] = name

    return step


def summary_text(d: Mapping[str, Any]) -> str:
    """The description of :func:`summarize` as readable text: a title line
    ``NAME: TYPE``, the summary, shape/dtype/columns when known, then ``head`` for
    values that have one, else the cut ``repr``, then the attributes when asked."""
    lines = [f"{d['name']}: {d['type']}", str(d["summary"])]
    if "len" in d and "shape" not in d:
        lines.append(f"len: {d['len']:,}")
    if "shape" in d:
        lines.append(f"shape: ({', '.join(str(n) for n in d['shape'])}{',' if len(d['shape']) == 1 else ''})")
    if "dtype" in d:
        lines.append(f"dtype: {d['dtype']}")
    if "dtypes" in d:
        lines.append("dtypes:")
        lines += [f"  {c}: {t}" for c, t in d["dtypes"].items()]
    elif "columns" in d:
        lines.append("columns: " + ", ".join(d["columns"]))
    if "head" in d:
        lines += ["head:", d["head"]]
    else:
        lines += ["repr:", str(d.get("repr", ""))]
    if "attributes" in d:
        more = d.get("attributes_total")
        lines.append("attributes" + (f" (first {len(d['attributes'])} of {more}):" if more else ":"))
        lines += [f"  {k}: {v}" for k, v in d["attributes"].items()] or ["  (none)"]
    return "\n".join(lines)


def list_variables(ns: Mapping[str, Any], hidden: Container[str] = (), *,
                   include_all: bool = False) -> list[dict[str, str]]:
    """The user's variables, in the namespace's order: ``[{"name", "type", "summary"}]``.

    Skipped unless ``include_all``: names starting with ``_``, modules, functions,
    classes and other callables' types, the names in ``hidden`` (IPython's
    ``user_ns_hidden``), and IPython's ``In``/``Out``/``get_ipython``/``exit``/``quit``.
    :func:`listed_names` then :func:`variable_row` for each."""
    out = []
    for name, value in listed_names(ns, hidden, include_all=include_all):
        row = variable_row(name, value, include_all=include_all)
        if row is not None:
            out.append(row)
    return out


def listed_names(ns: Mapping[str, Any], hidden: Container[str] = (), *,
                 include_all: bool = False) -> list[tuple[str, Any]]:
    """``[(name, value)]`` of the namespace whose *name* may be listed (see
    :func:`list_variables`): no look at the values, so no code of theirs runs."""
    out = []
    for name, value in list(ns.items()):
        if not isinstance(name, str):
            continue
        if not include_all and (name.startswith("_") or name in _IPYTHON_NAMES
                                or _safe(lambda n=name: n in hidden, False)):
            continue
        out.append((name, value))
    return out


def variable_row(name: str, value: object, *, include_all: bool = False,
                 progress: dict[str, Any] | None = None) -> dict[str, str] | None:
    """One row of :func:`list_variables`, ``{"name", "type", "summary"}``, or None for a
    module, function, class… unless ``include_all`` (an ``isinstance`` check, which may
    read the value's ``__class__``). ``progress`` as for :func:`summarize`."""
    if not include_all and _safe(lambda: isinstance(value, _HIDDEN_KINDS), False):
        return None
    d = summarize(name, value, rows=0, max_repr=SUMMARY_REPR, progress=progress)
    return {"name": name, "type": d["type"], "summary": d["summary"]}


def _cell_window(counts: list[int], start: int | None, end: int | None) -> list[int]:
    """Execution counts from ``start`` to ``end`` inclusive; a negative bound counts from
    the last cell (-1 is the last)."""
    if not counts:
        return []
    last = counts[-1]

    lo = cell_bound(start, counts[0], last, "execution counts (integers)")
    hi = cell_bound(end, last, last, "execution counts (integers)")
    return [c for c in counts if lo <= c <= hi]


def history_cells(ns: Mapping[str, Any], *, start: int | None = None,
                  end: int | None = None) -> list[dict[str, Any]]:
    """The cells run in this kernel, from IPython's history in the namespace, without a
    look at their results: ``[{"execution_count": int, "source": str (cut to
    ``MAX_SOURCE``), "value": the result (only when ``Out`` has one)}]``. Bounds and
    errors as :func:`cells_of`."""
    inputs = ns.get("In")
    outputs = ns.get("Out")
    if not isinstance(inputs, list):
        return []
    if not isinstance(outputs, Mapping):
        outputs = {}
    counts = [i for i in range(1, len(inputs)) if isinstance(inputs[i], str)]
    cells = []
    for count in _cell_window(counts, start, end):
        source = inputs[count]
        if len(source) > MAX_SOURCE:
            source = cut(source, MAX_SOURCE)
        cell: dict[str, Any] = {"execution_count": count, "source": source}
        if count in outputs:
            cell["value"] = outputs[count]
        cells.append(cell)
    return cells


def cells_of(ns: Mapping[str, Any], *, start: int | None = None, end: int | None = None,
             max_output: int = MAX_OUTPUT) -> list[dict[str, Any]]:
    """The cells run in this kernel, from IPython's history in the namespace:
    ``ns["In"]`` (a list whose index is the execution count) and ``ns["Out"]`` (a dict
    execution count -> value). ``[{"execution_count": int, "source": str, "output":
    text (the value's repr, cut to ``max_output``) or None}]`` for counts ``start`` to
    ``end`` inclusive (negative: from the last cell, -1 is the last). Outputs that were
    only printed are not in ``Out`` (IPython keeps results only). Empty when the
    namespace has no ``In`` list (not IPython). ``ValueError`` for non-integer bounds."""
    return [{"execution_count": c["execution_count"], "source": c["source"],
             "output": short_repr(c["value"], max_output) if "value" in c else None}
            for c in history_cells(ns, start=start, end=end)]


def parse_cell_range(text: str) -> list[int]:
    """Execution counts of ``"3"``, ``"3-5"`` or ``"3,5,7-9"`` (spaces allowed), in
    the order given, each once. ``ValueError`` naming the bad part for anything else
    (empty, not a number, 0 or less, a range that goes down)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"cell range {text!r}: empty; give cells like 3, 3-5 or 3,5,7-9")
    out: list[int] = []
    seen: set[int] = set()
    for raw in text.split(","):
        part = raw.strip()
        lo_text, dash, hi_text = part.partition("-")
        try:
            lo = int(lo_text.strip())
            hi = int(hi_text.strip()) if dash else lo
        except ValueError:
            raise ValueError(f"cell range {text!r}: {part!r} is not a cell number or a range like 3-5") from None
        if lo < 1 or hi < 1:
            raise ValueError(f"cell range {text!r}: {part!r}: cells are numbered from 1")
        if hi < lo:
            raise ValueError(f"cell range {text!r}: {part!r} goes down; write {hi}-{lo}")
        if hi - lo > 100_000:
            raise ValueError(f"cell range {text!r}: {part!r} spans more than 100,000 cells")
        for n in range(lo, hi + 1):
            if n not in seen:
                seen.add(n)
                out.append(n)
    return out


def cell_bound(value: int | None, default: int, last: int, what: str) -> int:
    """A cell range bound: ``default`` when None, counted from ``last`` when negative
    (-1 is ``last``); ``ValueError`` naming ``what`` bounds are for a non-integer."""
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"cell bounds are {what}, got {value!r}")
    return last + 1 + value if value < 0 else value
