"""Outbound QoS 2 (exactly once to a subscriber): granted on SUBSCRIBE, delivered
with PUBLISH QoS 2, the delivery unacked in the session's queue until PUBCOMP.
A PUBLISH not answered is sent again after a reconnect or a restart (kill -9
included) with its packet id and DUP; one answered with PUBREC is never sent
again, only its PUBREL, until PUBCOMP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from amqplite.protocol.mqtt.packets import (
    ConnAck,
    Connect,
    Disconnect,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
)
from tests.brokerproc import BrokerProcess, wait_for
from tests.server.mqttclient import V311, Client, RawClient, listening, mqtt_broker, new_id, running_broker


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory.mktemp("mqtt-qos2"))


def _queue(b: BrokerProcess, cid: str) -> dict[str, Any]:
    r = httpx.get(f"{b.admin_url}/api/queues/%2F/mqtt-subscription-{cid}qos1",
                  auth=("guest", "guest"))
    r.raise_for_status()
    return r.json()  # type: ignore[no-any-return]


def _counts(b: BrokerProcess, cid: str) -> tuple[int, int]:
    q = _queue(b, cid)
    return q["messages_ready"], q["messages_unacknowledged"]


def _session(port: int, cid: str, present: bool) -> RawClient:
    """A persistent 3.1.1 session (clean session 0) over a raw socket."""
    c = RawClient(port, V311)
    c.send(Connect(cid, clean_start=False, username="guest", password=b"guest"))
    assert c.recv() == ConnAck(present, 0)
    return c


def _subscribed(port: int, cid: str, topic: str) -> RawClient:
    c = _session(port, cid, False)
    c.send(Subscribe(1, (Subscription(topic, 2),)))
    assert c.recv() == SubAck(1, (2,))
    return c


def _publish(port: int, topic: str, payload: bytes, qos: int) -> None:
    pub = Client(port, new_id())
    pub.connect()
    pub.publish(topic, payload, qos)
    pub.close()


def _received(c: RawClient) -> Publish:
    p = c.recv()
    assert isinstance(p, Publish), p
    return p


def _resent_then_completed(b: BrokerProcess, cid: str, first: Publish) -> None:
    """The session comes back: ``first`` is sent again as it was (QoS 2, its packet
    id, DUP), then its flow completes and the delivery is acked."""
    again = _session(b.mqtt_port, cid, True)  # type: ignore[attr-defined]
    p = _received(again)
    assert (p.payload, p.qos, p.dup, p.packet_id) == (first.payload, 2, True, first.packet_id)
    assert p.packet_id is not None
    again.send(PubRec(p.packet_id))
    assert again.recv() == PubRel(p.packet_id)
    again.send(PubComp(p.packet_id))
    wait_for(lambda: _counts(b, cid) == (0, 0), 15, what="the delivery acked")
    again.send(Disconnect())


def test_qos2_subscription_gets_qos2_and_the_delivery_stays_unacked_until_pubcomp(
        mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid, topic = new_id(), f"q2/{new_id()}"
    sub = _subscribed(port, cid, topic)
    _publish(port, topic, b"once", 2)
    p = _received(sub)
    assert (p.topic, p.payload, p.qos, p.dup) == (topic, b"once", 2, False)
    assert p.packet_id is not None
    sub.send(PubRec(p.packet_id))
    assert sub.recv() == PubRel(p.packet_id)
    assert _counts(mb, cid) == (0, 1)  # released, not yet complete: still unacked
    sub.send(PubComp(p.packet_id))
    wait_for(lambda: _counts(mb, cid) == (0, 0), 15, what="the delivery acked at PUBCOMP")
    sub.send(Disconnect())


def test_qos1_publish_reaches_a_qos2_subscription_at_qos1(mb: BrokerProcess) -> None:
    """Delivery QoS is min(subscription, publish)."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid, topic = new_id(), f"q2/{new_id()}"
    sub = _subscribed(port, cid, topic)
    _publish(port, topic, b"one", 1)
    p = _received(sub)
    assert (p.payload, p.qos) == (b"one", 1)
    assert p.packet_id is not None
    sub.send(PubAck(p.packet_id))
    wait_for(lambda: _counts(mb, cid) == (0, 0), 15, what="the QoS 1 delivery acked")
    sub.send(Disconnect())


