"""Dead-lettering, and the dead-letter headers exactly as RabbitMQ writes them.

``x-death`` is an array of tables, newest first, one per (queue, reason); a
second death for the same pair increments ``count`` and moves that entry to
the front while keeping the time of its first death. ``x-first-death-*`` is
set once, ``x-last-death-*`` every time. A per-message TTL is removed (kept
as ``original-expiration``) so the copy does not expire again for the same
reason. Every header the publisher set is left as it was, type tags included.

A publisher can write its own ``x-death``; its ``count`` is then whatever it
sent ("abc", NaN, 2^64-1). Such a count never fails the rewrite: a count that
is not a non-negative integer starts again at 1, and counts stop at 2^63-1
(the largest ``long``), so dead-lettering stays a pure function of valid
properties.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from amqplite.broker.base import Counters, DeliveryLog
from amqplite.broker.exchanges import Exchange
from amqplite.broker.model import Entry, Message
from amqplite.broker.queue import Queue
from amqplite.broker.sender_selected import cc_keys, route_all
from amqplite.broker.vhost import RouteResult, VHost
from amqplite.protocol.codec import FieldArray, FieldTable, Timestamp
from amqplite.protocol.properties import (
    BasicProperties,
    decode_properties,
    encode_properties,
    with_header,
)

log = logging.getLogger("amqplite.broker")

_INT64_MAX = (1 << 63) - 1


def _s(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes | bytearray) else str(v)


def _next_count(count: Any) -> int:
    """The count after one more death, whatever a publisher put there."""
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        return min(count + 1, _INT64_MAX)
    return 1


def dead_letter_properties(
    raw: bytes,
    *,
    queue: str,
    reason: str,
    exchange: str,
    routing_keys: list[str],
    now_s: int,
    drop_cc: bool = False,
) -> bytes:
    """The properties of the dead-lettered copy of a message.

    Raises FrameSyntaxError only for properties no current publish accepts
    (see check_properties); the caller decides what happens to such a message.
    """
    props: BasicProperties = decode_properties(raw)
    headers = props.headers.copy() if props.headers is not None else FieldTable()
    deaths = headers.get("x-death")
    old: list[Any] = list(deaths) if isinstance(deaths, list) else []
    old_tags = [deaths.tag_at(i) if isinstance(deaths, FieldArray) else None
                for i in range(len(old))]
    match_i = next(
        (i for i, d in enumerate(old)
         if isinstance(d, dict) and _s(d.get("queue", "")) == queue
         and _s(d.get("reason", "")) == reason),
        None,
    )
    if match_i is not None:
        entry = old[match_i].copy() if isinstance(old[match_i], FieldTable) else FieldTable(old[match_i])
        entry.set("count", _next_count(entry.get("count", 0)), "l")
        rest = [(d, t) for i, (d, t) in enumerate(zip(old, old_tags, strict=True)) if i != match_i]
    else:
        entry = FieldTable()
        entry.set("count", 1, "l")
        entry.set("exchange", exchange, "S")
        if props.expiration is not None:
            entry.set("original-expiration", props.expiration, "S")
        entry.set("queue", queue, "S")
        entry.set("reason", reason, "S")
        keys = FieldArray()
        for k in routing_keys:
            keys.append_tagged(k, "S")
        entry.set("routing-keys", keys, "A")
        entry.set("time", Timestamp(now_s), "T")
        rest = list(zip(old, old_tags, strict=True))
    new_deaths = FieldArray()
    new_deaths.append_tagged(entry, "F")
    for d, t in rest:
        new_deaths.append_tagged(d, t)
    headers.set("x-death", new_deaths, "A")
    if "x-first-death-reason" not in headers:
        headers.set("x-first-death-exchange", exchange, "S")
        headers.set("x-first-death-queue", queue, "S")
        headers.set("x-first-death-reason", reason, "S")
    headers.set("x-last-death-exchange", exchange, "S")
    headers.set("x-last-death-queue", queue, "S")
    headers.set("x-last-death-reason", reason, "S")
    if drop_cc:  # routed by the dead-letter routing key alone, as RabbitMQ does
        headers.pop("CC", None)
    props.headers = headers
    props.expiration = None
    return encode_properties(props)


def _dead_letter_keys(q: Queue, msg: Message) -> tuple[str, list[str]]:
    """(routing key, more keys) of a dead letter: the queue's dead-letter routing key
    alone, else the message's key with its CC and BCC keys (RabbitMQ's routing_keys)."""
    if q.dlrk is not None:
        return q.dlrk, []
    return msg.routing_key, [*cc_keys(msg.properties_raw), *getattr(msg, "bcc", ())]


def is_cycle(raw_headers: Any, target_queue: str) -> bool:
    """True when routing to ``target_queue`` closes a dead-letter loop with no rejection.

    RabbitMQ drops such a message instead of letting it circle forever; a
    cycle that includes a rejection is allowed (a consumer decided each time).
    """
    deaths = raw_headers.get("x-death") if raw_headers else None
    if not isinstance(deaths, list):
        return False
    for d in deaths:
        if not isinstance(d, dict):
            continue
        if _s(d.get("reason", "")) == "rejected":
            return False
        if _s(d.get("queue", "")) == target_queue:
            return True
    return False


def with_delivery_count(raw: bytes, count: int) -> bytes:
    """Properties with ``x-delivery-count`` set (quorum-queue redeliveries)."""
    return with_header(raw, "x-delivery-count", count, "l")


def _copy_needs_body(msg: Message, routed: RouteResult) -> bool:
    """Would the dead-lettered copy of this paged-out message reach a queue that
    does not store it (so the body must be in RAM, not copied row to row)?"""
    return bool(routed.retainers) or any(  # a retained copy holds its own body
        not (msg.persistent and t.durable and not t.exclusive) for t in routed.queues)


class DeadLetterer:
    """RabbitMQ's dead-lettering: x-death, cycles dropped, atomic in the store.

    Receives the clock, the vhost table, the counters and the delivery log;
    ``wire`` hands it what a copy's journey needs from the parts built after
    it: the publisher's ``new_message_key``, ``_retain`` and ``enqueue``, the
    dispatcher's ``_dispatch`` and ``_entry_done``, the pager's
    ``_request_page_in``. It calls them directly (re-entrant, as before the
    split: dispatch -> expire -> dead_letter -> enqueue -> dispatch), which keeps
    the order of deliveries exactly as it was.
    """

    def __init__(self, *, now: Callable[[], float], vhosts: dict[str, VHost],
                 counters: Counters, log: DeliveryLog) -> None:
        self.now = now
        self.vhosts = vhosts
        self.stats = counters.stats
        self.dead_letters = counters.dead_letters
        self.log_event = log.log_event

    def wire(self, *, new_message_key: Callable[[], int],
             retain: Callable[[VHost, tuple[Exchange, ...], Message], bool],
             enqueue: Callable[[Queue, Message], int], dispatch: Callable[[Queue], None],
             entry_done: Callable[[Queue, Entry], None],
             request_page_in: Callable[[Queue], None]) -> None:
        """The parts a dead-lettered copy goes through, built after this one."""
        self.new_message_key = new_message_key
        self._retain = retain
        self.enqueue = enqueue
        self._dispatch = dispatch
        self._entry_done = entry_done
        self._request_page_in = request_page_in

    def dead_letter(self, q: Queue, e: Entry, reason: str) -> None:
        """A message leaves ``q`` for ``reason``; without a dead-letter exchange it is dropped.

        The removal and the copy's insertion land in the same store batch, so
        one transaction holds both: a crash never loses or duplicates it.
        """
        msg = e.message
        copy = self._dead_letter_copy(q, msg, reason)
        if copy is not None:
            new, routed = copy
            if msg.body is None and _copy_needs_body(msg, routed):
                # park it (its row stays until then); paged_in() finishes the job,
                # routing again then: bindings may change while the body is read
                q.awaiting_body.append((e, reason))
                self._request_page_in(q)
                return
            # the copy's inserts go first: a copied body is read from the source row,
            # which the source's delete may garbage-collect
            self._send_dead_letter(q, msg, reason, new, routed)
        self._entry_done(q, e)

    def _count_dead_letter(self, reason: str, strategy: str) -> None:
        key = (reason, strategy)
        self.dead_letters[key] = self.dead_letters.get(key, 0) + 1

    def _dead_letter_message(self, q: Queue, msg: Message, reason: str) -> None:
        """Dead-letter ``msg`` (in RAM) from ``q``: the copy is routed and enqueued."""
        copy = self._dead_letter_copy(q, msg, reason)
        if copy is not None:
            self._send_dead_letter(q, msg, reason, *copy)

    def _dead_letter_copy(self, q: Queue, msg: Message,
                          reason: str) -> tuple[Message, RouteResult] | None:
        """The dead-lettered copy of ``msg`` and where it goes, routed once (the
        caller decides with it whether the body must be read first, then sends
        it); None when it is dropped instead (no dead-letter exchange, malformed
        properties), logged and counted here. The copy gets its key when sent."""
        vh = self.vhosts.get(q.vhost)
        dlx = q.dlx
        ex = vh.exchanges.get(dlx) if vh is not None and dlx is not None else None
        if vh is None or ex is None:
            self.log_event("dead_lettered", q.vhost, msg, q.name, reason=f"{reason}:dropped")
            self._count_dead_letter(reason, "disabled")
            return None
        rk, keys = _dead_letter_keys(q, msg)
        try:
            cc = cc_keys(msg.properties_raw)
            raw = dead_letter_properties(
                msg.properties_raw, queue=q.name, reason=reason, exchange=msg.exchange,
                routing_keys=[msg.routing_key, *cc], now_s=int(self.now()),
                drop_cc=bool(cc) and q.dlrk is not None,
            )
        except Exception as exc:  # one message's content never escapes into a timer or a client
            # Publish checks properties, so only a message stored by an older version
            # gets here. Without x-death a cycle could not be detected, and a
            # consumer's client library may fail on its header: drop it, loudly.
            log.error("dropped message %s dead-lettered (%s) from queue '%s' in vhost '%s': "
                      "malformed properties (%s)", msg.message_id, reason, q.name, q.vhost, exc)
            self.log_event("dead_lettered", q.vhost, msg, q.name, reason=f"{reason}:malformed")
            return None
        new = Message(0, ex.name, rk, raw, msg.body, body_size=msg.body_size,
                      persistent=msg.persistent)
        new._mid = msg.message_id
        bcc = getattr(msg, "bcc", ())
        if bcc and q.dlrk is None:
            new.bcc = bcc
        return new, route_all(vh, ex, rk, keys, new)

    def _send_dead_letter(self, q: Queue, msg: Message, reason: str, new: Message,
                          routed: RouteResult) -> None:
        """Send the copy ``new`` of ``msg`` where ``routed`` says: retaining exchanges
        passed keep it (as RabbitMQ's recent-history exchange does), queues that
        close a dead-letter cycle without a rejection are left out."""
        new.key = self.new_message_key()
        if msg.body is None:
            new.copy_of = msg.key
        self.stats["dead_lettered"] += 1
        self._count_dead_letter(reason, "at_most_once")
        self.log_event("dead_lettered", q.vhost, msg, q.name, reason=reason)
        vh = self.vhosts[q.vhost]
        self._retain(vh, routed.retainers, new)
        headers = new.headers()
        targets = [t for t in routed.queues if not is_cycle(headers, t.name)]
        for t in targets:
            self.enqueue(t, new)
        for t in targets:
            if t is not q:
                self._dispatch(t)

    def drop_malformed(self, q: Queue, e: Entry, detail: str) -> None:
        """Remove a stored entry whose properties do not decode, with an error in the log.

        Recovery calls it for messages an older version stored before publish
        checked properties: such a message cannot be dead-lettered with x-death,
        and a consumer's client library may fail on its header frame.
        """
        log.error("dropped message %s in queue '%s' in vhost '%s': malformed properties (%s)",
                  e.message.message_id, q.name, q.vhost, detail)
        self.log_event("dead_lettered", q.vhost, e.message, q.name, reason="malformed:dropped")
        self._entry_done(q, e)
