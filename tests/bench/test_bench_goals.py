"""The goals `bench` checks: stated against the peer (Apache Kafka's own coordinator in the
reference run), each decided by the ratio of ours to the peer from the same run."""

from __future__ import annotations

from typing import Any

from coordinator_server.tools.bench.runner import check_targets

KAFKA = "Apache Kafka 4.4.0's group coordinator"


def results(
    commit_rate: float,
    commit_p99: float,
    heartbeats: float,
    join: float,
    commit_cpu: float = 1.0,
    heartbeat_cpu: float = 0.5,
    single_p50: float = 1.5,
) -> Any:
    """The ratios of one run: `commit_rate` and `commit_p99` at 16 and 64 in flight,
    `single_p50` at 1."""
    return {
        "commits": [
            {"target": "ours/peer", "inflight": 1, "requests_per_s": 0.1, "p50_ms": single_p50},
            {
                "target": "ours/peer",
                "inflight": 16,
                "requests_per_s": commit_rate,
                "p99_ms": commit_p99,
            },
            {
                "target": "ours/peer",
                "inflight": 64,
                "requests_per_s": commit_rate,
                "p99_ms": commit_p99,
                "core_cpu_us": commit_cpu,
            },
            # Our own rows decide nothing against the peer.
            {"target": "ours", "inflight": 64, "requests_per_s": 0.1, "p99_ms": 99.0},
        ],
        "heartbeats": [
            {"target": "ours", "inflight": 64, "errors": 0, "expired": 0},
            {
                "target": "ours/peer",
                "inflight": 64,
                "requests_per_s": heartbeats,
                "core_cpu_us": heartbeat_cpu,
            },
        ],
        "rebalance": [
            {"target": "ours", "members": 1000, "join_s": 0.2},
            {"target": "ours/peer", "members": 1000, "join_s": join},
            {"target": "ours/peer", "members": 10, "join_s": 5.0},
        ],
    }


def decided(checks: list[dict[str, Any]]) -> dict[str, bool]:
    return {check["target"]: check["met"] for check in checks}


def test_the_goals_against_kafkas_coordinator_are_met_at_their_bounds() -> None:
    checks = decided(check_targets(results(1.0, 1.0, 3.0, 1.0), KAFKA))
    assert checks == {
        f"commits at 1 in flight: a p50 within 1.5x of {KAFKA}'s": True,
        f"commits at 16 in flight: at least the rate of {KAFKA}": True,
        f"commits at 16 in flight: a p99 no worse than {KAFKA}'s": True,
        f"commits at 64 in flight: at least the rate of {KAFKA}": True,
        f"commits at 64 in flight: a p99 no worse than {KAFKA}'s": True,
        f"commits at 64 in flight: CPU time a commit on the core no more than with {KAFKA}": True,
        f"heartbeats: at least 3x the rate of {KAFKA}": True,
        f"heartbeats: CPU time a heartbeat on the core at most half of that with {KAFKA}": True,
        "heartbeats: no member expired": True,
        f"rebalance: 1,000 members joined no slower than with {KAFKA}": True,
        "rebalance: 1,000 members hold their assignment within 1 s": True,
    }


def test_the_goals_against_kafkas_coordinator_are_missed_past_their_bounds() -> None:
    checks = decided(check_targets(results(0.99, 1.01, 2.99, 1.01, 1.01, 0.51, 1.51), KAFKA))
    assert [goal for goal, met in checks.items() if not met] == [
        f"commits at 1 in flight: a p50 within 1.5x of {KAFKA}'s",
        f"commits at 16 in flight: at least the rate of {KAFKA}",
        f"commits at 16 in flight: a p99 no worse than {KAFKA}'s",
        f"commits at 64 in flight: at least the rate of {KAFKA}",
        f"commits at 64 in flight: a p99 no worse than {KAFKA}'s",
        f"commits at 64 in flight: CPU time a commit on the core no more than with {KAFKA}",
        f"heartbeats: at least 3x the rate of {KAFKA}",
        f"heartbeats: CPU time a heartbeat on the core at most half of that with {KAFKA}",
        f"rebalance: 1,000 members joined no slower than with {KAFKA}",
    ]


def test_without_a_peer_only_our_own_goals_are_checked() -> None:
    own = {
        "heartbeats": [{"target": "ours", "inflight": 64, "errors": 0, "expired": 2}],
        "rebalance": [{"target": "ours", "members": 1000, "join_s": 1.5}],
    }
    assert decided(check_targets(own)) == {
        "heartbeats: no member expired": False,
        "rebalance: 1,000 members hold their assignment within 1 s": False,
    }
