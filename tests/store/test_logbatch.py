"""The delivery log stored as batches: encoding, ids, the view, pruning, the upgrade."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from amqplite.store import Store
from amqplite.store.logbatch import (
    BATCH_EVENTS,
    batch_rows,
    decode_events,
    encode_events,
    storable_value,
)
from amqplite.store.schema import SCHEMA_VERSION
from amqplite.storeops import LOG_FIELDS, LogEvent
from tests.pg_server import both_backends

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # beyond 64 bits too: orjson refuses those
    st.text(),  # lone surrogates included
    st.floats(allow_nan=False, allow_infinity=False),
)


@given(st.lists(st.lists(values, min_size=12, max_size=12), max_size=20))
@settings(max_examples=300, deadline=None)
def test_any_row_a_client_can_cause_encodes_and_reads_back(rows: list[list[object]]) -> None:
    """Whatever a row holds, encoding never fails; a value stays as it was unless it
    cannot be stored, and then it reads back as ``storable_value`` made it."""
    back = decode_events(encode_events(rows))
    assert len(back) == len(rows)
    for got, sent in zip(back, rows, strict=True):
        assert all(g == s or g == storable_value(s) for g, s in zip(got, sent, strict=True))
    text = encode_events(rows)
    text.encode("utf-8")  # valid UTF-8 for every reader


def test_batches_hold_consecutive_ids_and_their_time_span() -> None:
    rows = [(1000 + (i % 7), "published", "/", "", "q", None, None, i, None, None, 1, None)
            for i in range(BATCH_EVENTS + 5)]
    batches = batch_rows(41, rows)
    assert [(b[0], b[1], b[4]) for b in batches] == [
        (41, 40 + BATCH_EVENTS, BATCH_EVENTS), (41 + BATCH_EVENTS, 45 + BATCH_EVENTS, 5)]
    assert (batches[0][2], batches[0][3]) == (1000, 1006)
    assert [tuple(e) for b in batches for e in decode_events(b[5])] == rows


def _events(n: int, start: int = 0) -> list[LogEvent]:
    return [LogEvent(start + i, "acked", "/", "x", "rk", queue=f"q{i % 3}", message_id=f"m{i}",
                     message_key=i, consumer_tag="c", attempt=1, size=10) for i in range(n)]


@both_backends
def test_the_view_shows_one_row_per_event_as_the_table_did(store: Store, raw: Callable) -> None:
    store.submit(_events(5))
    store.submit(_events(3, start=100))
    store.flush(10)
    view = raw("SELECT * FROM delivery_log ORDER BY id")
    assert [r[0] for r in view] == list(range(1, 9))
    assert view[0] == (1, 0, "acked", "/", "x", "rk", "q0", "m0", 0, "c", 1, 10, None, None)
    read = store.read_delivery_log(limit=100)
    assert [tuple(r[c] for c in ("id", *LOG_FIELDS)) for r in read] == view
    assert [r["id"] for r in store.read_delivery_log(queue="q1")] == [2, 5, 7]
    assert [r["id"] for r in store.read_delivery_log(after_id=6)] == [7, 8]
    # a group's events share a batch row: no row per event any more
    assert raw("SELECT count(*) FROM log_batches")[0][0] <= 2


@both_backends
def test_ids_continue_after_pruning_everything_and_a_restart(make_store: Callable[..., Store]) -> None:
    first = make_store()
    first.start()
    first.submit(_events(10))
    first.flush(10)
    assert first.prune_delivery_log(max_id=10, older_than_us=10**18) == 10
    first.close(timeout=10)
    second = make_store()
    second.start()
    second.submit(_events(2))
    second.flush(10)
    assert [r["id"] for r in second.read_delivery_log()] == [11, 12]


@both_backends
def test_prune_keeps_a_batch_until_all_its_events_are_old(store: Store, raw: Callable) -> None:
    store.submit(_events(10))  # one batch, times 0..9
    store.flush(10)
    assert store.prune_delivery_log(max_id=10, older_than_us=5) == 0
    assert store.prune_delivery_log(max_id=9, older_than_us=10**18) == 0  # id 10 not exported
    assert store.prune_delivery_log(max_id=10, older_than_us=10) == 10
    assert raw("SELECT count(*) FROM delivery_log") == [(0,)]


def _version3_database(path: Path) -> list[tuple[object, ...]]:
    """A database as amqplite with schema 3 left it: one delivery_log row per event
    (AUTOINCREMENT), rows 101..150 pruned and the newest ids (2501..2600) too."""
    conn = sqlite3.connect(path)
    cols = ", ".join(f'"{c}"' for c in LOG_FIELDS[:LOG_FIELDS.index("reason") + 1])
    conn.executescript(
        "CREATE TABLE meta (key VARCHAR(255) PRIMARY KEY, value VARCHAR NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '3'), ('max_message_id', '0'),"
        " ('max_queue_id', '0');"
        "CREATE TABLE delivery_log (id INTEGER PRIMARY KEY AUTOINCREMENT, ts_us BIGINT NOT NULL,"
        " event VARCHAR(16) NOT NULL, vhost VARCHAR(255) NOT NULL, exchange VARCHAR(255) NOT NULL,"
        " routing_key VARCHAR(255) NOT NULL, queue VARCHAR(255), message_id VARCHAR(255),"
        " message_key BIGINT, consumer_tag VARCHAR(255), attempt INTEGER, size INTEGER,"
        " reason VARCHAR(64));"
    )
    rows = [(i, 1_000 + i, "routed" if i % 2 else "published", "/", "amq.direct", f"rk{i}",
             None if i % 2 == 0 else "q", f"m{i}", i, None, None, 10 + i, None)
            for i in range(1, 2601)]
    conn.executemany(f"INSERT INTO delivery_log (id, {cols}) VALUES ({', '.join('?' * 13)})", rows)
    conn.execute("DELETE FROM delivery_log WHERE id BETWEEN 101 AND 150 OR id > 2500")
    conn.commit()
    conn.close()
    return [r for r in rows if not (101 <= r[0] <= 150 or r[0] > 2500)]


def test_a_version_3_log_moves_into_batches_keeping_every_id(db_path: Path,
                                                              make_store: Callable[..., Store],
                                                              raw: Callable) -> None:
    kept = _version3_database(db_path)
    store = make_store()  # Store.create upgrades in place
    assert raw("SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert raw("SELECT type FROM sqlite_master WHERE name = 'delivery_log'") == [("view",)]
    # protocol came after version 3: None
    assert raw("SELECT * FROM delivery_log ORDER BY id") == [(*r, None) for r in kept]
    # no batch spans the pruned gap
    assert raw("SELECT count(*) FROM log_batches WHERE first_id <= 100 AND last_id >= 151") == [(0,)]
    store.start()
    store.submit(_events(1))
    store.flush(10)
    assert [r["id"] for r in store.read_delivery_log(after_id=2450)][-1] == 2601  # AUTOINCREMENT's


@given(st.lists(st.integers(min_value=0, max_value=1200), max_size=8), st.data())
@settings(max_examples=60, deadline=None)
def test_a_log_buffer_hands_over_every_row_in_order_in_bounded_batches(
        sizes: list[int], data: st.DataObject) -> None:
    """Rows added a command batch at a time (some larger than a batch row, some
    with values orjson refuses) come out as EncodedLog batches of at most
    BATCH_EVENTS rows, in order, with their time span and the key mark."""
    from amqplite.store.logbatch import LogBuffer

    buf = LogBuffer()
    sent: list[tuple[object, ...]] = []
    for n in sizes:
        weird = data.draw(st.sampled_from(["q", "q\udcff", 2**70]))
        rows = [(1000 + len(sent) + i, "routed", "/", "", "rk", weird, f"m{i}", i, None, None, 1,
                 None) for i in range(n)]
        buf.add(rows)
        sent.extend(rows)
    assert buf.rows == len(sent)
    out = buf.take(key_mark=77)
    assert buf.rows == 0 and buf.take(77) == []
    assert all(0 < b.n_events <= BATCH_EVENTS for b in out)
    assert all(b.max_message_key == 77 for b in out)
    got = [tuple(e) for b in out for e in decode_events(b.events)]
    assert len(got) == len(sent)
    assert all(g == s or g == tuple(storable_value(v) for v in s)
               for g, s in zip(got, sent, strict=True))
    for b in out:
        ts = [e[0] for e in decode_events(b.events)]
        assert (b.first_ts_us, b.last_ts_us) == (min(ts), max(ts)) and len(ts) == b.n_events


@both_backends
def test_log_buffer_batches_land_as_consecutive_ids(store: Store) -> None:
    """What the buffer hands over is stored like any rows: ids in order, no gaps."""
    from amqplite.store.logbatch import LogBuffer
    from amqplite.store.logsql import iter_log_rows

    buf = LogBuffer()
    rows = [(5000 + i, "acked", "/", "", "rk", "q", f"m{i}", i + 1, "c", 1, 10, None,
             "amqp-0-9-1") for i in range(2500)]
    for i in range(0, 2500, 700):
        buf.add(rows[i : i + 700])
    store.submit(buf.take(2500))
    store.flush(20)
    with store.engine.connect() as conn:
        got = list(iter_log_rows(conn))
    assert [r[0] for r in got] == list(range(1, 2501))
    assert [tuple(r[1:]) for r in got] == rows


def test_broker_assigned_ids_are_written_out_by_every_reader(
        make_store: Callable[..., Store], raw: Callable, db_path: Path) -> None:
    """The broker stores "" for the id it assigns (amq-KEY), saving a string per
    message; the reads, the view (also one an older release created) and the
    audit's driver-side reader all show amq-KEY, and a trace by that id finds it."""
    from amqplite.audit.job import LOG_COLUMNS
    from amqplite.audit.sqlite_read import iter_log_pages

    store = make_store()
    store.start()
    store.submit([(1, "published", "/", "", "q", None, "", 7, None, None, 3, None),
                  (2, "expired", "/", "", "", "q", "", None, None, None, None, "queue_expired"),
                  (3, "published", "/", "", "q", None, "pub-id", 8, None, None, 3, None)])
    store.flush(10)
    want = ["amq-7", "", "pub-id"]
    assert [r["message_id"] for r in store.read_delivery_log()] == want
    assert [r["id"] for r in store.read_delivery_log(message_id="amq-7")] == [1]
    assert [r[0] for r in raw("SELECT message_id FROM delivery_log ORDER BY id")] == want
    pages = list(iter_log_pages(db_path, LOG_COLUMNS, 0, 3, page_rows=10))
    assert pages[0].column("message_id").to_pylist() == want
    store.close(timeout=10)
    # a view as the previous release made it (ids as stored) is replaced on open
    conn = sqlite3.connect(db_path)
    conn.execute("DROP VIEW delivery_log")
    conn.execute("CREATE VIEW delivery_log AS SELECT b.first_id + j.key AS id, "
                 "json_extract(j.value, '$[6]') AS message_id "
                 "FROM log_batches AS b, json_each(b.events) AS j")
    conn.commit()
    conn.close()
    assert raw("SELECT message_id FROM delivery_log ORDER BY id")[0] == ("",)
    make_store()
    assert [r[0] for r in raw("SELECT message_id FROM delivery_log ORDER BY id")] == want


