"""Streams in the pure broker, with a real SQLite store and no event loop.

The test plays the shell (``Shell`` from test_spill): it commits each
Outcome's ops and answers ``ReadStream`` with ``Store.fetch_stream``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amqplite import storeops as ops
from amqplite.broker.core import Broker
from amqplite.broker.effects import Confirm, ReadStream
from amqplite.broker.streamlog import (
    MAX_AGE_SECONDS,
    MIN_READ,
    READ_BATCH,
    READ_BYTES,
    StreamLog,
    parse_age,
)
from amqplite.protocol import streamrecord
from amqplite.protocol.codec import FieldTable, Timestamp
from amqplite.protocol.errors import ChannelError, ConnectionError_
from amqplite.protocol.properties import BasicProperties, decode_properties, encode_properties
from amqplite.store import schema, upgrade
from amqplite.store.apply import record_bytes
from amqplite.store.engine import Store
from tests.broker.conftest import PERSISTENT, FakeClock, session_channel
from tests.broker.test_spill import Shell, _reopen, _store

STREAM = {"x-queue-type": "stream"}


def offsets(shell: Shell) -> list[int]:
    out = [decode_properties(d.message.properties_raw).headers["x-stream-offset"]  # type: ignore[index]
           for d in shell.deliveries]
    shell.deliveries.clear()
    return out


def stored_offsets(store: Store, queue_id: int, lo: int = 0, limit: int = 1000) -> list[int]:
    """Offsets of the entries a store read from ``lo`` returns (whole chunks: those
    below ``lo`` in the first one are skipped, as the broker does)."""
    return [off for off, _, _ in streamrecord.entries(store.fetch_stream(queue_id, lo, limit),
                                                      lo)][:limit]


def setup(tmp_path: Path, n: int, **args: Any) -> tuple[Broker, Shell, Any, FakeClock]:
    clock = FakeClock()
    b = Broker(now=clock)
    shell = Shell(b, _store(tmp_path / "s.db"))
    _, ch = session_channel(b)
    b.queue_declare(ch, "s", durable=True, arguments={**STREAM, **args})
    publish(b, shell, ch, n)
    return b, shell, ch, clock


def publish(b: Broker, shell: Shell, ch: Any, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        b.basic_publish(ch, "", "s", PERSISTENT, b"e%04d" % i)
    shell.settle()


def consume(b: Broker, shell: Shell, ch: Any, tag: str, offset: Any, prefetch: int = 1000,
            ) -> None:
    b.basic_qos(ch, 0, prefetch, False)
    b.basic_consume(ch, "s", tag, arguments={} if offset is None else {"x-stream-offset": offset})
    b.start_consumer(ch, tag)
    shell.settle()


def test_appends_take_consecutive_offsets_and_confirm_after_commit(tmp_path: Path) -> None:
    b, shell, ch, _ = setup(tmp_path, 0)
    b.confirm_select(ch)
    b.basic_publish(ch, "", "s", PERSISTENT, b"x")
    out = b.take_outcome()
    appends = ops.stream_appends(out.store_ops)
    assert [a.offset for a in appends] == [0]
    confirms = [e for e in out.effects if isinstance(e, Confirm)]
    assert confirms and confirms[0].after_commit
    shell.store.submit(out.store_ops)
    shell.store.flush()
    assert stored_offsets(shell.store, b.vhost("/").queues["s"].id) == [0]


def test_each_record_holds_its_own_properties_when_publishers_change_them(
        tmp_path: Path) -> None:
    """Where the offset goes is cached per stream for the last properties seen: a
    change of properties (or ones already naming the header) must not reuse it."""
    b, _shell, ch, _ = setup(tmp_path, 0)
    with_headers = encode_properties(BasicProperties(delivery_mode=2,
                                                     headers=FieldTable({"k": "v"})))
    own_offset = encode_properties(BasicProperties(
        delivery_mode=2, headers=FieldTable({"x-stream-offset": "mine"})))
    sent = [PERSISTENT, PERSISTENT, with_headers, own_offset, own_offset, PERSISTENT]
    for raw in sent:
        b.basic_publish(ch, "", "s", raw, b"body")
    out = b.take_outcome().store_ops
    assert sum(type(op) is ops.AppendStreams for op in out) == 1  # one op for the run
    records = [record_bytes(op) for op in ops.stream_appends(out)]
    assert len(records) == len(sent)
    for off, (raw, record) in enumerate(zip(sent, records, strict=True)):
        _ts, _key, exchange, routing_key, props, body = streamrecord.decode(record, 0)
        assert (exchange, routing_key, body) == ("", "s", b"body")
        expected = decode_properties(raw)
        got = decode_properties(props)
        headers = dict(expected.headers or {})
        headers["x-stream-offset"] = off
        assert dict(got.headers or {}) == headers
        assert got.delivery_mode == expected.delivery_mode == 2


def test_consumers_read_independently_and_acks_delete_nothing(tmp_path: Path) -> None:
    b, shell, ch, _ = setup(tmp_path, 500)
    consume(b, shell, ch, "a", "first", prefetch=50)
    assert offsets(shell) == list(range(50)), "the prefetch window bounds deliveries"
    b.basic_ack(ch, 50, multiple=True)
    shell.settle()
    assert offsets(shell) == list(range(50, 100))
    _, ch2 = session_channel(b, 2)
    consume(b, shell, ch2, "b", 490)
    assert offsets(shell) == list(range(490, 500))
    q = b.vhost("/").queues["s"]
    assert q.stream is not None and q.stream.count == 500
    assert stored_offsets(shell.store, q.id) == list(range(500))


def test_read_ahead_is_bounded(tmp_path: Path) -> None:
    b, shell, ch, _ = setup(tmp_path, 2000)
    consume(b, shell, ch, "a", "first", prefetch=10)
    st = b.vhost("/").queues["s"].stream
    assert st is not None
    (cur,) = st.cursors.values()
    limit = st.read_limit()
    assert limit == READ_BATCH, "small entries: the most rows per read"
    assert len(cur.buffer) <= 2 * limit and cur.offset <= 10 + 2 * limit


def test_each_chunk_crosses_from_the_store_once_per_reader(tmp_path: Path) -> None:
    """Chunks of 700 entries, reads of 1000: a read ends inside a chunk, and the rest of
    that chunk is taken from memory later, never read again; every offset arrives once,
    in order, and the read-ahead bound holds throughout."""
    b, shell, ch, _ = setup(tmp_path, 0)
    for start in range(0, 3500, 700):
        publish(b, shell, ch, 700, start=start)  # one group, so one chunk, each
    consume(b, shell, ch, "a", "first", prefetch=300)
    st = b.vhost("/").queues["s"].stream
    assert st is not None
    (cur,) = st.cursors.values()
    got: list[int] = []
    while len(got) < 3500:
        got += offsets(shell)
        assert len(cur.buffer) <= 2 * st.read_limit()
        b.basic_ack(ch, 0, multiple=True)
        shell.settle()
    assert got == list(range(3500))
    assert shell.read_entries == 3500


def _attach(b: Broker, ch: Any, tag: str, prefetch: int = 1000) -> None:
    b.basic_qos(ch, 0, prefetch, False)
    b.basic_consume(ch, "s", tag, arguments={"x-stream-offset": "first"})
    b.start_consumer(ch, tag)


def test_readers_of_the_same_chunks_share_one_store_read(tmp_path: Path) -> None:
    """Three consumers attach from first before any read is back: one read goes
    out, the others wait for it; as they read on, a chunk another cursor just
    read comes from the stream's cache. Every reader still gets every offset once,
    in order, and each chunk crossed from the store once for all of them."""
    b, shell, ch, _ = setup(tmp_path, 2500)
    chans = [ch] + [session_channel(b, n)[1] for n in (2, 3)]
    for i, c in enumerate(chans):
        _attach(b, c, f"r{i}", prefetch=300)
    got: dict[str, list[int]] = {f"r{i}": [] for i in range(3)}
    while any(len(v) < 2500 for v in got.values()):
        shell.settle()
        for d in shell.deliveries:
            got[d.consumer_tag].append(
                decode_properties(d.message.properties_raw).headers["x-stream-offset"])  # type: ignore[index]
        shell.deliveries.clear()
        for c in chans:
            b.basic_ack(c, 0, multiple=True)
    assert all(v == list(range(2500)) for v in got.values())
    assert shell.read_entries == 2500


def test_waiters_read_on_when_the_reader_they_waited_for_is_gone(tmp_path: Path) -> None:
    b, shell, ch, _ = setup(tmp_path, 20)
    _, ch2 = session_channel(b, 2)
    _attach(b, ch, "a")
    _attach(b, ch2, "b")
    out = b.take_outcome()
    reads = [e for e in out.effects if isinstance(e, ReadStream)]
    assert len(reads) == 1, "b waits for a's read"
    b.basic_cancel(ch, "a")
    e = reads[0]
    b.stream_loaded(e.queue, e.cursor, shell.store.fetch_stream(e.queue.id, e.lo, e.limit),
                    e.hi, e.limit)
    shell.settle()
    assert {d.consumer_tag for d in shell.deliveries} == {"b"}
    assert offsets(shell) == list(range(20))


def test_read_size_follows_the_entry_size() -> None:
    st = StreamLog()
    for _ in range(100):
        st.append(0, 64 * 1024, 1 << 40)
    assert st.read_limit() == READ_BYTES // (64 * 1024) == 32
    for _ in range(10):
        st.append(0, 64 * 1024 * 1024, 1 << 40)
    assert st.read_limit() == MIN_READ


def test_waiting_consumer_is_woken_by_appends_not_by_polling(tmp_path: Path) -> None:
    b, shell, ch, _ = setup(tmp_path, 3)
    consume(b, shell, ch, "a", None)  # next
    assert offsets(shell) == []
    reads = shell.reads
    for _ in range(3):
        shell.settle()
    assert shell.reads == reads, "nothing to read: no read is asked for"
    publish(b, shell, ch, 2, start=3)
    assert offsets(shell) == [3, 4]


@pytest.mark.parametrize(("spec", "first"), [
    ("first", 0), ("last", 9), ("next", None), (4, 4), (-3, 0), (99, None)])
def test_attach_offsets(tmp_path: Path, spec: Any, first: int | None) -> None:
    b, shell, ch, _ = setup(tmp_path, 10)
    consume(b, shell, ch, "a", spec)
    got = offsets(shell)
    assert got == ([] if first is None else list(range(first, 10)))


def test_timestamp_and_interval(tmp_path: Path) -> None:
    b, shell, ch, clock = setup(tmp_path, 0, **{"x-stream-max-segment-size-bytes": 30})
    publish(b, shell, ch, 5)           # offsets 0..4 at t0
    clock.t += 3600
    publish(b, shell, ch, 5, start=5)  # offsets 5..9 an hour later
    consume(b, shell, ch, "ts", Timestamp(int(clock.t) - 60))
    assert offsets(shell) == list(range(5, 10))
    _, ch2 = session_channel(b, 2)
    consume(b, shell, ch2, "iv", "30m")
    assert offsets(shell) == list(range(5, 10))
    _, ch3 = session_channel(b, 3)
    consume(b, shell, ch3, "all", "2h")
    assert offsets(shell) == list(range(10))


def test_retention_by_bytes_drops_whole_oldest_segments(tmp_path: Path) -> None:
    per_segment = 30 // (5 + len(PERSISTENT))  # entries are 5 body bytes + properties
    b, shell, ch, _ = setup(tmp_path, 0, **{"x-stream-max-segment-size-bytes": 30,
                                            "x-max-length-bytes": 60})
    consume(b, shell, ch, "slow", "first", prefetch=1)
    publish(b, shell, ch, 1)
    publish(b, shell, ch, 39, start=1)
    q = b.vhost("/").queues["s"]
    st = q.stream
    assert st is not None
    assert st.bytes <= 60 + 30 and st.first_offset > 0
    assert st.first_offset % per_segment == 0
    kept = stored_offsets(shell.store, q.id)
    assert kept[0] == st.first_offset and kept[-1] == 39
    assert offsets(shell) == [0], "delivered before retention passed it"
    b.basic_ack(ch, 1)
    shell.settle()
    assert offsets(shell) == [st.first_offset], "the slow consumer moved on to the first kept"


def test_retention_by_age(tmp_path: Path) -> None:
    b, shell, ch, clock = setup(tmp_path, 0, **{"x-stream-max-segment-size-bytes": 30,
                                                "x-max-age": "1h"})
    per_segment = 30 // (5 + len(PERSISTENT))
    publish(b, shell, ch, 2 * per_segment)  # two full segments
    clock.t += 7200
    publish(b, shell, ch, 2 * per_segment, start=2 * per_segment)  # rolls over: both due
    st = b.vhost("/").queues["s"].stream
    assert st is not None and st.first_offset == 2 * per_segment


def test_restart_keeps_offsets_and_segments(tmp_path: Path) -> None:
    _, shell, _, _ = setup(tmp_path, 25, **{"x-stream-max-segment-size-bytes": 30})
    shell.store.close()
    store, b2 = _reopen(tmp_path / "s.db")
    store.start()
    st = b2.vhost("/").queues["s"].stream
    assert st is not None
    segments = -(-25 // (30 // (5 + len(PERSISTENT))))
    assert (st.first_offset, st.next_offset, len(st.segments)) == (0, 25, segments)
    shell2 = Shell(b2, store)
    _, ch2 = session_channel(b2)
    publish(b2, shell2, ch2, 1, start=25)
    consume(b2, shell2, ch2, "a", "first")
    assert offsets(shell2) == list(range(26))
    store.close()


def test_refusals(tmp_path: Path) -> None:
    b, shell, ch, _ = setup(tmp_path, 1)
    with pytest.raises(ConnectionError_) as e1:
        b.basic_get(ch, "s", False)
    assert e1.value.reply_code == 540
    with pytest.raises(ChannelError) as e2:
        b.basic_consume(ch, "s", "x")
    assert e2.value.reply_code == 406
    b.basic_qos(ch, 0, 5, False)
    with pytest.raises(ConnectionError_):
        b.basic_consume(ch, "s", "x", no_ack=True)
    with pytest.raises(ChannelError):
        b.queue_declare(ch, "t", durable=False, arguments=STREAM)
    consume(b, shell, ch, "c", "first")
    with pytest.raises(ConnectionError_):
        b.basic_nack(ch, 1, False, True)


def test_closing_a_channel_requeues_nothing(tmp_path: Path) -> None:
    b, shell, ch, _ = setup(tmp_path, 3)
    consume(b, shell, ch, "a", "first")
    assert offsets(shell) == [0, 1, 2]
    b.close_channel(ch)
    shell.settle()
    q = b.vhost("/").queues["s"]
    assert q.unacked == 0 and not q.ready and q.stream is not None and not q.stream.cursors
    assert not any(isinstance(e, ReadStream) for e in b.effects)


def test_parse_age_and_resolve_edges() -> None:
    assert [parse_age(v) for v in ("7D", "12h", "30m", "10s", "1Y", "2M")] == [
        7 * 86400, 12 * 3600, 1800, 10, 365 * 86400, 60 * 86400]
    assert parse_age("7X") is None and parse_age(5) is None and parse_age("h") is None
    st = StreamLog()
    assert st.resolve("first", 0) == (0, None) and st.resolve("last", 0) == (0, None)
    with pytest.raises(ValueError):
        st.resolve("bogus", 0)
    with pytest.raises(ValueError):
        st.resolve(True, 0)


def test_enormous_ages_are_clamped() -> None:
    """``<5000 digits>s`` (int() refuses past 4300 digits) and ``<300 digits>Y`` (too big
    for a float) mean "forever": clamped, as RabbitMQ takes them, never an exception."""
    assert parse_age("9" * 5000 + "s") == MAX_AGE_SECONDS
    assert parse_age("9" * 300 + "Y") == MAX_AGE_SECONDS
    assert parse_age("0" * 5000 + "7s") == 7
    st = StreamLog()
    assert st.resolve("9" * 300 + "Y", 1_700_000_000.0) == (0, None)
    assert st.over_retention(None, parse_age("9" * 5000 + "s"), 1_700_000_000 * 10**6) == 0


def test_store_upgrade_from_schema_1(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    st = Store(f"sqlite:///{path}")
    st.create()
    with st.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE stream_chunks")
        conn.exec_driver_sql("DROP TABLE stream_segments")
        conn.exec_driver_sql("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    st.close()
    st = Store(f"sqlite:///{path}")
    st.create()
    assert st.fetch_stream(1, 0, 10) == []
    assert st.get_meta("schema_version") == str(schema.SCHEMA_VERSION)
    st.close()


def test_store_upgrade_from_schema_2_moves_entries_into_chunks(tmp_path: Path) -> None:
    """A version-2 database (one stream_entries row per entry) opens as version 3: every
    entry reads back at its offset with its body, time and properties (plus the offset
    header), the stream goes on after it, and message keys stay above the old ones."""
    n, per_segment = 2500, 1000
    b, shell, _, _ = setup(tmp_path, 0)
    qid = b.vhost("/").queues["s"].id
    shell.store.close()
    path = tmp_path / "s.db"
    st = Store(f"sqlite:///{path}")
    legacy = upgrade.legacy_stream_entries
    with st.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE stream_chunks")
        legacy.create(conn)
        conn.execute(legacy.insert(), [
            {"queue_id": qid, "offset": i, "segment": 1 + i // per_segment, "ts_us": 1000 + i,
             "message_key": 10_000 + i, "exchange": "", "routing_key": "s",
             "properties": PERSISTENT, "body": b"e%04d" % i} for i in range(n)])
        size = len(PERSISTENT) + 5
        for seg in range(1 + (n - 1) // per_segment):
            first = seg * per_segment
            last = min(n, first + per_segment) - 1
            conn.execute(schema.stream_segments.insert().values(
                queue_id=qid, segment=seg + 1, first_offset=first, last_offset=last,
                first_ts_us=1000 + first, last_ts_us=1000 + last, size=size * (last - first + 1)))
        conn.exec_driver_sql("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    st.close()
    store, b2 = _reopen(path)
    store.start()
    assert store.get_meta("schema_version") == str(schema.SCHEMA_VERSION)
    assert int(store.get_meta("max_message_id") or 0) >= 10_000 + n - 1
    with store.engine.connect() as conn:
        assert not conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE name = 'stream_entries'").all()
    got = list(streamrecord.entries(store.fetch_stream(qid, 0, n), 0))
    assert [off for off, _, _ in got] == list(range(n))
    for off, data, at in got[:3] + got[-3:]:
        ts, key, ex, rk, props, body = streamrecord.decode(data, at)
        assert (ts, key, ex, rk, body) == (1000 + off, 10_000 + off, "", "s", b"e%04d" % off)
        headers = decode_properties(props).headers
        assert headers is not None and headers["x-stream-offset"] == off
        assert decode_properties(props).delivery_mode == 2
    assert stored_offsets(store, qid, lo=1234, limit=5) == [1234, 1235, 1236, 1237, 1238]
    q = b2.vhost("/").queues["s"]
    assert q.stream is not None and (q.stream.first_offset, q.stream.next_offset) == (0, n)
    shell2 = Shell(b2, store)
    _, ch2 = session_channel(b2)
    publish(b2, shell2, ch2, 1, start=n)
    consume(b2, shell2, ch2, "a", 2490, prefetch=100)
    assert offsets(shell2) == list(range(2490, n + 1))
    store.close()


def test_policy_sets_the_limits(tmp_path: Path) -> None:
    b, shell, ch, _ = setup(tmp_path, 0)
    b.set_policy("/", "cap", "^s$", {"max-length-bytes": 40,
                                     "stream-max-segment-size-bytes": 20})
    publish(b, shell, ch, 30)
    st = b.vhost("/").queues["s"].stream
    assert st is not None and st.first_offset > 0 and st.bytes <= 40 + 20
    with pytest.raises(ValueError):
        b.set_policy("/", "bad", ".*", {"max-age": "soon"})


# ------------------------------------------------ consumer groups (amqplite's extension)
def deliveries_by_tag(shell: Shell) -> list[tuple[str, int]]:
    out = [(d.consumer_tag, decode_properties(d.message.properties_raw).headers[  # type: ignore[index]
        "x-stream-offset"]) for d in shell.deliveries]
    shell.deliveries.clear()
    return out


def group_consume(b: Broker, shell: Shell, ch: Any, tag: str, group: Any = "g",
                  offset: Any = "first", prefetch: int = 4) -> None:
    b.basic_qos(ch, 0, prefetch, False)
    args: dict[str, Any] = {"x-stream-offset": offset}
    if group is True:
        args["x-single-active-consumer"] = True
    else:
        args["x-stream-consumer-group"] = group
    b.basic_consume(ch, "s", tag, arguments=args)
    b.start_consumer(ch, tag)
    shell.settle()


def test_group_has_one_active_member_and_hands_over_after_the_last_ack(tmp_path: Path) -> None:
    b, shell, ch1, _ = setup(tmp_path, 10)
    _, ch2 = session_channel(b, 2)
    group_consume(b, shell, ch1, "a")
    group_consume(b, shell, ch2, "b", offset="last")  # waits; its own offset is not used
    assert deliveries_by_tag(shell) == [("a", 0), ("a", 1), ("a", 2), ("a", 3)]
    b.basic_ack(ch1, 2, multiple=True)  # 0 and 1 acked, 2 and 3 outstanding
    shell.settle()
    assert deliveries_by_tag(shell) == [("a", 4), ("a", 5)]
    b.close_channel(ch1)  # 2..5 unsettled: the group resumes at 2
    shell.settle()
    assert deliveries_by_tag(shell) == [("b", 2), ("b", 3), ("b", 4), ("b", 5)]
    q = b.vhost("/").queues["s"]
    (g,) = b.stream_info(q)["consumer_groups"]  # type: ignore[index]
    assert g == {"name": "g", "members": 1, "active": "b", "offset": 2}


def test_group_resumes_after_everything_acked_and_remembers_when_empty(tmp_path: Path) -> None:
    b, shell, ch1, _ = setup(tmp_path, 6)
    group_consume(b, shell, ch1, "a", group=True, prefetch=3)
    assert [o for _, o in deliveries_by_tag(shell)] == [0, 1, 2]
    b.basic_ack(ch1, 3, multiple=True)
    shell.settle()
    assert [o for _, o in deliveries_by_tag(shell)] == [3, 4, 5]
    b.basic_ack(ch1, 6, multiple=True)
    b.basic_cancel(ch1, "a")  # everything acked: the group goes on at 6
    shell.settle()
    _, ch2 = session_channel(b, 2)
    group_consume(b, shell, ch2, "b", group=True, offset="first")  # the group's, not "first"
    assert deliveries_by_tag(shell) == []
    publish(b, shell, ch1, 2, start=6)
    assert deliveries_by_tag(shell) == [("b", 6), ("b", 7)]
    _, ch3 = session_channel(b, 3)
    group_consume(b, shell, ch3, "other", group="h", offset="first", prefetch=10)
    assert [o for _, o in deliveries_by_tag(shell)] == list(range(8)), "groups are separate"


def test_successor_waits_for_a_cancelled_members_outstanding_deliveries(tmp_path: Path,
                                                                         ) -> None:
    b, shell, ch1, _ = setup(tmp_path, 10)
    group_consume(b, shell, ch1, "a", prefetch=3)
    assert [o for _, o in deliveries_by_tag(shell)] == [0, 1, 2]
    b.basic_cancel(ch1, "a")  # 0, 1, 2 outstanding
    _, ch2 = session_channel(b, 2)
    group_consume(b, shell, ch2, "b", prefetch=3)
    assert deliveries_by_tag(shell) == [], "waits while a's deliveries are unsettled"
    b.basic_ack(ch1, 1)  # acked after the cancel: still counts for the group
    shell.settle()
    assert deliveries_by_tag(shell) == []
    b.close_channel(ch1)  # 1 and 2 were never acked
    shell.settle()
    assert deliveries_by_tag(shell) == [("b", 1), ("b", 2), ("b", 3)]
    _, ch3 = session_channel(b, 3)
    group_consume(b, shell, ch3, "c", prefetch=3)
    b.basic_cancel(ch2, "b")
    shell.settle()
    assert deliveries_by_tag(shell) == []
    b.basic_ack(ch2, 3, multiple=True)  # all of b's acked: c goes on at 4
    shell.settle()
    assert deliveries_by_tag(shell) == [("c", 4), ("c", 5), ("c", 6)]


def test_group_name_must_be_a_string(tmp_path: Path) -> None:
    b, _shell, ch, _ = setup(tmp_path, 1)
    b.basic_qos(ch, 0, 5, False)
    with pytest.raises(ChannelError) as exc:
        b.basic_consume(ch, "s", "x", arguments={"x-stream-consumer-group": 5})
    assert exc.value.reply_code == 406
