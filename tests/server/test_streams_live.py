"""Streams on a real broker process: restart, kill -9, retention, admin figures, the log."""

from __future__ import annotations

import contextlib
import datetime
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
from pika.adapters.blocking_connection import BlockingChannel

from tests.brokerproc import BrokerProcess
from tests.server.conftest import connect

STREAM = {"x-queue-type": "stream"}


def read(c: pika.BlockingConnection, queue: str, offset: Any, n: int,
         timeout: float = 20.0) -> list[tuple[int, bytes]]:
    """Attach at ``offset`` on a channel of its own and collect exactly ``n`` (offset,
    body) pairs: the prefetch window is ``n`` and nothing is acked, so nothing more
    is in flight when the channel closes (pika would reject it; a stream refuses)."""
    got: list[tuple[int, bytes]] = []
    ch = c.channel()
    ch.basic_qos(prefetch_count=n)
    ch.basic_consume(queue, lambda _c, _m, p, body: got.append((p.headers["x-stream-offset"],
                                                                 body)),
                     arguments={"x-stream-offset": offset})
    deadline = time.monotonic() + timeout
    while len(got) < n:
        assert time.monotonic() < deadline, f"got {len(got)} of {n}"
        c.process_data_events(time_limit=0.05)
    ch.close()
    return got


def publish(ch: BlockingChannel, queue: str, bodies: list[bytes]) -> None:
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish("", queue, body)


@contextlib.contextmanager
def stream_broker(tmp_path: Path, name: str, bodies: list[bytes], **args: Any,
                  ) -> Iterator[tuple[BrokerProcess, pika.BlockingConnection]]:
    """A broker process with stream ``name`` holding ``bodies``; stopped after."""
    b = BrokerProcess(tmp_path / "d").start()
    try:
        c = connect(b)
        ch = c.channel()
        ch.queue_declare(name, durable=True, arguments={**STREAM, **args})
        publish(ch, name, bodies)
        yield b, c
        if c.is_open:
            c.close()
    finally:
        b.stop()


def admin_queue(b: BrokerProcess, name: str) -> dict[str, Any]:
    r = httpx.get(f"{b.admin_url}/api/queues/%2F/{name}", auth=("guest", "guest"), timeout=10)
    r.raise_for_status()
    return dict(r.json())


def test_restart_and_kill_keep_every_confirmed_entry_at_its_offset(tmp_path: Path) -> None:
    bodies = [b"r%04d" % i for i in range(300)]
    with stream_broker(tmp_path, "log", bodies) as (b, c):
        c.close()
        assert b.stop() == 0
        b.start()
        c = connect(b)
        ch = c.channel()
        assert read(c, "log", "first", 300) == list(enumerate(bodies))
        more = [b"k%04d" % i for i in range(300)]
        publish(ch, "log", more)  # confirmed: committed before the crash
        ch2 = c.channel()
        for i in range(500):  # unconfirmed, in flight when the broker dies
            ch2.basic_publish("", "log", b"u%04d" % i)
        b.kill()
        b.start()
        c = connect(b)
        ch = c.channel()
        # unconfirmed ones may have landed too: after the confirmed, in order
        info = admin_queue(b, "log")["stream"]
        landed = info["last_offset"] + 1 - 600
        got = read(c, "log", "first", 600 + landed)
        assert got == list(enumerate(bodies + more + [b"u%04d" % i for i in range(landed)]))
        # new appends continue after whatever survived, never reusing an offset
        publish(ch, "log", [b"after"])
        (last,) = read(c, "log", "last", 1)
        assert last == (info["last_offset"] + 1, b"after")
        c.close()


def test_retention_with_small_segments(tmp_path: Path) -> None:
    with stream_broker(tmp_path, "ret", [b"%0100d" % i for i in range(200)],
                       **{"x-stream-max-segment-size-bytes": 2000,
                          "x-max-length-bytes": 6000}) as (b, c):
        info = admin_queue(b, "ret")
        s = info["stream"]
        assert info["type"] == "stream"
        assert s["first_offset"] > 0 and s["last_offset"] == 199
        assert s["size_bytes"] <= 6000 + 2000 and 3 <= s["segments"] <= 5
        got = read(c, "ret", "first", 200 - s["first_offset"])
        assert got[0] == (s["first_offset"], b"%0100d" % s["first_offset"])
        assert [o for o, _ in got] == list(range(s["first_offset"], 200))


