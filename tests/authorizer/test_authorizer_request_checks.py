"""The request authorizer's checks beyond one resource: the names a request may not touch
(Kafka's `filterByAuthorized`, its log line counting the references), the decision by
resource type, cached and forgotten with the others, and a resource's authorized operations
as Kafka's bit field."""

from __future__ import annotations

import logging

import pytest

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
from coordinator_server.service.authorization import AUTHORIZER_LOGGER, RequestAuthorizer

Op = AclOperation
TOPIC = ResourceType.TOPIC
ALICE = RequestContext("client", "/10.0.0.1", "User:alice")


def allow(resource_type: ResourceType, name: str, operation: AclOperation) -> StandardAcl:
    return StandardAcl(
        resource_type,
        name,
        PatternType.LITERAL,
        "User:alice",
        "*",
        operation,
        AclPermissionType.ALLOW,
    )


def test_denied_names_each_name_once_and_logs_how_often_the_request_named_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = StandardAuthorizerData()
    data.add(allow(TOPIC, "a", Op.READ))
    authorizer = RequestAuthorizer(data)
    with caplog.at_level(logging.INFO, logger=AUTHORIZER_LOGGER):
        denied = authorizer.denied(
            ALICE, Op.READ, TOPIC, ["a", "b", "c", "b", "a", "b"], api="OffsetCommit"
        )
        by_count = authorizer.denied(ALICE, Op.READ, TOPIC, {"d": 7}, api="AddPartitionsToTxn")
        quiet = authorizer.denied(ALICE, Op.READ, TOPIC, ["e"], api="X", log_denied=False)
    assert (denied, by_count, quiet) == ({"b", "c"}, {"d"}, {"e"})
    assert [
        record.getMessage().split("on resource = ")[1].split(" based on")[0]
        for record in caplog.records
    ] == [
        "Topic:LITERAL:b for request = OffsetCommit with resourceRefCount = 3",
        "Topic:LITERAL:c for request = OffsetCommit with resourceRefCount = 1",
        "Topic:LITERAL:d for request = AddPartitionsToTxn with resourceRefCount = 7",
    ]
    assert authorizer.denials == {"OffsetCommit": 2, "AddPartitionsToTxn": 1, "X": 1}


def test_the_decision_by_resource_type_is_cached_until_the_acls_change() -> None:
    data = StandardAuthorizerData()
    authorizer = RequestAuthorizer(data)
    writes = allow(TOPIC, "orders", Op.WRITE)
    assert not authorizer.allowed_by_resource_type(ALICE, Op.WRITE, TOPIC, api="InitProducerId")
    data.add(writes)
    assert not authorizer.allowed_by_resource_type(ALICE, Op.WRITE, TOPIC, api="InitProducerId")
    authorizer.acls_changed()
    assert authorizer.allowed_by_resource_type(ALICE, Op.WRITE, TOPIC, api="InitProducerId")
    assert authorizer.denials == {"InitProducerId": 2}


def test_authorized_operations_is_kafkas_bit_field_of_what_is_allowed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = StandardAuthorizerData()
    data.add(allow(ResourceType.CLUSTER, CLUSTER_NAME, Op.ALTER))
    authorizer = RequestAuthorizer(data)
    with caplog.at_level(logging.INFO, logger=AUTHORIZER_LOGGER):
        field = authorizer.authorized_operations(
            ALICE,
            ResourceType.CLUSTER,
            CLUSTER_NAME,
            (Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION),
            api="DescribeCluster",
        )
    # ALTER, and DESCRIBE which it implies: bits 7 and 8.
    assert field == (1 << 7) | (1 << 8)
    assert caplog.records == []
