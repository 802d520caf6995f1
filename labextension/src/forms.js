// The views' saved forms, written into the notebook's document by this page (issue 34).
//
// Each view of escouade_nb is two outputs: its companion (static HTML and text, the view's saved form) and
// the widget. The kernel displays the companion with metadata of its own, {escouade_nb: {view, v}}: the
// view's id and the version of the form the output holds. That metadata is saved with the notebook (a
// display_id is not: JupyterLab routes a display update only to the outputs its current page displayed, so
// a tab closed and reopened, or reloaded, would keep the form of the moment it closed). Where this page is
// known to the kernel (its hello), the kernel does not send the whole form as a display update at each
// redraw: it sends on this panel's comm only what changed, {form: {view, from, to, data: {mime: [start,
// end, insert]}}} (the text of version `from` with its UTF-16 units start .. length - end replaced by
// insert), and this page writes it into the output whose metadata names that view — when that output holds
// version `from`; otherwise it tells the kernel the versions it holds ({forms: {view: v}}) and gets the
// whole form, {form: {view, to, whole: {mime: text}}}. Its hello carries the same list, so a document
// reopened or reloaded gets the forms as they are now; a save then writes them.
// The form's text is the kernel's (escaped HTML made by escouade_nb's renderers, as a display update
// carries): nothing here makes HTML; the output is set through the output area's model, as JupyterLab
// applies a display update (so the notebook's trust decides how it renders, as for any output).

export const FORM_KEY = 'escouade_nb';

function markOf(output) {
  const meta = output && output.metadata;
  const mark = meta && meta[FORM_KEY];
  return mark && typeof mark === 'object' && typeof mark.view === 'string' ? mark : null;
}

function text(value) {
  if (typeof value === 'string') {
    return value;
  }
  return Array.isArray(value) ? value.join('') : '';
}

// Every companion output of ours in the panel's document: [outputs, index, output, mark].
function* companions(panel) {
  const model = panel.content.model;
  if (!model) {
    return;
  }
  const cells = model.cells;
  for (let c = 0; c < cells.length; c++) {
    const outputs = cells.get(c).outputs;
    if (!outputs) {
      continue;
    }
    for (let i = 0; i < outputs.length; i++) {
      const output = outputs.get(i);
      const mark = markOf(output);
      if (mark !== null) {
        yield [outputs, i, output, mark];
      }
    }
  }
}

// {view id: version} of the saved forms this panel's document holds, or null while it is not loaded.
export function formsHeld(panel) {
  if (!panel.content.model || !panel.context.isReady) {
    return null;
  }
  const held = {};
  for (const [, , , mark] of companions(panel)) {
    held[mark.view] = mark.v;
  }
  return held;
}

// The data of version `form.to` from the output's data (of version `form.from`), or null when a change
// does not fit what the output holds.
function patched(data, changes) {
  const out = { ...data };
  for (const [mime, change] of Object.entries(changes)) {
    if (!Array.isArray(change) || change.length !== 3) {
      return null;
    }
    const [start, end, insert] = change;
    const old = text(data[mime]);
    if (!Number.isInteger(start) || !Number.isInteger(end) || typeof insert !== 'string' || start < 0 || end < 0
      || start + end > old.length) {
      return null;
    }
    out[mime] = old.slice(0, start) + insert + old.slice(old.length - end);
  }
  return out;
}

// A form from the kernel: written into every companion output of that view in this panel's document.
// `ask(held)` tells the kernel the versions held where a change did not fit (it then sends the whole form).
export function applyForm(panel, form, ask) {
  if (!form || typeof form !== 'object' || typeof form.view !== 'string' || !Number.isInteger(form.to)) {
    return;
  }
  const wrong = {};
  const writes = [];
  for (const [outputs, index, output, mark] of companions(panel)) {
    if (mark.view !== form.view || mark.v === form.to) {
      continue;
    }
    let data = null;
    if (form.whole && typeof form.whole === 'object') {
      data = {};
      for (const [mime, value] of Object.entries(form.whole)) {
        if (typeof value === 'string') {
          data[mime] = value;
        }
      }
    } else if (form.data && typeof form.data === 'object' && mark.v === form.from) {
      data = patched(output.data || {}, form.data);
    }
    if (data === null) {
      wrong[form.view] = mark.v;
      continue;
    }
    writes.push([outputs, index, {
      output_type: 'display_data', data, metadata: { ...output.metadata, [FORM_KEY]: { view: form.view, v: form.to } }
    }]);
  }
  for (const [outputs, index, value] of writes) {
    outputs.set(index, value); // as JupyterLab applies a display update
  }
  if (Object.keys(wrong).length > 0) {
    ask(wrong);
  }
}
