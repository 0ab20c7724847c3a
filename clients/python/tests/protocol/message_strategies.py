"""Hypothesis strategies for message Structs: values drawn from each field's own type and
range, so a round trip covers what the schema admits."""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

import msgspec
from hypothesis import strategies as st

from coordinator_protocol.message_base import Message


def _int_bounds(metadata: list[Any]) -> tuple[int, int]:
    low, high = -(2**63), 2**63 - 1
    for constraint in metadata:
        if isinstance(constraint, msgspec.Meta):
            low = low if constraint.ge is None else int(constraint.ge)
            high = high if constraint.le is None else int(constraint.le)
    return low, high


def _length_bounds(metadata: list[Any], default_max: int) -> tuple[int, int]:
    low, high = 0, default_max
    for constraint in metadata:
        if isinstance(constraint, msgspec.Meta):
            low = low if constraint.min_length is None else constraint.min_length
            high = high if constraint.max_length is None else constraint.max_length
    return low, max(low, high)


def field_strategy(annotation: Any, metadata: list[Any]) -> st.SearchStrategy[Any]:
    origin = get_origin(annotation)
    if origin is Annotated:
        base, *extra = get_args(annotation)
        return field_strategy(base, [*metadata, *extra])
    if origin in (Union, types.UnionType):
        return st.one_of([field_strategy(arg, metadata) for arg in get_args(annotation)])
    if origin is list:
        (item,) = get_args(annotation)
        return st.lists(field_strategy(item, []), max_size=3)
    if annotation is type(None):
        return st.none()
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        low, high = _int_bounds(metadata)
        return st.integers(min_value=low, max_value=high)
    if annotation is str:
        return st.text(max_size=12)
    if annotation is bytes:
        # A uuid is bytes of exactly 16.
        low, high = _length_bounds(metadata, 12)
        return st.binary(min_size=low, max_size=high)
    if isinstance(annotation, type) and issubclass(annotation, Message):
        return message_strategy(annotation)
    raise AssertionError(f"no strategy for {annotation!r}")


def message_strategy(cls: type[Message]) -> st.SearchStrategy[Message]:
    fields = {info.name: field_strategy(info.type, []) for info in msgspec.structs.fields(cls)}
    return st.builds(cls, **fields)
