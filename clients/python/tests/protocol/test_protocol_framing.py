"""FrameDecoder and encode_frame: golden bytes, every way of splitting a stream, limits."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator_protocol.errors import ProtocolError
from coordinator_protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameDecoder,
    FrameError,
    FrameTooLargeError,
    encode_frame,
)


def test_default_max_frame_bytes_is_8_mib() -> None:
    assert DEFAULT_MAX_FRAME_BYTES == 8 * 1024 * 1024
    assert FrameDecoder().max_frame_bytes == DEFAULT_MAX_FRAME_BYTES


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"", b"\x00\x00\x00\x00"),  # length 0, no payload
        (b"abc", b"\x00\x00\x00\x03" + b"abc"),  # length 3 (big-endian), then the payload
        (b"x" * 300, b"\x00\x00\x01\x2c" + b"x" * 300),  # 300 = 0x012c
        (b"y" * 65536, b"\x00\x01\x00\x00" + b"y" * 65536),  # 65536 = 0x00010000
    ],
)
def test_encode_frame_golden(payload: bytes, expected: bytes) -> None:
    assert encode_frame(payload) == expected


def test_decode_golden_stream() -> None:
    stream = (
        b"\x00\x00\x00\x03abc"  # frame of 3
        b"\x00\x00\x00\x00"  # empty frame
        b"\x00\x00\x00\x01z"  # frame of 1
    )
    assert FrameDecoder().feed(stream) == [b"abc", b"", b"z"]


PAYLOADS = [b"first", b"", b"\x00\x01\x02", b"x" * 1000, b"last one"]
STREAM = b"".join(encode_frame(payload) for payload in PAYLOADS)


def test_whole_stream_at_once() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(STREAM) == PAYLOADS
    assert decoder.buffered_bytes == 0


def test_byte_by_byte() -> None:
    decoder = FrameDecoder()
    frames: list[bytes] = []
    frame_ends = set()
    position = 0
    for payload in PAYLOADS:
        position += 4 + len(payload)
        frame_ends.add(position)
    for index in range(len(STREAM)):
        got = decoder.feed(STREAM[index : index + 1])
        # A frame comes out on exactly the byte that completes it, never before.
        assert len(got) == (1 if index + 1 in frame_ends else 0)
        frames.extend(got)
    assert frames == PAYLOADS
    assert decoder.buffered_bytes == 0


def test_trailing_partial_frame_stays_buffered() -> None:
    decoder = FrameDecoder()
    partial = encode_frame(b"incomplete")[:-3]
    assert decoder.feed(STREAM + partial) == PAYLOADS
    assert decoder.buffered_bytes == len(partial)
    assert decoder.feed(b"ete") == [b"incomplete"]
    assert decoder.buffered_bytes == 0


def test_partial_length_prefix_stays_buffered() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"\x00\x00") == []
    assert decoder.buffered_bytes == 2
    assert decoder.feed(b"\x00\x02h") == []
    assert decoder.buffered_bytes == 5
    assert decoder.feed(b"i\x00") == [b"hi"]
    assert decoder.buffered_bytes == 1


def test_feed_empty_bytes() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"") == []
    assert decoder.buffered_bytes == 0


def test_feed_accepts_bytearray_and_memoryview() -> None:
    decoder = FrameDecoder()
    frame = encode_frame(b"payload")
    assert decoder.feed(bytearray(frame)) == [b"payload"]
    assert decoder.feed(memoryview(frame)) == [b"payload"]


def test_payloads_are_bytes_independent_of_the_buffer() -> None:
    decoder = FrameDecoder()
    (first,) = decoder.feed(encode_frame(b"one"))
    decoder.feed(encode_frame(b"two"))
    assert type(first) is bytes
    assert first == b"one"


@given(
    payloads=st.lists(st.binary(max_size=64), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=20),
)
def test_any_split_gives_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(payload) for payload in payloads)
    points = sorted({0, len(stream), *(cut for cut in cuts if cut < len(stream))})
    decoder = FrameDecoder(max_frame_bytes=64)
    frames: list[bytes] = []
    for start, stop in itertools.pairwise(points):
        frames.extend(decoder.feed(stream[start:stop]))
    assert frames == payloads
    assert decoder.buffered_bytes == 0


@given(payloads=st.lists(st.binary(max_size=32), min_size=1, max_size=8), data=st.data())
def test_any_truncation_buffers_the_rest(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(payload) for payload in payloads)
    cut = data.draw(st.integers(min_value=0, max_value=len(stream)))
    decoder = FrameDecoder()
    frames = decoder.feed(stream[:cut])
    # Every frame that fits in the prefix, and the prefix's leftover bytes buffered.
    complete, end = [], 0
    for payload in payloads:
        if end + 4 + len(payload) > cut:
            break
        complete.append(payload)
        end += 4 + len(payload)
    assert frames == complete
    assert decoder.buffered_bytes == cut - end
    assert frames + decoder.feed(stream[cut:]) == payloads


def test_frame_of_exactly_max_is_accepted() -> None:
    decoder = FrameDecoder(max_frame_bytes=10)
    assert decoder.feed(encode_frame(b"0123456789")) == [b"0123456789"]


def test_frame_one_byte_over_max_is_refused_on_its_length_bytes() -> None:
    decoder = FrameDecoder(max_frame_bytes=10)
    assert decoder.feed(b"\x00\x00\x00") == []
    with pytest.raises(FrameTooLargeError) as raised:
        decoder.feed(b"\x0b")  # the fourth length byte: 11 > 10, before any payload
    assert raised.value.length == 11
    assert raised.value.max_frame_bytes == 10
    assert "11" in str(raised.value)
    assert "10" in str(raised.value)


def test_oversized_frame_after_good_frames_is_refused() -> None:
    decoder = FrameDecoder(max_frame_bytes=4)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(encode_frame(b"ok") + b"\xff\xff\xff\xff")


def test_largest_declared_length_is_refused_by_default() -> None:
    with pytest.raises(FrameTooLargeError):
        FrameDecoder().feed(b"\xff\xff\xff\xff")


def test_default_limit_exact_and_over() -> None:
    limit = DEFAULT_MAX_FRAME_BYTES
    decoder = FrameDecoder()
    assert decoder.feed(encode_frame(bytes(limit))) == [bytes(limit)]
    with pytest.raises(FrameTooLargeError):
        decoder.feed((limit + 1).to_bytes(4, "big"))


def test_zero_limit_accepts_only_empty_frames() -> None:
    decoder = FrameDecoder(max_frame_bytes=0)
    assert decoder.feed(b"\x00\x00\x00\x00") == [b""]
    with pytest.raises(FrameTooLargeError):
        decoder.feed(b"\x00\x00\x00\x01")


def test_error_hierarchy() -> None:
    assert issubclass(FrameTooLargeError, FrameError)
    assert issubclass(FrameError, ProtocolError)


@pytest.mark.parametrize("max_frame_bytes", [-1, 2**32])
def test_invalid_limit(max_frame_bytes: int) -> None:
    with pytest.raises(ValueError, match="max_frame_bytes"):
        FrameDecoder(max_frame_bytes)


def test_many_small_frames_fed_one_at_a_time() -> None:
    decoder = FrameDecoder()
    frame = encode_frame(b"x" * 10)
    for _ in range(10_000):
        assert decoder.feed(frame) == [b"x" * 10]
    assert decoder.buffered_bytes == 0


def test_large_frame_fed_in_small_chunks() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    stream = encode_frame(payload)
    decoder = FrameDecoder()
    frames: list[bytes] = []
    for start in range(0, len(stream), 1000):
        frames.extend(decoder.feed(stream[start : start + 1000]))
    assert frames == [payload]
