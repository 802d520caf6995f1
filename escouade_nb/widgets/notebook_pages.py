"""The browser pages that show this kernel's notebook: the kernel's side of the channel to
escouade_nb's JupyterLab 4 / Notebook 7 extension (its sources in the top-level
``labextension/``; the wheel installs it prebuilt).

The wire, comm target ``escouade_nb.notebook`` on both sides (the page's end: ``labextension/src/index.js``
and ``run.js``). Every message carries ``"v": 1``; a page's carry ``"client"`` (its id), the kernel's ``"to"``
(the page it is for, checked there too).

=========================================================  ==============================================
kernel → page                                              meaning
=========================================================  ==============================================
``{"ping": true}`` on a comm opened and closed at once     every page showing the kernel says hello
``{"op", "req", ...}`` on one page's comm                  an operation: ``cells`` (``images``),
                                                           ``insert``/``edit``/``delete`` (the cell, its
                                                           hash, the source, ``agent``), ``settle``
                                                           (``cell``, ``keep``), ``run`` (``cell``,
                                                           ``base``, ``by``, ``run``); answered by ``reply``
``{"elsewhere": {"change", "agent", "cell"}}``             another page of its notebook changed it (no
                                                           answer): its copy is out of date
``{"held": [CELL, ...]}``                                  the cells an agent's review here holds: Keep and
                                                           Reject offered even in a file not trusted
``{"untrusted": CELL}``                                    a mark of a notebook not trusted here: the page
                                                           offers only to drop it
``{"form": {"view", "from", "to", "data"}}`` or            a view's saved form (:meth:`.front.FrontView.form_message`):
``{"form": {"view", "to", "whole"}}``                      the page writes it into the companion output whose
                                                           metadata names that view (``labextension/src/forms.js``)
=========================================================  ==============================================

=========================================================  ==============================================
page → kernel (:data:`PAGE_MESSAGES`, ``_opened``)         the kernel
=========================================================  ==============================================
comm open ``{"hello": {"path", "panel", "tab",             keeps the page (:class:`Page`, :attr:`pages`),
"pending", "forms"}}`` (and ``"decide"``, a click with     re-links its pending cells (:meth:`_relink`), sends
no comm)                                                   the newer saved forms (:meth:`_forms_held`)
``{"hello": {...}}`` again, on its open comm               the page's path, panel and tab as it says now
``{"decide": {"cell", "keep": bool}}``: Keep or Reject     settles it (:meth:`_decide`), then a ``settle``
``{"touched": {"cell", "what"}}``: the user changed a      tells the agents that changed it this turn
cell the kernel changed (``edited`` or ``deleted``)
``{"ran": RUN, "ok", "execution_count", "outputs"}``       ends the ``run_cell`` awaiting ``RUN``
``{"forms": {VIEW: VERSION, ...}}`` (also in a hello): the  each live view whose form is of another version is
saved forms the page's document holds                      sent whole to that page (:meth:`_forms_held`)
``{"reply": REQ, "ok", ...}`` or ``{"ok": false,           ends the request awaiting ``REQ``
"error", "stale"?}``: an operation's answer
comm close (panel closed, page left)                       forgets the page (:meth:`_gone`)
=========================================================  ==============================================

A page → kernel message is named by the first of :data:`PAGE_MESSAGES`' keys it has; one that has none,
or whose value is not of that kind's shape (an object for ``hello``, ``decide``, ``touched``, a string for
``ran`` and ``reply``), is refused: one log line, counted in :attr:`NotebookPages.strays`, nothing done.

- the kernel *pings* when an operation needs a page and it knows none (:meth:`NotebookPages.ping`; nothing
  is sent before, so a notebook that never reads live costs nothing, and a page without the extension —
  VS Code, a JupyterLab without it — sees no comm it cannot place). Every browser tab showing this kernel
  gets it: each has its own connection to the kernel. Each notebook panel then opens a comm of its own and
  says hello (its notebook's server path, its panel id); the kernel keeps it as a :class:`Page`, forgotten
  on the panel's ``bye`` (the comm closed) or when it does not answer within :data:`REPLY_WAIT`.
- an operation goes on ONE page's comm: a comm belongs to one browser connection, so the other tabs never
  see it.
- the user's Keep or Reject (the buttons the page draws inside a cell pending review) is not done in the
  page: the kernel settles it — through the agent's review when an agent's ``pending_edits`` holds the cell,
  a closed agent's too (so that list stays true and the agent, while it runs, is told of a Reject), else
  directly (a pending cell from a saved notebook, when Jupyter trusts it) — with a ``settle`` operation sent
  back to that page.
- awareness (``labextension/src/aware.js``): ``tab`` is the browser tab's id, the same across its reloads;
  ``pending`` the ids of the cells pending review in that page's document (``null`` while it is not
  loaded); a tab the kernel once pinged says hello by itself after a reload. A hello from a new client of
  the tab that made a change is a reload: the changes its document still holds are re-linked to it, the
  others (not saved before the reload) are dropped (:func:`~escouade_nb.engine.review.cell_review.drop`: the agent
  is told once). ``touched`` goes to :func:`~escouade_nb.engine.review.cell_review.user_changed`, which decides
  which agent is told. After a change or a settle, every other page of the same notebook gets
  ``elsewhere``: without real-time collaboration its copy is out of date, and it says so.
- ``run`` (``execute_cell``, after its card): the page checks the cell's source against the hash the card
  showed, starts the cell's run and answers at once (``{"reply", "ok", "started": true}``); ``ran`` comes
  when the run has ended (its comm handler never awaits the run: JupyterLab reads the kernel's next message
  only after it, and the run's own replies are among them).

The page is untrusted here: a reply counts only for a request under way, from the client
it was sent to (anything else is counted in :attr:`strays` and dropped), and its contents
are checked by whoever reads them (:func:`escouade_nb.core.notebook.live_cells`).
Nothing here blocks the loop or starts a task: a request awaits its own future in the
caller's task, within :data:`REPLY_WAIT`; comm callbacks (which JupyterLab ≥ 4.6 may
deliver on a kernel subshell's thread) are handed to the kernel's loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Generic, TypeVar

from ..core import notebook as notebook_core
from ..engine import drop, pending_edit, user_changed
from ..kernel_mcp import written_reads
from ..kernel_mcp.tools import ToolFailure
from .front import form_view, on_loop, use_extension_pages, use_form_pages

__all__ = ["TARGET", "Page", "NotebookPages", "PageMessage", "PAGE_MESSAGES", "NO_PAGE", "NO_PAGE_TO_CHANGE",
           "start_in_kernel"]

log = logging.getLogger(__name__)

TARGET = notebook_core.PAGES_TARGET
PROTOCOL = 1
HELLO_WAIT = 2.0
"""Seconds a request waits for a page's hello after a ping, when the kernel knows none."""
REPLY_WAIT = 5.0
"""Seconds a request waits for the page's answer; a page that does not answer is forgotten
and the request is sent once more, to another page (after a new ping when none is left)."""
VIEWS_PING_EVERY = 30.0
"""Seconds between two pings made because a view was built while no page was known (after
a page of ours was seen in this kernel; before, one ping in all)."""
FORMS_PING_EVERY = 5.0
"""Seconds between two pings made because a view's saved form found no page to go to (after a page of ours
was seen in this kernel): a page reopened says hello, and gets the forms as they are now."""
MAX_FIELD = 1000
"""Characters kept of a hello's client id, path and panel id."""
RELINK_PINGS = (3.0, 10.0)
"""Seconds after a page that made pending changes leaves (its bye) at which the kernel pings
the pages, while no page holds those changes: a reloaded page says hello by itself, this is
for one that could not (no sessionStorage)."""
MAX_PENDING = 10000
"""Cell ids read of a hello's ``pending`` list (the cells pending review in that page)."""
MAX_FORMS = 1000
"""Saved forms read of a page's ``forms`` (the views' companion outputs its document holds)."""
NO_PAGE = ('source="live" needs this notebook open in JupyterLab 4 or Notebook 7 with escouade_nb\'s '
           "extension, and no such page answered (nbclient, nbval, VS Code or a closed page have none): "
           'source="file" reads the saved notebook')
