"""Only what someone waits for is fsynced: delivery-log rows alone commit without it."""

from __future__ import annotations

from pathlib import Path

from amqplite.store import engine
from amqplite.store.engine import Store
from amqplite.store.ops import LogEvent, PutEntry, PutMessage, PutQueue


def _row(i: int) -> tuple[object, ...]:
    return (i, "published", "/", "", "q", None, None, i, None, None, 10, None)


def test_log_rows_alone_do_not_need_an_fsync() -> None:
    assert not engine._needs_fsync([([_row(1), _row(2)], None), ([LogEvent(1, "acked", "/", "",
                                                                            "q")], None)])
    assert engine._needs_fsync([([_row(1)], None), ([_row(2), PutQueue(1, "/", "q")], None)])
    assert engine._needs_fsync([([], None), ([PutMessage(1, "", "q", b"", b"x")], None)])


def _synchronous(store: Store) -> int:
    """The writer connection's own setting, as SQLite reports it (1 NORMAL, 2 FULL)."""
    assert store._conn is not None
    raw = store._conn.connection.driver_connection
    assert raw is not None
    return int(raw.execute("PRAGMA synchronous").fetchone()[0])


def test_the_writer_switches_between_normal_and_full(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    store.create()
    store.start()
    try:
        store.submit([_row(1)])
        store.flush(10)
        assert _synchronous(store) == 1
        store.submit([PutQueue(1, "/", "q"), PutMessage(1, "", "q", b"", b"x"), PutEntry(1, 1, 1)])
        store.flush(10)
        assert _synchronous(store) == 2
        store.submit([_row(2)])
        store.flush(10)
        assert _synchronous(store) == 1
    finally:
        store.close()
    reopened = Store(f"sqlite:///{tmp_path / 's.db'}")
    assert [e.position for e in reopened.load().entries[1]] == [1]


def test_durability_os_is_left_alone(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'o.db'}", durability="os")
    store.create()
    store.start()
    try:
        store.submit([PutQueue(1, "/", "q")])
        store.flush(10)
        assert _synchronous(store) == 1  # NORMAL throughout, as configured
    finally:
        store.close()
