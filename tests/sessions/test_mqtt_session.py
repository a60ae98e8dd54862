"""MQTT session rules with plain calls: takeover, clean start and expiry, wills,
publish and confirms, retained quota, subscription options (no sockets)."""

from __future__ import annotations

from typing import Any

from amqplite.protocol.mqtt import packets as pk
from amqplite.protocol.mqtt.decoder import decode_all
from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.packets import MQTT_5, MQTT_311
from amqplite.sessions.mqtt.common import queue_name
from amqplite.storeops import (
    NEVER_EXPIRES,
    DeleteMQTTPacketId,
    DeleteMQTTSession,
    DeleteMQTTWill,
    PutMQTTPacketId,
    PutMQTTSession,
    PutMQTTWill,
)
from tests.sessions.mqtt_node import Client, Node


def subscribe(c: Client, *subs: pk.Subscription, pid: int = 1) -> list[int]:
    c.send(pk.Subscribe(pid, subs))
    (ack,) = [p for p in c.received() if isinstance(p, pk.SubAck)]
    return list(ack.reason_codes)


def publishes(c: Client) -> list[pk.Publish]:
    return [p for p in c.received() if isinstance(p, pk.Publish)]


def queue_exists(node: Node, client_id: str, qos: int, vhost: str = "/") -> bool:
    return queue_name(client_id, qos) in node.broker.vhosts[vhost].queues


# ---------------------------------------------------------------- takeover
def test_a_second_connect_takes_the_session_over() -> None:
    node = Node()
    old, _ = node.connect("dev")
    new, ack = node.connect("dev")
    assert ack.reason_code == 0
    assert node.registry.clients[("/", "dev")] is new.rules
    (d,) = old.received()
    assert isinstance(d, pk.Disconnect) and d.reason_code == ReasonCode.SESSION_TAKEN_OVER
    assert old.rules.session is None  # its broker session closed


def test_the_same_client_id_in_another_vhost_is_another_session() -> None:
    node = Node()
    node.broker.add_vhost("other")
    a, _ = node.connect("dev")
    b, _ = node.connect("dev", vhost="other")
    assert a.rules.session is not None and b.rules.session is not None
    assert set(node.registry.clients) == {("/", "dev"), ("other", "dev")}


def test_takeover_user_refuses_another_users_client_id() -> None:
    node = Node(takeover="user")
    node.connect("dev", user="guest")
    assert not node.registry.may_take_over(("/", "dev"), "bob")
    assert node.registry.may_take_over(("/", "dev"), "guest")
    # a stored session remembers its user after the connection is gone
    b, _ = node.connect("kept", MQTT_311, clean=False)
    b.close()
    assert not node.registry.may_take_over(("/", "kept"), "bob")
    assert node.registry.may_take_over(("/", "kept"), "guest")
    assert Node().registry.may_take_over(("/", "dev"), "bob")  # Mosquitto's rule


# ---------------------------------------------------------------- clean start, expiry
def test_a_persistent_session_keeps_its_queue_and_row() -> None:
    node = Node()
    c, ack = node.connect("p", MQTT_311, clean=False)
    assert not ack.session_present
    assert subscribe(c, pk.Subscription("a/b", 1)) == [1]
    c.close()
    assert queue_exists(node, "p", 1)
    (row, gone) = node.rows(PutMQTTSession)
    assert row.expiry == gone.expiry == NEVER_EXPIRES and gone.disconnected_at == node.clock.t
    pub, _ = node.connect("pub", MQTT_311)
    pub.send(pk.Publish("a/b", b"waiting", qos=1, packet_id=1))
    c, ack = node.connect("p", MQTT_311, clean=False)
    assert ack.session_present
    assert [p.payload for p in c.backlog] == [b"waiting"]


def test_a_stored_session_without_subscriptions_is_present() -> None:
    """3.1.1 3.2.2.2 / 5.0 3.2.2.1.1 (and Mosquitto 2.0.11): session present means the
    server has state for the client id; a stored row is state, queues or not (its
    row read back at a restart too)."""
    node = Node()
    for cid, kw in (("v3", {"version": MQTT_311}), ("v5", {"session_expiry_interval": 60})):
        c, ack = node.connect(cid, clean=False, **kw)
        assert not ack.session_present
        c.close()
        assert not queue_exists(node, cid, 0) and not queue_exists(node, cid, 1)
        c, ack = node.connect(cid, clean=False, **kw)
        assert ack.session_present
        c.close()
        restarted = Node()
        for row in node.rows(PutMQTTSession):
            restarted.registry.restore_session(row, restarted.clock.t)
        _, ack = restarted.connect(cid, clean=False, **kw)
        assert ack.session_present
    _, ack = node.connect("v3", MQTT_311, clean=True)
    assert not ack.session_present


