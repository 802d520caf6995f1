// The look of the review (imported by index.js): the classes of the bar inside a pending cell and of its
// buttons (styled by ./review.css from the theme's variables), and the notebook toolbar's item "N changes
// pending review · Keep all · Reject all" — a toolbar widget, so the toolbar lays it out with its other items
// and moves it into its "more" menu when the window is narrow (it never covers the cells).

import { Widget } from '@lumino/widgets';
import './review.css';

// the toolbar item's name (one per notebook toolbar)
const ITEM = 'escouade-review-all';

// A button of the review: `label` is its accessible name; `accept` marks the accept action (Keep).
export function reviewButton(label, onClick, disabled, accept = false) {
  const node = document.createElement('button');
  node.type = 'button';
  node.textContent = label;
  node.className = accept ? 'escouade-review-button escouade-review-keep' : 'escouade-review-button';
  node.disabled = disabled;
  node.addEventListener('click', event => {
    event.stopPropagation();
    onClick();
  });
  return node;
}

// A toolbar item of `panel` named `name` (a lumino Widget `item`): {place(on)} puts it in the toolbar (after the
// cell type, else before the spacer, else at the end) or takes it out; inserted, not shown in place, because
// the toolbar measures its items again on an insert (when narrow, its last items go to its menu first).
export function toolbarSlot(panel, name, item) {
  const place = on => {
    const toolbar = panel.toolbar;
    if (!toolbar || item.isDisposed) {
      return;
    }
    const placed = item.parent !== null;
    if (on && !placed) {
      if (!toolbar.insertAfter('cellType', name, item) && !toolbar.insertBefore('spacer', name, item)) {
        toolbar.addItem(name, item);
      }
    } else if (!on && placed) {
      item.parent = null;
    }
  };
  panel.disposed.connect(() => item.dispose());
  return { place };
}

// The review's toolbar item of `panel`: {show(count)} puts it in the toolbar while `count` > 0, with
// "N change(s) pending review" and Keep all / Reject all, and takes it out at 0.
export function reviewToolbarItem(panel, keepAll, rejectAll) {
  const item = new Widget();
  item.addClass(ITEM);
  const text = document.createElement('span');
  text.className = 'escouade-review-count';
  item.node.append(text, reviewButton('Keep all', keepAll, false, true), reviewButton('Reject all', rejectAll, false));
  const slot = toolbarSlot(panel, ITEM, item);
  let shown = -1;
  const show = count => {
    if (count === shown) {
      return;
    }
    shown = count;
    text.textContent = count === 1 ? '1 change pending review' : `${count} changes pending review`;
    slot.place(count > 0);
  };
  return { show, node: item.node };
}
