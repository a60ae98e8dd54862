"""The broker's ``$SYS/broker/...`` tree as Mosquitto 2.0 keeps it (mosquitto(8),
"BROKER STATUS"): ``version`` is static and retained, so a new subscription gets
it at once; ``#`` never matches it (MQTT 4.7.2); a client cannot publish into it
(3.1.1: acknowledged and dropped, [MQTT-3.3.5-2]; 5.0: PUBACK 0x87). Only what
holds from the broker's first second is checked: the other figures appear at the
first ``sys_interval`` tick."""

from __future__ import annotations

import re
from collections.abc import Callable

from conformance.mqtt import _raw
from conformance.mqtt._raw import RawClient
from conformance.mqtt.conftest import ClientFactory, Names

VERSION = "$SYS/broker/version"


def test_version_is_retained_on_subscribe(mqtt: ClientFactory) -> None:
    sub = mqtt()
    sub.connect()
    sub.subscribe(VERSION, 0)
    m = sub.get()
    assert (m.topic, m.retain) == (VERSION, True)
    assert re.fullmatch(r"\S+ version \S+", m.payload.decode()), m.payload


def test_hash_alone_gets_no_sys(mqtt: ClientFactory, names: Names) -> None:
    sub, pub = mqtt(), mqtt()
    sub.connect()
    pub.connect()
    sub.subscribe("#", 0)
    marker = names.topic("marker")
    pub.publish(marker, b"m", 1)
    while (m := sub.get()).topic != marker:  # other retained topics may come first
        assert not m.topic.startswith("$"), m.topic


def test_publishing_into_sys_is_refused(mqtt: ClientFactory,
                                        raw: Callable[..., RawClient]) -> None:
    old = mqtt()
    old.connect()
    old.publish(VERSION, b"forged", 1)  # 3.1.1: a normal PUBACK, the message dropped
    r = raw(5)
    r.send(_raw.publish(VERSION, b"forged", 1, 9, version=5))
    ack = r.expect(_raw.PUBACK)
    assert ack.packet_id == 9 and ack.reason_code(5) == 0x87
    sub = mqtt()
    sub.connect()
    sub.subscribe(VERSION, 0)
    assert sub.get().payload != b"forged"
