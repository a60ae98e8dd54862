"""User patterns on RE2: RabbitMQ's search semantics, refusals named, bounded cost."""

from __future__ import annotations

import pytest

from amqplite.broker import patterns


def test_search_semantics_as_rabbitmq() -> None:
    assert patterns.search("app", "myapp1")  # a search, not a full match
    assert not patterns.search("^app", "myapp1")
    assert not patterns.search("APP", "app")  # case-sensitive unless asked
    assert patterns.search("APP", "app", ignore_case=True)
    assert patterns.search("^(a|a)*$", "a" * 5000)
    assert not patterns.search("^(a|a)*$", "a" * 5000 + "!")


@pytest.mark.parametrize("pattern", ["(?=x)", "(?<!x)y", r"(a)\1", "(", "a{1001}",
                                     "(a{1000}){1000}"])
def test_refused_patterns_are_named(pattern: str) -> None:
    why = patterns.check(pattern)
    assert why is not None and pattern in why
    with pytest.raises(patterns.PatternError, match="invalid regular expression"):
        patterns.compile_pattern(pattern)
    assert not patterns.search(pattern, "xy")  # stored by an older version: matches nothing


def test_cache_is_bounded() -> None:
    for i in range(patterns.CACHE_SIZE + 50):
        patterns.check(f"^q{i}$")
    assert patterns._compile.cache_info().currsize <= patterns.CACHE_SIZE
