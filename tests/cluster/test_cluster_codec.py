"""The cluster's user data: what a member claims and what the leader hands out, as bytes."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator_server.cluster.assignor import ClusterView, NodeClaim
from coordinator_server.cluster.codec import (
    ClusterFormatError,
    decode_assignment,
    decode_claim,
    encode_assignment,
    encode_claim,
)

partitions = st.frozensets(st.integers(0, 2**31 - 1), max_size=20)
claims = st.builds(
    NodeClaim,
    node_id=st.integers(0, 2**31 - 1),
    host=st.text(max_size=30),
    port=st.integers(1, 65535),
    owned=partitions,
    standby=partitions,
    generation=st.integers(-1, 2**31 - 1),
)
views = st.builds(
    ClusterView,
    owners=st.dictionaries(st.integers(0, 1000), st.integers(0, 100), max_size=30),
    standbys=st.dictionaries(st.integers(0, 1000), st.integers(0, 100), max_size=30),
    nodes=st.dictionaries(
        st.integers(0, 100), st.tuples(st.text(max_size=20), st.integers(1, 65535)), max_size=5
    ),
)


@given(claims)
def test_a_claim_survives_the_round_trip(claim: NodeClaim) -> None:
    assert decode_claim(encode_claim(claim)) == claim


@given(views, st.none() | st.text(max_size=50))
def test_an_assignment_survives_the_round_trip(view: ClusterView, error: str | None) -> None:
    decoded, decoded_error = decode_assignment(encode_assignment(view, error))
    assert decoded == ClusterView(
        owners=dict(sorted(view.owners.items())),
        standbys=dict(sorted(view.standbys.items())),
        nodes=dict(sorted(view.nodes.items())),
    )
    assert decoded_error == error


def test_the_format_is_the_documented_one() -> None:
    claim = NodeClaim(node_id=3, host="h", port=9, owned=frozenset({2, 1}), generation=7)
    assert msgpack.unpackb(encode_claim(claim)) == [0, 3, "h", 9, [1, 2], [], 7]
    view = ClusterView(owners={0: 3}, standbys={0: 4}, nodes={3: ("h", 9), 4: ("i", 10)})
    assert msgpack.unpackb(encode_assignment(view, None), strict_map_key=False) == [
        0,
        {0: 3},
        {0: 4},
        {3: ["h", 9], 4: ["i", 10]},
        None,
    ]


def test_a_later_version_with_more_fields_is_read() -> None:
    data = msgpack.packb([1, 3, "h", 9, [1], [2], 7, "a field of version 1"])
    assert decode_claim(data) == NodeClaim(
        node_id=3, host="h", port=9, owned=frozenset({1}), standby=frozenset({2}), generation=7
    )
    data = msgpack.packb([2, {1: 3}, {}, {3: ["h", 9, "rack"]}, None, {"more": 1}])
    view, error = decode_assignment(data)
    assert view == ClusterView(owners={1: 3}, standbys={}, nodes={3: ("h", 9)})
    assert error is None


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        msgpack.packb({"node_id": 1}),
        msgpack.packb([]),
        msgpack.packb([-1, 3, "h", 9, [], [], 7]),
        msgpack.packb(["0", 3, "h", 9, [], [], 7]),
        msgpack.packb([0, 3, "h", 9, [], []]),
        msgpack.packb([0, "3", "h", 9, [], [], 7]),
        msgpack.packb([0, 3, b"h", 9, [], [], 7]),
        msgpack.packb([0, 3, "h", 9, [True], [], 7]),
        msgpack.packb([0, 3, "h", 9, {}, [], 7]),
    ],
)
def test_a_claim_that_is_not_one_is_refused(data: bytes) -> None:
    with pytest.raises(ClusterFormatError):
        decode_claim(data)


@pytest.mark.parametrize(
    "data",
    [
        b"\x92",
        msgpack.packb([0, {}, {}, {}]),
        msgpack.packb([0, [], {}, {}, None]),
        msgpack.packb([0, {"1": 2}, {}, {}, None]),
        msgpack.packb([0, {}, {}, {1: ["h"]}, None]),
        msgpack.packb([0, {}, {}, {1: "h:9"}, None]),
        msgpack.packb([0, {}, {}, {}, 5]),
    ],
)
def test_an_assignment_that_is_not_one_is_refused(data: bytes) -> None:
    with pytest.raises(ClusterFormatError):
        decode_assignment(data)
