"""The membership's lease: which answers of the group coordinator renew it and which end it."""

from __future__ import annotations

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_server.cluster.lease import MembershipLease

HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP = (
    ApiKey.HEARTBEAT,
    ApiKey.JOIN_GROUP,
    ApiKey.LEAVE_GROUP,
    ApiKey.SYNC_GROUP,
)
NONE, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID = (
    ErrorCode.NONE,
    ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.UNKNOWN_MEMBER_ID,
)


def test_no_lease_before_the_first_proof() -> None:
    lease = MembershipLease(6.0)
    assert lease.deadline is None and lease.last_proof is None
    assert not lease.holds(0.0)


def test_a_sync_then_heartbeats_renew_it_from_their_send_times() -> None:
    lease = MembershipLease(6.0)
    lease.on_response(JOIN_GROUP, NONE, 10.0)
    assert lease.deadline is None
    lease.on_response(SYNC_GROUP, NONE, 10.5)
    assert lease.deadline == 16.5
    assert lease.holds(16.4) and not lease.holds(16.5)
    lease.on_response(HEARTBEAT, NONE, 12.0)
    assert lease.last_proof == 12.0 and lease.deadline == 18.0
    # An answer to an older request (they may overlap) never shortens it.
    lease.on_response(HEARTBEAT, NONE, 11.0)
    assert lease.deadline == 18.0


def test_answers_that_prove_nothing_leave_it_as_it_is() -> None:
    lease = MembershipLease(6.0)
    lease.on_response(HEARTBEAT, NONE, 1.0)
    # During a rebalance: the member may be dropped when the join phase ends, so a heartbeat
    # answered REBALANCE_IN_PROGRESS proves nothing past it.
    lease.on_response(HEARTBEAT, REBALANCE_IN_PROGRESS, 2.0)
    lease.on_response(LEAVE_GROUP, NONE, 3.0)
    lease.on_response(None, NONE, 4.0)
    assert lease.deadline == 7.0


def test_an_answer_that_says_the_node_is_no_member_ends_it() -> None:
    for api_key in (HEARTBEAT, SYNC_GROUP, JOIN_GROUP):
        for error in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
            lease = MembershipLease(6.0)
            lease.on_response(HEARTBEAT, NONE, 1.0)
            lease.on_response(api_key, error, 2.0)
            assert lease.deadline is None
            assert not lease.holds(2.0)
            # A new proof starts it again.
            lease.on_response(SYNC_GROUP, NONE, 3.0)
            assert lease.deadline == 9.0


def test_leaving_ends_it_for_good() -> None:
    lease = MembershipLease(6.0)
    lease.on_response(HEARTBEAT, NONE, 1.0)
    lease.end()
    assert lease.deadline is None
    lease.on_response(HEARTBEAT, NONE, 2.0)
    assert lease.deadline is None


def test_a_renewal_after_the_lease_ran_out_or_ended_counts_a_break() -> None:
    lease = MembershipLease(6.0)
    lease.on_response(SYNC_GROUP, NONE, 10.0)
    assert lease.breaks == 0
    # Renewed in time, even by an answer that comes late: no break.
    lease.on_response(HEARTBEAT, NONE, 15.9)
    assert lease.breaks == 0
    # Sent after the lease ran out (a pause): the broker may have removed the node.
    lease.on_response(HEARTBEAT, NONE, 22.0)
    assert lease.breaks == 1 and lease.deadline == 28.0
    # Told it is no member, then a member again (a rejoin).
    lease.on_response(HEARTBEAT, UNKNOWN_MEMBER_ID, 23.0)
    lease.on_response(SYNC_GROUP, NONE, 24.0)
    assert lease.breaks == 2
    # The very first lease is no break.
    assert MembershipLease(6.0).breaks == 0