def test_events_stored_before_the_protocol_column_read_back_with_none(tmp_path: Path) -> None:
    """A database written before ``protocol`` existed: its 12-field events read back
    with protocol None, and its old view is replaced by one that has the column."""
    from sqlalchemy import create_engine, insert

    from amqplite.store import schema
    from amqplite.store.logsql import create_views, iter_log_rows

    eng = create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    schema.metadata.create_all(eng)
    old_rows = [(5, "published", "/", "x", "rk", None, "", 7, None, None, 3, None)]
    with eng.begin() as conn:
        conn.execute(insert(schema.log_batches), [dict(zip(
            ("first_id", "last_id", "first_ts_us", "last_ts_us", "count", "events"),
            batch_rows(1, old_rows)[0], strict=True))])
        # the view as the previous release created it: no protocol column
        old_sql = schema.delivery_log_view_sql("sqlite").replace(
            ",\n  json_extract(j.value, '$[12]') AS protocol", "")
        assert "protocol" not in old_sql
        conn.exec_driver_sql(old_sql)
        create_views(conn)
        assert list(iter_log_rows(conn)) == [
            (1, 5, "published", "/", "x", "rk", None, "amq-7", 7, None, None, 3, None, None)]
        row = conn.exec_driver_sql("SELECT protocol, message_id FROM delivery_log").one()
        assert tuple(row) == (None, "amq-7")
    eng.dispose()