NO_PAGE_TO_RUN = ("execute_cell needs this notebook open in JupyterLab 4 or Notebook 7 with escouade_nb's extension, "
                  "and no such page answered (nbclient, nbval, VS Code or a closed page have none): nothing was run")
NO_PAGE_TO_CHANGE = ("changing a cell needs this notebook open in JupyterLab 4 or Notebook 7 with escouade_nb's "
                     "extension, and no such page answered (nbclient, nbval, VS Code or a closed page have none): "
                     "nothing was changed")


@dataclass
class Page:
    """One notebook panel in one browser tab: ``client`` (its id), ``path`` (its
    notebook's server path, as the page said), ``panel`` (its id in the page), ``comm``
    (its own comm to the kernel), ``order`` (of its last hello among all pages'), ``tab``
    (its browser tab's id, the same across a reload of the tab; ``""`` when unknown)."""

    client: str
    path: str
    panel: str
    comm: Any
    order: int
    tab: str = ""


def _kernel_comm(data: dict) -> Any:
    """A kernel comm opened on the pages' target (ipykernel's ``comm.create_comm``)."""
    from comm import create_comm

    return create_comm(target_name=TARGET, data=data)


def _text(value: Any) -> str:
    return value[:MAX_FIELD] if isinstance(value, str) else ""


