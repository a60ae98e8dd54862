"""MQTT shared subscriptions (``$share/{group}/{filter}``, issue 23): the group's
members share one queue round-robin, a leaving member's unacknowledged QoS 1
messages go to another, AMQP publishers reach the group, no retained messages
on a shared subscription, and a persistent member's queue survives kill -9."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pika
import pytest

from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.packets import (
    MQTT_5,
    ConnAck,
    Connect,
    Disconnect,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
)
from amqplite.protocol.mqtt.subscriptions import shared_queue_name
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
from tests.server.subhelpers import collect, connected, publish


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory.mktemp("mqtt-shared"))



def _exists(b: BrokerProcess, queue: str) -> bool:
    r = httpx.get(f"{b.admin_url}/api/queues/%2F/{queue}", auth=("guest", "guest"))
    assert r.status_code in (200, 404), r.text
    return r.status_code == 200


def test_members_share_the_messages(mb: BrokerProcess) -> None:
    """Three members (one of them MQTT 3.1.1, as Mosquitto allows) get disjoint sets
    that together are every message; the queue is visible under its name."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    base = new_id()
    members = [connected(port, V5), connected(port, V5), connected(port, V311)]
    for m in members:
        assert m.subscribe(f"$share/workers/{base}/#", 1) == [1]
    assert _exists(mb, shared_queue_name("workers", f"{base}/#"))
    pub = connected(port)
    sent = [b"m%d" % i for i in range(30)]
    for i, body in enumerate(sent):
        publish(pub, f"{base}/job/{i % 3}", body, 1)
    got = collect(members, len(sent))
    bodies = [[m.payload for m in g] for g in got]
    assert sorted(b for g in bodies for b in g) == sorted(sent)  # each exactly once
    assert all(bodies), "round-robin: every member gets some"
    for m in [*members, pub]:
        m.close()


def test_member_leaving_loses_nothing(mb: BrokerProcess) -> None:
    """A member that vanishes with QoS 1 messages unacknowledged: they go to the other."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    base = new_id()
    topic_filter = f"$share/g/{base}/#"
    raw = RawClient(port, MQTT_5)
    raw.send(Connect(new_id(), MQTT_5, username="guest", password=b"guest"))
    assert isinstance(raw.recv(), ConnAck)
    raw.send(Subscribe(1, (Subscription(topic_filter, 1),)))
    assert raw.recv() == SubAck(1, (1,))
    other = connected(port)
    assert other.subscribe(topic_filter, 1) == [1]
    pub = connected(port)
    sent = {b"n%d" % i for i in range(20)}
    for body in sorted(sent):
        publish(pub, f"{base}/x", body, 1)
    held = raw.recv()  # delivered to the raw member and never acknowledged
    assert isinstance(held, Publish) and held.qos == 1
    raw.drop()
    got = collect([other], len(sent))[0]
    assert {m.payload for m in got} == sent
    other.close()
    pub.close()


def test_amqp_publisher_reaches_the_group(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    base = new_id()
    members = [connected(port), connected(port, V311)]
    for m in members:
        assert m.subscribe(f"$share/svc/{base}/+", 1) == [1]
    conn = pika.BlockingConnection(pika.URLParameters(mb.url))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("amq.topic", f"{base}.e", b"a%d" % i,
                         pika.BasicProperties(delivery_mode=2))
    conn.close()
    got = collect(members, 10)
    assert sorted(m.payload for g in got for m in g) == sorted(b"a%d" % i for i in range(10))
    assert all(got)
    for m in members:
        m.close()


def test_no_retained_message_on_a_shared_subscription(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    base = new_id()
    pub = connected(port)
    pub.c.publish(f"{base}/r", b"retained", 1, retain=True).wait_for_publish(15)
    member = connected(port)
    assert member.subscribe(f"$share/g/{base}/#", 1) == [1]
    publish(pub, f"{base}/r", b"live", 1)
    assert member.get().payload == b"live"  # the retained one was not sent before it
    member.close()
    pub.close()


def test_no_local_on_a_shared_subscription_is_a_protocol_error(mb: BrokerProcess) -> None:
    raw = RawClient(mb.mqtt_port, MQTT_5)  # type: ignore[attr-defined]
    raw.send(Connect(new_id(), MQTT_5, username="guest", password=b"guest"))
    assert isinstance(raw.recv(), ConnAck)
    raw.send(Subscribe(1, (Subscription("$share/g/t", 1, no_local=True),)))
    answer = raw.recv()
    assert isinstance(answer, Disconnect) and answer.reason_code == ReasonCode.PROTOCOL_ERROR


def test_queue_lives_while_a_member_does(mb: BrokerProcess) -> None:
    """Unsubscribing keeps the queue for the other member; the last member's clean
    session ending deletes it."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    base = new_id()
    name = shared_queue_name("life", f"{base}/#")
    a, b = connected(port), connected(port, V311)
    for m in (a, b):
        assert m.subscribe(f"$share/life/{base}/#", 0) == [0]
    a.unsubscribe(f"$share/life/{base}/#")
    assert _exists(mb, name)
    b.close()
    wait_for(lambda: not _exists(mb, name), 15, what="the shared queue deleted")
    a.close()


