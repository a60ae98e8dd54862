"""The small state holders the broker's parts share by reference, and the core's constants.

No part inherits from anything here: ``Broker`` (core.py) builds one
:class:`DeliveryLog` and one :class:`Counters` and hands them (or their
bound methods) to the parts that write rows or count events. The lists and
dicts they hold are never rebound, only cleared in place, so a part may keep
a direct reference to them: the hot path pays no extra attribute hop.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any, Final

from amqplite.broker.model import Message
from amqplite.config import LOG_LEVELS

#: upper bounds of RabbitMQ's ``rabbitmq_message_size_bytes`` histogram (+Inf implied)
MESSAGE_SIZE_BUCKETS: Final = (100, 1000, 10_000, 100_000, 1_000_000, 10_000_000, 50_000_000,
                        100_000_000)

#: Direct reply-to: the pseudo-queue RPC clients consume from and name as reply_to.
REPLY_TO: Final = "amq.rabbitmq.reply-to"
REPLY_PREFIX: Final = REPLY_TO + "."

#: enqueue() outcomes
NOT_STORED: Final = 0
STORED: Final = 1
REJECTED: Final = 2


class DeliveryLog:
    """The delivery-log rows of the current batch (plain tuples in LOG_FIELDS order).

    Apart from the store ops: the shell holds them back and encodes them by
    the thousand. ``take`` (the broker's ``take_outcome``) hands them over.
    """

    def __init__(self, now: Callable[[], float], level: str) -> None:
        if level not in LOG_LEVELS:
            raise ValueError(f"log level must be one of {LOG_LEVELS}, not {level!r}")
        self.now = now
        self.level = level
        #: fixed at start: parts copy them, so checking costs no hop
        self.on = level != "off"
        self.full = level == "full"
        self.rows: list[tuple[Any, ...]] = []
        #: the time of this batch's rows (µs), read at its first row: a clock
        #: read per row was a tenth of the log's cost on the hot path
        self.ts = 0

    def take(self) -> list[tuple[Any, ...]]:
        """The batch's rows; the next row starts a new batch (and reads the clock)."""
        rows = self.rows[:]
        self.rows.clear()
        self.ts = 0
        return rows

    def log_time(self) -> int:
        """Now in µs, read once per batch of commands (``take`` starts the
        next): the rows of one batch share it, as a stream chunk's entries do."""
        ts = self.ts = int(self.now() * 1_000_000)
        return ts

    def log_event(
        self,
        event: str,
        vhost: str,
        msg: Message | None,
        queue: str | None = None,
        *,
        consumer_tag: str | None = None,
        attempt: int | None = None,
        reason: str | None = None,
        protocol: str | None = None,
    ) -> None:
        """Append a delivery_log row (a plain tuple: this runs several times per message)."""
        if not self.on or (event == "delivered" and not self.full):
            return
        ts = self.ts or self.log_time()
        if msg is None:
            self.rows.append((ts, event, vhost, "", "", queue, None, None, consumer_tag,
                              attempt, None, reason, protocol))
            return
        self.rows.append((ts, event, vhost, msg.exchange, msg.routing_key, queue,
                          msg.log_id, msg.key, consumer_tag, attempt, msg.body_size, reason,
                          protocol))

    def log_msg(self, event: str, vhost: str, msg: Message, queue: str | None,
                consumer_tag: str | None, attempt: int | None,
                protocol: str | None = None) -> None:
        """log_event's row for a message event without a reason, positional only: the
        hot path's three rows per message; the caller checks ``on`` first.
        ``protocol``: the client's, for a publish, a delivery or an ack."""
        self.rows.append((self.ts or self.log_time(), event, vhost, msg.exchange,
                          msg.routing_key, queue,
                          msg._mid if msg._mid is not None else msg.log_id, msg.key,
                          consumer_tag, attempt, msg.body_size, None, protocol))


class Counters:
    """Totals since start (the admin API and /metrics read them).

    RabbitMQ's global counters, counted where they happen, at a dict
    increment each; parts receive ``stats`` (the dict itself).
    """

    def __init__(self) -> None:
        self.stats = {"published": 0, "delivered": 0, "acked": 0, "redelivered": 0,
                      "dead_lettered": 0, "expired": 0, "routed": 0, "unroutable_returned": 0,
                      "unroutable_dropped": 0, "received_confirm": 0,
                      # RabbitMQ's split of deliveries; "redelivered" above counts
                      # requeues, "delivered_redelivered" deliveries flagged redelivered
                      "delivered_consume_auto_ack": 0, "delivered_consume_manual_ack": 0,
                      "delivered_get_auto_ack": 0, "delivered_get_manual_ack": 0,
                      "get_empty": 0, "delivered_redelivered": 0,
                      "queues_declared": 0, "queues_created": 0, "queues_deleted": 0,
                      "channels_opened": 0, "channels_closed": 0,
                      # queue entries written to the store (persistent or spilled):
                      # RabbitMQ's disk_writes
                      "disk_writes": 0}
        #: published body sizes: counts per MESSAGE_SIZE_BUCKETS bucket (+Inf last), sum;
        #: a publish only appends its size to ``new_sizes``, folded in once a batch
        self.message_sizes = [0] * (len(MESSAGE_SIZE_BUCKETS) + 1)
        self.message_bytes = 0
        self.new_sizes: list[int] = []
        #: (reason, strategy) -> messages dead-lettered; strategy as RabbitMQ labels it:
        #: "at_most_once" (to a dead-letter exchange) or "disabled" (dropped)
        self.dead_letters: dict[tuple[str, str], int] = {}

    def fold_sizes(self) -> None:
        """Count the sizes published since the last fold into the histogram."""
        sizes = self.new_sizes
        counts = self.message_sizes
        # runs of one size (most publishers send one) cost a compare each, not a bisect
        last = -1
        run = bucket = total = 0
        for size in sizes:
            total += size
            if size != last:
                if run:
                    counts[bucket] += run
                bucket = bisect_left(MESSAGE_SIZE_BUCKETS, size)  # le="bound": size <= bound
                last = size
                run = 0
            run += 1
        if run:
            counts[bucket] += run
        self.message_bytes += total
        sizes.clear()
