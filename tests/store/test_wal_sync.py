"""The writer process commits under NORMAL and syncs the WAL itself, off its
committing thread, before it acknowledges what must survive a power loss."""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
from pathlib import Path
from typing import Any

from amqplite.store.base import StoreBase
from amqplite.store.committer import Committer
from amqplite.store.writer_frames import FrameBuffer, encode, recv_into
from amqplite.store.writer_main import WalSync, _Writer
from amqplite.storeops import DeleteEntry, PutEntry, PutMessage, PutQueue


def _row(i: int) -> tuple[object, ...]:
    return (i, "published", "/", "", "q", None, None, i, None, None, 10, None)


class _Running:
    """A writer on this process's threads, driven over a real socketpair."""

    def __init__(self, path: Path) -> None:
        self.db = StoreBase(f"sqlite:///{path}", "fsync", log_linger_s=0)
        self.db.create()
        self.committer = Committer(self.db.engine, "fsync", defer_sync=True)
        self.committer.prepare()
        self.wal = WalSync(str(path))
        self.ours, theirs = socket.socketpair()
        self.ours.settimeout(20)
        self.writer = _Writer(theirs, self.db, self.committer, self.wal)
        threading.Thread(target=self.writer.receive, daemon=True).start()
        self.result: list[int] = []
        self.thread = threading.Thread(target=lambda: self.result.append(self.writer.run()),
                                       daemon=True)
        self.thread.start()
        self.frames = FrameBuffer()

    def call(self, frame: tuple[Any, ...]) -> Any:
        self.ours.sendall(encode(frame))
        while (msg := self.frames.next()) is None:
            assert recv_into(self.ours, self.frames), "the writer hung up"
        return msg

    def stop(self) -> None:
        assert self.call(("x",)) == ("x", 0)
        self.thread.join(20)
        assert self.result == [0]
        self.ours.close()


def test_an_ack_owing_durability_follows_a_wal_sync_and_log_rows_need_none(
        tmp_path: Path) -> None:
    w = _Running(tmp_path / "w.db")
    try:
        assert w.committer.defers_sync
        ack = w.call(("s", 1, [PutQueue(1, "/", "q"), PutMessage(1, "", "q", b"", b"x"),
                               PutEntry(1, 1, 1)], True))
        assert ack[0] == "d" and ack[1] == [(1, None, None)]
        assert w.wal.syncs == 1  # the sender synced before it sent this
        ack = w.call(("s", 2, [_row(1), _row(2)], True))
        assert ack[1] == [(2, None, None)]
        assert w.wal.syncs == 1  # log rows alone owe no sync
        ack = w.call(("s", 3, [PutMessage(2, "", "q", b"", b"y"), PutEntry(1, 2, 2),
                               DeleteEntry(1, 2, 2), _row(3)], True))
        assert ack[1] == [(3, None, None)]
        assert w.wal.syncs == 1  # nor a message acked before its insert was written
        ack = w.call(("s", 4, [DeleteEntry(1, 1, 1)], True))
        assert w.wal.syncs == 2  # an ack of a stored message does
        conn = w.committer._conn
        assert conn is not None and conn.connection.driver_connection is not None
        # the commit itself never waits for a sync
        assert conn.connection.driver_connection.execute("PRAGMA synchronous").fetchone()[0] == 1
    finally:
        w.stop()
        w.db.engine.dispose()


def test_the_wal_sync_follows_a_new_wal_file(tmp_path: Path) -> None:
    path = tmp_path / "n.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    wal = WalSync(str(path))
    wal.sync()
    first = os.stat(wal.path).st_ino
    conn.close()  # the last connection: SQLite checkpoints and removes the WAL
    assert not os.path.exists(wal.path)
    wal.sync()  # nothing to sync: the database holds it all
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO t VALUES (2)")
    conn.commit()
    try:
        wal.sync()
        st = os.stat(wal.path)
        assert st.st_ino != first  # a new file: the old descriptor is held until now
        assert wal._ino == (st.st_dev, st.st_ino) and wal.syncs == 2
    finally:
        conn.close()
