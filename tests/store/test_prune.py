"""Pruning the delivery log: bounded batches through the writer, ids never reused."""

from __future__ import annotations

from amqplite.store import Store
from amqplite.storeops import LogEvent
from tests.pg_server import both_backends


def log_rows(n: int, start_ts: int = 0) -> list[LogEvent]:
    return [LogEvent(start_ts + i, "published", "/", "", "q", message_key=i) for i in range(n)]


@both_backends
def test_prune_in_batches(store: Store, raw) -> None:
    store.submit(log_rows(12_000))
    store.flush(10)
    groups = store.groups
    # Ids 1..10000 are below the watermark; only ts < 9000 (ids 1..9000) are old enough.
    deleted = store.prune_delivery_log(max_id=10_000, older_than_us=9_000, batch_size=1_000)
    assert deleted == 9_000
    assert store.groups - groups >= 9  # one short transaction per batch
    assert raw("SELECT min(id), max(id), count(*) FROM delivery_log") == [(9001, 12000, 3000)]
    assert store.prune_delivery_log(max_id=10_000, older_than_us=9_000) == 0


@both_backends
def test_ids_not_reused_after_pruning_everything(store: Store) -> None:
    store.submit(log_rows(10))
    store.flush(10)
    assert store.prune_delivery_log(max_id=10, older_than_us=10**18) == 10
    store.submit(log_rows(1))
    store.flush(10)
    assert [r["id"] for r in store.read_delivery_log()] == [11]