def _left(node: Node, client_id: str, *args: Any, **kw: Any) -> None:
    """A session (``node.connect``'s arguments) with a QoS 1 subscription, disconnected."""
    c, _ = node.connect(client_id, *args, **kw)
    subscribe(c, pk.Subscription("x", 1))
    c.close()


def test_a_clean_start_forgets_the_previous_session() -> None:
    node = Node()
    _left(node, "p", MQTT_311, clean=False)
    _, ack = node.connect("p", MQTT_311, clean=True)
    assert not ack.session_present
    assert not queue_exists(node, "p", 1)
    assert node.rows(DeleteMQTTSession)[-1].client_id == "p"
    assert ("/", "p") not in node.registry.stored


def test_session_expiry_drops_queues_and_row_after_the_interval() -> None:
    node = Node()
    _left(node, "e", session_expiry_interval=30)
    assert node.expiry.due[("/", "e")] == node.clock.t + 30
    node.advance(29)
    assert queue_exists(node, "e", 1)
    node.advance(1)
    assert not queue_exists(node, "e", 1)
    assert ("/", "e") not in node.registry.stored
    assert node.rows(DeleteMQTTSession)[-1].client_id == "e"


def test_reconnecting_in_time_stops_the_expiry() -> None:
    node = Node()
    c, _ = node.connect("e", session_expiry_interval=30)
    c.close()
    node.advance(10)
    c, _ = node.connect("e", clean=False, session_expiry_interval=30)
    assert ("/", "e") not in node.expiry.due
    node.advance(100)
    assert node.registry.clients[("/", "e")] is c.rules


def test_expiry_at_zero_is_a_clean_session() -> None:
    node = Node()
    c, _ = node.connect("z")
    subscribe(c, pk.Subscription("x", 1))
    c.close()
    assert not queue_exists(node, "z", 1) and not node.rows(PutMQTTSession)
    assert ("/", "z") not in node.registry.packet_ids


def test_resuming_with_expiry_zero_ends_the_session() -> None:
    node = Node()
    _left(node, "r", session_expiry_interval=10)
    c, ack = node.connect("r", clean=False)  # MQTT 5: expiry 0, the session ends with it
    assert ack.session_present
    assert node.rows(PutMQTTSession)[-1].expiry == 0  # a crash now: it expires at the start
    c.close()
    assert ("/", "r") not in node.registry.stored and not queue_exists(node, "r", 1)
    assert node.rows(DeleteMQTTSession)[-1].client_id == "r"
    _, ack = node.connect("r", clean=False, session_expiry_interval=10)
    assert not ack.session_present


def test_taking_over_a_session_resumed_with_expiry_zero_starts_a_new_one() -> None:
    """Mosquitto 2.0.11 too: the session ended with the connection taken over."""
    node = Node()
    _left(node, "r", session_expiry_interval=10)
    node.connect("r", clean=False)
    _, ack = node.connect("r", clean=False, session_expiry_interval=10)
    assert not ack.session_present and not queue_exists(node, "r", 1)


def test_a_restored_session_with_expiry_zero_expires_at_the_start() -> None:
    node = Node()
    node.registry.restore_session(PutMQTTSession("/", "crashed", 0, None, (), "guest"),
                                  node.clock.t)
    assert node.expiry.due[("/", "crashed")] == node.clock.t


def test_311_clean_session_0_after_a_clean_one_is_a_new_persistent_session() -> None:
    """3.1.1 has no expiry: a persistent session lives until a clean session ends it."""
    node = Node()
    _left(node, "p", MQTT_311, clean=True)
    c, ack = node.connect("p", MQTT_311, clean=False)
    assert not ack.session_present
    subscribe(c, pk.Subscription("x", 1))
    c.close()
    node.advance(10**6)
    assert queue_exists(node, "p", 1) and ("/", "p") in node.registry.stored


