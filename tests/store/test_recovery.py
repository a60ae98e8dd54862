"""load(): metadata and entries come back as stored; bodies only inside the window."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import create_engine

from amqplite.protocol.properties import BasicProperties, encode_properties
from amqplite.store import Recovered, RecoveredEntry
from amqplite.storeops import (
    REPLAYABLE,
    TRANSIENT_KEY,
    DeleteEntry,
    DeleteParameter,
    DeleteVHost,
    LogEvent,
    PutBinding,
    PutEntry,
    PutExchange,
    PutMessage,
    PutMeta,
    PutParameter,
    PutPolicy,
    PutQueue,
    PutVHost,
    UpdateEntry,
)
from tests.pg_server import both_backends

PERSISTENT_PROPS = encode_properties(BasicProperties(delivery_mode=2))
TRANSIENT_PROPS = encode_properties(BasicProperties())

META = [
    PutPolicy("/", "dlx", "^q", "queues", 1, {"dead-letter-exchange": "dlx"}),
    PutExchange("/", "x", "topic", arguments={"alternate-exchange": "ae"}),
    PutQueue(3, "/", "q3", arguments={"x-max-length": 10, "x-ratio": Decimal("0.5")}),
    PutQueue(5, "/", "q5", exclusive=True),
    PutBinding("/", "x", "q3", "queue", "a.#", {"x-match": "all"}),
    PutMeta("audit_watermark", "42"),
]


@both_backends
def test_round_trip(make_store) -> None:
    store = make_store()
    store.start()
    store.submit(META)
    ops: list = []
    for mid in range(1, 11):
        ops.append(PutMessage(mid, "x", f"rk{mid}", b"p%d" % mid, b"b" * mid))
        ops.append(PutEntry(3, 100 + mid, mid, delivery_count=mid % 2, redelivered=mid == 4))
    ops.append(PutEntry(5, 1, 10))
    ops.append(UpdateEntry(3, 102, 7, True))
    ops.append(LogEvent(1, "published", "/", "x", "rk", message_key=99))
    store.submit(ops)
    store.flush(10)
    store.submit([DeleteEntry(3, 101, 1)])
    store.close(10)

    reopened = make_store()
    rec = reopened.load(body_window=3)
    assert isinstance(rec, Recovered)
    assert rec.policies == [META[0]]
    assert rec.exchanges == [META[1]]
    assert rec.queues == [META[2], META[3]]
    assert rec.bindings == [META[4]]
    assert rec.meta["audit_watermark"] == "42"
    assert (rec.max_queue_id, rec.max_message_id, rec.max_log_id) == (5, 99, 1)
    # the first window comes back with bodies; the rest stays on disk, counted,
    # and is read back in order on demand
    assert rec.spilled[3] == (6, sum(range(5, 11)), 105, 110)
    q3 = rec.entries[3] + [RecoveredEntry(*r) for r in reopened.fetch_entries(3, 105, 110, 100)]
    assert [e.position for e in q3] == list(range(102, 111))
    assert [e.body for e in q3] == [b"b" * n for n in range(2, 11)]
    assert [e.body_size for e in q3] == list(range(2, 11))
    assert q3[0] == RecoveredEntry(102, 2, 7, True, "x", "rk2", b"p2", b"bb", 2)
    assert q3[2].redelivered and q3[3].delivery_count == 1
    assert rec.entries[5] == [RecoveredEntry(1, 10, 0, False, "x", "rk10", b"p10", b"b" * 10, 10)]


@both_backends
def test_body_window_edges(make_store) -> None:
    store = make_store()
    store.start()
    store.submit([PutQueue(1, "/", "q"), PutMessage(1, "", "q", b"", b"x"), PutEntry(1, 1, 1)])
    store.close(10)
    rec = make_store().load(body_window=0)
    assert 1 not in rec.entries and rec.spilled[1] == (1, 1, 1, 1)
    rec = make_store().load(body_window=1)
    assert rec.entries[1][0].body == b"x" and not rec.spilled


@both_backends
def test_orphans_removed_at_load(make_store, raw) -> None:
    store = make_store()
    store.start()
    store.submit([PutQueue(1, "/", "q"), PutMessage(1, "", "q", b"", b"kept"), PutEntry(1, 1, 1)])
    # A message whose entries never committed, and an entry of a vanished queue.
    store.submit([PutMessage(2, "", "q", b"", b"orphan")])
    store.submit([PutMessage(3, "", "gone", b"", b"lost"), PutEntry(9, 1, 3)])
    store.close(10)
    rec = make_store().load()
    assert list(rec.entries) == [1]
    assert raw("SELECT id FROM messages") == [(1,)]
    assert raw("SELECT queue_id FROM queue_entries") == [(1,)]
    assert rec.max_message_id == 3  # ids stay monotonic even though 2 and 3 are gone


@both_backends
def test_fetch_bodies_and_log_reads(store) -> None:
    ops: list = [PutQueue(1, "/", "q")]
    for mid in range(1, 2001):
        ops += [PutMessage(mid, "", "q", b"", b"%d" % mid), PutEntry(1, mid, mid)]
        ops.append(LogEvent(mid, "published", "/", "", "q", "q", f"m{mid}", mid))
    store.submit(ops)
    store.flush(10)
    bodies = store.fetch_bodies([5, 1999, 4242, *range(100, 1100)])
    assert bodies[5] == b"5" and bodies[1999] == b"1999" and 4242 not in bodies
    assert len(bodies) == 1002
    # Multi-row inserts (full chunks + remainder) keep submission order in the ids.
    keys = [r["message_key"] for r in store.read_delivery_log(limit=5000)]
    assert keys == list(range(1, 2001))
    rows = store.read_delivery_log(message_id="m7")
    assert [r["message_key"] for r in rows] == [7]
    page = store.read_delivery_log(after_id=10, limit=5)
    assert [r["id"] for r in page] == [11, 12, 13, 14, 15]
    assert store.read_delivery_log(message_key=8)[0]["message_id"] == "m8"
    assert store.get_meta("max_message_id") == "2000"
    assert store.get_meta("nope") is None


def test_retained_rows_round_trip_and_go_with_their_exchange(make_store, raw,
                                                            db_path) -> None:
    """PutRetained/DeleteRetained/ClearRetained, DeleteExchange's clean-up, the
    message-key mark, and a database made before the table existed."""
    from amqplite.storeops import ClearRetained, DeleteExchange, DeleteRetained, PutRetained

    store = make_store()
    store.start()
    store.submit([PutExchange("/", "lvc", "x-lvc"), PutExchange("/", "rh", "x-recent-history"),
                  PutExchange("/", "gone", "x-lvc")])
    store.submit([PutRetained(7, "/", "exchange", "lvc", "a", "lvc", "a", b"p", b"a1"),
                  PutRetained(9, "/", "exchange", "lvc", "a", "lvc", "a", b"p", b"a2"),
                  DeleteRetained("/", "exchange", "lvc", 7),
                  # the same message kept by a second exchange (an exchange binding)
                  PutRetained(9, "/", "exchange", "rh", "a", "lvc", "a", b"p", b"a2"),
                  PutRetained(12, "/", "exchange", "rh", "", "rh", "", b"p", b"h1"),
                  PutRetained(40, "/", "exchange", "gone", "k", "gone", "k", b"p", b"g"),
                  PutRetained(41, "/", "exchange", "rh", "", "rh", "", b"p", b"h2")])
    store.submit([DeleteExchange("/", "gone"), ClearRetained("/", "exchange", "nothing")])
    store.close(10)
    rec = make_store().load()
    assert sorted(rec.retained, key=lambda r: (r.message_id, r.owner)) == [
        PutRetained(9, "/", "exchange", "lvc", "a", "lvc", "a", b"p", b"a2"),
        PutRetained(9, "/", "exchange", "rh", "a", "lvc", "a", b"p", b"a2"),
        PutRetained(12, "/", "exchange", "rh", "", "rh", "", b"p", b"h1"),
        PutRetained(41, "/", "exchange", "rh", "", "rh", "", b"p", b"h2"),
    ]
    assert rec.max_message_id >= 41
    # a database from before the table: Store.create adds it, nothing else changes
    import sqlite3

    conn = sqlite3.connect(db_path)
    conn.execute("DROP TABLE retained")
    conn.commit()
    conn.close()
    make_store()
    assert raw("SELECT count(*) FROM retained") == [(0,)]


@both_backends
def test_runtime_parameters_round_trip(make_store) -> None:
    """Puts replace, deletes remove, a deleted vhost takes its parameters; applying
    the same ops again (a re-submission, storeops.REPLAYABLE) changes nothing."""

    ops = [PutVHost("v"), PutParameter("shovel", "/", "a", {"src-uri": "amqp://"}),
           PutParameter("shovel", "/", "a", {"src-uri": "amqp://h", "n": 1}),
           PutParameter("shovel", "/", "b", {}), PutParameter("shovel", "v", "c", {}),
           PutParameter("federation-upstream", "/", "a", {"uri": "amqp://"}),
           # an upstream set's value is a list (RabbitMQ's shape)
           PutParameter("federation-upstream-set", "/", "s", [{"upstream": "a"}]),
           DeleteParameter("shovel", "/", "b"), DeleteVHost("v")]
    assert all(type(op) in REPLAYABLE for op in ops)
    store = make_store()
    store.start()
    store.submit(ops)
    store.submit(ops)
    store.close(10)
    rec = make_store().load(body_window=1)
    assert rec.parameters == [
        PutParameter("federation-upstream", "/", "a", {"uri": "amqp://"}),
        PutParameter("federation-upstream-set", "/", "s", [{"upstream": "a"}]),
        PutParameter("shovel", "/", "a", {"src-uri": "amqp://h", "n": 1}),
    ]


@both_backends
def test_a_parameter_keeps_who_defined_it(make_store, db_url: str) -> None:
    """``defined_by`` (whom a link acts as) survives a restart; a database from before
    the column gains it at start, its rows with None (they act as the default user)."""
    store = make_store()
    store.start()
    store.submit([PutParameter("shovel", "/", "a", {"src-uri": "amqp://"}, "alice"),
                  PutParameter("shovel", "/", "b", {"src-uri": "amqp://"})])
    store.close(10)
    assert make_store().load(body_window=1).parameters == [
        PutParameter("shovel", "/", "a", {"src-uri": "amqp://"}, "alice"),
        PutParameter("shovel", "/", "b", {"src-uri": "amqp://"}, None)]
    engine = create_engine(db_url)
    with engine.begin() as conn:  # the table as it was before the column
        conn.exec_driver_sql("ALTER TABLE parameters DROP COLUMN defined_by")
    engine.dispose()
    rec = make_store().load(body_window=1)
    assert [(p.name, p.defined_by) for p in rec.parameters] == [("a", None), ("b", None)]


def _spill_run(persistent: list[bool | None]) -> list:
    """A queue with one entry per message and the spilled-transient mark. A given
    ``persistent`` goes with properties that say the opposite; None leaves the field
    out (what a writer from before it wrote), odd ids persistent by their properties."""
    ops: list = [PutQueue(1, "/", "q")]
    for mid, p in enumerate(persistent, 1):
        if p is None:
            props = PERSISTENT_PROPS if mid % 2 else TRANSIENT_PROPS
            msg = PutMessage(mid, "", "q", props, b"m%d" % mid)
        else:
            props = TRANSIENT_PROPS if p else PERSISTENT_PROPS
            msg = PutMessage(mid, "", "q", props, b"m%d" % mid, p)
        ops += [msg, PutEntry(1, mid, mid)]
    return [*ops, PutMeta(TRANSIENT_KEY, "1")]


@both_backends
def test_spilled_transient_messages_go_by_the_persistent_field(make_store, raw) -> None:
    """Recovery reads the broker's ``persistent``, never the properties: each message
    here has properties that say the opposite of what the broker said."""
    store = make_store()
    store.start()
    store.submit(_spill_run([True, False, False, True]))
    store.close(10)
    rec = make_store().load()
    assert [e.position for e in rec.entries[1]] == [1, 4]
    assert raw("SELECT id FROM messages ORDER BY id") == [(1,), (4,)]


@both_backends
def test_a_database_from_before_messages_persistent_is_upgraded(db_url, make_store) -> None:
    """An older database has no ``messages.persistent``: the start adds it, every row
    persistent, except, when transient messages were spilled, those whose properties
    say so (parsed once, in the upgrade), which recovery then drops."""
    store = make_store()
    store.start()
    store.submit(_spill_run([None] * 6))
    store.close(10)
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE messages DROP COLUMN persistent")
    engine.dispose()
    rec = make_store().load()  # Store.create adds the column, then load drops transient
    assert [e.position for e in rec.entries[1]] == [1, 3, 5]
    assert [e.body for e in rec.entries[1]] == [b"m1", b"m3", b"m5"]


@both_backends
def test_unclean_stop_marks_spilled_entries_except_in_settled_queues(make_store) -> None:
    """After an unclean stop every spilled entry is marked redelivered on disk, except
    in the queues ``settled`` names (MQTT sessions disconnected at the crash)."""
    store = make_store()
    store.start()
    ops: list = [PutQueue(1, "/", "settled"), PutQueue(2, "/", "other")]
    for mid in range(1, 7):
        ops += [PutMessage(mid, "", "q", PERSISTENT_PROPS, b"x"), PutEntry(1 + mid % 2, mid, mid)]
    store.submit(ops)
    store.close(10)
    make_store().mark_open()  # a broker ran and never stopped cleanly
    seen: list[Recovered] = []
    rec = make_store().load(body_window=0,
                            settled=lambda r: seen.append(r) or {1})  # type: ignore[func-returns-value]
    assert seen and set(rec.spilled) == {1, 2}
    again = make_store()
    flags = {qid: [RecoveredEntry(*r).redelivered for r in again.fetch_entries(qid, 1, 6, 10)]
             for qid in (1, 2)}
    assert flags == {1: [False, False, False], 2: [True, True, True]}
