"""The broker's in-memory state: messages, queue entries, consumers, channels.

These are plain mutable objects with slots; the vhost mutates them and emits
effects. Nothing here does I/O.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any

from amqplite.protocol.errors import FrameSyntaxError
from amqplite.protocol.properties import delivery_mode_of, headers_of, message_id_of, printable

if TYPE_CHECKING:
    from amqplite.broker.queue import Queue
    from amqplite.protocol.properties import BasicProperties


class Message:
    """One published message; shared by every queue it was routed to.

    ``body`` is None while the body is paged out to the store (deep durable
    queues); the server loads it back before writing a delivery.
    """

    __slots__ = (
        "_mid",
        "_props",
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
        self._mid: str | None = None
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
        mid = self._mid
        if mid is None:
            try:
                mid = message_id_of(self.properties_raw)
            except FrameSyntaxError:  # only messages stored before publish checked them
                mid = None
            if not mid:
                mid = f"amq-{self.key}"
            elif not mid.isascii():
                mid = printable(mid)[:255]
            self._mid = mid
        return mid


class Entry:
    """A message's place in one queue."""

    __slots__ = (
        "delivery_count",
        "expires_at",
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
        self.expires_at: float | None = None
        self.in_ready = False
        self.priority = 0


class Consumer:
    __slots__ = ("arguments", "channel", "exclusive", "no_ack", "prefetch", "priority", "queue",
                 "served", "tag", "unacked")

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

    def has_room(self) -> bool:
        if self.no_ack:
            return self.channel.can_deliver_no_ack()
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        return self.channel.can_deliver()


class Delivery:
    """An unacked delivery, keyed by its delivery tag on its channel."""

    __slots__ = ("consumer", "entry", "queue", "tag")

    def __init__(self, tag: int, queue: Queue, entry: Entry, consumer: Consumer | None) -> None:
        self.tag = tag
        self.queue = queue
        self.entry = entry
        self.consumer = consumer


class Session:
    """One client connection as the broker sees it."""

    __slots__ = ("channels", "client_properties", "id", "peer", "transport", "username", "vhost",
                 "writable")

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


class ChannelState:
    """Per-channel dispatch state: consumers, unacked deliveries, prefetch, modes."""

    __slots__ = (
        "confirm",
        "confirms",
        "consumers",
        "flow",
        "global_prefetch",
        "last_props",
        "last_queue",
        "last_table",
        "next_tag",
        "number",
        "open",
        "prefetch",
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
        self.consumers: dict[str, Consumer] = {}
        self.unacked: OrderedDict[int, Delivery] = OrderedDict()
        self.next_tag = 1
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


class ReadyList:
    """Ready entries in position order: appends at the tail, requeues by position."""

    __slots__ = ("_d", "bytes")

    def __init__(self) -> None:
        self._d: deque[Entry] = deque()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._d)

    def __bool__(self) -> bool:
        return bool(self._d)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._d)

    def append(self, e: Entry) -> None:
        self._d.append(e)
        e.in_ready = True
        self.bytes += e.message.body_size

    def popleft(self) -> Entry:
        e = self._d.popleft()
        e.in_ready = False
        self.bytes -= e.message.body_size
        return e

    def peek(self) -> Entry:
        return self._d[0]

    def pop_tail(self) -> Entry:
        e = self._d.pop()
        e.in_ready = False
        self.bytes -= e.message.body_size
        return e

    def insert_sorted(self, e: Entry) -> None:
        """Put a requeued entry back at its original position."""
        d = self._d
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
        out = list(self._d)
        self._d.clear()
        self.bytes = 0
        for e in out:
            e.in_ready = False
        return out

    def remove_where(self, pred: Any) -> list[Entry]:
        keep: deque[Entry] = deque()
        gone: list[Entry] = []
        for e in self._d:
            (gone if pred(e) else keep).append(e)
        self._d = keep
        self.bytes = sum(e.message.body_size for e in keep)
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
