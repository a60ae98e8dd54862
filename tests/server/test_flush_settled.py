"""``Persistence.flush_settled`` with the real store writer: the receipts of a
batch whose messages were acked in it leave at once while only delivery-log
rows are in flight, and go with a commit while a durable one is;
``Persistence.batches`` counts the batches that end (a STOMP hold deadline
armed for one lapses with it)."""

from __future__ import annotations

from pathlib import Path

import trio

from amqplite.broker.core import Broker
from amqplite.server.persistence import Persistence
from amqplite.store.writer import ProcessStore
from amqplite.storeops import DeleteEntry, PutEntry, PutMessage
from tests.broker.conftest import TRANSIENT, session_channel


def _settled(queue_id: int, mid: int) -> list[object]:
    """A message published and acked within one batch."""
    return [PutMessage(mid, "", "q", b"", b"x", True), PutEntry(queue_id, mid, mid),
            DeleteEntry(queue_id, mid, mid)]


async def test_receipts_of_a_settled_batch_do_not_wait_for_log_rows_in_flight(
        tmp_path: Path) -> None:
    store = ProcessStore(f"sqlite:///{tmp_path / 's.db'}", log_linger_s=0)
    store.start()
    await trio.to_thread.run_sync(store.create)
    b = Broker()
    p = Persistence(store, b)
    p.bind_loop()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(p.pump)
            _s, ch = session_channel(b)
            b.queue_declare(ch, "q", durable=True)
            out = b.take_outcome()
            p.submit(out.store_ops, out.log)
            await p.committed()
            qid = b.vhosts["/"].queues["q"].id

            b.basic_publish(ch, "", "q", TRANSIENT, b"t")  # a log row, nothing durable
            out = b.take_outcome()
            assert out.log and not out.store_ops
            p.submit([], out.log)
            p.flush(force=True)
            assert p.inflight == 1  # the log rows' commit, not called back yet (no await)

            released: list[BaseException | None] = []
            p.submit(_settled(qid, 1_000_001))
            p.add_waiter(released.append)
            batches = p.batches
            p.flush_settled()
            assert released == [None]  # no commit, and no wait for the log rows
            assert p.inflight == 1 and p.batches == batches + 1
            await p.committed()

            p.submit([PutMessage(1_000_002, "", "q", b"", b"y", True),
                      PutEntry(qid, 1_000_002, 1_000_002)])
            p.flush()  # a durable commit in flight: the next receipts wait for it
            p.submit(_settled(qid, 1_000_003))
            p.add_waiter(released.append)
            p.flush_settled()
            assert released == [None]
            await p.committed()
            assert released == [None, None]
            nursery.cancel_scope.cancel()
    finally:
        await trio.to_thread.run_sync(store.close)
