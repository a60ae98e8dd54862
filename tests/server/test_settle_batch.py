"""A message delivered and acked while its insert still waits in the shell's batch
leaves the batch unwritten (``Persistence.flush_settled``, and ``Persistence.flush``
while acks hold a batch behind the commit in flight): plain calls, and one run
against a real writer process."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import trio

from amqplite.storeops import (
    DeleteEntry,
    DeleteQueue,
    PutEntry,
    PutMessage,
    UpdateEntry,
    settle_batch,
)


def _published(mid: int, *queues: int) -> list[object]:
    return [PutMessage(mid, "", "q", b"", b"x", True), *(PutEntry(q, mid, mid) for q in queues)]


def test_an_insert_acked_in_the_same_batch_is_never_written() -> None:
    ops = [*_published(1, 1), *_published(2, 1), UpdateEntry(1, 1, 1, False),
           DeleteEntry(1, 1, 1)]
    assert settle_batch(ops) == _published(2, 1)


def test_a_message_stays_while_another_queue_still_holds_it() -> None:
    ops = [*_published(1, 1, 2), DeleteEntry(1, 1, 1)]
    assert settle_batch(ops) == [PutMessage(1, "", "q", b"", b"x", True), PutEntry(2, 1, 1)]


def test_acks_of_rows_written_before_and_metadata_in_between_stay() -> None:
    older = [DeleteEntry(1, 9, 9)]
    assert settle_batch(older) == older
    across = [*_published(1, 1), DeleteQueue(2), DeleteEntry(1, 1, 1)]
    assert settle_batch(across) == across
    untouched = _published(3, 1)
    assert settle_batch(untouched) is untouched


def test_a_batch_with_metadata_goes_as_it_is() -> None:
    """A later op may read a cancelled message's row, and the row without its entry
    pair would be written as an orphan: the store's Applier cancels the pair within
    its segment instead (it once dropped the pair and kept the row)."""
    ops = [*_published(1, 1), DeleteEntry(1, 1, 1), DeleteQueue(2)]
    assert settle_batch(ops) is ops


async def test_acks_hold_the_batch_behind_the_commit_in_flight(tmp_path: Path) -> None:
    """While consumers ack and a submission is in the writer, the next batch waits for
    its commit, and a message published, delivered and acked meanwhile is never
    handed over (the writer commits one group, not two)."""
    from amqplite.broker.core import Broker
    from amqplite.server.interpreter import Interpreter
    from amqplite.server.persistence import Persistence
    from amqplite.store.writer import ProcessStore
    from tests.broker.conftest import PERSISTENT

    url = f"sqlite:///{tmp_path / 'amqplite.db'}"
    store = ProcessStore(url, log_linger_s=0)
    store.start()
    store.create()
    store.load()
    broker = Broker(log_level="off")  # log rows would carry message keys too
    persistence = Persistence(store, broker)
    persistence.bind_loop()
    interpreter = Interpreter(broker, persistence, lambda _e: None)
    broker.add_vhost("/")
    s = broker.open_session("guest", "/")
    pub, sub = broker.open_channel(s, 1), broker.open_channel(s, 2)
    broker.queue_declare(pub, "kept", durable=True)
    broker.queue_declare(pub, "acked", durable=True)
    broker.basic_consume(sub, "acked", "c")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(persistence.pump)
        broker.basic_publish(pub, "", "acked", PERSISTENT, b"warm")  # delivered, tag 1
        interpreter.apply(broker.take_outcome())
        await persistence.committed()
        lock = sqlite3.connect(tmp_path / "amqplite.db", timeout=20, isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")  # the next commit waits for this lock
        broker.basic_publish(pub, "", "kept", PERSISTENT, b"kept")
        interpreter.apply(broker.take_outcome())
        assert persistence.inflight == 1
        broker.basic_ack(sub, 1)  # consumers ack: the batch waits for the commit in flight
        interpreter.apply(broker.take_outcome())
        broker.basic_publish(pub, "", "acked", PERSISTENT, b"acked")  # delivered, tag 2
        interpreter.apply(broker.take_outcome())
        broker.basic_ack(sub, 2)
        interpreter.apply(broker.take_outcome())
        assert persistence.inflight == 1 and persistence.batch_has_ops, "held"
        lock.execute("ROLLBACK")
        lock.close()
        with trio.fail_after(30):
            await persistence.committed()
        nursery.cancel_scope.cancel()
    store.close(20)
    db = sqlite3.connect(tmp_path / "amqplite.db")
    assert [r[0] for r in db.execute("SELECT body FROM messages")] == [b"kept"]
    # the writer raises its message key mark with every message it is handed
    (mark,) = db.execute("SELECT value FROM meta WHERE key = 'max_message_id'").fetchone()
    db.close()
    assert int(mark) == 2, "the acked message (key 3) never reached the writer"
