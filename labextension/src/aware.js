// Awareness between the page, the kernel and the other tabs (imported by index.js).
//
// - The user's changes of the cells the kernel changed through this page (an agent's insert, edit,
//   delete, or any later operation naming a cell): `watcher` reports each such cell, once, when the
//   user edits its source or deletes it ({touched: {cell, what: 'edited' | 'deleted'}}); the page's own
//   operations (applied inside `watcher.applying`) are not reported. The kernel decides which agent
//   touched the cell in its current turn and tells it.
// - The tab: `tabId()` names this browser tab (sessionStorage: the same across a reload of the tab,
//   another in another tab), sent in the hello with the cells pending review in this page's document,
//   so the kernel can tell a reload (the same tab, a new client) and what it kept.
// - A tab whose kernel once pinged it says hello by itself after a reload (`wasLinked`): the kernel
//   learns at once which pending changes the reload kept and which it lost.
// - Other tabs: without real-time collaboration each tab has its own copy of the notebook and only the
//   addressed tab applies a change; the kernel tells the others ({elsewhere: {...}}), which show a
//   short notice in the notebook's toolbar, the whole sentence its tooltip (`elsewhereNotice`). With collaboration the tabs share
//   one document and show the change itself: no notice.

import { Widget } from '@lumino/widgets';

import { reviewButton, toolbarSlot } from './look.js';

const TAB_KEY = 'escouade-nb:tab';
const LINKED_KEY = 'escouade-nb:linked:';
const MAX_WHO = 200;

function storage() {
  try {
    return globalThis.sessionStorage || null;
  } catch (err) {
    return null; // storage refused (a sandboxed frame): no tab id, no reload re-link
  }
}

function freshId() {
  if (globalThis.crypto && typeof globalThis.crypto.randomUUID === 'function') {
    return globalThis.crypto.randomUUID();
  }
  return `t${Date.now().toString(16)}${Math.random().toString(16).slice(2)}`;
}

// This browser tab's id: kept across its reloads, another in another tab ('' without storage).
export function tabId() {
  const store = storage();
  if (store === null) {
    return '';
  }
  let id = store.getItem(TAB_KEY);
  if (!id) {
    id = freshId();
    store.setItem(TAB_KEY, id);
  }
  return id;
}

// The kernel pinged this tab for the notebook at `path`: after a reload, say hello unasked.
export function markLinked(path) {
  const store = storage();
  if (store !== null) {
    store.setItem(LINKED_KEY + path, '1');
  }
}

export function wasLinked(path) {
  const store = storage();
  return store !== null && store.getItem(LINKED_KEY + path) === '1';
}

// The ids of the cells pending review in this panel's document, or null while it is not loaded.
export function pendingIds(panel, pendingOf) {
  const model = panel.content.model;
  if (!model || !panel.context.isReady) {
    return null;
  }
  return model.sharedModel.cells.filter(cell => pendingOf(cell) !== null).map(cell => cell.id);
}

// Which cells the kernel changed through this page, and what the user did to them since.
// `report(cell, what)` is told once per cell and kind: 'edited' (its source changed by the user),
// 'deleted' (gone, not by this page's own operation).
export function watcher(panel, report) {
  const watched = new Map(); // cell id -> {source: the source after our last operation, edited: told}
  let applying = 0;

  const cells = () => {
    const model = panel.content.model;
    return model ? model.sharedModel.cells : null;
  };

  // after an operation of ours: what each watched cell holds now is not the user's
  const resync = () => {
    const all = cells();
    if (all === null) {
      return;
    }
    const byId = new Map(all.map(cell => [cell.id, cell]));
    for (const [id, seen] of watched) {
      const cell = byId.get(id);
      if (cell === undefined) {
        watched.delete(id); // taken away by our own operation (a Reject of a new cell, a kept delete)
      } else {
        seen.source = cell.getSource();
      }
    }
  };

  return {
    // run `fn` (a change the kernel asked for) without reporting it; then watch `cellId` if given
    apply(fn, cellId) {
      applying++;
      let result;
      try {
        result = fn();
      } finally {
        applying--;
      }
      if (typeof cellId === 'string' && cellId) {
        watched.set(cellId, { source: null, edited: false }); // a new operation: told again
      }
      resync();
      return result;
    },
    // called on every change of the document: the user's changes of watched cells
    check() {
      if (applying > 0 || watched.size === 0) {
        return;
      }
      const all = cells();
      if (all === null) {
        return;
      }
      const byId = new Map(all.map(cell => [cell.id, cell]));
      for (const [id, seen] of Array.from(watched)) {
        const cell = byId.get(id);
        if (cell === undefined) {
          watched.delete(id);
          report(id, 'deleted');
          continue;
        }
        const source = cell.getSource();
        if (seen.source !== null && source !== seen.source && !seen.edited) {
          seen.edited = true;
          report(id, 'edited');
        }
        seen.source = source;
      }
    },
    get size() {
      return watched.size;
    }
  };
}


function describe(note) {
  const who = typeof note.agent === 'string' && note.agent ? note.agent.slice(0, MAX_WHO) : 'an agent';
  const change = note.change;
  if (change === 'insert') {
    return `a new cell by ${who}`;
  }
  if (change === 'edit') {
    return `a cell edited by ${who}`;
  }
  if (change === 'delete' || change === 'removed') {
    return `a cell deleted by ${who}`;
  }
  if (change === 'kept' || change === 'rejected') {
    return `a change ${change}`;
  }
  return `a change by ${who}`;
}

// The one-line notice "changed in another tab" in the panel's toolbar: show(note) from the kernel's
// {elsewhere: {change, agent, cell}}; nothing with real-time collaboration (one shared document).
export function elsewhereNotice(panel) {
  const item = new Widget(); // a toolbar item (./look.js): laid out with the others, into the menu when narrow
  item.addClass('escouade-elsewhere');
  const node = item.node;
  node.setAttribute('role', 'status');
  const text = document.createElement('span');
  node.appendChild(text);
  const slot = toolbarSlot(panel, 'escouade-elsewhere', item);
  node.appendChild(reviewButton('Dismiss', () => {
    slot.place(false);
    count = 0;
  }, false));
  let count = 0;
  return {
    show(note) {
      const model = panel.context && panel.context.model;
      if (!note || typeof note !== 'object' || (model && model.collaborative)) {
        return false; // one shared document: the change is shown in the cells themselves
      }
      count++;
      const what = describe(note);
      // short in the toolbar (a long item would push the review's item, or itself, into the toolbar's "…"
      // menu), the whole sentence in its tooltip and for screen readers
      text.textContent = count === 1 ? 'Changed in another tab' : `Changed in another tab (${count})`;
      node.title = count === 1
        ? `Changed in another tab: ${what}. This tab's copy is out of date.`
        : `Changed in another tab (${count} changes, last: ${what}). This tab's copy is out of date.`;
      node.setAttribute('aria-label', node.title);
      node.dataset.count = String(count);
      slot.place(true);
      return true;
    }
  };
}
