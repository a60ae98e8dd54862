"""STOMP session rules with plain calls against a real in-memory Broker."""

from __future__ import annotations

from amqplite.protocol.codec import Timestamp
from amqplite.protocol.properties import BasicProperties, decode_properties, encode_properties
from amqplite.protocol.stomp.frames import serialize
from amqplite.sessions.stomp.session import stream_offset, subscription_queue
from tests.sessions.stomp_node import Node


def _queue(node: Node, name: str):  # type: ignore[no-untyped-def]
    return node.broker.vhosts["/"].queues[name]


def test_send_then_subscribe_on_a_queue() -> None:
    node = Node()
    c = node.connect()
    c.send("SEND", b"hello", destination="/queue/a", x_custom="v", content_type="text/plain")
    q = _queue(node, "a")
    assert q.durable and not q.auto_delete and q.message_count == 1
    c.send("SUBSCRIBE", id="s1", destination="/queue/a")
    (m,) = c.messages()
    assert m.body == b"hello"
    h = m.headers
    assert h["subscription"] == "s1" and h["destination"] == "/queue/a"
    assert h["message-id"] == "T_s1@@session-1@@1" and h["redelivered"] == "false"
    assert "ack" not in h  # auto mode
    assert h["x-custom"] == "v" and h["content-type"] == "text/plain"
    assert h["content-length"] == "5"
    assert q.message_count == 0  # auto: acked on delivery
    assert c.session is not None and c.session.session.protocol == "stomp-1.2"  # delivery log


def test_topic_fans_out_to_each_subscription() -> None:
    node = Node()
    a, b = node.connect(), node.connect()
    a.send("SUBSCRIBE", id="1", destination="/topic/news.*")
    b.send("SUBSCRIBE", id="1", destination="/topic/news.sport")
    a.send("SEND", b"x", destination="/topic/news.sport")
    a.send("SEND", b"y", destination="/topic/other")  # nobody bound: dropped
    (ma,) = a.messages()
    (mb,) = b.messages()
    assert ma.headers["destination"] == mb.headers["destination"] == "/topic/news.sport"
    name = subscription_queue("/topic/news.*", "1", "session-1")
    q = _queue(node, name)
    assert q.exclusive and q.auto_delete and not q.durable
    a.close()
    assert name not in node.broker.vhosts["/"].queues


def test_exchange_destination_binds_the_pattern() -> None:
    node = Node()
    c = node.connect()
    c.send("SUBSCRIBE", id="x", destination="/exchange/amq.direct/k")
    c.send("SEND", b"1", destination="/exchange/amq.direct/k")
    c.send("SEND", b"2", destination="/exchange/amq.direct/other")
    (m,) = c.messages()
    assert m.body == b"1" and m.headers["destination"] == "/exchange/amq.direct/k"


def test_missing_exchange_and_amq_queue_are_errors_with_amqp_text() -> None:
    node = Node()
    c = node.connect()
    c.send("SEND", b"", destination="/exchange/nosuch/k", receipt="r")
    (e,) = c.frames()
    assert e.command == "ERROR" and e.headers["message"] == "not_found"
    assert e.body == b"NOT_FOUND - no exchange 'nosuch' in vhost '/'"
    assert e.headers["receipt-id"] == "r" and c.finished
    d = node.connect()
    d.send("SUBSCRIBE", id="1", destination="/amq/queue/missing")
    (e,) = d.frames()
    assert e.command == "ERROR" and e.headers["message"] == "not_found"
    assert not node.broker.vhosts["/"].queues.get("missing")


def test_client_individual_ack_and_nack() -> None:
    node = Node()
    c = node.connect()
    c.send("SEND", b"", destination="/queue/dlx-target")
    c.send("SEND", b"", destination="/queue/work", x_dead_letter_exchange="",
           x_dead_letter_routing_key="dlx-target")
    c.fill("/queue/work", b"1", b"2", b"3")
    c.send("SUBSCRIBE", id="s", destination="/queue/work", ack="client-individual")
    ms = c.messages()
    assert [m.body for m in ms] == [b"", b"1", b"2", b"3"]
    assert all(m.headers["ack"] == m.headers["message-id"] for m in ms)
    c.send("ACK", id=ms[1].headers["ack"])
    c.send("NACK", id=ms[2].headers["ack"], requeue="false")  # dead-lettered
    c.send("NACK", id=ms[3].headers["ack"])  # requeued by default
    (again,) = c.messages()
    assert again.body == b"3" and again.headers["redelivered"] == "true"
    dl = _queue(node, "dlx-target")
    assert dl.message_count == 2  # the first SEND and the NACKed "2"
    assert len(_queue(node, "work").consumers) == 1


