"""The kernel MCP server's tools as the model sees them: their names, the server's
instructions, each tool's input schema and description (:func:`register_tools`), and
:class:`ToolFailure`, an anticipated failure whose text the model reads.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .._errors import EscouadeError

TOOLS = ("list_variables", "inspect_variable", "notebook_cells", "run_code", "insert_cell", "edit_cell", "delete_cell",
         "execute_cell", "task_status", "task_cancel")
TASK_TOOLS = ("task_status", "task_cancel")
"""Coming back to a run left running (``run_code``/``execute_cell`` with ``wait``): its caller's only."""
EDIT_TOOLS = ("insert_cell", "edit_cell", "delete_cell")
"""The changes to the notebook open in the user's page: made at once, pending the user's review."""

INSTRUCTIONS = (
    "The live Jupyter kernel this agent was started from. list_variables and inspect_variable read the "
    "user's variables; what runs of the values' own code is exactly: repr, len, and for array- or frame-like "
    "values (those with a shape) the shape, dtype, dtypes and columns attributes and head(rows), plus vars() "
    "and each attribute's repr when inspect_variable is asked for attributes (properties are never run). "
    "These run in worker threads with a 2-second budget per call: a value whose repr (or len, head...) takes "
    "longer is reported as such, and is not started again while it still runs. notebook_cells gives the cells "
    "run so far (their results' repr, same budget) and the saved notebook file; run_code runs Python in the "
    "kernel after the user allows it (a permission card). insert_cell, edit_cell and delete_cell change the "
    "notebook open in the user's JupyterLab or Notebook 7 page: each change is made at once and answers "
    "\"pending review\" with the cell id (the user keeps or rejects it); edit_cell and delete_cell name the "
    "sha256 of the source you read (notebook_cells(source=\"live\")) and are refused when the cell changed since. "
    "execute_cell runs a code cell of that page in the notebook, after the user allows it (a permission card showing "
    "the cell's source): its outputs land in the cell and come back to you as text. With notebook_cells"
    "(source=\"live\") and execute_cell, PNG and JPEG outputs also come as images after the text, which names "
    "each one's cell (at most 4 per answer, 1 MB each; beyond, named with their size). Long runs: give run_code or "
    "execute_cell a wait (seconds); when the code is still running then, the answer comes at once with a task_id and "
    "the output so far; task_status(task_id, wait) gives the output since and, once ended, the result; "
    "task_cancel(task_id) interrupts it (never asked). The user can interrupt it too (Jupyter's Interrupt)."
)


class ToolFailure(EscouadeError):
    """A tool's anticipated failure; its text goes to the model as a ToolError.
    ``status`` is what the owner's ``tool_done`` is told: ``"error"``, ``"refused"``,
    ``"cancelled"`` (the owner's consent was cancelled) or ``"busy"`` (not run)."""

    def __init__(self, message: str, status: str = "error") -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ImageAnswer:
    """A tool's answer with images: ``text`` (what the model reads first; the notice is
    appended to it), ``status`` (as :class:`ToolFailure`'s, ``"ok"`` or ``"error"``) and
    ``images`` (``[{"mime_type", "data" (base64)}]``, checked: :class:`~..core.output_images.Images`),
    each sent as one MCP ``ImageContent`` after the text."""

    text: str
    status: str = "ok"
    images: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class TaskAnswer:
    """A tool's answer about a task: ``text`` (what the model reads), ``structured`` (the MCP
    result's ``structuredContent``: ``{"task_id", "tool", "status", "seconds", ...}``) and
    ``status`` (as :class:`ToolFailure`'s, for the owner's ``tool_done``: ``"running"`` for a
    call that left its run running)."""

    text: str
    structured: dict[str, Any]
    status: str = "ok"


Call = Callable[[str, dict, Callable[[], Awaitable[Any]]], Awaitable[Any]]
"""``call(tool, arguments, impl)``: one tool call made by the server (grant, consent, errors);
its answer is text, or a list of MCP content blocks (text first) when ``impl`` answered an
:class:`ImageAnswer` with images."""


