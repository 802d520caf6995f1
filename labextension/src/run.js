// escouade_nb's page side of `execute_cell`: the kernel's `run` operation, sent after the user allowed
// it on the card (the card showed the cell's source; `base` is that source's SHA-256).
//
// The cell runs HERE, in the notebook, as if the user ran it (NotebookActions.runCells: its outputs in
// the cell, its execution count set; the selection is not changed). Only when the cell's source is still
// the one the card showed: checked in the same synchronous step that starts the run (a changed cell is
// refused as stale, nothing runs).
//
// The comm handler must not await the run: JupyterLab reads the kernel's next message only once a comm
// handler's promise settled, and the run's own replies are among those messages (a deadlock). So the
// operation is answered at once ({reply, ok, started}) and the run's end goes out as a later message:
// {ran: RUN, ok, execution_count, outputs}. When it ends, the code that ran is written in the cell's
// metadata, beside the provenance a Keep writes: escouade.ran = {agent, harness, session, turn, at (when
// the kernel asked), code, execution_count}.

import { NotebookActions } from '@jupyterlab/notebook';
import { imageBudget } from './images.js';

// helpers: {sha256Hex, outputForKernel, provenanceOf, provenanceKey} from index.js
export function runCell(panel, data, send, helpers) {
  const { sha256Hex, outputForKernel, provenanceOf, provenanceKey } = helpers;
  const req = data.req;
  const notebook = panel.content;
  const model = notebook.model;
  if (!model) {
    send({ reply: req, ok: false, error: 'the notebook is not loaded in this page yet' });
    return;
  }
  if (typeof data.cell !== 'string' || typeof data.base !== 'string' || typeof data.run !== 'string') {
    send({ reply: req, ok: false, error: 'a run needs a cell id, the sha256 of its source and a run id' });
    return;
  }
  const shared = model.sharedModel.cells.find(cell => cell.id === data.cell);
  if (!shared) {
    send({ reply: req, ok: false, error: `no cell ${data.cell.slice(0, 80)} in the notebook: nothing was run` });
    return;
  }
  if (shared.cell_type !== 'code') {
    send({ reply: req, ok: false, error: `cell ${data.cell.slice(0, 80)} is not a code cell: nothing was run` });
    return;
  }
  const widget = notebook.widgets.find(cell => cell.model && cell.model.sharedModel === shared);
  if (!widget) {
    send({ reply: req, ok: false, error: `cell ${data.cell.slice(0, 80)} is not shown in this page: nothing was run` });
    return;
  }
  const source = shared.getSource();
  const hash = sha256Hex(source);
  if (hash !== data.base.toLowerCase()) {
    send({
      reply: req,
      ok: false,
      stale: true,
      error:
        `cell ${data.cell.slice(0, 80)} changed since the card showed it (its sha256 is now ${hash}): ` +
        'nothing was run; read it again'
    });
    return;
  }
  const by = provenanceOf(data.by) || {};
  let running;
  try {
    running = NotebookActions.runCells(notebook, [widget], panel.sessionContext); // started now, not awaited
  } catch (err) {
    running = Promise.reject(err);
  }
  send({ reply: req, ok: true, started: true });
  Promise.resolve(running).then(
    () => ended(),
    err => send({ ran: data.run, ok: false, error: `the run failed: ${String(err).slice(0, 200)}` })
  );

  function ended() {
    const cell = model.sharedModel.cells.find(item => item.id === data.cell);
    if (!cell) {
      send({ ran: data.run, ok: false, error: 'the cell was deleted while it ran' });
      return;
    }
    const count = cell.execution_count ?? null;
    const images = imageBudget(); // PNG and JPEG data too (./images.js)
    const outputs = (cell.getOutputs ? cell.getOutputs() : []).map(output => outputForKernel(output, images));
    try {
      model.sharedModel.transact(() => {
        const prior = cell.getMetadata(provenanceKey);
        const kept = prior && typeof prior === 'object' ? prior : {};
        cell.setMetadata(provenanceKey, { ...kept, ran: { ...by, code: source, execution_count: count } });
      }, false);
    } catch (err) {
      console.warn('escouade_nb: the code that ran was not written in the cell', err);
    }
    send({ ran: data.run, ok: true, execution_count: count, outputs });
  }
}
