// escouade_nb's views in the browser: one anywidget model per view (agent, turn, squad, journal,
// compare, sessions, update).
// Python sends escaped HTML for items and JSON for the rest (see widgets/README.md);
// this module does layout, scrolling, focus and keys. Text from Python that is not
// already escaped HTML is only ever set with textContent.

const AT_BOTTOM = 8; // px: "at the bottom" for stick-to-bottom
const SETTLE_MS = 500; // a card's keys act only after it has been in place this long
const GESTURE_MS = 800; // a scroll this soon after your wheel, touch, key or scrollbar press is yours
const REVEAL_FRAMES = 24; // streamed text is revealed over about this many frames (~400 ms, a batch's time)

function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

async function inflate(buffer) {
  const bytes = buffer instanceof DataView ? new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength)
    : new Uint8Array(buffer.buffer || buffer);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return await new Response(stream).text();
}

// One message channel per view: snapshots and ordered, de-duplicated ops.
class Channel {
  constructor(model, apply) {
    this.model = model;
    this.apply = apply;
    this.seq = -1;
    this.rid = Math.random().toString(36).slice(2);
    this.chain = Promise.resolve();
    this.onmsg = (msg, buffers) => {
      this.chain = this.chain.then(async () => {
        const m = msg && msg.z ? JSON.parse(await inflate(buffers[0])) : msg;
        this.receive(m);
      }).catch((e) => console.error("escouade view:", e));
    };
    model.on("msg:custom", this.onmsg);
    this.ask();
  }
  ask() { this.send({ k: "snap?", rid: this.rid }); }
  receive(m) {
    if (!m) return;
    if (m.k === "snap") {
      if (m.rid !== this.rid && this.seq >= 0) return; // another view's catch-up
      this.seq = m.seq;
      this.apply({ snap: m.state });
    } else if (m.k === "ops") {
      if (this.seq < 0 || m.seq <= this.seq) return; // before our snapshot, or already in it
      if (m.seq > this.seq + 1) { this.seq = -1; this.ask(); return; } // a gap: catch up
      this.seq = m.seq;
      this.apply({ ops: m.ops });
    }
  }
  send(content) {
    if (this.closed) return;
    try { this.model.send(content); } catch (e) { this.failed = true; if (this.onfail) this.onfail(e); }
  }
  close() { this.closed = true; this.model.off("msg:custom", this.onmsg); }
}

// -- is the kernel still there? ------------------------------------------------------------------
// A view's model lives in its kernel: once the kernel is restarted, shut down or dead, the view is
// only a picture of what was there and nothing in it can act. Any of these says so (once):
// - the widget manager marks its models disconnected when the kernel restarts (`comm_live_update`;
//   the view's element gets `jupyter-widgets-disconnected`) — at render already for a view drawn
//   from saved widget state with no kernel;
// - JupyterLab's kernel connection (the widget manager's `kernel`): its status goes `restarting`,
//   `autorestarting` (it died; the server starts a new one) or `dead` (shut down), or it is
//   disposed or replaced — no event is missed between two checks, the status is read too;
// - a send of `channel` that throws (a closed comm), in any front-end.
// `gone(why)` is called once with "restarted", "died", "shut down" or "not running".
const GONE = { restarting: "restarted", autorestarting: "died", dead: "shut down" };

function watchKernel(model, el, channel, gone) {
  let over = false;
  const wm = model.widget_manager;
  let kernel = null;
  try { kernel = (wm && wm.kernel) || null; } catch { kernel = null; }
  const disconnected = () => !!el.closest(".jupyter-widgets-disconnected");
  const check = () => {
    if (over) return;
    let why = null;
    if (kernel) {
      let now = kernel;
      try { now = wm.kernel; } catch { now = null; }
      if (kernel.isDisposed || now !== kernel) why = "shut down";
      else if (GONE[kernel.status]) why = GONE[kernel.status];
    }
    if (!why && disconnected()) why = "restarted";
    if (why) end(why);
  };
  const onStatus = (_k, status) => { if (GONE[status]) end(GONE[status]); else check(); };
  const onDisposed = () => end("shut down");
  const onLive = () => { check(); setTimeout(check, 0); }; // the view's own listener sets the class
  // a kernel that died is first seen "restarting" (the server's word), then "autorestarting": the
  // words are chosen a moment after the first sign, from all the signs seen by then
  const seen = new Set();
  let timer = null;
  const end = (why) => {
    if (over) return;
    seen.add(why);
    if (timer === null) timer = setTimeout(() => {
      over = true;
      stop();
      gone(["died", "shut down", "restarted", "not running", "gone"].find((w) => seen.has(w)) || why);
    }, 100);
  };
  const stop = () => {
    model.off("comm_live_update", onLive);
    if (kernel) {
      try { kernel.statusChanged.disconnect(onStatus); kernel.disposed.disconnect(onDisposed); } catch { /* not Lumino */ }
    }
  };
  model.on("comm_live_update", onLive);
  if (kernel) {
    try { kernel.statusChanged.connect(onStatus); kernel.disposed.connect(onDisposed); } catch { /* not Lumino */ }
  }
  if (disconnected()) end(kernel ? "restarted" : "not running");
  else check();
  channel.onfail = () => end("gone");
  if (channel.failed) end("gone"); // its first send (the snapshot's request) already failed
  return { stop: () => { over = true; clearTimeout(timer); stop(); }, end };
}

// What a view whose kernel is gone says (its `why` from watchKernel).
function goneWords(why) {
  const what = why === "not running" ? "This view's kernel is not running" : why === "died" ? "The kernel died"
    : why === "shut down" ? "The kernel was shut down" : why === "restarted" ? "The kernel was restarted" : "The kernel is gone";
  return what + ": this is what the view showed, and it can no longer act.";
}

// The squad and the journal once their kernel is gone: the words on top, every control off.
function goneView(ui, why, after) {
  ui.dead = why;
  ui.channel.close();
  ui.root.classList.add("esc-dead");
  for (const c of ui.root.querySelectorAll("button, textarea, select, input")) c.disabled = true;
  const note = h("div", { class: "esc-gone", role: "status" }, h("b", { text: "⚠ " }), h("span", { text: goneWords(why) + " " + after }));
  const head = ui.root.querySelector(".esc-head");
  if (head) head.after(note); else ui.root.prepend(note);
}

// -- the file links of the conversation --------------------------------------------------------
function pageConfig() {
  try { return JSON.parse(document.getElementById("jupyter-config-data").textContent); } catch { return {}; }
}

