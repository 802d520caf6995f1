import { Channel } from "./channel.js";
import { h } from "./dom.js";
import { goneView, watchKernel } from "./kernel.js";

// -- the rule plugins' journal ------------------------------------------------------------------
export class JournalUI {
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
