"""The topic names a consumer group subscribes to once some of its members change or leave:
what a new metadata hash is computed over (KIP-1101) before the change is replayed.

Shared by the members' heartbeats (manager.py) and the classic members' requests
(classic_members.py). Pure reads of a group.
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator_server.consumer_groups.group import ConsumerGroup
from coordinator_server.consumer_groups.member import ConsumerGroupMember
from coordinator_server.consumer_groups.regex import NO_REGEX_UPDATE, RegexUpdate


def subscribed_names_after(
    group: ConsumerGroup,
    before: ConsumerGroupMember | None,
    after: ConsumerGroupMember | None,
    regexes: RegexUpdate = NO_REGEX_UPDATE,
) -> set[str]:
    """The topic names the group subscribes to once `before` (a member of the group, or
    None) is replaced by `after` (None: it leaves) and `regexes` is replayed."""
    counts = group.subscribed_topic_names()
    if before is not None:
        for name in member_topic_names(group, before):
            counts[name] = counts.get(name, 0) - 1
    if after is not None:
        for name in member_topic_names(group, after):
            counts[name] = counts.get(name, 0) + 1
    regexes.adjust_counts(group, counts)
    return {name for name, count in counts.items() if count > 0}


def subscribed_names_without(
    group: ConsumerGroup, leaving: Iterable[ConsumerGroupMember]
) -> set[str]:
    """The topic names the group subscribes to once the `leaving` members are gone."""
    counts = group.subscribed_topic_names()
    for member in leaving:
        for name in member_topic_names(group, member):
            counts[name] = counts.get(name, 0) - 1
    return {name for name, count in counts.items() if count > 0}


def member_topic_names(group: ConsumerGroup, member: ConsumerGroupMember) -> frozenset[str]:
    """The names `member` subscribes to, by name or through a regex the group resolved."""
    regex = member.subscribed_topic_regex
    resolved = group.resolved_regular_expression(regex) if regex else None
    if resolved is None:
        return member.subscribed_topic_names
    return member.subscribed_topic_names | resolved.topics


__all__ = ["member_topic_names", "subscribed_names_after", "subscribed_names_without"]
