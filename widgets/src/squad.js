import { attention, notifyToggle } from "./attention.js";
import { cardAct } from "./cards.js";
import { Channel, latest } from "./channel.js";
import { h } from "./dom.js";
import { goneView, watchKernel } from "./kernel.js";

const SETTLE_MS = 500; // a card's keys act only after it has been in place this long

// -- the squad ---------------------------------------------------------------------------------------
export class SquadUI {
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
    const state = latest(m, "sq");
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
    attention().report(this.attentionId, s.rows.map((r) => [r.name, r.activity === "stalled" ? "stalled" : r.status]));
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

function ago(t) {
  if (t === null || t === undefined || Number.isNaN(t)) return "—";
  const s = Math.max(0, Math.floor(Date.now() / 1000 - t));
  return s < 60 ? `${s} s ago` : s < 3600 ? `${Math.floor(s / 60)} min ago` : `${Math.floor(s / 3600)} h ago`;
}
