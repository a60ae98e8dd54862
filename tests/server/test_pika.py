"""Unmodified pika applications against the real broker process."""

from __future__ import annotations

import uuid

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, UnroutableError

from tests.brokerproc import BrokerProcess
from tests.server.conftest import connect


def name(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def drain(conn: pika.BlockingConnection, got: list, n: int, timeout: float = 10) -> None:
    """Process I/O until ``got`` holds ``n`` items or the deadline passes."""
    import time

    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    assert len(got) >= n, f"expected {n} messages, got {len(got)}"


def test_task_queue_with_confirms_and_acks(conn, channel) -> None:  # type: ignore[no-untyped-def]
    q = name()
    channel.queue_declare(q, durable=True)
    channel.confirm_delivery()
    for i in range(50):
        channel.basic_publish("", q, f"task {i}".encode(),
                              pika.BasicProperties(delivery_mode=2, message_id=str(i)))
    assert channel.queue_declare(q, passive=True).method.message_count == 50
    channel.basic_qos(prefetch_count=10)
    got: list[bytes] = []

    def on(ch, method, props, body):  # type: ignore[no-untyped-def]
        got.append(body)
        ch.basic_ack(method.delivery_tag)

    channel.basic_consume(q, on)
    drain(conn, got, 50)
    assert got == [f"task {i}".encode() for i in range(50)]
    channel.queue_delete(q)


def test_fanout_pub_sub(conn, channel) -> None:  # type: ignore[no-untyped-def]
    ex = name("ex")
    channel.exchange_declare(ex, "fanout")
    qs = [channel.queue_declare("", exclusive=True).method.queue for _ in range(3)]
    assert all(q.startswith("amq.gen-") for q in qs)
    for q in qs:
        channel.queue_bind(q, ex)
    channel.basic_publish(ex, "ignored", b"hello")
    for q in qs:
        m, _, body = channel.basic_get(q, auto_ack=True)
        assert body == b"hello" and m.exchange == ex
    channel.exchange_delete(ex)


def test_topic_routing(channel) -> None:  # type: ignore[no-untyped-def]
    ex = name("topic")
    channel.exchange_declare(ex, "topic")
    q1 = channel.queue_declare("", exclusive=True).method.queue
    q2 = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(q1, ex, "logs.*.error")
    channel.queue_bind(q2, ex, "logs.#")
    for rk in ("logs.app.error", "logs.app.info", "logs", "other"):
        channel.basic_publish(ex, rk, rk.encode())
    assert channel.queue_declare(q1, passive=True).method.message_count == 1
    assert channel.queue_declare(q2, passive=True).method.message_count == 3
    channel.exchange_delete(ex)


def test_mandatory_return_with_confirms(conn, channel) -> None:  # type: ignore[no-untyped-def]
    channel.confirm_delivery()
    with pytest.raises(UnroutableError):
        channel.basic_publish("amq.direct", name("nowhere"), b"x", mandatory=True)


def test_publish_to_missing_exchange_closes_channel(conn) -> None:  # type: ignore[no-untyped-def]
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.basic_publish(name("missing"), "k", b"x")
    assert e.value.reply_code == 404
    assert e.value.reply_text.startswith("NOT_FOUND - no exchange")
    assert conn.channel().is_open  # the connection survives a channel error


def test_passive_declare_of_missing_queue(conn) -> None:  # type: ignore[no-untyped-def]
    ch = conn.channel()
    q = name()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare(q, passive=True)
    assert (e.value.reply_code, e.value.reply_text) == (404, f"NOT_FOUND - no queue '{q}' in vhost '/'")


def test_nack_requeue_sets_redelivered(channel) -> None:  # type: ignore[no-untyped-def]
    q = channel.queue_declare("", exclusive=True).method.queue
    channel.basic_publish("", q, b"again")
    m, _, _ = channel.basic_get(q)
    assert not m.redelivered
    channel.basic_nack(m.delivery_tag, requeue=True)
    m2, _, body = channel.basic_get(q)
    assert m2.redelivered and body == b"again"
    channel.basic_reject(m2.delivery_tag, requeue=False)
    assert channel.basic_get(q) == (None, None, None)


def test_unacked_return_when_connection_closes(broker: BrokerProcess) -> None:
    q = name()
    c1 = connect(broker)
    ch1 = c1.channel()
    ch1.queue_declare(q)
    for i in range(5):
        ch1.basic_publish("", q, str(i).encode())
    got = []
    ch1.basic_qos(prefetch_count=3)
    ch1.basic_consume(q, lambda ch, m, p, b: got.append(b))
    drain(c1, got, 3)
    c1.close()
    c2 = connect(broker)
    ch2 = c2.channel()
    seen = []
    for _ in range(5):
        m, _, body = ch2.basic_get(q, auto_ack=True)
        seen.append((body, m.redelivered))
    assert seen == [(b"0", True), (b"1", True), (b"2", True), (b"3", False), (b"4", False)]
    ch2.queue_delete(q)
    c2.close()


def test_server_cancel_when_queue_deleted(conn, channel) -> None:  # type: ignore[no-untyped-def]
    q = channel.queue_declare(name()).method.queue
    cancelled = []
    channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = channel.basic_consume(q, lambda *a: None)
    other = conn.channel()
    other.queue_delete(q)
    drain(conn, cancelled, 1)
    assert cancelled == [tag]


def test_transactions(channel) -> None:  # type: ignore[no-untyped-def]
    q = channel.queue_declare("", exclusive=True).method.queue
    channel.tx_select()
    channel.basic_publish("", q, b"1")
    channel.tx_rollback()
    channel.basic_publish("", q, b"2")
    channel.tx_commit()
    assert channel.queue_declare(q, passive=True).method.message_count == 1


def test_headers_round_trip(channel) -> None:  # type: ignore[no-untyped-def]
    q = channel.queue_declare("", exclusive=True).method.queue
    # no float: pika cannot encode one (conformance checks tagged floats byte for byte)
    headers = {"s": "text", "i": 42, "big": 2**40, "b": True, "n": None,
               "l": [1, "a", {"x": 1}], "t": {"nested": "yes"}}
    channel.basic_publish("", q, b"h", pika.BasicProperties(headers=headers,
                                                            content_type="text/plain"))
    _, props, _ = channel.basic_get(q, auto_ack=True)
    assert props.content_type == "text/plain"
    got = dict(props.headers)
    assert got["i"] == 42 and got["big"] == 2**40 and got["b"] is True
    assert got["n"] is None
    assert got["t"] in ({"nested": b"yes"}, {"nested": "yes"})


def test_deliveries_and_returns_keep_the_publish_order_on_one_connection(
        conn) -> None:  # type: ignore[no-untyped-def]
    """Publishes that read together come back in publish order, whatever their
    fate: deliveries to two consumers and returns (mandatory, unroutable),
    interleaved on the publisher's channel (pika keeps the order within one
    channel). The server writes runs of deliveries to one connection in one step;
    any other frame ends a run."""
    q1, q2 = name(), name()
    pub = conn.channel()
    for q in (q1, q2):
        pub.queue_declare(q, exclusive=True)
    seen: list[str] = []
    pub.basic_consume(q1, lambda ch, m, p, body: seen.append(body.decode()), auto_ack=True)
    pub.basic_consume(q2, lambda ch, m, p, body: seen.append(body.decode()), auto_ack=True)
    pub.add_on_return_callback(lambda ch, m, p, body: seen.append(body.decode()))
    sent = []
    for i in range(300):
        key = (q1, q2, "nowhere-" + q1)[i % 3]
        sent.append(f"{i}:{i % 3}")
        pub.basic_publish("", key, sent[-1].encode(), mandatory=True)
    drain(conn, seen, len(sent))
    assert seen == sent
