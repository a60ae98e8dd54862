"""A database's life: create or upgrade the schema, mark a broker running, record a
clean stop, read everything back at start.

Why apart from the commits: these run before the first group and after the
last, each in a transaction of its own (the broker's writer process runs them
when the broker asks: ``store.writer_main``; a thread store on its own
connections). Plain functions of an engine, so any store and tools can call them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from sqlalchemy import Engine, insert, select, update

from amqplite.storeops import CLEAN_KEY

from . import recovery
from . import schema as s
from .api import Recovered, redelivered_queues
from .apply import upsert
from .logsql import create_views
from .upgrade import (
    delivery_log_to_batches,
    messages_persistent,
    mqtt_tables_by_vhost,
    parameters_defined_by,
    stream_entries_to_chunks,
)

__all__ = ["CLEAN_KEY", "create", "load", "mark_clean", "mark_open", "mark_redelivered",
           "recover"]


def create(engine: Engine) -> None:
    """Create the tables if missing and stamp the schema version (idempotent); an older
    version this one can upgrade is upgraded in the same transaction."""
    s.metadata.create_all(engine)
    with engine.begin() as conn:
        rows = dict(conn.execute(select(s.meta.c.key, s.meta.c.value)).all())
        version = rows.get("schema_version")
        parameters_defined_by(conn)  # columns only: no version change
        messages_persistent(conn)
        if version is not None and int(version) in s.UPGRADABLE_VERSIONS:
            # create_all above added the missing tables; version 2's stream rows
            # move into chunks, and older delivery-log rows into batches
            # and the MQTT tables get their (vhost, client id) keys
            # (store/upgrade.py), in this same transaction
            if int(version) == 2:
                stream_entries_to_chunks(conn)
            delivery_log_to_batches(conn)
            mqtt_tables_by_vhost(conn)
            conn.execute(update(s.meta).where(s.meta.c.key == "schema_version")
                         .values(value=str(s.SCHEMA_VERSION)))
        elif version is not None and int(version) != s.SCHEMA_VERSION:
            raise RuntimeError(
                f"database schema version {version}, this amqplite needs {s.SCHEMA_VERSION}"
            )
        defaults = {
            "schema_version": str(s.SCHEMA_VERSION),
            "max_message_id": "0",
            "max_queue_id": "0",
        }
        missing = [{"key": k, "value": v} for k, v in defaults.items() if k not in rows]
        if missing:
            conn.execute(insert(s.meta), missing)
        create_views(conn)


def mark_open(engine: Engine) -> None:
    """Record that a broker runs on this database (after ``load``): until
    :func:`mark_clean` records the opposite, a later ``load`` sees an unclean
    shutdown (deliveries may have reached clients whose "delivered" marks never
    committed)."""
    with engine.begin() as conn:
        upsert(conn, s.meta, {"key": CLEAN_KEY}, {"value": "0"})


def mark_clean(engine: Engine) -> None:
    """Record a clean stop: every submission committed, so the next start may trust
    the stored redelivered flags."""
    with engine.begin() as conn:
        upsert(conn, s.meta, {"key": CLEAN_KEY}, {"value": "1"})


def load(engine: Engine, body_window: int = 1000,
         settled: Callable[[Recovered], Collection[int]] | None = None) -> Recovered:
    """Clean up orphans and read everything durable back (before the writer starts).
    After an unclean stop the spilled entries are marked redelivered, except in the
    queues ``settled`` names (ids whose stored flags hold: server/recovery.py)."""
    with engine.begin() as conn:
        recovery.clean_up(conn)
        rec = recovery.load(conn, body_window)
        if queues := redelivered_queues(rec, settled):
            recovery.mark_redelivered(conn, queues)
        return rec


def recover(engine: Engine, body_window: int = 1000) -> Recovered:
    """:func:`load`'s first transaction alone, for a caller in another process: the
    broker decides which queues' flags hold and sends :func:`mark_redelivered` the
    rest. A crash between the two leaves the unclean mark, so the next start marks
    them again."""
    with engine.begin() as conn:
        recovery.clean_up(conn)
        return recovery.load(conn, body_window)


def mark_redelivered(engine: Engine, queue_ids: Collection[int]) -> None:
    """Mark the stored entries of these queues redelivered (after an unclean stop)."""
    if queue_ids:
        with engine.begin() as conn:
            recovery.mark_redelivered(conn, list(queue_ids))
