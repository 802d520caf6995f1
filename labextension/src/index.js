// escouade_nb's page side of the kernel's channel to the notebook it runs (JupyterLab 4, Notebook 7).
//
// For every notebook panel, on the kernel connection it has, the page registers the comm target
// `escouade_nb.notebook`. When the kernel needs a page and knows none (its first live read, or one that
// went unanswered) it opens a short comm on that target: a ping, which every browser tab showing the kernel
// receives. Each panel then opens a comm of its own to the kernel (same target name, the kernel's side)
// and says hello: {client, hello: {path, panel}}. A comm belongs to one kernel connection, so what the
// kernel sends on a panel's comm reaches that panel only: two tabs never both act on one operation
// ({op, req, to}; `to` names this client, checked too).
//
// The message handlers never return a promise: JupyterLab awaits a comm handler before it reads the
// kernel's next message, so long work awaited here would hold back the kernel's own replies (a
// deadlock: a cell run awaited here never finishes). Answers go out with a later `send`.
// Nothing the kernel sends is evaluated: only the operations named below run, on this panel's own
// notebook: `cells` (read), `insert`, `edit`, `delete` (an agent's change, pending review), `run` (execute_cell: ./run.js).
// The views' saved forms ({form}, from the kernel) are written into their companion outputs: ./forms.js.
//
// An agent's change is applied at once and marked pending in the cell's own metadata
// (PENDING below: what changed, the source before it, by whom), so a save keeps it pending and a
// reload still shows it. A stale change is refused HERE, at the moment it would apply: `edit` and
// `delete` carry the SHA-256 of the source the agent read, compared with the cell's source now.
// A cell pending review shows, INSIDE the cell (a bar at its end), what changed — "new cell by NAME",
// the new source against the old line by line, or a proposed deletion — with Keep and Reject; the
// notebook's toolbar offers Keep all / Reject all while any is pending. A click does not change the
// notebook here: the page tells the kernel ({decide: {cell, keep}}), which settles it through the
// agent's review (its `pending_edits` stays true, a Reject is told to the agent) by sending `settle`
// back; the bar goes as soon as the cell's mark does (the settle removes it). The agent's review settles
// it even after the agent closed (the kernel holds it until each change is answered).
// A click always acts or says why, in one line in the cell's bar (`notes`): a kernel without escouade_nb
// (just restarted) closes the comm the click opened before saying anything — "escouade_nb is not loaded
// in this kernel: run %load_ext escouade_nb…", at once; no kernel at all; no answer within DECIDE_WAIT.
// After %load_ext a mark this page made for an earlier kernel is settled only as a saved file's mark
// (the kernel checks the saved notebook's trust, else says `untrusted`: the bar then offers Drop mark).
// A Keep writes the cell's provenance, which the kernel sent with the change (PENDING.by), into its
// metadata under PROVENANCE: {agent, harness, session, turn, at}.
// The agent's changes, Keep and Reject are not in the user's undo history (one transaction outside the
// undo manager), and a Reject clears the cell's undo history (./safe.js `settled`): no undo brings back a
// rejected agent's text without its mark. When the user typed into the agent's change, Reject asks
// first in the bar ("Reject anyway" / "Cancel": the user's lines go too); Reject all asks in those bars.
// A mark from a notebook file not trusted here (./safe.js) gets only "Drop mark".

import { INotebookTracker } from '@jupyterlab/notebook';
import { runCell } from './run';
import { IMAGE_MIMES, imageBudget, imageForKernel } from './images.js';

import { reviewButton, reviewToolbarItem } from './look.js';
import { elsewhereNotice, markLinked, pendingIds, tabId, wasLinked, watcher } from './aware.js';
import { shareViews } from './views';
import { applyForm, formsHeld } from './forms.js';
import { changedByUser, linkedElsewhere, settled, undoable, untrustedBar, untrustedHere } from './safe.js';

