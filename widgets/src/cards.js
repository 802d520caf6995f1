import { h } from "./dom.js";

// -- a card's buttons --------------------------------------------------------------------------------
// The act a card's button sends (its key, value and the card's fields), or null when the
// form still misses a required field (said under it). Its buttons are then off: the answer
// redraws the card. One copy for the agent, turn and squad views.
export function cardAct(btn, scope) {
  const act = btn.dataset.act;
  const content = { act, key: btn.dataset.key || null, value: btn.dataset.value || null };
  if (scope.querySelector("[data-field]")) {
    const { fields, missing } = collectFields(scope);
    if (act === "answer" && missing.length) {
      let note = scope.querySelector(".esc-missing");
      if (!note) { note = h("div", { class: "esc-missing esc-error" }); scope.append(note); }
      note.textContent = "To fill in: " + missing.join(", ");
      return null;
    }
    content.fields = fields;
  }
  for (const b of scope.querySelectorAll("button[data-act]")) b.disabled = true;
  return content;
}

// -- fields of a card ------------------------------------------------------------------------------
export function fieldsOf(root) {
  const out = new Map();
  for (const f of root.querySelectorAll("[data-field]")) {
    if (f.dataset.touched !== "1" && f.tagName !== "TEXTAREA") continue;
    out.set(f.dataset.field, f.multiple ? [...f.selectedOptions].map((o) => o.value) : f.value);
  }
  return out;
}

export function restoreFields(root, typed) {
  if (!typed || !typed.size) return;
  for (const f of root.querySelectorAll("[data-field]")) {
    if (!typed.has(f.dataset.field)) continue;
    const v = typed.get(f.dataset.field);
    if (f.multiple) for (const o of f.options) o.selected = v.includes(o.value);
    else f.value = v;
    if (f.tagName !== "TEXTAREA" || v) f.dataset.touched = "1";
  }
}

function collectFields(scope) {
  const out = {};
  const missing = [];
  for (const f of scope.querySelectorAll("[data-field]")) {
    const name = f.dataset.field;
    const given = f.dataset.touched === "1" || f.dataset.default === "1" || f.tagName === "TEXTAREA";
    let value;
    if (f.tagName === "SELECT" && f.multiple) value = [...f.selectedOptions].map((o) => o.value);
    else value = f.value;
    const empty = value === "" || (Array.isArray(value) && value.length === 0);
    if (f.dataset.required === "1" && (empty || !given)) {
      const label = f.closest("label");
      missing.push(label ? label.firstElementChild.textContent.replace(/ \*$/, "") : name);
    }
    if (given && !empty) out[name] = value;
  }
  return { fields: out, missing };
}
