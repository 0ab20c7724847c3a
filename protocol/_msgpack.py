"""The msgpack settings every part of the contract shares.

Decoding is strict so that a hostile payload cannot make us allocate more than it sent or
build objects the contract does not have: every declared length is bounded by the data's
own size, ext types (msgpack's timestamp included) are refused, strings must be valid
UTF-8 and map keys must be str or bytes. Encoding goes through one module-level `Packer`
(bytes as bin, str as str) so the hot path builds no option objects; a Packer is not
thread-safe, which is fine for the event loop's thread.
"""

from __future__ import annotations

from typing import NoReturn

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
