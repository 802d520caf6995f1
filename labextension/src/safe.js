// The review's safety (imported by index.js).
//
// - The user's changes of a cell pending review: the agent's mark records the SHA-256 of the source the
//   agent left (`sha`); the cell's source now differing from it means the user changed the cell after
//   the agent (`changedByUser`). The bar's Reject then asks first ("Reject anyway" / "Cancel": a Reject
//   restores exactly what was there before the agent, the user's lines too); Keep writes
//   `changed_by_user: true` in the provenance: nothing claims the agent wrote the user's lines.
// - A Keep or Reject is outside the undo history, and a Reject cuts the cell's history there (`settled`):
//   an undo step from before it could bring back characters of the agent's text the user had typed over,
//   without the review mark, and the record (the kernel's, the agent told) says it was rejected.
// - Trust: a notebook file written by someone else can carry forged review marks (an "original" that
//   Reject would write into the cell, an "insert" mark that Reject would delete the user's cell with).
//   Jupyter's own notebook trust decides: the server marks every code cell of a notebook whose
//   signature it does not know `trusted: false` when it loads it (`untrustedHere`). Such marks, unless
//   this page made them, show no Keep/Reject: only "Drop mark" (the mark removed, the cell left as it
//   is). The kernel checks the saved file's signature again before it settles a mark no agent's review
//   holds, and says `untrusted` when it refuses.
// - A tab opened after the kernel's ping: `linkedElsewhere` asks the kernel (comm_info) whether pages
//   of ours hold comms on the channel's target; if so this page says hello unasked.

const TARGET = 'escouade_nb.notebook';

// The cell's source differs from the one the agent left (false when the mark records none).
const hashes = new Map(); // cell id -> [source, sha256]: the last hash computed, each refresh reuses it
export function changedByUser(cell, pending, sha256Hex) {
  if (!pending || typeof pending.sha !== 'string' || (pending.change !== 'edit' && pending.change !== 'insert')) {
    return false;
  }
  const source = cell.getSource();
  let known = hashes.get(cell.id);
  if (!known || known[0] !== source) {
    known = [source, sha256Hex(source)];
    hashes.set(cell.id, known);
    if (hashes.size > 500) {
      hashes.delete(hashes.keys().next().value);
    }
  }
  return known[1] !== pending.sha.toLowerCase();
}

// Run `fn` as one step of the user's undo history, not merged with the user's typing just before or after.
// `owner`: the cell whose source `fn` changes (JupyterLab 4 gives each cell its own undo history unless the
// notebook's document-wide undo is on: the cell's transact picks the right one, Ctrl+Z in its editor undoes
// it), or the notebook for a change of its cells' list (undone by the notebook's undo, `z`).
export function undoable(owner, fn) {
  const manager = owner.undoManager;
  if (manager && typeof manager.stopCapturing === 'function') {
    manager.stopCapturing();
  }
  owner.transact(fn, true);
  if (manager && typeof manager.stopCapturing === 'function') {
    manager.stopCapturing();
  }
}

// A Reject was done in `cell` (outside the undo history): the undo history of the cell (the notebook's,
// when its document-wide undo is on) is cleared, so no undo step from before brings the agent's text back.
export function settled(cell) {
  const manager = cell && cell.undoManager;
  if (manager && typeof manager.clear === 'function') {
    try {
      manager.clear();
    } catch (err) {
      // a cell just removed (a rejected new cell) has no history left to cut
    }
  }
}

// The server loaded this notebook as not trusted (a code cell marked `trusted: false`).
export function untrustedHere(panel) {
  const model = panel.content.model;
  if (!model) {
    return false;
  }
  return model.sharedModel.cells.some(
    cell => cell.cell_type === 'code' && cell.getMetadata && cell.getMetadata('trusted') === false
  );
}

// The bar of a review mark from a file not trusted here: only a way to drop the mark.
export function untrustedBar(cell, element, button, drop) {
  const bar = element(
    'div',
    'margin:4px 0 4px 64px;padding:4px 8px;border-left:3px solid var(--jp-error-color1,#d32f2f);' +
      'background:var(--jp-layout-color2,#eee);font-size:var(--jp-ui-font-size1,13px);' +
      'color:var(--jp-ui-font-color1,#000)'
  );
  bar.className = 'escouade-review escouade-review-untrusted';
  bar.dataset.cell = cell.id;
  const head = element('div', 'display:flex;align-items:center;gap:4px');
  head.appendChild(element('span', 'flex:1', 'A review mark from a file not trusted here: ' +
    'its recorded change is not applied or restored. Drop the mark to leave the cell as it is.'));
  head.appendChild(button('Drop mark', () => drop(cell.id), false));
  bar.appendChild(head);
  return bar;
}

// Whether pages of ours already hold comms on the channel's target in this kernel (another tab linked):
// a promise of a boolean, false on any failure (a kernel without escouade_nb has none).
export async function linkedElsewhere(kernel) {
  try {
    const reply = await kernel.requestCommInfo({ target_name: TARGET });
    const comms = reply && reply.content && reply.content.comms;
    return !!comms && typeof comms === 'object' && Object.keys(comms).length > 0;
  } catch (err) {
    return false;
  }
}
