"""Topic filters: validation, $share parsing, matching against a naive reference,
and the AMQP routing-key translation."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqplite.protocol.mqtt.errors import MQTTError, ReasonCode
from amqplite.protocol.mqtt.topics import (
    SubscriptionFilter,
    binding_key_to_filter,
    filter_to_binding_key,
    matches,
    parse_filter,
    routing_key_to_topic,
    topic_to_routing_key,
    validate_topic_filter,
    validate_topic_name,
)

levels = st.sampled_from(["a", "b", "", "$x", "a.b", "c*"])
topics = st.lists(levels, min_size=1, max_size=5).map("/".join).filter(bool)
filter_levels = st.sampled_from(["a", "b", "", "+", "$x", "a.b"])


@st.composite
def filters(draw: st.DrawFn) -> str:
    parts = draw(st.lists(filter_levels, min_size=1, max_size=5))
    if draw(st.booleans()):
        parts.append("#")
    return "/".join(parts) or "#"


def naive_match(topic_filter: str, topic: str) -> bool:
    """Reference: a regular expression built level by level from the rules in 4.7."""
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False
    parts = topic_filter.split("/")
    pattern = ""
    for i, part in enumerate(parts):
        sep = "/" if i else ""
        if part == "#":
            pattern = pattern + ("(/.*)?" if i else ".*")
            break
        pattern += sep + ("[^/]*" if part == "+" else re.escape(part))
    return re.fullmatch(pattern, topic) is not None


@settings(max_examples=1000, deadline=None)
@given(filters(), topics)
def test_matcher_agrees_with_reference(topic_filter: str, topic: str) -> None:
    validate_topic_filter(topic_filter)
    assert matches(topic_filter, topic) == naive_match(topic_filter, topic)


@pytest.mark.parametrize(
    ("topic_filter", "topic", "expected"),
    [
        ("sport/tennis/player1/#", "sport/tennis/player1", True),  # 4.7.1.2
        ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
        ("sport/#", "sport", True),
        ("sport/tennis/+", "sport/tennis/player1", True),  # 4.7.1.3
        ("sport/tennis/+", "sport/tennis/player1/ranking", False),
        ("sport/+", "sport", False),
        ("sport/+", "sport/", True),
        ("+/+", "/finance", True),
        ("/+", "/finance", True),
        ("+", "/finance", False),
        ("#", "$SYS/x", False),  # [MQTT-4.7.2-1]
        ("+/monitor/Clients", "$SYS/monitor/Clients", False),
        ("$SYS/#", "$SYS/monitor/Clients", True),
        ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    ],
)
def test_spec_examples(topic_filter: str, topic: str, expected: bool) -> None:
    assert matches(topic_filter, topic) is expected


@pytest.mark.parametrize("bad", ["", "a#", "a/#/b", "a+/b", "++", "#/", "a/b#"])
def test_invalid_filters(bad: str) -> None:
    with pytest.raises(MQTTError) as info:
        validate_topic_filter(bad)
    assert info.value.reason_code == ReasonCode.TOPIC_FILTER_INVALID


@pytest.mark.parametrize("bad", ["", "a/+", "#", "a/#"])
def test_invalid_topic_names(bad: str) -> None:
    with pytest.raises(MQTTError) as info:
        validate_topic_name(bad)
    assert info.value.reason_code == ReasonCode.TOPIC_NAME_INVALID


def test_shared_subscriptions() -> None:
    assert parse_filter("$share/g1/a/+") == SubscriptionFilter("a/+", "g1")
    assert parse_filter("$share/g/#") == SubscriptionFilter("#", "g")
    assert parse_filter("a/b") == SubscriptionFilter("a/b")
    assert parse_filter("$shared/x") == SubscriptionFilter("$shared/x")
    for bad in ["$share/g", "$share//a", "$share/g+/a", "$share/#/a", "$share/g/", "$share/g/a#"]:
        with pytest.raises(MQTTError) as info:
            parse_filter(bad)
        assert info.value.reason_code == ReasonCode.TOPIC_FILTER_INVALID, bad


def test_amqp_translation_as_rabbitmq() -> None:
    assert topic_to_routing_key("cities/london") == "cities.london"
    assert filter_to_binding_key("cities/+/#") == "cities.*.#"
    assert topic_to_routing_key("spBv1.0/plant") == "spBv1/0.plant"
    assert routing_key_to_topic("cities.london") == "cities/london"
    assert binding_key_to_filter("a.*.#") == "a/+/#"


@given(topics)
def test_translation_round_trips(topic: str) -> None:
    assert routing_key_to_topic(topic_to_routing_key(topic)) == topic


@settings(max_examples=500, deadline=None)
@given(filters(), topics)
def test_translated_keys_match_as_amqp_topic_exchange_would(topic_filter: str, topic: str) -> None:
    """The MQTT match equals an AMQP topic match of the translated keys (``*`` one
    word, ``#`` zero or more), for topics without a literal ``*`` level and not
    starting with ``$`` (the AMQP exchange has no $-rule)."""
    if "$" in topic or "*" in topic:
        return
    key = topic_to_routing_key(topic).split(".")
    binding = filter_to_binding_key(topic_filter).split(".")

    def amqp(b: list[str], k: list[str]) -> bool:
        if not b:
            return not k
        if b[0] == "#":
            return any(amqp(b[1:], k[i:]) for i in range(len(k) + 1))
        if not k:
            return False
        return (b[0] == "*" or b[0] == k[0]) and amqp(b[1:], k[1:])

    assert amqp(binding, key) == matches(topic_filter, topic)
