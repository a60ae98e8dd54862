"""Will messages (MQTT 3.1.1 3.1.2.5, MQTT 5 3.1.2.5): published when the network
connection closes without DISCONNECT (socket drop, protocol violation), not
after a normal DISCONNECT; a retained will is kept as a retained message."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conformance.mqtt import _raw
from conformance.mqtt._raw import RawClient
from conformance.mqtt.conftest import ClientFactory, Names


@pytest.mark.parametrize("version", [4, 5])
def test_will_on_socket_drop(mqtt: ClientFactory, raw: Callable[..., RawClient],
                             names: Names, version: int) -> None:
    sub = mqtt(version)
    sub.connect()
    t = names.topic("will")
    sub.subscribe(t, 1)
    dying = raw(version, will=(t, b"gone", 1, False))
    dying.close()
    m = sub.get()
    assert (m.topic, m.payload, m.qos, m.retain) == (t, b"gone", 1, False)


def test_will_on_protocol_violation(mqtt: ClientFactory, raw: Callable[..., RawClient],
                                    names: Names) -> None:
    sub = mqtt()
    sub.connect()
    t = names.topic("will")
    sub.subscribe(t, 1)
    bad = raw(4, will=(t, b"violated", 1, False))
    bad.send(_raw.publish(names.topic("+"), b"x", 1, 1))  # wildcard in a topic name
    assert bad.closed()
    assert sub.get().payload == b"violated"


def test_no_will_after_disconnect(mqtt: ClientFactory, raw: Callable[..., RawClient],
                                  names: Names) -> None:
    sub, pub = mqtt(), mqtt()
    sub.connect()
    pub.connect()
    t = names.topic("will")
    sub.subscribe(t, 1)
    polite = raw(4, will=(t, b"must not appear", 1, False))
    polite.send(_raw.packet(_raw.DISCONNECT, 0, b""))
    assert polite.closed()
    pub.publish(t, b"marker", 1)  # a will would have been published before this
    assert sub.get().payload == b"marker"
    sub.nothing_more()


def test_retained_will(mqtt: ClientFactory, raw: Callable[..., RawClient],
                       names: Names) -> None:
    t = names.topic("status")
    names.retained.add(t)
    dying = raw(4, will=(t, b"offline", 1, True))
    watcher = mqtt()
    watcher.connect()
    watcher.subscribe(t, 1)
    dying.close()
    assert watcher.get().payload == b"offline"
    late = mqtt()
    late.connect()
    late.subscribe(t, 1)
    m = late.get()
    assert (m.payload, m.retain) == (b"offline", True)
