"""Dead-lettering, TTL, max-length overflow and quorum delivery limits.

Expectations are RabbitMQ 3.10's: x-death entries are keyed by (queue,
reason) and carry count (long), reason, queue, time (timestamp), exchange,
routing-keys and, when the message had one, original-expiration; the
`expiration` property itself is removed. 3.10 sets x-first-death-* only (no
x-last-death-*).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from conformance._util import drain, eventually, message_count, observe
from conformance.conftest import Names

pytestmark = pytest.mark.deadletter


@pytest.fixture
def ch(channel: BlockingChannel) -> BlockingChannel:
    channel.confirm_delivery()
    return channel


def _dlx(ch: BlockingChannel, names: Names) -> tuple[str, str]:
    """A fanout dead-letter exchange with one queue bound to it."""
    dlx, dlq = names.exchange("dlx"), names.queue("dlq")
    ch.exchange_declare(dlx, "fanout")
    ch.queue_declare(dlq)
    ch.queue_bind(dlq, dlx)
    return dlx, dlq


def _death(props: pika.BasicProperties) -> list[dict[str, Any]]:
    assert props.headers is not None
    deaths: list[dict[str, Any]] = props.headers["x-death"]
    return deaths


def _check_death(entry: dict[str, Any], *, queue: str, reason: str, count: int = 1,
                 exchange: str = "", routing_keys: list[str] | None = None) -> None:
    assert entry["queue"] == queue
    assert entry["reason"] == reason
    assert entry["count"] == count
    assert entry["exchange"] == exchange
    assert entry["routing-keys"] == (routing_keys if routing_keys is not None else [queue])
    assert isinstance(entry["time"], datetime)


@pytest.mark.parametrize("how", ["reject", "nack"])
def test_rejected_message_is_dead_lettered(ch: BlockingChannel, names: Names, how: str) -> None:
    dlx, dlq = _dlx(ch, names)
    queue = names.queue()
    ch.queue_declare(queue, arguments={"x-dead-letter-exchange": dlx})
    ch.basic_publish("", queue, b"bad", pika.BasicProperties(
        headers={"app": "kept"}, expiration="60000", message_id="m-1", delivery_mode=2))
    [(method, _, _)] = drain(ch, queue, 1, auto_ack=False)
    if how == "reject":
        ch.basic_reject(method.delivery_tag, requeue=False)
    else:
        ch.basic_nack(method.delivery_tag, requeue=False)
    [(got, props, body)] = drain(ch, dlq, 1)
    assert body == b"bad"
    assert (got.exchange, got.routing_key) == (dlx, queue)
    assert props.expiration is None  # removed; kept as x-death original-expiration
    assert (props.message_id, props.delivery_mode) == ("m-1", 2)
    assert props.headers["app"] == "kept"
    [entry] = _death(props)
    _check_death(entry, queue=queue, reason="rejected")
    assert entry["original-expiration"] == "60000"
    assert props.headers["x-first-death-queue"] == queue
    assert props.headers["x-first-death-reason"] == "rejected"
    assert props.headers["x-first-death-exchange"] == ""
    assert message_count(ch, queue) == 0


def test_requeue_true_does_not_dead_letter(ch: BlockingChannel, names: Names) -> None:
    dlx, dlq = _dlx(ch, names)
    queue = names.queue()
    ch.queue_declare(queue, arguments={"x-dead-letter-exchange": dlx})
    ch.basic_publish("", queue, b"x")
    [(method, _, _)] = drain(ch, queue, 1, auto_ack=False)
    ch.basic_reject(method.delivery_tag, requeue=True)
    [(again, _, _)] = drain(ch, queue, 1)
    assert again.redelivered
    assert message_count(ch, dlq) == 0


def test_dead_letter_routing_key_override(ch: BlockingChannel, names: Names) -> None:
    dlx, queue = names.exchange("dlx"), names.queue()
    target, other = names.queue("target"), names.queue("other")
    ch.exchange_declare(dlx, "direct")
    for q in (target, other):
        ch.queue_declare(q)
    ch.queue_bind(target, dlx, "to-target")
    ch.queue_bind(other, dlx, queue)
    ch.queue_declare(queue, arguments={"x-dead-letter-exchange": dlx,
                                       "x-dead-letter-routing-key": "to-target"})
    ch.basic_publish("", queue, b"y")
    [(method, _, _)] = drain(ch, queue, 1, auto_ack=False)
    ch.basic_nack(method.delivery_tag, requeue=False)
    [(got, props, _)] = drain(ch, target, 1)
    assert got.routing_key == "to-target"
    _check_death(_death(props)[0], queue=queue, reason="rejected")
    assert message_count(ch, other) == 0


@pytest.mark.parametrize("dlrk", [None, "w"])
def test_dead_letter_keeps_cc_and_bcc_routes(ch: BlockingChannel, names: Names,
                                             dlrk: str | None) -> None:
    """Sender-selected distribution through a dead-lettering: without a dead-letter
    routing key the dead letter goes where its key, CC and BCC keys lead, CC header
    kept; with one, there alone and without CC. x-death routing-keys: key and CC."""
    src, dlx = names.exchange("src"), names.exchange("dlx")
    ch.exchange_declare(src, "direct")
    ch.exchange_declare(dlx, "direct")
    work = names.queue("work")
    args = {"x-dead-letter-exchange": dlx}
    if dlrk is not None:
        args["x-dead-letter-routing-key"] = dlrk
    ch.queue_declare(work, arguments=args)
    outs = {}
    for k in ("w", "c1", "b1"):
        ch.queue_bind(work, src, k)
        outs[k] = names.queue(k)
        ch.queue_declare(outs[k])
        ch.queue_bind(outs[k], dlx, k)
    ch.basic_publish(src, "w", b"m", pika.BasicProperties(
        headers={"CC": ["c1"], "BCC": ["b1"], "app": "kept"}))
    [(method, props, _)] = drain(ch, work, 1, auto_ack=False)
    assert props.headers == {"CC": ["c1"], "app": "kept"}
    ch.basic_reject(method.delivery_tag, requeue=False)
    reached = ["w"] if dlrk is not None else ["w", "c1", "b1"]
    for k in reached:
        [(got, props, _)] = drain(ch, outs[k], 1)
        assert got.routing_key == (dlrk or "w")
        assert _death(props)[0]["routing-keys"] == ["w", "c1"]
        assert props.headers.get("CC") == (None if dlrk else ["c1"])
        assert props.headers["app"] == "kept" and "BCC" not in props.headers
    for k in set(outs) - set(reached):
        assert message_count(ch, outs[k]) == 0


def test_dead_letter_to_default_exchange(ch: BlockingChannel, names: Names) -> None:
    queue, target = names.queue(), names.queue("target")
    ch.queue_declare(target)
    ch.queue_declare(queue, arguments={"x-dead-letter-exchange": "",
                                       "x-dead-letter-routing-key": target})
    ch.basic_publish("", queue, b"z")
    [(method, _, _)] = drain(ch, queue, 1, auto_ack=False)
    ch.basic_reject(method.delivery_tag, requeue=False)
    [(got, _, body)] = drain(ch, target, 1)
    assert (got.exchange, got.routing_key, body) == ("", target, b"z")


def test_queue_ttl_expiry(ch: BlockingChannel, names: Names) -> None:
    dlx, dlq = _dlx(ch, names)
    queue = names.queue()
    ch.queue_declare(queue, arguments={"x-dead-letter-exchange": dlx, "x-message-ttl": 20})
    ch.basic_publish("", queue, b"old", pika.BasicProperties(headers={"n": 1}))
    [(got, props, body)] = drain(ch, dlq, 1)
    assert (got.routing_key, body) == (queue, b"old")
    [entry] = _death(props)
    _check_death(entry, queue=queue, reason="expired")
    assert "original-expiration" not in entry
    assert props.headers["x-first-death-reason"] == "expired"
    assert props.headers["n"] == 1


def test_per_message_expiration(ch: BlockingChannel, names: Names) -> None:
    dlx, dlq = _dlx(ch, names)
    queue = names.queue()
    ch.queue_declare(queue, arguments={"x-dead-letter-exchange": dlx})
    ch.basic_publish("", queue, b"short", pika.BasicProperties(expiration="20"))
    ch.basic_publish("", queue, b"long", pika.BasicProperties(expiration="600000"))
    [(_, props, body)] = drain(ch, dlq, 1)
    assert body == b"short"
    assert props.expiration is None
    [entry] = _death(props)
    _check_death(entry, queue=queue, reason="expired")
    assert entry["original-expiration"] == "20"
    [(_, kept, body)] = drain(ch, queue, 1)
    assert (body, kept.expiration) == (b"long", "600000")


def test_ttl_zero_expires_unless_delivered_at_once(ch: BlockingChannel, names: Names) -> None:
    dlx, dlq = _dlx(ch, names)
    queue = names.queue()
    ch.queue_declare(queue, arguments={"x-dead-letter-exchange": dlx, "x-message-ttl": 0})
    ch.basic_publish("", queue, b"gone")
    [(_, props, _)] = drain(ch, dlq, 1)
    assert _death(props)[0]["reason"] == "expired"
    assert message_count(ch, queue) == 0


def test_expired_without_dlx_is_dropped(ch: BlockingChannel, names: Names) -> None:
    queue = names.queue()
    ch.queue_declare(queue, arguments={"x-message-ttl": 20})
    ch.basic_publish("", queue, b"x")
    eventually(lambda: message_count(ch, queue) == 0, what="expiry")


def test_expired_messages_are_not_delivered(ch: BlockingChannel, names: Names) -> None:
    queue = names.queue()
    ch.queue_declare(queue, arguments={"x-message-ttl": 1})
    ch.basic_publish("", queue, b"stale")
    eventually(lambda: ch.basic_get(queue, auto_ack=True)[0] is None
               and message_count(ch, queue) == 0, what="expiry")


def test_max_length_drop_head(ch: BlockingChannel, names: Names) -> None:
    dlx, dlq = _dlx(ch, names)
    queue = names.queue()
    ch.queue_declare(queue, arguments={"x-dead-letter-exchange": dlx, "x-max-length": 2})
    for body in (b"1", b"2", b"3", b"4"):
        ch.basic_publish("", queue, body)
    assert [b for _, _, b in drain(ch, queue, 2)] == [b"3", b"4"]
    dead = drain(ch, dlq, 2)
    assert [b for _, _, b in dead] == [b"1", b"2"]
    _check_death(_death(dead[0][1])[0], queue=queue, reason="maxlen")


def test_max_length_bytes_drop_head(ch: BlockingChannel, names: Names) -> None:
    queue = names.queue()
    ch.queue_declare(queue, arguments={"x-max-length-bytes": 10})
    for body in (b"aaaa", b"bbbb", b"cccc"):
        ch.basic_publish("", queue, body)
    assert [b for _, _, b in drain(ch, queue, 2)] == [b"bbbb", b"cccc"]


def test_max_length_reject_publish(ch: BlockingChannel, names: Names) -> None:
    dlx, dlq = _dlx(ch, names)
    queue = names.queue()
    ch.queue_declare(queue, arguments={"x-dead-letter-exchange": dlx, "x-max-length": 1,
                                       "x-overflow": "reject-publish"})
    ch.basic_publish("", queue, b"first")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", queue, b"second")
    assert [b for _, _, b in drain(ch, queue, 1)] == [b"first"]
    assert message_count(ch, dlq) == 0  # reject-publish does not dead-letter
    ch.basic_publish("", queue, b"third")  # room again
    assert [b for _, _, b in drain(ch, queue, 1)] == [b"third"]


def test_max_length_reject_publish_dlx(ch: BlockingChannel, names: Names) -> None:
    dlx, dlq = _dlx(ch, names)
    queue = names.queue()
    ch.queue_declare(queue, arguments={"x-dead-letter-exchange": dlx, "x-max-length": 1,
                                       "x-overflow": "reject-publish-dlx"})
    ch.basic_publish("", queue, b"first")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", queue, b"second")
    [(_, props, body)] = drain(ch, dlq, 1)
    assert body == b"second"
    _check_death(_death(props)[0], queue=queue, reason="maxlen")


def test_unacked_do_not_count_towards_max_length(ch: BlockingChannel, names: Names) -> None:
    queue = names.queue()
    ch.queue_declare(queue, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.basic_publish("", queue, b"a")
    drain(ch, queue, 1, auto_ack=False)
    ch.basic_publish("", queue, b"b")  # accepted: the queue holds no ready message
    assert message_count(ch, queue) == 1


def test_x_death_count_increments_in_reject_cycle(ch: BlockingChannel, names: Names) -> None:
    """A cycle that involves a rejection is allowed; the same entry counts up."""
    queue = names.queue()
    ch.queue_declare(queue, arguments={"x-dead-letter-exchange": "",
                                       "x-dead-letter-routing-key": queue})
    ch.basic_publish("", queue, b"loop")
    for expected in (1, 2, 3):
        [(method, _, _)] = drain(ch, queue, 1, auto_ack=False)
        ch.basic_reject(method.delivery_tag, requeue=False)
        [(method, props, _)] = drain(ch, queue, 1, auto_ack=False)
        [entry] = _death(props)
        assert entry["count"] == expected
        assert entry["reason"] == "rejected"
        ch.basic_nack(method.delivery_tag, requeue=True)


def test_x_death_history_most_recent_first(ch: BlockingChannel, names: Names) -> None:
    first, second = names.queue("first"), names.queue("second")
    dlx, dlq = _dlx(ch, names)
    ch.queue_declare(second, arguments={"x-message-ttl": 20, "x-dead-letter-exchange": dlx})
    ch.queue_declare(first, arguments={"x-dead-letter-exchange": "",
                                       "x-dead-letter-routing-key": second})
    ch.basic_publish("", first, b"hop", pika.BasicProperties(headers={"keep": "me"}))
    [(method, _, _)] = drain(ch, first, 1, auto_ack=False)
    ch.basic_reject(method.delivery_tag, requeue=False)
    [(got, props, _)] = drain(ch, dlq, 1)
    deaths = _death(props)
    assert [(d["queue"], d["reason"]) for d in deaths] == [(second, "expired"),
                                                           (first, "rejected")]
    _check_death(deaths[0], queue=second, reason="expired", routing_keys=[second])
    _check_death(deaths[1], queue=first, reason="rejected")
    assert props.headers["x-first-death-queue"] == first
    assert props.headers["x-first-death-reason"] == "rejected"
    assert props.headers["keep"] == "me"
    assert got.routing_key == second


def test_expiry_cycle_is_dropped(ch: BlockingChannel, names: Names) -> None:
    """A -> B -> A by expiry alone: RabbitMQ drops the message when it would re-enter A."""
    a, b = names.queue("a"), names.queue("b")
    ch.queue_declare(a, arguments={"x-message-ttl": 10, "x-dead-letter-exchange": "",
                                   "x-dead-letter-routing-key": b})
    ch.queue_declare(b, arguments={"x-message-ttl": 10, "x-dead-letter-exchange": "",
                                   "x-dead-letter-routing-key": a})
    ch.basic_publish("", a, b"cycle")
    eventually(lambda: message_count(ch, a) + message_count(ch, b) == 0, what="drop")
    observe(ch.connection, 0.2)
    assert message_count(ch, a) + message_count(ch, b) == 0


def test_dead_letter_to_missing_exchange_is_silent(ch: BlockingChannel, names: Names) -> None:
    queue = names.queue()
    ch.queue_declare(queue, arguments={"x-dead-letter-exchange": names.exchange("missing")})
    ch.basic_publish("", queue, b"x")
    [(method, _, _)] = drain(ch, queue, 1, auto_ack=False)
    ch.basic_reject(method.delivery_tag, requeue=False)
    assert message_count(ch, queue) == 0
    assert ch.is_open


def test_quorum_delivery_limit(ch: BlockingChannel, names: Names) -> None:
    dlx, dlq = _dlx(ch, names)
    queue = names.queue()
    ch.queue_declare(queue, durable=True, arguments={
        "x-queue-type": "quorum", "x-delivery-limit": 2, "x-dead-letter-exchange": dlx})
    ch.basic_publish("", queue, b"poison", pika.BasicProperties(delivery_mode=2))
    counts = []
    for _ in range(3):
        [(method, props, _)] = drain(ch, queue, 1, auto_ack=False)
        counts.append((props.headers["x-delivery-count"], method.redelivered))
        ch.basic_reject(method.delivery_tag, requeue=True)
    assert counts == [(0, False), (1, True), (2, True)]
    [(_, props, body)] = drain(ch, dlq, 1)
    assert body == b"poison"
    _check_death(_death(props)[0], queue=queue, reason="delivery_limit")
    assert message_count(ch, queue) == 0
