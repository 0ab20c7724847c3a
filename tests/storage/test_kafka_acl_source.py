"""The data cluster's ACLs as the coordinator's (`--authorizer kafka`), without a broker: a
DescribeAcls answer read as aiokafka encodes it, applied as a difference, bounded, refused
whole when it cannot be applied faithfully, and each failure logged once until it changes."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka.protocol.admin import DescribeAclsResponse_v1
from kafka_broker import free_port

from coordinator_server.authorizer.acls import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from coordinator_server.authorizer.standard import StandardAuthorizerData
from coordinator_server.storage.error_codes import CLUSTER_AUTHORIZATION_FAILED, SECURITY_DISABLED
from coordinator_server.storage.kafka.acl_source import (
    ACLS_PER_SLICE,
    DescribeAclsAnswer,
    KafkaAclsError,
    KafkaAclSource,
    described_acl,
    standard_acl,
)
from coordinator_server.storage.kafka.security import KafkaSecurity, Secret

LOGGER = "coordinator_server.storage.kafka.acl_source"
ALLOW = int(AclPermissionType.ALLOW)
DENY = int(AclPermissionType.DENY)
LITERAL = int(PatternType.LITERAL)
PREFIXED = int(PatternType.PREFIXED)
READ = int(AclOperation.READ)
WRITE = int(AclOperation.WRITE)
DESCRIBE = int(AclOperation.DESCRIBE)

Resource = tuple[int, str, int, list[tuple[str, str, int, int]]]


def answer(*resources: Resource, error_code: int = 0, error_message: str | None = None) -> bytes:
    """A DescribeAcls v1 answer's body, as aiokafka encodes one (a broker's is the same)."""
    return bytes(DescribeAclsResponse_v1(0, error_code, error_message, list(resources)).encode())


def group(name: str, *acls: tuple[str, str, int, int], pattern: int = LITERAL) -> Resource:
    return (int(ResourceType.GROUP), name, pattern, list(acls))


def group_acl(
    name: str,
    principal: str = "User:alice",
    operation: AclOperation = AclOperation.READ,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> StandardAcl:
    return StandardAcl(
        ResourceType.GROUP, name, PatternType.LITERAL, principal, "*", operation, permission
    )


class CountingData(StandardAuthorizerData):
    """The authorizer's data, counting what is added to and removed from its indexes."""

    def __init__(self) -> None:
        super().__init__()
        self.added: list[StandardAcl] = []
        self.removed: list[StandardAcl] = []

    def add(self, acl: StandardAcl) -> bool:
        self.added.append(acl)
        return super().add(acl)

    def remove(self, acl: StandardAcl) -> bool:
        self.removed.append(acl)
        return super().remove(acl)


def source_of(
    data: StandardAuthorizerData | None = None,
    *,
    max_acls: int = 100,
    changes: list[int] | None = None,
    security: KafkaSecurity | None = None,
    bootstrap: str = "data-cluster:9092",
    **options: int,
) -> KafkaAclSource:
    counted = changes if changes is not None else []
    return KafkaAclSource(
        bootstrap,
        data if data is not None else StandardAuthorizerData(),
        refresh_interval_ms=options.pop("refresh_interval_ms", 1000),
        max_acls=max_acls,
        security=security,
        on_change=lambda: counted.append(1),
        **options,
    )


def test_an_answer_is_read_as_aiokafka_encodes_it() -> None:
    payload = answer(
        group("payments", ("User:alice", "*", READ, ALLOW), ("User:bob", "10.0.0.1", READ, DENY)),
        (int(ResourceType.TOPIC), "orders-", PREFIXED, [("User:*", "*", WRITE, ALLOW)]),
        (int(ResourceType.USER), "alice", LITERAL, []),
        error_message=None,
    )
    read = DescribeAclsAnswer(payload)
    assert (read.error_code, read.error_message) == (0, None)
    assert list(read.acls()) == [
        (3, "payments", LITERAL, "User:alice", "*", READ, ALLOW),
        (3, "payments", LITERAL, "User:bob", "10.0.0.1", READ, DENY),
        (2, "orders-", PREFIXED, "User:*", "*", WRITE, ALLOW),
    ]
    refused = DescribeAclsAnswer(answer(error_code=SECURITY_DISABLED, error_message="none here"))
    assert (refused.error_code, refused.error_message) == (SECURITY_DISABLED, "none here")


def test_an_answer_cut_short_cannot_be_read() -> None:
    payload = answer(group("payments", ("User:alice", "*", READ, ALLOW)))
    with pytest.raises(ValueError, match="cut short"):
        DescribeAclsAnswer(payload[:5])
    with pytest.raises(ValueError, match="cut short"):
        list(DescribeAclsAnswer(payload[:-3]).acls())


