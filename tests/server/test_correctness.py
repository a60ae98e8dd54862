"""Regression tests for confirmed bugs that lost, duplicated or wrongly confirmed messages.

Each drives the real broker process; the numbers refer to the correctness issue.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import psutil
import pytest

from conformance._raw import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_METHOD,
    Method,
    RawConnection,
    parse_ack,
    shortstr,
    table,
)
from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect, mounted_tmpfs

PERSISTENT = struct.pack(">HB", 1 << 12, 2)  # properties: delivery-mode 2 only


@pytest.fixture
def small_window(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker that pages bodies out beyond 50 messages per queue."""
    b = BrokerProcess(tmp_path / "d", env={"AMQPLITE_BODY_WINDOW": "50"}).start()
    yield b
    b.kill()


def drain(ch: pika.adapters.blocking_connection.BlockingChannel, conn: pika.BlockingConnection,
          queue: str, n: int, timeout: float = 30) -> list[bytes]:
    """Consume ``n`` messages (acking them), failing if they do not all arrive in time."""
    got: list[bytes] = []

    def on(c, m, _p, body) -> None:  # type: ignore[no-untyped-def]
        got.append(body)
        c.basic_ack(m.delivery_tag)

    ch.basic_qos(prefetch_count=100)
    tag = ch.basic_consume(queue, on)
    wait_for(lambda: conn.process_data_events(time_limit=0.05) or len(got) >= n, timeout,
             what=f"{n} messages from {queue} (got {len(got)})")
    ch.basic_cancel(tag)
    return got


