"""The broker's in-memory state: messages, queue entries, consumers, channels.

These are plain mutable objects with slots; the vhost mutates them and emits
effects. Nothing here does I/O.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from amqplite.protocol.errors import FrameSyntaxError
from amqplite.protocol.properties import delivery_mode_of, headers_of, message_id_of, printable

if TYPE_CHECKING:
    from amqplite.broker.confirms import ConfirmGate
    from amqplite.broker.queue import Queue
    from amqplite.broker.streamlog import StreamEntry
    from amqplite.protocol.properties import BasicProperties

#: the delivery log's name for a session's protocol unless its shell names another
AMQP_PROTOCOL = "amqp-0-9-1"


class Message:
    """One published message; shared by every queue it was routed to.

    ``body`` is None while the body is paged out to the store (deep durable
    queues); the server loads it back before writing a delivery.
    """

    __slots__ = (
        "_mid",
        "_props",
        "bcc",
        "body",
        "body_size",
        "copy_of",
        "exchange",
        "key",
        "persistent",
        "pinned",
        "properties_raw",
        "routing_key",
        "stored",
    )
    #: the BCC keys it was published with (their header is stripped), set only when
    #: there were some, so the hot path pays nothing; read with ``getattr(m, "bcc", ())``.
    #: A dead letter without a dead-letter routing key goes there too (RabbitMQ)
    bcc: tuple[str, ...]

    def __init__(
        self,
        key: int,
        exchange: str,
        routing_key: str,
        properties_raw: bytes,
        body: bytes | None,
        body_size: int | None = None,
        persistent: bool | None = None,
    ) -> None:
        self.key = key
        self.exchange = exchange
        self.routing_key = routing_key
        self.properties_raw = properties_raw
        self.body = body
        self.body_size = len(body) if body_size is None and body is not None else (body_size or 0)
        self._props: BasicProperties | None = None
        #: the publisher's message-id: None until looked at, "" if there is none
        #: (no flag: known without a walk), so the broker's ``amq-KEY`` applies;
        #: delivery-log rows store "" for that (readers write ``amq-KEY``),
        #: which saves a string per message on the hot path
        self._mid: str | None = (
            None if len(properties_raw) > 1 and properties_raw[1] & 0x80 else "")
        if persistent is None:
            persistent = delivery_mode_of(properties_raw) == 2
        self.persistent = persistent
        #: True once a PutMessage for this message has been emitted.
        self.stored = False
        #: a dead-lettered copy of a paged-out message: the store copies the body row
        self.copy_of: int | None = None
        #: live entries holding this message that are not in the store (non-durable
        #: or exclusive queues): while any exist the body must stay in RAM, since
        #: the stored row goes once the durable entries are settled
        self.pinned = 0

    @property
    def properties(self) -> BasicProperties:
        """Decoded on first use only: most messages are never looked inside."""
        if self._props is None:
            from amqplite.protocol.properties import decode_properties

            self._props = decode_properties(self.properties_raw)
        return self._props

    def headers(self) -> dict[str, Any] | None:
        if self._props is not None:
            return self._props.headers
        return headers_of(self.properties_raw)

    @property
    def message_id(self) -> str:
        """The publisher's message-id, else one the broker assigns for life.

        Always valid UTF-8 (it goes into delivery-log rows and admin JSON):
        bytes of a non-UTF-8 id show as ``\\xNN``, at most 255 characters.
        """
        return self.log_id or f"amq-{self.key}"

    @property
    def log_id(self) -> str:
        """What a delivery-log row stores as message id: the publisher's (made
        valid UTF-8), or "" for the one the broker assigns (``amq-KEY``)."""
        mid = self._mid
        if mid is None:
            raw = self.properties_raw
            if len(raw) < 2 or not raw[1] & 0x80:  # no message-id flag: no walk
                mid = None
            else:
                try:
                    mid = message_id_of(raw)
                except FrameSyntaxError:  # only messages stored before publish checked them
                    mid = None
            if not mid:
                mid = ""
            elif not mid.isascii():
                mid = printable(mid)[:255]
            self._mid = mid
        return mid


class Entry:
    """A message's place in one queue."""

    __slots__ = (
        "committed",
        "delivery_count",
        "expires_at",
        "gate",
        "in_ready",
        "message",
        "position",
        "priority",
        "redelivered",
        "stored",
    )

    def __init__(self, position: int, message: Message, stored: bool = False) -> None:
        self.position = position
        self.message = message
        self.delivery_count = 0
        self.redelivered = False
        self.stored = stored
        #: its row's insert has committed (it may spill to disk)
        self.committed = False
        self.expires_at: float | None = None
        self.in_ready = False
        self.priority = 0
        #: the ConfirmGate its publish counts it in (confirms.py), till it is acked
        self.gate: ConfirmGate | None = None


