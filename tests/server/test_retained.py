"""Retained publications over AMQP: x-lvc, publish on request, limits, durability.

x-recent-history's RabbitMQ-checked behaviour lives in conformance/; here are
the parts RabbitMQ's Debian package cannot check (x-lvc is not shipped) and
amqplite's own additions (x-retained, publish on request, durable retained
values, limits), from pika and aio-pika against a real broker process.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import aio_pika
import httpx
import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _get_all(ch: BlockingChannel, queue: str, n: int) -> list[tuple[Any, Any, bytes]]:
    """basic.get until ``n`` arrived (deadline), then the queue must be empty."""
    got: list[tuple[Any, Any, bytes]] = []

    def more() -> bool:
        m, p, b = ch.basic_get(queue, auto_ack=True)
        if m is not None:
            got.append((m, p, b))
        return len(got) >= n

    wait_for(more, 10, what=f"{n} messages in {queue}")
    assert ch.queue_declare(queue, passive=True).method.message_count == 0
    return got


def _bodies(ch: BlockingChannel, queue: str, n: int) -> list[bytes]:
    return [b for _m, _p, b in _get_all(ch, queue, n)]


def _bound_after_restart(b: BrokerProcess, exchange: str,
                         key: str) -> tuple[Any, BlockingChannel, str]:
    """A new connection, and an exclusive queue bound to ``exchange`` with ``key``."""
    c = connect(b)
    ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, exchange, key)
    return c, ch, q


def _marker_first(ch: BlockingChannel, queue: str) -> None:
    """Nothing was enqueued before this point: a marker sent now arrives first."""
    ch.basic_publish("", queue, b"marker")
    assert _bodies(ch, queue, 1) == [b"marker"]


def test_lvc_new_binding_gets_the_last_value_of_its_key(channel: BlockingChannel) -> None:
    x = _name("lvc")
    channel.exchange_declare(x, "x-lvc")
    for key, body in [("a", b"a1"), ("b", b"b1"), ("a", b"a2")]:
        channel.basic_publish(x, key, body)
    q = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(q, x, "a")
    (m, props, body), = _get_all(channel, q, 1)
    assert body == b"a2" and m.routing_key == "a" and m.exchange == x
    assert props.headers == {"x-retained": True}
    # live publishes route like direct, without the header
    channel.basic_publish(x, "a", b"a3", pika.BasicProperties(headers={"h": 1}))
    channel.basic_publish(x, "b", b"b2")
    (_m, props, body), = _get_all(channel, q, 1)
    assert body == b"a3" and props.headers == {"h": 1}
    # re-issuing a live binding delivers nothing; a key with no value gives nothing
    channel.queue_bind(q, x, "a")
    channel.queue_bind(q, x, "none-yet")
    _marker_first(channel, q)
    channel.exchange_delete(x)


def test_publish_on_request_step_by_step(channel: BlockingChannel) -> None:
    x = _name("lvc")
    channel.exchange_declare(x, "x-lvc")
    q = channel.queue_declare("", exclusive=True).method.queue
    on_request = {"x-publish-on-request": True}
    # 1. the publisher's first value
    channel.basic_publish(x, "price", b"v1")
    # 2. the subscriber registers on request: nothing arrives
    channel.queue_bind(q, x, "price", arguments=on_request)
    _marker_first(channel, q)
    # 3. publishes are not pushed to it; v2 replaces v1 and v3 replaces v2
    channel.basic_publish(x, "price", b"v2")
    channel.basic_publish(x, "price", b"v3")
    _marker_first(channel, q)
    # 4. Request Update: the same bind again delivers the current value once
    channel.queue_bind(q, x, "price", arguments=on_request)
    (_m, props, body), = _get_all(channel, q, 1)
    assert body == b"v3" and props.headers == {"x-retained": True}
    _marker_first(channel, q)
    # 5. each further request delivers the then current value
    channel.basic_publish(x, "price", b"v4")
    channel.queue_bind(q, x, "price", arguments=on_request)
    assert _bodies(channel, q, 1) == [b"v4"]
    # 6. unbinding ends it; binding afresh on request again gives nothing
    channel.queue_unbind(q, x, "price", arguments=on_request)
    channel.queue_bind(q, x, "price", arguments=on_request)
    _marker_first(channel, q)
    channel.exchange_delete(x)


def test_publish_on_request_on_another_type_is_refused_at_bind(conn: Any) -> None:
    ch = conn.channel()
    x = _name("rh")
    ch.exchange_declare(x, "x-recent-history")
    q = ch.queue_declare("", exclusive=True).method.queue
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(q, x, "k", arguments={"x-publish-on-request": True})
    assert info.value.reply_code == 406
    assert "x-publish-on-request" in info.value.reply_text and x in info.value.reply_text
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(q, "amq.direct", "k", arguments={"x-publish-on-request": True})
    assert info.value.reply_code == 406
    ch = conn.channel()
    lvc = _name("lvc")
    ch.exchange_declare(lvc, "x-lvc")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(q, lvc, "k", arguments={"x-publish-on-request": "yes"})
    assert info.value.reply_text == ('PRECONDITION_FAILED - Invalid argument <<"yes">>, '
                                     "'x-publish-on-request' must be a boolean")
    ch = conn.channel()
    ch.exchange_delete(x)
    ch.exchange_delete(lvc)


@pytest.mark.parametrize(("kind", "arg", "value", "shown", "want"), [
    ("x-recent-history", "x-recent-history-length", 0, "0", "a positive integer"),
    ("x-recent-history", "x-recent-history-length", -1, "-1", "a positive integer"),
    ("x-recent-history", "x-recent-history-length", "20", '<<"20">>', "a positive integer"),
    ("x-recent-history", "x-max-length-bytes", -5, "-5", "a non-negative integer"),
    ("x-lvc", "x-max-length", -1, "-1", "a non-negative integer"),
    ("x-lvc", "x-max-length-bytes", "big", '<<"big">>', "a non-negative integer"),
])
def test_bad_arguments_are_406_and_declare_nothing(conn: Any, kind: str, arg: str, value: Any,
                                                   shown: str, want: str) -> None:
    x = _name("bad")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        conn.channel().exchange_declare(x, kind, arguments={arg: value})
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - Invalid argument {shown}, '{arg}' must be {want}")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        conn.channel().exchange_declare(x, passive=True)
    assert info.value.reply_code == 404


def test_limits_evict_the_oldest(channel: BlockingChannel) -> None:
    lvc = _name("lvc")
    channel.exchange_declare(lvc, "x-lvc", arguments={"x-max-length": 2})
    for key in ("a", "b", "c"):  # three keys, room for two: "a" goes
        channel.basic_publish(lvc, key, key.encode())
    q = channel.queue_declare("", exclusive=True).method.queue
    for key in ("a", "b", "c"):
        channel.queue_bind(q, lvc, key)
    assert _bodies(channel, q, 2) == [b"b", b"c"]
    rh = _name("rh")
    channel.exchange_declare(rh, "x-recent-history", arguments={"x-max-length-bytes": 10})
    for body in (b"123456", b"1234", b"12345"):  # 15 bytes, room for 10: the first goes
        channel.basic_publish(rh, "", body)
    q2 = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(q2, rh, "")
    assert _bodies(channel, q2, 2) == [b"1234", b"12345"]
    channel.exchange_delete(lvc)
    channel.exchange_delete(rh)


def test_kill_9_keeps_confirmed_retained_values_of_durable_exchanges(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data").start()
    try:
        c = connect(b)
        ch = c.channel()
        ch.confirm_delivery()
        ch.exchange_declare("prices", "x-lvc", durable=True)
        ch.exchange_declare("history", "x-recent-history", durable=True,
                            arguments={"x-recent-history-length": 3})
        ch.exchange_declare("scratch", "x-lvc")  # not durable: gone after the crash
        for i in range(5):
            ch.basic_publish("prices", "eur", f"eur-{i}".encode(), PERSISTENT)
            ch.basic_publish("history", "", f"h-{i}".encode(), PERSISTENT)
        ch.basic_publish("prices", "usd", b"usd-0", PERSISTENT)
        ch.basic_publish("prices", "gbp", b"transient")  # not persistent: not kept
        ch.basic_publish("scratch", "k", b"s", PERSISTENT)
        b.kill()  # every publish above was confirmed
        b.start()
        c = connect(b)
        ch = c.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        for key in ("eur", "usd", "gbp"):
            ch.queue_bind(q, "prices", key)
        got = _get_all(ch, q, 2)
        assert [body for _m, _p, body in got] == [b"eur-4", b"usd-0"]
        assert all(p.headers == {"x-retained": True} for _m, p, _b in got)
        ch.queue_bind(q, "history", "")
        assert _bodies(ch, q, 3) == [b"h-2", b"h-3", b"h-4"]
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            c.channel().exchange_declare("scratch", passive=True)
        # deleting the exchange deletes its retained rows: a namesake starts empty
        ch.exchange_delete("prices")
        ch.exchange_declare("prices", "x-lvc", durable=True)
        b.stop()
        b.start()
        c, ch, q = _bound_after_restart(b, "prices", "eur")
        _marker_first(ch, q)
        c.close()
    finally:
        b.kill()


def test_aio_pika_lvc_and_publish_on_request(broker: BrokerProcess) -> None:
    async def main() -> tuple[list[bytes], list[Any], list[bytes]]:
        conn = await aio_pika.connect(broker.url)
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            x = await ch.declare_exchange(_name("aio-lvc"), "x-lvc")
            await x.publish(aio_pika.Message(b"v1"), routing_key="k")
            await x.publish(aio_pika.Message(b"v2"), routing_key="k")
            live = await ch.declare_queue(exclusive=True)
            await live.bind(x, "k")  # gets v2 at bind
            m = await live.get(timeout=5)
            await m.ack()
            at_bind = [m.body]
            headers = [m.headers.get("x-retained")]
            req = await ch.declare_queue(exclusive=True)
            args = {"x-publish-on-request": True}
            await req.bind(x, "k", arguments=args)
            await x.publish(aio_pika.Message(b"v3"), routing_key="k")
            m = await live.get(timeout=5)  # the live binding got v3 ...
            await m.ack()
            at_bind.append(m.body)
            # ... the on-request one nothing, until it asks
            await ch.default_exchange.publish(aio_pika.Message(b"marker"), routing_key=req.name)
            m = await req.get(timeout=5)
            await m.ack()
            requested = [m.body]
            await req.bind(x, "k", arguments=args)
            m = await req.get(timeout=5)
            await m.ack()
            requested.append(m.body)
            headers.append(m.headers.get("x-retained"))
            await x.delete()
            return at_bind, headers, requested

    at_bind, headers, requested = asyncio.run(asyncio.wait_for(main(), 30))
    assert at_bind == [b"v2", b"v3"]
    assert headers == [True, True]
    assert requested == [b"marker", b"v3"]


def test_default_byte_cap_and_retained_bytes_in_the_memory_figures(tmp_path: Path) -> None:
    """An exchange without x-max-length-bytes keeps at most ``retained_max_bytes`` of
    bodies (oldest out); its own argument overrides it; /api/node/memory reports
    the retained bytes (pinned in RAM, part of mem_used)."""
    data = tmp_path / "data"
    data.mkdir()
    cfg = data / "amqplite.toml"
    cfg.write_text('retained_max_bytes = "100KiB"\n')
    b = BrokerProcess(data, None, "--config", str(cfg)).start()
    try:
        c = connect(b)
        ch = c.channel()
        ch.confirm_delivery()
        ch.exchange_declare("capped", "x-recent-history")
        ch.exchange_declare("own", "x-recent-history",
                            arguments={"x-max-length-bytes": 1024 * 1024})
        body = 40 * 1024
        for i in range(5):
            for x in ("capped", "own"):
                ch.basic_publish(x, "", bytes([i]) * body)
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(q, "capped", "")
        assert _bodies(ch, q, 2) == [bytes([3]) * body, bytes([4]) * body]  # 80 KiB of 100
        mem = httpx.get(f"http://127.0.0.1:{b.admin_port}/api/node/memory",
                        auth=("guest", "guest")).json()
        assert (mem["mem_retained_messages"], mem["mem_retained_body_bytes"]) == (7, 7 * body)
        # the RAM figure: bodies plus properties, keys and a measured per-entry overhead
        assert 7 * body < mem["mem_retained"] < 7 * (body + 1024)
        assert mem["mem_used"] >= mem["mem_retained"]
        ch.exchange_delete("own")
        mem = httpx.get(f"http://127.0.0.1:{b.admin_port}/api/node/memory",
                        auth=("guest", "guest")).json()
        assert mem["mem_retained_body_bytes"] == 2 * body
        c.close()
    finally:
        b.kill()


def test_dead_letters_to_a_durable_lvc_are_kept_across_a_kill_9(tmp_path: Path) -> None:
    """A persistent message dead-lettered (TTL) from a durable queue to a durable
    x-lvc is kept under its dead-letter routing key, in the dead-lettering's commit."""
    b = BrokerProcess(tmp_path / "data").start()
    try:
        c = connect(b)
        ch = c.channel()
        ch.exchange_declare("last", "x-lvc", durable=True)
        ch.queue_declare("src", durable=True, arguments={
            "x-dead-letter-exchange": "last", "x-dead-letter-routing-key": "dead",
            "x-message-ttl": 0})
        watch = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(watch, "last", "dead")
        ch.confirm_delivery()
        for body in (b"first", b"second"):
            ch.basic_publish("", "src", body, PERSISTENT)
        assert _bodies(ch, watch, 2) == [b"first", b"second"]  # dead-lettered by now
        # a confirm means every earlier store write has committed (the writer is in order)
        ch.queue_declare("sync", durable=True)
        ch.basic_publish("", "sync", b"sync", PERSISTENT)
        b.kill()
        b.start()
        c, ch, q = _bound_after_restart(b, "last", "dead")
        (_m, props, body), = _get_all(ch, q, 1)
        assert body == b"second"  # the last value of the key
        assert props.headers["x-retained"] is True
        assert props.headers["x-death"][0]["reason"] == "expired"
        c.close()
    finally:
        b.kill()
