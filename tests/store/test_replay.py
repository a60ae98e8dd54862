"""Metadata written again after a failed commit (``ops.REPLAYABLE``): applying the
tail of the ops once more leaves the store as applying them once did."""

from __future__ import annotations

from collections.abc import Callable

from amqplite import storeops as O
from amqplite.store.engine import Store


def test_a_replayed_vhost_delete_keeps_the_queues_created_after_it(
        make_store: Callable[..., Store]) -> None:
    """A vhost deleted and created again with a queue holding a message; the delete
    is then written again (its first commit seemed to fail), keeping that queue."""
    store = make_store()
    store.start()
    old = [O.PutVHost("v"), O.PutQueue(1, "v", "old")]
    again = [O.DeleteVHost("v"), O.PutVHost("v"), O.PutQueue(2, "v", "new"),
             O.PutBinding("v", "amq.direct", "new", "queue", "k")]
    entry = [O.PutMessage(10, "", "new", b"", b"body"), O.PutEntry(2, 1, 10)]
    store.submit(old + again + entry)
    store.flush(10)
    # the repair carries the delete and every later metadata op, in order
    replayed = [O.DeleteVHost("v", keep_queues=(2,)), *again[1:]]
    store.submit(replayed)
    store.flush(10)
    rec = store.load()
    assert {q.queue_id: q.name for q in rec.queues} == {2: "new"}
    assert [e.body for e in rec.entries[2]] == [b"body"]
    assert [(b.destination, b.routing_key) for b in rec.bindings] == [("new", "k")]


def test_replaying_metadata_after_later_ops_ends_as_memory(
        make_store: Callable[..., Store]) -> None:
    """Declare, then a later delete commits first; the declare is written again with
    the delete after it: the queue stays deleted."""
    store = make_store()
    store.start()
    store.submit([O.PutQueue(1, "/", "a"), O.PutExchange("/", "x", "direct")])
    store.submit([O.DeleteQueue(1), O.DeleteExchange("/", "x")])
    store.flush(10)
    store.submit([O.PutQueue(1, "/", "a"), O.PutExchange("/", "x", "direct"),
                  O.DeleteQueue(1), O.DeleteExchange("/", "x")])
    store.flush(10)
    rec = store.load()
    assert rec.queues == [] and all(x.name != "x" for x in rec.exchanges)
