"""How the consumer group protocol names topics: by topic id, as Kafka's does.

A topic's name can be reused after the topic is deleted; its id cannot. Assignments, member
epochs and reconciliation are therefore keyed by topic id, the 16 bytes of Kafka's UUID, so
that a partition of a deleted topic is never mistaken for the same partition of a new topic
of the same name. Shared by the assignors, the members and the group.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypeAlias

TopicId: TypeAlias = bytes
"""A topic's id: the 16 bytes of Kafka's UUID, most significant byte first."""

TOPIC_ID_SIZE: Final = 16

ZERO_TOPIC_ID: Final[TopicId] = bytes(TOPIC_ID_SIZE)
"""Kafka's `Uuid.ZERO_UUID`: no topic (never the id of a real topic)."""

TopicPartitions: TypeAlias = Mapping[TopicId, frozenset[int]]
"""Partitions grouped by topic id; a topic with no partition is left out."""
