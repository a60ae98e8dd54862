"""One client's malformed message never hurts another client or the broker (issue 7).

Each test drives a real broker process with hand-built content properties
(the raw client in ``conformance/_raw.py`` puts exactly these bytes on the
wire) and checks two things: the broker and every other connection carry on,
and the bad message goes where RabbitMQ would send it, or is refused at the
door for its publisher only.
"""

from __future__ import annotations

import math
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from amqplite.protocol.properties import decode_properties
from amqplite.store.engine import Store
from amqplite.storeops import PutEntry, PutMessage
from conformance._raw import RawConnection, ServerClosed, shortstr, table
from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect

HEADERS, DELIVERY_MODE, MESSAGE_ID, USER_ID, APP_ID = 1 << 13, 1 << 12, 1 << 7, 1 << 4, 1 << 3


def props(*fields: tuple[int, bytes]) -> bytes:
    """Property flags and list from (flag bit, encoded field) pairs, in wire order."""
    flags, body = 0, b""
    for bit, data in sorted(fields, key=lambda f: -f[0]):
        flags |= bit
        body += data
    return struct.pack(">H", flags) + body


def raw_table(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def non_utf8_key() -> bytes:
    return props((HEADERS, raw_table(b"\x02\xff\xfeI" + struct.pack(">i", 1))))


def deep_nesting(depth: int = 3000) -> bytes:
    inner = raw_table(b"")
    for _ in range(depth):
        inner = raw_table(b"\x01kF" + inner)
    return props((HEADERS, inner))


def truncated_after_headers() -> bytes:
    """app-id claims 50 bytes but 3 follow; publish reads nothing after the headers."""
    return props((HEADERS, table([("a", b"I", 1)])), (APP_ID, b"\x32abc"))


def x_death(queue: str, reason: str, tag: bytes, count: Any, persistent: bool = False) -> bytes:
    death = [("count", tag, count), ("queue", b"S", queue), ("reason", b"S", reason)]
    fields = [(HEADERS, table([("x-death", b"A", [(b"F", death)])]))]
    if persistent:
        fields.append((DELIVERY_MODE, b"\x02"))
    return props(*fields)


BAD_COUNTS = {
    "abc": (b"S", "abc"),
    "nan": (b"d", math.nan),
    "inf": (b"d", math.inf),
    "2^63": (b"T", 2**63),
}
MALFORMED = {
    "non-utf8-key": non_utf8_key,
    "deep-nesting": deep_nesting,
    "truncated-after-headers": truncated_after_headers,
}


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _count(ch: Any, queue: str) -> int:
    return int(ch.queue_declare(queue, passive=True).method.message_count)


def dead_letter_args(dlq: str, **extra: Any) -> bytes:
    return table({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq, **extra})


def expect_refused(pub: RawConnection, queue: str) -> None:
    """The publisher's channel is closed with 406 and its connection lives on."""
    with pytest.raises(ServerClosed) as info:
        pub.queue_declare(queue)  # any synchronous method: the close comes first
    assert (info.value.kind, info.value.reply_code) == ("channel.close", 406), info.value
    assert "PRECONDITION_FAILED" in info.value.reply_text
    pub.send_method(1, 20, 41, b"")  # channel.close-ok
    pub.send_method(1, 20, 10, shortstr(""))
    pub.expect((20, 11), channel=1)


@pytest.fixture(scope="module")
def poison_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module's tests: each uses its own queues, and a poison that
    stopped the broker fails the test that sent it (its next step or ``assert_alive``);
    a broker start per test was most of the module's time."""
    b = BrokerProcess(tmp_path_factory.mktemp("poison")).start()
    yield b
    b.kill()


def assert_alive(b: BrokerProcess) -> None:
    assert b.proc is not None and b.proc.poll() is None, b.log()
    c = connect(b)
    ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"still here")
    _, _, body = wait_for(lambda: (r := ch.basic_get(q, auto_ack=True))[0] and r, 10,
                          what="a message through the broker")
    assert body == b"still here"
    c.close()


# ---------------------------------------------------------------- bug 8


