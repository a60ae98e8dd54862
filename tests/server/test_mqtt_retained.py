"""MQTT retained messages (issue 23): one per topic in the broker's retained store,
delivered with the retain flag to each new matching subscription (wildcards too,
``$`` topics not by leading wildcards), cleared by an empty payload, durable when
published at QoS 1 (PUBACK after the commit: a kill -9 right after keeps it),
MQTT 5 retain handling, and the per-vhost quota."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from amqplite.protocol.mqtt.packets import (
    MQTT_5,
    ConnAck,
    Connect,
    Disconnect,
    PubAck,
    Publish,
    Will,
)
from tests.brokerproc import BrokerProcess, wait_for
from tests.server.mqttclient import (
    V5,
    V311,
    Client,
    RawClient,
    listening,
    mqtt_broker,
    new_id,
    running_broker,
)

#: how long a test waits to be sure a message does NOT arrive (the broker sent
#: the SUBACK already; retained messages are written right behind it)
ABSENT = 1.0


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory.mktemp("mqtt-retained"))


def _client(port: int, version: int) -> Client:
    c = Client(port, new_id(), version)
    assert c.connect()[0] == 0
    return c


def _none(c: Client) -> None:
    with pytest.raises(queue.Empty):
        c.get(timeout=ABSENT)


@pytest.mark.parametrize("version", [V311, V5])
@pytest.mark.parametrize("pattern", ["{base}/a/b", "{base}/+/b", "{base}/#", "+/a/b"])
def test_new_subscription_receives_retained(mb: BrokerProcess, version: int,
                                            pattern: str) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    base = new_id()
    pub = _client(port, version)
    pub.c.publish(f"{base}/a/b", b"kept", 1, retain=True).wait_for_publish(15)
    sub = _client(port, version)
    assert sub.subscribe(pattern.format(base=base), 1) == [1]
    got = sub.get()
    while got.topic != f"{base}/a/b":  # "+/a/b" also matches other tests' topics
        got = sub.get()
    assert (got.payload, got.retain, got.qos) == (b"kept", True, 1)
    # a live publish to the same topic is not flagged retained
    pub.publish(f"{base}/a/b", b"live", 1)
    live = sub.get()
    while live.topic != f"{base}/a/b":
        live = sub.get()
    assert (live.payload, live.retain) == (b"live", False)
    pub.close()
    sub.close()


@pytest.mark.parametrize("version", [V311, V5])
def test_one_per_topic_and_empty_payload_clears(mb: BrokerProcess, version: int) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    t = f"{new_id()}/t"
    pub = _client(port, version)
    for body in (b"one", b"two"):
        pub.c.publish(t, body, 1, retain=True).wait_for_publish(15)
    sub = _client(port, version)
    sub.subscribe(t, 0)
    got = sub.get()
    assert (got.payload, got.retain, got.qos) == (b"two", True, 0)
    _none(sub)
    pub.c.publish(t, b"", 1, retain=True).wait_for_publish(15)
    again = _client(port, version)
    again.subscribe(t, 1)
    _none(again)
    for c in (pub, sub, again):
        c.close()


def test_dollar_topic_not_matched_by_leading_wildcard(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    t = f"$app/{new_id()}"  # any $ topic; $SYS itself is the broker's (test_mqtt_sys.py)
    pub = _client(port, V311)
    pub.c.publish(t, b"sys", 1, retain=True).wait_for_publish(15)
    wild = _client(port, V311)
    wild.subscribe("#", 0)
    exact = _client(port, V311)
    exact.subscribe(t, 0)
    assert exact.get().payload == b"sys"
    while True:  # "#" gets other tests' retained topics, never the $ one
        try:
            m = wild.get(timeout=ABSENT)
        except queue.Empty:
            break
        assert not m.topic.startswith("$")
    for c in (pub, wild, exact):
        c.close()


def test_retain_handling(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    t = f"{new_id()}/rh"
    pub = _client(port, V5)
    pub.c.publish(t, b"v", 1, retain=True).wait_for_publish(15)
    never = _client(port, V5)
    assert never.subscribe(t, 1, retain_handling=2) == [1]
    _none(never)
    new_only = _client(port, V5)
    assert new_only.subscribe(t, 1, retain_handling=1) == [1]
    assert new_only.get().retain
    assert new_only.subscribe(t, 1, retain_handling=1) == [1]  # exists: nothing
    _none(new_only)
    always = _client(port, V5)
    always.subscribe(t, 1, retain_handling=0)
    assert always.get().retain
    always.subscribe(t, 1, retain_handling=0)  # re-subscribing sends it again
    assert always.get().payload == b"v"
    for c in (pub, never, new_only, always):
        c.close()


def test_amqp_publish_to_amq_topic_is_not_retained(mb: BrokerProcess) -> None:
    """As RabbitMQ's plugin: only MQTT publishes are retained."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    base = new_id()
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", mb.port))
    conn.channel().basic_publish("amq.topic", f"{base}.x", b"amqp")
    conn.close()
    sub = _client(port, V311)
    sub.subscribe(f"{base}/x", 1)
    _none(sub)
    sub.close()


