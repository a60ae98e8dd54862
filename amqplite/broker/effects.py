"""Effects and replies: what the pure broker asks of the server shell.

Commands append wire effects to ``Broker.effects``, store operations to
``Broker.outbox`` and delivery-log rows to ``Broker.log``; the shell takes
them as one :class:`Outcome` per batch (``Broker.take_outcome``) and one
interpreter carries it out. Replies a
command returns (``GetOk``, ``PublishResult``) are plain values too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amqplite.protocol.records import Record as _Record

if TYPE_CHECKING:
    from amqplite.broker.model import ChannelState, Entry, Message, Session
    from amqplite.broker.queue import Queue
    from amqplite.broker.streamlog import Cursor, StreamEntry


class Deliver(_Record):
    """Send basic.deliver to a consumer."""

    __slots__ = ("channel", "consumer_tag", "delivery_tag", "message", "properties", "redelivered")
    _FIELDS = ("channel", "consumer_tag", "delivery_tag", "redelivered", "message", "properties")

    def __init__(
        self,
        channel: ChannelState,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        message: Message,
        properties: bytes | None = None,
    ) -> None:
        self.channel = channel
        self.consumer_tag = consumer_tag
        self.delivery_tag = delivery_tag
        self.redelivered = redelivered
        self.message = message
        #: replacement property bytes (x-delivery-count on redeliveries), else None
        self.properties = properties


class StreamDeliver(_Record):
    """Send basic.deliver for stream entries read ahead, delivery tags ``first_tag``
    up, one per entry: a batch, so the shell writes them in one go from the stored
    records (``amqplite.protocol.streamrecord``)."""

    __slots__ = ("channel", "consumer_tag", "entries", "first_tag")
    _FIELDS = ("channel", "consumer_tag", "first_tag", "entries")

    def __init__(
        self,
        channel: ChannelState,
        consumer_tag: str,
        first_tag: int,
        entries: list[StreamEntry],
    ) -> None:
        self.channel = channel
        self.consumer_tag = consumer_tag
        self.first_tag = first_tag
        self.entries = entries


class Return(_Record):
    """Send basic.return for an unroutable mandatory message."""

    __slots__ = ("channel", "message", "reply_code", "reply_text")
    _FIELDS = ("channel", "reply_code", "reply_text", "message")

    def __init__(
        self,
        channel: ChannelState,
        reply_code: int,
        reply_text: str,
        message: Message,
    ) -> None:
        self.channel = channel
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.message = message


class CancelNotify(_Record):
    """Send a server-initiated basic.cancel (the consumed queue went away)."""

    __slots__ = ("channel", "consumer_tag")
    _FIELDS = ("channel", "consumer_tag")

    def __init__(self, channel: ChannelState, consumer_tag: str) -> None:
        self.channel = channel
        self.consumer_tag = consumer_tag


class CloseConnection(_Record):
    """Close a client's connection (vhost or user deleted): connection.close, then
    the close handshake. The broker has already closed the session."""

    __slots__ = ("reply_code", "reply_text", "session")
    _FIELDS = ("session", "reply_code", "reply_text")

    def __init__(self, session: Session, reply_code: int, reply_text: str) -> None:
        self.session = session
        self.reply_code = reply_code
        self.reply_text = reply_text


class PageIn(_Record):
    """Load these paged-out bodies from the store, then call ``Broker.paged_in``."""

    __slots__ = ("entries", "queue")
    _FIELDS = ("queue", "entries")

    def __init__(self, queue: Queue, entries: list[Entry]) -> None:
        self.queue = queue
        self.entries = entries


class LoadEntries(_Record):
    """Read spilled entries of ``queue`` back (positions ``lo..hi``, at most ``limit``,
    in order), then call ``Broker.entries_loaded``."""

    __slots__ = ("hi", "limit", "lo", "queue")
    _FIELDS = ("queue", "lo", "hi", "limit")

    def __init__(self, queue: Queue, lo: int, hi: int, limit: int) -> None:
        self.queue = queue
        self.lo = lo
        self.hi = hi
        self.limit = limit


class ReadStream(_Record):
    """Read a stream's entries at offsets ``lo..`` (at most ``limit``) for one
    cursor, once every earlier submission has committed, then call
    ``Broker.stream_loaded``; ``hi`` is the last offset assigned when it was asked."""

    __slots__ = ("cursor", "hi", "limit", "lo", "queue")
    _FIELDS = ("queue", "cursor", "lo", "hi", "limit")

    def __init__(self, queue: Queue, cursor: Cursor, lo: int, hi: int, limit: int) -> None:
        self.queue = queue
        self.cursor = cursor
        self.lo = lo
        self.hi = hi
        self.limit = limit


class Confirm(_Record):
    """Send basic.ack (or basic.nack when ``nack``) for publish seq ``upto``.

    ``multiple`` covers every unconfirmed seq up to ``upto``. With
    ``after_commit`` the shell holds it until the store batch that carries the
    publishes has committed, and sends a nack instead if that commit failed.
    """

    __slots__ = ("after_commit", "channel", "covered", "gate", "multiple", "nack", "state",
                 "upto")
    _FIELDS = ("channel", "upto", "multiple", "nack", "after_commit", "covered")

    def __init__(
        self,
        channel: ChannelState,
        upto: int,
        multiple: bool,
        nack: bool,
        after_commit: bool,
        covered: int = 1,
    ) -> None:
        self.channel = channel
        self.upto = upto
        self.multiple = multiple
        self.nack = nack
        self.after_commit = after_commit
        #: how many publishes it settles (the confirmed-messages counter)
        self.covered = covered
        #: bookkeeping of a held Confirm (``confirms.Confirms``): the ConfirmGate that
        #: may release it before its commit, and HELD, LANDED or SENT
        self.gate: Any = None
        self.state = 0


class Outcome(_Record):
    """One batch of commands, as the shell must carry it out.

    ``effects`` in order (a publish's Return precedes its Confirm), then
    ``store_ops`` handed to the store in one submission; ``evictable`` bodies
    may leave RAM once that submission has committed. ``log``: delivery-log
    rows, which nothing waits for (the shell may hold them back a while).
    """

    __slots__ = ("effects", "evictable", "log", "store_ops")
    _FIELDS = ("effects", "store_ops", "evictable", "log")

    def __init__(
        self,
        effects: list[Any],
        store_ops: list[Any],
        evictable: list[tuple[Queue, Entry]],
        log: list[tuple[Any, ...]] | None = None,
    ) -> None:
        self.effects = effects
        self.store_ops = store_ops
        self.evictable = evictable
        self.log: list[tuple[Any, ...]] = [] if log is None else log

    def __bool__(self) -> bool:
        return bool(self.effects or self.store_ops or self.evictable or self.log)


class GetOk(_Record):
    """basic.get's answer when the queue had a message."""

    __slots__ = ("delivery_tag", "message", "message_count", "properties", "redelivered")
    _FIELDS = ("delivery_tag", "redelivered", "message", "message_count", "properties")

    def __init__(
        self,
        delivery_tag: int,
        redelivered: bool,
        message: Message,
        message_count: int,
        properties: bytes | None,
    ) -> None:
        self.delivery_tag = delivery_tag
        self.redelivered = redelivered
        self.message = message
        self.message_count = message_count
        #: replacement property bytes (x-delivery-count), else None
        self.properties = properties


class NeedPageIn:
    """basic.get's answer when the head's body is on disk: page in, then ask again."""

    __slots__ = ()


NEED_PAGE_IN = NeedPageIn()


class PublishResult:
    """What the shell needs to know about one publish.

    ``rejected``: a queue with ``x-overflow: reject-publish`` refused it, so a
    publisher in confirm mode gets basic.nack.
    """

    __slots__ = ("rejected", "routed", "stored")

    def __init__(self, routed: bool, stored: bool, rejected: bool = False) -> None:
        self.routed = routed
        self.stored = stored
        self.rejected = rejected
