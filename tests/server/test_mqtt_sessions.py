"""MQTT sessions: persistent sessions keep QoS 1 messages while offline and across a
kill -9 of the broker, clean sessions leave nothing behind, a second CONNECT with
the same client id takes the session over."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory.mktemp("mqtt-sessions"))


def _queues(b: BrokerProcess) -> set[str]:
    r = httpx.get(f"{b.admin_url}/api/queues", auth=("guest", "guest"))
    r.raise_for_status()
    return {q["name"] for q in r.json()}


def _persistent(port: int, cid: str, version: int) -> Client:
    if version == V5:
        return Client(port, cid, V5, clean=False, session_expiry=3600)
    return Client(port, cid, V311, clean=False)


@pytest.mark.parametrize("version", [V311, V5])
def test_persistent_session_receives_qos1_sent_while_offline(mb: BrokerProcess,
                                                             version: int) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid, topic = new_id(), f"offline/{new_id()}"
    sub = _persistent(port, cid, version)
    assert sub.connect() == (0, False)
    assert sub.subscribe(topic, 1) == [1]
    sub.close()
    assert f"mqtt-subscription-{cid}qos1" in _queues(mb)  # kept after DISCONNECT
    pub = Client(port, new_id())
    pub.connect()
    for i in range(3):
        pub.publish(topic, b"m%d" % i, 1)
    pub.close()
    again = _persistent(port, cid, version)
    assert again.connect() == (0, True)  # session present
    got = [again.get() for _ in range(3)]
    assert [(m.payload, m.qos) for m in got] == [(b"m0", 1), (b"m1", 1), (b"m2", 1)]
    again.close()


def test_qos0_to_an_offline_session_is_dropped(mb: BrokerProcess) -> None:
    """What the session would get at QoS 0 (published at QoS 0, or through a QoS 0
    subscription) does not wait for it, as Mosquitto's default; QoS 1 does."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid, base = new_id(), f"offline0/{new_id()}"
    sub = _persistent(port, cid, V311)
    assert sub.connect() == (0, False)
    assert sub.subscribe(f"{base}/one", 1) == [1]
    assert sub.subscribe(f"{base}/zero", 0) == [0]
    sub.close()
    pub = Client(port, new_id())
    pub.connect()
    pub.publish(f"{base}/one", b"at-0", 0)
    pub.publish(f"{base}/one", b"at-1", 1)
    pub.publish(f"{base}/zero", b"sub-0", 1)
    pub.publish(f"{base}/one", b"last", 1)  # its PUBACK: every publish above is routed
    pub.close()
    again = _persistent(port, cid, V311)
    assert again.connect() == (0, True)
    got = [again.get().payload for _ in range(2)]
    assert got == [b"at-1", b"last"]
    pub = Client(port, new_id())
    pub.connect()
    pub.publish(f"{base}/zero", b"online", 0)  # online, QoS 0 goes as ever
    assert again.get().payload == b"online"
    assert again.messages.empty()
    pub.close()
    again.close()


