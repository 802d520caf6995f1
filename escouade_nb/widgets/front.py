"""The views' one widget model: an anywidget whose front-end is ``widgets/escouade.js``.

One model per view, never one per item. Python keeps the state and renders what must be
safe (escaped HTML, :mod:`.render`); the browser does layout, scrolling, focus and keys.
Between them, custom messages (``widgets/README.md`` has the protocol):

- to the browser: ``{"k": "snap", "seq": S, "rid": R, "state": {...}}`` — the whole state,
  answering a view that asked (a view that renders late, a page reload); and
  ``{"k": "ops", "seq": S, "ops": [...]}`` — what changed since ``S - 1``, batched by an
  :class:`Outbox` (see :data:`FLUSH_BYTES`, :data:`FLUSH_WAIT`). A message whose JSON is
  bigger than :data:`DEFLATE_OVER` bytes travels deflated in a binary buffer (``"z": 1``).
  A view drops ops it already has (``seq`` ≤ its snapshot's) and asks again on a gap.
- from the browser: ``{"k": "snap?", "rid": R}`` and the user's actions
  (``{"k": "act", "act": NAME, ...}``), dispatched by :meth:`FrontView.act`.

Synced traits are few and small (``kind``; the squad's ``opened``): a trait is re-sent
whole on every change, so nothing that grows lives in one.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import weakref
import zlib
from collections.abc import Callable
from typing import Any

import anywidget
import traitlets

from .._resources import shipped_dir

log = logging.getLogger(__name__)

FLUSH_BYTES = 3000
"""Pending text (bytes of ops) that sends a batch at once (a custom message costs ~620
bytes of envelope: fewer, fuller messages are what bounds the traffic)."""
FLUSH_WAIT = 0.5
"""Seconds at most between a change and the batch that carries it (s); the front-end
reveals streamed text over the next frames, so the reply still reads as a stream."""
FLUSH_SOON = 0.03
"""Seconds before a batch carrying something to act on goes (a card, a new item, a
status), so that it shows at once (s)."""
DEFLATE_OVER = 600
"""A message whose JSON is longer than this (bytes) is sent deflated in a buffer."""
DEFLATE_FAST_OVER = 1 << 20
"""A message longer than this (bytes: a card of megabytes) is deflated at level 1, not 6 (half the time
on the kernel's loop, for a few percent more bytes)."""
COMPANION_WAIT = 1.0
"""Seconds between a moment that matters (a status change, a turn's end, a new journal
entry) and the companion output's redraw; later moments within it share that redraw (s)."""
FORM_KEY = "escouade_nb"
"""The key of a companion output's metadata that names it ours: ``{"view": ID, "v": N}`` — the view's
id (its widget model's id) and the version of the saved form the output holds. The kernel writes it when
it displays the companion; it is saved with the notebook (a ``display_id`` is not), so escouade_nb's
JupyterLab extension finds the output again after its tab was closed and reopened, or reloaded."""


_form_pages: Callable[[dict[str, Any]], bool] | None = None
_forms: weakref.WeakValueDictionary[str, FrontView] = weakref.WeakValueDictionary()


def use_form_pages(send: Callable[[dict[str, Any]], bool] | None) -> None:
    """Tell the views how a saved form reaches the pages with escouade_nb's extension (the notebook
    pages' channel, :mod:`.notebook_pages`): ``send(form)`` → bool, ``form`` one
    :meth:`FrontView.form_message`; ``False`` when no such page is known (the form then goes as a
    display update: VS Code, Colab, nbclient). ``None``: always a display update."""
    global _form_pages
    _form_pages = send


def form_view(view_id: str) -> FrontView | None:
    """The live view whose saved form has the id ``view_id`` (:data:`FORM_KEY`), or None."""
    return _forms.get(view_id)


def utf16_len(text: str) -> int:
    """``len`` of ``text`` as JavaScript counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def text_delta(old: str, new: str) -> list:
    """``[start, end, insert]``: ``new`` is ``old`` with its UTF-16 units ``start`` to ``len(old) - end``
    replaced by ``insert`` (positions as JavaScript counts them; the common head and tail are kept, so a
    change at a long form's end costs its own size). Found in slices compared in blocks (memcmp), not
    per character."""
    if old == new:
        return [utf16_len(old), 0, ""]
    limit = min(len(old), len(new))
    head, step = 0, 1 << 16
    while step:  # the longest common head: by blocks, then halving
        while head + step <= limit and old[head:head + step] == new[head:head + step]:
            head += step
        step >>= 1
    room = limit - head
    tail, step, o, n = 0, 1 << 16, len(old), len(new)
    while step:
        while tail + step <= room and old[o - tail - step:o - tail] == new[n - tail - step:n - tail]:
            tail += step
        step >>= 1
    return [utf16_len(old[:head]), utf16_len(old[len(old) - tail:]) if tail else 0, new[head:len(new) - tail]]


@functools.cache
def front_end() -> tuple[str, str]:
    """(ES module, stylesheet) of the views, read once from the shipped ``widgets/``
    folder (:func:`.._resources.shipped_dir`). ``FileNotFoundError`` naming the file
    when the install lacks it."""
    folder = shipped_dir("widgets")
    return (folder / "escouade.js").read_text(encoding="utf-8"), (folder / "escouade.css").read_text(encoding="utf-8")


VIEWS_KEY = "escouade_nb.views"
"""``Symbol.for`` key under which escouade_nb's JupyterLab extension puts, in each page,
``{module, tag}``: the views' module (``widgets/escouade.js``, its stylesheet loaded with
it) and :func:`front_end_tag` of the files it was built from."""

_LIGHT_ESM = """// escouade_nb's views: the module comes from this page's escouade_nb extension, once per page
const KEY = Symbol.for("%(key)s"), TAG = "%(tag)s";
function fromKernel(model) {
  const g = globalThis[Symbol.for(KEY.description + ".kernel")] ||= {};
  if (g[TAG]) return g[TAG];
  return g[TAG] = new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      model.off("msg:custom", on); delete g[TAG]; reject(new Error("no answer")); }, 15000);
    const on = (m) => {
      if (!m || m.k !== "esm" || m.tag !== TAG) return;
      clearTimeout(timer); model.off("msg:custom", on);
      const style = document.createElement("style"); style.textContent = m.css; document.head.append(style);
      const url = URL.createObjectURL(new Blob([m.js], { type: "text/javascript" }));
      import(url).then((x) => resolve(x.default), reject);
    };
    model.on("msg:custom", on);
    model.send({ k: "esm?" });
  });
}
export default {
  async render(props) {
    const shared = globalThis[KEY];
    let views;
    try { views = shared && shared.tag === TAG ? shared.module : await fromKernel(props.model); }
    catch (e) { return; }  // no extension and no kernel: the saved form (the companion output) stays
    return views.render(props);
  }
};
"""


@functools.cache
def front_end_tag() -> str:
    """16 hex digits naming this install's views (SHA-256 of ``escouade.js``, a NUL, then
    ``escouade.css``, as UTF-8): a page's extension is used for a view only when its copy
    has the same tag."""
    import hashlib

    js, css = front_end()
    return hashlib.sha256(js.encode("utf-8") + b"\0" + css.encode("utf-8")).hexdigest()[:16]


@functools.cache
def light_module() -> str:
    """The ES module a view carries when the page has escouade_nb's extension (about 1 KB
    against the ~63 KB of ``escouade.js`` + ``escouade.css``): it renders with the page's
    copy (:data:`VIEWS_KEY`) when its tag is :func:`front_end_tag`, else asks the kernel
    once per page for the whole module (``{"k": "esm?"}`` → ``{"k": "esm", "tag", "js",
    "css"}``: VS Code, Colab, a tab without the extension, an older extension); with
    neither (saved widget state, no kernel) it draws nothing and the companion stays."""
    return _LIGHT_ESM % {"key": VIEWS_KEY, "tag": front_end_tag()}


_PACKED_ESM = """// escouade_nb's views where the page has no escouade_nb extension (VS Code, Colab, nbconvert's widget
// state): widgets/escouade.js, a NUL and widgets/escouade.css, zlib-deflated and base64-encoded below,
// unpacked once per page (the module shows in the browser's tools as escouade_nb/escouade.js)
const KEY = Symbol.for("%(key)s"), TAG = "%(tag)s";
const PACKED = "%(packed)s";
function unpacked() {
  const g = globalThis[Symbol.for(KEY.description + ".kernel")] ||= {};
  return g[TAG] ||= (async () => {
    const bytes = Uint8Array.from(atob(PACKED), (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    const text = await new Response(stream).text(), cut = text.indexOf("\\0");
    const style = document.createElement("style"); style.textContent = text.slice(cut + 1); document.head.append(style);
    const js = text.slice(0, cut) + "\\n//# sourceURL=escouade_nb/escouade.js\\n";
    const url = URL.createObjectURL(new Blob([js], { type: "text/javascript" }));
    return (await import(url)).default;
  })().catch((e) => { delete g[TAG]; throw e; });
}
export default {
  async render(props) {
    const shared = globalThis[KEY];
    const views = shared && shared.tag === TAG ? shared.module : await unpacked();
    return views.render(props);
  }
};
"""


@functools.cache
def packed_module() -> str:
    """The ES module a view carries when no page with escouade_nb's extension shows its kernel
    (VS Code, Colab, nbclient; the first view of a kernel, built before the page's hello):
    ``escouade.js``, a NUL and ``escouade.css`` (UTF-8), zlib-deflated (level 9) and base64-encoded
    in a loader of ~1 KB that unpacks them once per page (the browser's ``DecompressionStream``),
    adds the stylesheet to the document and imports the module; it uses the page's copy
    (:data:`VIEWS_KEY`) instead when one with the same :func:`front_end_tag` is there. About
    35 KB of JSON in a view's ``comm_open`` against ~102 KB for the two files as they are; the
    saved widget state still draws without a kernel. The module unpacked is the build's file byte
    for byte (readable, not minified)."""
    import base64

    js, css = front_end()
    packed = base64.b64encode(zlib.compress(f"{js}\0{css}".encode(), 9)).decode("ascii")
    return _PACKED_ESM % {"key": VIEWS_KEY, "tag": front_end_tag(), "packed": packed}


_extension_pages: Callable[[], bool] | None = None


def use_extension_pages(present: Callable[[], bool] | None) -> None:
    """Tell the views how to know whether a page with escouade_nb's extension shows this
    kernel (the notebook pages' hello, :mod:`.notebook_pages`): ``present()`` → bool,
    called as each view is built (it may ask the pages to say hello). ``None``: never."""
    global _extension_pages
    _extension_pages = present


def extension_present() -> bool:
    """Whether the view built now may carry :func:`light_module` (a page said hello)."""
    if _extension_pages is None:
        return False
    try:
        return bool(_extension_pages())
    except Exception:
        log.debug("escouade_nb: asking whether the pages have the extension failed", exc_info=True)
        return False


def on_loop(fn: Callable) -> Callable:
    """Bind a front-end callback to the event loop that builds the view (the kernel's).

    JupyterLab ≥ 4.6 may send widget messages over a kernel subshell, and ipykernel then
    runs the callback on that subshell's thread and loop. Agents live on the kernel's main
    loop, so the callback is handed to it with ``call_soon_threadsafe``; on that loop
    already, it runs at once. Outside any loop (a plain script) ``fn`` is returned as is."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return fn

    def call(*args, **kwargs):
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is loop:
            fn(*args, **kwargs)
        else:
            loop.call_soon_threadsafe(functools.partial(fn, *args, **kwargs))
    return call


_shared_layout = None


def shared_layout():
    """The one ipywidgets ``Layout`` every view uses (the views style themselves in CSS): a
    view adds one widget model, not two. Made on first use; never closed by a view."""
    global _shared_layout
    if _shared_layout is None or _shared_layout.comm is None:
        import ipywidgets

        _shared_layout = ipywidgets.Layout()
    return _shared_layout


def is_shared(widget: Any) -> bool:
    """Whether ``widget`` is the :func:`shared_layout` (which no view may close)."""
    return widget is not None and widget is _shared_layout


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def utf8(text: str) -> bytes:
    """``text`` as UTF-8; a lone UTF-16 surrogate (half of a pair an agent split) becomes
    U+FFFD and a pair split in two code points is joined, rather than failing the send."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace").encode("utf-8")


class Outbox:
    """Batches a view's ops into few messages: :meth:`push` adds ops, or only says that
    ``size`` more bytes wait to be collected (``urgent`` ones go within
    :data:`FLUSH_SOON`); a batch leaves when :data:`FLUSH_BYTES` are pending or
    :data:`FLUSH_WAIT` after the oldest pending change. Outside a running loop every push
    is sent at once (a script, a synchronous test)."""

    def __init__(self, send: Callable[[list], None]) -> None:
        self._send = send
        self.ops: list = []
        self.size = 0
        self._handle: asyncio.TimerHandle | None = None
        self._due = float("inf")

    def push_soon(self) -> None:
        """Ask for a batch within :data:`FLUSH_SOON` (the sender has something to collect)."""
        self.push([], 0, True)

    def push(self, ops: list, size: int = 0, urgent: bool = False) -> None:
        if ops:
            self.ops.extend(ops)
        self.size += size or 64 * len(ops)
        if self._handle is not None and not urgent and self.size < FLUSH_BYTES:
            return  # a batch is due already: the common case while a reply streams (per chunk)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if self.size >= FLUSH_BYTES:
            self.flush()
            return
        due = loop.time() + (FLUSH_SOON if urgent else FLUSH_WAIT)
        if due < self._due:
            if self._handle is not None:
                self._handle.cancel()
            self._due = due
            self._handle = loop.call_at(due, self.flush)

    def flush(self) -> None:
        """Send now what is pending (the sender adds what it collects at this moment:
        ``send`` is called even with no op pushed)."""
        ops = self.ops
        self.drop()
        self._send(ops)

    def drop(self) -> None:
        """Forget what is pending (the view closed, or a snapshot carries it)."""
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self._due = float("inf")
        self.ops, self.size = [], 0


class FrontView(anywidget.AnyWidget):
    """Base of the views: the message protocol, the batching, the actions.

    Subclasses give ``state()`` (a JSON-able dict: the whole view, for a snapshot),
    push ops with :meth:`push`, and register actions with ``self.actions[NAME] = fn``
    (``fn(message)``). ``close()`` ends what the view holds (``hold(token)``) and drops
    what is pending."""

    _esm, _css = packed_module(), ""  # made once, when the views are imported (anywidget takes them from the class)
    kind = traitlets.Unicode("").tag(sync=True)
    """``agent``, ``turn``, ``squad``, ``journal``, ``compare``, ``sessions`` or ``update``: which
    front-end the module draws."""

    def __init__(self, **kwargs: Any) -> None:
        self._closed = False  # before the widget opens: ipywidgets' __del__ closes a half-built one
        self._companion = None
        self._companion_sent: dict | None = None
        self._form_before: dict | None = None  # the saved form drawn before the last one (form_message's "from")
        self._companion_due: asyncio.TimerHandle | None = None
        self.form_version = 0
        """The version of the saved form last drawn (:data:`FORM_KEY`): one more at each redraw."""
        self._form_marked = False  # the companion output carries FORM_KEY (displayed or updated with it)
        kwargs.setdefault("layout", shared_layout())  # one model per view: no Layout model of its own
        if "_esm" not in kwargs and extension_present():  # the page has the module: ~1 KB, not ~63 KB
            kwargs["_esm"], kwargs["_css"] = light_module(), ""
        super().__init__(**kwargs)
        self.seq = 0
        self.sent_messages = 0
        self.sent_bytes = 0
        self.outbox = Outbox(self._send_ops)
        self.actions: dict[str, Callable[[dict], Any]] = {}
        self._held: list[Callable[[], object]] = []
        self.on_msg(on_loop(self._on_message))
        _forms[self.form_id] = self

    # -- to the browser --------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    def push(self, ops: list, size: int = 0, urgent: bool = False) -> None:
        if not self._closed:
            self.outbox.push(ops, size, urgent)

    def collect(self) -> tuple[list, bool]:
        """(ops, more) gathered when a batch leaves: what changed since the last one
        (overridden; ``more``: call again soon, something is behind)."""
        return [], False

    def state_if_changed(self, tag: str, state: dict[str, Any]) -> tuple[list, bool]:
        """For a view sent whole at each change (:meth:`collect`): ``[[tag, state]]`` when
        ``state`` differs from the one last sent this way, else no op."""
        if state == self.__dict__.get("_state_sent"):
            return [], False
        self.__dict__["_state_sent"] = state
        return [[tag, state]], False

    def _send_ops(self, ops: list) -> None:
        if self._closed:
            return
        try:
            more_ops, more = self.collect()
        except Exception:  # a bug (or an agent's value no renderer expected) must not end the view
            log.exception("%s: collecting what changed failed", type(self).__name__)
            more_ops, more = [], False
        ops = ops + more_ops
        if ops:
            try:
                self._deliver({"k": "ops", "seq": self.seq + 1, "ops": ops})
                self.seq += 1  # counted once sent: a failed send leaves no gap the views would trip on
            except Exception:
                log.exception("%s: sending a batch failed", type(self).__name__)
        if more:
            self.outbox.push_soon()

    def _deliver(self, message: dict[str, Any]) -> None:
        text = dumps(message)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate from an agent: sent as U+FFFD
            data = utf8(text)
            message = json.loads(data)
        if len(data) > DEFLATE_OVER:
            packed = zlib.compress(data, 6 if len(data) < DEFLATE_FAST_OVER else 1)  # a huge card: fast, still ~100×
            head = {"k": message["k"], "seq": message["seq"], "z": 1}
            self.send(head, [packed])
            self.sent_bytes += len(packed) + 40
        else:
            self.send(message)
            self.sent_bytes += len(data)
        self.sent_messages += 1

    def snapshot(self, rid: Any = None) -> None:
        """Send what is pending (the views already shown need it), then the whole state
        for the view that asked (request id ``rid``) at that sequence number."""
        self.outbox.flush()
        try:
            self._deliver({"k": "snap", "seq": self.seq, "rid": rid, "state": self.state()})
        except Exception:
            log.exception("%s: a snapshot failed", type(self).__name__)

    # -- from the browser ------------------------------------------------------------------------
    def _on_message(self, _widget: Any, content: Any, _buffers: Any = None) -> None:
        if self._closed or not isinstance(content, dict):
            return
        if content.get("k") == "snap?":
            self.snapshot(content.get("rid"))
            return
        if content.get("k") == "esm?":  # a light module in a page without the extension
            self.send_front_end()
            return
        if content.get("k") == "act":
            self.act(content)

    def send_front_end(self) -> None:
        """Send the whole front-end to this model's views, ``{"k": "esm", "tag", "js", "css"}``
        (what :func:`light_module` asks for where the page lacks the extension)."""
        js, css = front_end()
        self.send({"k": "esm", "tag": front_end_tag(), "js": js, "css": css})
        self.sent_bytes += len(js) + len(css)
        self.sent_messages += 1

    def act(self, message: dict[str, Any]) -> Any:
        """Do what the front-end asks (``message["act"]`` names it): the same call a
        click in the browser makes, for scripts and tests. Unknown actions are ignored
        (logged); an action that raises is logged, the view goes on."""
        if self._closed:
            return None
        fn = self.actions.get(str(message.get("act")))
        if fn is None:
            log.warning("%s: unknown action %r", type(self).__name__, message.get("act"))
            return None
        try:
            return fn(message)
        except Exception:
            log.exception("%s: action %r failed", type(self).__name__, message.get("act"))
            return None

    # -- lifetime ---------------------------------------------------------------------------------
    def hold(self, token: Callable[[], object]) -> Callable[[], object]:
        self._held.append(token)
        return token

    @property
    def closed(self) -> bool:
        return self._closed

    def release(self) -> None:
        """What a view lets go of besides its tokens (overridden)."""

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.outbox.drop()
        if self._companion_due is not None:
            self._companion_due.cancel()
            self._companion_due = None
        for token in self._held:
            try:
                token()
            except Exception:
                log.exception("releasing a subscription of %s", type(self).__name__)
        self._held.clear()
        try:
            self.release()
        except Exception:
            log.exception("closing %s", type(self).__name__)
        layout = getattr(self, "layout", None)
        super().close()
        if layout is not None and not is_shared(layout):
            layout.close()

    # -- outside a live front-end ------------------------------------------------------------------
    def companion_bundle(self, final: bool = False) -> dict[str, str]:
        """The static output shown before the widget, the view's saved form: ``text/html``
        (hidden by the live view; seen in a notebook reopened without its kernel, in
        nbconvert and on GitHub) and ``text/plain`` (nbconvert's text forms, nbval, a text
        front-end). It says what the view was and what it held when last drawn, nothing
        that stops being true when the kernel is gone ("starting…", "queued", a time
        "ago", a machine's absolute path); ``final``: the view's last form (a finished
        turn). Deterministic (nbval compares it). The widget's own output carries an empty
        ``text/plain``: what the notebook keeps as text is this one. Overridden."""
        return {"text/plain": "", "text/html": f'<div class="esc-saved">{self.kind} view</div>{HIDE_ORPHAN}'}

    @property
    def form_id(self) -> str:
        """The id of this view's saved form in its companion output's metadata (:data:`FORM_KEY`): the
        widget model's id."""
        return str(self.model_id)

    @property
    def form_shown(self) -> bool:
        """Whether the companion output was displayed with its metadata (:data:`FORM_KEY`)."""
        return self._companion is not None and self._form_marked

    def form_metadata(self) -> dict[str, Any]:
        """The companion output's metadata: ``{FORM_KEY: {"view": id, "v": version}}``."""
        return {FORM_KEY: {"view": self.form_id, "v": self.form_version}}

    def _ipython_display_(self) -> None:
        """Two outputs: the static companion (:meth:`companion_bundle`, kept to update it,
        its metadata naming it ours, :meth:`form_metadata`), then the widget itself."""
        from IPython.display import display

        self._companion_sent = self.companion_bundle()
        self._companion = display(self._companion_sent, metadata=self.form_metadata(), raw=True, display_id=True)
        self._form_marked = True
        data, meta = self._repr_mimebundle_()
        display(data, metadata=meta, raw=True)

    def form_message(self, since: int | None = None) -> dict[str, Any]:
        """The saved form for the pages' extension: ``{"view", "to": version, "data": {mime: [start, end,
        insert]}, "from": since}`` — each mime's change from the form of version ``since`` (only the one
        last drawn is kept: ``since`` is ``form_version - 1`` or None) — or, ``since`` None, ``{"view",
        "to", "whole": {mime: text}}``. Positions count UTF-16 units (:func:`text_delta`)."""
        now = self._companion_sent or {}
        if since is None:
            return {"view": self.form_id, "to": self.form_version, "whole": dict(now)}
        old = self._form_before or {}
        return {"view": self.form_id, "from": since, "to": self.form_version,
                "data": {mime: text_delta(old.get(mime, ""), text) for mime, text in now.items()}}

    def update_companion(self, final: bool = False) -> None:
        """Redraw the companion output now (nothing if the view was not displayed, or if
        its saved form did not change). Where a page with escouade_nb's extension is known
        (:func:`use_form_pages`), only what changed goes, to the page, which writes it into the
        notebook's document (the output its metadata names, whatever that page's history);
        else a display update of the whole form (VS Code, Colab, nbclient)."""
        if self._companion_due is not None:
            self._companion_due.cancel()
            self._companion_due = None
        if self._companion is None:
            return
        try:
            bundle = self.companion_bundle(final)
            if bundle == self._companion_sent:
                return
            self._form_before = self._companion_sent
            self._companion_sent = bundle
            self.form_version += 1
            if self._form_marked and _form_pages is not None and _form_pages(self.form_message(self.form_version - 1)):
                return
            self._companion.update(bundle, metadata=self.form_metadata(), raw=True)
            self._form_marked = True
        except Exception:
            log.exception("%s: its saved form could not be updated", type(self).__name__)

    def update_companion_soon(self, *_args: Any) -> None:
        """Redraw the companion :data:`COMPANION_WAIT` seconds from now (one redraw for
        every call until then; at once outside a running loop). For moments that matter
        — never per streamed chunk."""
        if self._companion is None or self._closed or self._companion_due is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.update_companion()
            return
        self._companion_due = loop.call_later(COMPANION_WAIT, self._companion_timer)

    def _companion_timer(self) -> None:
        self._companion_due = None
        if not self._closed:
            self.update_companion()

    def _repr_mimebundle_(self, **kwargs: Any):
        """The widget, with an empty ``text/plain``: the widget's output is saved with the
        text it had when first displayed, so it holds none (no "queued", no address
        ``<… object at 0x…>``); the companion output carries the text (see
        :meth:`companion_bundle`)."""
        bundle = super()._repr_mimebundle_(**kwargs)
        data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
        if data:
            data["text/plain"] = ""
        return data, meta


HIDE_ORPHAN = ('<style>.jp-OutputArea-child:has(.esc-saved)+.jp-OutputArea-child '
               '.jp-OutputArea-output:not(:has(*)){display:none}</style>')
"""A rule for companions: it hides the "Error displaying widget: model not found" that
JupyterLab shows for the widget output after a companion when the kernel holding the model
is gone (that output then holds text only, no element)."""


@functools.cache
def _static_css() -> str:
    """The stylesheet without comments and runs of spaces (it is inlined in every static
    output)."""
    import re

    css = re.sub(r"/\*.*?\*/", "", front_end()[1], flags=re.S)
    return re.sub(r"\s*\n\s*", "", re.sub(r"[ \t]{2,}", " ", css))


@functools.cache
def palette_css(scope: str) -> str:
    """The stylesheet's colour palette (the ``--esc-*`` custom properties of its
    ``.esc-root`` rule: JupyterLab's theme variables with fallbacks) declared for the
    selector ``scope`` instead, as one CSS rule: for a plain output that colours with
    ``var(--esc-…)`` outside a view's root."""
    import re

    found = re.search(r"\.esc-root\s*\{([^{}]*)\}", _static_css())
    body = found.group(1) if found else ""
    return scope + "{" + ";".join(d.strip() for d in body.split(";") if d.strip().startswith("--esc-")) + "}"


MATHS_IGNORED = "mathjax_ignore tex2jax_ignore"
"""The classes on a static output's root that keep the page's maths typesetter off it (a ``$x$`` in
a saved command is text, not maths): MathJax 3's ``ignoreHtmlClass`` default, ``mathjax_ignore``
(JupyterLab 4 / Notebook 7: ``@jupyterlab/mathjax-extension`` typesets outputs with MathJax 3's
``FindTeX``, whose ``OPTIONS.ignoreHtmlClass`` is that), and MathJax 2's ``tex2jax_ignore`` (nbconvert's
HTML export loads MathJax 2.7 with ``tex2jax``; classic notebooks). Both are inherited by every element
inside."""


def static_page(body: str) -> str:
    """``body`` wrapped for a static output: the stylesheet inlined, in a root element the
    stylesheet scopes to, which the page's maths typesetter leaves alone (:data:`MATHS_IGNORED`)."""
    return f'<div class="esc-root esc-static {MATHS_IGNORED}"><style>{_static_css()}</style>{body}</div>'
