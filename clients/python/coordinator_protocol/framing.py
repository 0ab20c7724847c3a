"""Length-prefixed frames: the outermost layer of the wire contract.

A connection is a stream of frames, each a 4-byte big-endian unsigned length N followed by
N bytes of payload (one msgpack value, decoded by `envelope`). `FrameDecoder` is
sans-I/O in the h11 sense: the connection hands it whatever bytes the socket produced and
gets back every frame those bytes completed; a partial frame stays buffered until the rest
arrives.

The decoder does O(n) work in the bytes fed, however the stream is split: bytes are
appended to one `bytearray`, frames are read at a moving offset, and the consumed prefix is
dropped only once it is at least half the buffer, so each byte is copied a bounded number
of times. A peer announcing a frame larger than `max_frame_bytes` is refused as soon as the
4 length bytes arrive, before any of the payload is buffered.
"""

from __future__ import annotations

import struct
from typing import Final

from coordinator_protocol.errors import ProtocolError

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "FRAME_HEADER_BYTES",
    "FrameDecoder",
    "FrameError",
    "FrameTooLargeError",
    "encode_frame",
]

DEFAULT_MAX_FRAME_BYTES: Final = 8 * 1024 * 1024
"""The server's default largest accepted payload (8 MiB), as PROTOCOL.md states."""

FRAME_HEADER_BYTES: Final = 4
_MAX_LENGTH: Final = 0xFFFF_FFFF
_LENGTH = struct.Struct(">I")


class FrameError(ProtocolError):
    """The byte stream breaks the framing rules; the connection cannot continue."""


class FrameTooLargeError(FrameError):
    """A frame declared a payload longer than the decoder's `max_frame_bytes`."""

    def __init__(self, length: int, max_frame_bytes: int) -> None:
        super().__init__(f"frame of {length} bytes exceeds the maximum of {max_frame_bytes}")
        self.length = length
        self.max_frame_bytes = max_frame_bytes


def encode_frame(payload: bytes) -> bytes:
    """Prefix `payload` with its 4-byte big-endian length.

    Raises:
        ValueError: the payload cannot be described by a 32-bit length.
    """
    length = len(payload)
    if length > _MAX_LENGTH:
        raise ValueError(f"payload of {length} bytes does not fit a frame")
    return _LENGTH.pack(length) + payload


class FrameDecoder:
    """Splits a byte stream into frame payloads.

    Args:
        max_frame_bytes: the largest payload accepted; a frame of exactly this size is
            fine, one byte more raises `FrameTooLargeError`.

    After a `FrameError` the stream is unusable (there is no way to find the next frame
    boundary); the caller closes the connection.
    """

    __slots__ = ("_buffer", "_offset", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if not 0 <= max_frame_bytes <= _MAX_LENGTH:
            raise ValueError(f"max_frame_bytes must be within 0..{_MAX_LENGTH}")
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        # Start of the first byte not yet consumed; bytes before it are dead and are
        # dropped lazily so a burst of small frames costs one compaction, not one each.
        self._offset = 0

    @property
    def buffered_bytes(self) -> int:
        """Bytes received that do not yet form a complete frame."""
        return len(self._buffer) - self._offset

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add `data` to the stream and return the payload of every frame it completed.

        Returns:
            The payloads in stream order (without their length prefix); an empty list when
            no frame is complete yet.

        Raises:
            FrameTooLargeError: a frame's length prefix exceeds `max_frame_bytes`.
        """
        buffer = self._buffer
        buffer += data
        offset = self._offset
        end = len(buffer)
        frames: list[bytes] = []
        # A view copies each payload once (slicing the bytearray would copy it twice);
        # it is released before the buffer is resized below.
        with memoryview(buffer) as view:
            while end - offset >= FRAME_HEADER_BYTES:
                (length,) = _LENGTH.unpack_from(view, offset)
                if length > self.max_frame_bytes:
                    self._offset = offset
                    raise FrameTooLargeError(length, self.max_frame_bytes)
                start = offset + FRAME_HEADER_BYTES
                stop = start + length
                if stop > end:
                    break
                frames.append(view[start:stop].tobytes())
                offset = stop
        if offset == end:
            buffer.clear()
            offset = 0
        elif offset * 2 >= end:
            del buffer[:offset]
            offset = 0
        self._offset = offset
        return frames