function openPath(path) {
  const cfg = pageConfig();
  const root = (cfg.serverRoot || cfg.rootUri || "").replace(/^file:\/\//, "").replace(/\/$/, "");
  if (root && path.startsWith(root + "/")) {
    const rel = path.slice(root.length + 1);
    const app = window.jupyterapp;
    if (app && app.commands) { app.commands.execute("docmanager:open", { path: rel }); return true; }
    const base = (cfg.baseUrl || "/").replace(/\/?$/, "/");
    window.open(base + "lab/tree/" + rel.split("/").map(encodeURIComponent).join("/"), "_blank", "noopener");
    return true;
  }
  return false;
}

// -- a card's buttons --------------------------------------------------------------------------------
// The act a card's button sends (its key, value and the card's fields), or null when the
// form still misses a required field (said under it). Its buttons are then off: the answer
// redraws the card. One copy for the agent, turn and squad views.
function cardAct(btn, scope) {
  const act = btn.dataset.act;
  const content = { act, key: btn.dataset.key || null, value: btn.dataset.value || null };
  if (scope.querySelector("[data-field]")) {
    const { fields, missing } = collectFields(scope);
    if (act === "answer" && missing.length) {
      let note = scope.querySelector(".esc-missing");
      if (!note) { note = h("div", { class: "esc-missing esc-error" }); scope.append(note); }
      note.textContent = "To fill in: " + missing.join(", ");
      return null;
    }
    content.fields = fields;
  }
  for (const b of scope.querySelectorAll("button[data-act]")) b.disabled = true;
  return content;
}

// -- fields of a card ------------------------------------------------------------------------------
function fieldsOf(root) {
  const out = new Map();
  for (const f of root.querySelectorAll("[data-field]")) {
    if (f.dataset.touched !== "1" && f.tagName !== "TEXTAREA") continue;
    out.set(f.dataset.field, f.multiple ? [...f.selectedOptions].map((o) => o.value) : f.value);
  }
  return out;
}

function restoreFields(root, typed) {
  if (!typed || !typed.size) return;
  for (const f of root.querySelectorAll("[data-field]")) {
    if (!typed.has(f.dataset.field)) continue;
    const v = typed.get(f.dataset.field);
    if (f.multiple) for (const o of f.options) o.selected = v.includes(o.value);
    else f.value = v;
    if (f.tagName !== "TEXTAREA" || v) f.dataset.touched = "1";
  }
}

function collectFields(scope) {
  const out = {};
  const missing = [];
  for (const f of scope.querySelectorAll("[data-field]")) {
    const name = f.dataset.field;
    const given = f.dataset.touched === "1" || f.dataset.default === "1" || f.tagName === "TEXTAREA";
    let value;
    if (f.tagName === "SELECT" && f.multiple) value = [...f.selectedOptions].map((o) => o.value);
    else value = f.value;
    const empty = value === "" || (Array.isArray(value) && value.length === 0);
    if (f.dataset.required === "1" && (empty || !given)) {
      const label = f.closest("label");
      missing.push(label ? label.firstElementChild.textContent.replace(/ \*$/, "") : name);
    }
    if (given && !empty) out[name] = value;
  }
  return { fields: out, missing };
}

// -- the conversation (agent and turn views) --------------------------------------------------------
class ConversationUI {
  constructor(model, el, kind) {
    this.model = model;
    this.kind = kind;
    this.items = new Map(); // key -> element
    this.html = new Map(); // key -> html last set (to keep a pinned clone while unchanged)
    this.newCount = 0;
    this.head = null;
    // keys typed anywhere in the view (prompt, card fields) are the view's, not the notebook's shortcuts
    this.root = h("div", { class: `esc-view esc-${kind}`, "data-lm-suppress-shortcuts": "true" });
    this.headEl = h("div", { class: "esc-head" });
    this.signIn = h("div", { class: "esc-signin" });
    this.transcript = h("div", { class: "esc-transcript" });
    this.scroll = h("div", { class: "esc-scroll" }, this.transcript);
    this.newBtn = h("button", { class: "esc-new", hidden: true, onclick: () => this.toBottom() });
    this.pins = h("div", { class: "esc-pins", "aria-live": "polite" });
    this.queued = h("div", { class: "esc-queued" });
    this.review = h("div", { class: "esc-review", "aria-live": "polite" });
    this.root.append(this.headEl, this.signIn, h("div", { class: "esc-scroll-wrap" }, this.scroll, this.newBtn),
      this.pins, this.review, this.queued);
    if (kind === "agent") this.root.append(this.composer());
    el.append(this.root);
    // whether the view follows the conversation: read when the user (or we) scroll, never in a
    // frame that writes (no forced layout per frame, however many views stream at once)
    this.following = true;
    // Only you stop the following: a scroll that leaves the end without a gesture of yours
    // (a window resize, Chrome keeping the focused box in sight, a reflow) is undone. Your
    // gestures: the wheel, a touch, a key, a press on the scrollbar.
    this.scroll.addEventListener("scroll", () => {
      if (this.atBottom()) { this.following = true; this.clearNew(); }
      else if (this.following && !this.userScrolls()) this.scroll.scrollTop = 1e9;
      else this.following = false;
    });
    const gesture = () => { this.gestureAt = performance.now(); };
    for (const ev of ["wheel", "touchmove"]) this.scroll.addEventListener(ev, gesture, { passive: true });
    this.root.addEventListener("keydown", (e) => { if (!e.target.closest("input, textarea, select")) gesture(); }, { passive: true });
    this.scroll.addEventListener("pointerdown", (e) => { if (e.target === this.scroll) { this.dragging = true; gesture(); } });
    this.onPointerUp = () => { if (this.dragging) { this.dragging = false; gesture(); } };
    window.addEventListener("pointerup", this.onPointerUp);
    // a narrower window (or a card's details opening) reflows the transcript: a view that was
    // following stays at the bottom
    this.resized = new ResizeObserver((entries) => {
      if (this.outer && entries.some((e) => e.target === this.outer)) this.fit();
      if (this.following) this.scroll.scrollTop = 1e9;
    });
    this.resized.observe(this.scroll);
    this.resized.observe(this.transcript);
    if (kind === "agent") requestAnimationFrame(() => this.fit());
    this.root.addEventListener("click", (e) => this.click(e));
    this.root.addEventListener("input", (e) => { if (e.target.dataset && e.target.dataset.field) e.target.dataset.touched = "1"; });
    this.root.addEventListener("change", (e) => { if (e.target.dataset && e.target.dataset.field) e.target.dataset.touched = "1"; });
    this.root.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && this.head && this.head.can && this.head.can.stop) {
        e.preventDefault(); e.stopPropagation(); this.act({ act: "stop" });
      } else if (e.target.closest("input, textarea, select")) e.stopPropagation();
    });
    this.channel = new Channel(model, (m) => this.apply(m));
    this.el = el;
    this.live = watchKernel(model, el, this.channel, (why) => this.gone(why));
  }

  // The agent view is as tall as what its notebook shows of the page (the notebook's scroll
  // area in JupyterLab and Notebook 7, else the window: VS Code's webview…), so that its head
  // and its prompt box are on screen together with the transcript scrolling between them;
  // followed as the window or the panel is resized. (Not the nearest scrolling ancestor: an
  // output area scrolls too, and is as tall as the view.)
  fit() {
    if (!this.outer) {
      this.outer = this.root.closest(".jp-WindowedPanel-outer, .jp-Notebook") || document.documentElement;
      if (this.outer !== document.documentElement) this.resized.observe(this.outer);
      else window.addEventListener("resize", this.onWindow = () => this.fit());
    }
    const room = this.outer === document.documentElement ? window.innerHeight : this.outer.clientHeight;
    if (room > 0) this.root.style.setProperty("--esc-room", `${Math.max(200, room - 24)}px`);
  }

  act(content) { if (!this.dead) this.channel.send({ k: "act", ...content }); }

  // The kernel is gone: say so where the pinned card and the head's status were, and leave
  // nothing that looks as if it could act (what only scrolls or unfolds the view still works).
  gone(why) {
    this.dead = why;
    this.channel.close();
    this.root.classList.add("esc-dead");
    // never given its content (drawn from saved widget state with no kernel): the saved form shows
    this.el.escNoCompanionHiding = this.channel.seq < 0;
    if (this.el.escNoCompanionHiding && this.el.escCompanion) this.el.escCompanion.classList.remove("esc-companion-hidden");
    this.drawDead();
  }

  drawDead() {
    const name = this.head && this.head.name;
    const words = goneWords(this.dead) + (name ? ` %escouade resume ${name} in a cell brings ${name} back with its conversation.` : "");
    const status = this.headEl.querySelector(".esc-head-main .esc-status");
    if (status) { status.className = "esc-status esc-st-failed"; status.textContent = `● kernel ${this.dead}`; status.title = words; }
    for (const n of this.headEl.querySelectorAll(".esc-stop, .esc-menu")) n.remove();
    this.signIn.replaceChildren();
    this.queued.replaceChildren();
    this.review.replaceChildren();
    for (const n of this.transcript.querySelectorAll(":scope > .esc-pinned")) n.classList.remove("esc-pinned");
    // what was still waiting or running never will: its status word says so
    for (const st of this.transcript.querySelectorAll(".esc-st-waiting, .esc-st-in_progress, .esc-st-pending")) {
      if (!st.classList.contains("esc-status")) continue;
      const words = st.classList.contains("esc-st-waiting") ? "not answered: no kernel" : "stopped with the kernel";
      st.className = "esc-status esc-st-cancelled";
      st.textContent = (st.textContent.startsWith("●") ? "● " : "") + words;
    }
    const note = h("div", { class: "esc-gone", role: "status" }, h("b", { text: "⚠ " }), h("span", { text: goneWords(this.dead) + " " }));
    if (name) note.append(h("code", { text: `%escouade resume ${name}` }), h("span", { text: ` in a cell brings ${name} back with its conversation.` }));
    this.pins.replaceChildren(note);
    for (const c of this.root.querySelectorAll("button, textarea, select, input")) if (!c.classList.contains("esc-new")) c.disabled = true;
    if (this.box) { this.box.placeholder = `No kernel: %escouade resume ${name || "NAME"} brings the agent back`; this.hideComplete(); }
  }

  userScrolls() { return this.dragging || performance.now() - (this.gestureAt || -1e9) < GESTURE_MS; }
  atBottom() { const s = this.scroll; return s.scrollHeight - s.scrollTop - s.clientHeight < AT_BOTTOM; }
  toBottom() { this.scroll.scrollTop = 1e9; this.following = true; this.clearNew(); } // clamped by the browser
  clearNew() { this.newCount = 0; this.newText = false; this.newBtn.hidden = true; }

  // Messages are applied once a frame, all that came since the last one: one layout read and
  // one scroll per frame, however many batches a fast stream brings.
  apply(m) {
    this.inbox = this.inbox || [];
    this.inbox.push(m);
    if (!this.framed) { this.framed = true; requestAnimationFrame(() => this.applyFrame()); }
  }

  applyFrame() {
    this.framed = false;
    const inbox = this.inbox;
    this.inbox = [];
    const follow = this.following;
    let added = 0;
    let grew = false;
    let snap = false;
    for (const m of inbox) {
      const r = this.applyOne(m);
      added += r.added; grew = grew || r.grew; snap = snap || !!m.snap;
    }
    this.drawPins();
    if (this.dead) this.drawDead();
    if (snap || follow) { this.scroll.scrollTop = 1e9; this.following = true; }
    else if (added || grew) {
      this.newCount += added;
      this.newText = this.newText || grew;
      this.newBtn.hidden = false;
      this.newBtn.textContent = this.newCount ? `${this.newCount} new ↓` : "new text ↓";
    }
  }

  applyOne(m) {
    let added = 0;
    let grew = false;
    if (m.snap) {
      if (this.pending) this.pending.clear();
      this.transcript.replaceChildren();
      this.items.clear();
      this.html.clear();
      for (const [key, html, meta] of m.snap.items) this.upsert(key, html, meta);
      this.setHead(m.snap.head);
      if (m.snap.prompt !== undefined && this.box && !this.box.value) this.box.value = m.snap.prompt;
    } else {
      for (const op of m.ops) {
        const [t, key] = op;
        if (t === "it") { if (this.upsert(key, op[2], op[3])) added++; }
        else if (t === "tx") { this.append(key, op[2]); grew = true; }
        else if (t === "fz") { this.freeze(key, op[2], op[3]); grew = true; }
        else if (t === "ex") { const x = this.items.get(key)?.querySelector(".esc-extra"); if (x) x.insertAdjacentHTML("beforeend", op[2]); grew = true; } // escaped by Python
        else if (t === "hd") this.setHead(op[1]);
        else if (t === "pv" && this.box) { this.box.value = op[1]; }
      }
    }
    return { added, grew };
  }

  upsert(key, html, meta) {
    meta = meta || {};
    if (this.pending) this.pending.delete(key); // drawn whole: what waited to be revealed is in it
    let node = this.items.get(key);
    const fresh = !node;
    if (fresh) {
      node = h("div", { "data-key": key });
      this.items.set(key, node);
      this.transcript.append(node);
    }
    node.className = `esc-item esc-i-${meta.c || "x"}`;
    node.hidden = !!meta.h;
    node.dataset.p = meta.p ? "1" : "0";
    node.dataset.title = meta.t || "";
    if (this.html.get(key) !== html) {
      const typed = fieldsOf(node);
      node.innerHTML = html; // escaped by Python (widgets/render.py)
      restoreFields(node, typed); // what you typed in a card survives its redraw (an error under the form…)
      this.html.set(key, html);
    }
    return fresh && !meta.h;
  }

  tail(key) { const n = this.items.get(key); return n && n.querySelector(".esc-tail"); }

  // Streamed text arrives in batches (a few a second); it is revealed over the next frames,
  // so a reply reads as a stream, not in jumps. Anything else touching the item flushes it.
  append(key, text) {
    this.pending = this.pending || new Map();
    this.pending.set(key, (this.pending.get(key) || "") + text);
    if (!this.revealing) { this.revealing = true; requestAnimationFrame(() => this.revealFrame()); }
  }

  revealFrame() {
    const follow = this.following;
    for (const [key, text] of this.pending) {
      let n = Math.max(3, Math.ceil(text.length / REVEAL_FRAMES));
      if (n < text.length && /[\uD800-\uDBFF]/.test(text[n - 1])) n++; // never split a surrogate pair
      const t = this.tail(key);
      if (t) t.append(text.slice(0, n));
      if (n >= text.length) this.pending.delete(key); else this.pending.set(key, text.slice(n));
    }
    if (follow) this.scroll.scrollTop = 1e9;
    if (this.pending.size) requestAnimationFrame(() => this.revealFrame());
    else this.revealing = false;
  }

  flushReveal(key) {
    if (!this.pending || !this.pending.has(key)) return;
    const t = this.tail(key);
    if (t) t.append(this.pending.get(key));
    this.pending.delete(key);
  }

  freeze(key, html, drop) {
    this.flushReveal(key);
    const n = this.items.get(key);
    if (!n) return;
    const blocks = n.querySelector(".esc-blocks");
    if (blocks) blocks.insertAdjacentHTML("beforeend", html); // escaped by Python
    const t = n.querySelector(".esc-tail");
    if (t && drop) t.textContent = t.textContent.slice(drop);
  }

  // -- what waits for you, pinned by the prompt box ----------------------------------------------
  drawPins() {
    if (this.dead) return;
    const pending = [...this.transcript.querySelectorAll(':scope > .esc-item[data-p="1"]')];
    for (const n of this.transcript.querySelectorAll(":scope > .esc-pinned")) if (n !== pending[0]) n.classList.remove("esc-pinned");
    if (!pending.length) { this.pins.replaceChildren(); this.pinKey = null; return; }
    const first = pending[0];
    first.classList.add("esc-pinned"); // its question and buttons show in the pin only (not twice)
    const key = first.dataset.key;
    const html = this.html.get(key);
    if (this.pinKey === key && this.pinHtml === html && this.pins.firstChild) {
      this.pinCount.textContent = this.countText(pending.length);
      return;
    }
    const typed = this.pins.firstChild ? fieldsOf(this.pins) : null;
    const sameCard = this.pinKey === key;
    this.pinKey = key;
    this.pinHtml = html;
    const ask = first.querySelector(".esc-ask");
    const card = ask ? ask.cloneNode(true) : h("div", { text: first.dataset.title });
    if (typed && sameCard) restoreFields(card, typed);
    this.pinCount = h("span", { class: "esc-pin-count", text: this.countText(pending.length) });
    const jump = h("button", { class: "esc-link", text: "show in conversation ↑", onclick: () => this.jumpTo(key) });
    this.pins.replaceChildren(h("div", { class: "esc-pin" },
      h("div", { class: "esc-pin-head" }, this.pinCount, h("b", { class: "esc-pin-title", text: first.dataset.title }), jump),
      card));
  }

  countText(n) { return n === 1 ? "⚑ waiting for you:" : `⚑ ${n} waiting for you — the oldest:`; }

  jumpTo(key) {
    const node = this.items.get(key);
    if (!node) return;
    this.following = false; // you asked to read there
    this.scroll.scrollTop = node.offsetTop - this.transcript.offsetTop - 8;
    node.classList.add("esc-flash");
    setTimeout(() => node.classList.remove("esc-flash"), 1200);
  }

  click(e) {
    const open = e.target.closest("[data-open]");
    if (open) { e.preventDefault(); if (!openPath(open.dataset.open)) open.title = open.dataset.open + " (outside the server's folder)"; return; }
    const btn = e.target.closest("button[data-act]");
    if (!btn || btn.disabled) return;
    const content = cardAct(btn, btn.closest(".esc-ask") || btn.closest(".esc-item") || this.root);
    if (!content) return;
    this.act(content);
    if (this.box) this.box.focus();
  }

  // the agent's changes to the open notebook still pending review (head.review, from agent.pending_edits):
  // Keep all / Reject all and one Keep / Reject each; a click says "review" to the kernel, which settles it
  // through the agent's review; the list is redrawn from the kernel's next head (nothing left once answered)
  drawReview(review) {
    const edits = (review && review.edits) || [];
    if (!edits.length) { this.review.replaceChildren(); return; }
    const decide = (value, key, btn, more) => { btn.disabled = true; this.act({ act: "review", value, key, ...(more || {}) }); };
    const files = edits.some((e) => e.file !== undefined);
    const all = h("div", { class: "esc-review-head" },
      h("span", { class: "esc-badge", text: "review" }),
      h("span", { class: "esc-review-count", text: ` ${edits.length} change${edits.length === 1 ? "" : "s"}${files ? "" : " to the notebook"} pending review ` }));
    const keepAll = h("button", { class: "esc-btn esc-allow esc-review-keep-all", text: "Keep all", title: "Keep every pending change of this agent's (its provenance written in each cell's metadata)" });
    const rejectAll = h("button", { class: "esc-btn esc-reject esc-review-reject-all", text: "Reject all", title: "Take back every pending change of this agent's (the agent is told)" });
    keepAll.onclick = () => { rejectAll.disabled = true; decide("keep", "", keepAll); };
    rejectAll.onclick = () => { keepAll.disabled = true; decide("reject", "", rejectAll); };
    all.append(keepAll, " ", rejectAll);
    const open = new Set([...this.review.querySelectorAll("details[open]")].map((d) => d.dataset.key));
    const rows = edits.map((e) => {
      if (e.file !== undefined) return this.drawReviewFile(e, decide, open);
      const row = h("div", { class: "esc-review-item", "data-cell": e.cell },
        h("span", { class: "esc-review-what", text: e.label, title: e.cell }));
      if (e.busy) row.append(h("span", { class: "esc-dim", text: " settling…" }));
      else {
        const keep = h("button", { class: "esc-btn esc-allow esc-review-keep", text: "Keep" });
        const reject = h("button", { class: "esc-btn esc-reject esc-review-reject", text: "Reject" });
        keep.onclick = () => { reject.disabled = true; decide("keep", e.cell, keep); };
        reject.onclick = () => { keep.disabled = true; decide("reject", e.cell, reject); };
        row.append(" ", keep, " ", reject);
      }
      return row;
    });
    this.review.replaceChildren(all, ...rows);
  }

  // a file the agent changed (review=True, engine/file_review.py): Keep / Reject of the file, its diff folded
  // under it (kept open across redraws), and each hunk's Keep / Reject when it has several
  drawReviewFile(e, decide, open) {
    const row = h("div", { class: "esc-review-item esc-review-file", "data-key": e.key, "data-file": e.file },
      h("span", { class: "esc-review-what", text: e.label, title: `${e.file} (${(e.through || []).map((t) => t === "fs" ? "through escouade_nb's fs" : t === "between" ? "between turns, by the agent or by you" : "by the agent itself").join(", ")})` }));
    const buttons = [];
    if (e.busy) row.append(h("span", { class: "esc-dim", text: " settling…" }));
    else {
      const keep = h("button", { class: "esc-btn esc-allow esc-review-keep", text: "Keep" });
      const reject = h("button", { class: "esc-btn esc-reject esc-review-reject", text: "Reject", title: "Put the file back as it was before the agent's change (the agent is told)" });
      buttons.push(keep, reject);
      keep.onclick = () => { buttons.forEach((b) => { b.disabled = true; }); decide("keep", e.key, keep); };
      reject.onclick = () => { buttons.forEach((b) => { b.disabled = true; }); decide("reject", e.key, reject); };
      row.append(" ", keep, " ", reject);
    }
    const details = h("details", { class: "esc-review-diff", "data-key": e.key }, h("summary", { text: (e.hunks || []).length ? `diff, ${e.hunks.length} hunks` : "diff" }));
    if (open.has(e.key)) details.open = true;
    if ((e.hunks || []).length) {
      for (const hk of e.hunks) {
        const box = h("div", { class: "esc-diff esc-review-hunk", "data-hunk": String(hk.index) });
        box.innerHTML = hk.diff; // escaped by Python (widgets/render.py)
        if (!e.busy) {
          const keep = h("button", { class: "esc-btn esc-allow esc-review-keep-hunk", text: "Keep hunk" });
          const reject = h("button", { class: "esc-btn esc-reject esc-review-reject-hunk", text: "Reject hunk" });
          buttons.push(keep, reject);
          keep.onclick = () => { buttons.forEach((b) => { b.disabled = true; }); decide("keep", e.key, keep, { hunk: hk.index, at: hk.at }); };
          reject.onclick = () => { buttons.forEach((b) => { b.disabled = true; }); decide("reject", e.key, reject, { hunk: hk.index, at: hk.at }); };
          box.prepend(h("div", { class: "esc-review-hunk-actions" }, keep, " ", reject));
        }
        details.append(box);
      }
    } else {
      const box = h("div", { class: "esc-diff" });
      box.innerHTML = e.diff; // escaped by Python (widgets/render.py)
      details.append(box);
    }
    row.append(details);
    return row;
  }

  // -- the head ---------------------------------------------------------------------------------------
  setHead(head) {
    const hadCommands = JSON.stringify((this.head && this.head.commands) || []);
    this.head = head;
    if (!head) return;
    // the agent's commands can arrive after "/" was typed: offer them then, as if just typed
    if (this.box && document.activeElement === this.box && JSON.stringify(head.commands || []) !== hadCommands) this.suggest();
    this.root.dataset.agent = head.name;
    this.root.dataset.status = head.status;
    const status = h("span", { class: `esc-status esc-st-${head.tone}`, text: "● " + head.status_text });
    const main = h("div", { class: "esc-head-main" }, h("b", { class: "esc-name", text: head.name }));
    if (head.harness) main.append(h("span", { class: "esc-dim", text: ` · ${head.harness}` }));
    main.append(" ", status);
    if (head.took) main.append(h("span", { class: "esc-dim", text: ` · ${head.took.toFixed(1)} s` }));
    if (head.title) main.append(h("span", { class: "esc-session-title", text: head.title, title: "session title" }));
    const side = h("div", { class: "esc-head-side" });
    if (head.usage && (head.usage.used !== undefined && head.usage.used !== null)) {
      const pct = head.usage.size ? Math.min(100, Math.round(100 * head.usage.used / head.usage.size)) : null;
      const meter = h("span", { class: "esc-usage", title: `context: ${head.usage.used} of ${head.usage.size ?? "?"} tokens` + (head.usage.cost ? ` · cost ${head.usage.cost}` : "") });
      if (pct !== null) meter.append(h("span", { class: "esc-meter" }, h("span", { class: "esc-meter-fill", style: `width:${pct}%` })));
      meter.append(h("span", { text: `${fmt(head.usage.used)}${head.usage.size ? " / " + fmt(head.usage.size) : ""} tokens` + (head.usage.cost ? ` · ${head.usage.cost}` : "") }));
      side.append(meter);
    }
    if (head.budget) {
      const words = [head.budget.text, head.budget.squad ? `squad ${head.budget.squad}` : null].filter(Boolean).join(" · ");
      side.append(h("span", { class: "esc-budget" + (head.budget.over ? " esc-over" : ""), title: "spent against the budget (set_budget)", text: `budget ${words}` }));
    }
    if (this.kind === "agent") {
      if (!this.notifyBtn) this.notifyBtn = notifyToggle(true);
      side.append(this.notifyBtn);
    }
    if (!this.attentionId) this.attentionId = "v" + (++attention().serial);
    attention().report(this.attentionId, [[head.name, head.status]]);
    const inHead = (c) => c.key === "escouade_mode" || c.key === "model" || (c.key === "agent_mode" && !(head.controls || []).some((d) => d.key === "escouade_mode"));
    for (const c of head.controls || []) if (inHead(c)) side.append(this.control(c));
    if (head.can && head.can.stop) side.append(h("button", { class: "esc-btn esc-stop", title: head.status === "starting" ? "Stop the start: end the agent's process (Esc)" : "Cancel the running turn (Esc)", text: "■ Stop", onclick: () => this.act({ act: "stop" }) }));
    if (this.kind === "agent") side.append(this.menu(head, (head.controls || []).filter((c) => !inHead(c))));
    const sub = h("div", { class: "esc-head-sub esc-dim" });
    if (head.folder !== undefined) sub.append(h("span", { class: "esc-folder", text: head.folder + (head.where || ""), title: [head.folder, ...(head.protections || []).map((p) => p[1])].join("\n") }));
    if (head.rules !== undefined) {
      sub.append(head.rules.length
        ? h("span", { class: "esc-rules", text: ` · guarded by ${head.rules.join(", ")}`, title: "rule plugins answering this agent's permissions first" })
        : h("span", { class: "esc-rules esc-none", title: head.rules_hint || "" }, " · no rule plugins",
          ...(/`([^`]+)`/.test(head.rules_hint || "") ? [" — ", h("code", { text: /`([^`]+)`/.exec(head.rules_hint)[1] })] : [])));
    }
    if (head.tools) sub.append(h("span", { class: "esc-tools", text: ` · ${head.tools[0]}`, title: head.tools[1] }));
    this.headEl.replaceChildren(h("div", { class: "esc-head-row" }, main, side), ...(sub.childNodes.length ? [sub] : []));
    this.drawSignIn(head.sign_in);
    this.drawQueued(head.queued || []);
    this.drawReview(head.review);
    if (this.box) {
      this.box.placeholder = head.placeholder || "";
      // an agent that takes no prompt (closed, exited…): its box is off and its hint says why
      this.sendBtn.disabled = this.box.disabled = !(head.can && head.can.send);
      this.steerBtn.hidden = !head.steer;
    }
  }

  // the prompts waiting for their turn: each can be edited (Enter saves, Escape leaves it) or dropped
  drawQueued(list) {
    const shape = JSON.stringify(list);
    if (this.editing !== null && this.editing !== undefined && list.some((t) => String(t.id) === this.editing)) return; // being edited
    if (shape === this.queuedShape) return;
    this.queuedShape = shape;
    this.editing = null;
    this.queued.replaceChildren(...list.map((t) => {
      const row = h("div", { class: "esc-queued-item", "data-id": String(t.id), title: t.text });
      const text = h("span", { class: "esc-queued-text", text: " " + t.text });
      const edit = () => {
        this.editing = String(t.id);
        const box = h("input", { type: "text", class: "esc-queued-edit", value: t.text, "aria-label": "Edit the queued prompt", "data-lm-suppress-shortcuts": "true" });
        const save = () => { const v = box.value.trim(); this.editing = null; if (v && v !== t.text) this.act({ act: "queued", value: "edit", key: String(t.id), text: v }); this.queuedShape = null; this.drawQueued(list); };
        box.addEventListener("keydown", (e) => { e.stopPropagation(); if (e.key === "Enter") { e.preventDefault(); save(); } else if (e.key === "Escape") { e.preventDefault(); this.editing = null; this.queuedShape = null; this.drawQueued(list); } });
        text.replaceWith(box);
        box.focus();
      };
      row.append(h("span", { class: "esc-badge", text: t.steered ? "steered" : "queued" }), text,
        h("button", { class: "esc-btn esc-other esc-queued-btn", text: "Edit", title: "Edit this queued prompt", onclick: edit }),
        h("button", { class: "esc-btn esc-reject esc-queued-btn", text: "Drop", title: "Take this prompt out of the queue", onclick: () => this.act({ act: "queued", value: "drop", key: String(t.id) }) }));
      return row;
    }));
  }

  control(c) {
    if (c.kind === "bool") {
      const box = h("input", { type: "checkbox", disabled: c.disabled });
      box.checked = !!c.value;
      box.addEventListener("change", () => this.act({ act: "set", key: c.key, value: box.checked }));
      return h("label", { class: "esc-control" }, box, h("span", { text: " " + c.label }));
    }
    const sel = h("select", { disabled: c.disabled, "aria-label": c.label, title: c.label });
    if (!c.options.some(([, v]) => v === c.value)) sel.append(h("option", { value: "", text: `${c.label}: —` }));
    for (const [label, value] of c.options) {
      const o = h("option", { value: JSON.stringify(value), text: label });
      if (value === c.value) o.selected = true;
      sel.append(o);
    }
    sel.addEventListener("change", () => { if (sel.value) this.act({ act: "set", key: c.key, value: JSON.parse(sel.value) }); });
    return h("label", { class: "esc-control" }, h("span", { class: "esc-dim", text: c.label + " " }), sel);
  }

  menu(head, controls) {
    // the head is redrawn when the agent's state changes: the menu keeps its open state and
    // a question it was asking (read from the page, not from events that may come later)
    const before = this.headEl.querySelector(".esc-menu");
    const wasOpen = before ? before.open : false;
    const confirmBox = h("div", { class: "esc-confirm", hidden: true });
    const ask = (question, label, act) => {
      this.confirming = { question, label, act };
      confirmBox.replaceChildren(h("span", { text: question + " " }),
        h("button", { class: "esc-btn esc-reject", text: label, onclick: () => { this.confirming = null; confirmBox.hidden = true; details.open = false; this.act({ act }); } }),
        h("button", { class: "esc-btn esc-other", text: "Cancel", onclick: () => { this.confirming = null; confirmBox.hidden = true; } }));
      confirmBox.hidden = false;
    };
    const items = h("div", { class: "esc-menu-items" });
    for (const c of controls) items.append(h("div", { class: "esc-menu-control" }, this.control(c)));
    if (head.can && head.can.restart) items.append(h("button", { class: "esc-menu-item", text: "Restart…", title: "Start a new process and session for this agent", onclick: () => ask(`Restart ${head.name}? A new process and session start; this conversation stays above.`, "Restart", "restart") }));
    if (!["exited", "closed", "failed"].includes(head.status)) items.append(h("button", { class: "esc-menu-item", text: "Stop agent…", title: "End the agent's process", onclick: () => ask(`Stop ${head.name}'s process?`, "Stop agent", "close_agent") }));
    items.append(h("div", { class: "esc-menu-note esc-dim", text: head.folder + (head.where || "") }));
    const details = h("details", { class: "esc-menu" }, h("summary", { title: "More: other settings, Restart, Stop agent", text: "⋯" }), items, confirmBox);
    if (wasOpen) details.open = true;
    const c = this.confirming;
    if (c && wasOpen && ((c.act === "restart" && head.can && head.can.restart) || c.act === "close_agent")) ask(c.question, c.label, c.act);
    else this.confirming = null;
    return details;
  }

  drawSignIn(s) {
    const shape = JSON.stringify(s || null);
    if (shape === this.signInShape) return;
    this.signInShape = shape;
    this.signIn.replaceChildren();
    if (!s) return;
    if (s.methods) for (const m of s.methods) this.signIn.append(h("button", { class: "esc-btn esc-other", text: m.label, title: m.tip, onclick: () => this.act({ act: "sign_in", value: m.id }) }));
    if (s.input) {
      const box = h("input", { type: "text", class: "esc-signin-input", placeholder: "answer the sign-in program (its stdin)", "data-lm-suppress-shortcuts": "true" });
      const go = () => { this.act({ act: "sign_in_input", text: box.value }); box.value = ""; };
      box.addEventListener("keydown", (e) => { e.stopPropagation(); if (e.key === "Enter") { e.preventDefault(); go(); } });
      this.signIn.append(box, h("button", { class: "esc-btn esc-other", text: "Send", title: "Write this line to the sign-in program's stdin", onclick: go }));
    }
  }

  // -- the prompt box ---------------------------------------------------------------------------------
  composer() {
    this.box = h("textarea", { class: "esc-box", rows: 2, "data-lm-suppress-shortcuts": "true", "aria-label": "Prompt" });
    this.complete = h("div", { class: "esc-complete", hidden: true, role: "listbox" });
    this.sendBtn = h("button", { class: "esc-btn esc-send", text: "Send", title: "Send (Enter; queued while a turn runs)", onclick: () => this.sendPrompt() });
    this.steerBtn = h("button", { class: "esc-btn esc-other esc-steer", text: "Steer now", title: "Send now, into the running turn (Ctrl+Enter)", hidden: true, onclick: () => this.sendPrompt(true) });
    this.box.addEventListener("keydown", (e) => this.keys(e));
    this.box.addEventListener("input", () => this.suggest());
    return h("div", { class: "esc-composer" }, h("div", { class: "esc-box-wrap" }, this.complete, this.box), this.steerBtn, this.sendBtn);
  }

  sendPrompt(now) {
    const text = this.box.value;
    if (!text.trim() || this.sendBtn.disabled) return;
    this.act({ act: now && this.head && this.head.steer ? "steer" : "send", text });
    this.box.value = "";
    this.hideComplete();
    this.box.focus();
  }

  keys(e) {
    e.stopPropagation(); // the notebook's shortcuts never see keys typed here (with data-lm-suppress-shortcuts)
    const open = !this.complete.hidden;
    if (open && (e.key === "ArrowDown" || e.key === "ArrowUp")) {
      e.preventDefault();
      const n = this.choices.length;
      this.choice = (this.choice + (e.key === "ArrowDown" ? 1 : n - 1)) % n;
      this.drawComplete();
      return;
    }
    if (open && (e.key === "Tab" || (e.key === "Enter" && !e.shiftKey))) {
      e.preventDefault();
      this.pick(this.choices[this.choice]);
      return;
    }
    if (e.key === "Escape") {
      e.preventDefault();
      if (open) this.hideComplete();
      else if (this.head && this.head.can && this.head.can.stop) this.act({ act: "stop" });
      return;
    }
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); this.sendPrompt(e.ctrlKey || e.metaKey); }
  }

  suggest() {
    const v = this.box.value;
    const m = /^\/(\S*)$/.exec(v);
    const commands = (this.head && this.head.commands) || [];
    if (!m || !commands.length) { this.hideComplete(); return; }
    this.choices = commands.filter((c) => c.name.startsWith(m[1]));
    if (!this.choices.length) { this.hideComplete(); return; }
    this.choice = 0;
    this.complete.hidden = false;
    this.drawComplete();
  }

  drawComplete() {
    this.complete.replaceChildren(...this.choices.map((c, i) => h("div", {
      class: "esc-complete-item" + (i === this.choice ? " esc-chosen" : ""), role: "option",
      onmousedown: (e) => { e.preventDefault(); this.pick(c); },
    }, h("b", { text: "/" + c.name }), h("span", { class: "esc-dim", text: " " + (c.description || "") + (c.hint ? ` (${c.hint})` : "") }))));
  }

  pick(c) { this.box.value = "/" + c.name + " "; this.hideComplete(); this.box.focus(); }
  hideComplete() { this.complete.hidden = true; this.choices = []; }

  close() {
    if (this.attentionId) attention().drop(this.attentionId);
    if (this.notifyBtn) this.notifyBtn.escForget();
    this.channel.close(); this.resized.disconnect(); this.live.stop();
    if (this.onWindow) window.removeEventListener("resize", this.onWindow);
    window.removeEventListener("pointerup", this.onPointerUp);
  }
}

