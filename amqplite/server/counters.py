"""Counters of the shell's own work: confirms sent, page-ins, store commits.

RabbitMQ's global message counters (received, routed, unroutable, delivered,
acked, dead-lettered by reason) are the core's (``Broker.stats``,
``Broker.dead_letters``), counted where they happen; these are what only the
shell sees. Everything runs on the event loop
(single-threaded), so plain integers suffice. The admin layer turns these
into Prometheus metrics at scrape time; this module imports no metrics library.
"""

from __future__ import annotations

import bisect

__all__ = ["COMMIT_SECONDS_BUCKETS", "GROUP_SIZE_BUCKETS", "Counters", "Histogram"]

#: seconds from handing a batch to the store writer to its commit
COMMIT_SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                          1.0, 2.5, 5.0, 10.0)
#: submissions folded into one transaction
GROUP_SIZE_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)

#: dead-letter reasons RabbitMQ counts (``rabbitmq_global_messages_dead_lettered_<r>_total``)
DEAD_LETTER_REASONS = ("rejected", "expired", "maxlen", "delivery_limit")


class Histogram:
    """Bucket counts and a sum: what a Prometheus histogram needs, nothing more."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations <= bound) pairs, +Inf last."""
        out: list[tuple[float, int]] = []
        n = 0
        for bound, c in zip((*self.bounds, float("inf")), self.counts, strict=True):
            n += c
            out.append((bound, n))
        return out


class Counters:
    """Totals since start; one instance per server (``Server.counters``)."""

    def __init__(self) -> None:
        #: messages covered by the basic.acks sent to publishers
        self.confirmed = 0
        self.page_ins = 0
        #: AMQP connections of clients (after the handshake); the admin API's internal
        #: sessions are not counted, as RabbitMQ has no such thing
        self.connections_opened = 0
        self.connections_closed = 0
        #: AMQP logins (RabbitMQ's auth attempts)
        self.auth_succeeded = 0
        self.auth_failed = 0
        self.paged_in_messages = 0
        self.commit_seconds = Histogram(COMMIT_SECONDS_BUCKETS)
        self.group_size = Histogram(GROUP_SIZE_BUCKETS)
        self._group: int | None = None
        self._group_members = 0

    def login(self, ok: bool) -> None:
        if ok:
            self.auth_succeeded += 1
        else:
            self.auth_failed += 1

    def committed(self, seconds: float, group: int) -> None:
        """A store submission committed ``seconds`` after it was handed over, as
        part of commit group number ``group`` (the store's running group count).

        Submissions of one group are reported one after another, so a group's
        size is known when the next group's first submission arrives.
        """
        self.commit_seconds.observe(seconds)
        if group != self._group:
            if self._group_members:
                self.group_size.observe(self._group_members)
            self._group, self._group_members = group, 0
        self._group_members += 1
