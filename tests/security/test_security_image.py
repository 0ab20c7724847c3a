"""Every node's SecurityImage and its loader: only committed security records of partition 0
reach it, on the memory and SQLite logs; the change listeners hear each change; a position
the log lost is read again from the start and the image replaced whole; failures are
retried, never the end of the reader."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from wire_client import until

from coordinator_server.authentication.sasl_server import ScramCredentials
from coordinator_server.authorizer.acls import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from coordinator_server.authorizer.standard import StandardAuthorizerData
from coordinator_server.records import (
    AclKey,
    CoordinatorRecord,
    ScramCredentialValue,
    encode_record,
    new_acl_record,
    new_acl_tombstone_record,
    new_offset_commit_record,
    new_scram_credential_record,
    new_scram_credential_tombstone_record,
)
from coordinator_server.security.image import SecurityImage, SecurityImageBuilder
from coordinator_server.security.image_loader import SecurityImageLoader
from coordinator_server.storage import CoordinatorLog, InMemoryLog, LoadError, SqliteLog

pytestmark = pytest.mark.timeout(60)


def acl_key(name: str, principal: str = "User:alice") -> AclKey:
    return AclKey(ResourceType.GROUP, name, PatternType.LITERAL, principal, "*", 3, 3)


def acl(name: str, principal: str = "User:alice") -> StandardAcl:
    return StandardAcl(
        ResourceType.GROUP,
        name,
        PatternType.LITERAL,
        principal,
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )


CREDENTIAL = ScramCredentialValue(b"salt", b"stored", b"server", 4096)


def names(image: SecurityImage) -> list[str]:
    return sorted(a.resource_name for a in image.acls)


def test_the_image_applies_records_in_order_and_says_whether_it_changed() -> None:
    image = SecurityImage()
    assert image.apply([new_acl_record(acl_key("g1")), new_acl_record(acl_key("g2"))])
    assert not image.apply([new_acl_record(acl_key("g1"))])
    assert image.apply([new_acl_tombstone_record(acl_key("g1"))])
    assert not image.apply([new_acl_tombstone_record(acl_key("g1"))])
    assert names(image) == ["g2"]
    assert image.apply([new_scram_credential_record("bob", 2, CREDENTIAL)])
    assert not image.apply([new_scram_credential_record("bob", 2, CREDENTIAL)])
    # Other records, and an ACL no ACL can be, change nothing.
    assert not image.apply(
        [
            new_offset_commit_record("g", "t", 0, 1, -1, "", 1),
            new_acl_record(AclKey(0, "x", 3, "User:a", "*", 3, 3)),
        ]
    )
    credentials: ScramCredentials = image
    found = credentials.scram_credential("bob", "SCRAM-SHA-512")
    assert found is not None and found.stored_key == b"stored" and found.iterations == 4096
    assert credentials.scram_credential("bob", "SCRAM-SHA-256") is None
    assert credentials.scram_credential("bob", "PLAIN") is None
    assert image.scram_users() == {"bob": ["SCRAM-SHA-512"]}
    assert image.apply([new_scram_credential_tombstone_record("bob", 2)])
    assert credentials.scram_credential("bob", "SCRAM-SHA-512") is None


def test_an_image_replaced_changes_its_authorizer_data_in_place() -> None:
    data = StandardAuthorizerData(["User:admin"])
    image = SecurityImage(data)
    image.apply([new_acl_record(acl_key("stale")), new_acl_record(acl_key("kept"))])
    built = SecurityImageBuilder()
    for record in (
        new_acl_record(acl_key("kept")),
        new_acl_record(acl_key("new")),
        new_acl_record(acl_key("gone")),
        new_acl_tombstone_record(acl_key("gone")),
        new_scram_credential_record("carol", 1, CREDENTIAL),
    ):
        built.apply(record)
    assert image.replace(built)
    assert image.acls is data and names(image) == ["kept", "new"]
    assert image.scram_users() == {"carol": ["SCRAM-SHA-256"]}
    assert not image.replace(built)


@pytest.fixture(params=["memory", "sqlite"])
async def log(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CoordinatorLog]:
    opened: CoordinatorLog = (
        InMemoryLog(3) if request.param == "memory" else SqliteLog(tmp_path / "log.db", 3)
    )
    await opened.start()
    yield opened
    await opened.close()


async def append(log: CoordinatorLog, partition: int, *records: CoordinatorRecord) -> None:
    await log.writer.append(partition, [encode_record(record) for record in records])


def loader_of(log: CoordinatorLog, image: SecurityImage | None = None) -> SecurityImageLoader:
    assert log.follower is not None
    return SecurityImageLoader(
        image or SecurityImage(), log.follower, max_wait_ms=50, max_bytes=1 << 20, backoff_s=0.01
    )


async def test_the_loader_keeps_the_image_to_the_committed_security_records(
    log: CoordinatorLog,
) -> None:
    await append(
        log,
        0,
        new_offset_commit_record("g", "t", 0, 1, -1, "", 1),
        new_acl_record(acl_key("g1")),
        new_scram_credential_record("bob", 1, CREDENTIAL),
    )
    # Another partition's records are none of the image's business.
    await append(log, 1, new_acl_record(acl_key("elsewhere")))
    loader = loader_of(log)
    changes: list[list[str]] = []
    loader.add_listener(lambda: changes.append(names(loader.image)))
    loader.start()
    try:
        await asyncio.wait_for(loader.wait_caught_up(), 10)
        assert names(loader.image) == ["g1"]
        assert loader.image.scram_users() == {"bob": ["SCRAM-SHA-256"]}
        assert changes == [["g1"]]
        await append(
            log,
            0,
            new_acl_record(acl_key("g2")),
            new_offset_commit_record("g", "t", 0, 2, -1, "", 2),
            new_acl_tombstone_record(acl_key("g1")),
        )
        await until(lambda: names(loader.image) == ["g2"], timeout=10)
        assert changes[-1] == ["g2"]
        # A round that changes nothing tells nobody.
        told = len(changes)
        await append(log, 0, new_offset_commit_record("g", "t", 0, 3, -1, "", 3))
        await until(lambda: loader.position == 7, timeout=10)
        assert len(changes) == told
    finally:
        await loader.stop()


async def test_a_write_not_committed_is_not_in_the_image() -> None:
    log = InMemoryLog(1, auto_commit=False)
    await log.start()
    loader = loader_of(log)
    loader.start()
    try:
        await log.writer.append(0, [encode_record(new_acl_record(acl_key("g1")))])
        await asyncio.wait_for(loader.wait_caught_up(), 10)
        await asyncio.sleep(0.2)
        assert names(loader.image) == []
        log.writer.commit(0)
        await until(lambda: names(loader.image) == ["g1"], timeout=10)
    finally:
        await loader.stop()
        await log.close()


async def test_a_lost_position_rebuilds_the_image_from_the_start() -> None:
    log = InMemoryLog(1)
    await log.start()
    await append(log, 0, new_acl_record(acl_key("g1")))
    image = SecurityImage()
    loader = loader_of(log, image)
    loader.start()
    try:
        await asyncio.wait_for(loader.wait_caught_up(), 10)
        # What the log no longer says (as after a compaction that dropped a tombstone the
        # reader never saw): the image must not keep it once it reads from the start again.
        image.apply([new_acl_record(acl_key("stale"))])
        changes: list[list[str]] = []
        loader.add_listener(lambda: changes.append(names(image)))
        log.follower.inject_follow_failure(0, "offset out of range", lost=True)
        await append(log, 0, new_acl_record(acl_key("g2")))
        await until(lambda: names(image) == ["g1", "g2"], timeout=10)
        assert loader.restarts == 1
        # Replaced once, whole: never a partial set of ACLs in between.
        assert changes == [["g1", "g2"]]
    finally:
        await loader.stop()
        await log.close()


async def test_failures_are_retried_and_logged_without_ending_the_reader(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = InMemoryLog(1)
    await log.start()
    await append(log, 0, new_acl_record(acl_key("g1")))
    log.follower.inject_follow_failure(0, "broker down", count=3)
    loader = loader_of(log)
    with caplog.at_level(logging.WARNING, "coordinator_server.security.image_loader"):
        loader.start()
        try:
            await asyncio.wait_for(loader.wait_caught_up(), 10)
            assert names(loader.image) == ["g1"]
            assert loader.failures == 3
            # Logged the 1st and 2nd time, not the 3rd.
            assert sum("broker down" in r.getMessage() for r in caplog.records) == 2
        finally:
            await loader.stop()
            await log.close()


class FailingFollower:
    """A follower that raises for its first rounds, then reads `log`."""

    def __init__(self, log: InMemoryLog, failures: int) -> None:
        self.log = log
        self.failures = failures

    async def follow(self, positions: dict[int, int | None], sink: Callable[..., None], **kw: int):  # type: ignore[no-untyped-def]
        if self.failures:
            self.failures -= 1
            raise LoadError("the log is not running")
        return await self.log.follower.follow(positions, sink, **kw)


async def test_a_follower_that_raises_is_asked_again_after_a_back_off() -> None:
    log = InMemoryLog(1)
    await log.start()
    await append(log, 0, new_acl_record(acl_key("g1")))
    loader = SecurityImageLoader(
        SecurityImage(), FailingFollower(log, 2), max_wait_ms=50, max_bytes=1024, backoff_s=0.01
    )
    loader.start()
    try:
        await asyncio.wait_for(loader.wait_caught_up(), 10)
        assert names(loader.image) == ["g1"] and loader.failures == 2
    finally:
        await loader.stop()
        await log.close()


async def test_a_listener_that_fails_is_logged_and_the_others_still_hear(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = InMemoryLog(1)
    await log.start()
    loader = loader_of(log)
    heard: list[int] = []

    def broken() -> None:
        raise RuntimeError("broken listener")

    loader.add_listener(broken)
    loader.add_listener(lambda: heard.append(1))
    loader.start()
    try:
        await append(log, 0, new_acl_record(acl_key("g1")))
        await until(lambda: heard == [1], timeout=10)
        assert any("listener" in r.getMessage() for r in caplog.records)
        await append(log, 0, new_acl_record(acl_key("g2")))
        await until(lambda: heard == [1, 1], timeout=10)
    finally:
        await loader.stop()
        await log.close()


async def test_once_caught_up_a_round_per_period_however_busy_the_partition(
    log: CoordinatorLog,
) -> None:
    """The groups' commits share partition 0: the reader is not woken by each of them."""
    assert log.follower is not None
    loader = SecurityImageLoader(
        SecurityImage(), log.follower, max_wait_ms=200, max_bytes=1 << 20, backoff_s=0.01
    )
    loader.start()
    try:
        await asyncio.wait_for(loader.wait_caught_up(), 10)
        rounds = loader.rounds
        started = asyncio.get_running_loop().time()
        for offset in range(100):
            await append(log, 0, new_offset_commit_record("g", "t", 0, offset, -1, "", 1))
            await asyncio.sleep(0.005)
        elapsed = asyncio.get_running_loop().time() - started
        # A round per 200 ms (and the one under way): not a round per commit.
        assert loader.rounds - rounds <= elapsed / 0.2 + 2, (loader.rounds - rounds, elapsed)
    finally:
        await loader.stop()


