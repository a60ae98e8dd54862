"""Kafka consumer groups' committed offsets are durable (issue 37): rows written through
the store survive a reopen of the real database file, a later commit replaces the
earlier (a lower offset too), deletions by group, by topic and with the vhost, and an
existing database without the table gains it at ``create``."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import create_engine, inspect, update

from amqplite.store import Store
from amqplite.store import schema as s
from amqplite.storeops import DeleteKafkaOffsets, DeleteVHost, PutKafkaOffset
from tests.pg_server import both_backends


def _at(vhost: str, group: str, topic: str, partition: int, offset: int,
        meta: str = "") -> PutKafkaOffset:
    return PutKafkaOffset(vhost, group, topic, partition, offset, meta, 1_700_000_000_000_000)


@both_backends
def test_offsets_survive_a_reopen_and_the_last_commit_wins(make_store: Callable[..., Store]
                                                           ) -> None:
    store = make_store()
    store.start()
    store.submit([_at("/", "g", "orders", 0, 10, "m0"), _at("/", "g", "orders", 1, 7),
                  _at("/", "g", "orders", 0, 42, "m1"), _at("/", "g", "orders", 1, 3)])
    store.flush(10)
    store.close(timeout=10)
    again = make_store()
    assert again.load().kafka_offsets == [_at("/", "g", "orders", 0, 42, "m1"),
                                          _at("/", "g", "orders", 1, 3)]


@both_backends
def test_offsets_go_by_group_by_topic_and_with_their_vhost(make_store: Callable[..., Store]
                                                           ) -> None:
    store = make_store()
    store.start()
    store.submit([_at(v, g, t, 0, 1) for v in ("/", "B") for g in ("g1", "g2")
                  for t in ("orders", "audit")])
    store.submit([DeleteKafkaOffsets("/", group_id="g1"), DeleteKafkaOffsets("/", topic="audit"),
                  DeleteVHost("B")])
    store.flush(10)
    assert store.load().kafka_offsets == [_at("/", "g2", "orders", 0, 1)]


def test_an_older_database_gains_the_table(db_url: str, make_store: Callable[..., Store]
                                           ) -> None:
    """A database written before the table existed (same schema version: nothing moves)
    gets it from ``create``, empty, and then stores offsets."""
    make_store().close()
    engine = create_engine(db_url)
    with engine.begin() as conn:
        s.kafka_offsets.drop(conn)
        conn.execute(update(s.meta).where(s.meta.c.key == "schema_version").values(value="4"))
    assert "kafka_offsets" not in inspect(engine).get_table_names()
    engine.dispose()
    store = make_store()
    assert store.load().kafka_offsets == []
    store.start()
    store.submit([_at("/", "g", "orders", 2, 99)])
    store.flush(10)
    assert store.load().kafka_offsets == [_at("/", "g", "orders", 2, 99)]
