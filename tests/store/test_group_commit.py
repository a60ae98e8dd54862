"""Group commit: ordering, callbacks after commit, cancellation, shared messages."""

from __future__ import annotations

import threading

import pytest

from amqplite.store import Store
from amqplite.storeops import (
    DeleteBinding,
    DeleteEntry,
    DeleteExchange,
    DeleteQueue,
    LogEvent,
    PutBinding,
    PutEntry,
    PutExchange,
    PutMessage,
    PutQueue,
    UpdateEntry,
)
from tests.pg_server import both_backends


def publish(mid: int, *queue_ids: int) -> list:
    ops: list = [PutMessage(mid, "ex", "rk", b"props", b"body-%d" % mid)]
    ops += [PutEntry(q, mid, mid) for q in queue_ids]
    return ops


@both_backends
def test_callbacks_run_after_commit(store: Store, raw) -> None:
    seen: list[tuple] = []
    done = threading.Event()

    def callback(error: BaseException | None) -> None:
        assert error is None
        # A fresh connection must already see the rows: the commit happened.
        seen.extend(raw("SELECT id FROM messages"))
        seen.extend(raw("SELECT queue_id, position FROM queue_entries"))
        done.set()

    store.submit([PutQueue(1, "/", "q"), *publish(7, 1)], callback)
    assert done.wait(10)
    assert seen == [(7,), (1, 7)]


@both_backends
def test_ops_apply_in_submission_order(make_store, raw) -> None:
    store = make_store()
    results: list[BaseException | None] = []
    # Submitted before start(): all of it lands in one group.
    store.submit([PutQueue(1, "/", "a")], results.append)
    store.submit([PutExchange("/", "x", "direct")], results.append)
    store.submit([PutBinding("/", "x", "a", "queue", "k")], results.append)
    store.submit(publish(1, 1), results.append)
    store.submit([UpdateEntry(1, 1, 1, True)], results.append)
    store.submit([DeleteBinding("/", "x", "a", "queue", "k")], results.append)
    store.submit([PutBinding("/", "x", "a", "queue", "k2"), DeleteExchange("/", "x")],
                 results.append)
    store.submit([PutExchange("/", "x", "fanout")], results.append)
    store.start()
    store.flush(10)
    assert store.groups == 1 and store.last_group_size == 8
    assert results == [None] * 8
    assert raw("SELECT name, type FROM exchanges") == [("x", "fanout")]
    assert raw("SELECT count(*) FROM bindings") == [(0,)]
    assert raw("SELECT delivery_count, redelivered FROM queue_entries") == [(1, 1)]


@both_backends
def test_put_then_delete_in_one_group_writes_nothing(make_store, raw) -> None:
    store = make_store()
    store.submit([PutQueue(1, "/", "q")])
    store.submit([*publish(1, 1), LogEvent(1, "published", "/", "ex", "rk", message_key=1)])
    store.submit(publish(2, 1))
    store.submit([UpdateEntry(1, 1, 1, False), DeleteEntry(1, 1, 1)])  # acked before commit
    store.start()
    store.flush(10)
    assert store.groups == 1
    assert raw("SELECT id FROM messages") == [(2,)]
    assert raw("SELECT message_id FROM queue_entries") == [(2,)]
    # The log is history, not state: it is kept.
    assert raw("SELECT event, message_key FROM delivery_log") == [("published", 1)]


@both_backends
def test_message_kept_while_any_entry_survives_in_group(make_store, raw) -> None:
    store = make_store()
    store.submit([PutQueue(1, "/", "a"), PutQueue(2, "/", "b")])
    store.submit(publish(1, 1, 2))
    store.submit([DeleteEntry(1, 1, 1)])  # only a's entry cancels
    store.start()
    store.flush(10)
    assert raw("SELECT id FROM messages") == [(1,)]
    assert raw("SELECT queue_id FROM queue_entries") == [(2,)]


@both_backends
def test_shared_message_deleted_with_last_entry(store: Store, raw) -> None:
    store.submit([PutQueue(1, "/", "a"), PutQueue(2, "/", "b"), PutQueue(3, "/", "c")])
    store.submit(publish(1, 1, 2, 3))
    store.flush(10)
    store.submit([DeleteEntry(1, 1, 1)])
    store.flush(10)
    assert raw("SELECT id FROM messages") == [(1,)]
    store.submit([DeleteEntry(2, 1, 1)])
    store.flush(10)
    assert raw("SELECT id FROM messages") == [(1,)]
    store.submit([DeleteEntry(3, 1, 1)])
    store.flush(10)
    assert raw("SELECT count(*) FROM messages") == [(0,)]
    assert raw("SELECT count(*) FROM queue_entries") == [(0,)]


@both_backends
def test_delete_of_committed_entry_and_new_entry_same_group(make_store, raw) -> None:
    """Inserts of a segment run before its deletes, so the orphan check sees them."""
    store = make_store()
    store.start()
    store.submit([PutQueue(1, "/", "a"), PutQueue(2, "/", "b"), *publish(1, 1)])
    store.flush(10)
    store.submit([DeleteEntry(1, 1, 1), PutEntry(2, 5, 1)])  # e.g. a move to another queue
    store.flush(10)
    assert raw("SELECT id FROM messages") == [(1,)]
    assert raw("SELECT queue_id, position FROM queue_entries") == [(2, 5)]


