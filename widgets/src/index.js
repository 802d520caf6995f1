// escouade_nb's views in the browser: one anywidget model per view (agent, turn, squad, journal,
// compare, sessions, update).
// Python sends escaped HTML for items and JSON for the rest (see widgets/README.md);
// this module does layout, scrolling, focus and keys. Text from Python that is not
// already escaped HTML is only ever set with textContent.
//
// The sources of ONE ES module: the package build bundles this file and what it imports into
// widgets/escouade.js (labextension/build.mjs, webpack; git-ignored), the module anywidget loads and
// the JupyterLab extension imports. By concern:
//   dom.js           h(): the one way a node is made (text only ever as textContent)
//   channel.js       a view's messages: snapshots, ordered ops, deflated buffers
//   kernel.js        is the kernel still there? (watchKernel), and what a view says once it is gone
//   cards.js         a card's buttons and form fields
//   links.js         the file links of the conversation
//   attention.js     the tab's title count and opt-in notifications (one per page)
//   child.js         a child view mounted inside another (the comparison's columns, an opened session)
//   conversation.js  the agent and turn views;  squad.js, journal.js, compare.js, sessions.js, update.js

import { CompareUI } from "./compare.js";
import { ConversationUI } from "./conversation.js";
import { JournalUI } from "./journal.js";
import { SessionsUI } from "./sessions.js";
import { SquadUI } from "./squad.js";
import { UpdateUI } from "./update.js";

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