// -- attention: the tab's title count and opt-in notifications (one per page) -------------------------
// Every view reports the agents it shows (name -> status); an agent waiting for you, or one that finished
// while the page was hidden, counts in the tab's title, "(2) …". Notifications (the page's Notification
// API) are off until turned on with a view's notify toggle (kept in localStorage); the browser's permission is
// asked only on that click, never unprompted.
const NOTIFY_KEY = "escouade_nb.notify";
function attention() {
  const key = Symbol.for("escouade_nb.attention");
  if (window[key]) return window[key];
  const a = {
    sources: new Map(), // source id -> Map(name -> status)
    status: new Map(), // name -> the status all sources agree on (waiting wins)
    finished: new Set(), // names that finished while the page was hidden
    toggles: new Set(),
    base: null,
    serial: 0,
    enabled() {
      let on = false;
      try { on = localStorage.getItem(NOTIFY_KEY) === "on"; } catch (e) { on = false; }
      return on && typeof Notification !== "undefined" && Notification.permission === "granted";
    },
    async toggle() {
      if (typeof Notification === "undefined") return;
      const on = this.enabled();
      if (on) { try { localStorage.setItem(NOTIFY_KEY, "off"); } catch (e) { /* private mode */ } }
      else {
        let perm = Notification.permission;
        if (perm === "default") perm = await Notification.requestPermission(); // on the user's click only
        try { localStorage.setItem(NOTIFY_KEY, perm === "granted" ? "on" : "off"); } catch (e) { /* private mode */ }
      }
      for (const draw of this.toggles) draw();
    },
    report(source, rows) { // rows: [[name, status], …]
      this.sources.set(source, new Map(rows));
      this.settle();
    },
    drop(source) { this.sources.delete(source); this.settle(); },
    settle() {
      const now = new Map();
      for (const rows of this.sources.values()) for (const [name, st] of rows) {
        if (!now.has(name) || st === "waiting") now.set(name, st);
      }
      for (const [name, st] of now) {
        const before = this.status.get(name);
        if (st === "waiting" && before !== "waiting") this.notify(`${name} waits for you`, name);
        const busy = before === "working" || before === "waiting";
        if (busy && st === "idle" && document.hidden) { this.finished.add(name); this.notify(`${name} finished`, name); }
      }
      for (const name of [...this.finished]) if (!now.has(name)) this.finished.delete(name);
      this.status = now;
      this.title();
    },
    count() {
      const names = new Set(this.finished);
      for (const [name, st] of this.status) if (st === "waiting") names.add(name);
      return names.size;
    },
    title() {
      const bare = document.title.replace(/^\(\d+\) /, "");
      const n = this.count();
      const want = n ? `(${n}) ${bare}` : bare;
      if (document.title !== want) document.title = want;
    },
    notify(text, name) {
      if (!this.enabled() || (!document.hidden && document.hasFocus())) return;
      try { new Notification("escouade_nb", { body: text, tag: `escouade-${name}` }); } catch (e) { /* not allowed here */ }
    },
  };
  document.addEventListener("visibilitychange", () => { if (!document.hidden) { a.finished.clear(); a.title(); } });
  // JupyterLab writes the title as you switch documents: the count is put back in front
  const t = document.querySelector("title");
  if (t) new MutationObserver(() => a.title()).observe(t, { childList: true, characterData: true, subtree: true });
  window[key] = a;
  return a;
}

