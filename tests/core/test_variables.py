"""core/variables and core/notebook against real values: pandas frames and series, numpy
arrays and scalars, containers, big strings, objects whose repr raises or is huge."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from escouade_nb.core.notebook import NotebookRef, file_cells, kernel_notebook, output_text
from escouade_nb.core.variables import (
    cells_of,
    history_cells,
    list_variables,
    listed_names,
    parse_cell_range,
    short_repr,
    summarize,
    summary_text,
    type_name,
    variable_row,
)


@pytest.fixture
def df() -> pd.DataFrame:
    return pd.DataFrame({"region": ["north", "south", "east", "west"] * 25,
                         "revenue": np.arange(100, dtype="float64"), "units": np.arange(100, dtype="int64")})


def test_a_dataframe(df):
    d = summarize("df", df)
    assert d["type"] == "pandas.DataFrame"
    assert d["shape"] == [100, 3] and d["len"] == 100
    assert d["columns"] == ["region", "revenue", "units"]
    assert d["dtypes"]["revenue"] == "float64" and d["dtypes"]["units"] == "int64"
    assert d["head"].splitlines()[0].split() == ["region", "revenue", "units"]
    assert len(d["head"].splitlines()) == 6  # header + 5 rows
    assert d["summary"] == "DataFrame 100×3, columns region: " + d["dtypes"]["region"] + ", revenue: float64, units: int64"
    json.dumps(d)  # JSON-able
    text = summary_text(d)
    assert text.startswith("df: pandas.DataFrame\nDataFrame 100×3")
    assert "shape: (100, 3)" in text and "  revenue: float64" in text and "head:" in text
    assert "repr:" not in text and "repr" not in d  # the head says it (the frame is not formatted twice)
    assert len(summarize("df", df, rows=2)["head"].splitlines()) == 3
    assert "head" not in summarize("df", df, rows=0)


def test_a_wide_frame_lists_its_columns_up_to_a_limit():
    wide = pd.DataFrame(np.zeros((2, 300)), columns=[f"c{i}" for i in range(300)])
    d = summarize("wide", wide, rows=1)
    assert d["shape"] == [2, 300] and len(d["columns"]) == 200 and len(d["dtypes"]) == 200
    assert d["summary"].endswith("… 294 more")


def test_a_series_and_numpy_values(df):
    s = summarize("s", df["revenue"])
    assert s["type"] == "pandas.Series" and s["shape"] == [100] and s["dtype"] == "float64"
    assert "columns" not in s and s["head"].splitlines()[0].split() == ["0", "0.0"]
    a = summarize("a", np.arange(12.0).reshape(3, 4))
    assert a["type"] == "numpy.ndarray" and a["shape"] == [3, 4] and a["dtype"] == "float64"
    assert a["summary"] == "ndarray 3×4, float64" and a["head"].startswith("array([[ 0.,  1.,  2.,  3.]")
    big = summarize("big", np.zeros(10**6))
    assert len(big["head"]) < 200 and big["summary"] == "ndarray 1,000,000, float64"
    assert "repr" not in big  # the head says it: no second formatting
    assert len(summarize("big", np.zeros(10**6), rows=0)["repr"]) < 200
    scalar = summarize("x", np.float64(2.5))
    assert scalar["shape"] == [] and scalar["summary"].startswith("float64 = ") and "head" not in scalar


def test_containers_and_scalars():
    d = summarize("d", {"a": 1, "b": [1, 2]})
    assert d["type"] == "dict" and d["len"] == 2 and d["summary"] == "dict, 2 keys: {'a': 1, 'b': [1, 2]}"
    assert "shape" not in d
    one = summarize("one", {"k": 1})
    assert one["summary"].startswith("dict, 1 key:")
    big_list = summarize("l", list(range(100_000)))
    assert big_list["len"] == 100_000 and big_list["repr"].endswith(", ...]") and len(big_list["repr"]) < 400
    nested = summarize("n", [[[[[["deep"]]]]]])
    assert "[...]" in nested["repr"]
    assert summarize("n", 42)["summary"] == "int = 42"
    assert summarize("f", 0.5)["summary"] == "float = 0.5"
    assert summarize("z", None)["summary"] == "NoneType = None"
    assert summarize("t", (1, 2))["summary"] == "tuple, 2 items: (1, 2)"


def test_big_strings_and_bytes_are_cut_at_their_start():
    text = "abc" + "x" * 1_000_000
    d = summarize("text", text)
    assert d["len"] == 1_000_003
    assert d["repr"].startswith("'abcx") and d["repr"].endswith("[cut: 1,000,003 characters]")
    assert len(d["repr"]) < 2100
    assert d["summary"].startswith("str, 1,000,003 characters: 'abcx") and d["summary"].endswith("…")
    b = summarize("b", b"\x00" * 5000, max_repr=100)
    assert b["summary"] == "bytes, 5,000 bytes" and b["repr"].endswith("[cut: 5,000 bytes]")


class ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


class HugeRepr:
    tag = "class-level"

    def __init__(self) -> None:
        self.size = 3
        self._private = 1

    @property
    def expensive(self) -> int:
        raise AssertionError("a property must never be evaluated")

    def method(self) -> None:
        pass

    def __repr__(self) -> str:
        return "H" * 5_000_000


class LyingLen:
    def __len__(self) -> int:
        raise TypeError("no len")

    @property
    def shape(self) -> tuple:
        raise RuntimeError("no shape either")


class FakeShaped:
    """Shaped like a frame, with a head() that must not be called when shape is junk."""

    shape = ("a", "b")

    def head(self, n: int) -> str:
        raise AssertionError("head() of a value without an integer shape")


def test_objects_whose_repr_raises_or_is_huge():
    bad = summarize("bad", ReprRaises())
    assert bad["repr"] == "<test_variables.ReprRaises object (repr failed: RuntimeError: no repr for you)>"
    assert bad["type"] == "test_variables.ReprRaises"
    assert "repr failed" in summary_text(bad)
    huge = summarize("huge", HugeRepr(), max_repr=500)
    assert len(huge["repr"]) < 600 and huge["repr"].endswith("[cut: 5,000,000 characters in all]")
    assert len(huge["summary"]) <= 200
    lying = summarize("lying", LyingLen())
    assert "len" not in lying and "shape" not in lying
    assert "head" not in summarize("shaped", FakeShaped())


def test_attributes_never_run_properties():
    d = summarize("h", HugeRepr(), attributes=True, max_repr=50)
    attrs = d["attributes"]
    assert attrs["size"] == "int: 3"
    assert attrs["expensive"] == "property" and attrs["method"] == "method"
    assert attrs["tag"] == "class attribute, str"
    assert "_private" not in attrs and "attributes_total" not in d
    text = summary_text(d)
    assert "attributes:\n  size: int: 3" in text
    frame = summarize("df", pd.DataFrame({"a": [1]}), attributes=True)
    assert len(frame["attributes"]) == 200 and frame["attributes_total"] > 200
    assert "attributes (first 200 of" in summary_text(frame)


def test_bad_arguments():
    with pytest.raises(ValueError, match="rows must be an integer ≥ 0"):
        summarize("x", 1, rows=-1)
    with pytest.raises(ValueError, match="max_repr"):
        summarize("x", 1, max_repr=0)


def test_type_names():
    assert type_name(pd.DataFrame()) == "pandas.DataFrame"
    assert type_name(np.zeros(1)) == "numpy.ndarray"
    assert type_name(1) == "int" and type_name({}) == "dict"
    assert type_name(Path(".")).startswith("pathlib.")
    assert short_repr(ReprRaises()).startswith("<test_variables.ReprRaises object (repr failed")


def test_list_variables_skips_what_is_not_data(df):
    import math

    def helper() -> None:
        pass

    ns = {"df": df, "math": math, "helper": helper, "HugeRepr": HugeRepr, "_secret": 1, "n": 3, "In": [""],
          "Out": {}, "exit": object(), "mine": "hello", "get_ipython": object(), "hidden_by_ipython": 5,
          "text": "x" * 10_000}
    rows = list_variables(ns, hidden={"hidden_by_ipython"})
    assert [r["name"] for r in rows] == ["df", "n", "mine", "text"]
    assert rows[0] == {"name": "df", "type": "pandas.DataFrame", "summary": summarize("df", df)["summary"]}
    assert rows[1]["summary"] == "int = 3" and len(rows[3]["summary"]) < 120
    everything = [r["name"] for r in list_variables(ns, hidden={"hidden_by_ipython"}, include_all=True)]
    assert everything == list(ns)
    assert list_variables({"bad": ReprRaises()})[0]["summary"].startswith("ReprRaises: <")


def test_cells_of_ipython_history():
    ns = {"In": ["", "x = 1", "x + 1", "print(x)", "df.head()"], "Out": {2: 2, 4: pd.DataFrame({"a": [1]})}}
    cells = cells_of(ns)
    assert [c["execution_count"] for c in cells] == [1, 2, 3, 4]
    assert cells[0] == {"execution_count": 1, "source": "x = 1", "output": None}
    assert cells[1]["output"] == "2" and cells[2]["output"] is None
    assert cells[3]["output"].split() == ["a", "0", "1"]
    assert [c["execution_count"] for c in cells_of(ns, start=2, end=3)] == [2, 3]
    assert [c["execution_count"] for c in cells_of(ns, start=-2)] == [3, 4]
    assert cells_of(ns, start=9) == [] and cells_of({}) == [] and cells_of({"In": "nope"}) == []
    assert cells_of({"In": ["", "big"], "Out": {1: "y" * 10_000}}, max_output=50)[0]["output"].endswith("characters]")
    with pytest.raises(ValueError, match="execution counts"):
        cells_of(ns, start="2")  # type: ignore[arg-type]


@pytest.mark.parametrize("text, expected", [("3", [3]), ("3-5", [3, 4, 5]), ("3,5,7-9", [3, 5, 7, 8, 9]),
                                            (" 2 - 3 , 1 ", [2, 3, 1]), ("4,4,3-4", [4, 3])])
def test_parse_cell_range(text, expected):
    assert parse_cell_range(text) == expected


@pytest.mark.parametrize("text, message", [("", "empty"), ("a", "'a' is not a cell number"),
                                           ("5-3", "'5-3' goes down; write 3-5"), ("0", "numbered from 1"),
                                           ("1,,2", "'' is not a cell number"), ("-2", "is not a cell number"),
                                           ("1-999999", "more than 100,000")])
def test_parse_cell_range_errors(text, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_cell_range(text)
    assert str(info.value).startswith(f"cell range {text!r}")


# -- core/notebook ----------------------------------------------------------------------------
def test_kernel_notebook_from_session_and_env(tmp_path):
    nb = tmp_path / "sub" / "nb.ipynb"
    nb.parent.mkdir()
    nb.write_text("{}")
    # JupyterLab: absolute in __session__
    assert kernel_notebook({"__session__": str(nb)}, {}, tmp_path) == NotebookRef(nb, "__session__", True)
    # created by path only: relative to the server root, the kernel runs in the notebook's folder
    assert kernel_notebook({}, {"JPY_SESSION_NAME": "sub/nb.ipynb"}, nb.parent) == \
        NotebookRef(nb.parent / "nb.ipynb", "JPY_SESSION_NAME", True)
    assert kernel_notebook({}, {"JPY_SESSION_NAME": "sub/nb.ipynb"}, tmp_path).path == tmp_path / "sub" / "nb.ipynb"
    # __session__ first
    assert kernel_notebook({"__session__": str(nb)}, {"JPY_SESSION_NAME": "other.ipynb"}, tmp_path).source == \
        "__session__"
    # renamed since: stale, said so
    stale = kernel_notebook({"__session__": str(tmp_path / "old.ipynb")}, {}, tmp_path)
    assert stale is not None and stale.exists is False and "not found: renamed" in stale.describe()
    # none, or not a notebook (a console's session)
    assert kernel_notebook({}, {}, tmp_path) is None
    assert kernel_notebook({"__session__": "console-1-abc"}, {"JPY_SESSION_NAME": ""}, tmp_path) is None


def test_file_cells_and_output_text():
    nb = {"cells": [
        {"cell_type": "markdown", "id": "m1", "metadata": {}, "source": ["# Title\n", "text"]},
        {"cell_type": "code", "id": "c1", "execution_count": 3, "metadata": {}, "source": "print(1)\n1 + 1",
         "outputs": [{"output_type": "stream", "name": "stdout", "text": ["1\n"]},
                     {"output_type": "execute_result", "execution_count": 3, "metadata": {},
                      "data": {"text/plain": "2", "text/html": "<b>2</b>"}}]},
        {"cell_type": "code", "id": "c2", "execution_count": 4, "metadata": {}, "source": "1/0",
         "outputs": [{"output_type": "error", "ename": "ZeroDivisionError", "evalue": "division by zero",
                      "traceback": ["\x1b[0;31mZeroDivisionError\x1b[0m: division by zero"]},
                     {"output_type": "display_data", "metadata": {}, "data": {"image/png": "..."}}]},
    ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    cells = file_cells(nb)
    assert [c["index"] for c in cells] == [1, 2, 3]
    assert cells[0] == {"index": 1, "cell_type": "markdown", "id": "m1", "execution_count": None,
                        "source": "# Title\ntext", "outputs": None}
    assert cells[1]["outputs"] == "1\n2"
    assert cells[2]["outputs"] == ("ZeroDivisionError: division by zero\nZeroDivisionError: division by zero"
                                   "[image/png]")
    assert [c["index"] for c in file_cells(nb, start=-1)] == [3]
    assert [c["index"] for c in file_cells(nb, start=2, end=9)] == [2, 3]
    assert output_text({"output_type": "weird"}) == ""
    with pytest.raises(ValueError, match="positions"):
        file_cells(nb, end=1.5)  # type: ignore[arg-type]


def test_core_modules_stay_pure():
    """No I/O module, no asyncio, and neither pandas nor numpy imported by the code."""
    import ast

    for name in ("variables.py", "notebook.py"):
        tree = ast.parse((Path(__file__).parents[2] / "escouade_nb" / "core" / name).read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not imported & {"pandas", "numpy", "polars", "xarray", "asyncio", "subprocess", "nbformat", "os"}, name


def test_summarize_says_which_look_is_under_way(df):
    seen = []

    class Watched:
        shape = (2, 1)
        dtype = "int64"

        def head(self, rows):
            seen.append(("head", progress["step"], dict(progress["found"])))
            return "first rows"

        def __repr__(self):
            seen.append(("repr", progress["step"], dict(progress["found"])))
            return "Watched()"

    progress: dict = {}
    d = summarize("w", Watched(), rows=1, progress=progress)
    assert [(what, step) for what, step, _ in seen] == [("head", "head")]  # the head says it: no repr asked
    assert d["head"] == "'first rows'" and progress == {"found": d, "step": None}
    seen.clear()
    progress = {}
    d = summarize("w", Watched(), rows=0, progress=progress)
    assert [(what, step) for what, step, _ in seen] == [("repr", "repr")]
    assert seen[0][2]["dtype"] == "int64" and "repr" not in seen[0][2]  # what was found before the repr
    assert progress == {"found": d, "step": None}


def test_history_cells_and_listed_names_look_at_no_value():
    class Touchy:
        def __repr__(self):
            raise AssertionError("looked at")

        def __len__(self):
            raise AssertionError("looked at")

    ns = {"In": ["", "x = 1", "x"], "Out": {2: Touchy()}, "t": Touchy(), "_p": 1}
    cells = history_cells(ns)
    assert [c["execution_count"] for c in cells] == [1, 2] and "value" not in cells[0]
    assert cells[1]["value"] is ns["Out"][2]
    assert [n for n, _ in listed_names(ns)] == ["t"]
    assert variable_row("m", json, include_all=False) is None  # a module
    assert variable_row("x", 3)["summary"] == "int = 3"