def test_1_body_shared_with_a_non_durable_queue_survives_paging(
        small_window: BrokerProcess) -> None:
    c = connect(small_window)
    ch = c.channel()
    ch.exchange_declare("fan", "fanout")
    ch.queue_declare("archive", durable=True)
    ch.queue_declare("live", exclusive=True)
    ch.queue_bind("archive", "fan")
    ch.queue_bind("live", "fan")
    ch.confirm_delivery()
    for i in range(150):
        ch.basic_publish("fan", "", b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    # purged without being paged in: the shared rows go, the live copies stay
    assert ch.queue_purge("archive").method.message_count == 150
    # a confirmed persistent publish: groups commit in order, so the purge has too
    ch.basic_publish("", "archive", b"sync", pika.BasicProperties(delivery_mode=2))
    assert drain(ch, c, "live", 150) == [b"m%d" % i for i in range(150)]
    m = ch.basic_get("live", auto_ack=True)[0]
    assert m is None
    c.close()


def test_2_dead_lettering_paged_out_messages_into_a_non_durable_queue(
        small_window: BrokerProcess) -> None:
    c = connect(small_window)
    ch = c.channel()
    ch.queue_declare("dlq")  # not durable: the copies are not stored
    ch.queue_declare("src", durable=True, arguments={
        "x-message-ttl": 300, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    ch.confirm_delivery()
    for i in range(150):
        ch.basic_publish("", "src", b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    wait_for(lambda: ch.queue_declare("dlq", passive=True).method.message_count == 150, 30,
             what="150 dead-lettered messages")
    assert sorted(drain(ch, c, "dlq", 150)) == sorted(b"m%d" % i for i in range(150))
    c.close()


def _read_until(raw: RawConnection, ids: tuple[int, int], channel: int) -> list[Method]:
    """Every method read up to and including the first ``ids`` on ``channel``."""
    seen: list[Method] = []
    while True:
        kind, ch, payload = raw.read_frame(30)
        if kind != FRAME_METHOD:
            continue
        m = Method(ch, *struct.unpack_from(">HH", payload), payload[4:])
        seen.append(m)
        if m.ids == ids and m.channel == channel:
            return seen


def test_3_reused_channel_number_gets_only_its_own_confirms(broker: BrokerProcess) -> None:
    raw = RawConnection(broker.url).open()
    raw.queue_declare("c3", arguments=table({}))
    raw.send_method(1, 50, 10, struct.pack(">H", 0) + shortstr("c3d") + b"\x02" + table())
    raw.expect((50, 11), channel=1)
    raw.confirm_select()
    for _ in range(200):
        raw.publish("", "c3d", b"x" * 65536, properties=PERSISTENT)
    raw.send_method(1, 20, 40, struct.pack(">H", 200) + shortstr("bye") + struct.pack(">HH", 0, 0))
    _read_until(raw, (20, 41), 1)  # the old channel's confirms may come before close-ok
    raw.send_method(1, 20, 10, shortstr(""))
    raw.expect((20, 11), channel=1)
    raw.confirm_select()
    raw.publish("", "c3d", b"new", properties=PERSISTENT)
    first = raw.expect((60, 80), channel=1)
    assert parse_ack(first) == (1, False), "a confirm of the old channel reached the new one"
    raw.close()


def test_13_tx_commit_ok_follows_the_returns(broker: BrokerProcess) -> None:
    raw = RawConnection(broker.url).open()
    raw.send_method(1, 90, 10, b"")
    raw.expect((90, 11), channel=1)
    raw.publish("", "no-such-queue-13", b"r", mandatory=True)
    raw.send_method(1, 90, 20, b"")
    order = [m.ids for m in _read_until(raw, (90, 21), 1)]
    assert order == [(60, 50), (90, 21)]
    raw.close()


def test_5_bindings_of_a_durable_exclusive_queue_do_not_come_back(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "d").start()
    try:
        c = connect(b)
        ch = c.channel()
        ch.queue_declare("exq", durable=True, exclusive=True)
        ch.queue_bind("exq", "amq.direct", "k5")
        c.close()
        assert b.stop() == 0
        b.start()
        c = connect(b)
        ch = c.channel()
        ch.queue_declare("exq")  # a namesake, never bound
        ch.basic_publish("amq.direct", "k5", b"stray")
        ch.queue_declare("probe")  # a round trip: the publish has been routed
        assert ch.queue_declare("exq", passive=True).method.message_count == 0
        c.close()
    finally:
        b.kill()


def _rss(b: BrokerProcess) -> int:
    assert b.proc is not None
    return int(psutil.Process(b.proc.pid).memory_info().rss)


def test_12_a_publisher_that_never_reads_cannot_grow_broker_memory(
        broker: BrokerProcess) -> None:
    raw = RawConnection(broker.url).open()
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    before = _rss(broker)
    body = b"r" * 131072
    one = (raw.frame(FRAME_METHOD, 1, struct.pack(">HHH", 60, 40, 0) + shortstr("")
                     + shortstr("nowhere-12") + b"\x01")
           + raw.frame(FRAME_HEADER, 1, struct.pack(">HHQ", 60, 0, len(body)) + b"\x00\x00")
           + raw.frame(FRAME_BODY, 1, body))
    burst = one * 16  # 2 MiB of mandatory, unroutable publishes
    sent = 0
    raw.sock.settimeout(2.0)
    with contextlib.suppress(TimeoutError):
        while sent < 400 * 2**20:
            raw.sock.sendall(burst)
            sent += len(burst)
    # the broker stopped reading once the returns it owes pile up
    assert sent < 100 * 2**20, f"the broker kept reading: {sent >> 20} MiB accepted"
    assert _rss(broker) - before < 80 * 2**20
    # and everybody else is served meanwhile
    c = connect(broker)
    ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"ok")
    wait_for(lambda: ch.basic_get(q, auto_ack=True)[2] == b"ok", 10, what="another client")
    c.close()
    raw.sock.close()


# ----------------------------------------------------------------- disk full

@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 32 MiB tmpfs: a real filesystem that fills up (needs root)."""
    with mounted_tmpfs(tmp_path / "disk", "32m") as mnt:
        yield mnt


def fill(path: Path) -> None:
    """Write zeros until the filesystem is full. Unbuffered: a buffered file keeps
    the part of a chunk that did not fit and fails again when it is closed."""
    with open(path, "wb", buffering=0) as f:
        chunk = b"\0" * 65536
        with contextlib.suppress(OSError):
            while True:
                f.write(chunk)
        with contextlib.suppress(OSError):
            os.fsync(f.fileno())


def _already_sent(raw: RawConnection, quiet: float = 0.3) -> list[Method]:
    """The method frames that arrive until ``quiet`` seconds pass without one."""
    seen: list[Method] = []
    while True:
        try:
            kind, ch, payload = raw.read_frame(quiet)
        except TimeoutError:
            return seen
        if kind == FRAME_METHOD:
            seen.append(Method(ch, *struct.unpack_from(">HH", payload), payload[4:]))


def nothing_within(raw: RawConnection, seconds: float) -> bool:
    """True when no method frame arrives for ``seconds`` (a negative check)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            kind, _, _ = raw.read_frame(max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            return True
        if kind == FRAME_METHOD:
            return False
    return True


def test_4_disk_full_confirms_and_declares_wait_and_nothing_is_lost(
        tmp_path: Path, tiny_disk: Path) -> None:
    b = BrokerProcess(tiny_disk / "d", None, "--disk-free-limit", "0")  # the commit path
    b.log_path = tmp_path / "broker.log"
    b.start()
    try:
        pub = RawConnection(b.url).open()
        pub.send_method(1, 50, 10, struct.pack(">H", 0) + shortstr("q4") + b"\x02" + table())
        pub.expect((50, 11), channel=1)
        pub.confirm_select()
        fill(tiny_disk / "filler")
        for _ in range(60):
            pub.publish("", "q4", b"p" * 50_000, properties=PERSISTENT)
        wait_for(lambda: "retrying until it succeeds" in b.log(), 30, what="a failing commit")
        admin = RawConnection(b.url).open()
        admin.send_method(1, 50, 10, struct.pack(">H", 0) + shortstr("q4-late") + b"\x02"
                          + table())
        # commits that fit before the disk ran out (a checkpointed WAL is reused
        # from its start, no new space needed) were confirmed already: acks only
        early = _already_sent(pub)
        assert all(m.ids == (60, 80) for m in early), "a publish was nacked"
        # then neither a confirm (ack or nack) nor declare-ok while nothing can be written
        assert nothing_within(pub, 1.0), "a publish was confirmed or nacked on a full disk"
        assert nothing_within(admin, 0.5), "declare-ok before the queue was written"
        (tiny_disk / "filler").unlink()
        admin.expect((50, 11), channel=1)
        acks = [*early, *_read_until(pub, (60, 80), 1)]
        while parse_ack(acks[-1])[0] < 60:
            acks += _read_until(pub, (60, 80), 1)
        assert all(m.ids == (60, 80) for m in acks if m.channel == 1), "a publish was nacked"
        b.kill()
        b.start()
        c = connect(b)
        ch = c.channel()
        assert ch.queue_declare("q4", passive=True).method.message_count == 60
        assert ch.queue_declare("q4-late", passive=True).method.message_count == 0
        c.close()
    finally:
        b.kill()


def test_4_other_connections_keep_consuming_while_the_disk_is_full(
        tmp_path: Path, tiny_disk: Path) -> None:
    b = BrokerProcess(tiny_disk / "d", None, "--disk-free-limit", "0")  # the commit path
    b.log_path = tmp_path / "broker.log"
    b.start()
    try:
        c = connect(b)
        ch = c.channel()
        ch.queue_declare("work4", durable=True)
        ch.confirm_delivery()
        for i in range(20):
            ch.basic_publish("", "work4", b"w%d" % i, pika.BasicProperties(delivery_mode=2))
        fill(tiny_disk / "filler")
        stop = threading.Event()

        def publish_more() -> None:
            p = RawConnection(b.url).open()
            p.confirm_select()
            while not stop.is_set():
                with contextlib.suppress(OSError):
                    p.publish("", "work4", b"z" * 50_000, properties=PERSISTENT)
                    time.sleep(0.01)  # a steady publisher, not synchronisation
            p.sock.close()

        t = threading.Thread(target=publish_more, daemon=True)
        t.start()
        wait_for(lambda: "retrying until it succeeds" in b.log(), 30, what="a failing commit")
        got = drain(ch, c, "work4", 20, timeout=20)
        assert got[:20] == [b"w%d" % i for i in range(20)]
        stop.set()
        t.join(10)
        (tiny_disk / "filler").unlink()
        c.close()
    finally:
        b.kill()