function notifyToggle(compact = false) {
  const a = attention();
  const btn = h("button", { class: "esc-btn esc-other esc-notify", "aria-pressed": "false" });
  const draw = () => {
    const on = a.enabled();
    const blocked = typeof Notification === "undefined" || Notification.permission === "denied";
    btn.textContent = compact ? (on ? "✓ notify" : "notify") : (on ? "notify: on" : "notify: off");
    btn.setAttribute("aria-pressed", String(on));
    btn.setAttribute("aria-label", `Notifications: ${on ? "on" : "off"}`);
    btn.title = blocked ? "Notifications are blocked by the browser for this page"
      : "Notify me when an agent waits for me, or finishes while this page is hidden";
  };
  btn.addEventListener("click", (e) => { e.preventDefault(); a.toggle(); });
  a.toggles.add(draw);
  draw();
  btn.escForget = () => a.toggles.delete(draw);
  return btn;
}

function fmt(n) { return n >= 10000 ? Math.round(n / 1000) + "k" : String(n); }

// -- the squad ---------------------------------------------------------------------------------------
class SquadUI {
  constructor(model, el) {
    this.model = model;
    this.root = h("div", { class: "esc-view esc-squad", tabindex: "0" });
    this.headEl = h("div", { class: "esc-head" });
    this.table = h("table", { class: "esc-squad-table" });
    this.pending = h("div", { class: "esc-squad-pending" });
    this.opened = h("div", { class: "esc-squad-opened" });
    this.root.append(this.headEl, h("div", { class: "esc-table-wrap" }, this.table), this.pending, this.opened);
    el.append(this.root);
    this.root.addEventListener("click", (e) => this.click(e));
    this.root.addEventListener("keydown", (e) => this.keys(e));
    this.timer = setInterval(() => this.tick(), 1000);
    this.attentionId = "s" + (++attention().serial);
    this.channel = new Channel(model, (m) => this.apply(m));
    this.onOpened = () => this.showOpened();
    model.on("change:opened", this.onOpened);
    this.showOpened();
    this.live = watchKernel(model, el, this.channel, (why) => {
      clearInterval(this.timer);
      this.confirming = null;
      goneView(this, why, "%escouade resume NAME brings an agent back; %escouade squad shows the squad again.");
    });
  }

