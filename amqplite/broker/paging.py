"""Paging: bodies leave RAM once committed deep in a queue and come back on demand."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from amqplite.broker import persist as P
from amqplite.broker.base import BrokerBase
from amqplite.broker.effects import PageIn
from amqplite.broker.model import Entry
from amqplite.broker.queue import Queue

log = logging.getLogger("amqplite.broker")

#: entries whose bodies one PageIn asks the store for
PAGE_IN_BATCH = 500


class Paging(BrokerBase):
    """Which bodies may be evicted, and the page-in requests that bring them back."""

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
        """Bodies of committed messages deep in a queue may leave RAM now."""
        for q, e in evictable:
            m = e.message
            # still waiting far from the head?
            if (m.stored and e.stored and not q.deleted and m.body is not None
                    and not m.pinned and e.in_ready and len(q.ready) > self.body_window):
                m.body = None

    def commit_failed(self, ops: Iterable[Any]) -> None:
        """A submission failed for good: its new entries still waiting leave RAM too.

        Their publishers get basic.nack; delivering them anyway would hand out
        a message the publisher was told is lost (and will likely republish).
        """
        keys = {(op.queue_id, op.position) for op in ops if type(op) is P.ops.PutEntry}
        if not keys:
            return
        by_id = {q.id: q for vh in self.vhosts.values() for q in vh.queues.values()}
        for qid in {k[0] for k in keys}:
            q = by_id.get(qid)
            if q is None:
                continue
            for e in q.ready.remove_where(lambda x, q=q: (q.id, x.position) in keys):
                e.stored = False
                log.error("queue '%s': message %s withdrawn, its commit failed", q.name,
                          e.message.key)
