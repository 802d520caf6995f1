import { attention, notifyToggle } from "./attention.js";
import { cardAct, fieldsOf, restoreFields } from "./cards.js";
import { Channel } from "./channel.js";
import { h } from "./dom.js";
import { goneWords, watchKernel } from "./kernel.js";
import { openPath } from "./links.js";

const AT_BOTTOM = 8; // px: "at the bottom" for stick-to-bottom
const GESTURE_MS = 800; // a scroll this soon after your wheel, touch, key or scrollbar press is yours
const REVEAL_FRAMES = 24; // streamed text is revealed over about this many frames (~400 ms, a batch's time)

function fmt(n) { return n >= 10000 ? Math.round(n / 1000) + "k" : String(n); }

// -- the conversation (agent and turn views) --------------------------------------------------------
export class ConversationUI {
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
    for (const st of this.transcript.querySelectorAll(".esc-st-waiting, .esc-st-in_progress, .esc-st-pending, .esc-st-stalled")) {
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

  // a file the agent changed (review=True, engine/review/file_review.py): Keep / Reject of the file, its diff folded
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
    attention().report(this.attentionId, [[head.name, head.activity === "stalled" ? "stalled" : head.status]]);
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