  act(content) { this.channel.send({ k: "act", ...content }); }

  apply(m) {
    const state = m.snap || (m.ops || []).filter((o) => o[0] === "sq").map((o) => o[1]).pop();
    if (state) this.draw(state);
  }

  draw(s) {
    this.state = s;
    const waiting = s.rows.reduce((n, r) => n + r.cards, 0);
    const main = h("div", { class: "esc-head-main" }, h("b", { text: "Squad" }), h("span", { class: "esc-dim", text: ` · ${s.rows.length} agent${s.rows.length === 1 ? "" : "s"}` + (waiting ? ` · ${waiting} waiting for you` : "") }));
    if (s.rows.some((r) => r.status === "waiting")) main.append(h("span", { class: "esc-dim esc-jump-hint", text: " · press n for the next", title: "n (with the squad view focused): the next agent waiting for you" }));
    if (!this.notifyBtn) this.notifyBtn = notifyToggle();
    const side = h("div", { class: "esc-head-side" });
    if (s.budget) side.append(h("span", { class: "esc-budget", title: "the squad's spend against its budget (squad.set_budget)", text: `squad budget ${s.budget}` }));
    side.append(this.notifyBtn);
    this.headEl.replaceChildren(h("div", { class: "esc-head-row" }, main, side));
    attention().report(this.attentionId, s.rows.map((r) => [r.name, r.status]));
    if (!s.rows.length) { this.table.replaceChildren(h("caption", { text: "No agents yet." })); }
    else {
      // a column no agent has anything in (worktree, subagents…) is left out
      const columns = s.columns.filter((c) => c === "agent" || c === "status" || s.rows.some((r) => r.cells[c] && r.cells[c] !== "—" || c === "last activity"));
      const head = h("tr", {}, ...columns.map((c) => h("th", { text: c })), h("th", { text: "" }));
      const rows = s.rows.map((r) => {
        const tr = h("tr", { "data-agent": r.name });
        for (const c of columns) {
          const td = h("td", { class: `esc-col-${c.replace(/\s+/g, "-")}` });
          if (c === "status") td.append(h("span", { class: `esc-status esc-st-${r.tone}`, text: "● " + r.cells[c] }));
          else if (c === "last activity") { td.dataset.at = r.at ?? ""; td.textContent = ago(r.at); }
          else td.textContent = r.cells[c];
          tr.append(td);
        }
        const acts = h("td", { class: "esc-row-actions" },
          h("button", { class: "esc-btn esc-other", text: "Open", title: `Show ${r.name}'s view`, "data-row": "open", "data-agent": r.name }));
        if (r.can.cancel) acts.append(h("button", { class: "esc-btn esc-other", text: "Cancel turn", title: `Cancel ${r.name}'s running turn`, "data-row": "cancel", "data-agent": r.name }));
        if (r.can.restart) acts.append(h("button", { class: "esc-btn esc-other", text: "Restart…", "data-row": "restart", "data-agent": r.name }));
        if (r.can.stop) acts.append(h("button", { class: "esc-btn esc-reject", text: "Stop agent…", title: `End ${r.name}'s process`, "data-row": "stop", "data-agent": r.name }));
        tr.append(acts);
        return tr;
      });
      this.table.replaceChildren(h("thead", {}, head), h("tbody", {}, ...rows));
      const c = this.confirming;
      const tr = c && this.table.querySelector(`tbody tr[data-agent="${CSS.escape(c.name)}"]`);
      if (tr) this.confirm(tr, c.words, c.label, c.go); else this.confirming = null;
    }
    const p = s.pending;
    if (!p) { this.pending.replaceChildren(); this.pendingKey = null; return; }
    const key = p.agent + "/" + p.key;
    const count = `⚑ ${p.count} waiting for you` + (p.count > 1 ? ` — the oldest, ${p.agent}'s:` : `, ${p.agent}'s:`);
    if (this.pendingKey === key && this.pendingHtml === p.html) { if (this.pendingCount) this.pendingCount.textContent = count; return; }
    if (this.pendingKey !== key) this.since = performance.now();
    this.pendingKey = key;
    this.pendingHtml = p.html;
    const card = h("div", { class: "esc-squad-card", "data-agent": p.agent });
    card.innerHTML = p.html; // escaped by Python (widgets/render.py)
    const buttons = [...card.querySelectorAll("button[data-act]")];
    buttons.forEach((b, i) => { b.disabled = true; if (i < 9) b.prepend(h("kbd", { text: String(i + 1) }), " "); });
    setTimeout(() => { if (this.pendingKey === key && !this.dead) buttons.forEach((b) => { b.disabled = false; }); }, SETTLE_MS);
    this.pendingCount = h("span", { class: "esc-pin-count", text: count });
    this.pending.replaceChildren(h("div", { class: "esc-pin-head" }, this.pendingCount), card);
  }

