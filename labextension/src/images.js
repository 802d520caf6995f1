// escouade_nb's page side of images in the kernel's reads (notebook_cells(source="live"), execute_cell):
// a PNG or JPEG output's data goes to the kernel as Jupyter holds it (base64), at most MAX_IMAGES per
// answer and MAX_IMAGE_BYTES each; one not sent goes as {not_sent: 'too large' | 'too many', bytes} so
// the kernel can name it with its size. The kernel checks all of it again (escouade_nb/core/output_images.py).

export const IMAGE_MIMES = ['image/png', 'image/jpeg'];
const MAX_IMAGES = 4;
const MAX_IMAGE_BYTES = 1000000;

// One answer's count of images sent so far.
export function imageBudget() {
  return { left: MAX_IMAGES };
}

// One image of an output, as sent to the kernel: its base64 text, {not_sent, bytes}, or '' (not an image
// the kernel can read: anything but text).
export function imageForKernel(value, budget) {
  const text = Array.isArray(value) ? value.join('') : typeof value === 'string' ? value : '';
  const compact = text.replace(/\s/g, '');
  if (!compact) {
    return '';
  }
  const bytes = Math.floor((compact.length * 3) / 4) - (compact.endsWith('==') ? 2 : compact.endsWith('=') ? 1 : 0);
  if (bytes > MAX_IMAGE_BYTES) {
    return { not_sent: 'too large', bytes };
  }
  if (budget.left <= 0) {
    return { not_sent: 'too many', bytes };
  }
  budget.left -= 1;
  return compact;
}
