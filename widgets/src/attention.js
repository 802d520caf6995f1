import { h } from "./dom.js";

// -- attention: the tab's title count and opt-in notifications (one per page) -------------------------
// Every view reports the agents it shows (name -> status, or "stalled": a turn with no update for its
// stall_after); an agent waiting for you, or one that finished while the page was hidden, counts in the tab's
// title, "(2) …"; a stall is notified (once per stall), not counted. Notifications (the page's Notification
// API) are off until turned on with a view's notify toggle (kept in localStorage); the browser's permission is
// asked only on that click, never unprompted.
const NOTIFY_KEY = "escouade_nb.notify";
export function attention() {
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
        if (st === "stalled" && before !== "stalled") this.notify(`${name} has stalled: no update for a while`, name);
        const busy = before === "working" || before === "waiting" || before === "stalled";
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

export function notifyToggle(compact = false) {
  const a = attention();
  const btn = h("button", { class: "esc-btn esc-other esc-notify", "aria-pressed": "false" });
  const draw = () => {
    const on = a.enabled();
    const blocked = typeof Notification === "undefined" || Notification.permission === "denied";
    btn.textContent = compact ? (on ? "✓ notify" : "notify") : (on ? "notify: on" : "notify: off");
    btn.setAttribute("aria-pressed", String(on));
    btn.setAttribute("aria-label", `Notifications: ${on ? "on" : "off"}`);
    btn.title = blocked ? "Notifications are blocked by the browser for this page"
      : "Notify me when an agent waits for me, stalls, or finishes while this page is hidden";
  };
  btn.addEventListener("click", (e) => { e.preventDefault(); a.toggle(); });
  a.toggles.add(draw);
  draw();
  btn.escForget = () => a.toggles.delete(draw);
  return btn;
}