  tick() {
    for (const td of this.table.querySelectorAll("td[data-at]")) td.textContent = ago(td.dataset.at === "" ? null : Number(td.dataset.at));
  }

  click(e) {
    const row = e.target.closest("button[data-row]");
    if (row) {
      const name = row.dataset.agent;
      const what = row.dataset.row;
      if (what === "open") return this.open(name);
      if (what === "cancel") return this.act({ act: "cancel", name });
      const tr = row.closest("tr");
      const words = what === "stop" ? `Stop ${name}'s process?` : `Restart ${name}?`;
      this.confirm(tr, words, what === "stop" ? "Stop agent" : "Restart", () => this.act({ act: what, name }));
      return;
    }
    const btn = e.target.closest("button[data-act]");
    if (!btn || btn.disabled) return;
    const card = btn.closest(".esc-squad-card");
    const content = cardAct(btn, btn.closest(".esc-ask") || card);
    if (content) this.act({ ...content, name: card.dataset.agent });
  }

  confirm(tr, words, label, go) {
    const old = this.table.querySelector(".esc-confirm-row");
    if (old) old.remove();
    this.confirming = { name: tr.dataset.agent, words, label, go }; // kept across the table's redraws
    const cols = tr.children.length;
    const row = h("tr", { class: "esc-confirm-row" }, h("td", { colspan: cols },
      h("span", { text: words + " " }),
      h("button", { class: "esc-btn esc-reject", text: label, onclick: () => { this.confirming = null; row.remove(); go(); } }),
      h("button", { class: "esc-btn esc-other", text: "Cancel", onclick: () => { this.confirming = null; row.remove(); } })));
    tr.after(row);
  }