class Consumer:
    __slots__ = ("arguments", "channel", "exclusive", "no_ack", "prefetch", "priority", "queue",
                 "selector", "served", "tag", "unacked")

    def __init__(
        self,
        tag: str,
        channel: ChannelState,
        queue: Queue,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.tag = tag
        self.channel = channel
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.unacked = 0
        self.arguments = arguments or {}
        #: x-priority: consumers with room and the highest priority are served first
        p = self.arguments.get("x-priority")
        self.priority = p if isinstance(p, int) and not isinstance(p, bool) else 0
        #: when it was last served (the queue's counter): round-robin among equals
        self.served = 0
        #: a STOMP ``selector`` on a shared queue (broker/selector.py): only the
        #: messages it matches come here (None: every message)
        self.selector: Any = None

    def has_room(self) -> bool:
        if self.no_ack:
            return self.channel.can_deliver_no_ack()
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        return self.channel.can_deliver()


class Delivery:
    """An unacked delivery, keyed by its delivery tag on its channel. A stream read's
    ``entry`` is a :class:`~amqplite.broker.streamlog.StreamEntry` (an offset and its
    stored record), never requeued or dead-lettered."""

    __slots__ = ("consumer", "entry", "queue", "tag")

    def __init__(self, tag: int, queue: Queue, entry: Entry | StreamEntry,
                 consumer: Consumer | None) -> None:
        self.tag = tag
        self.queue = queue
        self.entry = entry
        self.consumer = consumer


class Session:
    """One client connection as the broker sees it."""

    __slots__ = ("channels", "client_id", "client_properties", "congested", "id", "internal",
                 "peer", "protocol", "transport", "username", "vhost", "writable")

    def __init__(self, sid: int, username: str, vhost: str, peer: str = "") -> None:
        self.id = sid
        self.username = username
        self.vhost = vhost
        self.peer = peer
        self.channels: dict[int, ChannelState] = {}
        self.client_properties: dict[str, Any] = {}
        #: Opaque handle the server uses to write to this connection (never read here).
        self.transport: Any = None
        #: False while the connection's socket is backed up: its consumers wait
        #: (the shell tells the broker with ``set_writable``).
        self.writable = True
        #: the broker's own session (definitions import): no permission checks
        self.internal = False
        #: an MQTT session's client id: ``{client_id}`` in topic permissions
        self.client_id: str | None = None
        #: the client's protocol, as the delivery log records it (MQTT sets its own)
        self.protocol = AMQP_PROTOCOL
        #: a queue this session published to that its consumers have a backlog of
        #: (see publish.FLOW_READY); the shell clears it when it pauses reading
        self.congested: Any = None


class ChannelState:
    """Per-channel dispatch state: consumers, unacked deliveries, prefetch, modes."""

    __slots__ = (
        "allowed",
        "confirm",
        "confirms",
        "consumers",
        "flow",
        "global_prefetch",
        "last_props",
        "last_queue",
        "last_table",
        "n_ack",
        "n_confirm",
        "n_deliver",
        "n_deliver_no_ack",
        "n_drop_unroutable",
        "n_get",
        "n_get_empty",
        "n_get_no_ack",
        "n_redeliver",
        "n_return_unroutable",
        "next_tag",
        "number",
        "open",
        "prefetch",
        "publishes",
        "reply_consumer",
        "reply_name",
        "session",
        "tx",
        "tx_acks",
        "tx_publishes",
        "unacked",
    )

    def __init__(self, session: Session, number: int) -> None:
        self.session = session
        self.number = number
        #: the last permission check that passed, (epoch, perm, kind, name): a publisher
        #: to one exchange is checked once per permission change, not per message
        self.allowed: tuple[int, str, str, str] | None = None
        self.consumers: dict[str, Consumer] = {}
        self.unacked: OrderedDict[int, Delivery] = OrderedDict()
        self.next_tag = 1
        #: messages published on this channel (its message_stats)
        self.publishes = 0
        #: the rest of its message_stats (CHANNEL_STATS): plain ints, one add where the
        #: event happens; the admin's sampler reads them, nothing else does
        self.n_confirm = self.n_return_unroutable = self.n_drop_unroutable = 0
        self.n_deliver = self.n_deliver_no_ack = self.n_get = self.n_get_no_ack = 0
        self.n_get_empty = self.n_ack = self.n_redeliver = 0
        #: basic.qos global=false: the limit given to consumers created afterwards.
        self.prefetch = 0
        #: basic.qos global=true: one limit shared by all consumers of the channel.
        self.global_prefetch = 0
        self.flow = True
        self.confirm = False
        #: publisher-confirm accounting (confirms.ConfirmState) once in confirm mode
        self.confirms: Any = None
        self.tx = False
        self.tx_publishes: list[Any] = []
        self.tx_acks: list[Any] = []
        self.open = True
        #: the queue last declared on this channel (an empty name refers to it)
        self.last_queue = ""
        #: direct reply-to: the consumer tag on ``amq.rabbitmq.reply-to`` and the
        #: private name requests published here carry as their reply_to
        self.reply_consumer: str | None = None
        self.reply_name: str | None = None
        #: the last content properties publish accepted here (most publishers repeat
        #: them), and the last header table in them (or b""): see check_properties
        self.last_props: bytes | None = None
        self.last_table = b""

    def can_deliver(self) -> bool:
        if not self.flow or not self.session.writable:
            return False
        return not (self.global_prefetch and len(self.unacked) >= self.global_prefetch)

    def can_deliver_no_ack(self) -> bool:
        return self.flow and self.session.writable


#: a channel's message counters as RabbitMQ's channel message_stats names them, and
#: the attributes that hold them (read together by ``channel_counts``)
CHANNEL_STATS = ("publish", "confirm", "return_unroutable", "drop_unroutable", "deliver",
                 "deliver_no_ack", "get", "get_no_ack", "get_empty", "ack", "redeliver")
channel_counts: Callable[[ChannelState], tuple[int, ...]] = attrgetter(
    "publishes", *(f"n_{k}" for k in CHANNEL_STATS[1:]))


class ReadyList:
    """Ready entries in position order: appends at the tail, requeues by position.

    A deep queue keeps only its head in RAM. Committed entries behind the
    head spill to the store (see ``broker/paging.py``): the spilled run is a
    contiguous range of positions ``disk_lo..disk_hi`` that exists only as
    rows, counted here (``disk_count``, in ``bytes`` too) and loaded back in
    order when the head runs low. Entries that arrive while a spilled run
    exists wait in ``_tail``, so order is kept: head, disk, tail.
    """

    __slots__ = ("_d", "_tail", "bytes", "disk_bytes", "disk_count", "disk_hi", "disk_lo")

    def __init__(self) -> None:
        self._d: deque[Entry] = deque()
        self._tail: deque[Entry] = deque()
        #: bytes of every ready entry, spilled ones included
        self.bytes = 0
        self.disk_count = 0
        self.disk_bytes = 0
        self.disk_lo = 0
        self.disk_hi = 0

    def __len__(self) -> int:
        return len(self._d) + self.disk_count + len(self._tail)

    def __bool__(self) -> bool:
        return bool(self._d) or self.disk_count > 0 or bool(self._tail)

    def __iter__(self):  # type: ignore[no-untyped-def]
        """The entries in RAM, in order (spilled ones are not objects until loaded)."""
        if self._tail:
            return itertools.chain(self._d, self._tail)
        return iter(self._d)

    @property
    def ram_count(self) -> int:
        return len(self._d) + len(self._tail)

    def ram_parts(self) -> tuple[deque[Entry], deque[Entry]]:
        """The entries in RAM before the spilled run and after it, for a reader that
        walks the whole queue in order (the admin API's peek); not to be changed."""
        return self._d, self._tail

    @property
    def head_count(self) -> int:
        """Entries in RAM ahead of the spilled run (all of them when nothing is spilled)."""
        return len(self._d)

    @property
    def needs_load(self) -> bool:
        """The head is empty but spilled entries are next: load them before going on."""
        return not self._d and self.disk_count > 0

    def append(self, e: Entry) -> None:
        (self._tail if self.disk_count else self._d).append(e)
        e.in_ready = True
        self.bytes += e.message.body_size

    def popleft(self) -> Entry:
        """The first entry; callers check ``needs_load`` first."""
        e = self._d.popleft()
        e.in_ready = False
        self.bytes -= e.message.body_size
        return e

    def peek(self) -> Entry:
        return self._d[0]

    def behind_head(self, window: int) -> Iterable[Entry]:
        """RAM entries that would spill next: after the spilled run, or after ``window``."""
        if self.disk_count:
            return iter(self._tail)
        return itertools.islice(self._d, window, None)

    def spill(self, window: int, eligible: Callable[[Entry], bool]) -> list[Entry]:
        """Move the run of ``eligible`` entries right behind the spilled run (or behind
        the first ``window`` entries when nothing is spilled yet) to disk; returns them.

        Only entries whose rows are committed may go: they are dropped from RAM.
        """
        d, tail = self._d, self._tail
        if not self.disk_count:
            while len(d) > window:
                tail.appendleft(d.pop())
        out: list[Entry] = []
        while tail and eligible(tail[0]):
            e = tail.popleft()
            e.in_ready = False
            out.append(e)
        if out:
            if not self.disk_count:
                self.disk_lo = out[0].position
            self.disk_hi = out[-1].position
            self.disk_count += len(out)
            self.disk_bytes += sum(e.message.body_size for e in out)
        if not self.disk_count and tail:
            d.extend(tail)
            tail.clear()
        return out

    def loaded(self, entries: list[Entry], next_lo: int, exhausted: bool) -> None:
        """Spilled entries read back from the store, in order, join the head.

        ``next_lo``: the position after the last one read; ``exhausted``: the
        store has no more rows in the spilled range (any count left over is gone).
        """
        d = self._d
        size = 0
        for e in entries:
            e.in_ready = True
            size += e.message.body_size
            d.append(e)
        self.disk_count -= len(entries)
        self.disk_bytes -= size
        self.disk_lo = next_lo
        if exhausted or self.disk_count <= 0 or next_lo > self.disk_hi:
            self.drop_disk()  # a count left over means rows are gone: not ready any more
            d.extend(self._tail)
            self._tail.clear()

    def restore_disk(self, count: int, size: int, lo: int, hi: int) -> None:
        """Recovery: the queue's entries after its first window are in the store only."""
        self.disk_count, self.disk_bytes, self.disk_lo, self.disk_hi = count, size, lo, hi
        self.bytes += size

    def drop_disk(self) -> tuple[int, int, int]:
        """Forget the spilled run (purge, delete): its (count, lo, hi) for the store."""
        out = (self.disk_count, self.disk_lo, self.disk_hi)
        self.bytes -= self.disk_bytes
        self.disk_count = self.disk_bytes = 0
        self.disk_lo = self.disk_hi = 0
        return out

    def pop_tail(self) -> Entry:
        e = self._d.pop()
        e.in_ready = False
        self.bytes -= e.message.body_size
        return e

    def insert_sorted(self, e: Entry) -> None:
        """Put a requeued entry back at its original position."""
        d = self._tail if self.disk_count and e.position > self.disk_hi else self._d
        e.in_ready = True
        self.bytes += e.message.body_size
        if not d or d[0].position > e.position:
            d.appendleft(e)
            return
        if d[-1].position < e.position:
            d.append(e)
            return
        lo, hi = 0, len(d)
        while lo < hi:
            mid = (lo + hi) // 2
            if d[mid].position < e.position:
                lo = mid + 1
            else:
                hi = mid
        d.insert(lo, e)

    def clear(self) -> list[Entry]:
        """Empty the queue; returns the entries in RAM (call ``drop_disk`` first for the rest)."""
        out = [*self._d, *self._tail]
        self._d.clear()
        self._tail.clear()
        self.bytes = self.disk_bytes
        for e in out:
            e.in_ready = False
        return out

    def remove_where(self, pred: Any) -> list[Entry]:
        gone: list[Entry] = []
        parts = []
        for part in (self._d, self._tail):
            keep: deque[Entry] = deque()
            for e in part:
                (gone if pred(e) else keep).append(e)
            parts.append(keep)
        self._d, self._tail = parts
        self.bytes = self.disk_bytes + sum(e.message.body_size for e in itertools.chain(*parts))
        for e in gone:
            e.in_ready = False
        return gone


class PriorityReadyList:
    """Ready entries for an ``x-max-priority`` queue: highest priority first, FIFO within."""

    __slots__ = ("_levels", "bytes")

    def __init__(self, max_priority: int) -> None:
        self._levels = [ReadyList() for _ in range(max_priority + 1)]
        self.bytes = 0

    def _level(self, e: Entry) -> ReadyList:
        return self._levels[min(e.priority, len(self._levels) - 1)]

    def __len__(self) -> int:
        return sum(len(lv) for lv in self._levels)

    def __bool__(self) -> bool:
        return any(self._levels)

    #: priority queues never spill: everything is in RAM
    needs_load = False
    disk_count = 0
    disk_bytes = 0

    @property
    def head_count(self) -> int:
        return len(self)

    @property
    def ram_count(self) -> int:  # not an alias (``= head_count``): compiled, that fails
        return len(self)

    def drop_disk(self) -> tuple[int, int, int]:
        return 0, 0, 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        for lv in reversed(self._levels):
            yield from lv

    def _top(self) -> ReadyList:
        for lv in reversed(self._levels):
            if lv:
                return lv
        raise IndexError("empty")

    def append(self, e: Entry) -> None:
        self._level(e).append(e)
        self.bytes += e.message.body_size

    def popleft(self) -> Entry:
        e = self._top().popleft()
        self.bytes -= e.message.body_size
        return e

    def peek(self) -> Entry:
        return self._top().peek()

    def pop_tail(self) -> Entry:
        for lv in self._levels:
            if lv:
                e = lv.pop_tail()
                self.bytes -= e.message.body_size
                return e
        raise IndexError("empty")

    def insert_sorted(self, e: Entry) -> None:
        self._level(e).insert_sorted(e)
        self.bytes += e.message.body_size

    def clear(self) -> list[Entry]:
        out = [e for lv in reversed(self._levels) for e in lv.clear()]
        self.bytes = 0
        return out

    def remove_where(self, pred: Any) -> list[Entry]:
        gone = [e for lv in reversed(self._levels) for e in lv.remove_where(pred)]
        self.bytes = sum(lv.bytes for lv in self._levels)
        return gone