def test_only_the_resource_types_the_coordinator_checks_are_kept() -> None:
    for resource_type in (
        ResourceType.TOPIC,
        ResourceType.GROUP,
        ResourceType.CLUSTER,
        ResourceType.TRANSACTIONAL_ID,
    ):
        acl = standard_acl((int(resource_type), "x", LITERAL, "User:a", "*", READ, ALLOW))
        assert acl is not None and acl.resource_type is resource_type
    for other in (ResourceType.DELEGATION_TOKEN, ResourceType.USER, 8, 0):
        assert standard_acl((int(other), "x", LITERAL, "User:a", "*", READ, ALLOW)) is None


@pytest.mark.parametrize(
    "codes",
    [
        (99, READ, ALLOW),  # a pattern type of a newer Kafka
        (LITERAL, 99, ALLOW),  # an operation of a newer Kafka
        (LITERAL, int(AclOperation.ANY), ALLOW),
        (LITERAL, READ, int(AclPermissionType.ANY)),
        (int(PatternType.MATCH), READ, DENY),
    ],
)
def test_an_acl_of_a_checked_type_that_cannot_be_read_is_an_error(
    codes: tuple[int, int, int],
) -> None:
    pattern, operation, permission = codes
    with pytest.raises(ValueError, match="cannot read"):
        standard_acl((3, "g", pattern, "User:a", "*", operation, permission))


async def test_an_answer_replaces_the_acls_by_their_difference() -> None:
    data = CountingData()
    changes: list[int] = []
    source = source_of(data, changes=changes)
    first = answer(
        group("a", ("User:alice", "*", READ, ALLOW)),
        group("b", ("User:alice", "*", READ, ALLOW)),
        (int(ResourceType.DELEGATION_TOKEN), "token", LITERAL, [("User:x", "*", DESCRIBE, ALLOW)]),
    )
    assert await source.apply_answer(first)
    assert set(data) == {group_acl("a"), group_acl("b")}
    assert changes == [1]

    # The same ACLs again: nothing touched, nobody told.
    data.added.clear()
    assert not await source.apply_answer(first)
    assert (data.added, data.removed, changes) == ([], [], [1])

    # One gone, one new: only those two touch the indexes.
    second = answer(
        group("b", ("User:alice", "*", READ, ALLOW), ("User:bob", "*", READ, DENY)),
    )
    assert await source.apply_answer(second)
    assert set(data) == {
        group_acl("b"),
        group_acl("b", "User:bob", permission=AclPermissionType.DENY),
    }
    assert data.removed == [group_acl("a")]
    assert data.added == [group_acl("b", "User:bob", permission=AclPermissionType.DENY)]
    assert changes == [1, 1]

    # An empty answer is the cluster's having no ACLs left: applied as any other.
    assert await source.apply_answer(answer())
    assert len(data) == 0
    assert changes == [1, 1, 1]


async def test_an_answer_past_the_bound_is_refused_whole_and_the_previous_acls_stay() -> None:
    data = StandardAuthorizerData()
    changes: list[int] = []
    source = source_of(data, max_acls=3, changes=changes)
    three = [("User:alice", "*", READ, ALLOW), ("User:bob", "*", READ, ALLOW)]
    assert await source.apply_answer(
        answer(
            group("a", *three),
            group("b", ("User:alice", "*", READ, ALLOW)),
            # Not kept, so not counted against the bound.
            (int(ResourceType.USER), "alice", LITERAL, [("User:x", "*", DESCRIBE, ALLOW)] * 5),
        )
    )
    kept = set(data)
    assert len(kept) == 3

    with pytest.raises(KafkaAclsError, match="more than 3 ACLs") as refused:
        await source.apply_answer(
            answer(group("a", *three), group("c", *three)),
        )
    assert refused.value.kind == "too many"
    assert refused.value.level == logging.ERROR
    assert set(data) == kept
    assert changes == [1]


async def test_an_acl_that_cannot_be_read_refuses_the_whole_answer() -> None:
    data = StandardAuthorizerData()
    source = source_of(data)
    await source.apply_answer(answer(group("a", ("User:alice", "*", READ, ALLOW))))
    with pytest.raises(KafkaAclsError, match="cannot apply") as refused:
        await source.apply_answer(
            answer(group("b", ("User:alice", "*", READ, ALLOW), ("User:bob", "*", 99, DENY)))
        )
    assert refused.value.kind == "unreadable"
    assert set(data) == {group_acl("a")}


async def test_a_refusal_says_what_to_fix() -> None:
    sasl = KafkaSecurity(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="coordinator",
        sasl_password=Secret("secret"),
    )
    source = source_of(security=sasl, bootstrap="kafka-1:9093")
    with pytest.raises(KafkaAclsError) as disabled:
        await source.apply_answer(answer(error_code=SECURITY_DISABLED))
    assert disabled.value.kind == "security disabled"
    assert "authorizer.class.name=" in str(disabled.value)
    assert "--authorizer acls" in str(disabled.value)
    with pytest.raises(KafkaAclsError) as unauthorized:
        await source.apply_answer(answer(error_code=CLUSTER_AUTHORIZATION_FAILED))
    assert (
        "kafka-acls.sh --bootstrap-server kafka-1:9093 --add --allow-principal "
        "User:coordinator --operation Describe --cluster"
    ) in str(unauthorized.value)
    with pytest.raises(KafkaAclsError, match="UNKNOWN_SERVER_ERROR: boom"):
        await source.apply_answer(answer(error_code=-1, error_message="boom"))
    with pytest.raises(KafkaAclsError, match="error 4242"):
        await source.apply_answer(answer(error_code=4242))
    # Without SASL the cluster sees an anonymous client.
    with pytest.raises(KafkaAclsError, match="allow-principal User:ANONYMOUS "):
        await source_of().apply_answer(answer(error_code=CLUSTER_AUTHORIZATION_FAILED))


