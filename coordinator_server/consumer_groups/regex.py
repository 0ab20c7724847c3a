"""Subscriptions by regular expression (KIP-848's `subscribed_topic_regex`): the pattern
checked when a member brings it, resolved against the data cluster's topic names, and kept
current as topics come and go (Kafka's `maybeUpdateRegularExpressions`,
`refreshRegularExpressions` and `handleRegularExpressionsResult`).

Why RE2. Kafka's coordinator compiles a member's pattern with RE2/J, so the syntax a member
may use is RE2's, not Python's `re` (no backreferences, no lookaround), and matching takes
time linear in the name's length whatever the pattern. A pattern comes from any client that
may join a group; with a backtracking engine one pattern stalls the coordinator. Measured on
this project's 2-core machine: `(a+)+b` against one name of 18 a's takes 20 ms with `re`,
against 24 a's 740 ms, growing exponentially; with RE2 the same pattern against 10,000
names takes 15 ms. RE2 (the `google-re2` binding of Google's library) is built for
untrusted patterns: its memory per pattern is capped (`max_mem`, 1 MiB by default here, so
that the cache of compiled patterns is bounded in bytes too: 200 patterns built to blow up
RE2's automaton, each matched against 300 names, grew the process to 59 MB at 1 MiB each,
to 389 MB at RE2's default of 8 MiB).

Full match, as Kafka: RE2/J's `matcher(topic).matches()` is anchored at both ends, so `foo`
matches the topic `foo` and not `foobar`. Internal topics are never matched. An invalid
pattern is refused with INVALID_REGULAR_EXPRESSION and Kafka's message, whose last part is
RE2/J's description of the error (RE2's own wording is translated to it).

Why resolved inside the heartbeat's write, where Kafka resolves on a background thread:
resolving one pattern against 10,000 topic names of ~40 characters takes 7 to 17 ms, made
once per group per `regex_refresh_min_interval_ms` (10 s, Kafka's batching of refreshes)
and once when a pattern is new to its group; what a background thread would save is that,
at the cost of a second write and a member that waits a heartbeat more for its partitions.
The worst case measured is a pattern built to defeat RE2's automaton (`(a|b)*a(a|b){20}`)
against 10,000 names of 249 characters over the pattern's own two letters: 0.7 to 2 s,
linear still; against names of ~40 characters the same pattern takes ~10 ms.

Refreshes: a resolution records the version of the topic snapshot it read, and the group's
resolutions are made again, at most once per `regex_refresh_min_interval_ms`, once the
snapshot's version differs from one of them (not only when it is larger: versions are
counted by each node's own source, so the node that loads the group may count lower), or
once the latest is older than `regex_refresh_interval_ms`. Every pattern of a group is
refreshed together, as Kafka's, so that one change of the cluster moves the group once; a
pattern new to the group is resolved at once, alone (Kafka's waits for the next refresh).

Authorization, as Kafka's `filterTopicDescribeAuthorizedTopics`: a resolution leaves out
every topic the principal of the heartbeat that makes it may not describe, so a pattern
never hands a member a topic it could not have named. The filter is the caller's
(`DeniedTopics`): the service layer holds the authorizer, this layer only the names. A
classic member's JoinGroup makes no resolution (Kafka's refreshes only on
ConsumerGroupHeartbeat); the group's patterns are refreshed at its consumer members' next
heartbeats.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, MutableMapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Protocol

import re2

from coordinator_protocol.errors import InvalidRegularExpressionError
from coordinator_server.consumer_groups.group import ConsumerGroup, ResolvedRegularExpression
from coordinator_server.consumer_groups.heartbeat import ClusterTopics, ConsumerGroupConfig
from coordinator_server.consumer_groups.member import ConsumerGroupMember
from coordinator_server.records import (
    CoordinatorRecord,
    new_consumer_group_regular_expression_record,
    new_consumer_group_regular_expression_tombstone_record,
)
from coordinator_server.records.consumer_groups import ConsumerGroupRegularExpressionValue

# RE2's error codes as RE2/J (Go's regexp/syntax) words them, which is what Kafka answers.
_RE2J_DESCRIPTIONS = {
    "invalid escape sequence": "invalid escape sequence",
    "invalid character class": "invalid character class",
    "invalid character class range": "invalid character class range",
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "unexpected )": "unexpected )",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid UTF-8": "invalid UTF-8",
    "invalid named capture group": "invalid named capture",
}


DeniedTopics = Callable[[Collection[str]], AbstractSet[str]]
"""The topics among those given that the principal of the request may not describe."""


def nothing_denied(names: Collection[str]) -> AbstractSet[str]:
    """`DeniedTopics` where no authorizer is set: every topic may be described."""
    return frozenset()


class _Compiled(Protocol):
    """What this module uses of a compiled RE2 pattern."""

    def fullmatch(self, text: bytes) -> object | None: ...


class TopicRegexMatcher:
    """Compiles patterns with RE2 and matches topic names in full, keeping the last
    `max_cached_patterns` compiled patterns (least recently used out first), each allowed
    `max_memory_bytes` of RE2's memory."""

    def __init__(self, max_cached_patterns: int, max_memory_bytes: int) -> None:
        if max_cached_patterns < 1:
            raise ValueError(f"max_cached_patterns must be at least 1, got {max_cached_patterns}")
        if max_memory_bytes < 64 * 1024:
            raise ValueError(f"max_memory_bytes must be at least 65536, got {max_memory_bytes}")
        self._max_cached = max_cached_patterns
        options = re2.Options()
        # The error is answered to the member; RE2's own log line would only repeat it.
        options.log_errors = False
        # Only whether a name matches is read: no group needs capturing.
        options.never_capture = True
        options.max_mem = max_memory_bytes
        self._options = options
        self._cache: OrderedDict[str, _Compiled] = OrderedDict()

    def compile(self, pattern: str) -> _Compiled:
        """The compiled pattern; InvalidRegularExpressionError with Kafka's message when
        RE2 refuses it."""
        cache = self._cache
        compiled = cache.get(pattern)
        if compiled is not None:
            cache.move_to_end(pattern)
            return compiled
        try:
            made: _Compiled = re2.compile(pattern, self._options)
        except re2.error as error:
            raise InvalidRegularExpressionError(
                f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: "
                f"{_description(error)}."
            ) from None
        cache[pattern] = made
        if len(cache) > self._max_cached:
            cache.popitem(last=False)
        return made

    def validate(self, pattern: str) -> None:
        """Raise InvalidRegularExpressionError when RE2 refuses `pattern`."""
        self.compile(pattern)

    def matching_topics(self, pattern: str, names: Iterable[str]) -> frozenset[str]:
        """The names `pattern` matches in full."""
        return self.resolve((pattern,), list(names))[pattern]

    def resolve(self, patterns: Iterable[str], names: Sequence[str]) -> dict[str, frozenset[str]]:
        """Each pattern's full matches among `names`. A pattern RE2 refuses matches nothing
        (as Kafka, which logs and skips one that its validation let through: a log written
        elsewhere may hold one)."""
        # Encoded once for every pattern: RE2 reads UTF-8, and a str costs a conversion per
        # match otherwise.
        encoded = [(name, name.encode()) for name in names]
        resolved: dict[str, frozenset[str]] = {}
        for pattern in patterns:
            try:
                compiled = self.compile(pattern)
            except InvalidRegularExpressionError:
                resolved[pattern] = frozenset()
                continue
            fullmatch = compiled.fullmatch
            resolved[pattern] = frozenset(
                name for name, raw in encoded if fullmatch(raw) is not None
            )
        return resolved

    def __len__(self) -> int:
        return len(self._cache)


