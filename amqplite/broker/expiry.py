"""Expiry: per-message and per-queue TTLs and unused queues (x-expires)."""

from __future__ import annotations

import heapq
import logging
import re
from collections.abc import Callable
from typing import Any

from amqplite.broker.base import DeliveryLog
from amqplite.broker.model import Entry
from amqplite.broker.queue import Queue
from amqplite.broker.vhost import VHost
from amqplite.protocol.properties import expiration_of

log = logging.getLogger("amqplite.broker")

#: rabbit_misc:check_expiry's limit for a per-message TTL (ms)
MAX_EXPIRATION = 4294967295
_EXPIRATION = re.compile(r"([+-]?[0-9]+)(.*)", re.DOTALL)


def parse_expiration(text: str) -> int:
    """Milliseconds of an expiration property; ValueError carries RabbitMQ's reason.

    As rabbit_basic:parse_expiration: an optionally signed decimal integer,
    nothing after it, 0 to MAX_EXPIRATION.
    """
    m = _EXPIRATION.fullmatch(text)
    if m is None:
        raise ValueError("no_integer")
    if m.group(2):
        raise ValueError(f'{{leftover_string,"{m.group(2)}"}}')
    n = int(m.group(1))
    if n < 0:
        raise ValueError(f"{{value_negative,{n}}}")
    if n > MAX_EXPIRATION:
        raise ValueError(f"{{value_too_large,{n}}}")
    return n


class Expiry:
    """One heap of TTL deadlines for all queues; the shell calls tick() when due.

    Receives the clock, the vhost table, the counters' ``stats`` and the
    delivery log; ``wire`` hands it the dead-letterer's ``dead_letter`` and
    the queues part's ``_delete_queue`` (built after it: they arm TTLs here).
    """

    def __init__(self, *, now: Callable[[], float], vhosts: dict[str, VHost],
                 stats: dict[str, int], log: DeliveryLog) -> None:
        self.now = now
        self.vhosts = vhosts
        self.stats = stats
        self.log_event = log.log_event
        #: (expires_at, seq, queue, entry) for every entry with a TTL
        self._expiry: list[tuple[float, int, Queue, Entry]] = []
        self._expiry_seq = 0
        #: when the shell's sleeping timer wakes (broker clock; 0.0: no timer asleep);
        #: arm_ttl calls ``wake_timer`` with a sooner deadline, so TTLs fire on time
        self.timer_wake_at = 0.0
        self.wake_timer: Callable[[float], None] | None = None
        #: queues with x-expires, checked by tick() (a dict: the same order every run);
        #: the queues and policies parts receive it too
        self._expiring_queues: dict[Queue, None] = {}

    def wire(self, *, dead_letter: Callable[[Queue, Entry, str], None],
             delete_queue: Callable[[VHost, Queue], Any]) -> None:
        """The parts built after this one that it calls."""
        self.dead_letter = dead_letter
        self._delete_queue = delete_queue

    def _expire(self, q: Queue, e: Entry) -> None:
        self.stats["expired"] += 1
        self.log_event("expired", q.vhost, e.message, q.name, reason="expired")
        self.dead_letter(q, e, "expired")

    def _expire_head(self, q: Queue) -> None:
        ready = q.ready
        if not ready.head_count:
            return
        now = self.now()
        while ready.head_count:
            h = ready.peek()
            if h.expires_at is None or h.expires_at > now:
                return
            self._expire(q, ready.popleft())

    def next_deadline(self) -> float | None:
        """When tick() next has work (TTL or queue expiry), or None."""
        ds: list[float] = []
        if self._expiry:
            ds.append(self._expiry[0][0])
        for q in self._expiring_queues:
            if not q.consumers and q.expires is not None:
                ds.append(q.last_used + q.expires / 1000)
        return min(ds) if ds else None

    def tick(self) -> None:
        """Expire messages whose TTL passed, wherever they are, and unused queues."""
        now = self.now()
        heap = self._expiry
        due: dict[Queue, set[int]] = {}
        parked: dict[Queue, set[int]] = {}
        while heap and heap[0][0] <= now:
            _, _, q, e = heapq.heappop(heap)
            if q.deleted:
                continue
            if e.in_ready:
                due.setdefault(q, set()).add(id(e))
            elif q.parked and any(p is e for p in q.parked):  # no selector matched it
                parked.setdefault(q, set()).add(id(e))
        expired: list[tuple[Queue, list[Entry]]] = []
        for q, ids in parked.items():
            expired.append((q, [p for p in q.parked if id(p) in ids]))
            q.parked = [p for p in q.parked if id(p) not in ids]
        for q, ids in due.items():
            expired.append((q, q.ready.remove_where(lambda x, ids=ids: id(x) in ids)))
        for q, entries in expired:
            for e in entries:
                try:
                    self._expire(q, e)
                except Exception:  # one message must not stop expiry for the rest
                    log.exception("expiring a message of queue '%s' in vhost '%s' failed",
                                  q.name, q.vhost)
        for q in list(self._expiring_queues):
            if (q.expires is not None and not q.consumers and not q.deleted
                    and now - q.last_used >= q.expires / 1000):
                vh = self.vhosts.get(q.vhost)
                if vh is not None:
                    self.log_event("expired", q.vhost, None, q.name, reason="queue_expired")
                    self._delete_queue(vh, q)

    def arm_ttl(self, q: Queue, e: Entry) -> None:
        """Give ``e`` its expiry time: the smaller of the queue's and the message's TTL."""
        ttl = q.ttl
        exp = expiration_of(e.message.properties_raw)
        if exp is not None:
            try:
                ms = parse_expiration(exp)
                ttl = ms if ttl is None else min(ttl, ms)
            except ValueError:
                pass  # only a message stored before publish checked it has a bad one
        if ttl is not None:
            e.expires_at = self.now() + ttl / 1000
            self._expiry_seq += 1
            heapq.heappush(self._expiry, (e.expires_at, self._expiry_seq, q, e))
            if e.expires_at < self.timer_wake_at and self.wake_timer is not None:
                self.timer_wake_at = e.expires_at
                self.wake_timer(e.expires_at)