@pytest.mark.parametrize("variant", sorted(MALFORMED) + sorted(BAD_COUNTS))
def test_poison_expiring_into_a_dead_letter_exchange_does_not_stop_the_broker(
    poison_broker: BrokerProcess, variant: str
) -> None:
    work, dlq = _name("work"), _name("dlq")
    obs = connect(poison_broker)
    ch = obs.channel()
    ch.queue_declare(dlq)
    pub = RawConnection(poison_broker.url).open()
    pub.queue_declare(work, dead_letter_args(dlq, **{"x-message-ttl": 50}))
    if variant in MALFORMED:
        pub.publish("", work, b"poison", MALFORMED[variant]())
        expect_refused(pub, work)
    else:
        pub.publish("", work, b"poison", x_death(work, "expired", *BAD_COUNTS[variant]))
    # the canary expires after the poison: once it is dead-lettered, the timer got past both
    ch.basic_publish("", work, b"canary")
    want = 1 if variant in MALFORMED else 2
    wait_for(lambda: _count(ch, dlq) == want, 15, what="the canary in the dead-letter queue")
    bodies = set()
    for _ in range(want):
        _, p, body = ch.basic_get(dlq, auto_ack=True)
        bodies.add(body)
        if body == b"poison":
            (death,) = [d for d in p.headers["x-death"] if d["reason"] in ("expired", b"expired")]
            assert isinstance(death["count"], int) and death["count"] >= 1
    assert bodies == ({b"canary"} if variant in MALFORMED else {b"canary", b"poison"})
    assert_alive(poison_broker)
    pub.close()
    obs.close()


def test_persistent_poison_in_a_durable_queue_survives_restart(tmp_path: Path) -> None:
    """Recovered with its x-death count of "abc", it expires after the restart and is kept."""
    data = tmp_path / "data"
    b = BrokerProcess(data).start()
    work, dlq = _name("work"), _name("dlq")
    try:
        pub = RawConnection(b.url).open()
        pub.send_method(1, 50, 10, struct.pack(">H", 0) + shortstr(dlq) + b"\x02" + table())
        pub.expect((50, 11), channel=1)
        pub.send_method(1, 50, 10, struct.pack(">H", 0) + shortstr(work) + b"\x02"
                        + dead_letter_args(dlq, **{"x-message-ttl": 3000}))
        pub.expect((50, 11), channel=1)
        pub.confirm_select()
        pub.publish("", work, b"poison", x_death(work, "expired", b"S", "abc", persistent=True))
        pub.expect((60, 80), channel=1)  # confirmed: it is on disk
        pub.close()
    finally:
        b.stop()
    b = BrokerProcess(data).start()
    try:
        c = connect(b)
        ch = c.channel()
        wait_for(lambda: _count(ch, dlq) == 1, 20, what="the poison dead-lettered after restart")
        _, p, body = ch.basic_get(dlq, auto_ack=True)
        assert body == b"poison" and p.headers["x-death"][0]["count"] == 1
        c.close()
        assert_alive(b)
    finally:
        b.stop()


