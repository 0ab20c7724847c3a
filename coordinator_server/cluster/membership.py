"""A node's membership in its cluster: an aiokafka consumer group whose assignment is the
ownership of the log's partitions.

The group id is the cluster id and every node subscribes to the log topic with the
`OwnershipAssignor`, so the broker's group coordinator does what a cluster needs: it notices
nodes that join, leave or stop heartbeating, and it has one of them (the leader) compute the
assignment that every node gets. Kafka only coordinates here: each assigned partition is
paused at once (the log's own loader reads the log, never this consumer), offsets are never
committed, and a small task keeps calling `getmany` so that the consumer never counts as
idle for longer than max.poll.interval.ms (which would make it leave the group).

The protocol is eager and the revocation lazy: before a rebalance aiokafka "revokes"
everything, and this does nothing about it; the node keeps serving until the new assignment
comes, and `on_change` then gets the new view (only when it differs from the last one). A
partition that moves is taken over by its new owner under Kafka's producer fencing, so a
node that serves a little longer than it owns never gets a write into the log.

The lease (`lease.py`): `lease_deadline_monotonic` is the time (time.monotonic) until which
the broker counts this node a member for sure. A node past it may have been evicted, and
should append nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from aiokafka import AIOKafkaConsumer
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import ConsumerStoppedError, KafkaError

from coordinator_client.kafka_metadata_request import forbid_auto_topic_creation
from coordinator_server.cluster.assignor import ClusterView, NodeClaim
from coordinator_server.cluster.codec import ClusterFormatError, decode_assignment
from coordinator_server.cluster.group_assignor import OwnershipAssignor
from coordinator_server.cluster.lease import MembershipLease
from coordinator_server.cluster.view import OwnershipView
from coordinator_server.storage.kafka.security import KafkaSecurity

__all__ = ["ClusterMembership", "ClusterMembershipError"]

log = logging.getLogger(__name__)

# The consumer never fetches (every partition is paused); these keep what it could buffer
# small if a fetch ever slipped in between an assignment and its pause.
_FETCH_MAX_BYTES: Final = 64 * 1024

# A join still waiting for its first assignment is reported after this, then at doubling
# intervals up to the maximum.
DEFAULT_START_WARNING_MS: Final = 15_000
_MAX_START_WARNING_INTERVAL_S: Final = 300.0


class ClusterMembershipError(Exception):
    """The node could not join its cluster: the log topic is missing, the broker refused
    the group's settings, or no assignment came in time."""


