"""basic.publish: mandatory returns, errors, properties, field tables, confirms."""

from __future__ import annotations

import decimal
import struct
from datetime import UTC, datetime
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from conformance._raw import (
    RawConnection,
    ServerClosed,
    headers_property,
    parse_ack,
    parse_return,
    table,
)
from conformance._util import drain
from conformance.conftest import Names


def _read_confirms(raw: RawConnection, count: int) -> list[tuple[str, int, bool]]:
    """Read basic.ack/nack until every tag up to `count` is covered."""
    seen: list[tuple[str, int, bool]] = []
    covered = 0
    while covered < count:
        method = raw.read_method()
        assert method.ids in ((60, 80), (60, 120)), method
        tag, multiple = parse_ack(method)
        seen.append(("ack" if method.ids == (60, 80) else "nack", tag, multiple))
        covered = max(covered, tag)
    return seen


def test_mandatory_unroutable_returned_before_ack(url: str, names: Names) -> None:
    raw = RawConnection(url).open()
    try:
        raw.confirm_select()
        ex = names.exchange()
        raw.send_method(1, 40, 10, struct.pack(">H", 0) + bytes([len(ex)]) + ex.encode()
                        + bytes([6]) + b"direct" + b"\x00" + table())
        raw.expect((40, 11), channel=1)
        raw.publish(ex, "nowhere", b"payload", mandatory=True)
        first = raw.read_method()
        assert first.ids == (60, 50), "basic.return must come before the confirm"
        assert parse_return(first) == (312, "NO_ROUTE", ex, "nowhere")
        returned = raw.read_content(first)
        assert returned.body == b"payload"
        assert _read_confirms(raw, 1) == [("ack", 1, False)]
        # Without mandatory an unroutable message is silently dropped, still acked.
        raw.publish(ex, "nowhere", b"dropped")
        assert _read_confirms(raw, 2) == [("ack", 2, False)]
    finally:
        raw.close()


def test_mandatory_unroutable_pika(channel: BlockingChannel, names: Names) -> None:
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("", names.queue("nobody"), b"x", mandatory=True)
    queue = names.queue()
    channel.queue_declare(queue)
    channel.basic_publish("", queue, b"routed", mandatory=True)
    assert channel.is_open


def test_mandatory_return_without_confirms(connection: pika.BlockingConnection,
                                           names: Names) -> None:
    ch = connection.channel()
    returns: list[tuple[int, str, bytes]] = []
    ch.add_on_return_callback(
        lambda _ch, method, _props, body: returns.append((method.reply_code, method.reply_text,
                                                          body)))
    ch.basic_publish("amq.direct", names.prefix, b"back", mandatory=True)
    ch.queue_declare("", exclusive=True)  # a round trip; the return arrives before its ok
    connection.process_data_events(time_limit=0)
    assert returns == [(312, "NO_ROUTE", b"back")]


def test_publish_to_missing_exchange_is_404(connection: pika.BlockingConnection,
                                            names: Names) -> None:
    ch = connection.channel()
    missing = names.exchange("missing")
    ch.basic_publish(missing, "k", b"x")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("", exclusive=True)
    assert info.value.reply_code == 404
    assert info.value.reply_text == f"NOT_FOUND - no exchange '{missing}' in vhost '/'"
    assert connection.is_open


def test_publish_to_missing_exchange_raw_channel_close(url: str, names: Names) -> None:
    raw = RawConnection(url).open()
    try:
        raw.publish(names.exchange("missing"), "k", b"x")
        close = raw.read_method()
        assert (close.channel, close.ids) == (1, (20, 40))
        code, _text = close.close_reason()
        assert code == 404
        # class/method of the failing method: basic.publish
        assert close.args[-4:] == struct.pack(">HH", 60, 40)
    finally:
        raw.close()