async def test_a_large_answer_is_read_with_the_event_loop_free_between_slices() -> None:
    data = StandardAuthorizerData()
    source = source_of(data, max_acls=10 * ACLS_PER_SLICE)
    names = [f"group-{i}" for i in range(3 * ACLS_PER_SLICE)]
    payload = answer(*(group(name, ("User:alice", "*", READ, ALLOW)) for name in names))
    turns = 0
    done = False

    async def count_turns() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    counter = asyncio.ensure_future(count_turns())
    await asyncio.sleep(0)
    turns = 0
    assert await source.apply_answer(payload)
    done = True
    await counter
    assert len(data) == len(names)
    assert turns >= 3


async def test_each_failure_is_logged_once_until_it_changes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    data = StandardAuthorizerData()
    source = source_of(data, max_acls=2)
    answers = iter(
        [
            answer(group("a", ("User:alice", "*", READ, ALLOW))),
            answer(error_code=SECURITY_DISABLED),
            answer(error_code=SECURITY_DISABLED),
            answer(group("a", *[(f"User:{n}", "*", READ, ALLOW) for n in "xyz"])),
            answer(group("a", *[(f"User:{n}", "*", READ, ALLOW) for n in "xyz"])),
            answer(error_code=SECURITY_DISABLED),
            answer(group("b", ("User:alice", "*", READ, ALLOW))),
        ]
    )

    async def describe() -> bytes:
        return next(answers)

    monkeypatch.setattr(source, "_describe", describe)
    caplog.set_level(logging.INFO, logger=LOGGER)
    assert await source.refresh()
    outcomes = []
    for _ in range(5):
        try:
            await source.refresh()
        except KafkaAclsError as error:
            outcomes.append(error.kind)
    assert outcomes == [
        "security disabled",
        "security disabled",
        "too many",
        "too many",
        "security disabled",
    ]
    assert set(data) == {group_acl("a")}
    assert source.failure is not None and "SECURITY_DISABLED" in source.failure
    assert await source.refresh()
    assert source.failure is None
    assert set(data) == {group_acl("b")}
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == LOGGER]
    assert [level for level, _ in said] == ["ERROR", "ERROR", "ERROR", "INFO"]
    assert "SECURITY_DISABLED" in said[0][1] and "more than 2 ACLs" in said[1][1]
    assert "read again" in said[3][1] and "after 5 failed attempts" in said[3][1]
    assert (source.refreshes, source.refresh_failures) == (7, 5)


async def test_an_unreachable_cluster_is_retried_and_said_once_and_ready_waits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    source = source_of(
        bootstrap=f"127.0.0.1:{free_port()}",
        request_timeout_ms=500,
        retry_backoff_ms=10,
        retry_backoff_max_ms=40,
    )
    source.start()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(source.ready(), 1.0)
    assert not source.loaded
    assert source.refresh_failures >= 3
    assert source.failure is not None and "no connection to the data cluster" in source.failure
    said = [r for r in caplog.records if r.name == LOGGER]
    assert len(said) == 1 and said[0].levelname == "WARNING"
    assert "no ACLs read yet" in said[0].getMessage()
    waiting = asyncio.ensure_future(source.ready())
    await source.stop()
    with pytest.raises(KafkaAclsError, match="stopped before"):
        await waiting


def test_the_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="refresh_interval_ms"):
        source_of(refresh_interval_ms=0)
    with pytest.raises(ValueError, match="max_acls"):
        source_of(max_acls=0)
    with pytest.raises(ValueError, match="retry_backoff_ms"):
        source_of(retry_backoff_ms=2000, retry_backoff_max_ms=1000)


async def test_acls_the_data_held_before_the_first_answer_are_replaced_too() -> None:
    data = StandardAuthorizerData()
    data.add(group_acl("old"))
    data.add(group_acl("kept"))
    source = source_of(data)
    assert await source.apply_answer(answer(group("kept", ("User:alice", "*", READ, ALLOW))))
    assert set(data) == {group_acl("kept")}


def test_an_acl_read_back_from_its_codes_is_itself() -> None:
    acl = StandardAcl(
        ResourceType.TRANSACTIONAL_ID,
        "tx-",
        PatternType.PREFIXED,
        "User:alice",
        "10.0.0.1",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )
    assert standard_acl(described_acl(acl)) == acl
