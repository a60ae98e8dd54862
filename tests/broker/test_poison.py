"""Hostile content properties through every path that decodes them later (issue 7).

The pure broker is driven with plain calls: a publisher sends arbitrary
property bytes down every route (TTL expiry, reject, nack, max-length drop-head
and reject-publish-dlx, delivery limit, quorum redelivery, headers exchange)
and nothing may escape but a 406 for that publisher; another session must see
no difference, every dead-lettered copy must decode, every delivery-log row
must be storable, and the admin views must render every message.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings

from amqplite.admin import views
from amqplite.broker.core import Broker, parse_expiration
from amqplite.broker.deadletter import dead_letter_properties
from amqplite.broker.model import Entry, Message
from amqplite.protocol.codec import FieldArray, FieldTable
from amqplite.protocol.errors import ChannelError, FrameSyntaxError
from amqplite.protocol.properties import (
    BasicProperties,
    check_properties,
    decode_properties,
    encode_properties,
)
from tests.broker.conftest import FakeClock, deliveries
from tests.protocol.strategies import ODD_COUNTS, _x_death_entry, hostile_properties

DLX = {"x-dead-letter-exchange": "dlx"}
QUEUES: dict[str, dict[str, Any]] = {
    "ttl": {"x-message-ttl": 1000, **DLX},
    "lim": {"x-max-length": 1, **DLX},
    "rpd": {"x-max-length": 1, "x-overflow": "reject-publish-dlx", **DLX},
    "dlim": {"x-delivery-limit": 1, **DLX},
    "qq": {"x-queue-type": "quorum", "x-delivery-limit": 5, **DLX},
    "rej": DLX,
    "cons": DLX,
    "hq": {},
    "dlq": {},
    "good": {},
}
GOOD = encode_properties(BasicProperties(content_type="text/plain", delivery_mode=2))


def _setup(b: Broker) -> tuple[Any, Any, Any]:
    s = b.open_session("guest", "/")
    admin = b.open_channel(s, 1)
    for name, args in QUEUES.items():
        b.queue_declare(admin, name, durable=True, arguments=args)
    b.exchange_declare(admin, "dlx", "fanout")
    b.queue_bind(admin, "dlq", "dlx", "")
    b.exchange_declare(admin, "hx", "headers")
    b.queue_bind(admin, "hq", "hx", "", {"x-match": "any", "a": 1, "x-death": None})
    pub = b.open_channel(b.open_session("guest", "/"), 1)
    con_s = b.open_session("guest", "/")
    con = b.open_channel(con_s, 1)
    b.basic_consume(con, "cons", "c1")
    b.start_consumer(con, "c1")
    return pub, con, b.open_channel(b.open_session("guest", "/"), 1)


def _get(b: Broker, ch: Any, queue: str, no_ack: bool = False) -> Any:
    """basic.get's result tuple, or None when the queue is empty."""
    return b.basic_get(ch, queue, no_ack)


def _storable(row: tuple[Any, ...]) -> None:
    for v in row:
        if isinstance(v, str):
            v.encode()
        elif isinstance(v, int):
            assert -(2**63) <= v < 2**63


@settings(max_examples=250, deadline=None)
@given(hostile_properties(list(QUEUES)))
def test_hostile_properties_hurt_no_one_else(raw: bytes) -> None:
    clock = FakeClock()
    b = Broker(now=clock, log_level="full")
    pub, con, good = _setup(b)
    b.basic_publish(good, "", "rpd", GOOD, b"first")  # so the poison is the one refused
    refused = []
    for exchange, rk in [("", q) for q in QUEUES if q not in ("dlq", "good")] + [("hx", "")]:
        try:
            b.basic_publish(pub, exchange, rk, raw, b"poison")
            refused.append(False)
        except ChannelError as exc:  # at the door, for this publisher only
            assert exc.reply_code == 406 and exc.class_id == 60, exc
            refused.append(True)
    assert set(refused) == {_refused(raw)}, "refused everywhere or nowhere, for a reason"
    b.basic_publish(good, "", "lim", GOOD, b"next")  # drop-head: the poison is dead-lettered
    for e in deliveries(b):  # the consumer rejects what it was given
        b.basic_reject(e.channel, e.delivery_tag, requeue=False)
    if (r := _get(b, con, "rej")) is not None:
        b.basic_nack(con, r.delivery_tag, False, requeue=False)
    for _ in range(3):  # past the delivery limit
        if (r := _get(b, con, "dlim")) is not None:
            b.basic_nack(con, r.delivery_tag, False, requeue=True)
    for _ in range(2):  # quorum redeliveries carry x-delivery-count
        if (r := _get(b, con, "qq")) is not None:
            if r.properties is not None:
                check_properties(r.properties)
            b.basic_nack(con, r.delivery_tag, False, requeue=True)
    clock.t += 5
    b.tick()
    # every message still in the broker renders in the admin API
    for q in b.vhost("/").queues.values():
        for e in q.ready:
            info = views.message_info(e.message, e.message.body, redelivered=e.redelivered)
            json.dumps(info, ensure_ascii=False).encode()
    # dead-lettered copies decode (a consumer's client library can read them)
    while (r := _get(b, con, "dlq", no_ack=True)) is not None:
        check_properties(r.message.properties_raw)
    # the other session is untouched
    b.basic_publish(good, "", "good", GOOD, b"fine")
    r = _get(b, good, "good", no_ack=True)
    assert r is not None and r.message.body == b"fine"
    assert b.log  # the log rows the poison made: each must be storable
    for row in b.log:
        _storable(row)


