import { h } from "./dom.js";

// A child view (an agent view opened from a list) mounted in `into`; `ref` is the synced
// "IPY_MODEL_…" reference. Returns the view (to remove later), or null.
export async function mountChild(model, ref, into) {
  const id = typeof ref === "string" && ref.startsWith("IPY_MODEL_") ? ref.slice(10) : null;
  into.replaceChildren();
  if (!id) return null;
  try {
    const manager = model.widget_manager;
    const view = await manager.create_view(await manager.get_model(id));
    into.append(view.el);
    return view;
  } catch (err) {
    into.append(h("div", { class: "esc-dim", text: `This view could not be shown here: ${err}` }));
    return null;
  }
}