def test_a_restored_session_counts_from_its_disconnect() -> None:
    node = Node()
    row = PutMQTTSession("/", "old", 60, node.clock.t - 50, (7,), "guest")
    node.registry.restore_session(row, node.clock.t)
    assert node.expiry.due[("/", "old")] == node.clock.t + 10
    assert node.registry.ids(("/", "old")).inbound == {7}
    node.carry()
    assert node.rows(PutMQTTPacketId) == [PutMQTTPacketId("/", "old", 7, False)]


# ---------------------------------------------------------------- wills
def _watch(node: Node, topic: str = "will/#") -> Client:
    w, _ = node.connect("watcher")
    subscribe(w, pk.Subscription(topic, 1))
    return w


def test_a_will_is_published_when_the_connection_drops() -> None:
    node = Node()
    w = _watch(node)
    c, _ = node.connect("dev", will=pk.Will("will/dev", b"gone", 1))
    assert node.rows(PutMQTTWill)[-1].topic == "will/dev"  # stored before the CONNACK
    c.close()
    assert [p.payload for p in publishes(w)] == [b"gone"]
    assert node.rows(DeleteMQTTWill)


def test_a_normal_disconnect_cancels_the_will() -> None:
    node = Node()
    w = _watch(node)
    c, _ = node.connect("dev", will=pk.Will("will/dev", b"gone", 1))
    c.send(pk.Disconnect())
    assert publishes(w) == []
    assert "dev" not in {k[1] for k in node.registry.wills.pending}


def _delayed(payload: bytes, delay: int) -> pk.Will:
    return pk.Will("will/dev", payload, 1, properties=pk.Properties(will_delay_interval=delay))


def test_a_will_delay_is_capped_by_the_session_expiry() -> None:
    node = Node()
    w = _watch(node)
    c, _ = node.connect("dev", will=_delayed(b"late", 100), session_expiry_interval=20)
    assert c.rules.will_delay() == 20
    c.close()
    assert publishes(w) == []
    assert node.registry.wills.pending[("/", "dev")].due_at == node.clock.t + 20
    node.advance(20)
    assert [p.payload for p in publishes(w)] == [b"late"]


def test_resuming_in_time_cancels_a_delayed_will_and_a_clean_start_fires_it() -> None:
    node = Node()
    w = _watch(node)
    will = _delayed(b"late", 50)
    c, _ = node.connect("dev", will=will, session_expiry_interval=100)
    c.close()
    c, _ = node.connect("dev", clean=False, session_expiry_interval=100)
    node.advance(60)
    assert publishes(w) == []
    c.close()
    c, _ = node.connect("dev2", will=will, session_expiry_interval=100)
    c.close()
    node.connect("dev2", clean=True)
    assert [p.payload for p in publishes(w)] == [b"late"]


def test_session_expiry_publishes_a_will_still_delayed() -> None:
    node = Node()
    w = _watch(node)
    c, _ = node.connect("dev", will=_delayed(b"end", 10), session_expiry_interval=10)
    c.close()
    node.advance(10)
    assert [p.payload for p in publishes(w)] == [b"end"]
    assert not node.registry.wills.pending


# ---------------------------------------------------------------- publish, confirms
def test_qos1_publish_is_acknowledged_after_the_confirm() -> None:
    node = Node()
    c, _ = node.connect("pub")
    c.proto.receive_data(pk.encode(pk.Publish("t", b"x", qos=1, packet_id=5), MQTT_5), 0.0)
    (e,) = list(c.proto.events())
    c.rules.publish(e.publish.topic, e.publish.payload, 1, 5)  # type: ignore[attr-defined]
    assert c.proto.data_to_send() == b""  # the PUBACK waits for the confirm
    assert [type(p) for p in c.received()] == [pk.PubAck]


