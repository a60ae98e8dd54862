"""Paging: what of a deep queue leaves RAM, and how it comes back.

Two levels. Bodies of committed entries far from the head leave RAM
(``commit_done``) and are paged in before delivery (``PageIn``). Whole
entries behind the head's window spill: once their rows have committed
they exist only in the store, as a counted run of positions (see
``ReadyList``), and ``LoadEntries`` reads them back in order when the head
runs low, so a queue of any depth costs a bounded amount of RAM.

Persistent entries of durable queues spill as soon as they are committed.
Under memory pressure (the shell's memory monitor, ``set_memory_pressure``)
transient entries are written too, so they can spill; their rows are still
transient: recovery drops them (their properties say delivery_mode 1) and
rows of queues that are not stored. Priority queues, queues with a length
limit, and entries with a TTL stay in RAM.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from amqplite.broker import persist as P
from amqplite.broker.base import Counters, DeliveryLog
from amqplite.broker.effects import LoadEntries, PageIn
from amqplite.broker.model import Entry, Message, PriorityReadyList, ReadyList
from amqplite.broker.outbox import Outbox
from amqplite.broker.queue import Queue
from amqplite.broker.retained import RetainedStore
from amqplite.broker.vhost import VHost
from amqplite.protocol.errors import FrameSyntaxError
from amqplite.protocol.properties import check_properties, expiration_of, priority_of

log = logging.getLogger("amqplite.broker")

#: entries whose bodies one PageIn asks the store for
PAGE_IN_BATCH = 500
#: entries one LoadEntries reads back, and transient entries written per step
SPILL_BATCH = 1000
#: most spilled entries one read brings back
LOAD_BATCH = 1000
#: what one read of spilled entries aims at in bytes (bodies)
LOAD_BYTES = 1024 * 1024
#: fewest entries one read brings back, however large
MIN_LOAD = 8


def entry_from_row(row: tuple[Any, ...],
                   shared: Callable[[int], Message | None] | None = None) -> Entry:
    """A stored entry as ``Store.fetch_entries`` gives it: (position, message key,
    delivery_count, redelivered, exchange, routing_key, properties, body, body_size).

    ``shared`` finds a message already in RAM under that key (the retained
    store's): the entry takes it, so one body serves both."""
    pos, key, count, redelivered, exchange, rk, props, body, size = row
    m = None if shared is None else shared(key)
    if m is None:
        m = Message(key, exchange, rk, props, body, body_size=size)
    m.stored = True
    e = Entry(pos, m, stored=True)
    e.committed = True
    e.delivery_count = count
    e.redelivered = bool(redelivered or count)
    return e


class Pager:
    """Which bodies may be evicted, and the page-in requests that bring them back.

    Receives the vhost table, the outbox (rows, PageIn/LoadEntries effects,
    evictable entries), the retained store (bodies it shares), the delivery
    log and the body window; ``wire`` hands it the dispatcher's ``_dispatch``
    and ``_entry_done``, the expiry's ``arm_ttl`` and the dead-letterer's
    ``dead_letter`` and ``drop_malformed`` (all built after it: they call it).
    """

    def __init__(self, *, vhosts: dict[str, VHost], outbox: Outbox, retained: RetainedStore,
                 log: DeliveryLog, body_window: int, counters: Counters) -> None:
        self.vhosts = vhosts
        self.stats = counters.stats
        self.outbox = outbox
        self.effects = outbox.effects
        self.evictable = outbox.evictable
        self.retained = retained
        self.log_event = log.log_event
        self.body_window = body_window
        #: above the memory monitor's paging threshold: transient entries spill too
        self.memory_pressure = False
        self._transient_written = False

    def wire(self, *, dispatch: Callable[[Queue], None],
             entry_done: Callable[[Queue, Entry], None],
             arm_ttl: Callable[[Queue, Entry], None],
             dead_letter: Callable[[Queue, Entry, str], None],
             drop_malformed: Callable[[Queue, Entry, str], None]) -> None:
        """The parts that call back into paging, built after it."""
        self._dispatch = dispatch
        self._entry_done = entry_done
        self.arm_ttl = arm_ttl
        self.dead_letter = dead_letter
        self.drop_malformed = drop_malformed

    def _request_page_in(self, q: Queue) -> None:
        if q.paging:
            return
        batch: list[Entry] = [e for e, _ in q.awaiting_body[:PAGE_IN_BATCH]]
        for e in q.ready:
            if len(batch) >= PAGE_IN_BATCH:
                break
            if e.message.body is None:
                batch.append(e)
        if batch:
            q.paging = True
            self.effects.append(PageIn(q, batch))

    def paged_in(self, q: Queue, bodies: dict[int, bytes], requested: Iterable[Entry] = ()) -> None:
        """The shell loaded bodies for a PageIn; resume dispatching.

        The shell reads only after every earlier commit landed, so a requested
        body that is not in ``bodies`` is gone from the store: that entry can
        never be delivered and is dropped (logged), instead of being asked
        for again forever.
        """
        q.paging = False
        if q.deleted:
            return
        lost: set[int] = set()
        for e in requested:
            m = e.message
            if m.body is None:
                b = bodies.get(m.key)
                if b is None:
                    lost.add(id(e))
                else:
                    m.body = b
        if lost:
            gone = q.ready.remove_where(lambda x: id(x) in lost)
            gone += [e for e, _ in q.awaiting_body if id(e) in lost]
            q.awaiting_body = [(e, r) for e, r in q.awaiting_body if id(e) not in lost]
            for e in gone:
                log.error("queue '%s' in vhost '%s': body of message %s missing from the "
                          "store; dropped", q.name, q.vhost, e.message.key)
                self.log_event("dropped", q.vhost, e.message, q.name, reason="body_missing")
                self._entry_done(q, e)
        if q.awaiting_body:
            parked, q.awaiting_body = q.awaiting_body, []
            for e, reason in parked:
                self.dead_letter(q, e, reason)
        self._dispatch(q)

    def commit_done(self, evictable: Iterable[tuple[Queue, Entry]]) -> None:
        """Committed entries behind the head spill; bodies deep in a queue leave RAM."""
        touched: dict[int, Queue] = {}
        for q, e in evictable:
            if not e.stored or q.deleted:
                continue
            e.committed = True
            touched[id(q)] = q
            m = e.message
            # still waiting far from the head?
            if (m.stored and m.body is not None and not m.pinned and e.in_ready
                    and len(q.ready) > self.body_window):
                m.body = None
        for q in touched.values():
            self._spill(q)

    # ------------------------------------------------------------ spilling
    @staticmethod
    def spills(q: Queue) -> bool:
        """Whether ``q`` may keep entries on disk only (FIFO, no length limit)."""
        return (type(q.ready) is ReadyList and q.max_length is None and q.max_bytes is None
                and not q.deleted)

    def set_memory_pressure(self, on: bool) -> None:
        """The memory monitor's word: above the paging threshold, transient entries
        behind each queue's head are written so that they can spill too."""
        if on == self.memory_pressure:
            return
        self.memory_pressure = on
        if on:
            for vh in self.vhosts.values():
                for q in vh.queues.values():
                    self._write_for_spill(q)

    def _write_for_spill(self, q: Queue) -> None:
        """Give up to SPILL_BATCH unstored entries behind the head their rows."""
        if not self.spills(q):
            return
        n = 0
        for e in q.ready.behind_head(self.body_window):
            if e.expires_at is not None or n >= SPILL_BATCH:
                break  # the spilled run would stop here anyway
            if not e.stored:
                self._store_entry(q, e)
                n += 1

    def _store_entry(self, q: Queue, e: Entry) -> None:
        """Write a transient entry (its row stays transient: recovery drops it)."""
        m = e.message
        if not m.stored:
            m.stored = True
            self.outbox._ops.append(P.put_message(m))
        e.stored = True
        m.pinned -= 1
        q.spilled = True
        if not self._transient_written:  # tells recovery to look for transient rows
            self._transient_written = True
            self.outbox._ops.append(P.ops.PutMeta(P.ops.TRANSIENT_KEY, "1"))
        self.outbox._ops.append(P.put_entry(q, e))
        self.stats["disk_writes"] += 1
        self.evictable.append((q, e))

    def _spill(self, q: Queue) -> None:
        if not self.spills(q):
            return
        self._spill_committed(q)
        if self.memory_pressure:
            self._write_for_spill(q)

    def _spill_committed(self, q: Queue) -> None:
        gone = q.ready.spill(self.body_window, _spillable)
        if gone:
            q.spilled = True

    @staticmethod
    def load_batch(r: ReadyList) -> int:
        """How many spilled entries one read brings back: up to LOAD_BATCH, fewer when
        they are large, so a read (and the read-ahead, under two reads' worth) is
        about LOAD_BYTES whatever the message size."""
        avg = r.disk_bytes // r.disk_count if r.disk_count else 0
        return max(MIN_LOAD, min(LOAD_BATCH, LOAD_BYTES // max(1, avg)))

    def _request_load(self, q: Queue) -> None:
        if q.paging:
            return
        r = q.ready
        q.paging = True
        self.effects.append(LoadEntries(q, r.disk_lo, r.disk_hi, self.load_batch(r)))

    def load_failed(self, q: Queue) -> None:
        """The store read failed (logged by the shell): dispatching asks again."""
        q.paging = False
        self._dispatch(q)

    def entries_loaded(self, q: Queue, rows: list[tuple[Any, ...]], limit: int,
                       hi: int | None = None) -> None:
        """Spilled entries read back, in order (rows as ``Store.fetch_entries`` gives them).

        ``hi`` is the last position the read asked for: entries spilled while it
        was in flight lie beyond it and stay on disk for the next read.
        """
        q.paging = False
        if q.deleted:
            return
        entries, bad = self._entries_from_rows(q, rows)
        r = q.ready
        hi = r.disk_hi if hi is None else hi
        short = len(rows) < limit  # nothing more in lo..hi
        next_lo = hi + 1 if short else rows[-1][0] + 1
        exhausted = short and r.disk_hi <= hi
        if exhausted and r.disk_count > len(rows):
            log.error("queue '%s' in vhost '%s': %d spilled entries missing from the store",
                      q.name, q.vhost, r.disk_count - len(rows))
        r.loaded(entries, next_lo, exhausted)
        self._drop_bad(q, bad)
        self._dispatch(q)

    def restore_entries(self, q: Queue, rows: list[tuple[Any, ...]]) -> None:
        """Recovery of a queue that cannot spill: its stored entries join it in RAM."""
        entries, bad = self._entries_from_rows(q, rows)
        for e in entries:
            if type(q.ready) is PriorityReadyList:
                e.priority = priority_of(e.message.properties_raw) or 0
            q.ready.append(e)
        self._drop_bad(q, bad)

    def _entries_from_rows(self, q: Queue, rows: list[tuple[Any, ...]],
                           ) -> tuple[list[Entry], list[tuple[Entry, str]]]:
        """Entries (TTL armed) from (position, message key, delivery_count, redelivered,
        exchange, routing_key, properties, body, body_size) rows, and the malformed ones."""
        entries: list[Entry] = []
        bad: list[tuple[Entry, str]] = []
        # runs of messages share their properties' bytes (one publisher, one
        # template): those are checked and looked at for a TTL once per run
        checked: bytes | None = None
        ttl_free = False
        for row in rows:
            e = entry_from_row(row, self.retained.message)
            props = e.message.properties_raw
            if props != checked:
                try:
                    check_properties(props)
                except FrameSyntaxError as exc:  # stored by a version that did not check
                    bad.append((e, exc.detail))
                    entries.append(e)
                    continue
                checked = props
                ttl_free = q.ttl is None and expiration_of(props) is None
            if not ttl_free:
                self.arm_ttl(q, e)
            entries.append(e)
        return entries, bad

    def _drop_bad(self, q: Queue, bad: list[tuple[Entry, str]]) -> None:
        if bad:
            ids = {id(e) for e, _ in bad}
            q.ready.remove_where(lambda x: id(x) in ids)
            for e, detail in bad:
                self.drop_malformed(q, e, detail)

    def commit_failed(self, ops: Iterable[Any]) -> None:
        """A submission failed for good: its new entries still waiting leave RAM too.

        Their publishers get basic.nack; delivering them anyway would hand out
        a message the publisher was told is lost (and will likely republish).
        """
        self.retained.commit_failed(ops)  # retained messages not stored are withdrawn too
        keys = {(op.queue_id, op.position) for op in ops if type(op) is P.ops.PutEntry}
        if not keys:
            return
        by_id = {q.id: q for vh in self.vhosts.values() for q in vh.queues.values()}
        unstored = {op.message_id for op in ops
                    if type(op) in (P.ops.PutMessage, P.ops.CopyMessage)}
        for qid in {k[0] for k in keys}:
            q = by_id.get(qid)
            if q is None:
                continue
            hit = [e for e in q.ready if (q.id, e.position) in keys]
            # a transient entry was written only to spill: it stays, in RAM
            withdraw = {id(e) for e in hit if e.message.persistent and q.durable and not q.exclusive}
            for e in hit:
                e.stored = False
                if e.message.key in unstored:
                    e.message.stored = False
                if id(e) not in withdraw:
                    e.message.pinned += 1
            for e in q.ready.remove_where(lambda x, w=withdraw: id(x) in w):
                log.error("queue '%s': message %s withdrawn, its commit failed", q.name,
                          e.message.key)


def _spillable(e: Entry) -> bool:
    """An entry may leave RAM when its row has committed and no TTL timer holds it."""
    return e.committed and e.stored and e.expires_at is None
