"""Strict msgpack for plain values: the "consumer" embedded protocol and the bodies that
`envelope.decode_request`/`decode_response` hand to tools and tests.

(Envelopes and messages go through msgspec instead, see `envelope`: it decodes a
body straight into its message type, which these plain values would only slow down.)

Decoding is strict so that a hostile payload cannot make us allocate more than it sent or
build objects the contract does not have: every declared length is bounded by the data's
own size, ext types (msgpack's timestamp included) are refused, strings must be valid
UTF-8 and map keys must be str or bytes. Encoding goes through one module-level `Packer`
(bytes as bin, str as str) so a call builds no option objects; a Packer is not
thread-safe, which is fine for the event loop's thread.
"""

from __future__ import annotations

from typing import Final, NoReturn

import msgpack

packer = msgpack.Packer(use_bin_type=True)


def pack(value: object) -> bytes:
    """`value` as msgpack; raises TypeError for a type msgpack cannot encode."""
    data: bytes = packer.pack(value)
    return data


def _refuse_ext(code: int, data: bytes) -> NoReturn:
    raise ValueError(f"msgpack ext type {code} is not part of the contract")


def unpack(data: bytes) -> object:
    """The single msgpack value `data` holds.

    Raises:
        ValueError: invalid msgpack, a truncated value, bytes after the value, an ext type,
            invalid UTF-8 or a map key that is not str/bytes.
    """
    size = len(data)
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            strict_map_key=True,
            ext_hook=_refuse_ext,
            max_str_len=size,
            max_bin_len=size,
            max_array_len=size,
            max_map_len=size,
            # Any ext longer than 0 bytes fails here; the hook refuses the rest. Both are
            # needed because msgpack decodes its timestamp ext (-1) without the hook.
            max_ext_len=0,
        )
    except ValueError:
        raise
    except msgpack.UnpackException as e:
        # Some of msgpack's errors (OutOfData) are not ValueErrors.
        raise ValueError(str(e) or type(e).__name__) from e


def _kinds() -> tuple[str, ...]:
    kinds = ["int"] * 0x80 + ["dict"] * 0x10 + ["list"] * 0x10 + ["str"] * 0x20
    kinds += ["nil", "invalid", "bool", "bool", "bytes", "bytes", "bytes"]  # 0xc0 to 0xc6
    kinds += ["ext"] * 3 + ["float"] * 2 + ["int"] * 8 + ["ext"] * 5  # 0xc7 to 0xd8
    kinds += ["str"] * 3 + ["list"] * 2 + ["dict"] * 2 + ["int"] * 0x20  # 0xd9 to 0xff
    assert len(kinds) == 0x100
    return tuple(kinds)


# The kind of msgpack value each first byte starts, by the names of the Python types
# msgpack decodes them to ("nil" for None; "ext" for the ext types the contract refuses).
_KIND_BY_FIRST_BYTE: Final = _kinds()


def kind_of(encoded: bytes) -> str:
    """The kind of the msgpack value `encoded` starts with, read from its first byte
    alone: "dict", "list", "str", "bytes", "int", "float", "bool", "nil", "ext", or
    "invalid" (0xc1, a byte msgpack never uses) and "empty" for no bytes at all."""
    view = memoryview(encoded)
    return _KIND_BY_FIRST_BYTE[view[0]] if len(view) else "empty"