def test_client_ack_is_cumulative_within_its_subscription() -> None:
    node = Node()
    c = node.connect()
    c.fill("/queue/q", b"1", b"2", b"3")
    c.send("SUBSCRIBE", id="s", destination="/queue/q", ack="client")
    ms = c.messages()
    c.send("ACK", id=ms[1].headers["ack"])
    s = c.session
    assert s is not None
    assert list(s.subs["s"].channel.unacked) == [3]
    c.close()
    q = _queue(node, "q")
    assert q.message_count == 1  # the unacked one came back


def test_prefetch_count_bounds_unacked_deliveries() -> None:
    node = Node()
    c = node.connect()
    c.fill("/queue/q", b"1", b"2")
    c.send("SUBSCRIBE", id="s", destination="/queue/q", ack="client-individual",
           prefetch_count="1")
    (m,) = c.messages()
    c.send("ACK", id=m.headers["ack"])
    (m2,) = c.messages()
    assert m2.body == b"2"


def test_unsubscribe_stops_deliveries_but_acks_stay_valid() -> None:
    node = Node()
    c = node.connect()
    c.send("SEND", b"1", destination="/queue/q")
    c.send("SUBSCRIBE", id="s", destination="/queue/q", ack="client-individual")
    (m,) = c.messages()
    c.send("UNSUBSCRIBE", id="s", receipt="u")
    c.send("SEND", b"2", destination="/queue/q")
    assert c.frames() == []
    node.commit()
    (r,) = c.frames()
    assert r.command == "RECEIPT" and r.headers["receipt-id"] == "u"
    c.send("ACK", id=m.headers["ack"])
    assert c.frames() == [] and not c.finished
    assert _queue(node, "q").message_count == 1  # "2" waits, "1" is gone


def test_durable_topic_subscription_keeps_its_queue_across_reconnects() -> None:
    node = Node()
    c = node.connect()
    c.send("SUBSCRIBE", id="d", destination="/topic/t", durable="true", auto_delete="false")
    name = subscription_queue("/topic/t", "d")
    assert _queue(node, name).durable
    c.close()
    p = node.connect()
    p.send("SEND", b"while away", destination="/topic/t")
    assert _queue(node, name).message_count == 1
    c2 = node.connect()
    c2.send("SUBSCRIBE", id="d", destination="/topic/t", persistent="true", auto_delete="false")
    (m,) = c2.messages()
    assert m.body == b"while away"
    c2.send("UNSUBSCRIBE", id="d", durable="true")
    assert name not in node.broker.vhosts["/"].queues


def test_receipt_of_a_persistent_send_waits_for_the_commit() -> None:
    node = Node()
    c = node.connect()
    c.send("SEND", b"p", destination="/queue/q", persistent="true", receipt="r1")
    assert c.frames() == []  # the confirm waits for the store
    node.commit()
    (r,) = c.frames()
    assert r.headers["receipt-id"] == "r1"
    c.send("SEND", b"t", destination="/queue/q", receipt="r2")  # transient: at once
    (r,) = c.frames()
    assert r.headers["receipt-id"] == "r2"
    assert _queue(node, "q").message_count == 2


def test_a_confirm_counts_the_receipts_it_releases() -> None:
    """``last_released``: how many RECEIPTs one confirm let go, the shell's hint
    that the publisher keeps a window of them (it then gathers their SENDs)."""
    node = Node()
    c = node.connect()
    assert c.session is not None
    window = b"".join(serialize("SEND", {"destination": "/queue/q", "persistent": "true",
                                         "receipt": f"r{i}"}, b"p") for i in range(3))
    c.proto.receive_data(window, 0.0)  # one read: one confirm covers the three
    while (ev := c.proto.next_event()) is not None:
        c.session.handle(ev)
    node.commit()
    assert [f.headers["receipt-id"] for f in c.frames()] == ["r0", "r1", "r2"]
    assert c.session.last_released == 3
    c.send("SEND", b"p", destination="/queue/q", persistent="true", receipt="r3")
    node.commit()
    assert [f.headers["receipt-id"] for f in c.frames()] == ["r3"]
    assert c.session.last_released == 1


def test_transactions_cover_send_and_ack() -> None:
    node = Node()
    c = node.connect()
    c.send("SEND", b"old", destination="/queue/q")
    c.send("SUBSCRIBE", id="s", destination="/queue/q", ack="client-individual")
    (m,) = c.messages()
    c.send("BEGIN", transaction="t1")
    c.send("SEND", b"new", destination="/queue/other", transaction="t1")
    c.send("ACK", id=m.headers["ack"], transaction="t1")
    s = c.session
    assert s is not None and s.subs["s"].channel.unacked
    assert "other" not in node.broker.vhosts["/"].queues
    c.send("COMMIT", transaction="t1", receipt="c")
    (r,) = c.frames()
    assert r.headers["receipt-id"] == "c"
    assert not s.subs["s"].channel.unacked
    assert _queue(node, "other").message_count == 1
    c.send("BEGIN", transaction="t2")
    c.send("SEND", b"dropped", destination="/queue/other", transaction="t2")
    c.send("ABORT", transaction="t2")
    assert _queue(node, "other").message_count == 1
    c.send("COMMIT", transaction="t2")
    (e,) = c.frames()
    assert e.command == "ERROR" and e.headers["message"] == "Bad transaction"


