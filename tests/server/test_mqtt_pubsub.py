"""MQTT publish/subscribe through the real broker: MQTT<->MQTT at every QoS and both
protocol levels, and MQTT<->AMQP across amq.topic (RabbitMQ's mapping)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pika
import pytest

from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.packets import (
    ConnAck,
    Connect,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
)
from amqplite.protocol.mqtt.properties import Properties
from tests.brokerproc import BrokerProcess, wait_for
from tests.server.mqttclient import V5, V31, V311, Client, RawClient, new_id, running_broker


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory.mktemp("mqtt"))


@pytest.fixture
def amqp(mb: BrokerProcess) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    c = pika.BlockingConnection(pika.URLParameters(mb.url))
    yield c.channel()
    c.close()


@pytest.mark.parametrize("version", [V31, V311, V5])
@pytest.mark.parametrize("pub_qos", [0, 1, 2])
@pytest.mark.parametrize("sub_qos", [0, 1, 2])
def test_mqtt_to_mqtt(mb: BrokerProcess, version: int, pub_qos: int, sub_qos: int) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    topic = f"t/{new_id()}/x"
    sub = Client(port, new_id(), version)
    pub = Client(port, new_id(), version)
    assert sub.connect() == (0, False)
    assert pub.connect()[0] == 0
    # QoS 2 is granted (RabbitMQ grants at most 1): exactly once, end to end
    assert sub.subscribe(f"t/{topic.split('/')[1]}/+", sub_qos) == [sub_qos]
    pub.publish(topic, b"payload-%d" % pub_qos, pub_qos)
    m = sub.get()
    assert (m.topic, m.payload) == (topic, b"payload-%d" % pub_qos)
    assert m.qos == min(sub_qos, pub_qos)
    assert sub.messages.empty()
    pub.close()
    sub.close()


def test_mqtt_publish_reaches_amqp_queue(mb: BrokerProcess, amqp) -> None:  # type: ignore[no-untyped-def]
    q = amqp.queue_declare("", exclusive=True).method.queue
    amqp.queue_bind(q, "amq.topic", "sensors.*.temp")
    pub = Client(mb.mqtt_port, new_id())  # type: ignore[attr-defined]
    pub.connect()
    pub.publish("sensors/kitchen/temp", b"21.5", 1)  # PUBACK: committed and routed
    pub.publish("sensors/kitchen/humidity", b"40", 1)  # not matched by the binding
    method, props, body = amqp.basic_get(q, auto_ack=True)
    assert method is not None
    assert (method.exchange, method.routing_key, body) == ("amq.topic", "sensors.kitchen.temp",
                                                          b"21.5")
    assert props.delivery_mode == 2  # QoS 1 is persistent
    assert amqp.basic_get(q, auto_ack=True)[0] is None
    pub.close()


def test_amqp_publish_reaches_mqtt_subscriber(mb: BrokerProcess, amqp) -> None:  # type: ignore[no-untyped-def]
    sub = Client(mb.mqtt_port, new_id(), V5)  # type: ignore[attr-defined]
    sub.connect()
    assert sub.subscribe("alerts/#", 1) == [1]
    amqp.basic_publish("amq.topic", "alerts.fire.floor1", b"evacuate",
                       pika.BasicProperties(delivery_mode=2))
    amqp.basic_publish("amq.topic", "alerts.drill", b"practice")  # transient: QoS 0
    first, second = sub.get(), sub.get()
    assert (first.topic, first.payload, first.qos) == ("alerts/fire/floor1", b"evacuate", 1)
    assert (second.topic, second.payload, second.qos) == ("alerts/drill", b"practice", 0)
    sub.close()


def test_unsubscribe_removes_the_binding(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    base = new_id()
    sub = Client(port, new_id())
    sub.connect()
    sub.subscribe(f"{base}/a", 1)
    sub.subscribe(f"{base}/b", 1)
    sub.unsubscribe(f"{base}/a")
    pub = Client(port, new_id())
    pub.connect()
    pub.publish(f"{base}/a", b"gone", 1)
    pub.publish(f"{base}/b", b"kept", 1)
    assert sub.get().payload == b"kept"
    assert sub.messages.empty()
    pub.close()
    sub.close()


def test_qos2_duplicate_publish_is_routed_once(mb: BrokerProcess, amqp) -> None:  # type: ignore[no-untyped-def]
    q = amqp.queue_declare("", exclusive=True).method.queue
    topic = f"once/{new_id()}"
    amqp.queue_bind(q, "amq.topic", topic.replace("/", "."))
    raw = RawClient(mb.mqtt_port)  # type: ignore[attr-defined]
    raw.send(Connect(new_id(), username="guest", password=b"guest"))
    assert raw.recv() == ConnAck(False, 0)
    p = Publish(topic, b"exactly-once", qos=2, packet_id=7)
    raw.send(p)
    assert raw.recv() == PubRec(7)  # after the commit
    raw.send(Publish(topic, b"exactly-once", qos=2, dup=True, packet_id=7))
    assert raw.recv() == PubRec(7)  # the retransmission is acknowledged, not routed
    raw.send(PubRel(7))
    assert raw.recv() == PubComp(7)
    wait_for(lambda: amqp.queue_declare(q, passive=True).method.message_count >= 1,
             what="the message in the AMQP queue")
    assert amqp.queue_declare(q, passive=True).method.message_count == 1
    raw.drop()


def test_mqtt_connections_listed_in_admin_api(mb: BrokerProcess) -> None:
    cid = new_id()
    c = Client(mb.mqtt_port, cid, V5)  # type: ignore[attr-defined]
    c.connect()
    r = httpx.get(f"{mb.admin_url}/api/connections", auth=("guest", "guest"))
    r.raise_for_status()
    mine = [x for x in r.json() if x.get("client_properties", {}).get("client_id") == cid]
    assert len(mine) == 1
    assert mine[0]["protocol"] == "MQTT 5.0" and mine[0]["user"] == "guest"
    assert mine[0]["vhost"] == "/"
    name = mine[0]["name"]
    one = httpx.get(f"{mb.admin_url}/api/connections/{name}", auth=("guest", "guest"))
    assert one.json()["protocol"] == "MQTT 5.0"
    gone = httpx.delete(f"{mb.admin_url}/api/connections/{name}", auth=("guest", "guest"))
    assert gone.status_code == 204
    assert c.disconnected.wait(15)  # closed by the broker (DISCONNECT 0x98)




def test_receive_maximum_bounds_unacknowledged_deliveries(mb: BrokerProcess) -> None:
    """An MQTT 5 Receive Maximum of 2 is the prefetch: two QoS 1 messages in flight,
    the third only after a PUBACK."""
    cid, topic = new_id(), f"window/{new_id()}"
    raw = RawClient(mb.mqtt_port, V5)  # type: ignore[attr-defined]
    raw.send(Connect(cid, protocol_level=V5, username="guest", password=b"guest",
                     properties=Properties(receive_maximum=2)))
    assert isinstance(raw.recv(), ConnAck)
    raw.send(Subscribe(1, (Subscription(topic, qos=1),)))
    assert raw.recv() == SubAck(1, (1,))
    pub = Client(mb.mqtt_port, new_id())  # type: ignore[attr-defined]
    pub.connect()
    for i in range(3):
        pub.publish(topic, b"w%d" % i, 1)
    got = [raw.recv(), raw.recv()]
    assert [(p.payload, p.qos) for p in got] == [(b"w0", 1), (b"w1", 1)]  # type: ignore[union-attr]

    def queue() -> dict[str, int]:
        r = httpx.get(f"{mb.admin_url}/api/queues/%2F/mqtt-subscription-{cid}qos1",
                      auth=("guest", "guest"))
        return r.json()  # type: ignore[no-any-return]

    wait_for(lambda: queue()["messages_ready"] == 1, what="the third message held back")
    assert queue()["messages_unacknowledged"] == 2
    raw.send(PubAck(got[0].packet_id))  # type: ignore[union-attr]
    third = raw.recv()
    assert isinstance(third, Publish) and third.payload == b"w2"
    pub.close()
    raw.drop()


def test_publish_and_subscribe_refused_without_permission(mb: BrokerProcess) -> None:
    """A user who may not write: MQTT 5 PUBACK / SUBACK 0x87, a 3.1.1 publisher is
    disconnected; nothing is routed."""
    api = httpx.Client(base_url=mb.admin_url or "", auth=("guest", "guest"))
    user = f"ro-{new_id()}"
    api.put(f"/api/users/{user}", json={"password": "pw", "tags": ""}).raise_for_status()
    api.put(f"/api/permissions/%2F/{user}",
            json={"configure": ".*", "write": "^$", "read": ".*"}).raise_for_status()
    raw = RawClient(mb.mqtt_port, V5)  # type: ignore[attr-defined]
    raw.send(Connect(new_id(), protocol_level=V5, username=user, password=b"pw"))
    assert isinstance(raw.recv(), ConnAck)
    raw.send(Publish("denied/topic", b"x", qos=1, packet_id=5))
    assert raw.recv() == PubAck(5, ReasonCode.NOT_AUTHORIZED)
    raw.send(Subscribe(6, (Subscription("denied/#", qos=1),)))
    assert raw.recv() == SubAck(6, (ReasonCode.NOT_AUTHORIZED,))
    raw.drop()
    old = RawClient(mb.mqtt_port, V311)  # type: ignore[attr-defined]
    old.send(Connect(new_id(), username=user, password=b"pw"))
    assert old.recv() == ConnAck(False, 0)
    old.send(Publish("denied/topic", b"x", qos=1, packet_id=5))
    assert old.closed_by_broker()
    api.close()


def test_slow_qos0_subscriber_leaves_messages_in_its_queue(mb: BrokerProcess) -> None:
    """A QoS 0 subscriber that does not read: once 4 MiB wait for its socket, its
    messages stay in its queue instead of the broker's memory; it gets them all
    when it reads again."""
    cid, topic = new_id(), f"slow/{new_id()}"
    raw = RawClient(mb.mqtt_port)  # type: ignore[attr-defined]
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    raw.send(Connect(cid, username="guest", password=b"guest"))
    assert raw.recv() == ConnAck(False, 0)
    raw.send(Subscribe(1, (Subscription(topic, qos=0),)))
    assert raw.recv() == SubAck(1, (0,))
    pub = Client(mb.mqtt_port, new_id())  # type: ignore[attr-defined]
    pub.connect()
    count, body = 200, b"z" * 100_000  # 20 MB
    for _ in range(count):
        pub.publish(topic, body, 0)
    pub.publish(f"{topic}/sync", b"", 1)  # PUBACK: everything before it is routed

    def ready() -> int:
        r = httpx.get(f"{mb.admin_url}/api/queues/%2F/mqtt-subscription-{cid}qos0",
                      auth=("guest", "guest"))
        return int(r.json()["messages_ready"])

    wait_for(lambda: ready() > 0, what="messages held in the queue")
    got = 0
    while got < count:
        p = raw.recv()
        assert isinstance(p, Publish) and p.payload == body
        got += 1
    assert ready() == 0
    pub.close()
    raw.drop()


def test_dollar_topics_skip_filters_starting_with_a_wildcard(mb: BrokerProcess) -> None:
    """[MQTT-4.7.2-1]: ``#`` does not match ``$app/...``; ``$app/+`` does (clients may
    not publish into ``$SYS``, the broker's own: test_mqtt_sys.py)."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    tag = new_id()
    everything = Client(port, new_id())
    everything.connect()
    everything.subscribe("#", 1)
    system = Client(port, new_id())
    system.connect()
    system.subscribe(f"$app/{tag}/+", 1)
    pub = Client(port, new_id())
    pub.connect()
    pub.publish(f"$app/{tag}/uptime", b"42", 1)
    pub.publish(f"marker/{tag}", b"after", 1)
    assert system.get().topic == f"$app/{tag}/uptime"
    assert everything.get().topic == f"marker/{tag}"  # the $app message was skipped
    for c in (pub, system, everything):
        c.close()
