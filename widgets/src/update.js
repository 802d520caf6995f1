import { Channel, latest } from "./channel.js";
import { h } from "./dom.js";
import { goneView, watchKernel } from "./kernel.js";

// -- a harness's update ----------------------------------------------------------------------------
export class UpdateUI {
  constructor(model, el) {
    this.root = h("div", { class: "esc-view esc-update" });
    el.append(this.root);
    this.channel = new Channel(model, (m) => this.apply(m));
    this.live = watchKernel(model, el, this.channel, (why) => goneView(this, why, "Run %escouade update again once the kernel is back."));
  }

  apply(m) {
    const s = latest(m, "up");
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