def test_headers_map_to_amqp_properties_and_back() -> None:
    node = Node()
    c = node.connect()
    c.send("SEND", b"{}", destination="/queue/q", content_type="application/json",
           content_encoding="utf-8", persistent="true", priority="5", correlation_id="c1",
           reply_to="/queue/answers", expiration="60000", amqp_message_id="m1",
           timestamp="1700000000", type="t", app_id="app", x_custom="a:b")
    e = _queue(node, "q").ready.peek()
    p = decode_properties(e.message.properties_raw)
    assert (p.content_type, p.content_encoding, p.delivery_mode, p.priority) == (
        "application/json", "utf-8", 2, 5)
    assert (p.correlation_id, p.reply_to, p.expiration, p.message_id) == (
        "c1", "/queue/answers", "60000", "m1")
    assert (p.timestamp, p.type, p.app_id) == (1700000000, "t", "app")
    assert p.headers == {"x-custom": "a:b"}
    c.send("SUBSCRIBE", id="s", destination="/queue/q")
    (m,) = c.messages()
    h = m.headers
    for k, v in {"content-type": "application/json", "persistent": "true", "priority": "5",
                 "correlation-id": "c1", "reply-to": "/queue/answers", "expiration": "60000",
                 "amqp-message-id": "m1", "timestamp": "1700000000", "type": "t",
                 "app-id": "app", "x-custom": "a:b"}.items():
        assert h[k] == v, k


def test_an_amqp_message_reaches_a_stomp_subscriber() -> None:
    node = Node()
    c = node.connect()
    c.send("SUBSCRIBE", id="s", destination="/queue/q")
    b = node.broker
    s = b.open_session("guest", "/")
    ch = b.open_channel(s, 1)
    props = encode_properties(BasicProperties(headers={"n": 7, "flag": True}, reply_to="back",
                                              delivery_mode=2))
    b.basic_publish(ch, "", "q", props, b"from amqp")
    node.run()
    (m,) = c.messages()
    assert m.headers["n"] == "7" and m.headers["flag"] == "true"
    assert m.headers["reply-to"] == "/reply-queue/back" and m.headers["persistent"] == "true"


def test_temp_queue_reply_comes_back_to_its_sender() -> None:
    node = Node()
    client, server = node.connect(), node.connect()
    server.send("SUBSCRIBE", id="rpc", destination="/queue/rpc")
    client.send("SEND", b"ping", destination="/queue/rpc", reply_to="/temp-queue/r1")
    (req,) = server.messages()
    reply_to = req.headers["reply-to"]
    assert reply_to.startswith("/reply-queue/amq.gen-")
    server.send("SEND", b"pong", destination=reply_to)
    (rep,) = client.messages()
    assert rep.body == b"pong" and rep.headers["subscription"] == "/temp-queue/r1"
    assert rep.headers["destination"] == reply_to
    client.close()
    assert reply_to[len("/reply-queue/"):] not in node.broker.vhosts["/"].queues


def test_refusals() -> None:
    node = Node()
    c = node.connect()
    c.send("SUBSCRIBE", id="s", destination="/queue/q")
    c.send("SUBSCRIBE", id="s", destination="/queue/q")
    (e,) = c.frames()
    assert e.headers["message"] == "Duplicated subscription identifier"
    assert e.body == b"A subscription identified by 'T_s' already exists."
    assert c.finished  # RabbitMQ closes after this one; after the others it goes on
    for frame, message in ((("ACK", {"id": "bogus"}), "Invalid header"),
                           (("ACK", {"id": "T_zz@@session-2@@1"}), "Subscription not found"),
                           (("UNSUBSCRIBE", {"id": "zz"}), "No subscription found"),
                           (("SUBSCRIBE", {"id": "s", "destination": "/queue/q",
                                           "selector": "a ="}), "Invalid selector"),
                           (("SEND", {"destination": "/queue/q", "priority": "high"}),
                            "Invalid header"),
                           # AMQP's timestamp is unsigned 64 bits (found by the fuzz test)
                           (("SEND", {"destination": "/queue/q", "timestamp": "-1"}),
                            "Invalid header"),
                           (("SEND", {"destination": "/queue/q", "timestamp": str(1 << 64)}),
                            "Invalid header")):
        d = node.connect()
        d.send(frame[0], **frame[1])
        (e,) = d.frames()
        assert e.command == "ERROR" and e.headers["message"] == message, (frame, e)
        assert not d.finished
        d.send("SEND", b"after", destination="/queue/q", receipt="r")
        (r,) = d.frames()
        assert r.command == "RECEIPT"
    c2 = node.connect()
    c2.send("SUBSCRIBE", id="s", destination="/amq/queue/nosuch")
    (e,) = c2.frames()
    assert e.headers["message"] == "not_found" and c2.finished  # the broker's refusal


