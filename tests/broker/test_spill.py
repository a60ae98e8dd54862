"""Spilling: deep queues keep a bounded head in RAM, the rest only in a real SQLite store.

The pure broker runs with plain calls; the test plays the shell: it hands
each Outcome's ops to a real Store, tells the broker what committed, and
answers LoadEntries with ``Store.fetch_entries``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amqplite import storeops as ops
from amqplite.broker.core import Broker
from amqplite.broker.effects import Deliver, LoadEntries, PageIn, ReadStream, StreamDeliver
from amqplite.broker.model import Message
from amqplite.protocol import streamrecord
from amqplite.server.recovery import restore
from amqplite.store.engine import Store
from tests.broker.conftest import PERSISTENT, TRANSIENT, FakeClock, session_channel

WINDOW = 50


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    st = _store(tmp_path / "spill.db")
    yield st
    st.close()


def _store(path: Path) -> Store:
    st = Store(f"sqlite:///{path}")
    st.create()
    st.start()
    return st


def _reopen(path: Path, b_window: int = WINDOW) -> tuple[Store, Broker]:
    """A restart: the store loaded afresh and a new broker restored from it."""
    st = Store(f"sqlite:///{path}")
    st.create()
    rec = st.load(b_window)
    b = Broker(now=FakeClock(), body_window=b_window)
    restore(b, rec, fetch=st.fetch_entries)
    return st, b


class Shell:
    """The server's part, done by hand: commit, report commits, serve loads and
    stream reads (tests/broker/test_streams.py uses it too)."""

    def __init__(self, b: Broker, store: Store) -> None:
        self.b = b
        self.store = store
        self.delivered: list[bytes] = []
        self.deliveries: list[Deliver] = []
        self.reads = 0
        #: entries in the chunks stream reads brought back
        self.read_entries = 0
        self.loads = 0
        self.ops: list[Any] = []
        #: PageIn requests, left for the test to answer (tests/broker/test_page_in.py)
        self.page_ins: list[PageIn] = []
        #: delivery-log rows
        self.log: list[tuple[Any, ...]] = []

    def settle(self) -> None:
        while True:
            out = self.b.take_outcome()
            if not out:
                return
            self.ops.extend(out.store_ops)
            self.log.extend(out.log)
            self.store.submit(out.store_ops)
            self.store.flush()
            self.b.commit_done(out.evictable)
            for e in out.effects:
                if isinstance(e, Deliver):
                    assert e.message.body is not None
                    self.delivered.append(e.message.body)
                    self.deliveries.append(e)
                elif isinstance(e, LoadEntries):
                    self.loads += 1
                    rows = self.store.fetch_entries(e.queue.id, e.lo, e.hi, e.limit)
                    self.b.entries_loaded(e.queue, rows, e.limit, e.hi)
                elif isinstance(e, StreamDeliver):  # as the frames carry them
                    for i, se in enumerate(e.entries):
                        _ts, key, ex, rk, props, body = streamrecord.decode(se.data, se.at)
                        self.delivered.append(body)
                        self.deliveries.append(Deliver(e.channel, e.consumer_tag,
                                                       e.first_tag + i, False,
                                                       Message(key, ex, rk, props, body)))
                elif isinstance(e, PageIn):
                    self.page_ins.append(e)
                elif isinstance(e, ReadStream):
                    self.reads += 1
                    chunks = self.store.fetch_stream(e.queue.id, e.lo, e.limit)
                    self.read_entries += sum(count for _, count, _ in chunks)
                    self.b.stream_loaded(e.queue, e.cursor, chunks, e.hi, e.limit)


def _fill(b: Broker, shell: Shell, queue: str, n: int, props: bytes, **declare: Any) -> Any:
    _, ch = session_channel(b)
    b.queue_declare(ch, queue, **declare)
    for i in range(n):
        b.basic_publish(ch, "", queue, props, b"m%05d" % i)
        if i % 100 == 99:
            shell.settle()
    shell.settle()
    return ch


def test_deep_durable_queue_keeps_a_bounded_head_and_drains_in_order(store: Store) -> None:
    b = Broker(now=FakeClock(), body_window=WINDOW)
    shell = Shell(b, store)
    ch = _fill(b, shell, "deep", 3000, PERSISTENT, durable=True)
    q = b.vhost("/").queues["deep"]
    assert q.message_count == 3000
    assert q.ready.disk_count > 2500, "committed entries behind the head spill"
    assert q.ready.ram_count <= WINDOW + 100
    assert q.ready.bytes == 3000 * 6
    b.basic_consume(ch, "deep", "c", no_ack=True)
    b.start_consumer(ch, "c")
    shell.settle()
    assert shell.delivered == [b"m%05d" % i for i in range(3000)]
    assert shell.loads >= 3000 // 1000
    assert q.message_count == 0 and q.ready.disk_count == 0 and q.ready.bytes == 0


def test_transient_messages_spill_only_under_memory_pressure(store: Store) -> None:
    b = Broker(now=FakeClock(), body_window=WINDOW)
    shell = Shell(b, store)
    _fill(b, shell, "t", 500, TRANSIENT)
    q = b.vhost("/").queues["t"]
    written = [op for op in shell.ops if type(op) is not tuple]  # tuples: delivery-log rows
    assert q.ready.disk_count == 0 and not written, "no pressure: transient stays in RAM"
    b.set_memory_pressure(True)
    shell.settle()
    ch = _fill(b, shell, "t", 0, TRANSIENT)
    for i in range(500, 2500):
        b.basic_publish(ch, "", "t", TRANSIENT, b"m%05d" % i)
    shell.settle()
    assert q.ready.disk_count > 2000
    assert ops.PutMeta(ops.TRANSIENT_KEY, "1") in shell.ops
    b.basic_consume(ch, "t", "c", no_ack=True)
    b.start_consumer(ch, "c")
    shell.settle()
    assert shell.delivered == [b"m%05d" % i for i in range(2500)]


def test_purge_of_a_spilled_queue_deletes_its_rows(store: Store) -> None:
    b = Broker(now=FakeClock(), body_window=WINDOW)
    shell = Shell(b, store)
    ch = _fill(b, shell, "p", 1000, PERSISTENT, durable=True)
    q = b.vhost("/").queues["p"]
    assert q.ready.disk_count
    assert b.queue_purge(ch, "p") == 1000
    shell.settle()
    assert store.fetch_entries(q.id, 0, 10**9, 10) == []
    assert q.message_count == 0 and q.ready.bytes == 0


def test_restart_keeps_the_spilled_run_on_disk_and_drops_transient_rows(
        tmp_path: Path) -> None:
    st = _store(tmp_path / "r.db")
    b = Broker(now=FakeClock(), body_window=WINDOW)
    shell = Shell(b, st)
    b.set_memory_pressure(True)
    ch = _fill(b, shell, "d", 0, PERSISTENT, durable=True)
    for i in range(1200):  # persistent and transient, interleaved, in one durable queue
        b.basic_publish(ch, "", "d", PERSISTENT if i % 2 else TRANSIENT, b"m%05d" % i)
    shell.settle()
    q = b.vhost("/").queues["d"]
    assert q.ready.disk_count > 1000
    st.close(clean=True)

    st2, b2 = _reopen(tmp_path / "r.db")
    st2.start()
    try:
        q2 = b2.vhost("/").queues["d"]
        assert q2.message_count == 600, "transient rows do not outlive the broker"
        assert q2.ready.disk_count == 600 - WINDOW
        shell2 = Shell(b2, st2)
        _, ch2 = session_channel(b2)
        b2.basic_consume(ch2, "d", "c", no_ack=True)
        b2.start_consumer(ch2, "c")
        shell2.settle()
        assert shell2.delivered == [b"m%05d" % i for i in range(1, 1200, 2)]
    finally:
        st2.close()


def test_queue_that_cannot_spill_is_read_in_full_at_restart(tmp_path: Path) -> None:
    st = _store(tmp_path / "l.db")
    b = Broker(now=FakeClock(), body_window=WINDOW)
    shell = Shell(b, st)
    _fill(b, shell, "lim", 300, PERSISTENT, durable=True, arguments={"x-max-length": 1000})
    assert b.vhost("/").queues["lim"].ready.disk_count == 0, "length-limited queues stay in RAM"
    st.close(clean=True)
    st2, b2 = _reopen(tmp_path / "l.db")
    st2.close()
    q2 = b2.vhost("/").queues["lim"]
    assert q2.message_count == 300 and q2.ready.disk_count == 0
    assert [e.message.body for e in q2.ready][:2] == [b"m00000", b"m00001"]
    assert q2.ready.bytes == 300 * 6


class HoldingShell(Shell):
    """A shell whose store reads stay in flight until the test answers them."""

    def __init__(self, b: Broker, store: Store) -> None:
        super().__init__(b, store)
        self.held: list[LoadEntries] = []

    def settle(self) -> None:
        while True:
            out = self.b.take_outcome()
            if not out:
                return
            self.store.submit(out.store_ops)
            self.store.flush()
            self.b.commit_done(out.evictable)
            for e in out.effects:
                if isinstance(e, Deliver):
                    self.deliveries.append(e)
                    self.delivered.append(e.message.body or b"")
                elif isinstance(e, LoadEntries):
                    self.held.append(e)

    def answer(self) -> None:
        e = self.held.pop(0)
        rows = self.store.fetch_entries(e.queue.id, e.lo, e.hi, e.limit)
        self.b.entries_loaded(e.queue, rows, e.limit, e.hi)
        self.settle()


def _ack_all(b: Broker, ch: Any, shell: Shell) -> None:
    b.basic_ack(ch, shell.deliveries[-1].delivery_tag, multiple=True)
    shell.settle()


def test_deliveries_go_on_while_the_next_spilled_batch_is_read(store: Store) -> None:
    """The read-ahead overlaps the deliveries: a consumer acking keeps getting the
    entries already in RAM while the store read is in flight (it used to stall
    the whole queue until the read came back)."""
    b = Broker(now=FakeClock(), body_window=WINDOW)
    shell = HoldingShell(b, store)
    ch = _fill(b, shell, "d", 3000, PERSISTENT, durable=True)
    q = b.vhost("/").queues["d"]
    assert q.ready.disk_count > 2500 and not shell.held
    b.basic_qos(ch, 0, 10, False)
    b.basic_consume(ch, "d", "c", no_ack=False)
    b.start_consumer(ch, "c")
    shell.settle()
    assert len(shell.delivered) == 10
    assert len(shell.held) == 1, "the head is short of one read: the next one is asked for"
    head = q.ready.head_count
    assert head == WINDOW - 10
    while q.ready.head_count:
        _ack_all(b, ch, shell)
    assert len(shell.delivered) == WINDOW, "the whole head went out, read still in flight"
    assert len(shell.held) == 1, "one read at a time"
    for _ in range(10_000):
        if len(shell.delivered) == 3000:
            break
        if shell.held:
            shell.answer()
        _ack_all(b, ch, shell)
    assert shell.delivered == [b"m%05d" % i for i in range(3000)]


def test_entries_spilled_while_a_read_is_in_flight_are_not_lost(store: Store) -> None:
    """A read asks for lo..hi; entries spilled meanwhile lie beyond hi. A short answer
    means "nothing more up to hi", not "nothing more on disk"."""
    b = Broker(now=FakeClock(), body_window=WINDOW)
    shell = HoldingShell(b, store)
    ch = _fill(b, shell, "d", 1500, PERSISTENT, durable=True)
    q = b.vhost("/").queues["d"]
    b.basic_consume(ch, "d", "c", no_ack=True)
    b.start_consumer(ch, "c")
    shell.settle()
    assert len(shell.held) == 1
    first = shell.held[0]
    assert first.hi == q.ready.disk_hi
    for i in range(1500, 2500):  # more arrive, commit and spill behind the read
        b.basic_publish(ch, "", "d", PERSISTENT, b"m%05d" % i)
    shell.settle()
    assert q.ready.disk_hi > first.hi, "new entries spilled while the read was out"
    while shell.held:
        shell.answer()
    assert shell.delivered == [b"m%05d" % i for i in range(2500)]
    assert q.message_count == 0 and q.ready.disk_count == 0 and q.ready.bytes == 0


def test_reads_of_large_spilled_messages_stay_about_a_mebibyte(store: Store) -> None:
    """The read-back batch is sized by bytes: 64 KiB bodies come back 16 at a time,
    so a draining queue of large messages holds about two reads in RAM."""
    b = Broker(now=FakeClock(), body_window=WINDOW)
    shell = HoldingShell(b, store)
    _, ch = session_channel(b)
    b.queue_declare(ch, "big", durable=True)
    body = b"x" * 65536
    for i in range(300):
        b.basic_publish(ch, "", "big", PERSISTENT, body[:-5] + b"%05d" % i)
        if i % 50 == 49:
            shell.settle()
    shell.settle()
    q = b.vhost("/").queues["big"]
    assert q.ready.disk_count >= 300 - WINDOW
    b.basic_qos(ch, 0, 10, False)
    b.basic_consume(ch, "big", "c", no_ack=False)
    b.start_consumer(ch, "c")
    shell.settle()
    peak = 0
    for _ in range(10_000):
        if len(shell.delivered) == 300:
            break
        if shell.held:
            assert shell.held[0].limit == 16
            shell.answer()
        peak = max(peak, q.ready.head_count)
        _ack_all(b, ch, shell)
    assert [d[-5:] for d in shell.delivered] == [b"%05d" % i for i in range(300)]
    assert peak <= WINDOW + 2 * 16
