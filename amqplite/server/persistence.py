"""Bridge from the broker's store operations to the store's writer thread.

Operations gathered while the event loop handles a burst of frames are handed
to the store as one submission; the store folds every pending submission into
one transaction (group commit). Work that must wait for durability (publisher
confirms, tx.commit-ok, evicting bodies from RAM) is queued as a waiter on
the submission and runs back on the event loop once it has committed.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import trio

from amqplite.broker.core import Broker
from amqplite.server.counters import Counters
from amqplite.store.engine import Store

Waiter = Callable[[BaseException | None], None]

#: Stop reading from publishers while this many ops wait for the writer.
HIGH_WATER_OPS = 200_000


class Persistence:
    def __init__(self, store: Store, broker: Broker, high_water: int = HIGH_WATER_OPS,
                 counters: Counters | None = None) -> None:
        self.store = store
        self.broker = broker
        self.high_water = high_water
        #: commit latency, group sizes and dead-lettering for the metrics
        self.counters = counters or Counters()
        self._token: trio.lowlevel.TrioToken | None = None
        self._ops: list[Any] = []
        self._waiters: list[Waiter] = []
        self.inflight = 0  # submissions handed to the store, not yet called back
        self.inflight_ops = 0
        self._capacity = trio.Event()
        self._capacity.set()
        self._idle = trio.Event()
        self._idle.set()
        #: why store writes fail right now (they are being retried), else None
        self.failing: str | None = None
        #: free disk space is below disk_free_limit (set by the disk monitor)
        self.disk_alarm = False
        #: counts the times capacity ran out: a connection is blocked only if it
        #: publishes during the current one (RabbitMQ's "blocking" state)
        self.alarm_epoch = 0

    def bind_loop(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        token = self._token
        self.store.on_failing = lambda reason: token.run_sync_soon(self._store_failing, reason)

    def _store_failing(self, reason: str | None) -> None:
        """The writer retries a failing commit: block publishers until it passes."""
        self.failing = reason
        self._update_capacity()

    def set_disk_alarm(self, on: bool) -> None:
        """The disk monitor's verdict: another reason to stop taking publishes."""
        if on != self.disk_alarm:
            self.disk_alarm = on
            self._update_capacity()

    def _update_capacity(self) -> None:
        """The one place that decides whether publishers may go on."""
        if self.failing is not None or self.disk_alarm or self.inflight_ops > self.high_water:
            if self._capacity.is_set():
                self._capacity = trio.Event()
                self.alarm_epoch += 1
        elif self.inflight_ops <= self.high_water // 2:
            self._capacity.set()

    @property
    def block_reason(self) -> str:
        """What connection.blocked tells clients (RabbitMQ names its disk alarm the same)."""
        if self.failing is not None or self.disk_alarm:
            return "low on disk"
        return "low on disk write capacity"

    def add_waiter(self, fn: Waiter) -> None:
        """Run ``fn`` after everything submitted so far (and in this batch) commits."""
        self._waiters.append(fn)

    @property
    def batch_has_ops(self) -> bool:
        return bool(self._ops) or bool(self.broker.store_ops)

    def flush(self) -> None:
        """Hand the gathered operations and waiters to the store (non-blocking)."""
        b = self.broker
        if b.store_ops:
            self.counters.log_rows(b.store_ops)
            self._ops.extend(b.store_ops)
            b.store_ops.clear()
        evict = b.evictable
        if evict:
            b.evictable = []
            self._waiters.append(functools.partial(self._evict, evict))
        if not self._ops and not self._waiters:
            return
        ops, waiters = self._ops, self._waiters
        self._ops, self._waiters = [], []
        if not ops and self.inflight == 0:
            for w in waiters:
                w(None)
            return
        self.inflight += 1
        self.inflight_ops += len(ops)
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        self._update_capacity()
        token = self._token
        assert token is not None, "bind_loop() first"
        store, started = self.store, time.monotonic()

        def committed(err: BaseException | None) -> None:
            # writer thread -> event loop; every submission of a group sees the same
            # ``groups`` (the writer counts the group once all its callbacks ran)
            token.run_sync_soon(self._done, waiters, ops, err, started, store.groups)

        self.store.submit(ops, committed)

    def _evict(self, entries: list[Any], err: BaseException | None) -> None:
        """After a commit, bodies deep in their queue may leave RAM (they are on disk)."""
        if err is None:
            self.broker.commit_done(entries)

    def _done(self, waiters: list[Waiter], ops: list[Any], err: BaseException | None,
              started: float, group: int) -> None:
        self.counters.committed(time.monotonic() - started, group)
        self.inflight -= 1
        self.inflight_ops -= len(ops)
        if err is not None:
            # nacked publishes must not be delivered as well: take them back
            self.broker.commit_failed(ops)
        for w in waiters:
            w(err)
        self._update_capacity()
        if self.inflight == 0:
            self._idle.set()

    async def committed(self) -> None:
        """Wait until everything submitted so far has committed (or failed)."""
        if self.inflight == 0 and not self.batch_has_ops and not self._waiters:
            return
        done = trio.Event()
        self.add_waiter(lambda _err: done.set())
        self.flush()
        await done.wait()

    @property
    def has_capacity(self) -> bool:
        return self._capacity.is_set()

    async def wait_capacity(self) -> None:
        """Publishers pause here while the writer is far behind."""
        await self._capacity.wait()

    async def wait_idle(self) -> None:
        self.flush()
        await self._idle.wait()