def test_immediate_is_540_not_implemented(url: str, names: Names) -> None:
    raw = RawConnection(url).open()
    queue = names.queue()
    raw.queue_declare(queue)
    raw.publish("", queue, b"x", immediate=True)
    with pytest.raises(ServerClosed) as info:
        raw.expect((60, 0))
    raw.sock.close()
    assert info.value.kind == "connection.close"
    assert info.value.reply_code == 540
    assert info.value.reply_text == "NOT_IMPLEMENTED - immediate=true"


def test_properties_round_trip(channel: BlockingChannel, names: Names) -> None:
    channel.confirm_delivery()
    queue = names.queue()
    channel.queue_declare(queue)
    stamp = 1_700_000_000
    props = pika.BasicProperties(
        content_type="application/json", content_encoding="gzip", headers={"h": "v"},
        delivery_mode=2, priority=7, correlation_id="corr-1", reply_to="reply-q",
        expiration="600000", message_id="msg-1", timestamp=stamp, type="kind",
        user_id="guest", app_id="conformance",
    )
    channel.basic_publish("", queue, b"{}", props)
    [(_, got, body)] = drain(channel, queue, 1)
    assert body == b"{}"
    for attr in ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
                 "correlation_id", "reply_to", "expiration", "message_id", "timestamp",
                 "type", "user_id", "app_id"):
        assert getattr(got, attr) == getattr(props, attr), attr


@pytest.mark.parametrize("mode", [1, 2])
def test_persistent_and_transient(channel: BlockingChannel, names: Names, mode: int) -> None:
    channel.confirm_delivery()
    queue = names.queue()
    channel.queue_declare(queue, durable=True)
    channel.basic_publish("", queue, b"m", pika.BasicProperties(delivery_mode=mode))
    [(_, got, _)] = drain(channel, queue, 1)
    assert got.delivery_mode == mode


def test_no_properties_at_all(url: str, names: Names) -> None:
    raw = RawConnection(url).open()
    try:
        queue = names.queue()
        raw.queue_declare(queue)
        raw.publish("", queue, b"bare")
        msg = None
        while msg is None:
            msg = raw.get(queue)
        assert msg.properties == b"\x00\x00"
        assert msg.body == b"bare"
    finally:
        raw.close()


def test_user_id_mismatch_is_406(connection: pika.BlockingConnection, names: Names) -> None:
    ch = connection.channel()
    ch.basic_publish("", names.queue(), b"x", pika.BasicProperties(user_id="mallory"))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("", exclusive=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - user_id property set to 'mallory' but authenticated user was"
        " 'guest'"
    )


@pytest.mark.parametrize("size", [0, 1, 131_072 - 8, 131_072, 1_000_000])
def test_body_sizes(channel: BlockingChannel, names: Names, size: int) -> None:
    channel.confirm_delivery()
    queue = names.queue()
    channel.queue_declare(queue)
    body = bytes(i % 251 for i in range(size))
    channel.basic_publish("", queue, body)
    [(_, _, got)] = drain(channel, queue, 1)
    assert got == body


PIKA_HEADERS: dict[str, Any] = {
    "str": "text ünïcode",
    "bytes": b"\x00\x01binary",
    "true": True,
    "false": False,
    "zero": 0,
    "int": -123456,
    "int32max": 2**31 - 1,
    "int64": 2**40,
    "int64neg": -(2**62),
    "decimal": decimal.Decimal("3.14"),
    "timestamp": datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
    "none": None,
    "table": {"nested": {"deep": 1}, "s": "x"},
    "array": [1, "two", [3], {"four": 4}, None, True],
    "empty-table": {},
    "empty-array": [],
}


def test_headers_round_trip_decoded(channel: BlockingChannel, names: Names) -> None:
    channel.confirm_delivery()
    queue = names.queue()
    channel.queue_declare(queue)
    channel.basic_publish("", queue, b"h", pika.BasicProperties(headers=PIKA_HEADERS))
    [(_, got, _)] = drain(channel, queue, 1)
    assert got.headers == PIKA_HEADERS