def test_1_0_subscription_without_id_is_keyed_by_destination() -> None:
    node = Node()
    c = node.connect("1.0")
    c.send("SUBSCRIBE", destination="/queue/q", ack="client")
    c.send("SEND", b"x", destination="/queue/q")
    (m,) = c.messages()
    assert "subscription" not in m.headers and m.headers["message-id"].startswith("Q_/queue/q@@")
    c.send("ACK", message_id=m.headers["message-id"])
    c.send("UNSUBSCRIBE", destination="/queue/q")
    assert c.frames() == [] and _queue(node, "q").message_count == 0


def test_closing_returns_unacked_deliveries_redelivered() -> None:
    node = Node()
    c = node.connect()
    c.send("SEND", b"x", destination="/queue/q")
    c.send("SUBSCRIBE", id="s", destination="/queue/q", ack="client")
    c.messages()
    c.close()
    d = node.connect()
    d.send("SUBSCRIBE", id="s", destination="/queue/q")
    (m,) = d.messages()
    assert m.headers["redelivered"] == "true"


def test_deleting_the_queue_cancels_the_subscription_with_a_notice() -> None:
    node = Node()
    c = node.connect()
    c.send("SUBSCRIBE", id="s", destination="/queue/q")
    b = node.broker
    s = b.open_session("guest", "/")
    b.queue_delete(b.open_channel(s, 1), "q")
    node.run()
    (e,) = c.frames()
    assert e.command == "ERROR" and e.headers["message"] == "Server cancelled subscription"
    assert e.headers["subscription"] == "s" and not c.proto.closed


def test_stream_offsets_in_rabbitmq_forms() -> None:
    assert [stream_offset(v) for v in (None, "first", "last", "next", "offset=5", "1h")] == [
        "next", "first", "last", "next", 5, "1h"]
    ts = stream_offset("timestamp=1700000000")
    assert isinstance(ts, Timestamp) and ts == 1700000000


def test_a_stream_subscription_needs_client_acks_and_a_prefetch() -> None:
    node = Node()
    c = node.connect()
    c.send("SUBSCRIBE", id="s", destination="/queue/st", x_queue_type="stream")
    (e,) = c.frames()
    assert e.command == "ERROR" and e.headers["message"] == "not_implemented" and c.finished


def test_disconnect_receipt_waits_for_earlier_persistent_sends() -> None:
    node = Node()
    c = node.connect()
    c.send("SEND", b"p", destination="/queue/q", persistent="true")
    c.send("DISCONNECT", receipt="bye")
    assert c.frames() == []
    node.commit()
    (r,) = c.frames()
    assert r.command == "RECEIPT" and r.headers["receipt-id"] == "bye"


def test_closing_never_hands_unacked_messages_to_its_own_auto_subscription() -> None:
    node = Node()
    c = node.connect()
    c.send("SEND", b"x", destination="/queue/q")
    c.send("SUBSCRIBE", id="b", destination="/queue/q", ack="client")
    c.send("SUBSCRIBE", id="a", destination="/queue/q")
    (m,) = c.messages()
    assert m.headers["subscription"] == "b"
    c.close()
    assert _queue(node, "q").message_count == 1


def test_the_same_id_again_after_unsubscribe_keeps_old_acks_valid() -> None:
    node = Node()
    c = node.connect()
    c.fill("/queue/q", b"1", b"2")
    c.send("SUBSCRIBE", id="s", destination="/queue/q", ack="client-individual",
           prefetch_count="1")
    (m1,) = c.messages()
    c.send("UNSUBSCRIBE", id="s")
    c.send("SUBSCRIBE", id="s", destination="/queue/q", ack="client-individual")
    (m2,) = c.messages()
    assert m1.headers["ack"] != m2.headers["ack"]
    c.send("ACK", id=m1.headers["ack"])
    c.send("ACK", id=m2.headers["ack"])
    assert c.frames() == [] and _queue(node, "q").message_count == 0


def test_user_id_must_be_the_logged_in_user() -> None:
    node = Node()
    c = node.connect()
    c.send("SEND", b"", destination="/queue/q", user_id="guest", receipt="ok")
    (r,) = c.frames()
    assert r.command == "RECEIPT"
    c.send("SEND", b"", destination="/queue/q", user_id="mallory")
    (e,) = c.frames()
    assert e.command == "ERROR" and e.headers["message"] == "precondition_failed"
    assert b"user_id property set to 'mallory'" in e.body