class ClusterMembership:
    """This node's place in its cluster (see the module's docstring).

    `start()` returns once the node has its first assignment (`view`); `stop()` leaves the
    group at once, so that a planned shutdown hands the node's partitions over without
    waiting for its session to expire. `on_change` is called, on the event loop, with every
    new view that differs from the last one in more than its generation."""

    def __init__(
        self,
        *,
        bootstrap_servers: str | Sequence[str],
        topic: str,
        cluster_id: str,
        node_id: int,
        host: str,
        port: int,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        on_change: Callable[[OwnershipView], None],
        on_lease_break: Callable[[], None] | None = None,
        kafka_security: KafkaSecurity | None = None,
        rebalance_timeout_ms: int | None = None,
        start_warning_ms: int = DEFAULT_START_WARNING_MS,
        client_id: str | None = None,
    ) -> None:
        if node_id < 0:
            raise ValueError(f"node id {node_id} is negative")
        if not 0 < port < 65536:
            raise ValueError(f"port {port} is not a TCP port")
        if not 0 < heartbeat_interval_ms < session_timeout_ms:
            raise ValueError(
                f"the heartbeat interval ({heartbeat_interval_ms} ms) must be positive and "
                f"shorter than the session timeout ({session_timeout_ms} ms)"
            )
        if rebalance_timeout_ms is None:
            rebalance_timeout_ms = session_timeout_ms
        if rebalance_timeout_ms < session_timeout_ms:
            # The lease counts on no rebalance removing the node sooner than a session would.
            raise ValueError(
                f"the rebalance timeout ({rebalance_timeout_ms} ms) must not be shorter than "
                f"the session timeout ({session_timeout_ms} ms)"
            )
        self._bootstrap_servers = bootstrap_servers
        self._topic = topic
        self._cluster_id = cluster_id
        self._node_id = node_id
        self._host = host
        self._port = port
        self._session_timeout_ms = session_timeout_ms
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._rebalance_timeout_ms = rebalance_timeout_ms
        self._start_warning_ms = start_warning_ms
        self._on_change = on_change
        self._on_lease_break = on_lease_break
        self._security = kafka_security or KafkaSecurity()
        self._client_id = client_id or f"coordinator-server-node-{node_id}"

        self._view = OwnershipView()
        self._lease = MembershipLease(session_timeout_ms / 1000)
        self._consumer: AIOKafkaConsumer | None = None
        self._poller: asyncio.Task[None] | None = None
        self._assigned: asyncio.Event | None = None
        self._error: KafkaError | None = None
        self._started = False
        self._stopped = False
        self._assignor = OwnershipAssignor(topic, self._claim, self._on_assignment)

    @property
    def view(self) -> OwnershipView:
        return self._view

    @property
    def node_id(self) -> int:
        return self._node_id

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def member_id(self) -> str | None:
        """The broker's id of this member (aiokafka's), or None before the first join."""
        coordinator = self._group_coordinator()
        member_id = getattr(coordinator, "member_id", "")
        return member_id or None

    @property
    def last_heartbeat_ok_monotonic(self) -> float | None:
        """When (time.monotonic) the last request that proved this node a member was sent: a
        Heartbeat or SyncGroup answered without an error. None when the node is no member."""
        return self._lease.last_proof

    @property
    def lease_deadline_monotonic(self) -> float | None:
        """Until when (time.monotonic) the broker counts this node a member for sure, or
        None when it may not count it at all."""
        return self._lease.deadline

    def holds_lease(self, now: float | None = None) -> bool:
        return self._lease.holds(time.monotonic() if now is None else now)

    async def start(self) -> None:
        """Join the cluster; return once the first assignment is in `view`. Raises
        ClusterMembershipError when the log topic does not exist (subscribing would have a
        broker that creates topics on demand create it with its defaults) or when the broker
        refuses the group; a slow broker is waited for, with WARNING lines."""
        if self._started:
            raise RuntimeError("a ClusterMembership starts once")
        self._started = True
        self._assigned = asyncio.Event()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self._bootstrap_servers,
            client_id=self._client_id,
            group_id=self._cluster_id,
            enable_auto_commit=False,
            session_timeout_ms=self._session_timeout_ms,
            heartbeat_interval_ms=self._heartbeat_interval_ms,
            rebalance_timeout_ms=self._rebalance_timeout_ms,
            partition_assignment_strategy=(self._assignor,),
            fetch_max_bytes=_FETCH_MAX_BYTES,
            max_partition_fetch_bytes=_FETCH_MAX_BYTES,
            **self._security.aiokafka_options(),
        )
        forbid_auto_topic_creation(consumer._client)
        self._consumer = consumer
        joining = asyncio.ensure_future(self._join(consumer))
        try:
            # A slow broker is waited for, as the log's load waits for it (aiokafka's
            # consumer tries again by itself): a WARNING after start_warning_ms, then at
            # doubling intervals. A refusal ends the join at once.
            waited = 0.0
            interval = self._start_warning_ms / 1000
            while True:
                done, _ = await asyncio.wait({joining}, timeout=interval)
                if done:
                    joining.result()
                    break
                waited += interval
                log.warning(
                    "node %d has had no assignment from cluster %r (group %r at %s) for "
                    "%.0f s; waiting%s",
                    self._node_id,
                    self._cluster_id,
                    self._cluster_id,
                    self._bootstrap_servers,
                    waited,
                    "" if self._error is None else f" (the last error: {self._error})",
                )
                interval = min(interval * 2, _MAX_START_WARNING_INTERVAL_S)
        except BaseException:
            joining.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await joining
            await self._close()
            raise
        log.info(
            "node %d joined cluster %r as member %s: generation %d, owns %s, stands by for %s",
            self._node_id,
            self._cluster_id,
            self.member_id,
            self._view.generation,
            sorted(self._view.mine_owned),
            sorted(self._view.mine_standby),
        )

    async def _join(self, consumer: AIOKafkaConsumer) -> None:
        await consumer.start()
        if self._topic not in await consumer.topics():
            raise ClusterMembershipError(
                f"the log topic {self._topic!r} does not exist: the log creates it, and the "
                "cluster membership starts after it"
            )
        self._watch_lease()
        # No rebalance listener: the revocation is lazy (see the module's docstring). A
        # pattern, not the topic's name: aiokafka asks for the metadata of subscribed topics
        # by name, and a broker that creates topics on demand would create the log topic
        # again, with its own defaults, after the log lost it; a pattern's metadata request
        # names no topic.
        consumer.subscribe(pattern=f"^{re.escape(self._topic)}$")
        poller = asyncio.create_task(self._poll(consumer), name=f"cluster-poll-{self._node_id}")
        self._poller = poller
        assert self._assigned is not None
        assigned = asyncio.create_task(self._assigned.wait())
        try:
            await asyncio.wait({poller, assigned}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            assigned.cancel()
        if not self._assigned.is_set():
            error = poller.exception()
            raise ClusterMembershipError(
                f"node {self._node_id} cannot join cluster {self._cluster_id!r} (group "
                f"{self._cluster_id!r} at {self._bootstrap_servers}): {error or 'stopped'}"
            ) from error

    async def stop(self) -> None:
        """Leave the group now (a LeaveGroup), so that the others take this node's
        partitions over at once; the lease ends first. A rebalance under way is waited for
        first (aiokafka ends its JoinGroup before it leaves): at most the rebalance timeout,
        when a member that died holds the rebalance up."""
        if self._stopped:
            return
        self._stopped = True
        self._lease.end()
        await self._close()
        log.info("node %d left cluster %r", self._node_id, self._cluster_id)

    async def _close(self) -> None:
        self._lease.end()
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            # Its error, if it ended with one, was logged and reported already.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await poller
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            # Leaves the group (aiokafka's close sends LeaveGroup when it has a generation).
            await consumer.stop()

    # The group's side.

    def _claim(self) -> NodeClaim:
        view = self._view
        return NodeClaim(
            node_id=self._node_id,
            host=self._host,
            port=self._port,
            owned=view.mine_owned,
            standby=view.mine_standby,
            generation=view.generation,
        )

    def _on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        consumer = self._consumer
        if consumer is None or self._stopped:
            # A rebalance that ended while the node leaves: nothing to take any more.
            return
        partitions = assignment.partitions()
        # Before anything can yield to the fetcher: this consumer never reads the log.
        consumer.pause(*partitions)
        for partition in partitions:
            consumer.seek(partition, 0)
        generation = getattr(self._group_coordinator(), "generation", -1)
        try:
            cluster_view, error = decode_assignment(assignment.user_data)
        except ClusterFormatError as format_error:
            cluster_view = ClusterView()
            error = f"the cluster's assignment could not be read: {format_error}"
        view = OwnershipView.of(generation, self._node_id, cluster_view, error)
        owned = {partition.partition for partition in partitions}
        if error is None and owned != view.mine_owned:
            # The leader's partitions and its view disagree: a bug, never a guess.
            view = OwnershipView.of(
                generation,
                self._node_id,
                cluster_view,
                f"the assignment gives partitions {sorted(owned)} but its view gives "
                f"{sorted(view.mine_owned)}",
            )
        previous, self._view = self._view, view
        if view.error is not None and view.error != previous.error:
            log.error("node %d of cluster %r: %s", self._node_id, self._cluster_id, view.error)
        if self._assigned is not None:
            self._assigned.set()
        if previous.same_ownership(view):
            return
        try:
            self._on_change(view)
        except Exception:
            log.exception("the cluster's change listener failed on generation %d", generation)

    async def _poll(self, consumer: AIOKafkaConsumer) -> None:
        """Keep the consumer polling (so it is never idle for max.poll.interval.ms) and take
        the errors the group reports through the poll (aiokafka raises them there)."""
        poll_ms = self._heartbeat_interval_ms
        while True:
            try:
                await consumer.getmany(timeout_ms=poll_ms)
            except ConsumerStoppedError:
                return
            except KafkaError as error:
                if str(error) != str(self._error):
                    log.error("node %d of cluster %r: %s", self._node_id, self._cluster_id, error)
                self._error = error
                if not self._view_assigned() and not error.retriable:
                    # The broker refuses the group's settings: no start can succeed.
                    raise
                await asyncio.sleep(poll_ms / 1000)
            except Exception:
                # The poll must go on, or the consumer would leave the group as idle.
                log.exception(
                    "node %d of cluster %r: the poll failed", self._node_id, self._cluster_id
                )
                await asyncio.sleep(poll_ms / 1000)

    def _view_assigned(self) -> bool:
        return self._assigned is not None and self._assigned.is_set()

    # The lease.

    def _group_coordinator(self) -> Any:
        return None if self._consumer is None else getattr(self._consumer, "_coordinator", None)

    def _watch_lease(self) -> None:
        """Watch the answers to the group's requests. aiokafka keeps when its last heartbeat
        succeeded to itself, so its one path to the group coordinator is wrapped."""
        coordinator = self._group_coordinator()
        send = getattr(coordinator, "_send_req", None)
        if send is None:
            raise ClusterMembershipError(
                "this aiokafka has no group coordinator's _send_req: the cluster's lease "
                "cannot be kept"
            )

        async def send_and_watch(request: Any) -> Any:
            sent = time.monotonic()
            response = await send(request)
            self._on_group_response(getattr(request, "API_KEY", None), response, sent)
            return response

        coordinator._send_req = send_and_watch

    def _on_group_response(self, api_key: int | None, response: Any, sent: float) -> None:
        lease = self._lease
        breaks = lease.breaks
        lease.on_response(api_key, getattr(response, "error_code", None), sent)
        if lease.breaks != breaks and self._on_lease_break is not None:
            # Before anything else runs on the loop: no request is served on the new lease
            # from a state kept across the break.
            self._on_lease_break()