def shows(kernel_notebook: Path, page_path: str) -> bool:
    """Whether a page's server path (``sub/nb.ipynb``, maybe with a drive prefix such as
    ``RTC:``) names the kernel's notebook (an absolute path): its last parts are the page's."""
    if ":" in page_path.split("/", 1)[0]:
        page_path = page_path.split(":", 1)[1]
    parts = PurePosixPath(page_path).parts
    return bool(parts) and tuple(kernel_notebook.parts[-len(parts):]) == parts


class NotebookPages:
    """The pages showing this kernel's notebook, and the requests made to them.

    ``open_comm(data)`` opens a kernel comm on :data:`TARGET` (the ping; ipykernel's
    ``comm.create_comm`` by default), ``comm_manager`` takes the target the pages open
    their comms to (``comm.get_comm_manager()`` by default), ``notebook()`` names the
    kernel's notebook (``None``: unknown; the pages are then not told apart by path).
    :attr:`round_trips` keeps the seconds of the last 100 answered requests (kernel → page
    → kernel)."""

    def __init__(self, open_comm: Callable[[dict], Any] | None = None, comm_manager: Any = None,
                 notebook: Callable[[], Path | None] | None = None) -> None:
        self._open_comm = open_comm
        self._comm_manager = comm_manager
        self._notebook = notebook
        self.pages: dict[str, Page] = {}
        self._waiting: dict[str, tuple[str, asyncio.Future]] = {}
        self._ids = itertools.count(1)
        self._hellos = itertools.count()
        self._hello: asyncio.Event | None = None
        self._started = False
        self.strays = 0
        """Replies dropped: for no request under way, or from a client it was not sent to."""
        self.round_trips: deque[float] = deque(maxlen=100)
        self._tasks: set[asyncio.Task] = set()  # Keep/Reject of pending cells no agent's review holds
        self._made: dict[str, tuple[str, str]] = {}  # cell id -> (client, tab) of the page that changed it, pending
        self._timers: set[asyncio.TimerHandle] = set()  # the pings after a bye (RELINK_PINGS)
        self._runs: dict[str, tuple[str, asyncio.Future]] = {}  # req -> (client, the run's end) of cells running
        self.cells_running = 0
        """Cells of the kernel running now (IPython's pre/post_run_cell, counted by :func:`start_in_kernel`)."""
        self._views_pinged: float | None = None
        self._forms_pinged: float | None = None
        self._views_seen = False

    # -- the wire ---------------------------------------------------------------------------
    def start(self) -> None:
        """Take the pages' comms (register the kernel's target). Call it on the kernel's
        loop (``%load_ext escouade_nb`` does); idempotent. The pages are pinged when an
        operation first needs one."""
        if not self._started:
            manager = self._comm_manager
            if manager is None:
                from comm import get_comm_manager

                manager = get_comm_manager()
            manager.register_target(TARGET, on_loop(self._opened))
            self._started = True

    def views_extension(self) -> bool:
        """Whether a page with escouade_nb's extension said hello (so a view may carry the
        light module, :func:`.front.light_module`). With none known, the pages are pinged: the
        first time a view is built in this kernel (so a kernel that shows no view pings no page,
        and a page without the extension gets at most that one comm it cannot place), then, once
        a page of ours has been seen, at most every :data:`VIEWS_PING_EVERY` seconds (a reload).
        A view built before a hello carries the whole module."""
        if self.pages:
            self._views_seen = True
            return True
        now = time.monotonic()
        # once per kernel, then again only where a page of ours has been seen: a page without the
        # extension (VS Code, a JupyterLab without it) gets one comm it cannot place, not one a view
        if self._started and (self._views_pinged is None
                              or (self._views_seen and now - self._views_pinged >= VIEWS_PING_EVERY)):
            self._views_pinged = now
            self.ping()
        return False

    def ping(self) -> None:
        """Ask every page showing this kernel to (re)introduce itself."""
        open_comm = self._open_comm or _kernel_comm
        try:
            comm = open_comm({"v": PROTOCOL, "ping": True})
            comm.close()
        except Exception:
            log.debug("escouade_nb: the ping to the notebook pages failed", exc_info=True)

    def adopt(self, comm: Any, msg: dict, early: list[dict]) -> None:
        """A page's comm opened before this channel started (``%load_ext``'s thread was still importing:
        ``magics`` held it): taken as if opened now, then the messages it sent meanwhile, in order."""
        self._opened(comm, msg)
        for message in early:
            comm.handle_msg(message)

    def _opened(self, comm: Any, msg: dict) -> None:
        """A page opened its comm, saying hello (the first row of the page → kernel table): kept as a
        :class:`Page` (its hello read as on an open comm, :meth:`_hello_again`), with the decision it carries
        when it was a click in a page with no comm yet. Anything else is not a page of ours: closed."""
        data = (msg.get("content") or {}).get("data")
        hello = data.get("hello") if isinstance(data, dict) else None
        client = _text(data.get("client")) if isinstance(data, dict) else ""
        if not isinstance(data, dict) or not isinstance(hello, dict) or not client:
            comm.close()  # not a page of ours
            return
        page = Page(client=client, path="", panel="", comm=comm, order=-1)
        old = self.pages.pop(client, None)
        if old is not None and old.comm is not comm:
            self._close(old.comm)
        self.pages[client] = page
        comm.on_msg(on_loop(lambda m: self._message(page, m)))
        comm.on_close(on_loop(lambda m: self._gone(page)))
        self._hello_again(page, hello, data)
        if isinstance(data.get("decide"), dict):
            self._decide(page, data["decide"], data)

    def _message(self, page: Page, msg: dict) -> None:
        """A message on ``page``'s comm, handed to its handler by :data:`PAGE_MESSAGES` (the first of its keys the
        message has names it). A message that names none, or whose value is not of its kind's shape, is refused:
        counted in :attr:`strays`, said in one log line, and nothing else done."""
        data = (msg.get("content") or {}).get("data")
        if not isinstance(data, dict):
            self._refuse(page, "not an object", type(data).__name__)
            return
        kind = next((k for k in PAGE_MESSAGES if k in data), None)
        if kind is None:
            self._refuse(page, f"none of the keys that name a message ({', '.join(PAGE_MESSAGES)})",
                         sorted(map(str, data))[:8])
            return
        route = PAGE_MESSAGES[kind]
        value = data[kind]
        if not isinstance(value, route.shape):
            self._refuse(page, f"its {kind!r} is not a {route.shape.__name__}", type(value).__name__)
            return
        try:
            route.handle(self, page, value, data)
        except Exception:  # the page is untrusted: what it sends never raises into the comm's machinery
            log.warning("escouade_nb: a %r message from the notebook page %s failed", kind, page.client[:40],
                        exc_info=True)

    def _refuse(self, page: Page, why: str, what: Any) -> None:
        self.strays += 1
        log.warning("escouade_nb: refused a message from the notebook page %s: %s (%s)", page.client[:40], why,
                    str(what)[:200])

    def _hello_again(self, page: Page, hello: dict[str, Any], data: dict[str, Any]) -> None:
        """A hello (``{"path", "panel", "tab", "pending"}``), on opening the comm or again on it (the page
        pinged again, its notebook reloaded): the page's path, panel and tab as it says now, the latest to
        say hello (:meth:`choose`), then :meth:`_relink`."""
        page.path, page.panel = _text(hello.get("path")), _text(hello.get("panel"))
        page.order = next(self._hellos)
        page.tab = _text(hello.get("tab")) or page.tab
        if self._forms_pinged is None:
            self._forms_pinged = -FORMS_PING_EVERY  # a page of ours was here: forms with no page ping (send_form)
        if self._hello is not None:
            self._hello.set()
        self._relink(page, hello.get("pending"))
        if isinstance(hello.get("forms"), dict):
            self._forms_held(page, hello["forms"], data)

    def _forms_held(self, page: Page, forms: dict[str, Any], data: dict[str, Any]) -> None:
        """The saved forms ``page``'s document holds, ``{view id: version}`` (in its hello, once its
        notebook is loaded, or when a change it was sent did not apply to what it holds): each live view
        of this kernel whose form is of another version is sent to that page whole (a tab reopened or
        reloaded, a second tab: the document gets the form as it is now)."""
        for view_id, version in list(forms.items())[:MAX_FORMS]:
            view = form_view(view_id) if isinstance(view_id, str) else None
            if view is None or view.form_version == version or not view.form_shown:
                continue
            self._tell(page, "form", view.form_message())

    def send_form(self, form: dict[str, Any]) -> bool:
        """Send a view's saved form (:meth:`.front.FrontView.form_message`) to every page known: each
        writes it into its document's companion output of that view. False when no page is known."""
        sent = False
        if not self.pages and self._forms_pinged is not None:  # a page of ours was here: a reopened one says hello
            now = time.monotonic()
            if now - self._forms_pinged >= FORMS_PING_EVERY:
                self._forms_pinged = now
                self.ping()
        for page in list(self.pages.values()):
            sent = self._tell(page, "form", form) or sent
        return sent

    @staticmethod
    def _tell(page: Page, kind: str, value: Any) -> bool:
        """Send ``page`` one message that needs no answer, ``{kind: value}`` (a row of the kernel → page
        table); whether it went (a comm gone is said in one debug line, not raised)."""
        try:
            page.comm.send({"v": PROTOCOL, "to": page.client, kind: value})
            return True
        except Exception:
            log.debug("escouade_nb: %r was not sent to the page", kind, exc_info=True)
            return False

    def _ran(self, page: Page, run: str, data: dict[str, Any]) -> None:
        """A cell's run ended (a later message than the ``run`` operation's reply): its run's future gets
        ``data``, when that run is under way and was sent to this page (else a stray)."""
        ran = self._runs.get(run)
        if ran is None or ran[0] != page.client or data.get("client") != page.client or ran[1].done():
            self.strays += 1  # late (the caller gave up), or not this page's: dropped
            return
        ran[1].set_result(data)

    def _reply(self, page: Page, req: str, data: dict[str, Any]) -> None:
        """The answer to request ``req``: its future gets ``data``, when that request is under way and was
        sent to this page (else a stray: a late answer, another page's)."""
        waiting = self._waiting.get(req)
        if waiting is None or waiting[0] != page.client or data.get("client") != page.client or waiting[1].done():
            self.strays += 1
            return
        waiting[1].set_result(data)

    def _decide(self, page: Page, decision: dict[str, Any], data: dict[str, Any]) -> None:
        """The user clicked Keep or Reject in ``page`` (``decision``: ``{"cell", "keep"}``): settle it through
        the agent's review that holds the cell, else directly (a task this object owns: :meth:`close`)."""
        # a kernel without escouade_nb never gets here: it closes the page's comm at once, and the page says so
        cell, keep = decision.get("cell"), decision.get("keep")
        if not isinstance(cell, str) or not cell or len(cell) > MAX_FIELD or not isinstance(keep, bool):
            self.strays += 1
            return
        edit = pending_edit(cell)
        if edit is not None:
            try:
                edit.keep(client=page.client) if keep else edit.reject(client=page.client)
            except ValueError:  # settled, or being settled, already (a second click)
                pass
            return
        task = asyncio.get_running_loop().create_task(self._settle_saved(page, cell, keep))
        self._tasks.add(task)
        task.add_done_callback(self._settled)

    async def _settle_saved(self, page: Page, cell: str, keep: bool) -> None:
        """Keep or Reject a pending mark no agent's review holds (a saved notebook's): only
        when Jupyter trusts the saved notebook (its signature known here: the user saved it);
        a file written by someone else can carry a forged mark (an "original" a Reject would
        write, an "insert" a Reject would delete the user's cell for), so the page is told
        ``{"untrusted": cell}`` instead and offers only to drop the mark."""
        path = self._saved_path(page)
        trusted = None if path is None else await asyncio.to_thread(written_reads.saved_trusted, path)
        if trusted is not True:
            self._tell(page, "untrusted", cell)
            return
        await self.settle_cell(cell, keep, client=page.client)

    def _saved_path(self, page: Page) -> Path | None:
        """The saved file of ``page``'s notebook: the kernel's notebook when the page shows it
        (:func:`shows`), else None (not known here: not trusted)."""
        mine = self._notebook() if self._notebook is not None else None
        return mine if mine is not None and shows(mine, page.path) else None

    def _relink(self, page: Page, pending: Any) -> None:
        """A hello: when ``page`` is a new client of the tab that made pending changes (a
        reload: the page that made them said bye), the ones its document still holds
        (``pending``, the cell ids) are now its, the others are dropped (not saved before the
        reload: gone with it; the agent is told). Nothing is concluded while the page that made
        a change is still here."""
        if not isinstance(pending, list):
            return  # the page's notebook not loaded yet: nothing to conclude
        held = {c for c in pending[:MAX_PENDING] if isinstance(c, str)}
        ours = sorted(c for c in held if pending_edit(c) is not None)
        if ours:  # an agent's review here holds them: the page offers Keep/Reject even in a file not trusted
            self._tell(page, "held", ours)
        if not page.tab:
            return  # no tab id: no reload to tell apart
        for cell, (client, tab) in list(self._made.items()):
            if tab != page.tab or client == page.client or client in self.pages:
                continue  # another tab; or the page that made it is still here (a tab opened from it copies
                # its sessionStorage, so its tab id: not a reload)
            if cell in held:
                self._made[cell] = (page.client, page.tab)
            else:
                del self._made[cell]
                drop(cell, "the notebook's page was reloaded without saving it, so the change is gone")

    def _touched(self, page: Page, touched: dict[str, Any], data: dict[str, Any]) -> None:
        """The user changed a cell the kernel changed through ``page`` (``touched``: ``{"cell", "what"}``,
        ``what`` ``edited`` or ``deleted``): told to the agents that touched it in their current turn."""
        cell, what = touched.get("cell"), touched.get("what")
        if not isinstance(cell, str) or not cell or len(cell) > MAX_FIELD or what not in ("edited", "deleted"):
            self.strays += 1
            return
        if what == "deleted":
            self._made.pop(cell, None)
        user_changed(cell, what)

    def _tell_others(self, page: Page, note: dict[str, Any]) -> None:
        """Tell the other pages of ``page``'s notebook that it changed there (no answer)."""
        for other in list(self.pages.values()):
            if other.client == page.client or other.path != page.path:
                continue
            self._tell(other, "elsewhere", note)

    def _settled(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("escouade_nb: a Keep or Reject from the page failed: %s", task.exception())

    def close(self) -> None:
        """Cancel the Keep/Reject operations under way that no agent's review owns."""
        for task in list(self._tasks):
            task.cancel()
        for timer in list(self._timers):
            timer.cancel()
        self._timers.clear()

    def _gone(self, page: Page) -> None:
        if self.pages.get(page.client) is page:
            del self.pages[page.client]
            if any(client == page.client for client, _tab in self._made.values()):
                for delay in RELINK_PINGS:
                    self._ping_later(delay)
        for client, ended in self._runs.values():
            if client == page.client and not ended.done():
                ended.set_exception(ToolFailure("the notebook page closed before the cell's run ended: its outputs "
                                                'are unknown (read the notebook again, notebook_cells(source="live"))'))

    def _ping_later(self, delay: float) -> None:
        """Ping the pages in ``delay`` seconds if a pending change's page is still gone then."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        timer: asyncio.TimerHandle | None = None

        def fire() -> None:
            if timer is not None:
                self._timers.discard(timer)
            if any(client not in self.pages for client, _tab in self._made.values()):
                self.ping()

        timer = loop.call_later(delay, fire)
        self._timers.add(timer)

    @staticmethod
    def _close(comm: Any) -> None:
        try:
            comm.close()
        except Exception:
            log.debug("escouade_nb: closing a page's comm failed", exc_info=True)

    # -- choosing the page --------------------------------------------------------------------
    def choose(self) -> Page | None:
        """The page an operation goes to: among those showing the kernel's notebook (all of
        them when the kernel does not know it, or when every page shows one same other path:
        the notebook was renamed since the kernel started), the latest to say hello."""
        pages = list(self.pages.values())
        nb = self._notebook() if self._notebook is not None else None
        mine = pages if nb is None else [p for p in pages if shows(nb, p.path)]
        if not mine and len({p.path for p in pages}) == 1:
            mine = pages
        return max(mine, key=lambda p: p.order, default=None)

    async def _page(self, none: str = NO_PAGE, client: str | None = None) -> Page:
        page = self.pages.get(client) if client is not None else None
        page = page if page is not None else self.choose()
        if page is not None:
            return page
        self._hello = asyncio.Event()
        self.ping()
        deadline = time.monotonic() + HELLO_WAIT
        try:
            while (left := deadline - time.monotonic()) > 0:
                try:
                    await asyncio.wait_for(self._hello.wait(), left)
                except TimeoutError:
                    break
                self._hello.clear()
                page = self.choose()
                if page is not None:
                    return page
        finally:
            self._hello = None
        raise ToolFailure(none)

    # -- requests -------------------------------------------------------------------------------
    async def request(self, op: str, *, again: bool = True, client: str | None = None,
                      **fields: Any) -> tuple[Page, dict]:
        """Send ``op`` to one page and await its answer: ``(page, reply)``. A page that does
        not answer within :data:`REPLY_WAIT` is forgotten and the request goes once more to
        another (``again=False``: not sent twice — a change, which the silent page may have
        made). ``client``: that page when it is still here (else the one :meth:`choose` gives).
        :class:`~escouade_nb.kernel_mcp.tools.ToolFailure` (one line, for the
        model) when no page answers, or with the page's own error."""
        loop = asyncio.get_running_loop()
        none = fields.pop("_none", None) or (NO_PAGE if op == "cells" else NO_PAGE_TO_RUN if op == "run"
                                             else NO_PAGE_TO_CHANGE)
        for _attempt in range(2 if again else 1):
            page = await self._page(none, client)
            req = f"r{next(self._ids)}"
            answer: asyncio.Future = loop.create_future()
            self._waiting[req] = (page.client, answer)
            started = time.monotonic()
            try:
                page.comm.send({"v": PROTOCOL, "op": op, "req": req, "to": page.client, **fields})
                reply = await asyncio.wait_for(answer, REPLY_WAIT)
            except TimeoutError:
                self._gone(page)  # gone without a bye (a reload, a closed window)
                self._close(page.comm)
                if not again:
                    raise ToolFailure(f"the notebook page did not answer within {REPLY_WAIT:g} s: the change may or "
                                      'may not be made, read the notebook again (notebook_cells(source="live"))'
                                      ) from None
                continue
            finally:
                self._waiting.pop(req, None)
            self.round_trips.append(time.monotonic() - started)
            if reply.get("ok") is not True:
                error = _text(reply.get("error"))[:400] or "an error"
                raise ToolFailure(error if reply.get("stale") is True else f"the notebook page answered: {error}")
            return page, reply
        raise ToolFailure(none)

    async def live_cells(self) -> dict[str, Any]:
        """The notebook's cells as its page shows them now, unsaved edits included:
        ``{"path": the page's notebook path, "client": its id, "cells": [...]}`` — the cells
        as the page sent them (unchecked: :func:`~escouade_nb.core.notebook.live_cells`
        checks them). :class:`~escouade_nb.kernel_mcp.tools.ToolFailure` as :meth:`request`."""
        page, reply = await self.request("cells")
        return {"path": _text(reply.get("path")) or page.path, "client": page.client, "cells": reply.get("cells")}

    async def change_cell(self, op: str, fields: dict[str, Any]) -> dict[str, Any]:
        """An agent's change (``op`` ``insert``, ``edit``, ``delete``; see
        :class:`~escouade_nb.kernel_mcp.server.LiveNotebook`), sent once to one page, which
        checks the cell's hash as it applies it and marks the cell pending review in its
        metadata: the page's reply (``cell_id``, ``change``). Not sent twice."""
        if op not in ("insert", "edit", "delete"):
            raise ValueError(f"no such change: {op!r}")
        page, reply = await self.request(op, again=False, **fields)
        cell_id, change = _text(reply.get("cell_id")), _text(reply.get("change")) or op
        if cell_id:
            if change == "removed":
                self._made.pop(cell_id, None)
            else:
                self._made[cell_id] = (page.client, page.tab)
        self._tell_others(page, {"change": change, "agent": _text(fields.get("agent"))[:200], "cell": cell_id})
        return {"cell_id": cell_id, "change": change}

    async def settle_cell(self, cell_id: str, keep: bool, client: str | None = None) -> dict[str, Any]:
        """Keep or Reject an agent's pending change of a cell, in one page (sent once; the
        page ``client`` when given and still here, else the page that made the change, else the
        one :meth:`choose` gives): ``{"outcome": "kept" | "rejected"}``; see
        :class:`~escouade_nb.kernel_mcp.server.LiveNotebook`."""
        if client is None and cell_id in self._made:
            client = self._made[cell_id][0]
        page, reply = await self.request("settle", again=False, client=client, cell=cell_id, keep=bool(keep))
        outcome = reply.get("outcome")
        self._made.pop(cell_id, None)
        if outcome in ("kept", "rejected"):
            self._tell_others(page, {"change": outcome, "agent": "", "cell": cell_id})
        return {"outcome": outcome if outcome in ("kept", "rejected") else None,
                "changed_by_user": reply.get("changed_by_user") is True}


    # -- running a cell (execute_cell) ------------------------------------------------------------
    def running(self) -> str | None:
        """Why a cell run from the page would wait now (a cell of this kernel is running: the
        page's run would queue behind it, and that cell may await the very turn asking), or None."""
        if self.cells_running > 0:
            return ("a cell of this kernel is running now (a run from the notebook would wait behind it, and that "
                    "cell may be awaiting this very turn)")
        return None

    async def cell_to_run(self, cell_id: str) -> dict[str, Any]:
        """A code cell as its page shows it now: ``{"source", "sha256", "pending": bool}``.
        :class:`~escouade_nb.kernel_mcp.tools.ToolFailure`: no page (in one line, nothing
        run), no such cell, not a code cell."""
        _page, reply = await self.request("cells", _none=NO_PAGE_TO_RUN, images=False)  # no image data needed
        try:
            _total, cells = notebook_core.live_cells(reply.get("cells"))
        except ValueError as exc:
            raise ToolFailure(str(exc)) from None
        cell = next((c for c in cells if c["id"] == cell_id), None)
        if cell is None:
            raise ToolFailure(f"no cell {cell_id[:80]} in the notebook (notebook_cells(source=\"live\") gives the "
                              "ids): nothing was run")
        if cell["cell_type"] != "code":
            raise ToolFailure(f"cell {cell_id[:80]} is a {cell['cell_type']} cell: only code cells run")
        if cell.get("pending_change") == "delete":
            raise ToolFailure(f"cell {cell_id[:80]} is marked for deletion, pending review: not run")
        return {"source": cell["source"], "sha256": cell["sha256"], "pending": bool(cell["pending"])}

    async def run_cell(self, cell_id: str, base: str, by: dict[str, Any]) -> dict[str, Any]:
        """Have the page run a cell in the notebook, if its source's SHA-256 is still ``base``
        (else :class:`~escouade_nb.kernel_mcp.tools.ToolFailure` "changed since", nothing
        run); ``by`` (who asked: agent, harness, session, turn, at) goes with the code that ran
        into the cell's metadata ``escouade.ran``. Sent once; answers when the run has ended:
        ``{"execution_count", "outputs": [nbformat-like outputs, unchecked], "client"}``; a
        ToolFailure when that page goes away first. Awaited in the caller's task: a
        cancellation stops the waiting (the cell's run goes on in the page)."""
        req = f"run{next(self._ids)}"
        ended: asyncio.Future = asyncio.get_running_loop().create_future()
        page = await self._page(NO_PAGE_TO_RUN)
        self._runs[req] = (page.client, ended)
        try:
            await self.request("run", again=False, client=page.client, cell=cell_id, base=base, by=by, run=req)
            done = await ended
        finally:
            self._runs.pop(req, None)
        if done.get("ok") is not True:
            raise ToolFailure(f"the notebook page answered: {_text(done.get('error'))[:400] or 'an error'}")
        count = done.get("execution_count")
        return {"execution_count": count if isinstance(count, int) and not isinstance(count, bool) else None,
                "outputs": done.get("outputs") if isinstance(done.get("outputs"), list) else [],
                "client": page.client}


