"""The cluster's membership on Apache Kafka: nodes join, converge on one view, hand their
partitions over when they leave or die, and a duplicate node id is refused."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from apache_kafka import ApacheKafkaBroker

from coordinator_server.cluster.membership import ClusterMembership, ClusterMembershipError
from coordinator_server.cluster.view import OwnershipView
from coordinator_server.storage.kafka.security import KafkaSecurity

pytestmark = [pytest.mark.timeout(60)]

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).resolve().parent / "cluster_member_child.py"
PARTITIONS = 6
# Apache Kafka's smallest session timeout (group.min.session.timeout.ms).
SESSION_MS = 6000
HEARTBEAT_MS = 500


async def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.02)


class Node:
    """A ClusterMembership and the views its listener was given."""

    def __init__(
        self,
        broker: ApacheKafkaBroker,
        topic: str,
        node_id: int,
        port: int,
        security: KafkaSecurity | None = None,
    ) -> None:
        self.node_id = node_id
        self.changes: list[OwnershipView] = []
        self.membership = ClusterMembership(
            bootstrap_servers=broker.bootstrap if security is None else broker.sasl_ssl_bootstrap,
            kafka_security=security,
            topic=topic,
            cluster_id=f"coordinator-server.{topic}",
            node_id=node_id,
            host="127.0.0.1",
            port=port,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            on_change=self.changes.append,
            start_warning_ms=15_000,
        )

    @property
    def view(self) -> OwnershipView:
        return self.membership.view


@pytest.fixture
async def log_topic(kafka_broker: ApacheKafkaBroker, unique_topic: str) -> str:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(unique_topic, PARTITIONS, 1)])
    finally:
        await admin.close()
    return unique_topic


@pytest.fixture
async def nodes(
    kafka_broker: ApacheKafkaBroker, log_topic: str
) -> AsyncIterator[Callable[..., Node]]:
    """Makes nodes of one cluster (node id, and port 9000 + node id unless given); stops
    them all at the end."""
    made: list[Node] = []

    def make(node_id: int, port: int | None = None, security: KafkaSecurity | None = None) -> Node:
        node = Node(kafka_broker, log_topic, node_id, port or 9000 + node_id, security)
        made.append(node)
        return node

    yield make
    await asyncio.gather(*(node.membership.stop() for node in made))


def converged(members: list[Node], node_ids: set[int]) -> bool:
    """Every member has the same view of the same generation, of exactly these nodes."""
    views = [member.view for member in members]
    first = views[0]
    return (
        set(first.nodes) == node_ids
        and sorted(first.owners) == list(range(PARTITIONS))
        and all(
            view.generation == first.generation
            and view.owners == first.owners
            and view.standbys == first.standbys
            and view.nodes == first.nodes
            for view in views
        )
    )


def check_view(members: list[Node]) -> None:
    """The converged view is balanced, has standbys on other nodes, and each member's part
    is its share of it."""
    view = members[0].view
    counts = Counter(view.owners.values())
    assert max(counts.values()) - min(counts.values()) <= 1
    assert set(counts) == set(view.nodes)
    if len(view.nodes) > 1:
        assert sorted(view.standbys) == list(range(PARTITIONS))
        assert all(view.standbys[p] != view.owners[p] for p in range(PARTITIONS))
    for member in members:
        mine = member.view
        assert mine.error is None
        assert mine.mine_owned == {p for p, n in view.owners.items() if n == member.node_id}
        assert mine.mine_standby == {p for p, n in view.standbys.items() if n == member.node_id}
        assert view.nodes[member.node_id] == ("127.0.0.1", 9000 + member.node_id)
        assert member.changes[-1] == mine
        assert member.membership.holds_lease()


async def test_one_member_owns_every_partition(nodes: Callable[..., Node]) -> None:
    node = nodes(1)
    started = time.monotonic()
    await node.membership.start()
    # The broker starts a new group's first rebalance at once (the launcher sets
    # group.initial.rebalance.delay.ms=0; Kafka's default would hold it 3 s).
    assert time.monotonic() - started < 3
    view = node.view
    assert view.mine_owned == frozenset(range(PARTITIONS))
    assert view.owners == dict.fromkeys(range(PARTITIONS), 1)
    assert view.standbys == {}
    assert view.mine_standby == frozenset()
    assert view.nodes == {1: ("127.0.0.1", 9001)}
    assert view.generation >= 1
    assert node.changes == [view]
    deadline = node.membership.lease_deadline_monotonic
    assert deadline is not None
    assert 0 < deadline - time.monotonic() <= SESSION_MS / 1000
    # Heartbeats keep renewing the lease.
    await asyncio.sleep(3 * HEARTBEAT_MS / 1000)
    renewed = node.membership.lease_deadline_monotonic
    assert renewed is not None and renewed > deadline
    await node.membership.stop()
    assert not node.membership.holds_lease()


async def test_three_members_converge_on_one_balanced_view(nodes: Callable[..., Node]) -> None:
    members = [nodes(node_id) for node_id in (1, 2, 3)]
    await asyncio.gather(*(member.membership.start() for member in members))
    await wait_until(lambda: converged(members, {1, 2, 3}), 15, "one view of three nodes")
    check_view(members)
    assert sorted(Counter(members[0].view.owners.values()).values()) == [2, 2, 2]
    assert sorted(Counter(members[0].view.standbys.values()).values()) == [2, 2, 2]


async def test_members_that_join_one_by_one_take_only_their_share(
    nodes: Callable[..., Node],
) -> None:
    members: list[Node] = []
    owners: dict[int, int] = {}
    for node_id, share in ((1, 6), (2, 3), (3, 2)):
        member = nodes(node_id)
        await member.membership.start()
        members.append(member)
        await wait_until(lambda: converged(members, {m.node_id for m in members}), 15, "one view")
        check_view(members)
        after = members[0].view.owners
        changed = {p for p in after if owners.get(p) != after[p]}
        # The newcomer takes its share, and nothing else moves.
        assert changed == {p for p, n in after.items() if n == node_id}
        assert len(changed) == share
        owners = dict(after)
    # Every view a member was given for a generation is the one the others were given.
    seen: dict[int, tuple[object, object]] = {}
    for member in members:
        for view in member.changes:
            expected = seen.setdefault(view.generation, (view.owners, view.standbys))
            assert (view.owners, view.standbys) == expected
    assert len(seen) >= 3


async def test_a_member_that_stops_hands_its_partitions_over_at_once(
    nodes: Callable[..., Node],
) -> None:
    members = [nodes(node_id) for node_id in (1, 2, 3)]
    await asyncio.gather(*(member.membership.start() for member in members))
    await wait_until(lambda: converged(members, {1, 2, 3}), 15, "one view of three nodes")
    before = dict(members[0].view.owners)

    leaving, staying = members[2], members[:2]
    started = time.monotonic()
    await leaving.membership.stop()
    assert not leaving.membership.holds_lease()
    await wait_until(lambda: converged(staying, {1, 2}), 10, "one view of the two left")
    took = time.monotonic() - started
    # LeaveGroup: the others learn of it at their next heartbeat, not after a session.
    assert took < SESSION_MS / 1000 / 2, took
    check_view(staying)
    after = staying[0].view.owners
    assert {p for p in after if after[p] != before[p]} == {
        p for p, n in before.items() if n == leaving.node_id
    }
    assert sorted(Counter(after.values()).values()) == [3, 3]


async def test_a_member_killed_without_leaving_is_replaced_after_its_session(
    kafka_broker: ApacheKafkaBroker, log_topic: str, nodes: Callable[..., Node]
) -> None:
    members = [nodes(node_id) for node_id in (1, 2)]
    await asyncio.gather(*(member.membership.start() for member in members))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD),
        "--bootstrap-servers", kafka_broker.bootstrap, "--topic", log_topic,
        "--cluster-id", f"coordinator-server.{log_topic}", "--node-id", "3",
        "--port", "9003", "--session-timeout-ms", str(SESSION_MS),
        "--heartbeat-interval-ms", str(HEARTBEAT_MS),
        stdout=asyncio.subprocess.PIPE, env=env, cwd=REPO,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 20)
        assert line.startswith(b"joined "), line
        await wait_until(lambda: converged(members, {1, 2, 3}), 15, "one view of three nodes")
        before = dict(members[0].view.owners)
        assert sorted(Counter(before.values()).values()) == [2, 2, 2]

        killed = time.monotonic()
        child.send_signal(signal.SIGKILL)
        await child.wait()
        await wait_until(lambda: converged(members, {1, 2}), 20, "one view of the two left")
        took = time.monotonic() - killed
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    # No LeaveGroup: the broker notices when the killed member's session runs out.
    assert SESSION_MS / 1000 * 0.8 < took < SESSION_MS / 1000 + 5, took
    check_view(members)
    after = members[0].view.owners
    assert {p for p in after if after[p] != before[p]} == {p for p, n in before.items() if n == 3}


async def test_a_duplicate_node_id_is_given_nothing_and_says_why(
    nodes: Callable[..., Node], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="coordinator_server.cluster")
    first, second = nodes(1, port=9101), nodes(1, port=9102)
    await first.membership.start()
    await second.membership.start()
    both = [first, second]
    await wait_until(
        lambda: (
            first.view.generation == second.view.generation
            and any(member.view.error for member in both)
        ),
        15,
        "one generation with the duplicate refused",
    )
    refused = [member for member in both if member.view.error is not None]
    kept = [member for member in both if member.view.error is None]
    assert len(refused) == 1 and len(kept) == 1
    error = refused[0].view.error
    assert error is not None and "node id 1 is already in the cluster" in error
    assert refused[0].view.mine_owned == frozenset()
    assert refused[0].view.mine_standby == frozenset()
    assert kept[0].view.mine_owned == frozenset(range(PARTITIONS))
    assert kept[0].view.nodes == {1: ("127.0.0.1", 9101 if kept[0] is first else 9102)}
    # The member that came later by member id is the one refused.
    refused_id, kept_id = refused[0].membership.member_id, kept[0].membership.member_id
    assert refused_id is not None and kept_id is not None and kept_id < refused_id
    # One line says so, however many rebalances follow: another node joins.
    generation = first.view.generation
    other = nodes(2)
    await other.membership.start()
    await wait_until(
        lambda: (
            converged([kept[0], other], {1, 2})
            and refused[0].view.generation == other.view.generation > generation
        ),
        15,
        "one view of nodes 1 and 2",
    )
    assert refused[0].view.error == error
    assert refused[0].view.mine_owned == frozenset()
    assert sorted(Counter(other.view.owners.values()).values()) == [3, 3]
    lines = [r for r in caplog.records if "already in the cluster" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].levelno == logging.ERROR


async def test_a_rebalance_that_changes_no_ownership_is_not_reported(
    nodes: Callable[..., Node],
) -> None:
    members = [nodes(1), nodes(2)]
    await asyncio.gather(*(member.membership.start() for member in members))
    await wait_until(lambda: converged(members, {1, 2}), 15, "one view of two nodes")
    reported = list(members[0].changes)
    view = members[0].view
    # A second member for node 2, at its address: whichever of the two is refused, node 2
    # owns and stands by for what it did.
    twin = nodes(2, port=9002)
    await twin.membership.start()
    # Each of the three learns the new generation (or its refusal) on its own heartbeat.
    await wait_until(
        lambda: all(m.view.generation > view.generation or m.view.error for m in (*members, twin)),
        15,
        "a rebalance seen by every member",
    )
    assert members[0].view.same_ownership(view)
    assert members[0].changes == reported
    assert [m.view.error is None for m in (members[1], twin)].count(True) == 1


async def test_members_over_sasl_ssl_and_plaintext_share_a_cluster(
    kafka_broker: ApacheKafkaBroker, nodes: Callable[..., Node]
) -> None:
    security = KafkaSecurity.build(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username=kafka_broker.sasl_username,
        sasl_password=kafka_broker.sasl_password,
        ssl_ca_location=kafka_broker.ca_file,
    )
    members = [nodes(1, security=security), nodes(2)]
    await asyncio.gather(*(member.membership.start() for member in members))
    await wait_until(lambda: converged(members, {1, 2}), 15, "one view of two nodes")
    check_view(members)


async def test_a_missing_log_topic_fails_the_start(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    membership = ClusterMembership(
        bootstrap_servers=kafka_broker.bootstrap,
        topic=unique_topic,
        cluster_id=f"coordinator-server.{unique_topic}",
        node_id=1,
        host="127.0.0.1",
        port=9001,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        on_change=lambda view: None,
    )
    with pytest.raises(ClusterMembershipError, match="does not exist"):
        await membership.start()
    # Nor was the topic created by asking for it.
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    await admin.start()
    try:
        assert unique_topic not in await admin.list_topics()
    finally:
        await admin.close()


async def test_a_session_timeout_the_broker_refuses_fails_the_start(
    kafka_broker: ApacheKafkaBroker, log_topic: str
) -> None:
    membership = ClusterMembership(
        bootstrap_servers=kafka_broker.bootstrap,
        topic=log_topic,
        cluster_id=f"coordinator-server.{log_topic}",
        node_id=1,
        host="127.0.0.1",
        port=9001,
        # Below the broker's group.min.session.timeout.ms.
        session_timeout_ms=1000,
        heartbeat_interval_ms=200,
        on_change=lambda view: None,
        start_warning_ms=15_000,
    )
    started = time.monotonic()
    with pytest.raises(ClusterMembershipError, match="InvalidSessionTimeout"):
        await membership.start()
    assert time.monotonic() - started < 10
