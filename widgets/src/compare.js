import { Channel, latest } from "./channel.js";
import { mountChild } from "./child.js";
import { h } from "./dom.js";
import { goneView, watchKernel } from "./kernel.js";

// -- one prompt's turns side by side, and their comparison -------------------------------------------
// The columns are the turn views (child models, in the synced `columns`); the heads, the table
// (escaped HTML from Python) and what changed since it froze come in the state.
export class CompareUI {
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
    const s = latest(m, "cp");
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
