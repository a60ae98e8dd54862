"""MQTT sessions are (vhost, client id), as in RabbitMQ (issue 33, item 2): a client id
used in one vhost never touches the same client id in another (no takeover, no will,
no shared stored state, across a restart too); within a vhost any user takes a
session over unless ``mqtt_takeover = "user"``."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.packets import (
    ConnAck,
    Connect,
    Disconnect,
    PubComp,
    Publish,
    PubRec,
    PubRel,
)
from tests.brokerproc import BrokerProcess, free_port, wait_for
from tests.server import mqttclient as mc
from tests.server.mqttclient import V5, V311, Client, RawClient, new_id

mb = mc.module_broker("mqtt-tenants")


def tenant(b: BrokerProcess, vhost: str, *users: str) -> None:
    """A vhost and users (password "pw") with every permission in it."""
    with httpx.Client(base_url=b.admin_url or "", auth=("guest", "guest")) as api:
        api.put(f"/api/vhosts/{vhost}").raise_for_status()
        for user in users:
            api.put(f"/api/users/{user}", json={"password": "pw", "tags": ""}
                    ).raise_for_status()
            api.put(f"/api/permissions/{vhost}/{user}",
                    json={"configure": ".*", "write": ".*", "read": ".*"}).raise_for_status()


def client(b: BrokerProcess, vhost: str, user: str, cid: str, version: int = V311,
           **kw: object) -> Client:
    return Client(b.mqtt_port, cid, version, user=f"{vhost}:{user}", password="pw",  # type: ignore[attr-defined]
                  **kw)  # type: ignore[arg-type]


def test_same_client_id_in_another_vhost_takes_nothing_over(mb: BrokerProcess) -> None:
    """bob's ``sensor-42`` in tenantB leaves alice's ``sensor-42`` in tenantA connected,
    and her retained will ``OFFLINE`` is not published: the first thing her vhost's
    watcher hears after bob's CONNACK is her own marker; the same again on bob's
    reconnect."""
    a, b = f"tA-{new_id()}", f"tB-{new_id()}"
    alice, bob = f"alice-{new_id()}", f"bob-{new_id()}"
    tenant(mb, a, alice)
    tenant(mb, b, bob)
    cid = "sensor-42"
    watcher = client(mb, a, alice, f"w-{new_id()}")
    assert watcher.connect()[0] == 0
    assert watcher.subscribe("status/#", 1) == [1]
    device = client(mb, a, alice, cid, will=("status/sensor-42", b"OFFLINE", 1))
    assert device.connect() == (0, False)
    for _ in range(2):  # he can try on every reconnect
        intruder = client(mb, b, bob, cid)
        assert intruder.connect() == (0, False)
        intruder.close()
        device.publish("status/sensor-42", b"still here", 1)
        m = watcher.get()
        assert (m.topic, m.payload) == ("status/sensor-42", b"still here")
    assert not device.disconnected.is_set()
    device.close()
    watcher.close()


def test_takeover_within_a_vhost_by_another_user(mb: BrokerProcess) -> None:
    """The default (Mosquitto's rule): another user of the same vhost with the same
    client id takes the connection over, and the will fires."""
    v = f"tC-{new_id()}"
    alice, carol = f"alice-{new_id()}", f"carol-{new_id()}"
    tenant(mb, v, alice, carol)
    cid = f"dev-{new_id()}"
    first = client(mb, v, alice, cid)
    assert first.connect()[0] == 0
    second = client(mb, v, carol, cid)
    assert second.connect()[0] == 0
    assert first.disconnected.wait(15)
    second.close()


def _qos2(port: int, vhost: str, user: str, cid: str, topic: str, body: bytes, *,
          release: bool, dup: bool = False) -> None:
    """A persistent 3.1.1 session publishes ``body`` at QoS 2 with packet id 9: PUBREC,
    then PUBREL/PUBCOMP when ``release``, else the connection drops before PUBREL."""
    raw = RawClient(port)
    raw.send(Connect(cid, clean_start=False, username=f"{vhost}:{user}", password=b"pw"))
    assert isinstance(raw.recv(), ConnAck)
    raw.send(Publish(topic, body, qos=2, dup=dup, packet_id=9))
    assert raw.recv() == PubRec(9)
    if release:
        raw.send(PubRel(9))
        assert raw.recv() == PubComp(9)
        raw.send(Disconnect())
    raw.drop()


def test_persistent_sessions_in_two_vhosts_survive_a_restart_apart(tmp_path: Path) -> None:
    """The same client ids with persistent sessions in two vhosts: two sessions each,
    with their own subscriptions, queued messages and QoS 2 packet ids, kept apart
    across a restart (the store keys them by vhost and client id): alice's id 9
    awaiting PUBREL in tenantA does not make bob's new id 9 in tenantB a
    retransmission, and hers is still one (routed once)."""
    mb = mc.mqtt_broker(tmp_path / "data")
    port = mb.mqtt_port  # type: ignore[attr-defined]
    users = {"tenantA": "alice", "tenantB": "bob"}
    try:
        for vhost, user in users.items():
            tenant(mb, vhost, user)
        cid, publisher = "sensor-42", "sensor-43"
        for vhost, topic in (("tenantA", "a/#"), ("tenantB", "b/#")):
            c = client(mb, vhost, users[vhost], cid, V5, clean=False, session_expiry=3600)
            assert c.connect() == (0, False)
            assert c.subscribe(topic, 1) == [1]
            c.close()
        for vhost, user in users.items():
            pub = client(mb, vhost, user, f"p-{new_id()}")
            assert pub.connect()[0] == 0
            for topic in ("a/1", "b/1"):
                pub.publish(topic, f"{vhost} {topic}".encode(), 1)
            pub.close()
        _qos2(port, "tenantA", "alice", publisher, "a/q2", b"tenantA a/q2", release=False)
        mb.kill()
        mb.start()
        wait_for(lambda: mc.listening(port), 30, what="MQTT after restart")
        _qos2(port, "tenantB", "bob", publisher, "b/q2", b"tenantB b/q2", release=True)
        _qos2(port, "tenantA", "alice", publisher, "a/q2", b"tenantA a/q2", release=True,
              dup=True)
        got = {}
        for vhost, user in users.items():
            c = client(mb, vhost, user, cid, V5, clean=False, session_expiry=3600)
            assert c.connect() == (0, True)
            got[vhost] = [c.get().payload, c.get().payload]
            pub = client(mb, vhost, user, f"p-{new_id()}")
            assert pub.connect()[0] == 0
            pub.publish("a/2", f"{vhost} a/2".encode(), 1)
            pub.publish("b/2", f"{vhost} b/2".encode(), 1)
            pub.close()
            got[vhost].append(c.get().payload)
            assert c.messages.empty()
            c.close()
        assert got == {"tenantA": [b"tenantA a/1", b"tenantA a/q2", b"tenantA a/2"],
                       "tenantB": [b"tenantB b/1", b"tenantB b/q2", b"tenantB b/2"]}
    finally:
        mb.kill()


@pytest.mark.parametrize("version", [V311, V5])
def test_takeover_restricted_to_the_same_user(tmp_path: Path, version: int) -> None:
    """``mqtt_takeover = "user"``: another user of the vhost is refused with "identifier
    rejected" (3.1.1: 0x02, 5.0: 0x85), while the session is connected and after it
    left (its stored state is the user's); its own user takes it over."""
    port = free_port()
    mb = BrokerProcess(tmp_path / "d", None, "--mqtt-port", str(port),
                       env={"AMQPLITE_MQTT_TAKEOVER": "user"})
    mb.mqtt_port = port  # type: ignore[attr-defined]
    mb.start()
    try:
        wait_for(lambda: mc.listening(port), 30, what="the MQTT listener")
        tenant(mb, "t", "alice", "carol")
        cid = f"dev-{new_id()}"
        kw: dict[str, object] = {"clean": False}
        if version == V5:
            kw["session_expiry"] = 3600
        owner = client(mb, "t", "alice", cid, version, **kw)
        assert owner.connect()[0] == 0
        assert owner.subscribe("mine/#", 1) == [1]

        def carol_refused() -> None:
            raw = RawClient(port, version)
            raw.send(Connect(cid, protocol_level=version, username="t:carol", password=b"pw",
                             clean_start=False))
            ack = raw.recv()
            assert isinstance(ack, ConnAck)
            assert ack.reason_code == (ReasonCode.CLIENT_IDENTIFIER_NOT_VALID if version == V5
                                       else 0x02)
            assert raw.closed_by_broker()

        carol_refused()
        assert not owner.disconnected.is_set()
        owner.close()
        carol_refused()  # her stored session too
        again = client(mb, "t", "alice", cid, version, **kw)
        assert again.connect() == (0, True)
        again2 = client(mb, "t", "alice", cid, version, **kw)
        assert again2.connect() == (0, True)
        assert again.disconnected.wait(15)
        again2.close()
    finally:
        mb.kill()