def test_offsets_and_independent_consumers_and_the_log(tmp_path: Path) -> None:
    bodies = [b"v%d" % i for i in range(50)]
    with stream_broker(tmp_path, "ev", bodies) as (_, c):
        past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
        assert read(c, "ev", "first", 50) == list(enumerate(bodies))
        assert read(c, "ev", 45, 5) == list(enumerate(bodies))[45:]
        assert read(c, "ev", "last", 1) == [(49, b"v49")]
        assert read(c, "ev", past, 50) == list(enumerate(bodies))
        waiting = c.channel()
        got: list[bytes] = []
        waiting.basic_qos(prefetch_count=10)
        waiting.basic_consume("ev", lambda c_, m, p, body: (got.append(body),
                                                           c_.basic_ack(m.delivery_tag)))
        publish(c.channel(), "ev", [b"fresh"])
        deadline = time.monotonic() + 20
        while not got:
            assert time.monotonic() < deadline
            c.process_data_events(time_limit=0.05)
        assert got == [b"fresh"]
    db = sqlite3.connect(tmp_path / "d" / "amqplite.db")
    events = dict(db.execute(
        "SELECT event, count(*) FROM delivery_log WHERE queue = 'ev' OR "
        "(event = 'published' AND routing_key = 'ev') GROUP BY event").fetchall())
    db.close()
    assert events["published"] == 51 and events["appended"] == 51 and "routed" not in events
    assert "acked" not in events and "delivered" not in events, "stream reads settle nothing"
    assert events["attached"] == 5


def test_reading_a_large_stream_keeps_memory_bounded(tmp_path: Path) -> None:
    """60 MB of log read from first by two consumers: RSS grows by far less than it,
    since each cursor reads ahead a bounded batch and nothing else of the log is in RAM."""
    n, size = 15_000, 4096
    with stream_broker(tmp_path, "big", []) as (b, c):
        ch = c.channel()
        body = b"x" * size
        for _ in range(n):  # unconfirmed: the admin figures say when all are in
            ch.basic_publish("", "big", body)
        deadline = time.monotonic() + 60
        while admin_queue(b, "big")["stream"]["last_offset"] < n - 1:
            assert time.monotonic() < deadline
            c.process_data_events(time_limit=0.1)
        base = peak = b.rss_bytes()
        counts = [0, 0]
        for i in range(2):
            rch = c.channel()
            rch.basic_qos(prefetch_count=100)

            def on(ch_: BlockingChannel, m: Any, _p: Any, _b: bytes, i: int = i) -> None:
                counts[i] += 1
                ch_.basic_ack(m.delivery_tag)

            rch.basic_consume("big", on, arguments={"x-stream-offset": "first"})
        deadline = time.monotonic() + 120
        while min(counts) < n:
            assert time.monotonic() < deadline, counts
            c.process_data_events(time_limit=0.1)
            peak = max(peak, b.rss_bytes())
        assert peak - base < 25 * 1024 * 1024, (base, peak)


def test_consumer_group_one_active_member_takes_over_on_disconnect(tmp_path: Path) -> None:
    """amqplite's consumer groups: one member of x-stream-consumer-group reads; when its
    connection drops the next (registration order) resumes at its first unacked entry."""
    bodies = [b"g%02d" % i for i in range(20)]
    with stream_broker(tmp_path, "grp", bodies) as (b, _c):
        got: dict[str, list[int]] = {"a": [], "b": []}
        conns = {"a": connect(b), "b": connect(b)}
        chans: dict[str, BlockingChannel] = {}
        for name, conn in conns.items():
            ch = conn.channel()
            ch.basic_qos(prefetch_count=5)

            def on(ch_: BlockingChannel, m: Any, p: Any, _b: bytes, name: str = name) -> None:
                got[name].append(p.headers["x-stream-offset"])
                if name == "b" or p.headers["x-stream-offset"] < 7:
                    ch_.basic_ack(m.delivery_tag)  # "a" leaves 7.. unacked

            ch.basic_consume("grp", on, arguments={"x-stream-offset": "first",
                                                   "x-stream-consumer-group": "billing"})
            chans[name] = ch

        def pump(until: Any) -> None:
            deadline = time.monotonic() + 20
            while not until():
                assert time.monotonic() < deadline, got
                for conn in conns.values():
                    if conn.is_open:
                        conn.process_data_events(time_limit=0.02)

        pump(lambda: len(got["a"]) >= 12)  # 0..6 acked, 7..11 fill its window
        assert got["a"] == list(range(12)) and got["b"] == []
        groups = admin_queue(b, "grp")["stream"]["consumer_groups"]
        assert [(g["name"], g["members"]) for g in groups] == [("billing", 2)]
        conns["a"].close()
        pump(lambda: len(got["b"]) >= 13)
        assert got["b"] == list(range(7, 20))
        conns["b"].close()