def _description(error: re2.error) -> str:
    """RE2/J's description of the error RE2 reports as `code: fragment`."""
    raw = error.args[0] if error.args else b""
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    code = text.split(": ", 1)[0]
    return _RE2J_DESCRIPTIONS.get(code, code)


@dataclass(frozen=True, slots=True)
class RegexUpdate:
    """What one heartbeat does to its group's regular expressions.

    `records`: the tombstones of the patterns no member uses any longer, then the new
    resolutions, to append after the member's metadata record and before the group's epoch
    record. `changes`: the resolutions those records set (None: removed), which the rest of
    the heartbeat reads in place of the group's, whose replay comes later. `subscribers`: how
    many members use each pattern once the heartbeat's member is updated.
    `regex_changed`: the member changed its pattern (its subscription changed).
    `bump_group_epoch`: the target must be computed again (the member took a pattern the
    group has resolved, or dropped its pattern, or a resolution matched other topics)."""

    records: tuple[CoordinatorRecord, ...] = ()
    changes: Mapping[str, ResolvedRegularExpression | None] = field(default_factory=dict)
    subscribers: Mapping[str, int] = field(default_factory=dict)
    regex_changed: bool = False
    bump_group_epoch: bool = False

    def topics(self, group: ConsumerGroup, regex: str) -> frozenset[str] | None:
        """The topics `regex` stands for once this update is replayed; None: unresolved."""
        resolved = (
            self.changes[regex]
            if regex in self.changes
            else group.resolved_regular_expression(regex)
        )
        return None if resolved is None else resolved.topics

    def adjust_counts(self, group: ConsumerGroup, counts: MutableMapping[str, int]) -> None:
        """Move the members' count of each topic name (`counts`, already updated for the
        heartbeat's member with the group's resolutions) to the new resolutions."""
        for regex, resolved in self.changes.items():
            subscribers = self.subscribers.get(regex, 0)
            if not subscribers:
                continue
            old = group.resolved_regular_expression(regex)
            if old is not None:
                _count(counts, old.topics, -subscribers)
            if resolved is not None:
                _count(counts, resolved.topics, subscribers)


NO_REGEX_UPDATE = RegexUpdate()


def _count(counts: MutableMapping[str, int], names: Iterable[str], delta: int) -> None:
    for name in names:
        counts[name] = counts.get(name, 0) + delta


