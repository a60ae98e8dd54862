"""Broker core: commands in, effects and store operations out."""

from __future__ import annotations

import pytest

from amqplite import storeops as ops
from amqplite.broker.core import Broker
from amqplite.broker.effects import CancelNotify, Return
from amqplite.protocol.codec import FieldArray
from amqplite.protocol.errors import AMQPError, ChannelError, ConnectionError_
from amqplite.protocol.properties import BasicProperties, decode_properties, encode_properties
from tests.broker.conftest import PERSISTENT, TRANSIENT, deliveries, session_channel


def test_default_exchange_routes_by_queue_name(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "q")
    assert broker.basic_publish(ch, "", "q", TRANSIENT, b"x").routed
    assert not broker.basic_publish(ch, "", "nope", TRANSIENT, b"x").routed
    assert broker.vhosts["/"].queues["q"].message_count == 1


def test_missing_things_have_rabbitmq_texts(broker: Broker) -> None:
    _, ch = session_channel(broker)
    with pytest.raises(ChannelError) as e:
        broker.queue_declare(ch, "q", passive=True)
    assert (e.value.reply_code, e.value.reply_text) == (404, "NOT_FOUND - no queue 'q' in vhost '/'")
    with pytest.raises(ChannelError) as e:
        broker.basic_publish(ch, "x", "", TRANSIENT, b"")
    assert e.value.reply_text == "NOT_FOUND - no exchange 'x' in vhost '/'"
    with pytest.raises(ChannelError) as e:
        broker.exchange_declare(ch, "amq.mine", "direct")
    assert e.value.reply_code == 403
    with pytest.raises(ConnectionError_) as ce:
        broker.exchange_declare(ch, "e", "bogus")
    assert ce.value.reply_code == 503


def test_redeclare_mismatch_is_406(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "q", durable=True)
    with pytest.raises(ChannelError) as e:
        broker.queue_declare(ch, "q", durable=False)
    assert e.value.reply_code == 406
    assert "inequivalent arg 'durable'" in e.value.reply_text
    broker.exchange_declare(ch, "e", "direct")
    with pytest.raises(ChannelError):
        broker.exchange_declare(ch, "e", "fanout")


