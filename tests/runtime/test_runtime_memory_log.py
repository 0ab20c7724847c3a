"""The in-memory log's test controls (its CoordinatorLog contract is tested in storage/)."""

from __future__ import annotations

import asyncio

import pytest

from coordinator_server.storage.api import AppendError, LoadError
from coordinator_server.storage.memory import InMemoryLog

A = (b"a", b"1")
B = (b"b", None)
C = (b"c", b"3")


async def load(log: InMemoryLog, partition: int) -> list[tuple[int, bytes, bytes | None]]:
    loaded: list[tuple[int, bytes, bytes | None]] = []
    await log.loader.load(partition, lambda o, k, v: loaded.append((o, k, v)))
    return loaded


async def test_without_auto_commit_the_high_watermark_moves_by_hand() -> None:
    log = InMemoryLog(2, auto_commit=False)
    heard: list[tuple[int, int]] = []
    log.writer.register_listener(lambda p, o: heard.append((p, o)))
    assert await log.writer.append(1, [A, B]) == 2
    assert await log.writer.append(1, [C]) == 3
    assert (log.writer.end_offset(1), log.writer.high_watermark(1)) == (3, 0)
    assert heard == []
    log.writer.commit(1, 2)
    log.writer.commit(1)
    log.writer.commit(1)
    assert heard == [(1, 2), (1, 3)]
    assert log.writer.entries(1) == [A, B, C]
    assert log.writer.batches(1) == [(0, 2), (2, 1)]
    with pytest.raises(ValueError):
        log.writer.commit(1, 1)
    with pytest.raises(ValueError):
        log.writer.commit(1, 4)


async def test_the_loader_reads_committed_records_only() -> None:
    log = InMemoryLog(1, auto_commit=False)
    await log.writer.append(0, [A, B])
    log.writer.commit(0)
    await log.writer.append(0, [C])
    assert await load(log, 0) == [(0, b"a", b"1"), (1, b"b", None)]


async def test_injected_append_failures_store_nothing() -> None:
    log = InMemoryLog(2)
    log.writer.inject_append_failure(0, 19, "not enough replicas", count=2)
    for _ in range(2):
        with pytest.raises(AppendError) as raised:
            await log.writer.append(0, [A])
        assert raised.value.error_code == 19
        assert str(raised.value) == "not enough replicas"
    assert await log.writer.append(1, [A]) == 1
    assert await log.writer.append(0, [A]) == 1
    assert log.writer.entries(0) == [A]
    assert log.writer.append_calls(0) == 3


async def test_paused_appends_wait_in_flight_until_resumed() -> None:
    log = InMemoryLog(1)
    log.writer.pause_appends()
    append = asyncio.ensure_future(log.writer.append(0, [A]))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not append.done()
    assert log.writer.entries(0) == []
    # A failure injected while the append waits applies to it.
    log.writer.inject_append_failure(0, 7)
    log.writer.resume_appends()
    with pytest.raises(AppendError):
        await append


async def test_truncate_drops_the_uncommitted_tail_only() -> None:
    log = InMemoryLog(1, auto_commit=False)
    await log.writer.append(0, [A, B])
    log.writer.commit(0, 1)
    await log.writer.append(0, [C])
    log.writer.truncate(0, 2)
    assert log.writer.entries(0) == [A, B]
    assert log.writer.batches(0) == [(0, 2)]
    log.writer.truncate(0, 1)
    assert log.writer.batches(0) == [(0, 1)]
    with pytest.raises(ValueError):
        log.writer.truncate(0, 0)
    assert await log.writer.append(0, [C]) == 2


async def test_injected_and_paused_loads() -> None:
    log = InMemoryLog(2)
    await log.writer.append(1, [A])
    log.loader.inject_load_failure(1)
    with pytest.raises(LoadError):
        await load(log, 1)
    log.loader.pause_loads()
    loading = asyncio.ensure_future(load(log, 1))
    await asyncio.sleep(0)
    assert not loading.done()
    await log.close()
    assert await loading == [(0, b"a", b"1")]
