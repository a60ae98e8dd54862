"""Bridge from the broker's store operations to the store's writer process.

Operations gathered while the event loop handles a burst of frames are handed
to the store as one submission; the store folds every pending submission into
one transaction (group commit). Work that must wait for durability (publisher
confirms, tx.commit-ok, evicting bodies from RAM) is queued as a waiter on
the submission and runs back on the event loop once it has committed.

Everything here runs on the event loop's one thread: the loop pumps the
writer's socket (``pump``) and the acknowledgements call back on it, so the
path from a submission to its waiters takes no lock and checks no thread.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import trio

from amqplite.broker.core import Broker
from amqplite.server.counters import Counters
from amqplite.store.api import StoreClosed
from amqplite.store.logbatch import LogBuffer
from amqplite.store.writer import ProcessStore, StoreWriterGone
from amqplite.storeops import REPLAYABLE, DeleteVHost, PutQueue, settle_batch

Waiter = Callable[[BaseException | None], None]

log = logging.getLogger("amqplite.server")

#: a re-submission of metadata (see ``Persistence._repair``) that fails this many
#: times for its content (not because the writer died) is tried once more op by
#: op; an op that fails then is undone in memory
REDO_ATTEMPTS = 5

# what a submission is, for ``_done``
_PLAIN, _REDO, _LAST_REDO = 0, 1, 2


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
#: commit. Why 250 ms: each hand-over is a commit, about 0.5-0.8 ms of the
#: writer's CPU plus a frame and an acknowledgement on the event loop; on a
#: trickle of transient traffic (S6: 1,000 msg/s over 200 connections) the
#: writer spent 1.4 % of a core at 50 ms, 0.8 % at 100 ms, 0.3 % at 250 ms.
#: (RabbitMQ keeps no such log at all; its firehose tracer is off by default.)
LOG_DEFER_S = 0.25

#: A batch held behind the commit in flight (see ``Persistence.flush``) goes over
#: anyway at this many ops, so a slow commit does not make one huge frame (its
#: bytes are copied twice on the way): S1 holds about 3 ops per message and
#: 1,000-4,000 ops per commit; uncapped, slow commits on a loaded machine raised
#: the loop's peak RSS by some 30 MiB.
HOLD_MAX_OPS = 6000

#: Stop reading from publishers while this many ops wait for the writer.
HIGH_WATER_OPS = 200_000


class Persistence:
    def __init__(self, store: ProcessStore, broker: Broker, high_water: int = HIGH_WATER_OPS,
                 counters: Counters | None = None) -> None:
        self.store = store
        self.broker = broker
        self.high_water = high_water
        #: commit latency, group sizes and dead-lettering for the metrics
        self.counters = counters or Counters()
        self._token: trio.lowlevel.TrioToken | None = None
        #: set when frames wait for the writer process's socket to take them
        self._output = trio.Event()
        #: log rows only, held back until this (trio) time; see ``flush``
        self._deferred_at: float | None = None
        self._ops: list[Any] = []
        #: delivery-log rows, encoded as they come (see LogBuffer)
        self._log = LogBuffer()
        self._waiters: list[Waiter] = []
        self.inflight = 0  # submissions handed to the store, not yet called back
        #: counts the gathered batches that ended (handed over, or their waiters
        #: released without a commit): a timer armed for one batch (the STOMP
        #: listener's ``flush_soon``) knows it has nothing left to do
        self.batches = 0
        #: the submissions in flight that carry delivery-log rows only (no
        #: receipt or confirm depends on them: see ``flush_settled``)
        self._log_flights: set[int] = set()
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
        #: numbers submissions in order (see ``_flight``)
        self._seq = 0
        #: the ops of each submission handed over and not called back yet, by number;
        #: None once a re-submission (``_repair``) carries its metadata again
        self._flight: dict[int, list[Any] | None] = {}
        #: metadata ops of failed submissions, not yet re-submitted
        self._redo: list[Any] = []
        #: re-submissions handed over, not called back yet
        self._repairs = 0
        #: re-submissions that failed for their content since the last clean state
        self._redo_failures = 0
        #: how many metadata submissions were given up and undone in memory
        self.abandoned = 0
        #: waiters of submissions that committed while a repair was under way: what
        #: they release (a confirm, a declare-ok) may depend on the repaired ops
        self._held: list[Waiter] = []
        #: the store refused a submission because it is closed (shutdown)
        self._store_closed = False
        #: called after ops that could not be written were undone in memory (the
        #: interpreter carries out the broker's outcome: consumers cancelled...)
        self.on_rollback: Callable[[], None] | None = None
        #: the batch waits for the submission in flight to commit (see ``flush``)
        self._holding = False
        #: the broker's ack count at the last hand-over
        self._acked_seen = 0

    def bind_loop(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._output = trio.Event()
        store = self.store
        # the writer process's socket is pumped by this loop (see ``pump``)
        store.on_failing = self._store_failing
        store.on_output = self._output_waiting
        store.on_socket_closing = trio.lowlevel.notify_closing

    def _output_waiting(self) -> None:
        """Frames wait for the writer's socket: wake ``_pump_out``."""
        self._output.set()

    async def pump(self) -> None:
        """Carry frames to and acknowledgements from the writer process (if there is one).

        Runs for the life of the server, in its nursery."""
        store = self.store
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
    def batch_waited_on(self) -> bool:
        """Someone (a confirm, a receipt) waits for the batch being gathered."""
        return bool(self._waiters)

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

        While consumers ack (acks came since the last hand-over) and a
        submission is in the writer, the batch keeps gathering until that one
        has committed (``_done``), then goes over as one submission, less what
        its own acks cancelled (``settle_batch``): a message delivered and
        acked meanwhile (S1: most of them, their confirms released by the acks,
        see ``broker.confirms``) is never encoded, sent, decoded or written. The
        writer could not have started its next group before that commit
        anyway, so nothing waits longer than one hand-over: the writer's CPU per
        message in S1 went from about 6 us to 3-4 us, and the loop's fell too
        (one frame per commit, not one per read). Without acks (a backlog being
        published) batches go over at once, as before.
        """
        if not self._ops and not self._waiters:
            if not self._log.rows:
                return
            if not force and self._log.rows < DEFER_MAX_OPS:
                if self._deferred_at is None:
                    self._deferred_at = trio.current_time() + LOG_DEFER_S
                    self._output.set()  # ``_pump_out`` keeps the time
                return
        acked = self.broker.stats["acked"]
        if (not force and self.inflight and acked != self._acked_seen and not self.repairing
                and len(self._ops) < HOLD_MAX_OPS):
            self._holding = True  # ``_done`` hands it over
            return
        self._acked_seen = acked
        if self._holding:
            self._holding = False
            self._ops = settle_batch(self._ops)
        self._deferred_at = None
        ops, waiters, rows = self._ops, self._waiters, self._log.rows
        self._ops, self._waiters = [], []
        self.batches += 1
        n_ops = len(ops) + rows  # for the capacity: what the writer has yet to store
        log_only = not ops and not waiters
        if rows:  # every message key in the rows is below the broker's next one
            ops.extend(self._log.take(self.broker.message_key_mark))
        if not ops and self.inflight == 0 and not self.repairing:
            for w in waiters:
                w(None)
            if self.on_commits is not None and not self._in_acks:
                self.on_commits()  # confirms released just now go out now too
            return
        # a waiter (a confirm, a read-after-write) must not wait for a log linger
        self._hand_over(ops, waiters, n_ops, _PLAIN, urgent=bool(waiters), log_only=log_only)

    def flush_settled(self) -> None:
        """``flush`` after a read of acks, for a batch someone waits on (a receipt).

        A message delivered and acked while its insert was still in this batch
        has no durability left to owe: its insert, its ack and its message row
        leave the batch (``settle_batch``), unwritten. If nothing else is left
        and nothing but delivery-log rows is in flight, the waiters run now,
        with no commit at all (the delivery-log rows, which nobody waits on,
        stay deferred as usual, or go on their own once there are
        ``DEFER_MAX_OPS``); else the rest goes to the writer, whose group
        commit then needs no fsync if it nets to nothing
        (``store.committer.needs_fsync``).
        """
        if self._ops:
            self._ops = settle_batch(self._ops)
        if (not self._ops and self._waiters and self.inflight == len(self._log_flights)
                and not self.repairing):
            waiters, self._waiters = self._waiters, []
            self.batches += 1
            self._holding = False  # nothing is left to hand over when the flight lands
            for w in waiters:
                w(None)
            if self.on_commits is not None and not self._in_acks:
                self.on_commits()
            if self._log.rows >= DEFER_MAX_OPS:  # nobody waits on them: after the receipts
                self.flush(force=True)
            elif self._log.rows and self._deferred_at is None:
                self._deferred_at = trio.current_time() + LOG_DEFER_S
                self._output.set()
            return
        self.flush()

    def _hand_over(self, ops: list[Any], waiters: list[Waiter], n_ops: int, kind: int, *,
                   urgent: bool, log_only: bool = False) -> None:
        """Submit ``ops`` to the store; ``_done`` runs once it has committed or failed."""
        self._seq = seq = self._seq + 1
        self._flight[seq] = ops
        if log_only:
            self._log_flights.add(seq)
        self.inflight += 1
        self.inflight_ops += n_ops
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        self._update_capacity()
        token = self._token
        assert token is not None, "bind_loop() first"
        store, started = self.store, time.monotonic()

        def committed(err: BaseException | None) -> None:
            # on this loop, from ``pump``: every submission of a group sees the
            # same ``groups`` (the writer counts the group before its acks)
            self._done(seq, kind, waiters, ops, n_ops, err, started, store.groups)

        try:
            self.store.submit(ops, committed, urgent=urgent)
        except StoreClosed as exc:  # the broker is stopping
            self._store_closed = True
            log.error("store closed: %d ops not written (%s)", len(ops), exc)
            committed(exc)
        except Exception as exc:
            # an op the store cannot take (one the writer cannot encode): this
            # submission fails as a commit does, and only it; the store is open and
            # the repair path stays on (``_repair`` writes its metadata again, op by
            # op at the last try, and undoes in memory only the op that still fails).
            # Called back from the loop, never from inside ``_hand_over`` (a repair
            # hands several batches over in a row).
            log.error("store: a submission of %d ops could not be handed over (%s: %s)",
                      len(ops), type(exc).__name__, str(exc)[:200])
            try:
                token.run_sync_soon(committed, exc)
            except trio.RunFinishedError:
                committed(exc)

    @property
    def repairing(self) -> bool:
        """Metadata of a failed submission waits to be written again (see ``_repair``)."""
        return self._repairs > 0 or bool(self._redo)

    def _done(self, seq: int, kind: int, waiters: list[Waiter], ops: list[Any], n_ops: int,
              err: BaseException | None, started: float, group: int) -> None:
        self.counters.committed(time.monotonic() - started, group)
        self.inflight -= 1
        self.inflight_ops -= n_ops
        flight = self._flight.pop(seq, None)
        self._log_flights.discard(seq)
        if kind != _PLAIN:
            self._repairs -= 1
        if err is not None:
            # nacked publishes must not be delivered as well: take them back
            self.broker.commit_failed(ops)
            self._failed(kind, flight, ops, err)
            for w in waiters:
                w(err)
        elif self.repairing:
            self._held.extend(waiters)
        else:
            for w in waiters:
                w(None)
        if self._redo and self._store_closed:
            log.error("store closed: %d metadata ops of failed commits not written again",
                      len(self._redo))
            self._redo = []
        if self._redo:
            self._repair()
        elif not self.repairing:
            self._redo_failures = 0
            if self._held:
                held, self._held = self._held, []
                for w in held:
                    w(None)
        self._update_capacity()
        if self._holding and self.inflight == 0:
            self.flush()
        if self.inflight == 0:
            self._idle.set()
        if not self._in_acks and self.on_commits is not None:
            self.on_commits()  # not called back from ``pump``: nobody else will

    def _failed(self, kind: int, flight: list[Any] | None, ops: list[Any],
                err: BaseException) -> None:
        """A submission failed: its metadata is to be written again, or (after
        REDO_ATTEMPTS) undone in memory."""
        if kind != _PLAIN and not isinstance(err, StoreWriterGone) and not self._store_closed:
            # its content, not the writer's end or a shutdown: that may fail for good
            self._redo_failures += 1
            if kind == _LAST_REDO:
                log.error("store: %s could not be written (%s); undone in memory",
                          _describe(ops), str(err)[:200])
                self.abandoned += 1
                self.broker.commit_abandoned(ops)
                if self.on_rollback is not None:
                    self.on_rollback()
                return
        if flight is not None:  # else a re-submission handed over after it carries it
            self._redo.extend(op for op in flight if type(op) in REPLAYABLE)

    def _repair(self) -> None:
        """Write the metadata of failed submissions again, after everything in flight.

        Why re-submit and not undo: memory already holds these changes (clients
        may have been told of them by later replies), and a submission failed by
        a dying writer may have committed anyway; the ops are idempotent
        (``storeops.REPLAYABLE``), so writing them again is right in both cases.

        Order: submissions handed over after the failed one may commit before
        this one (the writer process's unsent frames go to the next writer). So
        the re-submission carries the metadata of every submission still in
        flight as well, in order: whatever of them commits first, the store ends
        as the last op on each key left it, which is what memory holds. A
        ``DeleteVHost`` carried again keeps the queues created after it.

        Until the re-submissions have committed, the waiters of later
        submissions are held (``_done``): a confirm or declare-ok may depend on
        them (a message in a queue whose PutQueue is being written again).
        Message data is not re-submitted: those publishes were withdrawn and
        nacked (``Broker.commit_failed``).
        """
        ops, self._redo = self._redo, []
        flight = self._flight
        for seq, in_flight in flight.items():
            if in_flight is not None:
                ops.extend(op for op in in_flight if type(op) in REPLAYABLE)
                flight[seq] = None
        ops = _keep_recreated(ops)
        if self._redo_failures + 1 >= REDO_ATTEMPTS:  # last try: op by op, so one
            batches, kind = [[op] for op in ops], _LAST_REDO  # bad op fails alone
        else:
            batches, kind = [ops], _REDO
        if self._redo_failures == 0:
            log.warning("store: writing %d metadata ops of failed commits again", len(ops))
        for batch in batches:
            self._repairs += 1
            self._hand_over(batch, [], len(batch), kind, urgent=True)

    async def own_commit(self) -> BaseException | None:
        """Hand the batch gathered so far over as one submission and wait for it: its
        error, or None once it has committed. A reply that must not go out before its
        own change is stored (declare-ok, an admin write) waits here."""
        done = trio.Event()
        box: list[BaseException | None] = []

        def waiter(err: BaseException | None) -> None:
            box.append(err)
            done.set()

        self.add_waiter(waiter)  # rides on the submission carrying the batch's ops
        self.flush()
        await done.wait()
        return box[0]

    async def repaired(self) -> None:
        """Wait until no failed metadata waits to be written again: an empty
        submission's waiter is held until the repairs have committed (``_done``)."""
        while self.repairing:
            await self.own_commit()

    async def committed(self) -> None:
        """Wait until everything submitted so far has committed (or failed)."""
        if self.inflight == 0 and not self.batch_has_ops and not self._waiters:
            return
        await self.own_commit()  # its error is the failed submission's, handled there

    async def read(self, name: str, *args: Any) -> Any:
        """One of the store's reads, once everything submitted so far has committed.

        The writer itself reads, in order with the submissions (no commit round
        trip first, and no rows built under this loop's GIL).
        """
        store = self.store
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


def _describe(ops: list[Any]) -> str:
    """The ops by kind and name, for a log line: never their values (a value may be
    too deep to repr, or huge)."""
    return ", ".join(f"{type(op).__name__}({getattr(op, 'vhost', '')!s:.60} "
                     f"{getattr(op, 'name', '')!s:.60})" for op in ops[:20]) + (
        f" and {len(ops) - 20} more" if len(ops) > 20 else "")


def _keep_recreated(ops: list[Any]) -> list[Any]:
    """``ops`` with each DeleteVHost told to keep the queues that ops after it (re)create
    in that vhost: written again after their entries, it must not take those along."""
    if not any(type(op) is DeleteVHost for op in ops):
        return ops
    out: list[Any] = []
    for i, op in enumerate(ops):
        if type(op) is DeleteVHost:
            keep = {q.queue_id for q in ops[i + 1:] if type(q) is PutQueue and q.vhost == op.name}
            if keep:
                op = DeleteVHost(op.name, tuple(sorted(keep | set(op.keep_queues))))
        out.append(op)
    return out