def register_tools(mcp: Any, Field: Any, call: Call, *, variables: Callable[..., Awaitable[str]],
                   variable: Callable[..., Awaitable[str]], cells: Callable[..., Awaitable[str]],
                   live_cells: Callable[..., Awaitable[Any]], notebook_ref: Callable[[], Any],
                   run: Callable[..., Awaitable[Any]], change: Callable[[str, dict], Awaitable[str]],
                   execute: Callable[..., Awaitable[Any]], status: Callable[..., Awaitable[Any]],
                   cancel: Callable[[str], Awaitable[Any]]) -> None:
    """Register the tools on ``mcp`` (an ``MCPServer``). Their signatures are the
    input schemas (pydantic ``Field`` descriptions go into them); ``structured_output=False``:
    text, and for ``notebook_cells(source="live")`` and ``execute_cell`` one MCP
    ``ImageContent`` per PNG or JPEG output after it (``call`` answers the content blocks).
    Each one goes through ``call`` to its implementation, given the tool's
    arguments: ``variables`` (``list_variables``), ``variable`` (``inspect_variable``),
    ``cells`` (``notebook_cells``; ``notebook_ref()`` names the notebook file it would read,
    for the owner's consent), ``live_cells`` (``notebook_cells(source="live")``: the open
    notebook, through its page), ``run`` (``run_code``) and ``change`` (``insert_cell``,
    ``edit_cell``, ``delete_cell``: ``change(tool, fields)``, through the page too) and
    ``execute`` (``execute_cell(cell_id)``: asked with a card, then run by the page);
    ``run(code, wait, progress)`` and ``execute(cell_id, wait, progress)`` take ``wait`` (seconds
    or None) and ``progress(progress, total, message)`` (the request's MCP progress
    notifications: a no-op when the client asked for none); ``status(task_id, wait)``
    (``task_status``) and ``cancel(task_id)`` (``task_cancel``; :mod:`.tasks`)."""
    from typing import Annotated, Literal

    from mcp.server.mcpserver import Context  # the server side is imported already (register_tools runs after)

    Wait = Annotated[float | None, Field(ge=0, le=86400, description=(
        "Seconds to wait for the run's end. Omitted: the answer comes when the run ends, however long. Given: "
        "when the run is still going then, the answer comes at once with a task_id and the output so far "
        "(come back with task_status, stop it with task_cancel)."))]


    async def list_variables(
        include_all: Annotated[bool, Field(description="Also list modules, functions, classes, names "
                                                       "starting with _ and IPython's own names.")] = False,
    ) -> str:
        """List the variables of the live kernel's user namespace: one line each with its name, type and
        a short summary (shape and columns of data frames, length of containers, value of scalars).
        Runs each value's own repr and len (and shape, dtype, dtypes, columns for frame-like values) in
        worker threads, 2 s budget per call: a value that takes longer is listed as such.
        Input: {"include_all": bool, default false}."""
        return await call("list_variables", {"include_all": include_all},
                          lambda: variables(include_all))

    async def inspect_variable(
        name: Annotated[str, Field(description="A variable name of the kernel's namespace (as in "
                                               "list_variables).")],
        rows: Annotated[int, Field(ge=0, le=1000, description="Rows of head() shown for data frames, "
                                                              "series and arrays.")] = 5,
        attributes: Annotated[bool, Field(description="Also list public attributes (instance values with "
                                                      "a short repr; methods and properties by name, not "
                                                      "evaluated).")] = False,
    ) -> str:
        """Describe one live variable: type, repr (cut to 2000 characters), length, and for array- and
        frame-like values (pandas, numpy, polars, xarray) shape, dtype(s), columns and the first rows.
        What runs of the value's own code: repr, len, shape, dtype, dtypes, columns, head(rows), and with
        attributes=true vars() and each attribute's repr (never properties); in a worker thread with a 2 s
        budget: what took longer is named and not shown.
        Input: {"name": str, "rows": int 0-1000 (default 5), "attributes": bool (default false)}."""
        args = {"name": name, "rows": rows, "attributes": attributes}
        return await call("inspect_variable", args, lambda: variable(name, rows, attributes))

    async def notebook_cells(
        start: Annotated[int | None, Field(description="First cell, inclusive: an execution count for "
                                                       "history, a 1-based position for the file; negative "
                                                       "counts from the end (-1 is the last).")] = None,
        end: Annotated[int | None, Field(description="Last cell, inclusive (same numbering as "
                                                     "start).")] = None,
        source: Annotated[Literal["history", "file", "both", "live"], Field(
            description="history: the cells run in this kernel (In/Out, outputs as text); file: the saved "
                        "cells of the notebook file the kernel runs, when it knows it; both; live: the "
                        "notebook as open in the user's page now, unsaved edits included (JSON: id, "
                        "cell_type, source, sha256, execution_count, outputs as text).")] = "history",
    ) -> Any:
        """The notebook's cells: those run in this kernel with their execution counts and results
        (source="history"), and/or the saved cells and outputs of the notebook file (source="file"; the
        answer names the file read, or says the kernel does not know it), or the notebook as the user's
        JupyterLab or Notebook 7 page shows it now, unsaved edits included (source="live"; JSON, each cell
        with its id, cell_type, source, sha256 of the source, execution_count and outputs as text; each PNG
        or JPEG output is named there and attached as image content after the text, at most 4 images of at
        most 1 MB each, beyond that named with their size; an error when no such page is open).
        Input: {"start": int|null, "end": int|null, "source": "history"|"file"|"both"|"live"}."""
        args: dict[str, Any] = {"start": start, "end": end, "source": source}
        ref = notebook_ref() if source in ("file", "both", "live") else None
        if ref is not None:
            args["path"] = str(ref.path)  # for the owner: a private project's fence covers the file too
        if source == "live":
            return await call("notebook_cells", args, lambda: live_cells(start, end, ref))
        return await call("notebook_cells", args, lambda: cells(start, end, source, ref))

    async def run_code(
        code: Annotated[str, Field(description="Python source to run in the kernel's user namespace; "
                                               "top-level await is allowed; the value of a last "
                                               "expression is returned.")],
        ctx: Context,
        wait: Wait = None,
    ) -> Any:
        """Run Python code in the live kernel, in the user's namespace (variables it defines stay). The user
        is asked first (a permission card); a refusal comes back as an error with the reason. Returns
        stdout, stderr, the last expression's repr and any exception's traceback. Code without top-level await
        runs in a worker thread (the kernel stays responsive; asyncio.get_running_loop() is not available there:
        await something to run on the kernel's event loop instead). With wait (seconds), a run
        still going then answers at once: {"task_id", "status": "running"} (text and structured content) and
        the output so far; task_status(task_id) comes back for the rest. Jupyter's Interrupt stops it.
        Input: {"code": str, "wait": number|null}."""
        args: dict[str, Any] = {"code": code} if wait is None else {"code": code, "wait": wait}
        return await call("run_code", args, lambda: run(code, wait, ctx.report_progress))

    async def task_status(
        task_id: Annotated[str, Field(description="A task_id answered by run_code or execute_cell.")],
        wait: Annotated[float, Field(ge=0, le=600, description="Seconds to wait for the task's end before "
                                                               "answering (0: answer now).")] = 0,
    ) -> Any:
        """A task you started (run_code or execute_cell with wait): its status ("running", "done",
        "interrupted", "cancelled" or "ended"), the output printed since your last look, and once it has
        ended its result (stdout, stderr, result, error). Only the agent that started a task sees it.
        Input: {"task_id": str, "wait": number (default 0)}."""
        return await call("task_status", {"task_id": task_id, "wait": wait}, lambda: status(task_id, wait))

    async def task_cancel(
        task_id: Annotated[str, Field(description="A task_id answered by run_code or execute_cell.")],
    ) -> Any:
        """Interrupt a task you started (a KeyboardInterrupt in its code; never asked: stopping is always
        allowed). Answers its status and result once it stopped (a run inside one long C call, such as
        time.sleep(600), stops when that call returns). Input: {"task_id": str}."""
        return await call("task_cancel", {"task_id": task_id}, lambda: cancel(task_id))

    def with_path(args: dict[str, Any]) -> dict[str, Any]:
        ref = notebook_ref()
        if ref is not None:
            args["path"] = str(ref.path)  # for the owner: a private project's fence covers the notebook too
        return args

    async def insert_cell(
        source: Annotated[str, Field(description="The new cell's source.")],
        cell_type: Annotated[Literal["code", "markdown", "raw"], Field(description="The new cell's type.")] = "code",
        after_cell_id: Annotated[str | None, Field(description="The id of the cell to insert after (from "
                                                               "notebook_cells(source=\"live\")); null: at the "
                                                               "end.")] = None,
    ) -> str:
        """Insert a cell in the notebook open in the user's page, now. It is pending the user's review (Keep or
        Reject). Returns JSON {"cell_id", "status": "pending review", ...}.
        Input: {"source": str, "cell_type": "code"|"markdown"|"raw", "after_cell_id": str|null}."""
        fields = {"source": source, "cell_type": cell_type, "after_cell_id": after_cell_id}
        return await call("insert_cell", with_path(dict(fields)), lambda: change("insert_cell", fields))

    async def edit_cell(
        cell_id: Annotated[str, Field(description="The cell's id (notebook_cells(source=\"live\")).")],
        source: Annotated[str, Field(description="The cell's whole new source.")],
        base_sha256: Annotated[str, Field(description="The sha256 of the cell's source as you read it "
                                                      "(notebook_cells(source=\"live\")).")],
    ) -> str:
        """Replace a cell's source in the notebook open in the user's page, now, pending the user's review.
        Refused (an error saying the cell changed since) when its source is no longer the one base_sha256
        names: read it again. Returns JSON {"cell_id", "status": "pending review", ...}.
        Input: {"cell_id": str, "source": str, "base_sha256": str}."""
        fields = {"cell_id": cell_id, "source": source, "base_sha256": base_sha256}
        return await call("edit_cell", with_path(dict(fields)), lambda: change("edit_cell", fields))

    async def delete_cell(
        cell_id: Annotated[str, Field(description="The cell's id (notebook_cells(source=\"live\")).")],
        base_sha256: Annotated[str, Field(description="The sha256 of the cell's source as you read it.")],
    ) -> str:
        """Delete a cell of the notebook open in the user's page: marked for deletion now, pending the user's
        review (a cell you inserted and that is still pending is removed at once). Refused when the cell
        changed since base_sha256. Returns JSON {"cell_id", "status": "pending review", ...}.
        Input: {"cell_id": str, "base_sha256": str}."""
        fields = {"cell_id": cell_id, "base_sha256": base_sha256}
        return await call("delete_cell", with_path(dict(fields)), lambda: change("delete_cell", fields))

    async def execute_cell(
        cell_id: Annotated[str, Field(description="The id of a code cell of the open notebook "
                                                  "(notebook_cells(source=\"live\")).")],
        ctx: Context,
        wait: Wait = None,
    ) -> Any:
        """Run a code cell of the notebook open in the user's page, in the notebook: the user is asked first
        (a permission card showing the cell's whole source as it is now; a cell pending review may be run, the
        card says it is unreviewed); on Run the page runs it, its outputs and execution count land in the
        cell, and you get its outputs as text (clipped), each PNG or JPEG output named there and attached as
        image content after the text (at most 4 images of at most 1 MB each; beyond, named with their size).
        Refused when the user said no, when the cell changed after the card was shown (read it again), or
        when no page is open. Without wait the answer comes when the cell has finished; with wait (seconds) a
        cell still running then answers at once with a task_id (task_status gives its outputs once it ended).
        Input: {"cell_id": str, "wait": number|null}."""
        args: dict[str, Any] = {"cell_id": cell_id} if wait is None else {"cell_id": cell_id, "wait": wait}
        return await call("execute_cell", args, lambda: execute(cell_id, wait, ctx.report_progress))

    for fn in (list_variables, inspect_variable, notebook_cells, run_code, insert_cell, edit_cell, delete_cell,
               execute_cell, task_status, task_cancel):
        mcp.add_tool(fn, structured_output=False)
