"""The store with a writer thread in this process: for tests and tools, not the broker.

The broker writes through :class:`~amqplite.store.writer.ProcessStore` (its
writer is a child process, so SQLite's work runs on another core and no lock
or thread check sits on the event loop's path). This class keeps the same
group commit (:class:`~amqplite.store.committer.Committer`) behind a plain
blocking interface (``submit`` from any thread, ``flush``, ``prune_delivery_log``)
for what has no event loop to pump a socket: the store's own tests, tests of
the broker core with a real database, and ``scripts/bench_store.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from amqplite.storeops import CLEAN_KEY, Op

from .api import PruneRange
from .base import LOG_LINGER_S, Callback, StoreBase, StoreClosed
from .committer import Committer, needs_fsync

__all__ = ["CLEAN_KEY", "LOG_LINGER_S", "Callback", "Store", "StoreClosed"]

log = logging.getLogger(__name__)


class Store(StoreBase):
    """Durable state in one database, written by one thread of this process.

    Thread model: ``submit`` may be called from any thread; the callbacks run
    on the writer thread. Reads use pooled connections of their own and may
    run concurrently with the writer.
    """

    def __init__(self, url: str, durability: str = "fsync", *, busy_timeout_ms: int = 10_000,
                 log_linger_s: float = LOG_LINGER_S):
        super().__init__(url, durability, busy_timeout_ms=busy_timeout_ms,
                         log_linger_s=log_linger_s)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self._pending: list[tuple[Sequence[Op], Callback | None]] = []
        self._submitted = 0
        self._completed = 0
        self._idle = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.committer = Committer(self.engine, durability, pause=self._pause)
        self._lingering = False
        self._urgent = False

    @property
    def failing(self) -> str | None:
        """Why writes fail right now (being retried), else None."""
        return self.committer.failing

    @property
    def on_failing(self) -> Callable[[str | None], None] | None:
        """Called on the writer thread with ``failing`` whenever it changes."""
        return self.committer.on_failing

    @on_failing.setter
    def on_failing(self, hook: Callable[[str | None], None] | None) -> None:
        self.committer.on_failing = hook

    @property
    def last_group_size(self) -> int:
        return self.committer.last_group_size

    @property
    def groups(self) -> int:
        """Committed (or failed) groups so far."""
        return self.committer.groups

    @property
    def failed_submissions(self) -> int:
        """Submissions whose commit failed for good (a clean stop needs none)."""
        return self.committer.failed

    def start(self) -> None:
        """Start the writer thread (once)."""
        if self._thread is not None:
            raise RuntimeError("store already started")
        if self._closed:
            raise StoreClosed("store is closed")
        self._thread = threading.Thread(target=self._run, name="amqplite-store-writer", daemon=True)
        self._thread.start()

    def submit(self, ops: Sequence[Op], callback: Callback | None = None, *,
               urgent: bool = False) -> None:
        """Queue ops for the next group; ``callback(None | error)`` runs after its commit.

        ``urgent``: someone waits on this commit, so a group of log rows must not
        linger for it. Never blocks on I/O. Do not mutate ``ops`` after submitting it.
        """
        with self._lock:
            if self._stopping:
                raise StoreClosed("store is closed")
            self._pending.append((ops, callback))
            self._submitted += 1
            if urgent:
                self._urgent = True
            if self._idle:
                self._idle = False
                self._wake.notify()
            elif self._lingering and (self._urgent or needs_fsync((ops,))):
                self._urgent = True  # someone waits on this one: stop lingering
                self._wake.notify()

    def flush(self, timeout: float | None = None) -> None:
        """Block until everything submitted before this call has committed (or failed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            target = self._submitted
            if self._completed >= target:
                return
            if self._thread is None:
                raise RuntimeError("store not started: nothing will ever commit")
            while self._completed < target:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("store flush timed out")
                self._done.wait(remaining)

    def close(self, timeout: float | None = None, *, clean: bool = False) -> None:
        """Flush, stop the writer and dispose the engine (idempotent).

        ``clean``: every submission committed, so the next start may trust the
        stored redelivered flags.
        """
        if self._closed:
            return
        if self._thread is not None:
            with self._lock:
                self._stopping = True
                self.committer.stopping = True
                self._wake.notify()
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError("store writer did not stop in time")
        with self._lock:
            self._stopping = True
            if self._pending:
                log.warning("store closed before start: %d submissions dropped", len(self._pending))
                clean = False
            if self.committer.failed:
                clean = False
        self.committer.close()
        self._finish(clean and self._thread is not None)

    def _pause(self, seconds: float) -> None:
        """Between retries of a failing commit: ``close`` wakes it early."""
        with self._lock:
            if not self._stopping:
                self._wake.wait(seconds)

    def _run(self) -> None:
        lock, wake, done = self._lock, self._wake, self._done
        while True:
            with lock:
                while not self._pending and not self._stopping:
                    self._idle = True
                    wake.wait()
                self._idle = False
                if not self._pending:
                    break
                group, self._pending = self._pending, []
                if (self.log_linger_s > 0 and not self._stopping and not self._urgent
                        and not needs_fsync([ops for ops, _cb in group])):
                    group += self._linger()
                self._urgent = False
            errors = self.committer.commit_group([ops for ops, _cb in group])
            for (_ops, callback), error in zip(group, errors, strict=True):
                if callback is not None:
                    try:
                        callback(error)
                    except Exception:
                        log.exception("store callback raised")
            with lock:
                self._completed += len(group)
                done.notify_all()

    def _linger(self) -> list[tuple[Sequence[Op], Callback | None]]:
        """Called with the lock held, for a group of log rows only: wait up to
        ``log_linger_s`` for more, unless work someone waits on (or close) comes
        first; then take everything that arrived meanwhile."""
        deadline = time.monotonic() + self.log_linger_s
        self._lingering = True
        try:
            while not self._stopping and not self._urgent:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._wake.wait(remaining)
        finally:
            self._lingering = self._urgent = False
        more, self._pending = self._pending, []
        return more

    def prune_delivery_log(self, max_id: int, older_than_us: int, batch_size: int = 5000) -> int:
        """Delete the log's events with ``id <= max_id`` and ``ts_us < older_than_us``,
        a whole batch at a time (``logbatch``); the number of events deleted.

        Works in ranges of about ``batch_size`` events (:meth:`prune_range`), each
        deleted by the writer inside an ordinary group. Blocks the calling thread.
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError("prune_delivery_log would deadlock on the writer thread")
        total, lo = 0, 0
        while (hi := self.prune_range(lo, max_id, older_than_us, batch_size)) is not None:
            op = PruneRange(lo, hi, older_than_us)
            self._submit_and_wait([op])
            total += op.deleted
            lo = op.hi
        return total

    def _submit_and_wait(self, ops: Sequence[Any], timeout: float | None = None) -> None:
        done = threading.Event()
        outcome: list[BaseException | None] = []

        def callback(error: BaseException | None) -> None:
            outcome.append(error)
            done.set()

        self.submit(ops, callback)
        if not done.wait(timeout):
            raise TimeoutError("store did not commit in time")
        if outcome[0] is not None:
            raise outcome[0]

    def __enter__(self) -> Store:
        return self
