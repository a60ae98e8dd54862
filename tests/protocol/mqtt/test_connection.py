"""MQTTConnection: bytes in, events out, answers on the wire; QoS flows and limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqplite.protocol.mqtt import events as ev
from amqplite.protocol.mqtt import packets as pk
from amqplite.protocol.mqtt.connection import FlowControlError, MQTTConnection, ServerLimits, State
from amqplite.protocol.mqtt.decoder import decode_all
from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.properties import Properties


def feed(conn: MQTTConnection, *packets: pk.Packet, version: int = 5, now: float = 0.0) -> list[ev.MQTTEvent]:
    conn.receive_data(b"".join(pk.encode(p, version) for p in packets), now)
    return list(conn.events())


def sent(conn: MQTTConnection, version: int = 5) -> list[pk.Packet]:
    return decode_all(conn.data_to_send(), version)


def connected(version: int = 5, limits: ServerLimits | None = None, **props: object) -> MQTTConnection:
    conn = MQTTConnection(limits)
    connect = pk.Connect("c", version, properties=Properties(**props))  # type: ignore[arg-type]
    (event,) = feed(conn, connect, version=version)
    assert isinstance(event, ev.ConnectReceived)
    conn.accept()
    (connack,) = sent(conn, version)
    assert isinstance(connack, pk.ConnAck) and connack.reason_code == 0
    return conn


def test_connect_accept_v5_advertises_limits() -> None:
    conn = MQTTConnection(ServerLimits(receive_maximum=10, topic_alias_maximum=5, maximum_qos=1))
    (event,) = feed(conn, pk.Connect("", 5))
    assert isinstance(event, ev.ConnectReceived) and event.assigned and event.client_id
    conn.accept(session_present=True)
    (connack,) = sent(conn)
    assert isinstance(connack, pk.ConnAck)
    assert connack.session_present is False  # clean start [MQTT-3.2.2-2]
    props = connack.properties
    assert props.assigned_client_identifier == event.client_id
    assert (props.receive_maximum, props.topic_alias_maximum, props.maximum_qos) == (10, 5, 1)


def test_first_packet_must_be_connect() -> None:
    conn = MQTTConnection()
    (event,) = feed(conn, pk.PingReq(), version=4)
    assert isinstance(event, ev.ProtocolViolation)
    assert conn.state is State.CLOSED and conn.data_to_send() == b""  # [MQTT-3.1.0-1]


@pytest.mark.parametrize("version", [4, 5])
def test_second_connect_is_a_protocol_error(version: int) -> None:
    conn = connected(version)
    (event,) = feed(conn, pk.Connect("c", version), version=version)
    assert isinstance(event, ev.ProtocolViolation) and event.reason_code == ReasonCode.PROTOCOL_ERROR
    expected = [pk.Disconnect(0x82, Properties(reason_string="second CONNECT"))] if version == 5 else []
    assert sent(conn, version) == expected


def test_unknown_protocol_level_gets_connack_1() -> None:
    conn = MQTTConnection()
    conn.receive_data(b"\x10\x0c\x00\x04MQTT\x07\x02\x00\x0a\x00\x00", 0)
    (event,) = conn.events()
    assert isinstance(event, ev.ProtocolViolation) and event.reason_code == 0x84
    assert conn.data_to_send() == b"\x20\x02\x00\x01"  # [MQTT-3.1.2-2]


def test_malformed_connect_v5_gets_connack_reason() -> None:
    conn = MQTTConnection()
    conn.receive_data(b"\x10\x0e\x00\x04MQTT\x05\x03\x00\x0a\x00\x00\x00\x00", 0)  # reserved flag
    (event,) = conn.events()
    assert isinstance(event, ev.ProtocolViolation)
    (connack,) = sent(conn)
    assert isinstance(connack, pk.ConnAck) and connack.reason_code == ReasonCode.MALFORMED_PACKET


def test_empty_client_id_rules() -> None:
    conn = MQTTConnection()
    (event,) = feed(conn, pk.Connect("", 4, clean_start=False), version=4)
    assert isinstance(event, ev.ProtocolViolation)
    assert conn.data_to_send() == b"\x20\x02\x00\x02"  # identifier rejected [MQTT-3.1.3-8]
    conn = MQTTConnection()
    (event,) = feed(conn, pk.Connect("", 4), version=4)
    assert isinstance(event, ev.ConnectReceived) and event.assigned  # [MQTT-3.1.3-6]


def test_reject_maps_to_311_codes() -> None:
    conn = MQTTConnection()
    feed(conn, pk.Connect("c", 4), version=4)
    conn.reject(ReasonCode.BAD_USER_NAME_OR_PASSWORD)
    assert conn.data_to_send() == b"\x20\x02\x00\x04" and conn.closed


def test_packets_pipelined_after_connect_wait_for_accept() -> None:
    conn = MQTTConnection(ServerLimits(topic_alias_maximum=0))
    events = feed(conn, pk.Connect("c", 5), pk.Publish("t", b"x"))
    assert len(events) == 1
    conn.accept()
    (event,) = conn.events()
    assert isinstance(event, ev.PublishReceived) and event.publish.topic == "t"


def test_packet_too_large_before_and_after_connect() -> None:
    limits = ServerLimits(max_packet_size=1000, max_packet_size_unauthenticated=100)
    conn = MQTTConnection(limits)
    (event,) = feed(conn, pk.Connect("c" * 200, 5))
    assert isinstance(event, ev.ProtocolViolation) and event.reason_code == ReasonCode.PACKET_TOO_LARGE
    (connack,) = sent(conn)  # the level is read from the header that arrived
    assert isinstance(connack, pk.ConnAck) and connack.reason_code == ReasonCode.PACKET_TOO_LARGE
    conn = MQTTConnection(limits)
    (event,) = feed(conn, pk.Connect("c" * 200, 4), version=4)
    assert isinstance(event, ev.ProtocolViolation) and conn.data_to_send() == b""  # 3.1.1: close
    conn = connected(5, limits)
    assert isinstance(feed(conn, pk.Publish("t", b"x" * 500))[0], ev.PublishReceived)
    (event,) = feed(conn, pk.Publish("t", b"x" * 1000))
    assert isinstance(event, ev.ProtocolViolation) and event.reason_code == ReasonCode.PACKET_TOO_LARGE
    (disconnect,) = sent(conn)
    assert isinstance(disconnect, pk.Disconnect) and disconnect.reason_code == 0x95


def test_qos2_duplicate_is_delivered_once() -> None:
    conn = connected()
    first = pk.Publish("t", b"x", 2, packet_id=7)
    assert len(feed(conn, first)) == 1
    assert feed(conn, pk.Publish("t", b"x", 2, dup=True, packet_id=7)) == []  # not yet acked
    assert conn.ack_publish(7)
    assert sent(conn) == [pk.PubRec(7)]
    assert feed(conn, pk.Publish("t", b"x", 2, dup=True, packet_id=7)) == []
    assert sent(conn) == [pk.PubRec(7)]  # retransmission answered again
    assert conn.awaiting_pubrel() == {7}
    (rel,) = feed(conn, pk.PubRel(7))
    assert rel == ev.PubRelReceived(7, True)
    assert sent(conn) == [pk.PubComp(7)]
    assert len(feed(conn, first)) == 1  # after PUBCOMP the id is a new message


def test_pubrel_for_unknown_id() -> None:
    conn = connected()
    assert feed(conn, pk.PubRel(9)) == [ev.PubRelReceived(9, False)]
    assert sent(conn) == [pk.PubComp(9, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND)]


def test_inbound_receive_maximum() -> None:
    conn = connected(limits=ServerLimits(receive_maximum=2))
    assert len(feed(conn, pk.Publish("t", b"", 1, packet_id=1), pk.Publish("t", b"", 2, packet_id=2))) == 2
    (event,) = feed(conn, pk.Publish("t", b"", 1, packet_id=3))
    assert (
        isinstance(event, ev.ProtocolViolation) and event.reason_code == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED
    )


def test_receive_maximum_frees_on_ack() -> None:
    conn = connected(limits=ServerLimits(receive_maximum=1))
    feed(conn, pk.Publish("t", b"", 1, packet_id=1))
    conn.ack_publish(1)
    assert sent(conn) == [pk.PubAck(1)]
    assert isinstance(feed(conn, pk.Publish("t", b"", 1, packet_id=2))[0], ev.PublishReceived)


def test_topic_alias_inbound() -> None:
    conn = connected(limits=ServerLimits(topic_alias_maximum=2))
    (first,) = feed(conn, pk.Publish("long/topic", b"1", properties=Properties(topic_alias=2)))
    (b,) = feed(conn, pk.Publish("", b"2", properties=Properties(topic_alias=2)))
    assert isinstance(first, ev.PublishReceived)
    assert isinstance(b, ev.PublishReceived) and b.publish.topic == "long/topic"
    (c,) = feed(conn, pk.Publish("", b"3", properties=Properties(topic_alias=3)))
    assert isinstance(c, ev.ProtocolViolation) and c.reason_code == ReasonCode.TOPIC_ALIAS_INVALID


def test_unknown_alias_and_empty_topic() -> None:
    conn = connected()
    (event,) = feed(conn, pk.Publish("", b"", properties=Properties(topic_alias=1)))
    assert isinstance(event, ev.ProtocolViolation) and event.reason_code == ReasonCode.PROTOCOL_ERROR
    conn = connected()
    (event,) = feed(conn, pk.Publish("", b""))
    assert isinstance(event, ev.ProtocolViolation) and event.reason_code == ReasonCode.PROTOCOL_ERROR


def test_client_publish_with_subscription_identifier() -> None:
    conn = connected()
    (event,) = feed(conn, pk.Publish("t", b"", properties=Properties(subscription_identifiers=(1,))))
    assert isinstance(event, ev.ProtocolViolation) and event.reason_code == ReasonCode.PROTOCOL_ERROR


def test_qos_and_retain_above_limits() -> None:
    conn = connected(limits=ServerLimits(maximum_qos=1))
    (event,) = feed(conn, pk.Publish("t", b"", 2, packet_id=1))
    assert isinstance(event, ev.ProtocolViolation) and event.reason_code == ReasonCode.QOS_NOT_SUPPORTED
    conn = connected(limits=ServerLimits(retain_available=False))
    (event,) = feed(conn, pk.Publish("t", b"", retain=True))
    assert isinstance(event, ev.ProtocolViolation) and event.reason_code == ReasonCode.RETAIN_NOT_SUPPORTED


def test_subscribe_reports_each_filter() -> None:
    conn = connected()
    subs = (
        pk.Subscription("a/+", 1),
        pk.Subscription("a/#/b", 0),
        pk.Subscription("$share/g/x/#", 2),
        pk.Subscription("$share/g", 1),
    )
    (event,) = feed(conn, pk.Subscribe(3, subs, Properties(subscription_identifiers=(9,))))
    assert isinstance(event, ev.SubscribeReceived) and event.subscription_identifier == 9
    assert [r.reason_code for r in event.requests] == [0, 0x8F, 0, 0x8F]
    assert event.requests[2].parsed is not None and event.requests[2].parsed.share_group == "g"
    conn.send_suback(3, [1, 0x8F, 2, 0x8F])
    assert sent(conn) == [pk.SubAck(3, (1, 0x8F, 2, 0x8F))]


def test_suback_failure_codes_for_311() -> None:
    conn = connected(4)
    conn.send_suback(3, [1, 0x8F])
    assert sent(conn, 4) == [pk.SubAck(3, (1, 0x80))]


def test_no_local_on_shared_subscription() -> None:
    conn = connected()
    (event,) = feed(conn, pk.Subscribe(1, (pk.Subscription("$share/g/t", 0, no_local=True),)))
    assert isinstance(event, ev.ProtocolViolation) and event.reason_code == ReasonCode.PROTOCOL_ERROR


def test_server_only_packets_from_client() -> None:
    for packet in (pk.ConnAck(), pk.SubAck(1, (0,)), pk.UnsubAck(1, (0,)), pk.PingResp()):
        conn = connected()
        (event,) = feed(conn, packet)
        assert isinstance(event, ev.ProtocolViolation) and event.reason_code == ReasonCode.PROTOCOL_ERROR


def test_ping_and_disconnect() -> None:
    conn = connected(4)
    assert feed(conn, pk.PingReq(), version=4) == [ev.PingReceived()]
    assert conn.data_to_send() == b"\xd0\x00"
    (event,) = feed(conn, pk.Disconnect(), pk.PingReq(), version=4)
    assert event == ev.DisconnectReceived(0, False, None)
    assert conn.closed and conn.data_to_send() == b""


def test_disconnect_with_will_and_expiry_rules() -> None:
    conn = connected(session_expiry_interval=10)
    (event,) = feed(conn, pk.Disconnect(4, Properties(session_expiry_interval=30)))
    assert (
        isinstance(event, ev.DisconnectReceived)
        and event.publish_will
        and event.session_expiry_interval == 30
    )
    conn = connected()
    (event,) = feed(conn, pk.Disconnect(0, Properties(session_expiry_interval=30)))
    assert isinstance(event, ev.ProtocolViolation)  # [MQTT-3.14.2-2]


def test_keepalive_deadline() -> None:
    conn = MQTTConnection(ServerLimits(connect_timeout=5))
    assert conn.deadline == 5
    feed(conn, pk.Connect("c", 5, keep_alive=10), now=1)
    conn.accept()
    conn.data_to_send()
    assert conn.deadline == 1 + 15
    conn.receive_data(pk.encode(pk.PingReq()), 12)
    list(conn.events())
    conn.data_to_send()
    assert conn.deadline == 12 + 15
    assert not conn.check_deadline(26.9)
    assert conn.check_deadline(27)
    assert sent(conn) == [pk.Disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT)] and conn.closed


def test_server_keep_alive_overrides() -> None:
    conn = MQTTConnection(ServerLimits(server_keep_alive=4))
    feed(conn, pk.Connect("c", 5, keep_alive=0))
    conn.accept()
    (connack,) = sent(conn)
    assert isinstance(connack, pk.ConnAck) and connack.properties.server_keep_alive == 4
    assert conn.deadline == 6


def test_server_keep_alive_caps_only_a_longer_or_zero_keep_alive_of_mqtt5() -> None:
    """Mosquitto's max_keepalive: within the cap the client's own stands (no property);
    above it the cap is told and held; 3.1.1 clients keep theirs."""
    for version, asked, held, told in ((5, 2, 2, None), (5, 100, 4, 4), (4, 100, 100, None),
                                       (4, 0, 0, None)):
        conn = MQTTConnection(ServerLimits(server_keep_alive=4))
        feed(conn, pk.Connect("c", version, keep_alive=asked), version=version)
        conn.accept()
        (connack,) = sent(conn, version)
        assert isinstance(connack, pk.ConnAck)
        assert (conn.keep_alive, connack.properties.server_keep_alive) == (held, told)


def test_outbound_qos_flows_and_window() -> None:
    conn = connected(receive_maximum=2)
    a = conn.send_publish("t", b"1", 1)
    b = conn.send_publish("t", b"2", 2)
    assert a is not None and b is not None and a.packet_id != b.packet_id
    assert conn.window == 0
    with pytest.raises(FlowControlError):
        conn.send_publish("t", b"3", 1)
    assert conn.send_publish("t", b"q0", 0) is not None  # QoS 0 is not counted
    sent(conn)
    assert feed(conn, pk.PubAck(a.packet_id)) == [ev.PubAckReceived(a.packet_id)]  # type: ignore[arg-type]
    assert conn.window == 1
    assert b.packet_id is not None
    assert feed(conn, pk.PubRec(b.packet_id)) == [ev.PubRecReceived(b.packet_id)]
    assert sent(conn) == [pk.PubRel(b.packet_id)]
    assert conn.window == 1  # still awaiting PUBCOMP
    assert feed(conn, pk.PubComp(b.packet_id)) == [ev.PubCompReceived(b.packet_id)]
    assert conn.window == 2 and conn.inflight() == []


def test_outbound_max_packet_size_discards() -> None:
    conn = connected(maximum_packet_size=50)
    assert conn.send_publish("t", b"x" * 100, 1) is None  # [MQTT-3.1.2-25]
    assert conn.inflight() == [] and conn.data_to_send() == b""


def test_outbound_topic_aliases() -> None:
    conn = connected(topic_alias_maximum=1)
    conn.send_publish("a/long/topic", b"1")
    conn.send_publish("a/long/topic", b"2")
    conn.send_publish("other", b"3")
    p1, p2, p3 = sent(conn)
    assert isinstance(p1, pk.Publish) and p1.topic == "a/long/topic" and p1.properties.topic_alias == 1
    assert isinstance(p2, pk.Publish) and p2.topic == "" and p2.properties.topic_alias == 1
    assert isinstance(p3, pk.Publish) and p3.topic == "other" and p3.properties.topic_alias is None
    conn = connected(4)
    conn.send_publish("t", b"x")
    (p,) = sent(conn, 4)
    assert p == pk.Publish("t", b"x")


def test_resume_resends_with_dup() -> None:
    old = connected()
    a = old.send_publish("t", b"1", 1)
    b = old.send_publish("t", b"2", 2)
    assert a is not None and b is not None and b.packet_id is not None
    old.data_to_send()
    feed(old, pk.PubRec(b.packet_id))
    inflight = old.inflight()
    new = MQTTConnection()
    feed(new, pk.Connect("c", 5, clean_start=False))
    new.accept(session_present=True)
    new.resume(inflight)
    connack, p, rel = sent(new)
    assert isinstance(connack, pk.ConnAck) and connack.session_present
    assert p == pk.Publish("t", b"1", 1, dup=True, packet_id=a.packet_id)
    assert rel == pk.PubRel(b.packet_id)
    c = new.send_publish("t", b"3", 1)
    assert c is not None and c.packet_id not in (a.packet_id, b.packet_id)


def test_request_problem_information_zero_strips_reason_strings() -> None:
    conn = connected(request_problem_information=0)
    feed(conn, pk.Publish("t", b"", 1, packet_id=1))
    conn.ack_publish(1, 0x87, Properties(reason_string="no", user_properties=(("k", "v"),)))
    assert sent(conn) == [pk.PubAck(1, 0x87)]  # [MQTT-3.1.2-29]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(1, 2), st.booleans()), max_size=40))
def test_qos_inbound_exactly_once_property(steps: list[tuple[int, int, bool]]) -> None:
    """Any interleaving of (re)transmitted QoS 2 PUBLISH, acks and PUBREL: a QoS 2
    message is delivered once per id until its PUBREL."""
    conn = connected(limits=ServerLimits(receive_maximum=100))
    open_ids: set[int] = set()
    for pid, action, ack in steps:
        if action == 1:
            events = feed(conn, pk.Publish("t", b"", 2, dup=pid in open_ids, packet_id=pid))
            assert len(events) == (0 if pid in open_ids else 1)
            open_ids.add(pid)
            if ack:
                conn.ack_publish(pid)
        else:
            feed(conn, pk.PubRel(pid))
            open_ids.discard(pid)
        assert not conn.closed


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20), st.lists(st.tuples(st.integers(0, 2), st.integers(0, 30)), max_size=80))
def test_outbound_ids_unique_and_window_respected(receive_max: int, ops: list[tuple[int, int]]) -> None:
    conn = connected(receive_maximum=receive_max)
    for kind, pick in ops:
        inflight = conn.inflight()
        assert len(inflight) <= receive_max
        assert len({e.packet_id for e in inflight}) == len(inflight)
        if kind in (1, 2) and conn.window:
            conn.send_publish("t", b"", kind)
        elif inflight:
            entry = inflight[pick % len(inflight)]
            if entry.publish.qos == 1:
                feed(conn, pk.PubAck(entry.packet_id))
            elif entry.released:
                feed(conn, pk.PubComp(entry.packet_id))
            else:
                feed(conn, pk.PubRec(entry.packet_id))
        conn.data_to_send()
    assert not conn.closed


def test_server_disconnect_takeover() -> None:
    conn = connected()
    conn.disconnect(ReasonCode.SESSION_TAKEN_OVER)
    assert sent(conn) == [pk.Disconnect(ReasonCode.SESSION_TAKEN_OVER)] and conn.closed
    old = connected(4)
    old.disconnect(ReasonCode.SESSION_TAKEN_OVER)
    assert old.data_to_send() == b"" and old.closed  # 3.1.1 has no server DISCONNECT


def test_will_above_limits_is_refused_in_connack() -> None:
    conn = MQTTConnection(ServerLimits(maximum_qos=1))
    (event,) = feed(conn, pk.Connect("c", 5, will=pk.Will("w", b"", 2)))
    assert isinstance(event, ev.ProtocolViolation)
    assert sent(conn) == [
        pk.ConnAck(False, ReasonCode.QOS_NOT_SUPPORTED, Properties(reason_string="will QoS above maximum"))
    ]
    conn = MQTTConnection(ServerLimits(retain_available=False))
    (event,) = feed(conn, pk.Connect("c", 4, will=pk.Will("w", b"", 0, True)), version=4)
    assert isinstance(event, ev.ProtocolViolation) and event.reason_code == ReasonCode.RETAIN_NOT_SUPPORTED
    assert conn.data_to_send() == b""  # no 3.1.1 return code for it: close


def test_enhanced_auth_exchange() -> None:
    conn = MQTTConnection()
    method = Properties(authentication_method="SCRAM-SHA-1", authentication_data=b"first")
    (event,) = feed(conn, pk.Connect("c", 5, properties=method))
    assert isinstance(event, ev.ConnectReceived)
    conn.send_auth(ReasonCode.CONTINUE_AUTHENTICATION, Properties(authentication_method="SCRAM-SHA-1"))
    (event,) = feed(conn, pk.Auth(ReasonCode.CONTINUE_AUTHENTICATION, method))
    assert isinstance(event, ev.AuthReceived)
    (event,) = feed(conn, pk.PingReq())  # [MQTT-3.1.2-30] nothing but AUTH before CONNACK
    assert isinstance(event, ev.ProtocolViolation)
    auth, connack = sent(conn)
    assert isinstance(auth, pk.Auth) and isinstance(connack, pk.ConnAck) and connack.reason_code == 0x82


def test_auth_without_method_is_a_protocol_error() -> None:
    conn = connected()
    (event,) = feed(conn, pk.Auth())
    assert isinstance(event, ev.ProtocolViolation) and event.reason_code == ReasonCode.PROTOCOL_ERROR


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([3, 4, 5]), st.binary(max_size=80))
def test_fuzz_connection_never_raises(version: int, junk: bytes) -> None:
    """After a valid CONNECT, arbitrary bytes give events (maybe a ProtocolViolation), never
    an exception, and nothing after the connection closed."""
    conn = MQTTConnection()
    feed(conn, pk.Connect("c", version), version=version)
    conn.accept()
    conn.receive_data(junk, 1.0)
    events = list(conn.events())
    for event in events[:-1]:
        assert not isinstance(event, ev.ProtocolViolation)
    if conn.closed:
        assert conn.next_event() is None
    decode_all(conn.data_to_send(), version)  # whatever we answered is well-formed


def test_response_information_only_when_requested() -> None:
    info = Properties(response_information="reply/")
    conn = MQTTConnection()
    feed(conn, pk.Connect("c", 5))
    conn.accept(properties=info)
    (connack,) = sent(conn)
    assert isinstance(connack, pk.ConnAck) and connack.properties.response_information is None
    conn = MQTTConnection()
    feed(conn, pk.Connect("c", 5, properties=Properties(request_response_information=1)))
    conn.accept(properties=info)
    (connack,) = sent(conn)
    assert isinstance(connack, pk.ConnAck) and connack.properties.response_information == "reply/"


def test_unsubscribe_parses_each_filter() -> None:
    conn = connected()
    (event,) = feed(conn, pk.Unsubscribe(4, ("a/+", "a/#/b", "$share/g/x")))
    assert isinstance(event, ev.UnsubscribeReceived)
    assert event.parsed[0] is not None and event.parsed[1] is None
    assert event.parsed[2] is not None and event.parsed[2].share_group == "g"
    conn.send_unsuback(4, [0x11, 0x8F, 0])
    assert sent(conn) == [pk.UnsubAck(4, (0x11, 0x8F, 0))]


@pytest.mark.parametrize(("version", "code"), [(3, 2), (4, 2), (5, ReasonCode.CLIENT_IDENTIFIER_NOT_VALID)])
def test_client_id_too_long_for_its_queue_names(version: int, code: int) -> None:
    """A client id whose ``mqtt-subscription-…qos1`` would pass AMQP's 255 bytes is
    refused (0x85; 3.1/3.1.1: 2, identifier rejected), in UTF-8 bytes; one at the
    limit is accepted (issue 33, item 8: the export must import back)."""
    from amqplite.protocol.mqtt.subscriptions import MAX_CLIENT_ID_BYTES, session_queue_name

    assert MAX_CLIENT_ID_BYTES == 233
    for cid in ("x" * 234, "é" * 117, "x" * 5000):
        conn = MQTTConnection()
        (event,) = feed(conn, pk.Connect(cid, version), version=version)
        assert isinstance(event, ev.ProtocolViolation)
        assert event.reason_code == ReasonCode.CLIENT_IDENTIFIER_NOT_VALID
        (connack,) = sent(conn, version)
        assert isinstance(connack, pk.ConnAck) and connack.reason_code == code
    fits = "é" * 116 + "x"
    assert len(session_queue_name(fits, 1).encode()) == 255
    conn = MQTTConnection()
    (event,) = feed(conn, pk.Connect(fits, version), version=version)
    assert isinstance(event, ev.ConnectReceived) and event.client_id == fits


@pytest.mark.parametrize("version", [4, 5])
def test_filter_longer_than_a_binding_key_is_refused(version: int) -> None:
    """A filter whose binding key would pass 255 bytes gets 0x8F (3.1.1: 0x80) alone."""
    conn = connected(version)
    long = "a/" * 127 + "bb"  # 256 bytes
    (event,) = feed(conn, pk.Subscribe(1, (pk.Subscription(long, 1), pk.Subscription(long[:255], 1),
                                           pk.Subscription(f"$share/g/{long}", 1))),
                    version=version)
    assert isinstance(event, ev.SubscribeReceived)
    assert [r.reason_code for r in event.requests] == [ReasonCode.TOPIC_FILTER_INVALID, 0,
                                                       ReasonCode.TOPIC_FILTER_INVALID]


@pytest.mark.parametrize("version", [4, 5])
def test_will_topic_longer_than_a_routing_key_is_refused(version: int) -> None:
    """A will topic whose routing key would pass 255 bytes: 0x90 (3.1.1 has no code for
    it: closed without a CONNACK)."""
    conn = MQTTConnection()
    will = pk.Will("t/" + "x" * 254, b"gone", 1)
    (event,) = feed(conn, pk.Connect("c", version, will=will), version=version)
    assert isinstance(event, ev.ProtocolViolation)
    assert event.reason_code == ReasonCode.TOPIC_NAME_INVALID
    acks = sent(conn, version)
    assert [a.reason_code for a in acks if isinstance(a, pk.ConnAck)] == (
        [ReasonCode.TOPIC_NAME_INVALID] if version == 5 else [])