@both_backends
def test_position_reused_after_delete_in_one_group(store: Store, raw) -> None:
    store.submit([PutQueue(1, "/", "a"), *publish(1, 1)])
    store.flush(10)
    store.submit([DeleteEntry(1, 1, 1), *publish(2, 1)[:1], PutEntry(1, 1, 2)])
    store.flush(10)
    assert raw("SELECT position, message_id FROM queue_entries") == [(1, 2)]
    assert raw("SELECT id FROM messages") == [(2,)]


@both_backends
def test_delete_queue_removes_entries_bindings_and_orphans(store: Store, raw) -> None:
    store.submit([
        PutQueue(1, "/", "a"), PutQueue(2, "/", "b"), PutExchange("/", "x", "fanout"),
        PutBinding("/", "x", "a", "queue", ""), PutBinding("/", "x", "b", "queue", ""),
        *publish(1, 1), *publish(2, 1, 2), *publish(3, 2),
    ])
    store.flush(10)
    store.submit([DeleteQueue(1)])
    store.flush(10)
    assert raw("SELECT id FROM queues") == [(2,)]
    assert raw("SELECT destination FROM bindings") == [("b",)]
    assert raw("SELECT queue_id, message_id FROM queue_entries ORDER BY 2") == [(2, 2), (2, 3)]
    assert raw("SELECT id FROM messages ORDER BY id") == [(2,), (3,)]


@both_backends
def test_a_bad_submission_fails_alone(make_store, raw) -> None:
    """One submission's content error must not fail the others in its group."""
    store = make_store()
    results: list[BaseException | None] = []
    store.submit([PutQueue(1, "/", "a")], results.append)
    store.submit([PutQueue(2, "/", "a")], results.append)  # (vhost, name) taken: fails
    store.submit([PutQueue(3, "/", "c")], results.append)
    store.start()
    store.flush(10)
    assert results[0] is None and isinstance(results[1], Exception) and results[2] is None
    assert raw("SELECT id FROM queues ORDER BY id") == [(1,), (3,)]
    # The writer carries on with the next group.
    store.submit([PutQueue(4, "/", "d")], results.append)
    store.flush(10)
    assert results[-1] is None
    assert raw("SELECT id FROM queues ORDER BY id") == [(1,), (3,), (4,)]


def test_disk_full_is_retried_until_it_passes(make_store, raw) -> None:
    """SQLITE_FULL (a real one: max_page_count) blocks the group; nothing is refused."""
    from sqlalchemy import event

    store = make_store()
    limit = [1]  # pages: SQLite keeps its current size, so any growth is "disk full"

    def cap(dbapi_conn, _record, _proxy) -> None:  # type: ignore[no-untyped-def]
        dbapi_conn.execute(f"PRAGMA max_page_count={limit[0]}")

    event.listen(store.engine, "checkout", cap)
    store.start()
    results: list[BaseException | None] = []
    store.submit([PutQueue(1, "/", "a")], results.append)
    store.submit([PutMessage(7, "ex", "rk", b"", b"x" * 200_000), PutEntry(1, 7, 7)],
                 results.append)
    wait_until(lambda: store.failing is not None)
    assert "full" in str(store.failing)
    assert results == []  # not confirmed, not refused
    limit[0] = 1_000_000  # space comes back
    store.flush(10)
    assert results == [None, None] and store.failing is None
    assert raw("SELECT queue_id, message_id FROM queue_entries") == [(1, 7)]


def wait_until(pred, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    import time

    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@both_backends
def test_submit_from_many_threads(store: Store, raw) -> None:
    store.submit([PutQueue(q, "/", f"q{q}") for q in range(1, 5)])
    committed: list[int] = []
    lock = threading.Lock()

    def producer(q: int) -> None:
        for i in range(250):
            mid = q * 1000 + i
            ops = [*publish(mid, q), LogEvent(i, "published", "/", "ex", "rk", message_key=mid)]
            if i % 3 == 0:
                ops.append(DeleteEntry(q, mid, mid))

            def callback(error: BaseException | None, mid: int = mid) -> None:
                assert error is None
                with lock:
                    committed.append(mid)

            store.submit(ops, callback)

    threads = [threading.Thread(target=producer, args=(q,)) for q in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.flush(30)
    assert len(committed) == 1000
    expected = sorted(q * 1000 + i for q in range(1, 5) for i in range(250) if i % 3)
    assert [r[0] for r in raw("SELECT id FROM messages ORDER BY id")] == expected
    assert raw("SELECT count(*) FROM queue_entries") == [(len(expected),)]
    assert raw("SELECT count(*) FROM delivery_log") == [(1000,)]
    # Per producer, log ids follow submission order.
    for q in range(1, 5):
        keys = [r[0] for r in raw(
            "SELECT message_key FROM delivery_log WHERE message_key / 1000 = ? ORDER BY id", q)]
        assert keys == sorted(keys)


@both_backends
def test_flush_and_close(make_store) -> None:
    store = make_store()
    store.flush(1)  # nothing pending: returns at once
    store.submit([PutQueue(1, "/", "a")])
    with pytest.raises(RuntimeError):
        store.flush(1)  # not started
    store.start()
    store.close(10)
    with pytest.raises(RuntimeError):
        store.submit([PutQueue(2, "/", "b")])
    store.close()  # idempotent
    again = make_store()
    assert [q.name for q in again.load().queues] == ["a"]


def test_bad_durability() -> None:
    with pytest.raises(ValueError):
        Store("sqlite://", durability="sometimes")
