"""Topic names, topic filters, shared subscriptions, matching, AMQP translation.

MQTT topics map onto the AMQP topic exchange as RabbitMQ's MQTT plugin maps
them: levels are separated by ``.`` instead of ``/``, ``+`` becomes ``*``
and ``#`` stays ``#``. A ``.`` inside an MQTT level would split it into two
AMQP words, so it is swapped for ``/`` (which cannot occur inside an MQTT
level); the translation is therefore a bijection and ``a.b/c`` survives a
round trip (``a/b.c`` on the AMQP side). A level that is a literal ``*``
would become the AMQP one-word wildcard in a binding key: RabbitMQ has the
same limitation.
"""

from __future__ import annotations

import attrs
from mypy_extensions import mypyc_attr

from amqplite.protocol.mqtt.errors import MQTTError, ReasonCode

SHARE_PREFIX = "$share/"

_TO_AMQP = str.maketrans({"/": ".", ".": "/", "+": "*"})
_TO_MQTT_TOPIC = str.maketrans({".": "/", "/": "."})
_TO_MQTT_FILTER = str.maketrans({".": "/", "/": ".", "*": "+"})


def validate_topic_name(topic: str, packet_type: int = 0, allow_empty: bool = False) -> None:
    """At least one character [MQTT-4.7.3-1], no wildcard [MQTT-4.7.0-1], [MQTT-3.3.2-2];
    raises 0x90. MQTT 5 allows an empty PUBLISH topic with a topic alias (``allow_empty``;
    the connection checks the alias)."""
    if not topic and not allow_empty:
        raise MQTTError(ReasonCode.TOPIC_NAME_INVALID, "empty topic name", packet_type)
    if "+" in topic or "#" in topic:
        raise MQTTError(ReasonCode.TOPIC_NAME_INVALID, f"wildcard in topic name {topic!r}", packet_type)


def validate_topic_filter(topic_filter: str) -> None:
    """Wildcard placement; raises 0x8F Topic Filter invalid.

    ``#`` only alone as the last level [MQTT-4.7.1-1], ``+`` only as a whole
    level [MQTT-4.7.1-2], at least one character [MQTT-4.7.3-1].
    """
    if not topic_filter:
        raise MQTTError(ReasonCode.TOPIC_FILTER_INVALID, "empty topic filter")
    if "+" not in topic_filter and "#" not in topic_filter:
        return
    levels = topic_filter.split("/")
    last = len(levels) - 1
    for i, level in enumerate(levels):
        if len(level) > 1 and ("+" in level or "#" in level):
            raise MQTTError(ReasonCode.TOPIC_FILTER_INVALID, f"wildcard inside a level of {topic_filter!r}")
        if level == "#" and i != last:
            raise MQTTError(ReasonCode.TOPIC_FILTER_INVALID, f"'#' not last in {topic_filter!r}")


@mypyc_attr(native_class=False)
@attrs.frozen
class SubscriptionFilter:
    """A validated SUBSCRIBE filter: ``share_group`` is set for ``$share/{group}/{filter}``."""

    topic_filter: str
    share_group: str | None = None


def parse_filter(raw: str) -> SubscriptionFilter:
    """Validate a filter as sent in SUBSCRIBE/UNSUBSCRIBE, splitting off ``$share/{group}/``.

    The share name is non-empty and has no ``/``, ``+`` or ``#`` [MQTT-4.8.2-1],
    [MQTT-4.8.2-2]; the rest is an ordinary, non-empty filter. Raises 0x8F.
    """
    if not raw.startswith(SHARE_PREFIX):
        validate_topic_filter(raw)
        return SubscriptionFilter(raw)
    group, sep, rest = raw[len(SHARE_PREFIX) :].partition("/")
    if not sep or not group or "+" in group or "#" in group:
        raise MQTTError(ReasonCode.TOPIC_FILTER_INVALID, f"invalid shared subscription {raw!r}")
    validate_topic_filter(rest)
    return SubscriptionFilter(rest, group)


def matches(topic_filter: str, topic: str) -> bool:
    """Does ``topic_filter`` (already validated, no ``$share/``) match ``topic``?

    A filter starting with a wildcard does not match a topic starting with
    ``$`` [MQTT-4.7.2-1]; ``a/#`` matches ``a`` itself (4.7.1.2).
    """
    if topic_filter == topic:
        return True
    if "+" not in topic_filter and "#" not in topic_filter:
        return False
    if topic.startswith("$") and topic_filter[0] in "+#":
        return False
    flevels = topic_filter.split("/")
    tlevels = topic.split("/")
    for i, flevel in enumerate(flevels):
        if flevel == "#":
            return True
        if i >= len(tlevels):
            return False
        if flevel != "+" and flevel != tlevels[i]:
            return False
    return len(flevels) == len(tlevels)


def topic_to_routing_key(topic: str) -> str:
    """MQTT topic name -> AMQP routing key (``/``<->``.`` swapped). Per message: a
    topic without ``.`` or ``+`` (most) takes one ``replace``, cheaper than ``translate``."""
    if "." in topic or "+" in topic:
        return topic.translate(_TO_AMQP)
    return topic.replace("/", ".")


def filter_to_binding_key(topic_filter: str) -> str:
    """MQTT topic filter -> AMQP topic-exchange binding key (``+`` -> ``*``, ``#`` kept)."""
    return topic_filter.translate(_TO_AMQP)


def routing_key_to_topic(routing_key: str) -> str:
    """AMQP routing key -> MQTT topic name (the inverse of :func:`topic_to_routing_key`
    for topics without ``+``, which no topic name has). Per delivery: as above."""
    if "/" in routing_key:
        return routing_key.translate(_TO_MQTT_TOPIC)
    return routing_key.replace(".", "/")


def binding_key_to_filter(binding_key: str) -> str:
    """AMQP binding key -> MQTT topic filter (inverse of :func:`filter_to_binding_key`)."""
    return binding_key.translate(_TO_MQTT_FILTER)