def test_v5_publish_matching_no_subscription_is_acked_with_0x10() -> None:
    """MQTT 5 3.4.2.1, as Mosquitto 2.0.11: PUBACK/PUBREC 0x10 No matching subscribers
    when nothing matched; 0 once a subscription does; 3.1.1 has no reason code."""
    node = Node()
    c, _ = node.connect("pub")
    c.send(pk.Publish("none/1", b"x", qos=1, packet_id=1))
    c.send(pk.Publish("none/2", b"x", qos=2, packet_id=2))
    assert [(type(p), p.reason_code) for p in c.received()] == [  # type: ignore[attr-defined]
        (pk.PubAck, ReasonCode.NO_MATCHING_SUBSCRIBERS),
        (pk.PubRec, ReasonCode.NO_MATCHING_SUBSCRIBERS)]
    c.send(pk.PubRel(2))
    assert [type(p) for p in c.received()] == [pk.PubComp]  # 0x10 is a success
    _watch(node, "some/#")
    c.send(pk.Publish("some/1", b"x", qos=1, packet_id=3))
    assert [p.reason_code for p in c.received()] == [0]  # type: ignore[attr-defined]
    old, _ = node.connect("old", MQTT_311)
    old.send(pk.Publish("none/3", b"x", qos=1, packet_id=4))
    assert [type(p) for p in old.received()] == [pk.PubAck]


def test_qos2_publish_keeps_its_packet_id_until_pubrel() -> None:
    node = Node()
    c, _ = node.connect("pub", MQTT_311, clean=False)
    c.send(pk.Publish("t", b"x", qos=2, packet_id=9))
    assert [(type(p), p.packet_id) for p in c.received()] == [(pk.PubRec, 9)]  # type: ignore[attr-defined]
    assert c.rules.ids.inbound == {9}
    assert node.rows(PutMQTTPacketId)[-1] == PutMQTTPacketId("/", "pub", 9, False)
    c.send(pk.PubRel(9))
    assert c.rules.ids.inbound == set() and c.rules.hold  # PUBCOMP waits for the delete
    assert node.rows(DeleteMQTTPacketId)[-1] == DeleteMQTTPacketId("/", "pub", 9, False)
    assert [type(p) for p in c.received()] == [pk.PubComp]


def test_a_topic_longer_than_the_limit_is_refused() -> None:
    node = Node()
    c, _ = node.connect("pub")
    c.rules.max_topic_bytes = 10
    c.send(pk.Publish("a" * 11, b"x", qos=1, packet_id=3))
    (ack,) = c.received()
    assert isinstance(ack, pk.PubAck) and ack.reason_code == ReasonCode.TOPIC_NAME_INVALID


def test_retained_over_quota_v5_refused_v311_routed_not_retained() -> None:
    node = Node(retained_max_messages=1)
    w = _watch(node, "r/#")
    c, _ = node.connect("pub")
    c.send(pk.Publish("r/1", b"one", qos=1, packet_id=1, retain=True))
    c.send(pk.Publish("r/2", b"two", qos=1, packet_id=2, retain=True))
    acks = [p for p in c.received() if isinstance(p, pk.PubAck)]
    assert [a.reason_code for a in acks] == [0, ReasonCode.QUOTA_EXCEEDED]
    old, _ = node.connect("old", MQTT_311)
    old.send(pk.Publish("r/3", b"three", qos=1, packet_id=3, retain=True))
    assert [p.payload for p in publishes(w)] == [b"one", b"three"]  # routed, not retained
    late, _ = node.connect("late")
    late.send(pk.Subscribe(1, (pk.Subscription("r/#", 1),)))
    assert [p.topic for p in late.received() if isinstance(p, pk.Publish)] == ["r/1"]


# ---------------------------------------------------------------- subscriptions
def test_subscription_options_no_local_and_identifiers() -> None:
    node = Node()
    c, _ = node.connect("me")
    c.send(pk.Subscribe(1, (pk.Subscription("t/#", 1, no_local=True),),
                        pk.Properties(subscription_identifiers=(7,))))
    c.send(pk.Subscribe(2, (pk.Subscription("t/x", 1),),
                        pk.Properties(subscription_identifiers=(8,))))
    c.received()
    c.send(pk.Publish("t/x", b"mine", qos=1, packet_id=1))
    other, _ = node.connect("other")
    other.send(pk.Publish("t/x", b"theirs", qos=1, packet_id=1))
    got = publishes(c)
    assert [p.payload for p in got] == [b"mine", b"theirs"]
    assert got[0].properties.subscription_identifiers == (8,)  # the no-local one left out
    assert set(got[1].properties.subscription_identifiers) == {7, 8}


