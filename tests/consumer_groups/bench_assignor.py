"""The server-side assignors' time, printed (a command, not a test):
`python tests/consumer_groups/bench_assignor.py [--members 1000 --topics 1000
--partitions 50000 --rounds 5 --assignors uniform,range --racks 0]`.

The measurement is `coordinator-server bench consumer-groups`' own
(`coordinator_server.tools.bench.assignor_time`: the group of Kafka's assignor benchmark,
homogeneous and heterogeneous subscriptions, the first assignment and the next with one more
member, CPU ms of one assignment, the median of `--rounds` with the best beside it), for any
group and either assignor, with racks if asked for, without starting a broker.
"""

from __future__ import annotations

import argparse

from coordinator_server.tools.bench.assignor_time import measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--assignors", default="uniform,range")
    parser.add_argument("--racks", type=int, default=0)
    args = parser.parse_args()
    print(
        f"{args.members} members, {args.topics} topics, {args.partitions} partitions"
        + (f", {args.racks} racks" if args.racks else "")
        + f"; CPU ms per assignment, median (best) of {args.rounds}"
    )
    for name in args.assignors.split(","):
        rows = measure(
            args.members, args.topics, args.partitions, args.rounds, name, racks=args.racks
        )
        for row in rows:
            if row["target"] != "ours":
                continue
            print(
                f"{name:8} {row['subscriptions']:14} fresh {row['fresh_ms']:8.1f} "
                f"({row['fresh_best_ms']:.1f})   sticky +1 member {row['sticky_ms']:8.1f} "
                f"({row['sticky_best_ms']:.1f})"
            )


if __name__ == "__main__":
    main()