def test_undecodable_message_from_an_older_version_is_dropped_at_start(tmp_path: Path) -> None:
    """Properties no current publish could store: dropped with an error, never fatal."""
    data = tmp_path / "data"
    b = BrokerProcess(data).start()
    work, dlq = _name("work"), _name("dlq")
    try:
        c = connect(b)
        ch = c.channel()
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(work, durable=True, arguments={
            "x-message-ttl": 100, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
        c.close()
    finally:
        b.stop()
    with Store(f"sqlite:///{data.resolve() / 'amqplite.db'}") as store:
        rec = store.load()
        (qid,) = [q.queue_id for q in rec.queues if q.name == work]
        key = rec.max_message_id + 1
        store.start()
        store.submit([PutMessage(key, "", work, non_utf8_key(), b"legacy"),
                      PutEntry(qid, 1, key)])
        store.flush(10)
    b = BrokerProcess(data).start()
    try:
        c = connect(b)
        ch = c.channel()
        ch.basic_publish("", work, b"canary")  # expires after the legacy message would
        wait_for(lambda: _count(ch, dlq) == 1, 20, what="the canary in the dead-letter queue")
        assert ch.basic_get(dlq, auto_ack=True)[2] == b"canary"
        assert _count(ch, work) == 0
        c.close()
        assert_alive(b)
        assert "malformed" in b.log()
    finally:
        b.stop()


# ---------------------------------------------------------------- bug 9


def test_non_utf8_message_id_does_not_fail_other_clients_commits(tmp_path: Path) -> None:
    data = tmp_path / "data"
    b = BrokerProcess(data).start()
    durable, late = _name("durable"), _name("late")
    try:
        bad = RawConnection(b.url).open()
        bad.queue_declare("bad-sink")
        bad_props = props((MESSAGE_ID, shortstr(b"id-\xff")), (DELIVERY_MODE, b"\x02"))
        good = connect(b)
        ch = good.channel()
        ch.queue_declare(durable, durable=True)
        ch.confirm_delivery()  # a nack raises pika.exceptions.NackError
        persistent = pika.BasicProperties(delivery_mode=2)
        for i in range(40):
            for _ in range(20):
                bad.publish("", "bad-sink", b"bad", bad_props)
            ch.basic_publish("", durable, str(i).encode(), persistent)
            if i == 20:
                ch.queue_declare(late, durable=True)
        assert _count(ch, durable) == 40
        assert _count(ch, "bad-sink") == 800  # accepted: only the log shows the id escaped
        good.close()
        bad.close()
    finally:
        b.stop()
    with Store(f"sqlite:///{data.resolve() / 'amqplite.db'}") as store:
        rows = store.read_delivery_log(message_id="id-\\xff", limit=5)
        assert rows and rows[0]["event"] == "published"
        assert late in [q.name for q in store.load().queues]


# ---------------------------------------------------------------- bug 10


@pytest.mark.parametrize("how", ["nack", "reject"])
@pytest.mark.parametrize("count", ["abc", "nan"])
def test_consumer_keeps_its_connection_when_dead_lettering_a_bad_x_death(
    poison_broker: BrokerProcess, how: str, count: str
) -> None:
    """The consumer is a raw client: pika itself cannot read a NaN double in headers."""
    work, dlq = _name("work"), _name("dlq")
    cons = RawConnection(poison_broker.url).open()
    cons.queue_declare(dlq)
    cons.queue_declare(work, dead_letter_args(dlq))
    pub = RawConnection(poison_broker.url).open()
    pub.publish("", work, b"poison", x_death(work, "rejected", *BAD_COUNTS[count]))
    got = wait_for(lambda: cons.get(work, no_ack=False), 10, what="the poison")
    (tag,) = struct.unpack_from(">Q", got.method.args)
    if how == "nack":
        cons.send_method(1, 60, 120, struct.pack(">QB", tag, 0))  # multiple=0, requeue=0
    else:
        cons.send_method(1, 60, 90, struct.pack(">QB", tag, 0))  # requeue=0
    dead = wait_for(lambda: cons.get(dlq), 10, what="the dead letter")
    assert dead.body == b"poison"
    (death,) = decode_properties(dead.properties).headers["x-death"]  # type: ignore[index]
    assert (death["count"], death["reason"], death["queue"]) == (1, "rejected", work)
    assert cons.get(work) is None  # the consumer's connection is still open
    pub.close()
    cons.close()


def test_malformed_headers_are_refused_at_the_door_not_at_the_consumer(
    poison_broker: BrokerProcess,
) -> None:
    work, dlq = _name("work"), _name("dlq")
    cons = connect(poison_broker)
    ch = cons.channel()
    ch.queue_declare(dlq)
    ch.queue_declare(work, arguments={"x-dead-letter-exchange": "",
                                      "x-dead-letter-routing-key": dlq})
    pub = RawConnection(poison_broker.url).open()
    pub.publish("", work, b"poison", non_utf8_key())
    expect_refused(pub, work)
    m, _, _ = ch.basic_get(work)
    if m is not None:  # unfixed: it got in, and settling it closed this connection
        ch.basic_nack(m.delivery_tag, requeue=False)
    assert (_count(ch, work), _count(ch, dlq)) == (0, 0)
    pub.publish("", work, b"fine", props((HEADERS, table([("k", b"S", "v")]))))
    wait_for(lambda: _count(ch, work) == 1, 10, what="the publisher's next message")
    pub.close()
    cons.close()


def test_overflow_dead_lettering_a_bad_x_death_keeps_the_next_publisher(
    poison_broker: BrokerProcess,
) -> None:
    work, dlq = _name("work"), _name("dlq")
    good = connect(poison_broker)
    ch = good.channel()
    ch.queue_declare(dlq)
    ch.queue_declare(work, arguments={"x-max-length": 1, "x-dead-letter-exchange": "",
                                      "x-dead-letter-routing-key": dlq})
    pub = RawConnection(poison_broker.url).open()
    pub.publish("", work, b"poison", x_death(work, "maxlen", *BAD_COUNTS["inf"]))
    wait_for(lambda: _count(ch, work) == 1, 10, what="the poison in the queue")
    ch.basic_publish("", work, b"next")  # drop-head dead-letters the poison
    wait_for(lambda: _count(ch, dlq) == 1, 10, what="the poison in the dead-letter queue")
    assert ch.basic_get(work, auto_ack=True)[2] == b"next"
    assert ch.basic_get(dlq, auto_ack=True)[2] == b"poison"
    pub.close()
    good.close()


# ---------------------------------------------------------------- bug 11


def test_non_utf8_user_id_is_a_channel_precondition_failure(poison_broker: BrokerProcess) -> None:
    pub = RawConnection(poison_broker.url).open()
    pub.queue_declare("uid-sink")
    pub.publish("", "uid-sink", b"who", props((USER_ID, shortstr(b"guest\xff"))))
    with pytest.raises(ServerClosed) as info:
        pub.queue_declare("uid-sink")
    assert (info.value.kind, info.value.reply_code) == ("channel.close", 406)
    assert "user_id property set to 'guest\\xff'" in info.value.reply_text
    pub.send_method(1, 20, 41, b"")
    pub.send_method(1, 20, 10, shortstr(""))
    pub.expect((20, 11), channel=1)
    pub.close()
    assert_alive(poison_broker)