def test_persistent_member_survives_kill_9(tmp_path: Path) -> None:
    """A persistent member's binding and the queue's PUBACKed messages come back after a
    kill -9; a clean member's binding does not."""
    b = mqtt_broker(tmp_path / "data")
    port = b.mqtt_port  # type: ignore[attr-defined]
    try:
        base = new_id()
        cid = new_id()
        keeper = Client(port, cid, V311, clean=False)
        keeper.connect()
        assert keeper.subscribe(f"$share/k/{base}/#", 1) == [1]
        keeper.close()
        transient = RawClient(port)  # clean, QoS 1, never acknowledges
        transient.send(Connect(new_id(), username="guest", password=b"guest"))
        assert isinstance(transient.recv(), ConnAck)
        transient.send(Subscribe(1, (Subscription(f"$share/k/{base}/#", 1),)))
        assert transient.recv() == SubAck(1, (1,))
        pub = connected(port)
        sent = [b"k%d" % i for i in range(10)]
        for body in sent:
            publish(pub, f"{base}/t", body, 1)
        assert isinstance(transient.recv(), Publish)  # it holds them unacknowledged
        b.kill()
        b.start()
        wait_for(lambda: listening(port), 30, what="MQTT after restart")
        back = Client(port, cid, V311, clean=False)
        assert back.connect() == (0, True)
        got = collect([back], len(sent))[0]
        assert sorted(m.payload for m in got) == sorted(sent)
        r = httpx.get(f"{b.admin_url}/api/queues/%2F/{shared_queue_name('k', f'{base}/#')}"
                      "/bindings", auth=("guest", "guest"))
        r.raise_for_status()
        members = [x for x in r.json() if x["source"] == "amq.topic"]
        assert [m["arguments"]["x-mqtt-client-id"] for m in members] == [cid]
        back.close()
    finally:
        b.kill()


def test_shared_subscription_at_qos2(mb: BrokerProcess) -> None:
    """A member granted QoS 2 receives a QoS 2 publish at QoS 2 (exactly once, as an
    unshared QoS 2 subscription), a QoS 0 member of another group at QoS 0."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    base = new_id()
    two, zero = connected(port), connected(port, V311)
    assert two.subscribe(f"$share/a/{base}/#", 2) == [2]
    assert zero.subscribe(f"$share/b/{base}/#", 0) == [0]
    pub = connected(port)
    publish(pub, f"{base}/x", b"exactly once", 2)
    got_two, got_zero = two.get(), zero.get()
    assert (got_two.payload, got_two.qos) == (b"exactly once", 2)
    assert (got_zero.payload, got_zero.qos) == (b"exactly once", 0)
    for c in (two, zero, pub):
        c.close()
