"""What every store has, whoever commits for it: the database, its life cycle, reads.

:class:`~amqplite.store.writer.ProcessStore` (the broker's: its writer is a
child process) and :class:`~amqplite.store.engine.Store` (a writer thread in
this process: tests and tools) both build on :class:`StoreBase`; neither
inherits the other's way of writing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from sqlalchemy import bindparam, select

from . import lifecycle
from . import schema as s
from .api import LOG_LINGER_S, Callback, Recovered, StoreClosed
from .committer import open_engine
from .reads import StoreReads

log = logging.getLogger(__name__)

__all__ = ["LOG_LINGER_S", "Callback", "StoreBase", "StoreClosed"]


class StoreBase(StoreReads):
    """The database of a store: its engine (reads use pooled connections of their
    own, safe from any thread), schema, recovery and clean-stop mark."""

    def __init__(self, url: str, durability: str = "fsync", *, busy_timeout_ms: int = 10_000,
                 log_linger_s: float = LOG_LINGER_S) -> None:
        self.url = url
        self.durability = durability
        self.busy_timeout_ms = busy_timeout_ms
        #: how long a log-only group waits for company (0: commit at once)
        self.log_linger_s = log_linger_s
        self.engine = open_engine(url, durability, busy_timeout_ms)
        self._closed = False

    def create(self) -> None:
        """Create the tables if missing and stamp the schema version (idempotent)."""
        lifecycle.create(self.engine)

    def mark_open(self) -> None:
        """Record that a broker runs on this database (call after ``load``)."""
        lifecycle.mark_open(self.engine)

    def load(self, body_window: int = 1000,
             settled: Callable[[Recovered], Collection[int]] | None = None) -> Recovered:
        """Clean up orphans and read everything durable back (call before ``start``);
        ``settled``: lifecycle.load's."""
        return lifecycle.load(self.engine, body_window, settled)

    def recover(self, body_window: int = 1000) -> Recovered:
        """lifecycle.recover's: ``load`` without marking anything redelivered."""
        return lifecycle.recover(self.engine, body_window)

    def mark_redelivered(self, queue_ids: Collection[int]) -> None:
        lifecycle.mark_redelivered(self.engine, queue_ids)

    def mark_clean(self) -> None:
        """Record a clean stop (every submission committed)."""
        lifecycle.mark_clean(self.engine)

    def prune_range(self, lo: int, max_id: int, older_than_us: int,
                    batch_size: int = 5000) -> int | None:
        """The last event id of the next range of about ``batch_size`` log events after
        ``lo`` that a prune may delete (``id <= max_id``, a whole batch older than
        ``older_than_us``); None when there is none. A read: any thread."""
        b = s.log_batches
        find = (
            select(b.c.last_id, b.c.count)
            .where(b.c.first_id > bindparam("lo"), b.c.last_id <= max_id,
                   b.c.last_ts_us < older_than_us)
            .order_by(b.c.first_id)
            .limit(max(1, batch_size))
        )
        hi, n = None, 0
        with self.engine.connect() as conn:
            for last_id, count in conn.execute(find, {"lo": lo}):
                hi, n = last_id, n + count
                if n >= batch_size:
                    break
        return None if hi is None else int(hi)

    def _finish(self, clean: bool) -> None:
        """Record a clean stop if there was one, and let the database go."""
        if clean:
            try:
                lifecycle.mark_clean(self.engine)
            except Exception:
                log.exception("could not record the clean shutdown")
        self._closed = True
        self.engine.dispose()

    def __enter__(self) -> StoreBase:
        return self

    def close(self, timeout: float | None = None, *, clean: bool = False) -> None:
        raise NotImplementedError

    def __exit__(self, *exc: object) -> None:
        self.close()