def test_clean_session_leaves_no_queue(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid = new_id()
    c = Client(port, cid)
    c.connect()
    c.subscribe("clean/#", 1)
    c.subscribe("clean0/#", 0)
    assert {f"mqtt-subscription-{cid}qos1", f"mqtt-subscription-{cid}qos0"} <= _queues(mb)
    c.close()
    wait_for(lambda: not any(cid in q for q in _queues(mb)), what="queues gone")
    # a persistent session resumed with a clean start forgets the old one
    p = _persistent(port, cid, V311)
    p.connect()
    p.subscribe("clean/#", 1)
    p.close()
    c = Client(port, cid)
    assert c.connect() == (0, False)
    c.close()
    wait_for(lambda: not any(cid in q for q in _queues(mb)), what="queues gone")


def test_second_connect_takes_the_session_over(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid, topic = new_id(), f"takeover/{new_id()}"
    first = _persistent(port, cid, V5)
    first.connect()
    first.subscribe(topic, 1)
    second = _persistent(port, cid, V5)
    assert second.connect() == (0, True)
    assert first.disconnected.wait(15)  # the first was closed (MQTT 5: DISCONNECT 0x8E)
    pub = Client(port, new_id())
    pub.connect()
    pub.publish(topic, b"to the new one", 1)
    assert second.get().payload == b"to the new one"
    pub.close()
    second.close()


def test_persistent_session_survives_kill_9(tmp_path: Path) -> None:
    b = mqtt_broker(tmp_path / "data")
    port = b.mqtt_port  # type: ignore[attr-defined]
    cid, topic = new_id(), "crash/test"
    try:
        sub = _persistent(port, cid, V311)
        sub.connect()
        sub.subscribe("crash/#", 1)
        sub.close()
        pub = Client(port, new_id())
        pub.connect()
        for i in range(20):
            pub.publish(topic, b"n%d" % i, 1)  # each PUBACKed: committed
        b.kill()
        b.start()
        wait_for(lambda: listening(port), 30, what="MQTT after restart")
        again = _persistent(port, cid, V311)
        assert again.connect() == (0, True)
        got = [again.get().payload for _ in range(20)]
        assert got == [b"n%d" % i for i in range(20)]
        again.close()
    finally:
        b.kill()



def test_a_session_without_subscriptions_is_present_also_after_kill_9(tmp_path: Path,
                                                                      ) -> None:
    """Session present is the stored session, subscriptions or not (as Mosquitto):
    on a reconnect, and after a kill -9 when the row is read back."""
    b = mqtt_broker(tmp_path / "data")
    port = b.mqtt_port  # type: ignore[attr-defined]
    ids = {version: new_id() for version in (V311, V5)}
    try:
        for version, cid in ids.items():
            c = _persistent(port, cid, version)
            assert c.connect() == (0, False)
            c.close()
            again = _persistent(port, cid, version)
            assert again.connect() == (0, True)
            again.close()
        b.kill()
        b.start()
        wait_for(lambda: listening(port), 30, what="MQTT after restart")
        for version, cid in ids.items():
            again = _persistent(port, cid, version)
            assert again.connect() == (0, True)
            again.close()
    finally:
        b.kill()


def test_shutdown_publishes_wills_before_the_store_closes(tmp_path: Path) -> None:
    """SIGTERM closes MQTT clients first: a will (QoS 1) reaches a persistent session's
    durable queue and is there after the restart; the broker exits cleanly."""
    b = mqtt_broker(tmp_path / "data")
    port = b.mqtt_port  # type: ignore[attr-defined]
    cid = new_id()
    try:
        sub = _persistent(port, cid, V311)
        sub.connect()
        sub.subscribe("last/#", 1)
        sub.close()
        dying = Client(port, new_id(), V5, will=("last/words", b"bye", 1))
        dying.connect()
        assert b.stop() == 0
        assert dying.disconnected.wait(15)
        b.start()
        wait_for(lambda: listening(port), 30, what="MQTT after restart")
        again = _persistent(port, cid, V311)
        assert again.connect() == (0, True)
        m = again.get()
        assert (m.topic, m.payload) == ("last/words", b"bye")
        again.close()
    finally:
        b.kill()


def _publish_unreleased(port: int, cid: str, topic: str) -> RawClient:
    """A persistent 3.1.1 session publishes b"once" at QoS 2 (id 9): PUBREC, no PUBREL."""
    first = RawClient(port)
    first.send(Connect(cid, clean_start=False, username="guest", password=b"guest"))
    assert first.recv() == ConnAck(False, 0)
    first.send(Publish(topic, b"once", qos=2, packet_id=9))
    assert first.recv() == PubRec(9)
    return first


def _release_retransmitted(port: int, cid: str, topic: str, marker: str) -> RawClient:
    """The session comes back, sends id 9 again (DUP) and releases it, then b"after"
    to ``marker`` at QoS 1."""
    again = RawClient(port)
    again.send(Connect(cid, clean_start=False, username="guest", password=b"guest"))
    assert isinstance(again.recv(), ConnAck)
    again.send(Publish(topic, b"once", qos=2, dup=True, packet_id=9))
    assert again.recv() == PubRec(9)
    again.send(PubRel(9))
    assert again.recv() == PubComp(9)
    again.send(Publish(marker, b"after", qos=1, packet_id=10))
    assert again.recv() == PubAck(10)
    return again


def test_qos2_id_awaiting_pubrel_survives_a_reconnect(mb: BrokerProcess) -> None:
    """PUBREC sent, connection lost before PUBREL: the persistent session's client
    sends the PUBLISH again (DUP) after reconnecting; it is not routed twice."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid, topic = new_id(), f"qos2/{new_id()}"
    watcher = Client(port, new_id())
    watcher.connect()
    watcher.subscribe(f"{topic}/#", 1)
    first = _publish_unreleased(port, cid, topic)
    first.drop()
    again = _release_retransmitted(port, cid, topic, f"{topic}/marker")
    assert [watcher.get().payload, watcher.get().payload] == [b"once", b"after"]
    again.send(Disconnect())
    watcher.close()


def test_session_expiry_counts_down_across_kill_9(tmp_path: Path) -> None:
    """An MQTT 5 session's expiry is stored: after a kill -9 and a restart the countdown
    still runs, its queues go, and the next CONNECT finds no session."""
    b = mqtt_broker(tmp_path / "data")
    port = b.mqtt_port  # type: ignore[attr-defined]
    cid = new_id()
    try:
        sub = Client(port, cid, V5, clean=False, session_expiry=2)
        assert sub.connect() == (0, False)
        assert sub.subscribe(f"exp/{cid}", 1) == [1]
        sub.close()
        keeper = _persistent(port, new_id(), V311)  # never expires: stays
        keeper.connect()
        keeper.subscribe(f"keep/{cid}", 1)
        keeper.close()
        b.kill()
        b.start()
        wait_for(lambda: listening(port), 30, what="MQTT after restart")
        wait_for(lambda: f"mqtt-subscription-{cid}qos1" not in _queues(b), 30,
                 what="the expired session's queue deleted")
        assert any(q.startswith("mqtt-subscription-") for q in _queues(b))  # the keeper's
        again = Client(port, cid, V5, clean=False, session_expiry=2)
        assert again.connect() == (0, False)
        again.close()
    finally:
        b.kill()


@pytest.mark.parametrize("crash", [False, True])
def test_qos2_id_awaiting_pubrel_survives_a_restart(tmp_path: Path, crash: bool) -> None:
    """The QoS 2 ids a persistent session acknowledged and that were not released are
    stored: a retransmission after a broker restart is not routed twice. The id is
    stored with the message, before the PUBREC: a kill -9 while the publisher is
    still connected (``crash``) forgets nothing either."""
    b = mqtt_broker(tmp_path / "data")
    port = b.mqtt_port  # type: ignore[attr-defined]
    cid, wid, topic = new_id(), new_id(), f"q2/{new_id()}"
    try:
        watcher = _persistent(port, wid, V311)
        watcher.connect()
        watcher.subscribe(topic, 1)
        watcher.close()
        first = _publish_unreleased(port, cid, topic)
        if crash:
            b.kill()
        else:
            first.send(Disconnect())
            assert first.closed_by_broker()
            b.stop()
        b.start()
        wait_for(lambda: listening(port), 30, what="MQTT after restart")
        _release_retransmitted(port, cid, topic, topic)
        w = _persistent(port, wid, V311)
        assert w.connect() == (0, True)
        assert [w.get().payload, w.get().payload] == [b"once", b"after"]
        w.close()
    finally:
        b.kill()


def _left(port: int, cid: str, expiry: int) -> None:
    """An MQTT 5 session with a QoS 1 subscription, disconnected with ``expiry`` to run."""
    sub = Client(port, cid, V5, clean=False, session_expiry=expiry)
    sub.connect()
    sub.subscribe(f"exp/{cid}", 1)
    sub.close()


def test_session_expires_after_disconnect(mb: BrokerProcess) -> None:
    """MQTT 5 session expiry counts down from the disconnect; a reconnect in time
    stops it (the session is present), a late one finds none."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid = new_id()
    _left(port, cid, 1)
    wait_for(lambda: f"mqtt-subscription-{cid}qos1" not in _queues(mb), 30,
             what="the expired session's queue deleted")
    late = Client(port, cid, V5, clean=False, session_expiry=600)
    assert late.connect() == (0, False)
    late.close()


def test_resuming_with_expiry_0_ends_the_session(mb: BrokerProcess) -> None:
    """MQTT 5 3.1.2.11.2: a stored session resumed with Session Expiry Interval 0
    ends when that connection closes: its queue goes, and the next CONNECT finds
    no session."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid = new_id()
    _left(port, cid, 3600)
    again = Client(port, cid, V5, clean=False)  # no Session Expiry Interval: 0
    assert again.connect() == (0, True)
    again.close()
    wait_for(lambda: f"mqtt-subscription-{cid}qos1" not in _queues(mb), 30,
             what="the ended session's queue deleted")
    late = Client(port, cid, V5, clean=False)
    assert late.connect() == (0, False)
    late.close()


def _raw_session(port: int, cid: str, present: bool) -> RawClient:
    raw = RawClient(port, V311)
    raw.send(Connect(cid, clean_start=False, username="guest", password=b"guest"))
    assert raw.recv() == ConnAck(session_present=present)
    return raw


def _publish(got: object, topic: str, payload: bytes) -> Publish:
    assert isinstance(got, Publish) and (got.topic, got.payload) == (topic, payload), got
    return got


def test_recovered_messages_never_sent_go_without_dup(tmp_path: Path) -> None:
    """After a kill -9, a persistent session's messages that were never sent arrive
    with DUP 0; the one sent and not acknowledged before its client left arrives
    with DUP 1 (3.1.1 3.3.1.1), as does one sent to a session still connected at
    the kill (nothing says whether it left: RabbitMQ's rule)."""
    b = mqtt_broker(tmp_path / "data")
    port = b.mqtt_port  # type: ignore[attr-defined]
    cid, live, topic = new_id(), new_id(), f"dup/{new_id()}"
    try:
        for c in (cid, live):
            raw = _raw_session(port, c, False)
            raw.send(Subscribe(1, (Subscription(f"{topic}/{c}", qos=1),)))
            assert isinstance(raw.recv(), SubAck)
            if c == cid:
                away = raw
            else:
                still = raw
        pub = Client(port, new_id())
        pub.connect()
        pub.publish(f"{topic}/{cid}", b"sent", 1)
        pub.publish(f"{topic}/{live}", b"sent-live", 1)
        assert not _publish(away.recv(), f"{topic}/{cid}", b"sent").dup  # no PUBACK
        assert not _publish(still.recv(), f"{topic}/{live}", b"sent-live").dup
        away.drop()
        with httpx.Client(base_url=b.admin_url or "", auth=("guest", "guest")) as api:
            wait_for(lambda: all(c.get("client_properties", {}).get("client_id") != cid
                                 for c in api.get("/api/connections").json()),
                     what="the session to end")
        for i in range(3):
            pub.publish(f"{topic}/{cid}", b"offline %d" % i, 1)  # PUBACKed: committed
        b.kill()
        still.sock.close()
        b.start()
        wait_for(lambda: listening(port), 30, what="MQTT after restart")
        again = _raw_session(port, cid, True)
        got = [again.recv() for _ in range(4)]
        assert [(p.payload, p.dup) for p in got if isinstance(p, Publish)] == [
            (b"sent", True), (b"offline 0", False), (b"offline 1", False),
            (b"offline 2", False)]
        back = _raw_session(port, live, True)
        assert _publish(back.recv(), f"{topic}/{live}", b"sent-live").dup
        for r in (again, back):
            r.send(Disconnect())
    finally:
        b.kill()