def test_mandatory_unroutable_returns_312(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.basic_publish(ch, "amq.direct", "k", TRANSIENT, b"x", mandatory=True)
    (ret,) = [e for e in broker.effects if isinstance(e, Return)]
    assert (ret.reply_code, ret.reply_text) == (312, "NO_ROUTE")


def test_immediate_is_540(broker: Broker) -> None:
    _, ch = session_channel(broker)
    with pytest.raises(ConnectionError_) as e:
        broker.basic_publish(ch, "", "q", TRANSIENT, b"x", immediate=True)
    assert e.value.reply_code == 540


def test_requeue_on_close_keeps_order_and_sets_redelivered(broker: Broker) -> None:
    s, ch = session_channel(broker)
    broker.queue_declare(ch, "q")
    for i in range(5):
        broker.basic_publish(ch, "", "q", TRANSIENT, str(i).encode())
    broker.basic_qos(ch, 0, 3, False)
    tag = broker.basic_consume(ch, "q")
    broker.start_consumer(ch, tag)
    got = deliveries(broker)
    assert [d.message.body for d in got] == [b"0", b"1", b"2"]
    broker.close_channel(ch)
    q = broker.vhosts["/"].queues["q"]
    assert [e.message.body for e in q.ready] == [b"0", b"1", b"2", b"3", b"4"]
    assert [e.redelivered for e in q.ready] == [True, True, True, False, False]
    ch2 = broker.open_channel(s, 2)
    res = broker.basic_get(ch2, "q", True)
    assert res.redelivered is True and res.message.body == b"0"


def test_closing_connection_never_hands_requeued_messages_to_its_own_channels(
        broker: Broker) -> None:
    """Channel 1's unacked message, requeued as the connection closes, must not
    go to channel 2's no-ack consumer of the same dying connection: it would be
    written to a closed socket and lost. It stays in the queue."""
    s, ch1 = session_channel(broker)
    broker.queue_declare(ch1, "q")
    broker.basic_publish(ch1, "", "q", TRANSIENT, b"m")
    broker.start_consumer(ch1, broker.basic_consume(ch1, "q"))
    assert [d.message.body for d in deliveries(broker)] == [b"m"]
    ch2 = broker.open_channel(s, 2)
    broker.start_consumer(ch2, broker.basic_consume(ch2, "q", no_ack=True))
    broker.close_session(s)
    assert deliveries(broker) == []
    q = broker.vhosts["/"].queues["q"]
    assert [(e.message.body, e.redelivered) for e in q.ready] == [(b"m", True)]


def test_round_robin_and_prefetch(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "q")
    broker.basic_qos(ch, 0, 2, False)
    t1 = broker.basic_consume(ch, "q")
    t2 = broker.basic_consume(ch, "q")
    for i in range(6):
        broker.basic_publish(ch, "", "q", TRANSIENT, str(i).encode())
    got = deliveries(broker)
    assert [d.consumer_tag for d in got] == [t1, t2, t1, t2]
    assert broker.vhosts["/"].queues["q"].message_count == 2


def test_global_prefetch_is_shared(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "q")
    broker.basic_qos(ch, 0, 3, True)
    broker.basic_consume(ch, "q")
    broker.basic_consume(ch, "q")
    for i in range(10):
        broker.basic_publish(ch, "", "q", TRANSIENT, str(i).encode())
    assert len(deliveries(broker)) == 3


def test_unknown_delivery_tag(broker: Broker) -> None:
    _, ch = session_channel(broker)
    with pytest.raises(ChannelError) as e:
        broker.basic_ack(ch, 5)
    assert e.value.reply_text == "PRECONDITION_FAILED - unknown delivery tag 5"


def test_queue_delete_cancels_consumers(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "q")
    tag = broker.basic_consume(ch, "q")
    assert broker.queue_delete(ch, "q") == 0
    assert [e.consumer_tag for e in broker.effects if isinstance(e, CancelNotify)] == [tag]


def test_exclusive_queue_locked_and_dies_with_session(broker: Broker) -> None:
    s1, ch1 = session_channel(broker)
    _, ch2 = session_channel(broker)
    broker.queue_declare(ch1, "ex", exclusive=True)
    with pytest.raises(ChannelError) as e:
        broker.basic_consume(ch2, "ex")
    assert e.value.reply_code == 405
    broker.close_session(s1)
    assert "ex" not in broker.vhosts["/"].queues


def test_auto_delete_with_last_consumer(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "ad", auto_delete=True)
    t = broker.basic_consume(ch, "ad")
    broker.basic_cancel(ch, t)
    assert "ad" not in broker.vhosts["/"].queues


def test_exchange_to_exchange_and_headers(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.exchange_declare(ch, "h", "headers")
    broker.exchange_declare(ch, "f", "fanout")
    broker.exchange_bind(ch, "h", "f", "")
    broker.queue_declare(ch, "all")
    broker.queue_declare(ch, "any")
    broker.queue_bind(ch, "all", "h", "", {"x-match": "all", "a": 1, "b": "x"})
    broker.queue_bind(ch, "any", "h", "", {"x-match": "any", "a": 1, "b": "x"})
    props = encode_properties(BasicProperties(headers={"a": 1}))
    broker.basic_publish(ch, "f", "", props, b"m")
    qs = broker.vhosts["/"].queues
    assert (qs["all"].message_count, qs["any"].message_count) == (0, 1)


def test_persistent_in_durable_queue_is_stored_and_ack_deletes(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "d", durable=True)
    broker.outbox.take()
    assert broker.basic_publish(ch, "", "d", PERSISTENT, b"p").stored
    kinds = [type(o) for o in broker.outbox.peek()]
    assert ops.PutMessage in kinds and ops.PutEntry in kinds
    assert not broker.basic_publish(ch, "", "d", TRANSIENT, b"t").stored
    broker.outbox.take()
    m = broker.basic_get(ch, "d", False)
    broker.basic_ack(ch, m.delivery_tag)
    assert any(isinstance(o, ops.DeleteEntry) for o in broker.outbox.peek())


def test_tx_publish_only_on_commit(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "q")
    broker.tx_select(ch)
    broker.basic_publish(ch, "", "q", TRANSIENT, b"1")
    assert broker.vhosts["/"].queues["q"].message_count == 0
    broker.tx_rollback(ch)
    broker.basic_publish(ch, "", "q", TRANSIENT, b"2")
    broker.tx_commit(ch)
    assert [e.message.body for e in broker.vhosts["/"].queues["q"].ready] == [b"2"]
    with pytest.raises(AMQPError):
        broker.confirm_select(ch)


def test_recover_requeues(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "q")
    broker.basic_publish(ch, "", "q", TRANSIENT, b"1")
    broker.basic_get(ch, "q", False)
    broker.basic_recover(ch, True)
    q = broker.vhosts["/"].queues["q"]
    assert q.message_count == 1 and q.ready.peek().redelivered


def test_delivery_log_rows_follow_the_one_column_order(broker: Broker) -> None:
    """The broker builds rows as plain tuples (hot path); their order is LOG_FIELDS'.
    A message without a publisher's id stores "" (readers show amq-KEY)."""
    from amqplite.broker.model import Message

    msg = Message(7, "ex", "rk", TRANSIENT, b"body")
    broker.log.clear()
    broker.log_event("rejected", "/", msg, "q", consumer_tag="ctag", attempt=2, reason="why")
    broker.log_event("expired", "/", None, "q2", reason="queue_expired")
    full, bare = (dict(zip(ops.LOG_FIELDS, row, strict=True)) for row in broker.log)
    assert {k: v for k, v in full.items() if k != "ts_us"} == {
        "event": "rejected", "vhost": "/", "exchange": "ex", "routing_key": "rk", "queue": "q",
        "message_id": "", "message_key": 7, "consumer_tag": "ctag", "attempt": 2,
        "size": 4, "reason": "why", "protocol": None}
    assert (bare["event"], bare["queue"], bare["message_key"], bare["reason"]) == (
        "expired", "q2", None, "queue_expired")


def test_bcc_is_stripped_before_the_store_and_cc_kept(broker: Broker) -> None:
    """Sender-selected distribution: CC/BCC keys route too; the stored row and the
    delivery carry no BCC (its keys are the sender's secret), CC keeps its tags."""
    _, ch = session_channel(broker)
    for q in ("d1", "d2", "d3"):
        broker.queue_declare(ch, q, durable=True)
    cc = FieldArray()
    cc.append_tagged("d2", "S")
    props = encode_properties(BasicProperties(delivery_mode=2, headers={
        "CC": cc, "BCC": ["d3"], "app": 1}))
    broker.outbox.take()
    assert broker.basic_publish(ch, "", "d1", props, b"p").stored
    puts = [o for o in broker.outbox.peek() if isinstance(o, ops.PutMessage)]
    assert len(puts) == 1
    stored = decode_properties(puts[0].properties).headers
    assert stored == {"CC": ["d2"], "app": 1} and stored["CC"].tags == ["S"]
    qs = broker.vhosts["/"].queues
    assert [qs[q].message_count for q in ("d1", "d2", "d3")] == [1, 1, 1]
    m = broker.basic_get(ch, "d3", True)
    assert "BCC" not in (m.message.properties.headers or {})


def test_priority_queue_serves_highest_priority_first() -> None:
    """x-max-priority: highest first, FIFO within a level (issue 38: the compiled
    PriorityReadyList once failed at creation; CI runs this compiled and pure)."""
    broker = Broker()
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "pq", arguments={"x-max-priority": 10})
    for n, prio in enumerate((1, 5, 0, 9, 5)):
        props = encode_properties(BasicProperties(priority=prio))
        broker.basic_publish(ch, "", "pq", props, f"{prio}.{n}".encode())
    got = []
    for _ in range(5):
        res = broker.basic_get(ch, "pq", True)
        assert res is not None
        got.append(res.message.body)  # type: ignore[union-attr]
    assert got == [b"9.3", b"5.1", b"5.4", b"1.0", b"0.2"]