def _refused(raw: bytes) -> bool:
    """Whether publish must say 406: malformed, someone else's user-id, bad expiration."""
    try:
        check_properties(raw)
    except FrameSyntaxError:
        return True
    props = decode_properties(raw)
    if props.user_id not in (None, "guest"):
        return True
    if props.expiration is not None:
        try:
            parse_expiration(props.expiration)
        except ValueError:
            return True
    return False


@pytest.mark.parametrize(("tag", "count"), ODD_COUNTS, ids=[t for t, _ in ODD_COUNTS])
def test_odd_x_death_count_restarts_at_one_or_saturates(tag: str, count: Any) -> None:
    headers = FieldTable()
    deaths = FieldArray()
    deaths.append_tagged(_x_death_entry("work", "rejected", (tag, count)), "F")
    headers.set("x-death", deaths, "A")
    raw = encode_properties(BasicProperties(headers=headers))
    out = dead_letter_properties(raw, queue="work", reason="rejected", exchange="",
                                 routing_keys=["work"], now_s=0)
    (death,) = decode_properties(out).headers["x-death"]  # type: ignore[index]
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        assert death["count"] == min(count + 1, 2**63 - 1)
    else:
        assert death["count"] == 1
    assert not (isinstance(death["count"], float) and math.isnan(death["count"]))


def test_undecodable_stored_message_is_dropped_when_dead_lettered() -> None:
    """A message no publish accepts now (an older version stored it): dropped, logged."""
    b = Broker(now=FakeClock())
    _setup(b)
    q = b.vhost("/").queues["rej"]
    bad = b"\x20\x00\x00\x00\x00\x07\x02\xff\xfeI\x00\x00"  # headers: key not UTF-8, cut short
    e = Entry(q.take_position(), Message(99, "", "rej", bad, b"old", persistent=True),
              stored=True)
    q.ready.append(e)
    b.outbox.take()
    b.log.clear()
    b.dead_letter(q, q.ready.popleft(), "rejected")
    assert b.vhost("/").queues["dlq"].message_count == 0
    rows = b.log
    assert [(r[1], r[11]) for r in rows] == [("dead_lettered", "rejected:malformed")]
    assert rows[0][6] == "" and rows[0][7] == 99  # read back as amq-99
    assert any(type(op).__name__ == "DeleteEntry" for op in b.outbox.peek())


@pytest.mark.parametrize(("value", "reason"), [
    ("abc", "no_integer"), ("12x", '{leftover_string,"x"}'), ("-1", "{value_negative,-1}"),
    ("4294967296", "{value_too_large,4294967296}"), ("9" * 255, "{value_too_large,"),
    (" 5", "no_integer"),
])
def test_invalid_expiration_is_refused_like_rabbitmq(value: str, reason: str) -> None:
    b = Broker(now=FakeClock())
    pub, _, _ = _setup(b)
    with pytest.raises(ChannelError) as info:
        b.basic_publish(pub, "", "ttl", encode_properties(BasicProperties(expiration=value)),
                        b"x")
    assert info.value.reply_code == 406
    assert info.value.reply_text.startswith(
        f"PRECONDITION_FAILED - invalid expiration '{value}': {reason}")
    b.basic_publish(pub, "", "ttl", encode_properties(BasicProperties(expiration="+0")), b"x")


def test_non_utf8_message_id_is_logged_escaped() -> None:
    b = Broker(now=FakeClock())
    pub, _, _ = _setup(b)
    b.log.clear()
    raw = b"\x00\x80\x04id-\xff"
    b.basic_publish(pub, "", "good", raw, b"x")
    ids = {row[6] for row in b.log}
    assert ids == {"id-\\xff"}
