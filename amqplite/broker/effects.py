"""Effects and replies: what the pure broker asks of the server shell.

Commands append wire effects to ``Broker.effects``, store operations to
``Broker.outbox`` and delivery-log rows to ``Broker.log``; the shell takes
them as one :class:`Outcome` per batch (``Broker.take_outcome``) and one
interpreter carries it out. Replies a
command returns (``GetOk``, ``PublishResult``) are plain values too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from amqplite.broker.model import ChannelState, Entry, Message, Session
    from amqplite.broker.queue import Queue
    from amqplite.broker.streamlog import Cursor, StreamEntry


@attrs.define(slots=True)
class Deliver:
    """Send basic.deliver to a consumer."""

    channel: ChannelState
    consumer_tag: str
    delivery_tag: int
    redelivered: bool
    message: Message
    #: replacement property bytes (x-delivery-count on redeliveries), else None
    properties: bytes | None = None


@attrs.define(slots=True)
class StreamDeliver:
    """Send basic.deliver for stream entries read ahead, delivery tags ``first_tag``
    up, one per entry: a batch, so the shell writes them in one go from the stored
    records (``amqplite.protocol.streamrecord``)."""

    channel: ChannelState
    consumer_tag: str
    first_tag: int
    entries: list[StreamEntry]


@attrs.define(slots=True)
class Return:
    """Send basic.return for an unroutable mandatory message."""

    channel: ChannelState
    reply_code: int
    reply_text: str
    message: Message


@attrs.define(slots=True)
class CancelNotify:
    """Send a server-initiated basic.cancel (the consumed queue went away)."""

    channel: ChannelState
    consumer_tag: str


@attrs.define(slots=True)
class CloseConnection:
    """Close a client's connection (vhost or user deleted): connection.close, then
    the close handshake. The broker has already closed the session."""

    session: Session
    reply_code: int
    reply_text: str


@attrs.define(slots=True)
class PageIn:
    """Load these paged-out bodies from the store, then call ``Broker.paged_in``."""

    queue: Queue
    entries: list[Entry]


@attrs.define(slots=True)
class LoadEntries:
    """Read spilled entries of ``queue`` back (positions ``lo..hi``, at most ``limit``,
    in order), then call ``Broker.entries_loaded``."""

    queue: Queue
    lo: int
    hi: int
    limit: int


@attrs.define(slots=True)
class ReadStream:
    """Read a stream's entries at offsets ``lo..`` (at most ``limit``) for one
    cursor, once every earlier submission has committed, then call
    ``Broker.stream_loaded``; ``hi`` is the last offset assigned when it was asked."""

    queue: Queue
    cursor: Cursor
    lo: int
    hi: int
    limit: int


@attrs.define(slots=True)
class Confirm:
    """Send basic.ack (or basic.nack when ``nack``) for publish seq ``upto``.

    ``multiple`` covers every unconfirmed seq up to ``upto``. With
    ``after_commit`` the shell holds it until the store batch that carries the
    publishes has committed, and sends a nack instead if that commit failed.
    """

    channel: ChannelState
    upto: int
    multiple: bool
    nack: bool
    after_commit: bool
    #: how many publishes it settles (the confirmed-messages counter)
    covered: int = 1


@attrs.define(slots=True)
class Outcome:
    """One batch of commands, as the shell must carry it out.

    ``effects`` in order (a publish's Return precedes its Confirm), then
    ``store_ops`` handed to the store in one submission; ``evictable`` bodies
    may leave RAM once that submission has committed. ``log``: delivery-log
    rows, which nothing waits for (the shell may hold them back a while).
    """

    effects: list[Any]
    store_ops: list[Any]
    evictable: list[tuple[Queue, Entry]]
    log: list[tuple[Any, ...]] = attrs.field(factory=list)

    def __bool__(self) -> bool:
        return bool(self.effects or self.store_ops or self.evictable or self.log)


@attrs.define(slots=True)
class GetOk:
    """basic.get's answer when the queue had a message."""

    delivery_tag: int
    redelivered: bool
    message: Message
    message_count: int
    #: replacement property bytes (x-delivery-count), else None
    properties: bytes | None


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
