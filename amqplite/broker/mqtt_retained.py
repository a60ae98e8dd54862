"""MQTT retained messages: one keyed index per vhost in the ONE retained store.

The index's owner is ``(vhost, "mqtt", "")`` and its keys are MQTT topic names,
one message per topic. A retained PUBLISH of QoS >= 1 carries persistent
properties, so the store writes its row in the same commit that precedes the
PUBACK; QoS 0 ones are kept in memory only (the MQTT spec allows either).
Unlike an exchange's history, the limits refuse a new topic (MQTT 5 Quota
exceeded) instead of evicting an older one: a retained value that silently
vanished would be a lie to the next subscriber.

Pure: no trio, no SQL.
"""

from __future__ import annotations

from amqplite.broker.model import Message
from amqplite.broker.retained import Limits, OwnerId, Retained, RetainedSet, RetainedStore
from amqplite.protocol.mqtt.topics import matches

KIND = "mqtt"


def owner(vhost: str) -> OwnerId:
    return (vhost, KIND, "")


def limits_of(store: RetainedStore, max_messages: int | None,
              max_bytes: int | None) -> Limits:
    """The bounds of every vhost's MQTT index (``mqtt_retained_max_messages``/``_bytes``;
    no byte bound: the store's default). The listener builds them once: the settings
    do not change while the broker runs, so no publish builds them again."""
    return Limits(max_messages, max_bytes or store.default_max_bytes)


def index(store: RetainedStore, vhost: str, limits: Limits | None) -> RetainedSet:
    """The vhost's MQTT index (durable: persistent messages get a row), bounded by
    ``limits`` from :func:`limits_of`. Recovery passes None: a restored index keeps the
    store's default bounds until its first publish sets the MQTT ones."""
    rs = store.open(owner(vhost), keyed=True, durable=True, limits=limits)
    if limits is not None:
        rs.limits = limits
    return rs


def over_quota(rs: RetainedSet, topic: str, size: int) -> bool:
    """Would retaining ``size`` body bytes under ``topic`` exceed the vhost's limits?"""
    old = rs.get(topic)
    count = len(rs) + (0 if old is not None else 1)
    total = rs.bytes - (old.size if old is not None else 0) + size
    lim = rs.limits
    return ((lim.max_count is not None and count > lim.max_count)
            or (lim.max_bytes is not None and total > lim.max_bytes))


def retain(store: RetainedStore, rs: RetainedSet, key: int, topic: str, exchange: str,
           routing_key: str, properties: bytes, body: bytes) -> bool:
    """Set (or, with an empty payload, clear) the retained message of ``topic``
    (the caller checked :func:`over_quota`); True when a row must commit first."""
    if not body:  # the clearing too commits before its PUBACK
        old = rs.get(topic)
        store.remove(rs, topic)
        return old is not None and old.stored
    return store.put(rs, topic, Message(key, exchange, routing_key, properties, body))


def matching(store: RetainedStore, rs: RetainedSet | None, topic_filter: str) -> list[Retained]:
    """The retained messages a new subscription to ``topic_filter`` receives
    (``matches`` keeps ``$`` topics from leading wildcards)."""
    if rs is None:
        return []
    return store.matching(rs, lambda topic: matches(topic_filter, topic))
