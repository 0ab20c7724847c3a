"""What the pipeline must find in the known history, whichever log holds it."""

from __future__ import annotations

from typing import Any

from pipeline_scenario import CONSUMER_GROUP, SIMPLE_GROUP, ExpectedHistory

from coordinator_server.tools.pipeline.history import NO_MEMBER, HistoryTables


def check_history(history: HistoryTables, expected: ExpectedHistory) -> None:
    # Every commit, in log order, and nothing else.
    commits: dict[str, list[tuple[str, int, int]]] = {}
    for row in history["commits"].orderBy("log_partition", "log_offset").collect():
        commits.setdefault(row.group, []).append((row.topic, row.partition, row.committed_offset))
    assert {group: sorted(rows) for group, rows in commits.items()} == {
        group: sorted(rows) for group, rows in expected.commits.items()
    }
    for group, rows in expected.commits.items():
        # Each partition's commits come in the order they were made.
        for topic, partition in {(t, p) for t, p, _ in rows}:
            assert [o for t, p, o in commits[group] if (t, p) == (topic, partition)] == [
                o for t, p, o in rows if (t, p) == (topic, partition)
            ]

    # Exactly the operator's rewind moved an offset backwards, on the empty group.
    regressions = [row.asDict() for row in history["regressions"].collect()]
    assert [
        (r["group"], r["topic"], r["partition"], r["previous_offset"], r["committed_offset"])
        for r in regressions
    ] == expected.regressions
    (rewind,) = regressions
    assert rewind["moved_by"] == expected.regressions[0][4] - expected.regressions[0][3]
    assert rewind["committed_by"] == NO_MEMBER
    assert rewind["members_then"] == 0
    assert rewind["generation"] == expected.rebalances[CONSUMER_GROUP][-1][0]
    assert rewind["commit_timestamp"] >= rewind["previous_commit_timestamp"]

    # Every rebalance, in order, with who joined and left.
    rebalances = history["rebalances"].orderBy("log_partition", "log_offset").collect()
    assert {row.group for row in rebalances} == {CONSUMER_GROUP}
    assert [(row.generation, row.member_count) for row in rebalances] == expected.rebalances[
        CONSUMER_GROUP
    ]
    a, b = sorted(expected.member_names, key=expected.member_names.__getitem__)
    assert [(row.joined, row.left) for row in rebalances] == [
        ([a], []),
        ([b], []),
        ([], [b]),
        ([], [a]),
    ]
    assert all(row.protocol_type == "consumer" for row in rebalances)
    summary = {row.group: row.asDict() for row in history["rebalance_summary"].collect()}
    assert set(summary) == {CONSUMER_GROUP}
    assert summary[CONSUMER_GROUP]["rebalances"] == len(expected.rebalances[CONSUMER_GROUP])
    assert summary[CONSUMER_GROUP]["distinct_members"] == 2
    assert summary[CONSUMER_GROUP]["last_generation"] == expected.rebalances[CONSUMER_GROUP][-1][0]

    # The commit rate adds up to the commits.
    rate: dict[str, int] = {}
    for row in history["commit_rate"].collect():
        rate[row.group] = rate.get(row.group, 0) + row.commits
    assert rate == {group: len(rows) for group, rows in expected.commits.items()}


def check_idle(history: HistoryTables, expected_idle: set[str]) -> None:
    assert {row.group for row in history["idle_groups"].collect()} == expected_idle


def final_offsets_of(rows: list[Any]) -> dict[tuple[str, str, int], int]:
    return {(row.group, row.topic, row.partition): row.committed_offset for row in rows}


GROUPS = {CONSUMER_GROUP, SIMPLE_GROUP}