def test_resubscribing_at_qos1_downgrades_the_delivery(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid, topic = new_id(), f"q2/{new_id()}"
    sub = _subscribed(port, cid, topic)
    sub.send(Subscribe(2, (Subscription(topic, 1),)))
    assert sub.recv() == SubAck(2, (1,))
    _publish(port, topic, b"two", 2)
    p = _received(sub)
    assert (p.payload, p.qos) == (b"two", 1)
    sub.send(Disconnect())


def _unanswered_then_resent(b: BrokerProcess, restart: str) -> None:
    port = b.mqtt_port  # type: ignore[attr-defined]
    cid, topic = new_id(), f"q2/{new_id()}"
    sub = _subscribed(port, cid, topic)
    _publish(port, topic, b"warm", 1)  # takes packet id 1: a new start would reuse it
    warm = _received(sub)
    assert warm.packet_id == 1
    sub.send(PubAck(1))
    _publish(port, topic, b"once", 2)
    first = _received(sub)
    assert first.packet_id == 2
    sub.drop()  # no PUBREC
    if restart == "kill":
        b.kill()
        b.start()
        wait_for(lambda: listening(port), 30, what="MQTT after restart")
    _resent_then_completed(b, cid, first)


def _released_then_only_pubrel(b: BrokerProcess, restart: str) -> None:
    port = b.mqtt_port  # type: ignore[attr-defined]
    cid, topic = new_id(), f"q2/{new_id()}"
    sub = _subscribed(port, cid, topic)
    _publish(port, topic, b"once", 2)
    p = _received(sub)
    assert p.packet_id is not None
    sub.send(PubRec(p.packet_id))
    assert sub.recv() == PubRel(p.packet_id)  # sent once "released" is stored
    sub.drop()  # no PUBCOMP
    if restart == "kill":
        b.kill()
        b.start()
        wait_for(lambda: listening(port), 30, what="MQTT after restart")
    again = _session(port, cid, True)
    assert again.recv() == PubRel(p.packet_id)  # not the PUBLISH again
    again.send(PubComp(p.packet_id))
    _publish(port, topic, b"after", 1)
    nxt = _received(again)
    assert nxt.payload == b"after"  # "once" never came again
    assert nxt.packet_id is not None
    again.send(PubAck(nxt.packet_id))
    wait_for(lambda: _counts(b, cid) == (0, 0), 15, what="every delivery acked")
    again.send(Disconnect())


def test_unanswered_qos2_publish_is_resent_with_its_id_after_a_reconnect(
        mb: BrokerProcess) -> None:
    _unanswered_then_resent(mb, "reconnect")


def test_released_qos2_message_is_not_resent_after_a_reconnect(mb: BrokerProcess) -> None:
    _released_then_only_pubrel(mb, "reconnect")


def test_unanswered_qos2_publish_is_resent_with_its_id_after_kill_9(tmp_path: Path) -> None:
    b = mqtt_broker(tmp_path / "data")
    try:
        _unanswered_then_resent(b, "kill")
    finally:
        b.kill()


def test_released_qos2_message_is_not_resent_after_kill_9(tmp_path: Path) -> None:
    b = mqtt_broker(tmp_path / "data")
    try:
        _released_then_only_pubrel(b, "kill")
    finally:
        b.kill()


def test_a_begun_qos2_flow_ends_as_qos2_after_a_downgrade(mb: BrokerProcess) -> None:
    """[MQTT-4.4.0-1]: the unanswered PUBLISH is resent as it was (QoS 2, its id,
    DUP) though the filter was subscribed again at QoS 1 meanwhile."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid, topic = new_id(), f"q2/{new_id()}"
    sub = _subscribed(port, cid, topic)
    _publish(port, topic, b"once", 2)
    first = _received(sub)
    sub.send(Subscribe(2, (Subscription(topic, 1),)))
    assert sub.recv() == SubAck(2, (1,))
    sub.drop()
    _resent_then_completed(mb, cid, first)
