"""Kafka's `group.consumer.migration.policy`: whether a classic group may turn into a consumer
group online (upgrade) and back (downgrade), as `ConsumerGroupMigrationPolicy` says.

- upgrade: a member joining a classic group with ConsumerGroupHeartbeat converts the group
  into a consumer group, its classic members kept as classic members of it;
- downgrade: a consumer group whose last member on the consumer protocol leaves, while
  classic members remain, converts back into a classic group, which rebalances.
"""

from __future__ import annotations

import enum


class ConsumerGroupMigrationPolicy(enum.Enum):
    """The policy by Kafka's names (the values are the setting's words)."""

    DISABLED = "disabled"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    BIDIRECTIONAL = "bidirectional"

    @property
    def upgrade_enabled(self) -> bool:
        return self is ConsumerGroupMigrationPolicy.UPGRADE or self.bidirectional

    @property
    def downgrade_enabled(self) -> bool:
        return self is ConsumerGroupMigrationPolicy.DOWNGRADE or self.bidirectional

    @property
    def bidirectional(self) -> bool:
        return self is ConsumerGroupMigrationPolicy.BIDIRECTIONAL

    @classmethod
    def parse(cls, name: str) -> ConsumerGroupMigrationPolicy:
        """The policy of that name, in any case; ValueError for another name (Kafka's
        configuration refuses it too, before its `parse` would read it as disabled)."""
        try:
            return cls(name.strip().lower())
        except ValueError:
            raise ValueError(
                f"unknown consumer group migration policy {name!r} "
                f"(known: {', '.join(policy.value for policy in cls)})"
            ) from None


__all__ = ["ConsumerGroupMigrationPolicy"]
