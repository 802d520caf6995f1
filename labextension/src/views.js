// The views' front-end, once per page: escouade_nb/widgets' escouade.js and escouade.css, imported here at
// build time (the same files anywidget sends in each view's model where this extension is absent). A view
// built by a kernel that knows this page (its hello) carries a light module instead, which takes the module
// from `globalThis[Symbol.for("escouade_nb.views")]` when `tag` is the one it expects (the kernel's
// front.front_end_tag(): the first 16 hex digits of the SHA-256 of escouade.js, a NUL byte and
// escouade.css), else asks its kernel for the whole module (an older or newer extension than the kernel's).
// The stylesheet is added to the page as this extension loads (its rules are scoped to the views' classes).

import views from '../../widgets/escouade.js';
import '../../widgets/escouade.css';

/* global ESCOUADE_VIEWS_TAG */
export function shareViews() {
  globalThis[Symbol.for('escouade_nb.views')] = Object.freeze({ module: views, tag: ESCOUADE_VIEWS_TAG });
}
