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
// notebook.

import { INotebookTracker } from '@jupyterlab/notebook';

const TARGET = 'escouade_nb.notebook';
const PROTOCOL = 1;
// characters of one output's text sent to the kernel (the kernel clips the answer further)
const MAX_TEXT = 20000;
// request ids this panel answered, kept in its data-escouade-answered attribute (the last ones)
const KEEP = 20;

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
// types by name only), an error's name, value and traceback.
function outputForKernel(output) {
  const kind = output.output_type;
  if (kind === 'stream') {
    return { output_type: kind, name: String(output.name || ''), text: clip(output.text) };
  }
  if (kind === 'execute_result' || kind === 'display_data') {
    const data = {};
    for (const [mime, value] of Object.entries(output.data || {})) {
      data[mime] = mime === 'text/plain' ? clip(value) : '';
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
function cellsOf(panel) {
  const model = panel.content.model;
  if (!model) {
    return null;
  }
  return model.sharedModel.cells.map(cell => {
    const item = { id: cell.id, cell_type: cell.cell_type, source: cell.getSource() };
    if (cell.cell_type === 'code') {
      item.execution_count = cell.execution_count ?? null;
      item.outputs = (cell.getOutputs ? cell.getOutputs() : []).map(outputForKernel);
    }
    return item;
  });
}

function attach(panel) {
  const client = newClientId();
  const node = panel.node;
  node.dataset.escouadeClient = client;
  let kernel = null; // the kernel connection whose comm target this panel holds
  let comm = null; // this panel's own comm to the kernel

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

  const hello = () => ({ v: PROTOCOL, client, hello: { path: panel.context.path, panel: panel.id } });

  const operate = data => {
    const req = data.req;
    if ((typeof req !== 'string' && typeof req !== 'number') || data.to !== client) {
      return;
    }
    mark(req);
    if (data.op === 'cells') {
      const cells = cellsOf(panel);
      if (cells === null) {
        send({ reply: req, ok: false, error: 'the notebook is not loaded in this page yet' });
      } else {
        send({ reply: req, ok: true, path: panel.context.path, cells });
      }
      return;
    }
    send({ reply: req, ok: false, error: `unknown operation ${String(data.op).slice(0, 40)}` });
  };

  // The kernel's ping: open this panel's comm (or say hello again on the open one).
  const onPing = () => {
    if (kernel === null || kernel.isDisposed) {
      return;
    }
    if (comm !== null && !comm.isDisposed) {
      send(hello());
      return;
    }
    const opened = kernel.createComm(TARGET);
    comm = opened;
    opened.onMsg = msg => {
      operate((msg.content && msg.content.data) || {});
    }; // returns nothing: see the top of this file
    opened.onClose = () => {
      if (comm === opened) {
        comm = null;
      }
    };
    try {
      opened.open(hello()); // a future: never awaited here
    } catch (err) {
      comm = null;
      console.warn('escouade_nb: the channel to the kernel did not open', err);
    }
  };

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
  panel.sessionContext.kernelChanged.connect(register);
  panel.sessionContext.ready.then(register, () => undefined);
  register();
  panel.disposed.connect(() => {
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
