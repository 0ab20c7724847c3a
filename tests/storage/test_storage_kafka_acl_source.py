"""`--authorizer kafka` against Apache Kafka with its StandardAuthorizer on: the ACLs written
on the data cluster are the coordinator's (its decisions follow them), an ACL deleted there
is gone after a refresh, the change listener runs only on a change, and a cluster that
cannot answer (paused, refusing our principal, without an authorizer) is said once while
the ACLs read before stay in force."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import pytest
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.admin import CreateAclsRequest, DeleteAclsRequest
from apache_kafka import SASL_PASSWORD, SASL_USERNAME, ApacheKafkaBroker

from coordinator_server.authorizer.acls import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from coordinator_server.authorizer.standard import StandardAuthorizerData
from coordinator_server.runtime.api import RequestContext
from coordinator_server.service.authorization import RequestAuthorizer
from coordinator_server.storage.kafka.acl_source import KafkaAclsError, KafkaAclSource
from coordinator_server.storage.kafka.security import KafkaSecurity, Secret

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

LOGGER = "coordinator_server.storage.kafka.acl_source"
# Kafka's authorizer for KRaft; the PLAINTEXT listeners (clients, the broker's own and the
# controller's) are anonymous, and a super user, so that the test may write ACLs.
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED


@pytest.fixture(scope="module")
def authorizing_broker() -> Iterator[ApacheKafkaBroker]:
    """A broker with Kafka's StandardAuthorizer, and a SASL_PLAINTEXT listener whose user is
    no super user. ACLs are cluster-wide: each test names its own resources."""
    with ApacheKafkaBroker(
        config=AUTHORIZER, sasl_ssl_listener=False, sasl_plaintext_listener=True
    ) as broker:
        yield broker


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:10]


@asynccontextmanager
async def admin_client(bootstrap: str) -> AsyncIterator[AIOKafkaClient]:
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        yield client
    finally:
        await client.close()


async def create_acls(bootstrap: str, *acls: StandardAcl) -> None:
    """CreateAcls on the broker (aiokafka's admin client has no create_acls)."""
    async with admin_client(bootstrap) as client:
        node = client.get_random_node()
        for acl in acls:
            response = await client.send(
                node,
                CreateAclsRequest(
                    int(acl.resource_type),
                    acl.resource_name,
                    int(acl.pattern_type),
                    acl.principal,
                    acl.host,
                    int(acl.operation),
                    int(acl.permission),
                ),
            )
            assert [error for error, _ in response.creation_responses] == [0], response


async def delete_acls(bootstrap: str, *acls: StandardAcl) -> None:
    async with admin_client(bootstrap) as client:
        node = client.get_random_node()
        for acl in acls:
            response = await client.send(
                node,
                DeleteAclsRequest(
                    int(acl.resource_type),
                    acl.resource_name,
                    int(acl.pattern_type),
                    acl.principal,
                    acl.host,
                    int(acl.operation),
                    int(acl.permission),
                ),
            )
            [(error, _, matching)] = response.filter_responses
            assert (error, len(matching)) == (0, 1), response


def acl(
    resource_type: ResourceType,
    name: str,
    principal: str,
    operation: AclOperation,
    permission: AclPermissionType = ALLOW,
    pattern_type: PatternType = LITERAL,
) -> StandardAcl:
    return StandardAcl(resource_type, name, pattern_type, principal, "*", operation, permission)


async def wait_until(condition: Callable[[], bool], timeout_s: float = 20.0) -> float:
    """Seconds until `condition()` held."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise AssertionError("not within the time")
        await asyncio.sleep(0.005)
    return time.monotonic() - started


def ctx(principal: str, host: str = "/10.0.0.1") -> RequestContext:
    return RequestContext(client_id="test", client_host=host, principal=principal)


async def test_the_clusters_acls_are_the_coordinators_and_its_decisions_follow_them(
    authorizing_broker: ApacheKafkaBroker, unique: str
) -> None:
    alice, bob = f"User:alice-{unique}", f"User:bob-{unique}"
    group = f"payments-{unique}"
    written = {
        acl(ResourceType.GROUP, group, alice, AclOperation.READ),
        acl(ResourceType.GROUP, group, bob, AclOperation.READ, DENY),
        acl(ResourceType.TOPIC, f"orders-{unique}-", alice, AclOperation.WRITE, ALLOW, PREFIXED),
        acl(ResourceType.TRANSACTIONAL_ID, f"tx-{unique}", alice, AclOperation.WRITE),
        acl(ResourceType.CLUSTER, CLUSTER_NAME, alice, AclOperation.IDEMPOTENT_WRITE),
    }
    skipped = acl(ResourceType.DELEGATION_TOKEN, f"token-{unique}", alice, AclOperation.DESCRIBE)
    await create_acls(authorizing_broker.bootstrap, *written, skipped)

    data = StandardAuthorizerData()
    authorizer = RequestAuthorizer(data)
    source = KafkaAclSource(
        authorizing_broker.bootstrap,
        data,
        refresh_interval_ms=100,
        max_acls=10_000,
        on_change=authorizer.acls_changed,
    )
    # Before the first read nothing is allowed (no ACL: denied by default).
    assert not authorizer.allowed(ctx(alice), AclOperation.READ, ResourceType.GROUP, group, api="x")
    source.start()
    try:
        await asyncio.wait_for(source.ready(), 30)
        # CreateAcls answers once the controller committed the ACLs; the broker's authorizer
        # has them a moment later.
        await wait_until(lambda: written <= set(data))
        assert skipped not in set(data)
        assert {a.resource_type for a in data} <= {
            ResourceType.TOPIC,
            ResourceType.GROUP,
            ResourceType.CLUSTER,
            ResourceType.TRANSACTIONAL_ID,
        }

        # The decision cache was dropped when the ACLs came: Kafka's rule over them now.
        assert authorizer.allowed(ctx(alice), AclOperation.READ, ResourceType.GROUP, group, api="x")
        assert authorizer.allowed(
            ctx(alice), AclOperation.DESCRIBE, ResourceType.GROUP, group, api="x"
        )
        assert not authorizer.allowed(
            ctx(bob), AclOperation.READ, ResourceType.GROUP, group, api="x"
        )
        assert authorizer.allowed(
            ctx(alice), AclOperation.WRITE, ResourceType.TOPIC, f"orders-{unique}-eu", api="x"
        )
        assert not authorizer.allowed(
            ctx(alice), AclOperation.WRITE, ResourceType.TOPIC, f"other-{unique}", api="x"
        )
        assert authorizer.allowed(
            ctx(alice), AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, f"tx-{unique}", api="x"
        )
        assert authorizer.allowed_cluster(ctx(alice), AclOperation.IDEMPOTENT_WRITE, api="x")
    finally:
        await source.stop()


async def test_a_deleted_acl_is_gone_after_a_refresh_and_the_listener_runs_only_on_change(
    authorizing_broker: ApacheKafkaBroker, unique: str
) -> None:
    bootstrap = authorizing_broker.bootstrap
    alice = f"User:alice-{unique}"
    group = f"audit-{unique}"
    reads = acl(ResourceType.GROUP, group, alice, AclOperation.READ)
    data = StandardAuthorizerData()
    authorizer = RequestAuthorizer(data)
    changes: list[float] = []

    def changed() -> None:
        changes.append(time.monotonic())
        authorizer.acls_changed()

    interval_ms = 200
    source = KafkaAclSource(
        bootstrap, data, refresh_interval_ms=interval_ms, max_acls=10_000, on_change=changed
    )
    source.start()
    try:
        await asyncio.wait_for(source.ready(), 30)
        # Nothing changes on the cluster: refreshes go on, the listener is not called.
        await asyncio.sleep(0.05)
        before, refreshes = len(changes), source.refreshes
        await wait_until(lambda: source.refreshes >= refreshes + 4)
        assert len(changes) == before

        delays = []
        phases = random.Random(unique)
        for _ in range(3):
            # Written at any moment between two refreshes.
            await asyncio.sleep(phases.uniform(0, interval_ms / 1000))
            await create_acls(bootstrap, reads)
            written = time.monotonic()
            await wait_until(lambda: reads in set(data))
            delays.append(time.monotonic() - written)
            assert authorizer.allowed(
                ctx(alice), AclOperation.READ, ResourceType.GROUP, group, api="x"
            )
            calls = len(changes)
            await asyncio.sleep(phases.uniform(0, interval_ms / 1000))
            await delete_acls(bootstrap, reads)
            deleted = time.monotonic()
            await wait_until(lambda: reads not in set(data))
            delays.append(time.monotonic() - deleted)
            assert len(changes) == calls + 1
            assert not authorizer.allowed(
                ctx(alice), AclOperation.READ, ResourceType.GROUP, group, api="x"
            )
        # Within an interval and a request, whatever the moment of the write.
        assert max(delays) < interval_ms / 1000 + 1.0, delays
        logging.getLogger(__name__).info(
            "refresh delay over %d writes: mean %.0f ms, max %.0f ms (interval %d ms)",
            len(delays),
            1000 * sum(delays) / len(delays),
            1000 * max(delays),
            interval_ms,
        )
    finally:
        await source.stop()


async def test_a_principal_without_describe_on_the_cluster_is_told_what_to_grant(
    authorizing_broker: ApacheKafkaBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    sasl = KafkaSecurity(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username=SASL_USERNAME,
        sasl_password=Secret(SASL_PASSWORD),
    )
    bootstrap = authorizing_broker.sasl_plaintext_bootstrap
    source = KafkaAclSource(
        bootstrap,
        StandardAuthorizerData(),
        refresh_interval_ms=100,
        max_acls=10_000,
        security=sasl,
    )
    describe = acl(
        ResourceType.CLUSTER, CLUSTER_NAME, f"User:{SASL_USERNAME}", AclOperation.DESCRIBE
    )
    granted = False
    try:
        for _ in range(2):
            with pytest.raises(KafkaAclsError) as refused:
                await source.refresh()
            assert refused.value.kind == "cluster authorization failed"
        assert (
            f"kafka-acls.sh --bootstrap-server {bootstrap} --add --allow-principal "
            f"User:{SASL_USERNAME} --operation Describe --cluster"
        ) in str(refused.value)
        await create_acls(authorizing_broker.bootstrap, describe)
        granted = True
        await refresh_until(source, lambda: source.failure is None)
        assert describe in set(source.data)
        said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == LOGGER]
        assert [level for level, _ in said] == ["ERROR", "INFO"]
        assert "CLUSTER_AUTHORIZATION_FAILED" in said[0][1]
    finally:
        await source.stop()
        if granted:
            await delete_acls(authorizing_broker.bootstrap, describe)


@pytest.mark.slow
async def test_a_cluster_paused_or_without_an_authorizer_leaves_the_acls_read_before(
    unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    broker = ApacheKafkaBroker(config=AUTHORIZER, sasl_ssl_listener=False)
    await asyncio.to_thread(broker.start)
    alice = f"User:alice-{unique}"
    group = f"billing-{unique}"
    reads = acl(ResourceType.GROUP, group, alice, AclOperation.READ)
    data = StandardAuthorizerData()
    authorizer = RequestAuthorizer(data)
    source = KafkaAclSource(
        broker.bootstrap,
        data,
        refresh_interval_ms=1000,
        max_acls=10_000,
        on_change=authorizer.acls_changed,
        request_timeout_ms=1000,
    )

    def alice_reads() -> bool:
        return authorizer.allowed(ctx(alice), AclOperation.READ, ResourceType.GROUP, group, api="x")

    def said_since(mark: int) -> list[tuple[str, str]]:
        return [(r.levelname, r.getMessage()) for r in caplog.records[mark:] if r.name == LOGGER]

    try:
        await create_acls(broker.bootstrap, reads)
        await refresh_until(source, lambda: reads in set(data))
        assert alice_reads()

        # Paused: no answer, said once, the ACLs stay.
        mark = len(caplog.records)
        await asyncio.to_thread(broker.pause)
        try:
            for _ in range(2):
                with pytest.raises(KafkaAclsError) as unanswered:
                    await source.refresh()
                assert unanswered.value.kind == "timeout"
        finally:
            broker.resume()
        [(level, message)] = said_since(mark)
        assert level == "WARNING" and "did not answer DescribeAcls" in message
        assert "the ACLs in force were read" in message
        assert alice_reads() and reads in set(data)
        await refresh_until(source, lambda: source.failure is None)
        assert "read again" in said_since(mark)[-1][1]

        # Without an authorizer the cluster answers SECURITY_DISABLED: said once, the ACLs
        # stay.
        mark = len(caplog.records)
        await asyncio.to_thread(broker.restart, {"authorizer.class.name": ""})
        await refresh_until(source, lambda: "SECURITY_DISABLED" in (source.failure or ""))
        with pytest.raises(KafkaAclsError) as disabled:
            await source.refresh()
        assert disabled.value.kind == "security disabled"
        assert (
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            in str(disabled.value)
        )
        assert alice_reads() and reads in set(data)
        assert source.loaded
        [said] = [m for level, m in said_since(mark) if "SECURITY_DISABLED" in m]
        assert "no authorizer" in said
    finally:
        await source.stop()
        await asyncio.to_thread(broker.stop)


async def refresh_until(
    source: KafkaAclSource, condition: Callable[[], bool], timeout_s: float = 30.0
) -> None:
    """Refresh (failures or not) until `condition()` holds."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(KafkaAclsError):
            await source.refresh()
        if condition():
            return
        assert time.monotonic() < deadline, source.failure
        await asyncio.sleep(0.05)


async def test_a_node_with_authorizer_kafka_decides_by_the_clusters_acls(
    authorizing_broker: ApacheKafkaBroker, unique: str
) -> None:
    """The wiring of `--authorizer kafka`: a node's requests are decided by the data
    cluster's ACLs (read before the node serves), and its own ACL writes are refused."""
    from wire_client import WireClient

    from coordinator_server.app import CoordinatorApp
    from coordinator_server.config import CoordinatorConfig

    allowed, other = f"wired-{unique}", f"wired-other-{unique}"
    await create_acls(
        authorizing_broker.bootstrap,
        acl(ResourceType.GROUP, allowed, "User:ANONYMOUS", AclOperation.READ),
    )
    config = CoordinatorConfig(
        port=0,
        metrics_port=-1,
        bootstrap_servers=authorizing_broker.bootstrap,
        offsets_topic=f"coordinator-{unique}",
        offsets_topic_partitions=2,
        offsets_topic_replication_factor=1,
        cluster="off",
        transactions="off",
        authorizer="kafka",
        authorizer_kafka_refresh_interval_ms=100,
    )
    app = CoordinatorApp(config)
    await asyncio.wait_for(app.start(), 60)
    try:
        assert app.address is not None and app.security.kafka_acls is not None
        await wait_until(lambda: len(app.security.kafka_acls.data) > 0)
        wire = await WireClient.connect(*app.address)
        try:
            # Over PLAINTEXT the client is User:ANONYMOUS, allowed on one group only.
            answer = await wire.call(9, {"groups": [{"group_id": allowed}, {"group_id": other}]})
            codes = {g["group_id"]: g["error_code"] for g in answer["groups"]}
            assert codes == {allowed: 0, other: 30}
            created = await wire.call(
                30,
                {
                    "creations": [
                        {
                            "resource_type": 3,
                            "resource_name": other,
                            "principal": "User:ANONYMOUS",
                            "host": "*",
                            "operation": 3,
                            "permission_type": 3,
                        }
                    ]
                },
            )
            # Cluster ALTER is checked first, against the data cluster's ACLs: not granted.
            assert created["results"][0]["error_code"] == 31
        finally:
            await wire.close()
    finally:
        await app.shutdown()