def update_regular_expressions(
    group: ConsumerGroup,
    member: ConsumerGroupMember,
    updated: ConsumerGroupMember,
    topics: ClusterTopics,
    now_ms: int,
    config: ConsumerGroupConfig,
    matcher: TopicRegexMatcher,
    denied_topics: DeniedTopics | None,
) -> RegexUpdate:
    """The heartbeat of `member`, updated to `updated`, and its group's patterns (Kafka's
    `maybeUpdateRegularExpressions`, with the resolution done at once).

    A pattern the member leaves that no one else uses is removed; one new to the group is
    validated (InvalidRegularExpressionError) and resolved now; and when the group's
    resolutions are due for a refresh (the module's docstring says when) every pattern in
    use is resolved again. A resolution leaves out the topics `denied_topics` names; with
    None (a classic member's JoinGroup, whose principal Kafka does not resolve for) no
    resolution is made."""
    group_id = group.group_id
    old = member.subscribed_topic_regex
    new = updated.subscribed_topic_regex
    subscribers = _regex_subscribers(group)
    records: list[CoordinatorRecord] = []
    changes: dict[str, ResolvedRegularExpression | None] = {}
    regex_changed = old != new
    bump = False
    if regex_changed:
        if old and subscribers.get(old, 0) == 1:
            records.append(new_consumer_group_regular_expression_tombstone_record(group_id, old))
            changes[old] = None
        if new:
            if not subscribers.get(new):
                matcher.validate(new)
            elif group.resolved_regular_expression(new) is not None:
                bump = True
        elif old:
            bump = True
        if old:
            _count(subscribers, (old,), -1)
        if new:
            _count(subscribers, (new,), 1)
    in_use = sorted(regex for regex, count in subscribers.items() if count > 0)
    if not in_use or denied_topics is None:
        return RegexUpdate(tuple(records), changes, subscribers, regex_changed, bump)

    current = {regex: group.resolved_regular_expression(regex) for regex in in_use}
    if _refresh_due(
        (resolved for resolved in current.values() if resolved is not None),
        topics.version,
        now_ms,
        config,
    ):
        due = in_use
    else:
        due = [regex for regex in in_use if current[regex] is None]
    if due:
        names = topics.topic_names(include_internal=False)
        resolutions = matcher.resolve(due, names)
        matched_anywhere = frozenset().union(*resolutions.values())
        denied = denied_topics(matched_anywhere) if matched_anywhere else frozenset()
        for regex, matched in resolutions.items():
            if denied:
                matched = matched - denied
            before = current[regex]
            if matched != (frozenset() if before is None else before.topics):
                bump = True
            resolved = ResolvedRegularExpression(matched, topics.version, now_ms)
            changes[regex] = resolved
            records.append(
                new_consumer_group_regular_expression_record(
                    group_id,
                    regex,
                    ConsumerGroupRegularExpressionValue(
                        tuple(sorted(matched)), resolved.version, resolved.timestamp_ms
                    ),
                )
            )
    return RegexUpdate(tuple(records), changes, subscribers, regex_changed, bump)


def _refresh_due(
    resolutions: Iterable[ResolvedRegularExpression],
    version: int,
    now_ms: int,
    config: ConsumerGroupConfig,
) -> bool:
    """Whether the group's resolutions must be made again: the latest is more than
    `regex_refresh_min_interval_ms` old, and some was read from another snapshot version or
    the latest is more than `regex_refresh_interval_ms` old (Kafka's conditions 2, 3.2, 3.3)."""
    latest: int | None = None
    other_version = False
    for resolved in resolutions:
        if latest is None or resolved.timestamp_ms > latest:
            latest = resolved.timestamp_ms
        other_version = other_version or resolved.version != version
    if latest is None or now_ms <= latest + config.regex_refresh_min_interval_ms:
        return False
    return other_version or now_ms > latest + config.regex_refresh_interval_ms


def unused_regex_tombstones(
    group: ConsumerGroup, leaving: Iterable[ConsumerGroupMember]
) -> list[CoordinatorRecord]:
    """The tombstones of the patterns only `leaving` members use, to write after their own
    (Kafka's `maybeDeleteResolvedRegularExpressions`)."""
    leaving_counts: dict[str, int] = {}
    for member in leaving:
        if member.subscribed_topic_regex:
            _count(leaving_counts, (member.subscribed_topic_regex,), 1)
    subscribers = _regex_subscribers(group)
    return [
        new_consumer_group_regular_expression_tombstone_record(group.group_id, regex)
        for regex, count in sorted(leaving_counts.items())
        if subscribers.get(regex, 0) == count
    ]


def _regex_subscribers(group: ConsumerGroup) -> dict[str, int]:
    """How many members use each pattern (Kafka's `subscribedRegularExpressions`): the count
    the group keeps current on every member's replay."""
    return dict(group._regex_subscribers.items())


__all__ = [
    "NO_REGEX_UPDATE",
    "DeniedTopics",
    "RegexUpdate",
    "TopicRegexMatcher",
    "nothing_denied",
    "unused_regex_tombstones",
    "update_regular_expressions",
]
