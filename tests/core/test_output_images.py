"""escouade_nb.core.output_images: the kernel's own check of the images a page sends — exactly
:data:`MAX_IMAGE_BYTES` decoded is attached, one byte more is named only; Jupyter's line-broken
base64 (a string or a list of lines) is taken whole; nothing sent is no image."""

from __future__ import annotations

import base64

from png_files import png

from escouade_nb.core.output_images import MAX_IMAGE_BYTES, Images


def sized(n: int) -> str:
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * (n - 8)).decode()


def test_the_size_cap_is_checked_on_the_decoded_bytes():
    images = Images()
    assert "image 1 of this answer" in images.take("image/png", sized(MAX_IMAGE_BYTES), "c", 1)
    assert images.take("image/png", sized(MAX_IMAGE_BYTES + 1), "c", 1).endswith(
        "over the 1.0 MB of one image, not attached]")
    assert [i["bytes"] for i in images.items] == [MAX_IMAGE_BYTES]


def test_line_broken_base64_is_taken_whole_and_no_data_is_no_image():
    data = base64.b64encode(png(40, 40)).decode()
    lines = [data[i:i + 76] + "\n" for i in range(0, len(data), 76)]
    images = Images()
    assert "image 1" in images.take("image/png", "".join(lines))
    assert "image 2" in images.take("image/png", lines)
    assert [base64.b64decode(i["data"]) for i in images.items] == [png(40, 40)] * 2
    assert images.take("image/png", "") == "" and images.take("image/png", None) == ""
    assert len(images.items) == 2