EVERY_TAG: list[tuple[str, bytes, Any]] = [
    ("t", b"t", 1),
    ("b", b"b", -5),
    ("B", b"B", 250),
    ("s", b"s", -300),
    ("u", b"u", 65000),
    ("I", b"I", -70000),
    ("i", b"i", 4_000_000_000),
    ("l", b"l", -(2**60)),
    ("f", b"f", 1.5),
    ("d", b"d", -2.25),
    ("D", b"D", (2, 314)),
    ("S", b"S", "long string"),
    ("x", b"x", b"\x00\xffbytes"),
    ("T", b"T", 1_700_000_000),
    ("V", b"V", None),
    ("F", b"F", [("inner-b", b"b", 1), ("inner-S", b"S", "v")]),
    ("A", b"A", [(b"b", 1), (b"s", 2), (b"S", "three"), (b"d", 4.0), (b"F", [])]),
]


@pytest.mark.parametrize("via", ["default-exchange", "headers-exchange"])
def test_field_table_tags_survive_byte_exact(url: str, names: Names, via: str) -> None:
    """Headers come back with the exact type tags and bytes the publisher sent.

    Checked with a hand-written client, so no AMQP library's codec (lossy for
    tags like b/s/u/f) is involved. Routing through a headers exchange makes
    the broker decode the table, which must not change what is delivered.
    """
    raw = RawConnection(url).open()
    try:
        queue = names.queue()
        raw.queue_declare(queue)
        exchange, key = "", queue
        if via == "headers-exchange":
            exchange = names.exchange()
            raw.send_method(1, 40, 10, struct.pack(">H", 0) + bytes([len(exchange)])
                            + exchange.encode() + bytes([7]) + b"headers" + b"\x00" + table())
            raw.expect((40, 11), channel=1)
            raw.send_method(1, 50, 20, struct.pack(">H", 0) + bytes([len(queue)])
                            + queue.encode() + bytes([len(exchange)]) + exchange.encode()
                            + b"\x00" + b"\x00" + table([("x-match", b"S", "any"),
                                                         ("s", b"s", -300)]))
            raw.expect((50, 21), channel=1)
        properties = headers_property(table(EVERY_TAG))
        raw.publish(exchange, key, b"tags", properties)
        msg = None
        while msg is None:
            msg = raw.get(queue)
        assert msg.properties == properties
    finally:
        raw.close()


def test_confirm_tags_ascending_cover_every_publish(url: str, names: Names) -> None:
    raw = RawConnection(url).open()
    try:
        queue = names.queue()
        raw.queue_declare(queue)
        raw.confirm_select()
        count = 200
        for i in range(count):
            raw.publish("", queue, str(i).encode(), b"\x10\x00\x02" if i % 2 else b"\x00\x00")
        confirms = _read_confirms(raw, count)
        tags = [tag for _, tag, _ in confirms]
        assert tags == sorted(tags) and len(set(tags)) == len(tags), "ascending, no repeats"
        assert tags[-1] == count
        assert all(kind == "ack" for kind, _, _ in confirms)
        covered: set[int] = set()
        previous = 0
        for _, tag, multiple in confirms:
            covered |= set(range(previous + 1, tag + 1)) if multiple else {tag}
            previous = tag
        assert covered == set(range(1, count + 1))
    finally:
        raw.close()


def test_confirm_select_ok_and_idempotent(url: str) -> None:
    """pika sends confirm.select only once per channel: use raw frames."""
    raw = RawConnection(url).open()
    try:
        raw.confirm_select()
        raw.confirm_select()  # a second confirm.select on the channel is fine
        raw.send_method(1, 85, 10, b"\x01")  # and so is a no-wait one: no answer
        queue = raw.queue_declare("", exclusive=True)  # next reply is declare-ok
        raw.publish("", queue, b"x")
        assert _read_confirms(raw, 1) == [("ack", 1, False)]  # still in confirm mode
    finally:
        raw.close()


def test_unroutable_in_confirm_mode_still_acked(channel: BlockingChannel, names: Names) -> None:
    channel.confirm_delivery()
    channel.basic_publish("amq.direct", names.prefix + "-nobody", b"x")  # raises on nack
    assert channel.is_open