const TARGET = 'escouade_nb.notebook';
const PROTOCOL = 1;
// characters of one output's text sent to the kernel (the kernel clips the answer further)
const MAX_TEXT = 20000;
// request ids this panel answered, kept in its data-escouade-answered attribute (the last ones)
const KEEP = 20;
// the metadata key of an agent's change under review: {change: 'insert'|'edit'|'delete', original
// (the source before an edit or delete), agent, at}
const PENDING = 'escouade_pending';
const CELL_TYPES = ['code', 'markdown', 'raw'];
// the metadata key of a kept cell's provenance: {agent, harness, session, turn, at}
const PROVENANCE = 'escouade';
// milliseconds a clicked Keep/Reject waits for the kernel before its buttons come back, with a note saying so
const DECIDE_WAIT = 10000;
// the notes in a cell's review bar when a click could not be settled (one line each)
const NOT_LOADED = 'escouade_nb is not loaded in this kernel: run %load_ext escouade_nb, then click again, to settle this change';
const NO_KERNEL = 'No kernel is connected to this notebook: start one and run %load_ext escouade_nb to settle this change';
const NO_ANSWER = 'The kernel did not answer within 10 s (is a cell running?): nothing was changed; click again';
// lines of each side beyond which the review shows the old and new sources whole instead of a diff
const DIFF_LINES = 400;
// characters (UTF-16 code units, as JavaScript counts them) of the largest source an insert or edit may bring
const MAX_SOURCE = 1000000;

// Why a source is refused as too large: its length and the limit, in characters.
function tooLarge(source) {
  return `the source is too large: ${source.length} characters, the limit is ${MAX_SOURCE} characters`;
}

// SHA-256 (FIPS 180-4) of a string's UTF-8, in hex: synchronous, so the staleness check and the change
// are one step, and available where crypto.subtle is not (a page served over plain http off localhost).
const K256 = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
]);

function sha256Hex(text) {
  const data = new TextEncoder().encode(text);
  const blocks = Math.ceil((data.length + 9) / 64);
  const padded = new Uint8Array(blocks * 64);
  padded.set(data);
  padded[data.length] = 0x80;
  const view = new DataView(padded.buffer);
  const bits = data.length * 8;
  view.setUint32(padded.length - 8, Math.floor(bits / 0x100000000));
  view.setUint32(padded.length - 4, bits >>> 0);
  const h = new Uint32Array([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19
  ]);
  const w = new Uint32Array(64);
  const rotr = (x, n) => (x >>> n) | (x << (32 - n));
  for (let block = 0; block < blocks; block++) {
    for (let t = 0; t < 16; t++) {
      w[t] = view.getUint32(block * 64 + t * 4);
    }
    for (let t = 16; t < 64; t++) {
      const s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >>> 3);
      const s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >>> 10);
      w[t] = (w[t - 16] + s0 + w[t - 7] + s1) >>> 0;
    }
    let [a, b, c, d, e, f, g, hh] = h;
    for (let t = 0; t < 64; t++) {
      const t1 = (hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K256[t] + w[t]) >>> 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) >>> 0;
      hh = g;
      g = f;
      f = e;
      e = (d + t1) >>> 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) >>> 0;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
  }
  return Array.from(h, x => x.toString(16).padStart(8, '0')).join('');
}

function pendingOf(cell) {
  const value = cell.getMetadata ? cell.getMetadata(PENDING) : undefined;
  return value && typeof value === 'object' ? value : null;
}

// The provenance the kernel sent with a change, kept to known fields of known types.
function provenanceOf(by) {
  if (!by || typeof by !== 'object') {
    return null;
  }
  const text = (value, max) => (typeof value === 'string' ? value.slice(0, max) : null);
  return {
    agent: text(by.agent, 200),
    harness: text(by.harness, 200),
    session: text(by.session, 200),
    turn: Number.isInteger(by.turn) ? by.turn : null,
    at: text(by.at, 40)
  };
}

