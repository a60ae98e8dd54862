"""Only what must survive a power loss is fsynced: delivery-log rows and stream
appends (as RabbitMQ's streams) commit without it."""

from __future__ import annotations

from pathlib import Path

from amqplite.store import committer
from amqplite.store.engine import Store
from amqplite.storeops import (
    AppendStream,
    AppendStreams,
    DeleteEntry,
    DeleteStreamSegments,
    LogEvent,
    PutEntry,
    PutMessage,
    PutQueue,
    PutStreamSegment,
    UpdateEntry,
)


def _row(i: int) -> tuple[object, ...]:
    return (i, "published", "/", "", "q", None, None, i, None, None, 10, None)


def test_log_rows_alone_do_not_need_an_fsync() -> None:
    assert not committer.needs_fsync([[_row(1), _row(2)], [LogEvent(1, "acked", "/", "", "q")]])
    assert committer.needs_fsync([[_row(1)], [_row(2), PutQueue(1, "/", "q")]])
    assert committer.needs_fsync([[], [PutMessage(1, "", "q", b"", b"x")]])


def test_stream_appends_alone_do_not_need_an_fsync() -> None:
    """RabbitMQ confirms a stream entry once written, never fsynced: so do we; a
    classic queue's message in the same group still makes it an fsynced commit."""
    appends = [PutStreamSegment(1, 2, 0, 0, 0, 0, 0), AppendStreams(1, [(0, 2, 5, 9, 1, b"r")]),
               AppendStream(1, 1, 2, 5, 10, 1, b"r"), DeleteStreamSegments(1, 1, 0), _row(3)]
    assert not committer.needs_fsync([appends])
    assert committer.needs_fsync([appends, [PutEntry(1, 1, 1)]])


def test_a_group_whose_inserts_and_acks_cancel_needs_no_fsync() -> None:
    """A message delivered and acked before its insert committed is never written:
    the publisher's confirm (a receipt) then waits for no fsync. Anything left over
    (another queue's entry, an ack of an older row, metadata) still gets one."""
    published = [PutMessage(7, "", "q", b"", b"x"), PutEntry(1, 3, 7)]
    acked = [UpdateEntry(1, 3, 1, False), DeleteEntry(1, 3, 7), _row(7)]
    assert not committer.needs_fsync([published, acked])
    assert committer.needs_fsync([published])
    assert committer.needs_fsync([published, acked, [DeleteEntry(1, 2, 6)]])
    assert committer.needs_fsync([[*published, PutEntry(2, 1, 7)], acked])
    assert committer.needs_fsync([published, [PutQueue(2, "/", "r")], acked])
    assert committer.needs_fsync([[DeleteEntry(1, 3, 7)], published])


def _commit_each(db: Path, batches: list[list[object]]) -> tuple[list[int], list[int]]:
    """Commit ``batches`` one by one: the writer's synchronous setting after each
    (1 NORMAL, 2 FULL), and queue 1's entry positions once reopened."""
    store = Store(f"sqlite:///{db}")
    store.create()
    store.start()
    settings = []
    try:
        for ops in batches:
            store.submit(ops)
            store.flush(10)
            settings.append(_synchronous(store))
    finally:
        store.close()
    return settings, [e.position for e in Store(f"sqlite:///{db}").load().entries[1]]


def test_a_group_that_nets_to_nothing_commits_without_an_fsync(tmp_path: Path) -> None:
    assert _commit_each(tmp_path / "n.db", [
        [PutQueue(1, "/", "q")],
        [PutMessage(1, "", "q", b"", b"x"), PutEntry(1, 1, 1), DeleteEntry(1, 1, 1)],
        [PutMessage(2, "", "q", b"", b"y"), PutEntry(1, 2, 2)],
    ]) == ([2, 1, 2], [2])


def _synchronous(store: Store) -> int:
    """The writer connection's own setting, as SQLite reports it (1 NORMAL, 2 FULL)."""
    assert store.committer._conn is not None
    raw = store.committer._conn.connection.driver_connection
    assert raw is not None
    return int(raw.execute("PRAGMA synchronous").fetchone()[0])


def test_the_writer_switches_between_normal_and_full(tmp_path: Path) -> None:
    assert _commit_each(tmp_path / "s.db", [
        [_row(1)],
        [PutQueue(1, "/", "q"), PutMessage(1, "", "q", b"", b"x"), PutEntry(1, 1, 1)],
        [_row(2)],
    ]) == ([1, 2, 1], [1])


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


def test_the_wal_is_checkpointed_off_the_writer(tmp_path: Path) -> None:
    """A checkpointer thread copies the WAL into the database after commits (the
    writer's own automatic checkpoint is only a far backstop), and stops with
    the store."""
    from tests.brokerproc import wait_for

    path = tmp_path / "s.db"
    store = Store(f"sqlite:///{path}")
    store.create()
    store.start()
    try:
        store.submit([PutQueue(1, "/", "q")])
        body = b"x" * 64 * 1024
        for i in range(1, 200):  # about 13 MiB: well past SQLite's 1,000-page default
            store.submit([PutMessage(i, "", "q", b"", body), PutEntry(1, i, i)])
        store.flush(20)
        assert store.committer._conn is not None
        raw = store.committer._conn.connection.driver_connection
        assert raw is not None
        assert raw.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == \
            committer.BACKSTOP_CHECKPOINT_PAGES
        ckpt = store.committer._checkpointer
        assert ckpt is not None

        # the database file itself grows only by checkpoints, and the writer's
        # backstop (128 MiB of WAL) is far off: the checkpointer copied the pages
        wait_for(lambda: ckpt.runs > 0 and path.stat().st_size > 12 << 20, 20,
                 what="the checkpointer to copy the WAL into the database")
    finally:
        store.close(20)
    assert store.committer._checkpointer is None and not ckpt._thread.is_alive()
