"""The RE2 matcher of subscriptions by regular expression: whole topic names matched as
Kafka's RE2/J `matches()` does, Kafka's INVALID_REGULAR_EXPRESSION message with RE2/J's
description of the error, linear time on a pattern that backtracks exponentially in
Python's `re`, and the bounds of the compiled patterns kept."""

from __future__ import annotations

import re
import time

import pytest

from coordinator_protocol.errors import ErrorCode, InvalidRegularExpressionError
from coordinator_server.consumer_groups.regex import TopicRegexMatcher

NAMES = ["foo", "foobar", "xfoo", "bar", "barn", "foo.v1", "foo.v22", "foo.vx"]


def matcher(max_cached_patterns: int = 16, max_memory_bytes: int = 1 << 20) -> TopicRegexMatcher:
    return TopicRegexMatcher(max_cached_patterns, max_memory_bytes)


@pytest.mark.parametrize(
    ("pattern", "matched"),
    [
        # Anchored at both ends, as RE2/J's matches(): no prefix or suffix match.
        ("foo", {"foo"}),
        ("foo.*", {"foo", "foobar", "foo.v1", "foo.v22", "foo.vx"}),
        (".*foo", {"foo", "xfoo"}),
        ("fo+|bar", {"foo", "bar"}),
        ("(?i)FOO", {"foo"}),
        (r"foo\.v[0-9]+", {"foo.v1", "foo.v22"}),
        (r"\w+", {"foo", "foobar", "xfoo", "bar", "barn"}),
        ("", set()),
    ],
)
def test_a_pattern_matches_whole_topic_names_as_re2j_does(pattern: str, matched: set[str]) -> None:
    assert matcher().matching_topics(pattern, NAMES) == matched


def test_several_patterns_are_resolved_in_one_pass_and_a_refused_one_matches_nothing() -> None:
    assert matcher().resolve(["ba.*", "foo", "("], NAMES) == {
        "ba.*": frozenset({"bar", "barn"}),
        "foo": frozenset({"foo"}),
        "(": frozenset(),
    }


@pytest.mark.parametrize(
    ("pattern", "description"),
    [
        ("[", "missing closing ]"),
        ("(foo", "missing closing )"),
        ("foo)", "unexpected )"),
        ("*", "missing argument to repetition operator"),
        ("a**", "invalid nested repetition operator"),
        ("a{2,1}", "invalid repeat count"),
        ("a{1001}", "invalid repeat count"),
        ("[z-a]", "invalid character class range"),
        ("(?P<>a)", "invalid named capture"),
        ("(?<=a)b", "invalid or unsupported Perl syntax"),
        (r"(a)\1", "invalid escape sequence"),
        ("foo\\", "trailing backslash at end of expression"),
    ],
)
def test_an_invalid_pattern_raises_kafkas_error_with_re2js_description(
    pattern: str, description: str
) -> None:
    with pytest.raises(InvalidRegularExpressionError) as raised:
        matcher().validate(pattern)
    assert raised.value.code == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert raised.value.message == (
        f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {description}."
    )


def test_patterns_pythons_re_would_take_are_refused_as_re2j_refuses_them() -> None:
    for pattern in (r"(a)\1", "(?=a)a", "(?<!a)b", "a++"):
        re.compile(pattern)
        with pytest.raises(InvalidRegularExpressionError):
            matcher().validate(pattern)


def test_a_pattern_that_backtracks_exponentially_in_re_is_matched_in_linear_time() -> None:
    names = [f"{'a' * 30}{i}" for i in range(10_000)]
    started = time.perf_counter()
    assert matcher().matching_topics("(a+)+b", names) == frozenset()
    assert matcher().matching_topics("(a+)+[0-9]+", names) == frozenset(names)
    # Python's re takes ~0.7 s for one name of 24 a's against `(a+)+b`; these are 10,000 of
    # 30 and more.
    assert time.perf_counter() - started < 2.0


def test_the_compiled_patterns_kept_are_bounded() -> None:
    kept = matcher(max_cached_patterns=2)
    for pattern in ("a.*", "b.*", "c.*", "a.*"):
        kept.validate(pattern)
    assert len(kept) == 2
    with pytest.raises(InvalidRegularExpressionError):
        kept.validate("(")
    assert len(kept) == 2
    with pytest.raises(ValueError, match="max_cached_patterns"):
        matcher(max_cached_patterns=0)
    with pytest.raises(ValueError, match="max_memory_bytes"):
        matcher(max_memory_bytes=1024)


def test_a_pattern_past_its_memory_is_refused() -> None:
    # RE2 bounds each pattern's memory: one that would need more does not compile.
    pattern = "|".join(f"topic-{i:05d}-[a-z]+" for i in range(2_000))
    assert len(matcher().matching_topics(pattern, ["topic-00007-abc"])) == 1
    with pytest.raises(InvalidRegularExpressionError, match="not a valid regular expression"):
        matcher(max_memory_bytes=64 * 1024).validate(pattern)