def test_retained_qos1_survives_kill_9(tmp_path: Path) -> None:
    b = mqtt_broker(tmp_path / "data")
    port = b.mqtt_port  # type: ignore[attr-defined]
    try:
        pub = _client(port, V311)
        pub.c.publish("crash/retained", b"durable", 1, retain=True).wait_for_publish(15)
        pub.c.publish("crash/gone", b"x", 1, retain=True).wait_for_publish(15)
        pub.c.publish("crash/gone", b"", 1, retain=True).wait_for_publish(15)
        b.kill()  # right after the PUBACKs
        b.start()
        wait_for(lambda: listening(port), 30, what="MQTT after restart")
        sub = _client(port, V5)
        sub.subscribe("crash/#", 1)
        got = sub.get()
        assert (got.topic, got.payload, got.retain) == ("crash/retained", b"durable", True)
        _none(sub)
        sub.close()
    finally:
        b.kill()


def test_quota(tmp_path: Path) -> None:
    """Past mqtt_retained_max_messages: MQTT 5 hears PUBACK 0x97 (nothing routed);
    3.1.1 is routed but not retained. Replacing a kept topic stays allowed."""
    b = mqtt_broker(tmp_path / "data", "--mqtt-retained-max-messages", "2")
    port = b.mqtt_port  # type: ignore[attr-defined]
    try:
        raw = RawClient(port, MQTT_5)
        raw.send(Connect("quota5", MQTT_5, username="guest", password=b"guest"))
        assert isinstance(raw.recv(), ConnAck)
        for i, t in enumerate(("q/a", "q/b", "q/a"), 1):
            raw.send(Publish(t, b"v%d" % i, 1, retain=True, packet_id=i))
            assert raw.recv() == PubAck(i, 0x10)  # retained, no subscriber yet (Mosquitto too)
        watcher = _client(port, V311)
        watcher.subscribe("q/#", 1)
        assert sorted(watcher.get().payload for _ in range(2)) == [b"v2", b"v3"]
        raw.send(Publish("q/c", b"v4", 1, retain=True, packet_id=4))
        assert raw.recv() == PubAck(4, 0x97)
        old = _client(port, V311)
        old.c.publish("q/d", b"v5", 1, retain=True).wait_for_publish(15)
        assert watcher.get().payload == b"v5"  # routed (v4 was not)
        late = _client(port, V311)
        late.subscribe("q/#", 1)
        assert sorted(late.get().payload for _ in range(2)) == [b"v2", b"v3"]
        _none(late)
        for c in (watcher, old, late):
            c.close()
    finally:
        b.stop()


def _v5(port: int, cid: str, will: Will | None = None) -> RawClient:
    raw = RawClient(port, MQTT_5)
    raw.send(Connect(cid, MQTT_5, username="guest", password=b"guest", will=will))
    assert isinstance(raw.recv(), ConnAck)
    return raw


def _retained(port: int, topic_filter: str, n: int) -> list[tuple[str, bytes]]:
    """The ``n`` retained messages a new subscription receives, and nothing more."""
    sub = _client(port, V311)
    sub.subscribe(topic_filter, 1)
    got = sorted((m.topic, m.payload) for m in (sub.get() for _ in range(n)))
    _none(sub)
    sub.close()
    return got


def _restart(b: BrokerProcess) -> None:
    assert b.stop() == 0
    b.start()
    wait_for(lambda: listening(b.mqtt_port), 30,  # type: ignore[attr-defined]
             what="MQTT after restart")


def test_quota_bytes_and_after_restart(tmp_path: Path) -> None:
    """mqtt_retained_max_bytes refuses like the count does, and both bounds still hold
    once a restart restored the index (recovery opens it without them): for a will,
    the first retained publication after one restart, and for a client's PUBLISH,
    the first after the next."""
    b = mqtt_broker(tmp_path / "data", "--mqtt-retained-max-messages", "3",
                    "--mqtt-retained-max-bytes", "10")
    port = b.mqtt_port  # type: ignore[attr-defined]
    kept = [("r/a", b"12345"), ("r/b", b"1234")]
    try:
        raw = _v5(port, "bytes5")
        for i, (t, body) in enumerate(kept, 1):
            raw.send(Publish(t, body, 1, retain=True, packet_id=i))
            assert raw.recv() == PubAck(i, 0x10)
        raw.send(Publish("r/c", b"12", 1, retain=True, packet_id=3))  # 11 bytes > 10
        assert raw.recv() == PubAck(3, 0x97)
        raw.send(Disconnect())
        raw.drop()
        _restart(b)

        watcher = _client(port, V5)
        watcher.subscribe("r/d", 1)
        _v5(port, "willer", Will("r/d", b"12", 1, True)).drop()  # its will fires
        assert watcher.get().payload == b"12"  # routed, not retained
        watcher.close()
        assert _retained(port, "r/#", 2) == kept
        _restart(b)

        raw = _v5(port, "bytes5")
        raw.send(Publish("r/e", b"12", 1, retain=True, packet_id=1))
        assert raw.recv() == PubAck(1, 0x97)
        raw.send(Publish("r/a", b"123456", 1, retain=True, packet_id=2))  # replaces: 10
        assert raw.recv() == PubAck(2, 0x10)
        raw.send(Disconnect())
        raw.drop()
        assert _retained(port, "r/#", 2) == [("r/a", b"123456"), ("r/b", b"1234")]
    finally:
        b.stop()
