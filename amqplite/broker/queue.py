"""A queue: ready entries in position order, its consumers, and its counters."""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from amqplite.broker.exchanges.selected import message_headers
from amqplite.broker.model import Consumer, PriorityReadyList, ReadyList
from amqplite.broker.streamlog import DEFAULT_SEGMENT_SIZE, StreamLog, parse_age
from amqplite.broker.vhost import NO_RETAINERS, RouteResult

if TYPE_CHECKING:
    from amqplite.broker.model import Entry, Message, Session


class Queue:
    __slots__ = (
        "active",
        "arguments",
        "auto_delete",
        "awaiting_body",
        "consumers",
        "deleted",
        "delivery_limit",
        "dlrk",
        "dlx",
        "durable",
        "exclusive_owner",
        "expires",
        "had_consumer",
        "id",
        "last_used",
        "max_age",
        "max_bytes",
        "max_length",
        "n_ack",
        "n_deliver",
        "n_deliver_no_ack",
        "n_get",
        "n_get_empty",
        "n_get_no_ack",
        "n_redeliver",
        "name",
        "next_position",
        "overflow",
        "paging",
        "parked",
        "policy",
        "prioritised",
        "quorum",
        "ready",
        "route_to",
        "rr",
        "segment_size",
        "selective",
        "served",
        "single_active",
        "spilled",
        "stream",
        "ttl",
        "unacked",
        "vhost",
    )

    def __init__(
        self,
        qid: int,
        vhost: str,
        name: str,
        *,
        durable: bool = False,
        exclusive_owner: Session | None = None,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.id = qid
        self.vhost = vhost
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments: dict[str, Any] = dict(arguments or {})
        mp = self.arguments.get("x-max-priority")
        self.ready: Any = (
            PriorityReadyList(min(int(mp), 255))
            if isinstance(mp, int) and not isinstance(mp, bool) and mp > 0 else ReadyList()
        )
        #: in registration order (single active consumer hands over in this order)
        self.consumers: list[Consumer] = []
        self.rr = 0
        #: some consumer has a non-zero x-priority: pick by priority, not plain turns
        self.prioritised = False
        self.served = 0
        #: x-single-active-consumer: only ``active`` receives; the rest wait their turn
        self.single_active = self.arguments.get("x-single-active-consumer") is True
        self.active: Consumer | None = None
        #: some consumer has a selector: dispatch goes the selective way (dispatch.py)
        self.selective = False
        #: entries taken off the head that no current consumer's selector matches, in
        #: position order: back in ``ready`` when the consumers change
        self.parked: list[Entry] = []
        #: entries of this queue were written to the store to spill (transient ones
        #: included): deleting it must delete their rows even if it is not durable
        self.spilled = False
        self.unacked = 0
        self.next_position = 1
        self.had_consumer = False
        self.deleted = False
        #: True while a PageIn for this queue's head is outstanding.
        self.paging = False
        #: (entry, reason) taken off ``ready`` to be dead-lettered once the body
        #: is paged in: a copy for a queue that is not stored needs it in RAM
        self.awaiting_body: list[tuple[Entry, str]] = []
        #: the policy in force (highest priority match), see Broker.apply_policies
        self.policy: Any = None
        #: when a consumer, get or declare last touched it (for x-expires)
        self.last_used = 0.0
        #: message counters (QUEUE_STATS; publish is next_position): plain ints, one
        #: add where the event happens; the admin API turns them into rates
        self.n_deliver = self.n_deliver_no_ack = self.n_get = self.n_get_no_ack = 0
        self.n_get_empty = self.n_ack = self.n_redeliver = 0
        qt = self.arguments.get("x-queue-type")
        self.quorum = qt in ("quorum", b"quorum")
        #: x-queue-type stream: an append-only log read through cursors (streams.py)
        self.stream = StreamLog() if qt in ("stream", b"stream") else None
        #: what routing by this queue's name gives (the default exchange's route):
        #: made once, so that route allocates nothing per message
        self.route_to = RouteResult((self,), NO_RETAINERS)
        self.refresh_settings()

    def refresh_settings(self) -> None:
        """Cache the effective dead-letter/limit settings (arguments win over policy)."""
        from amqplite.broker.policy import effective

        a, p = self.arguments, self.policy
        self.ttl = effective(a, p, "message-ttl")
        self.dlx = effective(a, p, "dead-letter-exchange")
        self.dlrk = effective(a, p, "dead-letter-routing-key")
        self.max_length = effective(a, p, "max-length")
        self.max_bytes = effective(a, p, "max-length-bytes")
        self.overflow = effective(a, p, "overflow") or "drop-head"
        self.delivery_limit = effective(a, p, "delivery-limit")
        self.expires = effective(a, p, "expires")
        self.max_age = parse_age(effective(a, p, "max-age"))
        self.segment_size = effective(a, p, "stream-max-segment-size-bytes") \
            or DEFAULT_SEGMENT_SIZE

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def message_count(self) -> int:
        return len(self.ready) + len(self.parked)

    def backlog(self) -> tuple[int, int]:
        """(messages, body bytes) the queue holds for its limits (x-max-length,
        x-max-length-bytes): ready, and parked where no consumer's selector matched."""
        parked = self.parked
        if not parked:
            return len(self.ready), self.ready.bytes
        return (len(self.ready) + len(parked),
                self.ready.bytes + sum(e.message.body_size for e in parked))

    @property
    def deliver_get(self) -> int:
        """Messages handed out: consumer deliveries and basic.get-oks, either ack mode."""
        return self.n_deliver + self.n_deliver_no_ack + self.n_get + self.n_get_no_ack

    def take_position(self) -> int:
        p = self.next_position
        self.next_position = p + 1
        return p

    def add_consumer(self, c: Consumer) -> None:
        self.consumers.append(c)
        if c.priority:
            self.prioritised = True
        if self.single_active and self.active is None:
            self.active = c

    def remove_consumer(self, c: Consumer) -> bool:
        """Drop ``c``; True when another consumer became the single active one."""
        self.consumers.remove(c)
        if self.rr >= len(self.consumers):
            self.rr = 0
        self.prioritised = any(x.priority for x in self.consumers)
        if self.active is not c:
            return False
        # the highest priority waiting, the earliest registered among equals
        self.active = max(self.consumers, key=lambda x: x.priority, default=None)
        return self.active is not None

    def pick_consumer(self, msg: Message | None = None) -> Consumer | None:
        """The consumer to serve next, or None when every candidate is full.

        Plain queues take turns (round-robin among consumers with room). With
        consumer priorities, the highest priority with room wins, and the one
        served longest ago among equals; single active consumer queues serve
        only the active one. With ``msg`` (a queue with a selector consumer), a
        consumer whose selector does not match it is no candidate; its headers
        are built once, for the first selector met.
        """
        cs = self.consumers
        if self.single_active:
            a = self.active
            if a is None or not a.has_room():
                return None
            if msg is None or a.selector is None:
                return a
            return a if a.selector.matches(message_headers(msg)) else None
        headers: dict[str, str] | None = None
        prioritised = self.prioritised
        best: Consumer | None = None
        n = len(cs)
        start = self.rr if not prioritised and self.rr < n else 0
        for i in range(n):
            c = cs[(start + i) % n]
            if msg is not None and c.selector is not None:
                if headers is None:
                    headers = message_headers(msg)
                if not c.selector.matches(headers):
                    continue
            if not c.has_room():
                continue
            if not prioritised:
                self.rr = (start + i + 1) % n
                return c
            if best is None or c.priority > best.priority or (
                    c.priority == best.priority and c.served < best.served):
                best = c
        if best is not None:
            self.served += 1
            best.served = self.served
        return best

    def selected_by_any(self, msg: Message) -> bool:
        """Whether some candidate consumer's selector (or lack of one) takes ``msg``, full
        or not: when none does, the dispatcher parks it instead of waiting."""
        cs = self.consumers
        if self.single_active:
            cs = [] if self.active is None else [self.active]
        headers: dict[str, str] | None = None
        for c in cs:
            if c.selector is None:
                return True
            if headers is None:
                headers = message_headers(msg)
            if c.selector.matches(headers):
                return True
        return False


#: a queue's message counters as RabbitMQ's queue message_stats names them (besides
#: publish and deliver_get), and the attributes ``queue_counts`` reads them from
QUEUE_STATS = ("deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty", "ack",
               "redeliver")
queue_counts: Callable[[Queue], tuple[int, ...]] = attrgetter(
    *(f"n_{k}" for k in QUEUE_STATS))