def test_reading_a_gigabyte_stream_from_first_keeps_rss_bounded(tmp_path: Path) -> None:
    """256 KiB entries (AMQPLITE_STREAM_BIG_MB MiB of them; 256 by default to keep CI
    short, 1024 = 1 GiB took 20 s here with a peak 41 MiB above idle) read from first
    by one consumer while the broker's RSS is sampled: it stays within 300 MiB of its
    idle figure, whatever the log's size."""
    total_mb = int(os.environ.get("AMQPLITE_STREAM_BIG_MB", "256"))
    size = 256 * 1024
    n = total_mb * 1024 * 1024 // size
    with stream_broker(tmp_path, "huge", []) as (b, c):
        idle = b.rss_bytes()
        ch = c.channel()
        ch.confirm_delivery()
        body = os.urandom(size)  # incompressible, as real payloads often are
        started = time.monotonic()
        for _ in range(n):
            ch.basic_publish("", "huge", body)
        published = time.monotonic()
        rch = c.channel()
        rch.basic_qos(prefetch_count=50)
        count = [0]
        offsets_ok = [True]

        def on(ch_: BlockingChannel, m: Any, p: Any, b_: bytes) -> None:
            offsets_ok[0] &= p.headers["x-stream-offset"] == count[0] and len(b_) == size
            count[0] += 1
            ch_.basic_ack(m.delivery_tag)

        rch.basic_consume("huge", on, arguments={"x-stream-offset": "first"})
        peak = b.rss_bytes()
        deadline = time.monotonic() + 600
        while count[0] < n:
            assert time.monotonic() < deadline, count
            c.process_data_events(time_limit=0.05)
            peak = max(peak, b.rss_bytes())
        done = time.monotonic()
        assert offsets_ok[0]
        print(f"\n{total_mb} MiB: publish {published - started:.1f}s, read {done - published:.1f}s, "
              f"RSS idle {idle / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB")
        assert peak - idle < 300 * 1024 * 1024, (idle, peak)


def test_super_stream_with_hash_routing_survives_kill(tmp_path: Path) -> None:
    """kill -9 after confirmed publishes through a hash-routed super stream: after the
    restart every confirmed entry is in its partition at the same offset, and the
    exchange still routes each key to the same partition (its arguments came back)."""
    from amqplite.broker.superstream import hash_partition

    b = BrokerProcess(tmp_path / "d").start()
    try:
        r = httpx.put(f"{b.admin_url}/api/super-streams/%2F/orders", auth=("guest", "guest"),
                      json={"partitions": 3, "routing": "hash"}, timeout=10)
        assert r.status_code == 201, r.text
        c = connect(b)
        ch = c.channel()
        ch.confirm_delivery()
        keys = [f"customer-{i}" for i in range(30)]
        for seq in range(5):
            for k in keys:
                ch.basic_publish("orders", k, f"{k}/{seq}".encode())
        before = {p: read(c, f"orders-{p}", "first",
                          sum(5 for k in keys if hash_partition(k, 3) == p)) for p in range(3)}
        b.kill()
        b.start()
        c = connect(b)
        ch = c.channel()
        ch.confirm_delivery()
        for k in keys:
            ch.basic_publish("orders", k, f"{k}/after".encode())
        for p in range(3):
            mine = [k for k in keys if hash_partition(k, 3) == p]
            got = read(c, f"orders-{p}", "first", len(before[p]) + len(mine))
            assert got[:len(before[p])] == before[p]
            assert [body for _, body in got[len(before[p]):]] == [
                f"{k}/after".encode() for k in mine]
        c.close()
    finally:
        b.stop()


def test_retention_goes_on_after_a_restart(tmp_path: Path) -> None:
    """Segments come back from the store; new appends keep rolling them over and the
    oldest keep going, offsets continuing where they were."""
    with stream_broker(tmp_path, "ret2", [b"%0100d" % i for i in range(100)],
                       **{"x-stream-max-segment-size-bytes": 2000,
                          "x-max-length-bytes": 6000}) as (b, c):
        first_before = admin_queue(b, "ret2")["stream"]["first_offset"]
        c.close()
        b.kill()
        b.start()
        c = connect(b)
        publish(c.channel(), "ret2", [b"%0100d" % i for i in range(100, 200)])
        s = admin_queue(b, "ret2")["stream"]
        assert s["last_offset"] == 199 and s["first_offset"] > first_before
        assert s["size_bytes"] <= 6000 + 2000
        got = read(c, "ret2", "first", 200 - s["first_offset"])
        assert got == [(i, b"%0100d" % i) for i in range(s["first_offset"], 200)]
        c.close()
