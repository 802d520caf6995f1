"""The line framing buffer (``escouade_nb.wire.framing.LineBuffer``), pure: bytes in, whole
lines out, whatever the chunking. No process, no loop."""

from __future__ import annotations

import itertools

import pytest

from escouade_nb.wire.framing import LineBuffer, Skipped


def feed_all(buf: LineBuffer, chunks) -> list[bytes | Skipped]:
    out: list[bytes | Skipped] = []
    for chunk in chunks:
        out.extend(buf.feed(chunk))
    return out


def split_at(data: bytes, cuts) -> list[bytes]:
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


STREAM = '{"a":1}\n{"b":"é€😀"}\n\n{"c":[1,2]}\r\nlast'.encode()
LINES = [b'{"a":1}', '{"b":"é€😀"}'.encode(), b"", b'{"c":[1,2]}\r']


def test_one_chunk():
    buf = LineBuffer(max_line=1024)
    assert buf.feed(STREAM) == LINES
    assert buf.pending == len(b"last")
    assert buf.close() == [b"last"]
    assert buf.pending == 0


@pytest.mark.parametrize("cut", range(len(STREAM) + 1))
def test_lines_split_at_every_byte_position(cut):
    buf = LineBuffer(max_line=1024)
    assert feed_all(buf, split_at(STREAM, [cut])) == LINES
    assert buf.close() == [b"last"]


def test_every_pair_of_cuts():
    for a in range(len(STREAM) + 1):
        for b in range(a, len(STREAM) + 1):
            buf = LineBuffer(max_line=1024)
            assert feed_all(buf, split_at(STREAM, [a, b])) + buf.close() == [*LINES, b"last"], (a, b)


def test_one_byte_at_a_time():
    buf = LineBuffer(max_line=1024)
    out = feed_all(buf, (STREAM[i:i + 1] for i in range(len(STREAM))))
    assert out == LINES and buf.close() == [b"last"]


@pytest.mark.parametrize("char", ["é", "€", "😀"])
def test_a_multibyte_character_split_across_feeds_is_whole_again(char):
    line = f"x{char}y".encode()
    encoded = char.encode()
    assert len(encoded) > 1
    for cut in range(1, len(encoded)):  # inside the character
        buf = LineBuffer(max_line=64)
        first = buf.feed(line[:1 + cut])
        assert first == []
        rest = buf.feed(line[1 + cut:] + b"\n")
        assert rest == [line]
        assert rest[0].decode() == f"x{char}y"


def test_crlf_is_kept_as_bytes():
    buf = LineBuffer(max_line=64)
    assert buf.feed(b"a\r\nb\r") == [b"a\r"]
    assert buf.feed(b"\n\r\n") == [b"b\r", b"\r"]
    assert buf.close() == []


def test_empty_lines_are_lines():
    buf = LineBuffer(max_line=64)
    assert buf.feed(b"\n\n") == [b"", b""]
    assert buf.feed(b"x\n\n") == [b"x", b""]
    assert buf.feed(b"") == []
    assert buf.close() == []


@pytest.mark.parametrize("chunk", [1, 3, 7, 10, 11, 64, 1000])
def test_a_too_long_line_is_reported_once_however_many_chunks(chunk):
    long = b"L" * 100
    data = b"ok\n" + long + b"\nafter\n" + b"tail"
    buf = LineBuffer(max_line=10)
    out = feed_all(buf, (data[i:i + chunk] for i in range(0, len(data), chunk)))
    skipped = [x for x in out if isinstance(x, Skipped)]
    assert len(skipped) == 1
    assert skipped[0].why == "line longer than 10 bytes"
    assert 10 < skipped[0].size <= 100
    assert [x for x in out if not isinstance(x, Skipped)] == [b"ok", b"after"]  # lines after a long one
    assert out.index(skipped[0]) == 1  # in order
    assert buf.close() == [b"tail"]


def test_a_long_line_in_one_chunk_is_reported_with_its_size():
    buf = LineBuffer(max_line=10)
    assert buf.feed(b"x" * 11 + b"\nshort\n") == [Skipped("line longer than 10 bytes", 11), b"short"]
    assert buf.feed(b"y" * 10 + b"\n") == [b"y" * 10]  # exactly max_line passes


def test_two_long_lines_in_a_row_are_two_skips():
    buf = LineBuffer(max_line=4)
    out = feed_all(buf, [b"aaaaaa", b"aa\nbbbbbbb", b"\nc\n"])
    assert [type(x) for x in out] == [Skipped, Skipped, bytes]
    assert out[2] == b"c"


def test_memory_is_bounded_inside_a_long_line():
    buf = LineBuffer(max_line=16)
    for _ in range(1000):
        buf.feed(b"z" * 100)
        assert buf.pending <= 16
    assert buf.feed(b"\nnext\n") == [b"next"]


def test_close_without_a_trailing_line():
    buf = LineBuffer(max_line=64)
    assert buf.feed(b"a\n") == [b"a"]
    assert buf.close() == []


def test_close_with_a_trailing_line_and_again():
    buf = LineBuffer(max_line=64)
    assert buf.feed(b"a\npartial") == [b"a"]
    assert buf.close() == [b"partial"]
    assert buf.close() == []  # nothing twice


def test_close_inside_a_long_line_reports_nothing_more():
    buf = LineBuffer(max_line=4)
    assert buf.feed(b"123456") == [Skipped("line longer than 4 bytes", 6)]
    assert buf.close() == []


def test_close_with_an_unterminated_line_at_the_limit():
    buf = LineBuffer(max_line=4)
    assert buf.feed(b"1234") == []
    assert buf.close() == [b"1234"]


def test_the_buffer_is_reusable_after_close():
    buf = LineBuffer(max_line=4)
    buf.feed(b"123456")
    buf.close()
    assert buf.feed(b"ab\n") == [b"ab"]
