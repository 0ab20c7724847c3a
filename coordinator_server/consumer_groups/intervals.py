"""The heartbeat interval a consumer group member is told (ConsumerGroupHeartbeat's
`heartbeat_interval_ms`): the configured one, shorter while the member waits for something
the coordinator knows is near.

Every answer carries an interval and Kafka's consumer keeps to the latest one, so this
changes only when a waiting member comes back, not what it is told then:

- its group's target is being batched (KIP-1263): come back just after it is computed,
  rather than up to an interval later;
- it waits for partitions others are giving up: come back at a twentieth of the interval
  (at least WAITING_HEARTBEAT_MIN_MS: 250 ms at Kafka's 5 s), so that it takes them soon
  after they are released, rather than an interval later. Measured with `bench
  consumer-groups` (1,000 members, 1 s intervals): one more member had its partitions after
  0.203 s at a fifth of the interval, 0.051 s at a twentieth.

Each costs a few more heartbeats of the members concerned, for as long as they wait; a group
at rest heartbeats at the configured interval. Kafka's coordinator tells every member the
configured interval.
"""

from __future__ import annotations

from coordinator_server.consumer_groups.group import ConsumerGroup
from coordinator_server.consumer_groups.heartbeat import ConsumerGroupConfig
from coordinator_server.consumer_groups.member import ConsumerGroupMember, ReconciliationState

AFTER_ASSIGNMENT_MS = 20
"""How long after a batched target is due a member waiting for it is told to come back: the
time the deferred computation's write takes to be committed, with room."""

WAITING_HEARTBEAT_DIVISOR = 20
"""A member waiting for released partitions is told the interval divided by this."""
WAITING_HEARTBEAT_MIN_MS = 50
"""The shortest interval a member waiting for released partitions is told."""


def heartbeat_interval_ms(
    group: ConsumerGroup,
    member: ConsumerGroupMember,
    assignment_deferred: bool,
    now_ms: int,
    config: ConsumerGroupConfig,
) -> int:
    """The interval `member` (reconciled by this heartbeat) is told, `assignment_deferred`
    when its group's target waits for its batched computation."""
    interval_ms = config.heartbeat_interval_ms
    if assignment_deferred:
        due_ms = group.assignment_timestamp_ms() + config.assignment_interval_ms - now_ms
        return max(min(interval_ms, max(due_ms, 0) + AFTER_ASSIGNMENT_MS), 1)
    if member.state is ReconciliationState.UNRELEASED_PARTITIONS:
        return min(
            interval_ms,
            max(interval_ms // WAITING_HEARTBEAT_DIVISOR, WAITING_HEARTBEAT_MIN_MS),
        )
    return interval_ms


__all__ = [
    "AFTER_ASSIGNMENT_MS",
    "WAITING_HEARTBEAT_DIVISOR",
    "WAITING_HEARTBEAT_MIN_MS",
    "heartbeat_interval_ms",
]
