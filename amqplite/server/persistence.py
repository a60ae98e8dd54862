"""Bridge from the broker's store operations to the store's writer thread.

Operations gathered while the event loop handles a burst of frames are handed
to the store as one submission; the store folds every pending submission into
one transaction (group commit). Work that must wait for durability (publisher
confirms, tx.commit-ok, evicting bodies from RAM) is queued as a waiter on
the submission and runs back on the event loop once it has committed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import trio

from amqplite.broker.core import Broker
from amqplite.server.counters import Counters
from amqplite.store.engine import Store
from amqplite.store.logbatch import LogBuffer
from amqplite.store.writer import ProcessStore

Waiter = Callable[[BaseException | None], None]


def log_alarm(log: logging.Logger, was: bool, now: bool, raised: str, cleared: str,
              *args: object) -> None:
    """Warn when a resource alarm is raised or cleared (operators grep for these lines)."""
    if now and not was:
        log.warning(raised, *args)
    elif was and not now:
        log.warning(cleared, *args)

#: Log rows held back (see ``Persistence.flush``) are handed over at this many.
DEFER_MAX_OPS = 3000
#: ... or after this long. The writer process commits them at once (it does not
#: linger again), so a kill -9 loses at most this much of the log plus one
#: commit. Why 100 ms and not less: each hand-over is a commit, about 0.5 ms of
#: the writer's CPU; at 50 ms a trickle of transient traffic (S6) spent 1.4 %
#: of a core there, at 100 ms half that.
LOG_DEFER_S = 0.1

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
        self._loop_thread: int | None = None
        #: set when frames wait for the writer process's socket to take them
        self._output = trio.Event()
        #: log rows only, held back until this (trio) time; see ``flush``
        self._deferred_at: float | None = None
        self._can_defer = False
        self._ops: list[Any] = []
        #: delivery-log rows, encoded as they come (see LogBuffer)
        self._log = LogBuffer()
        self._waiters: list[Waiter] = []
        self.inflight = 0  # submissions handed to the store, not yet called back
        self.inflight_ops = 0
        self._capacity = trio.Event()
        self._capacity.set()
        self._idle = trio.Event()
        self._idle.set()
        #: why store writes fail right now (they are being retried), else None
        self.failing: str | None = None
        #: resource alarms in force ("disk", "memory"), set by the monitors
        self.alarms: set[str] = set()
        #: counts the times capacity ran out: a connection is blocked only if it
        #: publishes during the current one (RabbitMQ's "blocking" state)
        self.alarm_epoch = 0
        #: called once the waiters of the commits acknowledged together have run
        #: (the interpreter writes the confirms they released then)
        self.on_commits: Callable[[], None] | None = None
        #: ``pump`` is running the callbacks of one read of acknowledgements
        self._in_acks = False

    def bind_loop(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        token = self._token
        self._loop_thread = threading.get_ident()
        self._output = trio.Event()
        store = self.store
        if isinstance(store, ProcessStore):
            # the writer process's socket is pumped by this loop (see ``pump``)
            store.on_failing = self._store_failing
            store.on_output = self._output_waiting
            store.on_socket_closing = trio.lowlevel.notify_closing
            self._can_defer = True
        else:
            store.on_failing = lambda reason: token.run_sync_soon(self._store_failing, reason)

    def _output_waiting(self) -> None:
        """Frames wait for the writer's socket: wake ``_pump_out`` (from any thread)."""
        if threading.get_ident() == self._loop_thread:
            self._output.set()
        else:
            token = self._token
            assert token is not None
            token.run_sync_soon(self._output.set)

    async def pump(self) -> None:
        """Carry frames to and acknowledgements from the writer process (if there is one).

        Runs for the life of the server, in its nursery."""
        store = self.store
        if not isinstance(store, ProcessStore):
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._pump_out, store)
            while True:
                sock = store.sock
                if sock is None:
                    await trio.sleep(store.respawn_delay)
                    store.respawn()
                    self._output.set()
                    continue
                try:
                    await trio.lowlevel.wait_readable(sock)
                except trio.ClosedResourceError:
                    continue
                self._in_acks = True
                try:
                    store.receive_some()
                finally:
                    self._in_acks = False
                if self.on_commits is not None:
                    self.on_commits()

    async def _pump_out(self, store: ProcessStore) -> None:
        while True:
            deadline = self._deferred_at
            if deadline is None:
                await self._output.wait()
            else:
                with trio.move_on_at(deadline):
                    await self._output.wait()
                if self._deferred_at is not None and trio.current_time() >= self._deferred_at:
                    self.flush(force=True)
            self._output = trio.Event()
            while store.send_some():
                sock = store.sock
                if sock is None:
                    break  # the next writer gets them; ``pump`` wakes us
                with contextlib.suppress(trio.ClosedResourceError):
                    await trio.lowlevel.wait_writable(sock)

    def _store_failing(self, reason: str | None) -> None:
        """The writer retries a failing commit: block publishers until it passes."""
        self.failing = reason
        self._update_capacity()

    @property
    def disk_alarm(self) -> bool:
        """Free disk space is below disk_free_limit."""
        return "disk" in self.alarms

    @property
    def memory_alarm(self) -> bool:
        """Memory use is above memory_high_watermark."""
        return "memory" in self.alarms

    def set_disk_alarm(self, on: bool) -> None:
        """The disk monitor's verdict: another reason to stop taking publishes."""
        self._set_alarm("disk", on)

    def set_memory_alarm(self, on: bool) -> None:
        """The memory monitor's verdict; publishers go on only once every alarm clears."""
        self._set_alarm("memory", on)

    def _set_alarm(self, resource: str, on: bool) -> None:
        if on != (resource in self.alarms):
            if on:
                self.alarms.add(resource)
            else:
                self.alarms.discard(resource)
            self._update_capacity()

    def _update_capacity(self) -> None:
        """The one place that decides whether publishers may go on."""
        if self.failing is not None or self.alarms or self.inflight_ops > self.high_water:
            if self._capacity.is_set():
                self._capacity = trio.Event()
                self.alarm_epoch += 1
        elif self.inflight_ops <= self.high_water // 2:
            self._capacity.set()

    @property
    def block_reason(self) -> str:
        """What connection.blocked tells clients, in RabbitMQ's words: "low on memory",
        "low on disk", or both joined by " & "."""
        low = [r for r in ("memory", "disk") if r in self.alarms
               or (r == "disk" and self.failing is not None)]
        if low:
            return "low on " + " & ".join(low)
        return "low on disk write capacity"

    def add_waiter(self, fn: Waiter) -> None:
        """Run ``fn`` after everything submitted so far (and in this batch) commits."""
        self._waiters.append(fn)

    @property
    def batch_has_ops(self) -> bool:
        return bool(self._ops or self._log.rows)

    def submit(self, ops: list[Any], log: list[tuple[Any, ...]] | None = None) -> None:
        """Add an Outcome's store operations and delivery-log rows to the batch
        being gathered."""
        if ops:
            self._ops.extend(ops)
        if log:
            self._log.add(log)

    def flush(self, force: bool = False) -> None:
        """Hand the gathered operations and waiters to the store (non-blocking).

        With the writer process, delivery-log rows that nobody waits for are
        kept here up to ``LOG_DEFER_S`` (``_pump_out`` hands them over then, or
        any flush with other work takes them along): one frame and one commit
        per 100 ms instead of one per message, which is what an idle-ish broker spends
        its CPU on. ``force``: hand everything over now (reads, shutdown).
        """
        if not self._ops and not self._waiters:
            if not self._log.rows:
                return
            if not force and self._can_defer and self._log.rows < DEFER_MAX_OPS:
                if self._deferred_at is None:
                    self._deferred_at = trio.current_time() + LOG_DEFER_S
                    self._output.set()  # ``_pump_out`` keeps the time
                return
        self._deferred_at = None
        ops, waiters, rows = self._ops, self._waiters, self._log.rows
        self._ops, self._waiters = [], []
        n_ops = len(ops) + rows  # for the capacity: what the writer has yet to store
        if rows:  # every message key in the rows is below the broker's next one
            ops.extend(self._log.take(self.broker.message_key_mark))
        if not ops and self.inflight == 0:
            for w in waiters:
                w(None)
            if self.on_commits is not None and not self._in_acks:
                self.on_commits()  # confirms released just now go out now too
            return
        self.inflight += 1
        self.inflight_ops += n_ops
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        self._update_capacity()
        token = self._token
        assert token is not None, "bind_loop() first"
        store, started = self.store, time.monotonic()

        loop_thread = self._loop_thread

        def committed(err: BaseException | None) -> None:
            # every submission of a group sees the same ``groups`` (the writer
            # counts the group once all its callbacks ran)
            if threading.get_ident() == loop_thread:  # the writer process's ack
                self._done(waiters, ops, n_ops, err, started, store.groups)
            else:  # writer thread -> event loop
                token.run_sync_soon(self._done, waiters, ops, n_ops, err, started,
                                    store.groups)

        # a waiter (a confirm, a read-after-write) must not wait for a log linger
        self.store.submit(ops, committed, urgent=bool(waiters))

    def _done(self, waiters: list[Waiter], ops: list[Any], n_ops: int,
              err: BaseException | None, started: float, group: int) -> None:
        self.counters.committed(time.monotonic() - started, group)
        self.inflight -= 1
        self.inflight_ops -= n_ops
        if err is not None:
            # nacked publishes must not be delivered as well: take them back
            self.broker.commit_failed(ops)
        for w in waiters:
            w(err)
        self._update_capacity()
        if self.inflight == 0:
            self._idle.set()
        if not self._in_acks and self.on_commits is not None:
            self.on_commits()  # not called back from ``pump``: nobody else will

    async def committed(self) -> None:
        """Wait until everything submitted so far has committed (or failed)."""
        if self.inflight == 0 and not self.batch_has_ops and not self._waiters:
            return
        done = trio.Event()
        self.add_waiter(lambda _err: done.set())
        self.flush()
        await done.wait()

    async def read(self, name: str, *args: Any) -> Any:
        """One of the store's reads, once everything submitted so far has committed.

        With the writer process, the writer itself reads, in order with the
        submissions (no commit round trip first, and no rows built under this
        loop's GIL); with the writer thread, a worker thread of this process
        reads after ``committed()``.
        """
        store = self.store
        if not isinstance(store, ProcessStore):
            await self.committed()
            return await trio.to_thread.run_sync(getattr(store, name), *args)
        self.flush(force=True)  # the batch gathered so far goes first: the read must see it
        done = trio.Event()
        box: list[tuple[Any, BaseException | None]] = []

        def answered(result: Any, err: BaseException | None) -> None:
            box.append((result, err))
            done.set()

        store.read(name, args, answered)
        await done.wait()
        result, err = box[0]
        if err is not None:
            raise err
        return result

    @property
    def has_capacity(self) -> bool:
        return self._capacity.is_set()

    async def wait_capacity(self) -> None:
        """Publishers pause here while the writer is far behind."""
        await self._capacity.wait()

    async def wait_idle(self) -> None:
        self.flush(force=True)
        await self._idle.wait()
