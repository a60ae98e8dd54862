"""Counters the broker core does not keep, counted where the shell sees them happen.

RabbitMQ's global counters (``rabbitmq_global_messages_*``) count what crosses
the wire: publishes received, routed or not, confirms sent. The core counts
deliveries and acks (``Broker.stats``); the rest is counted here so that the
pure core stays free of operator concerns. Everything runs on the event loop
(single-threaded), so plain integers suffice. The admin layer turns these
into Prometheus metrics at scrape time; this module imports no metrics library.
"""

from __future__ import annotations

import bisect
import weakref
from typing import Any

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
        self.received = 0
        self.received_confirm = 0
        self.routed = 0
        self.unroutable_returned = 0
        self.unroutable_dropped = 0
        self.confirmed = 0
        #: (reason, dead_letter_strategy) -> messages; RabbitMQ's labels
        self.dead_lettered: dict[tuple[str, str], int] = {}
        self.page_ins = 0
        self.paged_in_messages = 0
        self.commit_seconds = Histogram(COMMIT_SECONDS_BUCKETS)
        self.group_size = Histogram(GROUP_SIZE_BUCKETS)
        self._group: int | None = None
        self._group_members = 0
        #: connection -> channel number -> [id of the ChannelState, publishes]; weak, so a
        #: closed connection's entry goes with it; the id tells a reopened channel apart
        self._channel_publishes: weakref.WeakKeyDictionary[Any, dict[int, list[int]]] = (
            weakref.WeakKeyDictionary())
        self._last_channel: Any = None
        self._last_slot = [0, 0]

    def published(self, res: Any, ch: Any, mandatory: bool) -> None:
        """One basic.publish the broker accepted on channel ``ch`` (``res``: its
        PublishResult)."""
        self.received += 1
        if ch is self._last_channel:  # the common case: a burst on one channel
            self._last_slot[1] += 1
        elif ch.session.transport is not None:
            per = self._channel_publishes.setdefault(ch.session.transport, {})
            slot = per.get(ch.number)
            if slot is None or slot[0] != id(ch):
                slot = per[ch.number] = [id(ch), 0]
            slot[1] += 1
            self._last_channel, self._last_slot = ch, slot
        if ch.confirm:
            self.received_confirm += 1
        if res.routed:
            self.routed += 1
        elif mandatory:
            self.unroutable_returned += 1
        else:
            self.unroutable_dropped += 1

    def channel_publishes(self, conn: Any, ch: Any) -> int:
        """Messages published on channel ``ch`` of connection ``conn`` so far."""
        slot = self._channel_publishes.get(conn, {}).get(ch.number)
        return slot[1] if slot is not None and slot[0] == id(ch) else 0

    def log_rows(self, ops: list[Any]) -> None:
        """Count dead-lettering from the delivery-log rows of a store batch.

        The core logs each dead-lettering with its reason (``expired``, or
        ``expired:dropped`` when no dead-letter exchange took it); that row is
        the only trace of the reason outside the core, so with ``delivery_log =
        "off"`` these counters stay at zero.
        """
        for op in ops:
            if op.__class__ is tuple and op[1] == "dead_lettered":
                reason, _, fate = (op[11] or "").partition(":")
                if reason in DEAD_LETTER_REASONS:
                    key = (reason, "disabled" if fate else "at_most_once")
                    self.dead_lettered[key] = self.dead_lettered.get(key, 0) + 1

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
