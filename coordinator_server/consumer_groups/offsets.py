"""What a consumer group (KIP-848) says about its committed offsets: Kafka's
`ConsumerGroup.validateOffsetCommit`, `validateOffsetFetch`, `validateDeleteGroup`,
`isSubscribedToTopic` and `offsetExpirationCondition`, for the offsets' handlers to ask.

Pure reads of a group; each check answers the error Kafka throws, or None.

The member epoch must equal the member's, as in the Kafka releases up to 4.2: KIP-1251's
assignment epochs, which accept a commit at an older epoch for partitions the member has
held since, need the epochs in the current assignment records, which these do not carry.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator_protocol.errors import (
    ApiError,
    IllegalGenerationError,
    NonEmptyGroupError,
    StaleMemberEpochError,
    UnknownMemberIdError,
)
from coordinator_server.consumer_groups.group import ConsumerGroup
from coordinator_server.consumer_groups.member import ConsumerGroupMember
from coordinator_server.records import OffsetCommitValue

UNKNOWN_GENERATION_ID = -1
"""The generation of a TxnOffsetCommit from a producer that names no group member."""


def validate_offset_commit(
    group: ConsumerGroup, member_id: str, member_epoch: int
) -> ApiError | None:
    """Kafka's check of an OffsetCommit to a consumer group (v9+ semantics): a negative
    epoch commits for no member, allowed only while the group has no members; otherwise the
    member must exist (UNKNOWN_MEMBER_ID) at exactly the epoch given (STALE_MEMBER_EPOCH,
    whether the epoch given is older or newer than the member's; ILLEGAL_GENERATION for a
    member on the classic protocol). Kafka does not check the group instance id here."""
    if member_epoch < 0 and not group.num_members():
        return None
    member = group.member(member_id)
    if member is None:
        return _unknown_member(group, member_id)
    return _stale_epoch(member, member_epoch)


def validate_transactional_offset_commit(
    group: ConsumerGroup,
    member_id: str,
    instance_id: str | None,
    generation_id: int,
) -> ApiError | None:
    """Kafka's check of a TxnOffsetCommit to a consumer group: an OffsetCommit's, except
    that a producer naming no member (generation -1, empty member id, no instance id) is
    not checked at all, and that a wrong epoch is ILLEGAL_GENERATION (TxnOffsetCommit has no
    STALE_MEMBER_EPOCH: Kafka maps it)."""
    if generation_id < 0 and not group.num_members():
        return None
    if generation_id == UNKNOWN_GENERATION_ID and not member_id and instance_id is None:
        return None
    member = group.member(member_id)
    if member is None:
        return _unknown_member(group, member_id)
    if member.member_epoch != generation_id:
        return IllegalGenerationError(
            f"The received generation id {generation_id} does not match the expected member "
            f"epoch {member.member_epoch}."
        )
    return None


def validate_offset_fetch(
    group: ConsumerGroup,
    member_id: str | None,
    member_epoch: int,
    committed_offset: int | None,
) -> ApiError | None:
    """Kafka's check of an OffsetFetch from a consumer group, as of `committed_offset`
    (None: the latest state): no member id and a negative epoch is an admin's fetch, not
    checked; otherwise the member must exist (UNKNOWN_MEMBER_ID) at the epoch given
    (STALE_MEMBER_EPOCH)."""
    if member_id is None and member_epoch < 0:
        return None
    if member_id is None:
        member = None
    elif committed_offset is None:
        member = group.member(member_id)
    else:
        member = group.members(committed_offset).get(member_id)
    if member is None:
        return _unknown_member(group, member_id)
    return _stale_epoch(member, member_epoch)


def validate_delete_group(group: ConsumerGroup) -> ApiError | None:
    """DeleteGroups deletes a consumer group only when it has no members (Kafka's Empty
    state): NON_EMPTY_GROUP otherwise."""
    if group.num_members():
        return NonEmptyGroupError(f"group {group.group_id} has {group.num_members()} members")
    return None


def subscription_check(group: ConsumerGroup) -> Callable[[str], bool]:
    """Kafka's `isSubscribedToTopic` for the group as it is now: whether a member subscribes
    to a topic, by name or through a regular expression the group has resolved. The
    subscriptions are read once, for the many topics one request or one expiration pass
    asks about."""
    return group.subscribed_topic_names().__contains__


def is_offset_expired(offset: OffsetCommitValue, now_ms: int, retention_ms: int) -> bool:
    """Kafka's expiration condition of a consumer group's offset: `retention_ms` after its
    commit, or at the expire timestamp an old client's commit gave it."""
    if offset.expire_timestamp_ms is not None:
        return now_ms >= offset.expire_timestamp_ms
    return now_ms - offset.commit_timestamp_ms >= retention_ms


def _unknown_member(group: ConsumerGroup, member_id: str | None) -> UnknownMemberIdError:
    return UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")


def _stale_epoch(
    member: ConsumerGroupMember, member_epoch: int
) -> StaleMemberEpochError | IllegalGenerationError | None:
    """Kafka's `validateMemberEpoch`: a classic member's generation is its member epoch,
    and a wrong one is ILLEGAL_GENERATION, which its client knows."""
    if member_epoch == member.member_epoch:
        return None
    if member.use_classic_protocol:
        return IllegalGenerationError(
            f"The received generation id {member_epoch} does not match the expected member "
            f"epoch {member.member_epoch}."
        )
    return StaleMemberEpochError(
        f"The received member epoch {member_epoch} does not match the expected member epoch "
        f"{member.member_epoch}."
    )


__all__ = [
    "UNKNOWN_GENERATION_ID",
    "is_offset_expired",
    "subscription_check",
    "validate_delete_group",
    "validate_offset_commit",
    "validate_offset_fetch",
    "validate_transactional_offset_commit",
]
