"""The server-side assignors' time, printed (a command, not a test):
`python tests/consumer_groups/bench_assignor.py [--members 1000 --topics 1000
--partitions 50000 --rounds 5]`.

The group of Kafka's assignor benchmark (its jmh AssignorBenchmark; Kafka publishes 15-20 ms
for 1,000 members x 1,000 topics x 50,000 partitions): `--partitions` spread evenly over
`--topics`, and either every member subscribed to every topic (homogeneous) or the members
and topics cut into five buckets, a member subscribing to its bucket's topics
(heterogeneous, Kafka's bucketed members).

- fresh: the first assignment, nobody owning anything;
- sticky: the next one, from the first, with one more member joining.

`--racks N` gives the members racks (member m in rack m % N) and each partition two replicas
on racks p % N and (p + 1) % N: the rack-aware assignment.

Each figure is the process's CPU time in milliseconds for one assignment (building the
group's spec included, as the coordinator would), the median of `--rounds` rounds, the best
beside it.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS.parent), str(Path(__file__).resolve().parent)]

from assignor_helpers import topic_id  # noqa: E402

from coordinator_server.consumer_groups.assignors import ASSIGNORS  # noqa: E402
from coordinator_server.consumer_groups.assignors.api import (  # noqa: E402
    EMPTY_ASSIGNMENT,
    GroupAssignment,
    GroupSpec,
    MemberSubscription,
    PartitionAssignor,
    SubscribedTopicMetadata,
)

BUCKETS = 5


def subscriptions(
    members: int, topics: list[bytes], homogeneous: bool
) -> dict[str, frozenset[bytes]]:
    if homogeneous:
        every = frozenset(topics)
        return {f"member-{m}": every for m in range(members)}
    buckets = min(BUCKETS, members)
    per_bucket_topics = -(-len(topics) // buckets)
    per_bucket_members = -(-members // buckets)
    return {
        f"member-{m}": frozenset(
            topics[(m // per_bucket_members) * per_bucket_topics :][:per_bucket_topics]
        )
        for m in range(members)
    }


def spec_of(
    subscribed: dict[str, frozenset[bytes]], previous: GroupAssignment | None, racks: int = 0
) -> GroupSpec:
    members = {
        member_id: MemberSubscription(
            topics,
            previous.members.get(member_id, EMPTY_ASSIGNMENT) if previous else EMPTY_ASSIGNMENT,
            rack_id=f"rack-{n % racks}" if racks else None,
        )
        for n, (member_id, topics) in enumerate(subscribed.items())
    }
    return GroupSpec(members)


def partition_racks(count: int, racks: int) -> tuple[frozenset[str], ...]:
    names = [f"rack-{r}" for r in range(racks)]
    sets = [frozenset({names[r], names[(r + 1) % racks]}) for r in range(racks)]
    return tuple(sets[p % racks] for p in range(count))


def measure(
    rounds: int,
    assignor: PartitionAssignor,
    subscribed: dict[str, frozenset[bytes]],
    previous: GroupAssignment | None,
    metadata: SubscribedTopicMetadata,
    racks: int,
) -> tuple[float, float]:
    times = []
    for _ in range(rounds):
        gc.collect()
        start = time.process_time()
        result = assignor.assign(spec_of(subscribed, previous, racks), metadata)
        times.append((time.process_time() - start) * 1000)
        # Freed after the clock stops: the coordinator keeps the target it computes.
        del result
    return statistics.median(times), min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--assignors", default="uniform,range")
    parser.add_argument("--racks", type=int, default=0)
    args = parser.parse_args()

    topics = [topic_id(n) for n in range(args.topics)]
    per_topic, extra = divmod(args.partitions, args.topics)
    counts = {t: per_topic + (1 if n < extra else 0) for n, t in enumerate(topics)}
    racks = args.racks
    metadata = SubscribedTopicMetadata(
        counts,
        {t: partition_racks(count, racks) for t, count in counts.items()} if racks else {},
    )
    print(
        f"{args.members} members, {args.topics} topics, {args.partitions} partitions"
        + (f", {racks} racks" if racks else "")
        + f"; CPU ms per assignment, median (best) of {args.rounds}"
    )
    for name in args.assignors.split(","):
        assignor: PartitionAssignor = ASSIGNORS[name]
        for homogeneous in (True, False):
            subscribed = subscriptions(args.members, topics, homogeneous)
            first = assignor.assign(spec_of(subscribed, None, racks), metadata)
            joined = subscriptions(args.members + 1, topics, homogeneous)
            fresh = measure(args.rounds, assignor, subscribed, None, metadata, racks)
            sticky = measure(args.rounds, assignor, joined, first, metadata, racks)
            kind = "homogeneous" if homogeneous else "heterogeneous"
            print(
                f"{name:8} {kind:14} fresh {fresh[0]:8.1f} ({fresh[1]:.1f})"
                f"   sticky +1 member {sticky[0]:8.1f} ({sticky[1]:.1f})"
            )


if __name__ == "__main__":
    main()
