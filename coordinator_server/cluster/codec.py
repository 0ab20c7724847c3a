"""The bytes the cluster's members exchange through the consumer group protocol: the user
data of a member's JoinGroup metadata (its claim) and of the assignment the leader gives
each member (the whole view). The format is docs/CLUSTER.md's; in short:

- Both are msgpack arrays whose first element is the format's version (0 here).
- A later version only appends fields: a reader takes the fields it knows and ignores the
  rest, so nodes of two versions can share a cluster during a rolling upgrade. A change that
  an older reader could not ignore takes a new assignor name (the group protocol's name)
  instead.
- Claim, version 0: `[0, node_id, host, port, owned, standby, generation]`, `owned` and
  `standby` arrays of partition numbers, `generation` the generation they come from (-1:
  none).
- Assignment, version 0: `[0, owners, standbys, nodes, error]`, `owners` and `standbys`
  maps of partition -> node id, `nodes` a map of node id -> `[host, port]`, `error` nil or
  why this member was given nothing.

Pure: nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgpack

from coordinator_server.cluster.assignor import ClusterView, NodeClaim

__all__ = [
    "FORMAT_VERSION",
    "ClusterFormatError",
    "decode_assignment",
    "decode_claim",
    "encode_assignment",
    "encode_claim",
]

FORMAT_VERSION: Final = 0

# The largest user data a member reads: a view holds a few fields per partition and node.
_MAX_BYTES: Final = 16 * 1024 * 1024


class ClusterFormatError(ValueError):
    """User data that is not a claim or an assignment of a version this code reads."""


def encode_claim(claim: NodeClaim) -> bytes:
    return _pack(
        [
            FORMAT_VERSION,
            claim.node_id,
            claim.host,
            claim.port,
            sorted(claim.owned),
            sorted(claim.standby),
            claim.generation,
        ]
    )


def decode_claim(data: bytes) -> NodeClaim:
    fields = _fields(data, 7, "claim")
    node_id, host, port, owned, standby, generation = fields[1:7]
    return NodeClaim(
        node_id=_int(node_id, "node id"),
        host=_str(host, "host"),
        port=_int(port, "port"),
        owned=_partitions(owned, "owned"),
        standby=_partitions(standby, "standby"),
        generation=_int(generation, "generation"),
    )


def encode_assignment(view: ClusterView, error: str | None = None) -> bytes:
    return _pack(
        [
            FORMAT_VERSION,
            dict(view.owners),
            dict(view.standbys),
            {node: [host, port] for node, (host, port) in view.nodes.items()},
            error,
        ]
    )


def decode_assignment(data: bytes) -> tuple[ClusterView, str | None]:
    """The view and this member's error (None: it has its part of the view)."""
    fields = _fields(data, 5, "assignment")
    owners, standbys, nodes, error = fields[1:5]
    view = ClusterView(
        owners=_partition_map(owners, "owners"),
        standbys=_partition_map(standbys, "standbys"),
        nodes=_nodes(nodes),
    )
    if error is not None and not isinstance(error, str):
        raise ClusterFormatError("the assignment's error is not a string")
    return view, error


def _pack(value: object) -> bytes:
    packed = msgpack.packb(value, use_bin_type=True)
    assert isinstance(packed, bytes)
    return packed


def _fields(data: bytes, count: int, what: str) -> list[Any]:
    if len(data) > _MAX_BYTES:
        raise ClusterFormatError(f"the {what} is {len(data)} bytes, more than {_MAX_BYTES}")
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as error:
        raise ClusterFormatError(f"the {what} is not msgpack: {error}") from None
    if not isinstance(value, list) or not value:
        raise ClusterFormatError(f"the {what} is not a versioned array")
    version = value[0]
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ClusterFormatError(f"the {what}'s version {version!r} is not a version")
    if len(value) < count:
        raise ClusterFormatError(
            f"the {what} (version {version}) has {len(value)} fields, fewer than {count}"
        )
    return value


def _int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ClusterFormatError(f"{what} {value!r} is not an integer")
    return value


def _str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ClusterFormatError(f"{what} {value!r} is not a string")
    return value


def _partitions(value: object, what: str) -> frozenset[int]:
    if not isinstance(value, list):
        raise ClusterFormatError(f"{what} is not an array of partitions")
    return frozenset(_int(item, f"{what} partition") for item in value)


def _partition_map(value: object, what: str) -> dict[int, int]:
    if not isinstance(value, Mapping):
        raise ClusterFormatError(f"{what} is not a map of partition to node id")
    checked = {
        _int(partition, f"{what} partition"): _int(node, f"{what} node id")
        for partition, node in value.items()
    }
    return dict(sorted(checked.items()))


def _nodes(value: object) -> dict[int, tuple[str, int]]:
    if not isinstance(value, Mapping):
        raise ClusterFormatError("nodes is not a map of node id to address")
    nodes: dict[int, tuple[str, int]] = {}
    for node, address in value.items():
        if not isinstance(address, list) or len(address) < 2:
            raise ClusterFormatError(f"node {node!r}'s address is not [host, port]")
        nodes[_int(node, "node id")] = (_str(address[0], "host"), _int(address[1], "port"))
    return dict(sorted(nodes.items()))
