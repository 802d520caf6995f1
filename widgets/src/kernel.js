import { h } from "./dom.js";

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

export function watchKernel(model, el, channel, gone) {
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
export function goneWords(why) {
  const what = why === "not running" ? "This view's kernel is not running" : why === "died" ? "The kernel died"
    : why === "shut down" ? "The kernel was shut down" : why === "restarted" ? "The kernel was restarted" : "The kernel is gone";
  return what + ": this is what the view showed, and it can no longer act.";
}

// The squad and the journal once their kernel is gone: the words on top, every control off.
export function goneView(ui, why, after) {
  ui.dead = why;
  ui.channel.close();
  ui.root.classList.add("esc-dead");
  for (const c of ui.root.querySelectorAll("button, textarea, select, input")) c.disabled = true;
  const note = h("div", { class: "esc-gone", role: "status" }, h("b", { text: "⚠ " }), h("span", { text: goneWords(why) + " " + after }));
  const head = ui.root.querySelector(".esc-head");
  if (head) head.after(note); else ui.root.prepend(note);
}
