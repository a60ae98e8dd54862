"""Topic permissions for MQTT through the real broker, paho-mqtt and raw packets:
checked on the AMQP-translated key (``a/b`` as ``a.b``) as RabbitMQ's plugin does,
with ``{client_id}`` expanded. A refused PUBLISH gets PUBACK 0x87 (MQTT 5) or closes
a 3.1.1 connection at every QoS (RabbitMQ 3.10.8 does, measured); a refused SUBSCRIBE
gets 0x87 (MQTT 5) / 0x80 (3.1.1) for that filter alone."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.packets import (
    ConnAck,
    Connect,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
)
from tests.brokerproc import BrokerProcess
from tests.server.mqttclient import V5, V311, Client, RawClient, new_id, running_broker


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory.mktemp("mqtt-topic-perms"))


def _user_with(mb: BrokerProcess, prefix: str, write: str, read: str) -> Iterator[str]:
    """A user (password "pw") with full permissions and a topic permission on amq.topic."""
    name = f"{prefix}-{new_id()}"
    with httpx.Client(base_url=mb.admin_url or "", auth=("guest", "guest")) as api:
        api.put(f"/api/users/{name}", json={"password": "pw", "tags": ""}).raise_for_status()
        api.put(f"/api/permissions/%2F/{name}",
                json={"configure": ".*", "write": ".*", "read": ".*"}).raise_for_status()
        api.put(f"/api/topic-permissions/%2F/{name}",
                json={"exchange": "amq.topic", "write": write, "read": read}
                ).raise_for_status()
        yield name
        api.delete(f"/api/users/{name}")


@pytest.fixture
def user(mb: BrokerProcess) -> Iterator[str]:
    """Write keys starting ``a.``, read keys starting with its client id then a dot."""
    yield from _user_with(mb, "tp", "^a\\.", "^{client_id}\\.")


def connect(mb: BrokerProcess, user: str, version: int, cid: str) -> RawClient:
    raw = RawClient(mb.mqtt_port, version)  # type: ignore[attr-defined]
    raw.send(Connect(cid, protocol_level=version, username=user, password=b"pw"))
    ack = raw.recv()
    assert isinstance(ack, ConnAck) and ack.reason_code == 0, ack
    return raw


def test_mqtt5_refusals_per_packet(mb: BrokerProcess, user: str) -> None:
    """MQTT 5: PUBACK 0x87 for a refused key, success for an allowed one; SUBACK gives
    each filter its own code; the connection stays open."""
    cid = f"c-{new_id()}"
    raw = connect(mb, user, V5, cid)
    raw.send(Publish("x/y", b"m", qos=1, packet_id=1))
    assert raw.recv() == PubAck(1, ReasonCode.NOT_AUTHORIZED)
    raw.send(Publish("a/y", b"m", qos=1, packet_id=2))
    assert raw.recv() == PubAck(2, ReasonCode.NO_MATCHING_SUBSCRIBERS)  # allowed, unheard
    # "a/y" as an MQTT topic is "a.y" to the check: the "/" form would not match ^a\.
    raw.send(Subscribe(3, (Subscription(f"{cid}/#", qos=1), Subscription("other/+", qos=0),
                           Subscription(f"{cid}/x", qos=0))))
    assert raw.recv() == SubAck(3, (1, ReasonCode.NOT_AUTHORIZED, 0))
    raw.send(Publish("a/z", b"still open", qos=1, packet_id=4))
    assert raw.recv() == PubAck(4, ReasonCode.NO_MATCHING_SUBSCRIBERS)
    raw.drop()


@pytest.mark.parametrize("qos", [0, 1])
def test_mqtt311_refused_publish_closes(mb: BrokerProcess, user: str, qos: int) -> None:
    """3.1.1 has no negative PUBACK: the connection is closed, at QoS 0 too (as RabbitMQ
    3.10.8 closes it); nothing is routed."""
    watcher = Client(mb.mqtt_port, new_id())  # type: ignore[attr-defined]
    assert watcher.connect()[0] == 0
    assert watcher.subscribe("x/#", 0) == [0]
    raw = connect(mb, user, V311, f"c-{new_id()}")
    raw.send(Publish("x/y", b"refused", qos=qos, packet_id=1 if qos else None))
    assert raw.closed_by_broker()
    watcher.publish("x/marker", b"marker", 0)
    assert watcher.get().payload == b"marker"  # the refused one never arrived first
    watcher.close()


def test_mqtt311_subscribe_refused_per_filter(mb: BrokerProcess, user: str) -> None:
    """3.1.1: 0x80 for the refused filter, the granted QoS for the others; a message on
    an allowed key arrives."""
    cid = f"c-{new_id()}"
    sub = Client(mb.mqtt_port, cid, user=user, password="pw")  # type: ignore[attr-defined]
    assert sub.connect()[0] == 0
    assert sub.subscribe("zz/#", 1) == [0x80]
    assert sub.subscribe(f"{cid}/+", 1) == [1]
    pub = Client(mb.mqtt_port, new_id())  # type: ignore[attr-defined]
    assert pub.connect()[0] == 0
    pub.publish("zz/1", b"not for you", 1)
    pub.publish(f"{cid}/1", b"yours", 1)
    m = sub.get()
    assert (m.topic, m.payload) == (f"{cid}/1", b"yours")
    pub.close()
    sub.close()


def test_client_id_is_escaped(mb: BrokerProcess, user: str) -> None:
    """``{client_id}`` is the escaped client id: for a client ``c|…`` the expression is
    ``^c\\|…\\.``, so ``cZZ/t`` stays refused (unescaped, ``^c|…`` would let it pass).
    (A ``.`` in a client id is ``/`` in the key: test_dotted_client_id_gets_no_other_device.)"""
    cid = f"c|{new_id()}"
    raw = connect(mb, user, V5, cid)
    raw.send(Subscribe(1, (Subscription(f"{cid}/t", qos=0), Subscription("cZZ/t", qos=0))))
    assert raw.recv() == SubAck(1, (0, ReasonCode.NOT_AUTHORIZED))
    raw.drop()


@pytest.fixture
def device_user(mb: BrokerProcess) -> Iterator[str]:
    """A user shared by devices: each may write and read only under its own level,
    ``devices/{client_id}/…`` (issue 33's case)."""
    yield from _user_with(mb, "dev", "^devices\\.{client_id}\\.", "^devices\\.{client_id}\\.")


def test_dotted_client_id_gets_no_other_device(mb: BrokerProcess, device_user: str) -> None:
    """Client id ``a.secret`` gets its own level ``devices/a.secret/…`` only, never
    ``devices/a/secret/…`` (device ``a``'s): MQTT 5 hears 0x87 for the PUBLISH and the
    SUBSCRIBE, 3.1.1 0x80 for the SUBSCRIBE and a closed connection for the PUBLISH;
    device ``a`` keeps its access."""
    a = f"a{new_id()}"
    thief = f"{a}.secret"
    raw = connect(mb, device_user, V5, thief)
    raw.send(Subscribe(1, (Subscription(f"devices/{a}/secret/#", qos=1),
                           Subscription(f"devices/{thief}/#", qos=1))))
    assert raw.recv() == SubAck(1, (ReasonCode.NOT_AUTHORIZED, 1))
    raw.send(Publish(f"devices/{a}/secret/unlock", b"open", qos=1, packet_id=2))
    assert raw.recv() == PubAck(2, ReasonCode.NOT_AUTHORIZED)
    raw.send(Publish(f"devices/{thief}/status", b"mine", qos=1, packet_id=3))
    assert PubAck(3, 0) in [raw.recv(), raw.recv()]  # and its own subscription's copy
    raw.drop()
    old = Client(mb.mqtt_port, thief, user=device_user, password="pw")  # type: ignore[attr-defined]
    assert old.connect()[0] == 0
    assert old.subscribe(f"devices/{a}/secret/#", 1) == [0x80]
    old.close()
    raw = connect(mb, device_user, V311, thief)
    raw.send(Publish(f"devices/{a}/secret/unlock", b"open", qos=1, packet_id=1))
    assert raw.closed_by_broker()
    device = connect(mb, device_user, V5, a)  # the owner still has its level
    device.send(Subscribe(1, (Subscription(f"devices/{a}/secret/#", qos=1),)))
    assert device.recv() == SubAck(1, (1,))
    device.send(Publish(f"devices/{a}/secret/unlock", b"ok", qos=1, packet_id=2))
    got = [device.recv(), device.recv()]
    assert PubAck(2, 0) in got
    device.drop()
