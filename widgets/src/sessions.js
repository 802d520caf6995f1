import { Channel, latest } from "./channel.js";
import { mountChild } from "./child.js";
import { h } from "./dom.js";
import { goneView, watchKernel } from "./kernel.js";

// -- an agent's own sessions (session/list) -----------------------------------------------------------
export class SessionsUI {
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
    const s = latest(m, "ss");
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