async def test_settled_is_done_once_the_image_holds_what_was_committed_before(
    log: CoordinatorLog,
) -> None:
    """A write's answer waits for it: the client then sees its change on this node, though
    the next round would be a whole period away."""
    assert log.follower is not None
    loader = SecurityImageLoader(
        SecurityImage(), log.follower, max_wait_ms=900, max_bytes=1 << 20, backoff_s=0.01
    )
    loader.start()
    try:
        await asyncio.wait_for(loader.wait_caught_up(), 10)
        await asyncio.sleep(0.05)
        await append(log, 0, new_acl_record(acl_key("g1")))
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(loader.settled(timeout_s=5), 5)
        assert names(loader.image) == ["g1"]
        assert asyncio.get_running_loop().time() - started < 0.5
    finally:
        await loader.stop()


async def test_settled_gives_up_waiting_after_its_timeout() -> None:
    log = InMemoryLog(1)
    await log.start()
    assert log.follower is not None
    loader = SecurityImageLoader(
        SecurityImage(), log.follower, max_wait_ms=50, max_bytes=1 << 20, backoff_s=0.01
    )
    try:
        # The reader never started: nothing reads, the waiter ends at its timeout.
        waiter = loader.settled(timeout_s=0.1)
        await asyncio.wait_for(waiter, 2)
        assert waiter.done()
    finally:
        await loader.stop()
        await log.close()