def test_retain_handling_and_retain_as_published() -> None:
    node = Node()
    pub, _ = node.connect("pub")
    pub.send(pk.Publish("s/1", b"kept", qos=0, retain=True))
    c, _ = node.connect("c")
    c.send(pk.Subscribe(1, (pk.Subscription("s/#", 1, retain_handling=1),)))
    first = publishes(c)
    assert [(p.payload, p.retain) for p in first] == [(b"kept", True)]
    c.send(pk.Subscribe(2, (pk.Subscription("s/#", 1, retain_handling=1),)))
    assert publishes(c) == []  # 1: only for a new subscription
    c.send(pk.Subscribe(3, (pk.Subscription("s/+", 1, retain_handling=2),)))
    assert publishes(c) == []  # 2: never
    rap, _ = node.connect("rap")
    rap.send(pk.Subscribe(1, (pk.Subscription("s/#", 0, retain_as_published=True,
                                              retain_handling=2),)))
    rap.received()
    pub.send(pk.Publish("s/1", b"live", qos=0, retain=True))
    assert [p.retain for p in publishes(rap)] == [True]
    assert [p.retain for p in publishes(c)] == [False]  # [MQTT-3.3.1-12]


def test_shared_subscription_members_take_turns() -> None:
    node = Node()
    a, _ = node.connect("a")
    b, _ = node.connect("b")
    for m in (a, b):
        assert subscribe(m, pk.Subscription("$share/g/jobs/#", 1)) == [1]
    pub, _ = node.connect("pub")
    for n in range(4):
        pub.send(pk.Publish("jobs/x", b"%d" % n, qos=1, packet_id=n + 1))
    got_a, got_b = publishes(a), publishes(b)
    assert len(got_a) == len(got_b) == 2
    assert sorted(p.payload for p in got_a + got_b) == [b"0", b"1", b"2", b"3"]
    a.close()  # a clean member leaves its group
    assert node.registry.groups.queues_of("/", "a") == []
    assert len(node.registry.groups.queues_of("/", "b")) == 1


def test_a_qos0_fan_out_shares_one_encoding_where_the_packets_are_the_same() -> None:
    node = Node()
    plain = [node.connect(f"v4-{i}", version=MQTT_311)[0] for i in range(2)]
    v5 = [node.connect(f"v5-{i}")[0] for i in range(2)]
    alias, _ = node.connect("alias", topic_alias_maximum=4)
    ident, _ = node.connect("ident")
    small, _ = node.connect("small", maximum_packet_size=20)
    q1, _ = node.connect("q1", version=MQTT_311)  # a QoS 0 message on its qos1 queue
    for c in (*plain, *v5, alias, small):
        subscribe(c, pk.Subscription("f/t", 0))
    ident.send(pk.Subscribe(1, (pk.Subscription("f/#", 0),),
                            pk.Properties(subscription_identifiers=(3,))))
    ident.received()
    subscribe(q1, pk.Subscription("f/t", 1))
    pub, _ = node.connect("pub")
    for body in (b"one", b"two-is-longer-than-20"):
        pub.send(pk.Publish("f/t", body, qos=0))
        raw = [c.proto.data_to_send() for c in plain]
        assert raw[0] == raw[1] and raw[0]  # 3.1.1: the same bytes, encoded once
        assert [(p.topic, p.payload, p.qos, p.retain) for p in decode_all(raw[0], MQTT_311)
                if isinstance(p, pk.Publish)] == [("f/t", body, 0, False)]
        assert [(p.topic, p.payload, p.properties) for c in v5 for p in publishes(c)] == [
            ("f/t", body, pk.Properties())] * 2
        (got,) = publishes(ident)
        assert (got.payload, got.properties.subscription_identifiers) == (body, (3,))
        (got,) = publishes(alias)  # its own topic alias: not the shared packet
        assert got.properties.topic_alias == 1 and got.topic == ("f/t" if body == b"one" else "")
        assert [p.payload for p in publishes(small)] == ([body] if body == b"one" else [])
        assert [(p.payload, p.qos) for p in publishes(q1)] == [(body, 0)]
    q1_queue = node.broker.vhosts["/"].queues[queue_name("q1", 1)]
    assert q1_queue.unacked == 0  # no PUBACK comes for QoS 0: acked by the session
    big = bytes(70_000)  # over SHARED_BODY_MAX: encoded per subscriber, not kept
    pub.send(pk.Publish("f/t", big, qos=0))
    assert [p.payload for p in publishes(plain[0])] == [big]
    assert node.registry.shared.message is None
