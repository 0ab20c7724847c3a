"""Metrics counted in bulk: what is read is what was observed, one at a time or not."""

from __future__ import annotations

from bisect import bisect_left

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from coordinator_server.metrics import (
    LATENCY_BUCKETS_S,
    PENDING_OBSERVATIONS,
    SIZE_BUCKETS,
    Histogram,
    RuntimeMetrics,
    ServerMetrics,
)
from coordinator_server.prometheus import LAG_FAMILY, LAG_HEADER, lag_samples

seconds = st.one_of(
    st.sampled_from([0.0, *LATENCY_BUCKETS_S, 1e9]),
    st.floats(min_value=0.0, max_value=400.0, allow_nan=False),
)


def bucket_counts(bounds: tuple[float, ...], values: list[float]) -> list[int]:
    counts = [0] * (len(bounds) + 1)
    for value in values:
        counts[bisect_left(bounds, value)] += 1
    return counts


@given(st.lists(seconds, max_size=3 * PENDING_OBSERVATIONS), st.integers(0, 3))
def test_a_histogram_counts_each_value_in_the_bucket_of_its_bound(
    values: list[float], reads: int
) -> None:
    histogram = Histogram(LATENCY_BUCKETS_S)
    # Reading in between settles what is pending; the result must not depend on it.
    step = max(1, len(values) // (reads + 1))
    for index, value in enumerate(values):
        histogram.observe(value)
        if reads and index % step == step - 1:
            assert histogram.count == index + 1
    assert histogram.counts == bucket_counts(LATENCY_BUCKETS_S, values)
    assert histogram.count == len(values)
    assert abs(histogram.total - sum(values)) <= 1e-6 * max(1.0, sum(values))
    buckets = histogram.buckets()
    assert buckets[-1] == ("+Inf", len(values))
    assert [count for _, count in buckets[:-1]] == [
        sum(1 for v in values if v <= bound) for bound in LATENCY_BUCKETS_S
    ]


def test_a_value_on_a_bound_is_in_that_bound_s_bucket() -> None:
    histogram = Histogram(SIZE_BUCKETS)
    for value in (1, 2, 3, 10000, 10001):
        histogram.observe(value)
    assert histogram.counts[:3] == [1, 1, 1]
    assert histogram.counts[-2:] == [1, 1]


def test_pending_observations_are_bounded() -> None:
    histogram = Histogram(LATENCY_BUCKETS_S)
    for _ in range(PENDING_OBSERVATIONS * 3 + 5):
        histogram.observe(0.001)
        assert histogram.pending < PENDING_OBSERVATIONS
    metrics = ServerMetrics()
    for _ in range(PENDING_OBSERVATIONS * 3 + 5):
        metrics.request_done(12, 0, 0.001)
        assert metrics.pending < PENDING_OBSERVATIONS


@given(
    st.lists(
        st.tuples(st.sampled_from([8, 11, 12]), st.sampled_from([0, 22, 27]), seconds),
        max_size=2 * PENDING_OBSERVATIONS + 10,
    )
)
def test_requests_are_counted_by_api_and_error_with_their_latency(
    answered: list[tuple[int, int, float]],
) -> None:
    metrics = ServerMetrics()
    for api_key, code, elapsed in answered:
        metrics.request_done(api_key, code, elapsed)
    expected: dict[tuple[int, int], int] = {}
    for api_key, code, _ in answered:
        expected[(api_key, code)] = expected.get((api_key, code), 0) + 1
    assert dict(metrics.requests) == expected
    latency = metrics.request_latency
    assert sorted(latency) == sorted({api_key for api_key, _, _ in answered})
    for api_key, histogram in latency.items():
        values = [elapsed for key, _, elapsed in answered if key == api_key]
        assert histogram.counts == bucket_counts(LATENCY_BUCKETS_S, values)


@given(
    st.lists(
        st.tuples(st.one_of(st.just(0.0), seconds), seconds), max_size=3 * PENDING_OBSERVATIONS
    ),
    st.integers(0, 3),
)
def test_events_are_counted_with_their_queue_and_processing_times(
    ran: list[tuple[float, float]], reads: int
) -> None:
    """Most writes wait in no queue: their zeros are only counted, in the first bucket."""
    metrics = RuntimeMetrics()
    step = max(1, len(ran) // (reads + 1))
    for index, (queued, processing) in enumerate(ran):
        metrics.event_ran(queued, processing)
        if reads and index % step == step - 1:
            assert metrics.queue_time.count == index + 1
    queued_values = [queued for queued, _ in ran]
    processing_values = [processing for _, processing in ran]
    assert metrics.queue_time.counts == bucket_counts(LATENCY_BUCKETS_S, queued_values)
    assert metrics.processing_time.counts == bucket_counts(LATENCY_BUCKETS_S, processing_values)
    assert metrics.queue_time.count == metrics.processing_time.count == len(ran)
    assert abs(metrics.queue_time.total - sum(queued_values)) <= 1e-6 * max(1.0, sum(queued_values))
    assert metrics.pending < PENDING_OBSERVATIONS


@given(
    st.dictionaries(
        st.tuples(st.text(max_size=20), st.text(max_size=20), st.integers(0, 2**31 - 1)),
        st.integers(0, 2**62),
        max_size=20,
    )
)
def test_the_lag_family_s_text_parses_back_to_the_same_series(
    lag: dict[tuple[str, str, int], int],
) -> None:
    """Group ids and topic names are the clients' (quotes, backslashes, line feeds, any
    character): rendered by hand for speed, the text must mean what prometheus_client's
    own rendering would."""
    text = LAG_HEADER + lag_samples(lag.items())
    (family,) = text_string_to_metric_families(text)
    assert family.name == LAG_FAMILY and family.type == "gauge"
    parsed = {
        (s.labels["group"], s.labels["topic"], int(s.labels["partition"])): s.value
        for s in family.samples
    }
    assert parsed == lag