// The lines of `before` and `after` as [' ' | '-' | '+', line] (a longest common subsequence).
function lineDiff(before, after) {
  const a = before.split('\n');
  const b = after.split('\n');
  if (a.length > DIFF_LINES || b.length > DIFF_LINES) {
    return [...a.map(line => ['-', line]), ...b.map(line => ['+', line])];
  }
  const common = Array.from({ length: a.length + 1 }, () => new Uint16Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      common[i][j] = a[i] === b[j] ? common[i + 1][j + 1] + 1 : Math.max(common[i + 1][j], common[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && a[i] === b[j]) {
      out.push([' ', a[i++]]);
      j++;
    } else if (i < a.length && (j >= b.length || common[i + 1][j] >= common[i][j + 1])) {
      out.push(['-', a[i++]]); // the old line first, as a diff reads
    } else {
      out.push(['+', b[j++]]);
    }
  }
  return out;
}

function element(tag, style, text) {
  const node = document.createElement(tag);
  if (style) {
    node.style.cssText = style;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

// The review bar of one pending cell: what changed, Keep and Reject (disabled while a click waits);
// `note`: why the last click did nothing (one line, else null); `confirm`: the user typed into the agent's
// change and clicked Reject: the bar asks first (Reject anyway / Cancel), `ask(cellId, on)` opens or closes it.
function reviewBar(cell, pending, busy, decide, note = null, confirm = false, ask = () => undefined) {
  const bar = element('div', ''); // its look: ./review.css
  bar.className = 'escouade-review';
  bar.dataset.cell = cell.id;
  bar.dataset.change = String(pending.change || 'edit');
  const who = typeof pending.agent === 'string' && pending.agent ? pending.agent : 'an agent';
  const head = element('div', '');
  head.className = 'escouade-review-head';
  const mine = changedByUser(cell, pending, sha256Hex); // the user changed it after the agent (./safe.js)
  bar.dataset.changedByUser = String(mine);
  let title;
  if (pending.change === 'insert') {
    title = mine ? `New cell by ${who}, then changed by you` : `New cell by ${who}`;
  } else if (pending.change === 'delete') {
    title = `${who} deletes this cell (Keep deletes it)`;
  } else {
    title = mine ? `Edited by ${who}, then by you` : `Edited by ${who}`;
  }
  const heading = element('span', '', busy ? `${title} — ${busy}…` : title);
  heading.className = 'escouade-review-title';
  head.appendChild(heading);
  if (confirm && mine) {
    const question = element('div', '');
    question.className = 'escouade-review-confirm';
    question.appendChild(element('span', '', 'You edited this cell too: Reject drops your edits as well.'));
    question.appendChild(reviewButton('Reject anyway', () => decide(cell.id, false), busy !== null));
    question.appendChild(reviewButton('Cancel', () => ask(cell.id, false), busy !== null));
    head.appendChild(reviewButton('Keep', () => decide(cell.id, true), busy !== null, true));
    bar.appendChild(head);
    bar.appendChild(question);
  } else {
    head.appendChild(reviewButton('Keep', () => decide(cell.id, true), busy !== null, true));
    // a Reject would drop the user's own lines with the agent's: asked first
    head.appendChild(reviewButton('Reject', () => (mine ? ask(cell.id, true) : decide(cell.id, false)), busy !== null));
    bar.appendChild(head);
  }
  if (note) {
    const line = element('div', '', note);
    line.className = 'escouade-review-note';
    line.setAttribute('role', 'status');
    bar.appendChild(line);
  }
  if (pending.change === 'edit' && typeof pending.original === 'string') {
    const diff = element('pre', '');
    diff.className = 'escouade-review-diff';
    if (mine) {
      diff.appendChild(element('div', 'font-style:italic', `before ${who} → now (${who}'s changes and yours)`));
    }
    for (const [sign, line] of lineDiff(pending.original, cell.getSource())) {
      const row = element('div', '', `${sign} ${line}`);
      row.className = sign === '+' ? 'escouade-review-add' : sign === '-' ? 'escouade-review-del' : '';
      diff.appendChild(row);
    }
    bar.appendChild(diff);
  }
  return bar;
}

function newClientId() {
  if (globalThis.crypto && typeof globalThis.crypto.randomUUID === 'function') {
    return globalThis.crypto.randomUUID();
  }
  return `c${Date.now().toString(16)}${Math.random().toString(16).slice(2)}`;
}

function clip(value) {
  const text = Array.isArray(value) ? value.join('') : typeof value === 'string' ? value : '';
  return text.length > MAX_TEXT ? text.slice(0, MAX_TEXT) : text;
}

// One nbformat output, reduced to its text: a stream's text, a result's text/plain (other MIME
// types by name only; PNG and JPEG data too with an answer's image budget: ./images.js), an
// error's name, value and traceback.
function outputForKernel(output, images) {
  const kind = output.output_type;
  if (kind === 'stream') {
    return { output_type: kind, name: String(output.name || ''), text: clip(output.text) };
  }
  if (kind === 'execute_result' || kind === 'display_data') {
    const data = {};
    for (const [mime, value] of Object.entries(output.data || {})) {
      const image = images && typeof images === 'object' && IMAGE_MIMES.includes(mime);
      data[mime] = mime === 'text/plain' ? clip(value) : image ? imageForKernel(value, images) : '';
    }
    return { output_type: kind, data };
  }
  if (kind === 'error') {
    return {
      output_type: kind,
      ename: clip(output.ename),
      evalue: clip(output.evalue),
      traceback: [clip((output.traceback || []).join('\n'))]
    };
  }
  return { output_type: String(kind || '') };
}

// The notebook's cells as they are in this page now (unsaved edits included).
// withImages: PNG and JPEG outputs' data too (./images.js), for the kernel's live read.
function cellsOf(panel, withImages = false) {
  const model = panel.content.model;
  if (!model) {
    return null;
  }
  const images = withImages ? imageBudget() : null;
  return model.sharedModel.cells.map(cell => {
    const item = { id: cell.id, cell_type: cell.cell_type, source: cell.getSource() };
    const pending = pendingOf(cell);
    if (pending !== null) {
      item.pending = String(pending.change || 'edit');
    }
    const by = cell.getMetadata ? cell.getMetadata(PROVENANCE) : undefined; // a kept cell's: %escouade written
    if (by && typeof by === 'object') {
      item.escouade = by;
    }
    if (cell.cell_type === 'code') {
      item.execution_count = cell.execution_count ?? null;
      item.outputs = (cell.getOutputs ? cell.getOutputs() : []).map(output => outputForKernel(output, images));
    }
    return item;
  });
}

// An agent's change to this panel's notebook, pending review: {ok, cell_id} or {ok: false, error}.
// The staleness check and the change happen in one synchronous step after the hash is known, so no
// keystroke (an event, never a microtask) can fall between them.
function change(panel, data) {
  const model = panel.content.model;
  if (!model) {
    return { ok: false, error: 'the notebook is not loaded in this page yet' };
  }
  const notebook = model.sharedModel;
  const agent = typeof data.agent === 'string' ? data.agent.slice(0, 200) : '';
  const at = new Date().toISOString();
  const by = provenanceOf(data.by); // the kernel's: written as the cell's provenance on Keep
  const find = id => notebook.cells.findIndex(cell => cell.id === id);
  if (data.op === 'insert') {
    const kind = CELL_TYPES.includes(data.cell_type) ? data.cell_type : null;
    if (kind === null || typeof data.source !== 'string') {
      return { ok: false, error: 'an insert needs a source and a cell_type code, markdown or raw' };
    }
    if (data.source.length > MAX_SOURCE) {
      return { ok: false, error: tooLarge(data.source) };
    }
    let index = notebook.cells.length;
    if (data.after !== null && data.after !== undefined) {
      const after = find(data.after);
      if (after < 0) {
        return { ok: false, error: `no cell ${String(data.after).slice(0, 80)} in the notebook` };
      }
      index = after + 1;
    }
    let inserted = null;
    notebook.transact(() => {
      inserted = notebook.insertCell(index, {
        cell_type: kind,
        source: data.source,
        metadata: { [PENDING]: { change: 'insert', agent, at, by, sha: sha256Hex(data.source) } }
      });
    }, false);
    return { ok: true, cell_id: inserted.id, change: 'insert' };
  }
  if (typeof data.cell !== 'string' || typeof data.base !== 'string') {
    return { ok: false, error: 'an edit or delete needs a cell id and the sha256 of its source' };
  }
  if (data.op === 'edit' && typeof data.source !== 'string') {
    return { ok: false, error: 'an edit needs a source' };
  }
  if (data.op === 'edit' && data.source.length > MAX_SOURCE) {
    return { ok: false, error: tooLarge(data.source) };
  }
  const index = find(data.cell);
  if (index < 0) {
    return { ok: false, error: `no cell ${data.cell.slice(0, 80)} in the notebook` };
  }
  const cell = notebook.cells[index];
  // the staleness check and the change in one synchronous step: nothing the user types falls between
  const hash = sha256Hex(cell.getSource());
  if (hash !== data.base.toLowerCase()) {
    return {
      ok: false,
      stale: true,
      error: `cell ${data.cell.slice(0, 80)} changed since you read it (its sha256 is now ${hash}): read it again`
    };
  }
  const before = pendingOf(cell);
  const original = before !== null ? before.original : cell.getSource();
  const fresh = before !== null && before.change === 'insert'; // the agent's own new cell, still under review
  notebook.transact(() => {
    if (data.op === 'delete' && fresh) {
      notebook.deleteCell(index); // nothing of the user's to restore: gone at once
    } else if (data.op === 'edit') {
      cell.setSource(data.source);
      const sha = sha256Hex(data.source); // what the agent left: the user's later changes are told apart
      cell.setMetadata(PENDING, fresh ? { change: 'insert', agent, at, by, sha } : { change: 'edit', original, agent, at, by, sha });
    } else {
      cell.setMetadata(PENDING, { change: 'delete', original, agent, at, by });
    }
  }, false);
  return { ok: true, cell_id: data.cell, change: data.op === 'delete' && fresh ? 'removed' : data.op };
}

// Keep (data.keep true) or Reject an agent's pending change of a cell: {ok, outcome} or {ok: false, error}.
// Keep: the mark removed (a delete done). Reject: exactly what was there before (the source before the
// agent's first change, the mark removed; a new cell removed). Outside the user's undo history too.
function settle(panel, data) {
  const model = panel.content.model;
  if (!model) {
    return { ok: false, error: 'the notebook is not loaded in this page yet' };
  }
  const notebook = model.sharedModel;
  const index = typeof data.cell === 'string' ? notebook.cells.findIndex(cell => cell.id === data.cell) : -1;
  if (index < 0) {
    return { ok: false, error: `no cell ${String(data.cell).slice(0, 80)} in the notebook` };
  }
  const cell = notebook.cells[index];
  const pending = pendingOf(cell);
  if (pending === null) {
    return { ok: false, error: `cell ${data.cell.slice(0, 80)} has no change pending review` };
  }
  const keep = data.keep === true;
  const mine = changedByUser(cell, pending, sha256Hex);
  // outside the undo history, Keep and Reject alike (the user's history before it is cut there: ./safe.js
  // `settled`): no Ctrl+Z brings back a rejected agent's text without its mark, nor takes back what the record says
  notebook.transact(() => {
    if ((keep && pending.change === 'delete') || (!keep && pending.change === 'insert')) {
      notebook.deleteCell(index);
      return;
    }
    if (!keep && pending.change === 'edit' && typeof pending.original === 'string') {
      cell.setSource(pending.original);
    }
    cell.deleteMetadata(PENDING);
    const by = keep ? provenanceOf(pending.by) : null;
    if (by !== null && mine) {
      by.changed_by_user = true; // the cell holds the user's lines too
    }
    if (by !== null) {
      const prior = cell.getMetadata(PROVENANCE); // an agent-run cell's `ran` (./run.js) stays
      cell.setMetadata(PROVENANCE, prior && typeof prior === 'object' && prior.ran ? { ...by, ran: prior.ran } : by);
    }
  }, false);
  if (!keep) {
    settled(cell);
  }
  return { ok: true, cell_id: data.cell, outcome: keep ? 'kept' : 'rejected', changed_by_user: mine };
}

function attach(panel) {
  const client = newClientId();
  const node = panel.node;
  node.dataset.escouadeClient = client;
  let kernel = null; // the kernel connection whose comm target this panel holds
  let comm = null; // this panel's own comm to the kernel
  const madeHere = new Set(); // cells this page marked pending (an agent's change through it), or the kernel's review holds
  const refused = new Set(); // cells whose mark the kernel would not settle: a file not trusted here (./safe.js)

  const mark = req => {
    const kept = (node.dataset.escouadeAnswered || '').split(' ').filter(Boolean);
    kept.push(String(req));
    node.dataset.escouadeAnswered = kept.slice(-KEEP).join(' ');
  };

  const send = data => {
    if (comm === null || comm.isDisposed) {
      return;
    }
    try {
      comm.send({ v: PROTOCOL, client, ...data }); // a future: never awaited here
    } catch (err) {
      console.warn('escouade_nb: a message to the kernel was not sent', err);
    }
  };

  const hello = () => ({
    v: PROTOCOL,
    client,
    hello: {
      path: panel.context.path, panel: panel.id, tab: tabId(), pending: pendingIds(panel, pendingOf),
      forms: formsHeld(panel) // the views' saved forms this document holds (./forms.js): the kernel sends newer ones
    }
  });
  // the user's changes of the cells changed through this page, and the notice of changes in other tabs
  const aware = watcher(panel, (cell, what) => send({ touched: { cell, what } }));
  const elsewhere = elsewhereNotice(panel);

  const operate = data => {
    const req = data.req;
    if (data.form && data.to === client) {
      applyForm(panel, data.form, held => send({ forms: held })); // a view's saved form (./forms.js)
      return;
    }
    if (data.elsewhere && data.to === client) {
      elsewhere.show(data.elsewhere); // another tab of this notebook applied a change
      return;
    }
    if (data.to === client && (typeof data.untrusted === 'string' || Array.isArray(data.held))) {
      if (typeof data.untrusted === 'string') {
        refused.add(data.untrusted); // the kernel refused to settle it: only a way to drop the mark
        madeHere.delete(data.untrusted); // made here before this kernel (a restart): its bar says so now
        waiting.delete(data.untrusted);
      } else {
        const held = new Set(data.held.filter(id => typeof id === 'string'));
        held.forEach(id => madeHere.add(id)); // its review's: trusted, a quarantine written before it knew undone
        const model = panel.content.model;
        for (const cell of model ? model.sharedModel.cells : []) {
          const pending = pendingOf(cell);
          if (held.has(cell.id) && pending !== null && pending.untrusted === true) {
            const { untrusted: _, ...kept } = pending;
            model.sharedModel.transact(() => cell.setMetadata(PENDING, kept), false);
          }
        }
      }
      refresh();
      return;
    }
    if ((typeof req !== 'string' && typeof req !== 'number') || data.to !== client) {
      return;
    }
    mark(req);
    if (data.op === 'cells') {
      const cells = cellsOf(panel, data.images !== false);
      if (cells === null) {
        send({ reply: req, ok: false, error: 'the notebook is not loaded in this page yet' });
      } else {
        send({ reply: req, ok: true, path: panel.context.path, cells });
      }
      return;
    }
    if (data.op === 'run') {
      // execute_cell (./run.js): answered at once, the run's end sent later (never awaited here)
      runCell(panel, data, send, { sha256Hex, outputForKernel, provenanceOf, provenanceKey: PROVENANCE });
      return;
    }
    if (data.op === 'insert' || data.op === 'edit' || data.op === 'delete' || data.op === 'settle') {
      let answer;
      try {
        answer = aware.apply(() => (data.op === 'settle' ? settle(panel, data) : change(panel, data)),
          data.op !== 'settle' && typeof data.cell === 'string' ? data.cell : null);
        if (answer.ok && data.op === 'insert') {
          aware.apply(() => undefined, answer.cell_id); // the new cell watched too
        }
        if (answer.ok && data.op !== 'settle') {
          madeHere.add(answer.cell_id);
        }
      } catch (err) {
        answer = { ok: false, error: `the change failed: ${String(err).slice(0, 200)}` };
      }
      send({ reply: req, ...answer });
      refresh(); // the review drawn as the change is (a settled cell's bar gone at once)
      return;
    }
    send({ reply: req, ok: false, error: `unknown operation ${String(data.op).slice(0, 40)}` });
  };

  // Open this panel's comm to the kernel and say hello, with `extra` (a decision: the kernel may not yet
  // listen on a comm it is just given) (false when there is no kernel to open it to).
  const openComm = (extra = {}) => {
    if (kernel === null || kernel.isDisposed) {
      return false;
    }
    const opened = kernel.createComm(TARGET);
    comm = opened;
    let heard = false; // the kernel said something on it: escouade_nb is there
    opened.onMsg = msg => {
      heard = true;
      operate((msg.content && msg.content.data) || {});
    }; // returns nothing: see the top of this file
    opened.onClose = () => {
      const current = comm === opened;
      if (current) {
        comm = null;
      }
      // this panel's comm, closed by the kernel before it said anything, clicks waiting: no comm target of ours
      // there (a kernel without escouade_nb closes a comm it cannot place at once): each waiting cell says what to run
      if (current && !heard && waiting.size > 0) {
        waiting.forEach((_wait, cellId) => notes.set(cellId, NOT_LOADED));
        waiting.clear();
        refresh();
      }
    };
    try {
      opened.open({ ...hello(), ...extra }); // a future: never awaited here
    } catch (err) {
      comm = null;
      console.warn('escouade_nb: the channel to the kernel did not open', err);
      return false;
    }
    return true;
  };

  // The kernel's ping: open this panel's comm (or say hello again on the open one).
  const onPing = () => {
    markLinked(panel.context.path); // after a reload this tab says hello unasked
    if (comm !== null && !comm.isDisposed) {
      send(hello());
      return;
    }
    openComm();
  };

  // -- the review: Keep and Reject inside each pending cell, Keep all / Reject all in the toolbar --
  const waiting = new Map(); // cell id -> {label, until}: a click the kernel has not settled yet
  const notes = new Map(); // cell id -> why its last click did nothing (shown in its bar until the next click)
  const asking = new Set(); // cells whose Reject asks first (the user typed into the agent's change)
  const ask = (cellId, on) => {
    if (on) {
      asking.add(cellId);
    } else {
      asking.delete(cellId);
    }
    refresh();
  };

  // The user's Keep or Reject: told to the kernel, which settles it (nothing changes here before). A click
  // that cannot reach escouade_nb in the kernel says why in the cell's bar, at once or after DECIDE_WAIT.
  const decide = (cellId, keep) => {
    if (waiting.has(cellId)) {
      return;
    }
    asking.delete(cellId);
    notes.delete(cellId);
    const decision = { decide: { cell: cellId, keep } };
    if (comm !== null && !comm.isDisposed) {
      send(decision);
    } else if (!openComm(decision)) {
      notes.set(cellId, NO_KERNEL);
      refresh();
      return;
    }
    waiting.set(cellId, { label: keep ? 'keeping' : 'rejecting', until: Date.now() + DECIDE_WAIT });
    refresh();
  };

  // a mark this page did not make, in a notebook the server did not trust, or one the kernel refused
  // (its mark then says so, `untrusted: true`, kept by a save: a later save signing the file does not make it trusted)
  const untrusted = (cell, notTrusted) => {
    const pending = pendingOf(cell);
    return !madeHere.has(cell.id) && (refused.has(cell.id) || notTrusted || (pending !== null && pending.untrusted === true));
  };
  const pendingCells = () => {
    const model = panel.content.model;
    const notTrusted = untrustedHere(panel);
    return model ? model.sharedModel.cells.filter(cell => pendingOf(cell) !== null && !untrusted(cell, notTrusted)) : [];
  };
  // The user drops an untrusted mark: the metadata goes, the cell stays as it is (an undoable step).
  const drop = cellId => {
    const model = panel.content.model;
    const cell = model ? model.sharedModel.cells.find(c => c.id === cellId) : undefined;
    if (cell !== undefined && pendingOf(cell) !== null) {
      undoable(cell, () => cell.deleteMetadata(PENDING));
    }
    refused.delete(cellId);
    refresh();
  };
  // Reject all rejects the cells the user did not type into; the others ask first, in their bars
  const rejectAll = () => pendingCells().forEach(cell => {
    if (changedByUser(cell, pendingOf(cell), sha256Hex)) {
      asking.add(cell.id);
    } else {
      decide(cell.id, false);
    }
  });
  const toolbarReview = reviewToolbarItem(panel, // a toolbar item (./look.js), there while any is pending
    () => pendingCells().forEach(cell => decide(cell.id, true)), () => {
      rejectAll();
      refresh();
    });

  const refresh = () => {
    const notebook = panel.content;
    if (!notebook.model) {
      return;
    }
    const now = Date.now();
    const notTrusted = untrustedHere(panel);
    const quarantine = [];
    let count = 0;
    for (const widget of notebook.widgets) {
      const cell = widget.model && widget.model.sharedModel;
      if (!cell) {
        continue;
      }
      const pending = pendingOf(cell);
      let bar = widget.node.querySelector(':scope > .escouade-review');
      const wait = waiting.get(cell.id);
      if (wait && (pending === null || wait.until < now)) {
        waiting.delete(cell.id); // settled, or the kernel did not act: the buttons come back, saying so
        if (pending !== null) {
          notes.set(cell.id, NO_ANSWER);
        }
      }
      if (pending === null) {
        notes.delete(cell.id);
        asking.delete(cell.id);
        if (bar) {
          bar.remove();
        }
        continue;
      }
      const distrust = untrusted(cell, notTrusted);
      if (distrust && pending.untrusted !== true) {
        quarantine.push([cell, { ...pending, untrusted: true }]); // written after the loop: a change redraws
      }
      if (!distrust) {
        count++;
      }
      const busy = waiting.has(cell.id) ? waiting.get(cell.id).label : null;
      const note = notes.get(cell.id) || null;
      const confirm = asking.has(cell.id);
      const key = JSON.stringify([pending.change, pending.agent, pending.original, pending.at, busy, distrust, note,
        confirm, pending.change === 'edit' || pending.change === 'insert' ? cell.getSource() : '']);
      if (bar && bar.dataset.key === key) {
        if (bar !== widget.node.lastElementChild) {
          widget.node.appendChild(bar); // a new cell's own parts were attached after it: back to the end
        }
        continue;
      }
      if (bar) {
        bar.remove();
      }
      bar = distrust ? untrustedBar(cell, element, reviewButton, drop)
        : reviewBar(cell, pending, busy, decide, note, confirm, ask);
      bar.dataset.key = key;
      widget.node.appendChild(bar); // at the cell's end: the cell's own widgets keep their places
    }
    if (quarantine.length > 0) { // outside the undo history
      notebook.model.sharedModel.transact(() => quarantine.forEach(([cell, mark]) => cell.setMetadata(PENDING, mark)), false);
    }
    toolbarReview.show(count);
  };
  // the cells' marks change through the shared model (a kernel's settle, a collaborator, a reload):
  // redrawn on every change of the notebook, and each second for the cells drawn later
  const onChanged = () => {
    refresh();
    aware.check();
  };
  const watch = () => {
    if (panel.content.model) {
      panel.content.model.sharedModel.changed.connect(onChanged);
      panel.content.model.contentChanged.connect(onChanged);
      refresh();
      if (comm !== null && !comm.isDisposed) {
        send({ forms: formsHeld(panel) || {} }); // said hello before the document loaded: its saved forms now
      }
    }
  };
  panel.context.ready.then(watch, () => undefined);
  const ticking = setInterval(refresh, 1000);

  const register = () => {
    const next = (panel.sessionContext.session && panel.sessionContext.session.kernel) || null;
    if (next === kernel) {
      return;
    }
    if (kernel !== null && !kernel.isDisposed) {
      kernel.removeCommTarget(TARGET, onPing);
    }
    kernel = next;
    comm = null;
    if (kernel !== null) {
      kernel.registerCommTarget(TARGET, onPing);
      // a reload (this tab was linked), or another tab already linked to this kernel (comms on the target:
      // this tab opened after the kernel's ping): say hello (with the cells pending here) once loaded
      const linked = kernel;
      const known = wasLinked(panel.context.path);
      panel.context.ready.then(async () => {
        // a document holding saved forms of escouade_nb's views (./forms.js) says hello too: a tab reopened in a new
        // browser tab gets the forms as they are now
        const forms = formsHeld(panel);
        if (!known && !(forms && Object.keys(forms).length > 0) && !(await linkedElsewhere(linked))) {
          return; // a kernel without escouade_nb, or none of its pages linked yet: the ping will come
        }
        if (kernel === linked && (comm === null || comm.isDisposed)) {
          openComm();
        }
      }, () => undefined);
    }
  };

  const bye = () => {
    if (comm !== null && !comm.isDisposed) {
      try {
        comm.close({ v: PROTOCOL, client, bye: true });
      } catch (err) {
        // the connection is going away anyway
      }
    }
    comm = null;
  };
  window.addEventListener('pagehide', bye);
  // Closing the panel disposes its document's context, and with it the session's kernel connection and this comm
  // (without a word to the kernel), before the panel's own `disposed` fires: the bye is said when the session
  // context goes, while the connection still carries it. (jupyter_server may still drop it: when another tab stays
  // connected to the kernel it closes this connection's channels at once, a message not yet passed on with them;
  // the kernel then forgets this page at the first request it leaves unanswered.)
  panel.sessionContext.disposed.connect(bye);
  panel.sessionContext.kernelChanged.connect(register);
  panel.sessionContext.ready.then(register, () => undefined);
  register();
  panel.disposed.connect(() => {
    clearInterval(ticking);
    bye();
    window.removeEventListener('pagehide', bye);
    panel.sessionContext.kernelChanged.disconnect(register);
    if (kernel !== null && !kernel.isDisposed) {
      kernel.removeCommTarget(TARGET, onPing);
    }
    kernel = null;
  });
}

const plugin = {
  id: 'escouade-nb:channel',
  description: "The kernel's channel to the notebook it runs (escouade_nb).",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app, tracker) => {
    shareViews(); // the views' module, once per page (views.js)
    const attached = new WeakSet();
    const once = panel => {
      if (!attached.has(panel)) {
        attached.add(panel);
        attach(panel);
      }
    };
    tracker.forEach(once);
    tracker.widgetAdded.connect((_, panel) => once(panel));
  }
};

export default plugin;