  keys(e) {
    if (e.key === "n" && !e.altKey && !e.ctrlKey && !e.metaKey && !e.target.closest("input, textarea, select, .esc-squad-opened")) {
      e.preventDefault(); e.stopPropagation(); this.nextWaiting(); return;
    }
    if (!/^[1-9]$/.test(e.key) || e.target.closest("input, textarea, select, .esc-squad-opened")) return;
    if (!this.pendingKey || performance.now() - this.since < SETTLE_MS) return;
    const buttons = [...this.pending.querySelectorAll("button[data-act]")];
    const b = buttons[Number(e.key) - 1];
    if (b && !b.disabled) { e.preventDefault(); e.stopPropagation(); b.click(); }
  }

  // n: the next agent waiting for you, after the one jumped to last (in the table's order, round): its row
  // is focused and its view shown (scrolled to, or opened under the table)
  nextWaiting() {
    const rows = ((this.state && this.state.rows) || []).filter((r) => r.status === "waiting");
    if (!rows.length) return;
    const names = this.state.rows.map((r) => r.name);
    const from = names.indexOf(this.jumped);
    const next = rows.find((r) => names.indexOf(r.name) > from) || rows[0];
    this.jumped = next.name;
    const tr = this.table.querySelector(`tbody tr[data-agent="${CSS.escape(next.name)}"]`);
    if (tr) {
      for (const other of this.table.querySelectorAll("tr.esc-jumped")) other.classList.remove("esc-jumped");
      tr.classList.add("esc-jumped");
      tr.tabIndex = -1;
      tr.focus({ preventScroll: true });
    }
    this.open(next.name);
  }

  open(name) {
    const views = [...document.querySelectorAll(".esc-view.esc-agent")].filter((v) => v.dataset.agent === name && !this.root.contains(v));
    if (views.length) {
      const v = views[0];
      v.scrollIntoView({ block: "start", behavior: "smooth" });
      v.classList.add("esc-flash");
      setTimeout(() => v.classList.remove("esc-flash"), 1200);
      return;
    }
    this.act({ act: "open", name });
  }

  async showOpened() {
    const ref = this.model.get("opened");
    const id = typeof ref === "string" && ref.startsWith("IPY_MODEL_") ? ref.slice(10) : null;
    if (id === this.openedId) return;
    this.openedId = id;
    if (this.openedView) { this.openedView.remove(); this.openedView = null; }
    this.opened.replaceChildren();
    if (!id) return;
    try {
      const manager = this.model.widget_manager;
      const child = await manager.get_model(id);
      const view = await manager.create_view(child);
      this.openedView = view;
      this.opened.append(view.el);
    } catch (err) {
      this.opened.append(h("div", { class: "esc-dim", text: `The view of this agent could not be shown here: ${err}` }));
    }
  }

  close() { attention().drop(this.attentionId); if (this.notifyBtn) this.notifyBtn.escForget(); clearInterval(this.timer); this.channel.close(); this.live.stop(); this.model.off("change:opened", this.onOpened); if (this.openedView) this.openedView.remove(); }
}

// -- the rule plugins' journal ------------------------------------------------------------------
class JournalUI {
  constructor(model, el) {
    this.root = h("div", { class: "esc-view esc-journal", "data-lm-suppress-shortcuts": "true" });
    this.plugin = h("select", { "aria-label": "Plugin", title: "Plugin" });
    this.kind = h("select", { "aria-label": "Kind", title: "Kind" });
    this.text = h("input", { type: "text", placeholder: "filter (e.g. Bash, refused, rm -rf)", "aria-label": "Filter" });
    this.rows = h("div", { class: "esc-journal-rows" });
    this.count = h("div", { class: "esc-dim esc-small" });
    this.root.append(h("div", { class: "esc-head" }, h("div", { class: "esc-head-row" },
      h("div", { class: "esc-head-main" }, h("b", { text: "Journal" })),
      h("div", { class: "esc-head-side" }, h("label", { class: "esc-control" }, h("span", { class: "esc-dim", text: "Plugin " }), this.plugin),
        h("label", { class: "esc-control" }, h("span", { class: "esc-dim", text: "Show " }), this.kind), this.text))),
      this.rows, this.count);
    el.append(this.root);
    const send = () => this.channel.send({ k: "act", act: "filter", plugin: this.plugin.value, kind: this.kind.value, text: this.text.value });
    this.plugin.addEventListener("change", send);
    this.kind.addEventListener("change", send);
    this.text.addEventListener("input", () => { clearTimeout(this.typing); this.typing = setTimeout(send, 150); });
    this.text.addEventListener("keydown", (e) => e.stopPropagation());
    this.channel = new Channel(model, (m) => this.apply(m));
    this.live = watchKernel(model, el, this.channel, (why) => goneView(this, why, "Run its cell again once the kernel is back."));
  }

  apply(m) {
    if (m.snap) return this.draw(m.snap);
    for (const op of m.ops) {
      if (op[0] === "jr") this.draw(op[1]);
      else if (op[0] === "jp") this.menu(op[1], this.plugin.value);
      else if (op[0] === "je" && this.state) {
        if (this.rows.firstElementChild && !this.rows.firstElementChild.classList.contains("esc-journal-row")) this.rows.replaceChildren();
        this.rows.append(this.row(op[1]));
        while (this.rows.childElementCount > this.state.max) this.rows.firstElementChild.remove();
        this.state.count = op[2];
        this.drawCount();
      }
    }
  }

  menu(plugins, value) {
    this.plugin.replaceChildren(h("option", { value: "", text: "All plugins" }), ...plugins.map(([name, id]) => h("option", { value: id, text: name })));
    this.plugin.value = value;
  }

  draw(s) {
    this.state = s;
    this.menu(s.plugins, s.plugin);
    this.kind.replaceChildren(...s.kinds.map((k) => h("option", { value: k, text: k })));
    this.kind.value = s.kind;
    if (document.activeElement !== this.text) this.text.value = s.text;
    this.rows.replaceChildren(...s.rows.map((r) => this.row(r)));
    if (!s.rows.length) this.rows.append(h("div", { class: "esc-dim", text: "No entries." }));
    this.drawCount();
  }

  row(r) {
    const tone = { allowed: "completed", refused: "refused", "did not decide": "waiting" }[r.verdict] || "";
    return h("div", { class: "esc-journal-row" }, h("span", { class: "esc-dim", text: r.clock + "  " }),
      ...(this.state && this.state.all_plugins ? [h("span", { class: "esc-dim", text: r.plugin + "  " })] : []),
      h("b", { text: r.kind + "  " }), h("span", { class: tone ? `esc-st-${tone}` : "", text: r.body }));
  }

  drawCount() {
    const s = this.state;
    const more = s.count > s.max ? ` (the last ${s.max} shown)` : "";
    this.count.textContent = `${s.count} entries${more}`;
  }

  close() { this.channel.close(); this.live.stop(); }
}

// -- one prompt's turns side by side, and their comparison -------------------------------------------
// The columns are the turn views (child models, in the synced `columns`); the heads, the table
// (escaped HTML from Python) and what changed since it froze come in the state.
class CompareUI {
  constructor(model, el) {
    this.model = model;
    this.root = h("div", { class: "esc-view esc-compare escouade-compare" });
    this.cols = h("div", { class: "esc-compare-cols" });
    this.state = h("div", { class: "esc-compare-state esc-dim" });
    this.table = h("div", { class: "esc-table-wrap esc-compare-table" });
    this.since = h("div", { class: "esc-compare-since-list" });
    this.root.append(this.cols, this.state, this.table, this.since);
    el.append(this.root);
    this.slots = []; // per column: { ref, col, head, body, view }
    this.onColumns = () => this.mount();
    model.on("change:columns", this.onColumns);
    this.mount();
    this.channel = new Channel(model, (m) => this.apply(m));
    this.live = watchKernel(model, el, this.channel, (why) => goneView(this, why, "Run its cell again once the kernel is back."));
  }