_Shape = TypeVar("_Shape")


@dataclass(frozen=True)
class PageMessage(Generic[_Shape]):
    """One kind of message a page sends on its comm (:data:`PAGE_MESSAGES`): its value (under the key that
    names it) must be a ``shape``; ``handle(pages, page, value, message)`` acts on it (the whole message
    beside: a reply's fields)."""

    shape: type[_Shape]
    handle: Callable[[NotebookPages, Page, _Shape, dict[str, Any]], None]


PAGE_MESSAGES: dict[str, PageMessage[Any]] = {
    # the page → kernel rows of the module's table (the wire); the first of these keys a message has names it
    "hello": PageMessage(dict, NotebookPages._hello_again),
    "decide": PageMessage(dict, NotebookPages._decide),
    "touched": PageMessage(dict, NotebookPages._touched),
    "ran": PageMessage(str, NotebookPages._ran),
    "reply": PageMessage(str, NotebookPages._reply),
    "forms": PageMessage(dict, NotebookPages._forms_held),
}


_pages: NotebookPages | None = None


def start_in_kernel(shell: Any) -> NotebookPages | None:
    """This kernel's :class:`NotebookPages`, started once (``%load_ext escouade_nb``) and
    given to the kernel's MCP server (:func:`~escouade_nb.kernel_mcp.server.use_live_notebook`).
    ``None`` outside an IPython kernel."""
    global _pages
    if getattr(shell, "kernel", None) is None:
        return None
    if _pages is None:
        from ..kernel_mcp.server import use_live_notebook

        def notebook() -> Path | None:
            ref = notebook_core.kernel_notebook(shell.user_ns, os.environ, Path.cwd())
            return ref.path if ref is not None else None

        _pages = NotebookPages(notebook=notebook)
        use_live_notebook(_pages)
        pages = _pages

        def started(*_args: Any) -> None:
            pages.cells_running += 1

        def ended(*_args: Any) -> None:
            pages.cells_running = max(0, pages.cells_running - 1)

        events = getattr(shell, "events", None)
        if events is not None:  # a cell running holds the kernel's queue: execute_cell says so
            events.register("pre_run_cell", started)
            events.register("post_run_cell", ended)
    _pages.start()
    use_extension_pages(_pages.views_extension)  # the views' module travels once per page (front.light_module)
    use_form_pages(_pages.send_form)  # the saved forms: what changed, to the pages that write them into the document
    return _pages