  apply(m) {
    const s = m.snap || (m.ops || []).filter((o) => o[0] === "cp").map((o) => o[1]).pop();
    if (s) this.draw(s);
  }

  slot(i) {
    while (this.slots.length <= i) {
      const head = h("div", { class: "escouade-compare-head esc-compare-head" });
      const body = h("div", { class: "esc-compare-body" });
      const col = h("div", { class: "esc-compare-col" }, head, body);
      this.cols.append(col);
      this.slots.push({ ref: null, col, head, body, view: null });
    }
    return this.slots[i];
  }

  async mount() {
    const refs = this.model.get("columns") || [];
    await Promise.all(refs.map(async (ref, i) => {
      const s = this.slot(i);
      if (s.ref === ref) return;
      s.ref = ref;
      if (s.view) { s.view.remove(); s.view = null; }
      const view = await mountChild(this.model, ref, s.body);
      if (s.ref !== ref) { if (view) view.remove(); return; }
      s.view = view;
    }));
  }

  draw(s) {
    s.heads.forEach((hd, i) => {
      this.slot(i).head.replaceChildren(h("b", { class: "esc-name", text: hd.name }),
        h("span", { class: "esc-dim", text: ` · ${hd.harness}${hd.where || ""}` }));
    });
    this.state.textContent = s.frozen ? "The comparison, as the turns ended:" : "";
    this.table.innerHTML = s.table; // escaped by Python (engine/compare.py)
    this.since.replaceChildren(...(s.since || []).map((t) => h("div", { class: "esc-compare-since", text: t })));
  }

  close() {
    this.channel.close();
    this.live.stop();
    this.model.off("change:columns", this.onColumns);
    for (const s of this.slots) if (s.view) s.view.remove();
  }
}

// A child view (an agent view opened from a list) mounted in `into`; `ref` is the synced
// "IPY_MODEL_…" reference. Returns the view (to remove later), or null.
async function mountChild(model, ref, into) {
  const id = typeof ref === "string" && ref.startsWith("IPY_MODEL_") ? ref.slice(10) : null;
  into.replaceChildren();
  if (!id) return null;
  try {
    const manager = model.widget_manager;
    const view = await manager.create_view(await manager.get_model(id));
    into.append(view.el);
    return view;
  } catch (err) {
    into.append(h("div", { class: "esc-dim", text: `This view could not be shown here: ${err}` }));
    return null;
  }
}

// -- an agent's own sessions (session/list) -----------------------------------------------------------
class SessionsUI {
  constructor(model, el) {
    this.model = model;
    this.root = h("div", { class: "esc-view esc-sessions" });
    this.headEl = h("div", { class: "esc-head" });
    this.table = h("table", { class: "esc-squad-table esc-sessions-table" });
    this.more = h("div", { class: "esc-dim" });
    this.note = h("div", { class: "esc-dim esc-sessions-note", "aria-live": "polite" });
    this.opened = h("div", { class: "esc-squad-opened" });
    this.root.append(this.headEl, h("div", { class: "esc-table-wrap" }, this.table), this.more, this.note, this.opened);
    el.append(this.root);
    this.root.addEventListener("click", (e) => {
      const b = e.target.closest("button[data-row]");
      if (!b || b.disabled) return;
      b.disabled = true; // the state that comes back redraws the row
      this.channel.send({ k: "act", act: b.dataset.row, id: b.dataset.id });
    });
    this.onOpened = () => this.showOpened();
    model.on("change:opened_view_model", this.onOpened);
    this.showOpened();
    this.channel = new Channel(model, (m) => this.apply(m));
    this.live = watchKernel(model, el, this.channel, (why) => goneView(this, why, "Run %escouade sessions again once the kernel is back."));
  }

  apply(m) {
    const s = m.snap || (m.ops || []).filter((o) => o[0] === "ss").map((o) => o[1]).pop();
    if (s) this.draw(s);
  }

  draw(s) {
    this.headEl.replaceChildren(h("div", { class: "esc-head-main" }, s.rows.length
      ? h("b", { text: `Sessions of ${s.agent}` }) : h("span", { text: `${s.agent} has no sessions for this folder.` })));
    const button = (label, act, id, cls, tip) => h("button", { class: `esc-btn ${cls}`, text: label, title: tip, "data-row": act, "data-id": id });
    this.table.replaceChildren(...(s.rows.length ? [h("thead", {}, h("tr", {}, h("th", { text: "updated" }), h("th", { text: "title" }), h("th", { text: "session" }), h("th", { text: "" })))] : []),
      h("tbody", {}, ...s.rows.map((r) => {
        const tr = h("tr", { "data-id": r.id });
        if (r.state === "deleted") {
          tr.append(h("td", { colspan: 4 }, h("s", { text: `${r.title} ${r.id}` }), " deleted"));
          return tr;
        }
        tr.append(h("td", {}, h("code", { text: r.updated })), h("td", { text: r.title }), h("td", { class: "esc-dim", text: r.id }));
        const acts = h("td", { class: "esc-row-actions" });
        if (r.state === "confirm") acts.append(button("Confirm delete", "delete", r.id, "esc-reject", `Delete session ${r.id}`), button("Keep", "keep", r.id, "esc-other"));
        else {
          acts.append(button("Open", "open", r.id, "esc-other", `Open session ${r.id} in a new agent (${s.harness})`));
          if (s.can_delete) acts.append(button("Delete", "ask_delete", r.id, "esc-reject", `Delete session ${r.id} (asks to confirm)`));
        }
        tr.append(acts);
        return tr;
      })));
    this.more.replaceChildren(...(s.more ? ["more: ", h("code", { text: `%escouade sessions ${s.agent} --cursor ${s.more}` })] : []));
    this.note.textContent = [s.hidden, s.note].filter(Boolean).join(" · ");
  }

  async showOpened() {
    const ref = this.model.get("opened_view_model");
    if (ref === this.openedRef) return;
    this.openedRef = ref;
    if (this.openedView) { this.openedView.remove(); this.openedView = null; }
    this.openedView = await mountChild(this.model, ref, this.opened);
  }

  close() { this.channel.close(); this.live.stop(); this.model.off("change:opened_view_model", this.onOpened); if (this.openedView) this.openedView.remove(); }
}

// -- a harness's update ----------------------------------------------------------------------------
class UpdateUI {
  constructor(model, el) {
    this.root = h("div", { class: "esc-view esc-update" });
    el.append(this.root);
    this.channel = new Channel(model, (m) => this.apply(m));
    this.live = watchKernel(model, el, this.channel, (why) => goneView(this, why, "Run %escouade update again once the kernel is back."));
  }

  apply(m) {
    const s = m.snap || (m.ops || []).filter((o) => o[0] === "up").map((o) => o[1]).pop();
    if (s) this.draw(s);
  }

  draw(s) {
    const run = h("button", { class: "esc-btn esc-reject", text: s.running ? "Running…" : "Run it", disabled: s.started,
      title: "Run the update command (once)", onclick: () => { run.disabled = true; this.channel.send({ k: "act", act: "run" }); } });
    const parts = [h("div", {}, h("b", { text: s.harness }), ` ${s.before || "version unknown"} — update with:`),
      h("pre", { class: "esc-pre", text: s.command }), run];
    if (s.result) {
      parts.push(h("div", {}, `${s.result.verdict}; version now: `, h("b", { text: s.result.version || "unknown" })),
        h("pre", { class: "esc-pre", text: s.result.output }));
    }
    this.root.replaceChildren(...parts);
  }

  close() { this.channel.close(); this.live.stop(); }
}

function ago(t) {
  if (t === null || t === undefined || Number.isNaN(t)) return "—";
  const s = Math.max(0, Math.floor(Date.now() / 1000 - t));
  return s < 60 ? `${s} s ago` : s < 3600 ? `${Math.floor(s / 60)} min ago` : `${Math.floor(s / 3600)} h ago`;
}

// The static companion output before a view's says what was there when the kernel is gone:
// hidden while the view is live (looked for once the view is in the page).
function hideCompanion(el, tries = 20) {
  const child = el.closest(".jp-OutputArea-child");
  if (!child) { if (tries > 0) setTimeout(() => hideCompanion(el, tries - 1), 50); return null; }
  const before = child.previousElementSibling;
  if (before && before.querySelector(".esc-saved") && !el.escNoCompanionHiding) { before.classList.add("esc-companion-hidden"); el.escCompanion = before; }
  return before;
}

function render({ model, el }) {
  el.classList.add("esc-root");
  const kind = model.get("kind");
  const ui = kind === "squad" ? new SquadUI(model, el) : kind === "journal" ? new JournalUI(model, el)
    : kind === "compare" ? new CompareUI(model, el) : kind === "sessions" ? new SessionsUI(model, el)
    : kind === "update" ? new UpdateUI(model, el) : new ConversationUI(model, el, kind);
  hideCompanion(el);
  return () => {
    ui.close();
    if (el.escCompanion) el.escCompanion.classList.remove("esc-companion-hidden");
  };
}

export default { render };
