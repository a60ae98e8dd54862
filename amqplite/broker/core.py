"""The pure broker: AMQP commands in, effects and store operations out.

The server shell calls one method per AMQP command; the broker mutates its
state and appends ``effects`` (deliveries, returns, cancels, page-ins) and
``store_ops`` (persistence and delivery-log rows), which the shell drains and
carries out. No I/O, no clock of its own (``now`` is injected), no event loop,
so every rule here is testable with plain calls.
"""

from __future__ import annotations

import heapq
import logging
import re
import secrets
import time
from collections.abc import Callable, Iterable
from typing import Any

from amqplite.broker import errors as E
from amqplite.broker import persist as P
from amqplite.broker.deadletter import dead_letter_properties, is_cycle, with_delivery_count
from amqplite.broker.effects import CancelNotify, Deliver, PageIn, Return
from amqplite.broker.exchanges import EXCHANGE_TYPES, Binding, DirectExchange, Exchange
from amqplite.broker.exchanges.base import Destination, freeze_args
from amqplite.broker.model import (
    ChannelState,
    Consumer,
    Delivery,
    Entry,
    Message,
    PriorityReadyList,
    Session,
)
from amqplite.broker.policy import Policy, make_policy, validate_queue_args
from amqplite.broker.queue import Queue
from amqplite.config import LOG_LEVELS
from amqplite.protocol.errors import ChannelError, FrameSyntaxError
from amqplite.protocol.properties import (
    check_properties,
    expiration_of,
    printable,
    priority_of,
    reply_to_of,
    user_id_of,
    with_reply_to,
)

# (class_id, method_id) pairs for error replies
EXCHANGE_DECLARE = (40, 10)
EXCHANGE_DELETE = (40, 20)
EXCHANGE_BIND = (40, 30)
EXCHANGE_UNBIND = (40, 40)
QUEUE_DECLARE = (50, 10)
QUEUE_BIND = (50, 20)
QUEUE_PURGE = (50, 30)
QUEUE_DELETE = (50, 40)
QUEUE_UNBIND = (50, 50)
BASIC_QOS = (60, 10)
BASIC_CONSUME = (60, 20)
BASIC_PUBLISH = (60, 40)
BASIC_GET = (60, 70)
BASIC_ACK = (60, 80)
BASIC_REJECT = (60, 90)
BASIC_RECOVER = (60, 110)
BASIC_NACK = (60, 120)
CHANNEL_FLOW = (20, 20)
CONFIRM_SELECT = (85, 10)
TX_SELECT = (90, 10)
TX_COMMIT = (90, 20)
TX_ROLLBACK = (90, 30)

log = logging.getLogger("amqplite.broker")

PAGE_IN_BATCH = 500

#: Direct reply-to: the pseudo-queue RPC clients consume from and name as reply_to.
REPLY_TO = "amq.rabbitmq.reply-to"
REPLY_PREFIX = REPLY_TO + "."

#: Sentinel basic_get returns when the head's body must be paged in first.
NEED_PAGE_IN = object()

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


class DefaultExchange(DirectExchange):
    """The nameless exchange: every queue is bound to it by its own name."""

    def __init__(self, vhost: VHost) -> None:
        super().__init__("", durable=True)
        self._vhost = vhost

    def route(self, routing_key: str, headers: Any) -> set[Destination]:
        return {("queue", routing_key)} if routing_key in self._vhost.queues else set()


class VHost:
    """A namespace of exchanges, queues and bindings."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.exchanges: dict[str, Exchange] = {"": DefaultExchange(self)}
        self.queues: dict[str, Queue] = {}
        #: bindings by destination, so deleting a queue finds its bindings fast
        self.bindings_to: dict[Destination, set[Binding]] = {}
        for name_, kind in (
            ("amq.direct", "direct"),
            ("amq.fanout", "fanout"),
            ("amq.topic", "topic"),
            ("amq.headers", "headers"),
            ("amq.match", "headers"),
        ):
            self.exchanges[name_] = EXCHANGE_TYPES[kind](name_, durable=True)


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


#: enqueue() outcomes
NOT_STORED, STORED, REJECTED = 0, 1, 2


class Broker:
    def __init__(
        self,
        *,
        now: Callable[[], float] = time.time,
        log_level: str = "lifecycle",
        body_window: int = 2000,
    ) -> None:
        if log_level not in LOG_LEVELS:
            raise ValueError(f"log level must be one of {LOG_LEVELS}, not {log_level!r}")
        self.now = now
        self.log_level = log_level
        self._log_on = log_level != "off"
        self._log_full = log_level == "full"
        self.body_window = body_window
        self.vhosts: dict[str, VHost] = {"/": VHost("/")}
        self.effects: list[Any] = []
        self.store_ops: list[Any] = []
        self.sessions: dict[int, Session] = {}
        self._next_session = 1
        self._next_queue_id = 1
        self._next_message_key = 1
        #: (queue, entry) pairs whose bodies may be dropped from RAM once committed
        self.evictable: list[tuple[Queue, Entry]] = []
        self.stats = {"published": 0, "delivered": 0, "acked": 0, "redelivered": 0,
                      "dead_lettered": 0, "expired": 0}
        #: (expires_at, seq, queue, entry) for every entry with a TTL
        self._expiry: list[tuple[float, int, Queue, Entry]] = []
        self._expiry_seq = 0
        #: queues with x-expires, checked by tick()
        self._expiring_queues: set[Queue] = set()
        #: vhost -> policy name -> Policy
        self.policies: dict[str, dict[str, Policy]] = {}
        #: direct reply-to: private reply name -> the channel whose consumer gets replies
        self.reply_channels: dict[str, ChannelState] = {}

    # ------------------------------------------------------------------ ids
    def seed_ids(self, max_queue_id: int, max_message_key: int) -> None:
        self._next_queue_id = max(self._next_queue_id, max_queue_id + 1)
        self._next_message_key = max(self._next_message_key, max_message_key + 1)

    def _queue_id(self) -> int:
        i = self._next_queue_id
        self._next_queue_id = i + 1
        return i

    def _message_key(self) -> int:
        k = self._next_message_key
        self._next_message_key = k + 1
        return k

    # ------------------------------------------------------------- logging
    def _log(
        self,
        event: str,
        vhost: str,
        msg: Message | None,
        queue: str | None = None,
        *,
        consumer_tag: str | None = None,
        attempt: int | None = None,
        reason: str | None = None,
    ) -> None:
        """Append a delivery_log row (a plain tuple: this runs several times per message)."""
        if not self._log_on or (event == "delivered" and not self._log_full):
            return
        ts = int(self.now() * 1_000_000)
        if msg is None:
            self.store_ops.append((ts, event, vhost, "", "", queue, None, None, consumer_tag,
                                   attempt, None, reason))
            return
        self.store_ops.append((ts, event, vhost, msg.exchange, msg.routing_key, queue,
                               msg.message_id, msg.key, consumer_tag, attempt, msg.body_size,
                               reason))

    # ------------------------------------------------------------ sessions
    def vhost(self, name: str) -> VHost:
        return self.vhosts[name]

    def open_session(self, username: str, vhost: str, peer: str = "") -> Session:
        s = Session(self._next_session, username, vhost, peer)
        self._next_session += 1
        self.sessions[s.id] = s
        return s

    def close_session(self, session: Session) -> None:
        """Connection gone: close its channels, then drop its exclusive queues."""
        for ch in list(session.channels.values()):
            self.close_channel(ch)
        vh = self.vhosts.get(session.vhost)
        if vh is not None:
            for q in [q for q in vh.queues.values() if q.exclusive_owner is session]:
                self._delete_queue(vh, q)
        self.sessions.pop(session.id, None)

    def open_channel(self, session: Session, number: int) -> ChannelState:
        ch = ChannelState(session, number)
        session.channels[number] = ch
        return ch

    def close_channel(self, ch: ChannelState) -> None:
        """Channel gone: requeue its unacked deliveries, cancel its consumers."""
        if not ch.open:
            return
        ch.open = False
        ch.session.channels.pop(ch.number, None)
        touched = self._requeue_deliveries(ch, list(ch.unacked.values()))
        ch.unacked.clear()
        self._drop_reply_consumer(ch)
        for c in list(ch.consumers.values()):
            if self._remove_consumer(c):
                touched.add(c.queue)  # a waiting single active consumer took over
        for q in touched:
            self._dispatch(q)

    # ----------------------------------------------------------- exchanges
    def exchange_declare(
        self,
        ch: ChannelState,
        name: str,
        type_: str,
        *,
        passive: bool = False,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        vh = self.vhosts[ch.session.vhost]
        cm = EXCHANGE_DECLARE
        if name == "":  # RabbitMQ refuses even a passive declare of the default exchange
            raise E.default_exchange(cm)
        ex = vh.exchanges.get(name)
        if passive:
            if ex is None:
                raise E.no_exchange(name, vh.name, cm)
            return
        if ex is not None:
            if ex.type_name != type_:
                raise E.inequivalent("type", "exchange", name, vh.name, type_, ex.type_name, cm)
            if ex.durable != durable:
                raise E.inequivalent("durable", "exchange", name, vh.name, durable, ex.durable, cm)
            if ex.auto_delete != auto_delete:
                raise E.inequivalent(
                    "auto_delete", "exchange", name, vh.name, auto_delete, ex.auto_delete, cm
                )
            if ex.internal != internal:
                raise E.inequivalent("internal", "exchange", name, vh.name, internal, ex.internal, cm)
            return
        if name.startswith("amq."):
            raise E.reserved("exchange", name, cm)
        cls = EXCHANGE_TYPES.get(type_)
        if cls is None:
            raise E.command_invalid(f"unknown exchange type '{type_}'", cm)
        ex = cls(name, durable=durable, auto_delete=auto_delete, internal=internal,
                 arguments=arguments)
        self.add_exchange(vh, ex)

    def add_exchange(self, vh: VHost, ex: Exchange, *, persist: bool = True) -> None:
        vh.exchanges[ex.name] = ex
        if ex.durable and persist:
            self.store_ops.append(P.put_exchange(vh.name, ex))

    def exchange_delete(self, ch: ChannelState, name: str, *, if_unused: bool = False) -> None:
        vh = self.vhosts[ch.session.vhost]
        cm = EXCHANGE_DELETE
        if name == "":
            raise E.default_exchange(cm)
        if name.startswith("amq."):
            raise E.access_refused(
                f"operation not permitted on exchange '{name}' in vhost '{vh.name}'"
                if name in vh.exchanges else f"exchange name '{name}' contains reserved prefix 'amq.*'",
                cm,
            )
        ex = vh.exchanges.get(name)
        if ex is None:
            return  # RabbitMQ: deleting what is not there succeeds
        if if_unused and ex.bindings:
            raise E.precondition(f"exchange '{name}' in vhost '{vh.name}' in use", cm)
        self._delete_exchange(vh, ex)

    def _delete_exchange(self, vh: VHost, ex: Exchange) -> None:
        vh.exchanges.pop(ex.name, None)
        for b in list(ex.bindings):
            self._drop_binding(vh, b)
        # bindings where this exchange is the destination
        for b in list(vh.bindings_to.get(("exchange", ex.name), ())):
            self._drop_binding(vh, b)
        if ex.durable:
            self.store_ops.append(P.delete_exchange(vh.name, ex.name))

    def exchange_bind(
        self,
        ch: ChannelState,
        destination: str,
        source: str,
        routing_key: str,
        arguments: dict[str, Any] | None = None,
        *,
        unbind: bool = False,
    ) -> None:
        vh = self.vhosts[ch.session.vhost]
        cm = EXCHANGE_UNBIND if unbind else EXCHANGE_BIND
        if source == "" or destination == "":
            raise E.default_exchange(cm)
        b = Binding(source, ("exchange", destination), routing_key, freeze_args(arguments))
        if unbind:
            # RabbitMQ: unbinding what is not bound succeeds, even when the source or
            # the destination is gone (its bindings went with it).
            if self._bound(vh, b):
                self._drop_binding(vh, b)
            return
        src = vh.exchanges.get(source)
        if src is None:
            raise E.no_exchange(source, vh.name, cm)
        dst = vh.exchanges.get(destination)
        if dst is None:
            raise E.no_exchange(destination, vh.name, cm)
        self._add_binding(vh, src, b, durable=src.durable and dst.durable)

    @staticmethod
    def _bound(vh: VHost, b: Binding) -> bool:
        src = vh.exchanges.get(b.source)
        return src is not None and b in src.bindings

    def _add_binding(self, vh: VHost, src: Exchange, b: Binding, *, durable: bool,
                     persist: bool = True) -> None:
        if src.add_binding(b):
            vh.bindings_to.setdefault(b.destination, set()).add(b)
            if durable and persist:
                self.store_ops.append(P.put_binding(vh.name, b))

    def _drop_binding(self, vh: VHost, b: Binding, *, persist_durable: bool | None = None) -> None:
        src = vh.exchanges.get(b.source)
        removed = src.remove_binding(b) if src is not None else False
        dests = vh.bindings_to.get(b.destination)
        if dests is not None:
            dests.discard(b)
            if not dests:
                del vh.bindings_to[b.destination]
        if not removed:
            return
        if persist_durable is None:
            persist_durable = self._binding_durable(vh, b)
        if persist_durable:
            self.store_ops.append(P.delete_binding(vh.name, b))
        if src is not None and src.auto_delete and not src.bindings and src.name in vh.exchanges:
            self._delete_exchange(vh, src)

    def _binding_durable(self, vh: VHost, b: Binding) -> bool:
        src = vh.exchanges.get(b.source)
        kind, name = b.destination
        if kind == "queue":
            q = vh.queues.get(name)
            return bool(src is not None and src.durable and q is not None
                        and self._queue_persisted(q))
        dst = vh.exchanges.get(name)
        return bool(src is not None and src.durable and dst is not None and dst.durable)

    # -------------------------------------------------------------- queues
    def queue_declare(
        self,
        ch: ChannelState,
        name: str,
        *,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> tuple[str, int, int]:
        """Returns (name, message_count, consumer_count) for declare-ok."""
        vh = self.vhosts[ch.session.vhost]
        cm = QUEUE_DECLARE
        if name == REPLY_TO:
            # RabbitMQ answers any declare of the pseudo-queue with 0 messages and
            # 1 consumer, consumer or not (FastStream declares it at start)
            ch.last_queue = name
            return name, 0, 1
        if name.startswith(REPLY_PREFIX):
            # a private reply name "exists" while its consumer does, passive or not
            target = self.reply_channels.get(name)
            if target is None or target.session.vhost != vh.name:
                raise E.no_queue(name, vh.name, cm)
            return name, 0, 1
        if passive:
            name = name or ch.last_queue
            q = vh.queues.get(name)
            if q is None:
                raise E.no_queue(name, vh.name, cm)
            self._check_exclusive(q, ch, cm)
            return q.name, q.message_count, len(q.consumers)
        if not name:
            name = "amq.gen-" + secrets.token_urlsafe(16)
        elif name.startswith("amq."):
            raise E.reserved("queue", name, cm)
        bad = validate_queue_args(arguments or {})
        if bad is not None:
            raise E.precondition(
                f"invalid arg '{bad[0]}' for queue '{name}' in vhost '{vh.name}': {bad[1]}", cm
            )
        q = vh.queues.get(name)
        if q is not None:
            self._check_exclusive(q, ch, cm)
            q.last_used = self.now()
            ch.last_queue = name
            if q.durable != durable:
                raise E.inequivalent("durable", "queue", name, vh.name, durable, q.durable, cm)
            if q.auto_delete != auto_delete:
                raise E.inequivalent(
                    "auto_delete", "queue", name, vh.name, auto_delete, q.auto_delete, cm
                )
            if q.exclusive != exclusive:
                raise E.locked(name, vh.name, cm)
            self._check_args_equivalent(q, arguments or {}, cm)
            return q.name, q.message_count, len(q.consumers)
        q = Queue(
            self._queue_id(),
            vh.name,
            name,
            durable=durable,
            exclusive_owner=ch.session if exclusive else None,
            auto_delete=auto_delete,
            arguments=arguments,
        )
        self.add_queue(vh, q)
        ch.last_queue = name
        return q.name, 0, 0

    _EQUIVALENCE_ARGS = (
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-expires",
        "x-max-length",
        "x-max-length-bytes",
        "x-max-priority",
        "x-message-ttl",
        "x-overflow",
        "x-queue-type",
        "x-delivery-limit",
        "x-single-active-consumer",
    )

    def _check_args_equivalent(self, q: Queue, args: dict[str, Any], cm: tuple[int, int]) -> None:
        for key in self._EQUIVALENCE_ARGS:
            a, b = args.get(key), q.arguments.get(key)
            if key == "x-queue-type" and {a, b} <= {None, "classic"}:
                continue
            if a != b:
                raise E.inequivalent_arg(key, q.name, q.vhost, a, b, cm)

    def add_queue(self, vh: VHost, q: Queue, *, persist: bool = True) -> None:
        vh.queues[q.name] = q
        q.last_used = self.now()
        q.policy = self._match_policy(vh.name, q.name)
        q.refresh_settings()
        if q.expires is not None:
            self._expiring_queues.add(q)
        if q.durable and not q.exclusive and persist:
            self.store_ops.append(P.put_queue(q))

    def _check_exclusive(self, q: Queue, ch: ChannelState, cm: tuple[int, int]) -> None:
        if q.exclusive_owner is not None and q.exclusive_owner is not ch.session:
            raise E.locked(q.name, q.vhost, cm)

    def _queue_name(self, ch: ChannelState, name: str, cm: tuple[int, int]) -> str:
        """An empty queue name means the queue last declared on this channel (spec).

        With none declared RabbitMQ closes only the channel, with 404.
        """
        if name:
            return name
        if not ch.last_queue:
            raise E.not_found("no previously declared queue", cm)
        return ch.last_queue

    def _find_queue(self, ch: ChannelState, name: str, cm: tuple[int, int]) -> Queue:
        name = self._queue_name(ch, name, cm)
        vh = self.vhosts[ch.session.vhost]
        q = vh.queues.get(name)
        if q is None:
            raise E.no_queue(name, vh.name, cm)
        self._check_exclusive(q, ch, cm)
        q.last_used = self.now()
        return q

    def queue_bind(
        self,
        ch: ChannelState,
        queue: str,
        exchange: str,
        routing_key: str,
        arguments: dict[str, Any] | None = None,
        *,
        unbind: bool = False,
    ) -> None:
        vh = self.vhosts[ch.session.vhost]
        cm = QUEUE_UNBIND if unbind else QUEUE_BIND
        # RabbitMQ's order: resolve the queue name, refuse the default exchange, then
        # look the exchange up before the queue.
        queue = self._queue_name(ch, queue, cm)
        if exchange == "":
            raise E.default_exchange(cm)
        b = Binding(exchange, ("queue", queue), routing_key, freeze_args(arguments))
        if unbind:
            # Unbinding what is not bound succeeds, even when the queue or the
            # exchange is gone; only an existing binding checks exclusivity.
            if self._bound(vh, b):
                q = vh.queues.get(queue)
                if q is not None:
                    self._check_exclusive(q, ch, cm)
                self._drop_binding(vh, b)
            return
        ex = vh.exchanges.get(exchange)
        if ex is None:
            raise E.no_exchange(exchange, vh.name, cm)
        q = vh.queues.get(queue)
        if q is None:
            raise E.no_queue(queue, vh.name, cm)
        self._check_exclusive(q, ch, cm)
        self._add_binding(vh, ex, b, durable=ex.durable and self._queue_persisted(q))

    @staticmethod
    def _queue_persisted(q: Queue) -> bool:
        """Exclusive queues are never written, whatever their durable flag."""
        return q.durable and not q.exclusive

    def queue_purge(self, ch: ChannelState, queue: str) -> int:
        q = self._find_queue(ch, queue, QUEUE_PURGE)
        return self.purge(q)

    def purge(self, q: Queue) -> int:
        gone = q.ready.clear()
        for e in gone:
            self._log("purged", q.vhost, e.message, q.name)
            self._entry_done(q, e)
        return len(gone)

    def queue_delete(
        self, ch: ChannelState, queue: str, *, if_unused: bool = False, if_empty: bool = False
    ) -> int:
        vh = self.vhosts[ch.session.vhost]
        cm = QUEUE_DELETE
        queue = self._queue_name(ch, queue, cm)
        q = vh.queues.get(queue)
        if q is None:
            return 0
        self._check_exclusive(q, ch, cm)
        if if_unused and q.consumers:
            raise E.precondition(f"queue '{queue}' in vhost '{vh.name}' in use", cm)
        if if_empty and q.message_count:
            raise E.precondition(f"queue '{queue}' in vhost '{vh.name}' not empty", cm)
        return self._delete_queue(vh, q)

    def _delete_queue(self, vh: VHost, q: Queue) -> int:
        if q.deleted:
            return 0
        q.deleted = True
        vh.queues.pop(q.name, None)
        self._expiring_queues.discard(q)
        for c in list(q.consumers):
            self.effects.append(CancelNotify(c.channel, c.tag))
            c.channel.consumers.pop(c.tag, None)
        q.consumers.clear()
        q.active = None
        for b in list(vh.bindings_to.get(("queue", q.name), ())):
            self._drop_binding(vh, b, persist_durable=False)
        count = q.message_count
        parked = [e for e, _ in q.awaiting_body]
        q.awaiting_body.clear()
        for e in q.ready.clear() + parked:
            if e.stored:
                e.stored = False  # DeleteQueue removes the rows wholesale
            else:
                e.message.pinned -= 1
        if q.durable and not q.exclusive:
            self.store_ops.append(P.delete_queue(q))
        return count

    # ------------------------------------------------------------ consuming
    def basic_qos(self, ch: ChannelState, prefetch_size: int, prefetch_count: int,
                  global_: bool) -> None:
        if prefetch_size:
            raise E.not_implemented(f"prefetch_size!=0 ({prefetch_size})", BASIC_QOS)
        if global_:
            ch.global_prefetch = prefetch_count
        else:
            ch.prefetch = prefetch_count
        for q in {c.queue for c in ch.consumers.values()}:
            self._dispatch(q)

    def basic_consume(
        self,
        ch: ChannelState,
        queue: str,
        consumer_tag: str = "",
        *,
        no_ack: bool = False,
        exclusive: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> str:
        cm = BASIC_CONSUME
        if queue == REPLY_TO or (not queue and ch.last_queue == REPLY_TO):
            return self._reply_consume(ch, consumer_tag, no_ack)
        q = self._find_queue(ch, queue, cm)
        if not consumer_tag:
            consumer_tag = "amq.ctag-" + secrets.token_urlsafe(16)
        elif consumer_tag in ch.consumers or consumer_tag == ch.reply_consumer:
            raise E.not_allowed(f"attempt to reuse consumer tag '{consumer_tag}'", cm)
        if any(c.exclusive for c in q.consumers) or (exclusive and q.consumers):
            raise E.access_refused(f"queue '{queue}' in vhost '{q.vhost}' in exclusive use", cm)
        prio = (arguments or {}).get("x-priority")
        if prio is not None and (isinstance(prio, bool) or not isinstance(prio, int)):
            raise E.precondition(
                f"invalid arg 'x-priority' for queue '{q.name}' in vhost '{q.vhost}': "
                f'"expected integer, got {E.amqp_type(prio)}"', cm)
        c = Consumer(consumer_tag, ch, q, no_ack, exclusive, ch.prefetch, arguments)
        ch.consumers[consumer_tag] = c
        q.add_consumer(c)
        q.had_consumer = True
        return consumer_tag

    def _reply_consume(self, ch: ChannelState, consumer_tag: str, no_ack: bool) -> str:
        """The channel's one direct reply-to consumer (RabbitMQ's checks, in its order).

        The private name joins the session and channel ids to a random secret:
        a reply reaches a consumer only through a name its requester was given.
        """
        cm = BASIC_CONSUME
        if consumer_tag and (consumer_tag in ch.consumers or consumer_tag == ch.reply_consumer):
            raise E.not_allowed(f"attempt to reuse consumer tag '{consumer_tag}'", cm)
        if ch.reply_consumer is None and not no_ack:
            raise E.precondition("reply consumer cannot acknowledge", cm)
        if ch.reply_consumer is not None:
            raise E.precondition("reply consumer already set", cm)
        tag = consumer_tag or "amq.ctag-" + secrets.token_urlsafe(16)
        name = f"{REPLY_PREFIX}{ch.session.id}-{ch.number}.{secrets.token_urlsafe(18)}"
        ch.reply_consumer, ch.reply_name = tag, name
        self.reply_channels[name] = ch
        return tag

    def _drop_reply_consumer(self, ch: ChannelState) -> None:
        if ch.reply_name is not None:
            self.reply_channels.pop(ch.reply_name, None)
        ch.reply_consumer = ch.reply_name = None

    def start_consumer(self, ch: ChannelState, consumer_tag: str) -> None:
        """Begin deliveries; the shell calls it after sending consume-ok."""
        c = ch.consumers.get(consumer_tag)
        if c is not None:
            self._dispatch(c.queue)

    def basic_cancel(self, ch: ChannelState, consumer_tag: str) -> None:
        if consumer_tag == ch.reply_consumer:
            self._drop_reply_consumer(ch)
            return
        c = ch.consumers.get(consumer_tag)
        # A single active consumer cancelled with deliveries outstanding: its
        # successor waits until they are settled (ack, or requeue on close), so
        # requeued messages keep their place ahead of later ones, as in RabbitMQ.
        if c is not None and self._remove_consumer(c) and not c.unacked:
            self._dispatch(c.queue)

    def _remove_consumer(self, c: Consumer) -> bool:
        """True when a waiting single active consumer took over (the caller dispatches,
        once the channel's own state is settled)."""
        c.channel.consumers.pop(c.tag, None)
        q = c.queue
        handed_over = False
        if c in q.consumers:
            handed_over = q.remove_consumer(c)
            q.last_used = self.now()
        if q.auto_delete and q.had_consumer and not q.consumers and not q.deleted:
            vh = self.vhosts.get(q.vhost)
            if vh is not None:
                self._delete_queue(vh, q)
        return handed_over

    def basic_get(self, ch: ChannelState, queue: str, no_ack: bool) -> Any:
        """Returns None (empty), NEED_PAGE_IN, or (tag, redelivered, message, count)."""
        q = self._find_queue(ch, queue, BASIC_GET)
        self._expire_head(q)
        if not q.ready:
            return None
        head = q.ready.peek()
        if head.message.body is None:
            self._request_page_in(q)
            return NEED_PAGE_IN
        entry = q.ready.popleft()
        tag = ch.next_tag
        ch.next_tag = tag + 1
        redelivered = entry.redelivered
        self._log("delivered", q.vhost, entry.message, q.name, attempt=entry.delivery_count + 1)
        if no_ack:
            self._log("acked", q.vhost, entry.message, q.name, attempt=entry.delivery_count + 1)
            self._entry_done(q, entry)
        else:
            ch.unacked[tag] = Delivery(tag, q, entry, None)
            q.unacked += 1
            self._mark_delivered(q, entry)
        self.stats["delivered"] += 1
        q.stats["deliver_get"] += 1
        return tag, redelivered, entry.message, q.message_count, self._delivery_props(q, entry)

    def _delivery_props(self, q: Queue, e: Entry) -> bytes | None:
        """Quorum-style queues tell redeliveries their count in x-delivery-count."""
        if q.quorum or (e.delivery_count and q.delivery_limit is not None):
            try:
                return with_delivery_count(e.message.properties_raw, e.delivery_count)
            except Exception:  # runs in other clients' commands: never let it escape
                log.exception("x-delivery-count not added to message %s", e.message.message_id)
        return None

    def _dispatch(self, q: Queue) -> None:
        """Hand ready messages to consumers with room, in turn."""
        if q.paging or q.deleted:
            return
        ready = q.ready
        now = 0.0
        while ready and q.consumers:
            head = ready.peek()
            if head.expires_at is not None:
                now = now or self.now()
                if head.expires_at <= now:
                    self._expire(q, ready.popleft())
                    continue
            if head.message.body is None:
                self._request_page_in(q)
                return
            c = q.pick_consumer()
            if c is None:
                return
            entry = ready.popleft()
            self._deliver(q, entry, c)

    def _deliver(self, q: Queue, entry: Entry, c: Consumer) -> None:
        ch = c.channel
        tag = ch.next_tag
        ch.next_tag = tag + 1
        if self.log_level == "full":
            self._log("delivered", q.vhost, entry.message, q.name, consumer_tag=c.tag,
                      attempt=entry.delivery_count + 1)
        if c.no_ack:
            self._log("acked", q.vhost, entry.message, q.name, consumer_tag=c.tag,
                      attempt=entry.delivery_count + 1)
            self._entry_done(q, entry)
        else:
            ch.unacked[tag] = Delivery(tag, q, entry, c)
            c.unacked += 1
            q.unacked += 1
            self._mark_delivered(q, entry)
        self.stats["delivered"] += 1
        q.stats["deliver_get"] += 1
        self.effects.append(Deliver(ch, c.tag, tag, entry.redelivered, entry.message,
                                    self._delivery_props(q, entry)
                                    if entry.delivery_count or q.quorum else None))

    def _mark_delivered(self, q: Queue, e: Entry) -> None:
        """Persist "may have reached a consumer" so a restart sets redelivered only there.

        The store merges this into a same-group insert, and an ack in the same
        group cancels both, so the common fast path writes nothing extra.
        """
        if e.stored and not e.redelivered:
            self.store_ops.append(P.update_entry(q, e, redelivered=True))

    def _request_page_in(self, q: Queue) -> None:
        if q.paging:
            return
        batch: list[Entry] = [e for e, _ in q.awaiting_body[:PAGE_IN_BATCH]]
        for e in q.ready:
            if len(batch) >= PAGE_IN_BATCH:
                break
            if e.message.body is None:
                batch.append(e)
        if batch:
            q.paging = True
            self.effects.append(PageIn(q, batch))

    def paged_in(self, q: Queue, bodies: dict[int, bytes], requested: Iterable[Entry] = ()) -> None:
        """The shell loaded bodies for a PageIn; resume dispatching.

        The shell reads only after every earlier commit landed, so a requested
        body that is not in ``bodies`` is gone from the store: that entry can
        never be delivered and is dropped (logged), instead of being asked
        for again forever.
        """
        q.paging = False
        if q.deleted:
            return
        lost: set[int] = set()
        for e in requested:
            m = e.message
            if m.body is None:
                b = bodies.get(m.key)
                if b is None:
                    lost.add(id(e))
                else:
                    m.body = b
        if lost:
            gone = q.ready.remove_where(lambda x: id(x) in lost)
            gone += [e for e, _ in q.awaiting_body if id(e) in lost]
            q.awaiting_body = [(e, r) for e, r in q.awaiting_body if id(e) not in lost]
            for e in gone:
                log.error("queue '%s' in vhost '%s': body of message %s missing from the "
                          "store; dropped", q.name, q.vhost, e.message.key)
                self._log("dropped", q.vhost, e.message, q.name, reason="body_missing")
                self._entry_done(q, e)
        if q.awaiting_body:
            parked, q.awaiting_body = q.awaiting_body, []
            for e, reason in parked:
                self.dead_letter(q, e, reason)
        self._dispatch(q)

    def commit_done(self, evictable: Iterable[tuple[Queue, Entry]]) -> None:
        """Bodies of committed messages deep in a queue may leave RAM now."""
        for q, e in evictable:
            m = e.message
            # still waiting far from the head?
            if (m.stored and e.stored and not q.deleted and m.body is not None
                    and not m.pinned and e.in_ready and len(q.ready) > self.body_window):
                m.body = None

    def commit_failed(self, ops: Iterable[Any]) -> None:
        """A submission failed for good: its new entries still waiting leave RAM too.

        Their publishers get basic.nack; delivering them anyway would hand out
        a message the publisher was told is lost (and will likely republish).
        """
        keys = {(op.queue_id, op.position) for op in ops if type(op) is P.ops.PutEntry}
        if not keys:
            return
        by_id = {q.id: q for vh in self.vhosts.values() for q in vh.queues.values()}
        for qid in {k[0] for k in keys}:
            q = by_id.get(qid)
            if q is None:
                continue
            for e in q.ready.remove_where(lambda x, q=q: (q.id, x.position) in keys):
                e.stored = False
                log.error("queue '%s': message %s withdrawn, its commit failed", q.name,
                          e.message.key)

    # -------------------------------------------------------- acknowledging
    def _take(self, ch: ChannelState, tag: int, multiple: bool, cm: tuple[int, int]) -> list[Delivery]:
        un = ch.unacked
        if multiple:
            if tag == 0:
                out = list(un.values())
                un.clear()
                return out
            if tag not in un:
                raise E.precondition(f"unknown delivery tag {tag}", cm)
            out = []
            while un:
                t, d = next(iter(un.items()))
                if t > tag:
                    break
                del un[t]
                out.append(d)
            return out
        if tag not in un:
            raise E.precondition(f"unknown delivery tag {tag}", cm)
        return [un.pop(tag)]

    def basic_ack(self, ch: ChannelState, delivery_tag: int, multiple: bool = False) -> None:
        if ch.tx:
            self._check_tags(ch, delivery_tag, multiple, BASIC_ACK)
            ch.tx_acks.append(("ack", delivery_tag, multiple, False))
            return
        ds = self._take(ch, delivery_tag, multiple, BASIC_ACK)
        touched: set[Queue] = set()
        for d in ds:
            q = d.queue
            self._release(d)
            if not q.deleted:
                self._log("acked", q.vhost, d.entry.message, q.name,
                          consumer_tag=d.consumer.tag if d.consumer else None,
                          attempt=d.entry.delivery_count + 1)
                self._entry_done(q, d.entry)
                q.stats["ack"] += 1
                touched.add(q)
        self.stats["acked"] += len(ds)
        for q in touched:
            self._dispatch(q)

    def _check_tags(self, ch: ChannelState, tag: int, multiple: bool, cm: tuple[int, int]) -> None:
        if (multiple and tag == 0) or tag in ch.unacked:
            return
        raise E.precondition(f"unknown delivery tag {tag}", cm)

    def basic_reject(self, ch: ChannelState, delivery_tag: int, requeue: bool) -> None:
        self.basic_nack(ch, delivery_tag, False, requeue, cm=BASIC_REJECT)

    def basic_nack(
        self,
        ch: ChannelState,
        delivery_tag: int,
        multiple: bool,
        requeue: bool,
        *,
        cm: tuple[int, int] = BASIC_NACK,
    ) -> None:
        if ch.tx:
            self._check_tags(ch, delivery_tag, multiple, cm)
            ch.tx_acks.append(("nack", delivery_tag, multiple, requeue))
            return
        ds = self._take(ch, delivery_tag, multiple, cm)
        if requeue:
            touched = self._requeue_deliveries(ch, ds)
        else:
            touched = set()
            for d in ds:
                q = d.queue
                self._release(d)
                if q.deleted:
                    continue
                self._log("rejected", q.vhost, d.entry.message, q.name,
                          consumer_tag=d.consumer.tag if d.consumer else None,
                          attempt=d.entry.delivery_count + 1, reason="rejected")
                self.dead_letter(q, d.entry, "rejected")
                touched.add(q)
        for q in touched:
            self._dispatch(q)

    def _release(self, d: Delivery) -> None:
        """Undo a delivery's counters (the entry leaves the unacked set)."""
        if d.consumer is not None:
            d.consumer.unacked -= 1
        d.queue.unacked -= 1

    def _requeue_deliveries(self, ch: ChannelState, ds: list[Delivery]) -> set[Queue]:
        touched: set[Queue] = set()
        # put back highest position first so each insert lands at the front cheaply
        for d in sorted(ds, key=lambda d: d.entry.position, reverse=True):
            q = d.queue
            self._release(d)
            if q.deleted:
                continue
            e = d.entry
            e.redelivered = True
            e.delivery_count += 1
            q.stats["redeliver"] += 1
            if q.delivery_limit is not None and e.delivery_count > q.delivery_limit:
                self.dead_letter(q, e, "delivery_limit")
                touched.add(q)
                continue
            self._log("requeued", q.vhost, e.message, q.name,
                      consumer_tag=d.consumer.tag if d.consumer else None,
                      attempt=e.delivery_count)
            if e.stored:
                self.store_ops.append(P.update_entry(q, e))
            q.ready.insert_sorted(e)
            touched.add(q)
        self.stats["redelivered"] += len(ds)
        return touched

    def basic_recover(self, ch: ChannelState, requeue: bool) -> None:
        if not requeue:
            raise E.not_implemented("requeue=false", BASIC_RECOVER)
        ds = list(ch.unacked.values())
        ch.unacked.clear()
        for q in self._requeue_deliveries(ch, ds):
            self._dispatch(q)

    def _entry_done(self, q: Queue, e: Entry) -> None:
        """The entry leaves the queue for good (acked, purged, dropped)."""
        if e.stored:
            e.stored = False
            self.store_ops.append(P.delete_entry(q, e))
        else:
            e.message.pinned -= 1

    def dead_letter(self, q: Queue, e: Entry, reason: str) -> None:
        """A message leaves ``q`` for ``reason``; without a dead-letter exchange it is dropped.

        The removal and the copy's insertion land in the same store batch, so
        one transaction holds both: a crash never loses or duplicates it.
        """
        if e.message.body is None and self._copy_needs_body(q, e.message):
            # park it (its row stays until then); paged_in() finishes the job
            q.awaiting_body.append((e, reason))
            self._request_page_in(q)
            return
        # the copy's inserts go first: a copied body is read from the source row,
        # which the source's delete may garbage-collect
        self._dead_letter_message(q, e.message, reason)
        self._entry_done(q, e)

    def _copy_needs_body(self, q: Queue, msg: Message) -> bool:
        """Would a dead-lettered copy of this paged-out message reach a queue that
        does not store it (so the body must be in RAM, not copied row to row)?"""
        vh = self.vhosts.get(q.vhost)
        ex = vh.exchanges.get(q.dlx) if vh is not None and q.dlx is not None else None
        if vh is None or ex is None:
            return False
        rk = q.dlrk if q.dlrk is not None else msg.routing_key
        return any(not (msg.persistent and t.durable and not t.exclusive)
                   for t in self.route(vh, ex, rk, msg))

    def _dead_letter_message(self, q: Queue, msg: Message, reason: str) -> None:
        vh = self.vhosts.get(q.vhost)
        dlx = q.dlx
        ex = vh.exchanges.get(dlx) if vh is not None and dlx is not None else None
        if vh is None or ex is None:
            self._log("dead_lettered", q.vhost, msg, q.name, reason=f"{reason}:dropped")
            return
        rk = q.dlrk if q.dlrk is not None else msg.routing_key
        try:
            raw = dead_letter_properties(
                msg.properties_raw, queue=q.name, reason=reason, exchange=msg.exchange,
                routing_keys=[msg.routing_key], now_s=int(self.now()),
            )
        except Exception as exc:  # one message's content never escapes into a timer or a client
            # Publish checks properties, so only a message stored by an older version
            # gets here. Without x-death a cycle could not be detected, and a
            # consumer's client library may fail on its header: drop it, loudly.
            log.error("dropped message %s dead-lettered (%s) from queue '%s' in vhost '%s': "
                      "malformed properties (%s)", msg.message_id, reason, q.name, q.vhost, exc)
            self._log("dead_lettered", q.vhost, msg, q.name, reason=f"{reason}:malformed")
            return
        new = Message(self._message_key(), ex.name, rk, raw, msg.body, body_size=msg.body_size,
                      persistent=msg.persistent)
        new._mid = msg.message_id
        if msg.body is None:
            new.copy_of = msg.key
        self.stats["dead_lettered"] += 1
        self._log("dead_lettered", q.vhost, msg, q.name, reason=reason)
        headers = new.headers()
        targets = [t for t in self.route(vh, ex, rk, new) if not is_cycle(headers, t.name)]
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
        self._log("dead_lettered", q.vhost, e.message, q.name, reason="malformed:dropped")
        self._entry_done(q, e)

    def _expire(self, q: Queue, e: Entry) -> None:
        self.stats["expired"] += 1
        self._log("expired", q.vhost, e.message, q.name, reason="expired")
        self.dead_letter(q, e, "expired")

    def _expire_head(self, q: Queue) -> None:
        ready = q.ready
        if not ready:
            return
        now = self.now()
        while ready:
            h = ready.peek()
            if h.expires_at is None or h.expires_at > now:
                return
            self._expire(q, ready.popleft())

    # ------------------------------------------------------------- timers
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
        while heap and heap[0][0] <= now:
            _, _, q, e = heapq.heappop(heap)
            if e.in_ready and not q.deleted:
                due.setdefault(q, set()).add(id(e))
        for q, ids in due.items():
            for e in q.ready.remove_where(lambda x, ids=ids: id(x) in ids):
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
                    self._log("expired", q.vhost, None, q.name, reason="queue_expired")
                    self._delete_queue(vh, q)

    # ----------------------------------------------------------- policies
    def _match_policy(self, vhost: str, queue_name: str) -> Policy | None:
        best: Policy | None = None
        for p in self.policies.get(vhost, {}).values():
            if p.matches_queue(queue_name) and (best is None or p.priority > best.priority):
                best = p
        return best

    def set_policy(self, vhost: str, name: str, pattern: str, definition: dict[str, Any],
                   priority: int = 0, apply_to: str = "queues", *, persist: bool = True) -> Policy:
        """Create or replace a policy and apply it to existing queues (ValueError if bad)."""
        if vhost not in self.vhosts:
            raise ValueError(f"no vhost '{vhost}'")
        pol = make_policy(vhost, name, pattern, definition, priority, apply_to)
        self.policies.setdefault(vhost, {})[name] = pol
        if persist:
            self.store_ops.append(P.put_policy(pol))
        self.apply_policies(vhost)
        return pol

    def clear_policy(self, vhost: str, name: str) -> bool:
        pol = self.policies.get(vhost, {}).pop(name, None)
        if pol is None:
            return False
        self.store_ops.append(P.delete_policy(vhost, name))
        self.apply_policies(vhost)
        return True

    def effective_policy(self, q: Queue) -> Policy | None:
        return q.policy  # type: ignore[no-any-return]

    def apply_policies(self, vhost: str) -> None:
        vh = self.vhosts.get(vhost)
        if vh is None:
            return
        for q in list(vh.queues.values()):
            q.policy = self._match_policy(vhost, q.name)
            q.refresh_settings()
            if q.expires is not None:
                self._expiring_queues.add(q)
            else:
                self._expiring_queues.discard(q)
            self._enforce_limits(q)
            self._dispatch(q)

    def _over_limit(self, q: Queue) -> bool:
        return (q.max_length is not None and len(q.ready) > q.max_length) or (
            q.max_bytes is not None and q.ready.bytes > q.max_bytes
        )

    def _enforce_limits(self, q: Queue) -> None:
        """drop-head: the oldest ready messages make room (dead-lettered as maxlen)."""
        while q.ready and self._over_limit(q):
            self.dead_letter(q, q.ready.popleft(), "maxlen")

    # ----------------------------------------------------------- publishing
    def basic_publish(
        self,
        ch: ChannelState,
        exchange: str,
        routing_key: str,
        properties_raw: bytes,
        body: bytes,
        *,
        mandatory: bool = False,
        immediate: bool = False,
    ) -> PublishResult:
        vh = self.vhosts[ch.session.vhost]
        cm = BASIC_PUBLISH
        if immediate:
            raise E.not_implemented("immediate=true", cm)
        ex = vh.exchanges.get(exchange)
        if ex is None:
            raise E.no_exchange(exchange, vh.name, cm)
        if ex.internal:
            raise E.access_refused(
                f"cannot publish to internal exchange '{exchange}' in vhost '{vh.name}'", cm
            )
        if properties_raw != ch.last_props and properties_raw != b"\x00\x00":
            self._check_properties(ch, properties_raw)
        if reply_to_of(properties_raw) == REPLY_TO:
            if ch.reply_name is None:
                raise E.precondition("fast reply consumer does not exist", cm)
            properties_raw = with_reply_to(properties_raw, ch.reply_name)
        if ch.tx:
            ch.tx_publishes.append((exchange, routing_key, properties_raw, body, mandatory))
            return PublishResult(True, False)
        return self.publish(vh, ex, routing_key, properties_raw, body, mandatory, ch)

    def _check_properties(self, ch: ChannelState, raw: bytes) -> None:
        """The door: properties must decode, with a valid expiration and our user-id.

        Whatever decodes them later (TTL, dead-lettering, headers routing, the
        log, admin) can then never fail on this message. The result depends on
        the bytes alone, so properties equal to the channel's last accepted
        ones skip the walk: most publishers send the same ones every time.
        """
        cm = BASIC_PUBLISH
        try:  # also guarantees the two flag octets read below
            table = check_properties(raw, ch.last_table)
        except FrameSyntaxError as exc:
            raise E.invalid_message(exc.detail, cm) from None
        if raw[0] & 0x01:  # expiration flag set (checked first, as RabbitMQ does)
            exp = expiration_of(raw)
            if exp is not None:
                try:
                    parse_expiration(exp)
                except ValueError as exc:
                    raise E.invalid_expiration(printable(exp), str(exc), cm) from None
        if raw[1] & 0x10:  # user-id flag set
            uid = user_id_of(raw)
            if uid is not None and uid != ch.session.username:
                raise E.precondition(
                    f"user_id property set to '{printable(uid)}' but authenticated user was "
                    f"'{ch.session.username}'", cm,
                )
        ch.last_props = raw
        ch.last_table = table

    def publish(
        self,
        vh: VHost,
        ex: Exchange,
        routing_key: str,
        properties_raw: bytes,
        body: bytes,
        mandatory: bool = False,
        ch: ChannelState | None = None,
    ) -> PublishResult:
        msg = Message(self._message_key(), ex.name, routing_key, properties_raw, body)
        self.stats["published"] += 1
        self._log("published", vh.name, msg)
        if not ex.name and routing_key.startswith(REPLY_PREFIX):
            target = self.reply_channels.get(routing_key)
            if target is not None and target.session.vhost == vh.name:
                self._deliver_reply(target, msg)
                return PublishResult(True, False)
            queues: list[Queue] = []
        else:
            queues = self.route(vh, ex, routing_key, msg)
        if not queues:
            if mandatory and ch is not None:
                self.effects.append(Return(ch, 312, "NO_ROUTE", msg))
                self._log("returned", vh.name, msg, reason="NO_ROUTE")
            return PublishResult(False, False)
        stored = rejected = False
        for q in queues:
            r = self.enqueue(q, msg)
            if r == STORED:
                stored = True
            elif r == REJECTED:
                rejected = True
        for q in queues:
            self._dispatch(q)
        return PublishResult(True, stored, rejected)

    def _deliver_reply(self, ch: ChannelState, msg: Message) -> None:
        """A reply goes straight to its requester's no-ack consumer: no queue, no store."""
        assert ch.reply_consumer is not None
        tag = ch.next_tag
        ch.next_tag = tag + 1
        self.stats["delivered"] += 1
        self._log("delivered", ch.session.vhost, msg, REPLY_TO, consumer_tag=ch.reply_consumer)
        self.effects.append(Deliver(ch, ch.reply_consumer, tag, False, msg))

    def enqueue(self, q: Queue, msg: Message) -> int:
        """Append ``msg`` to ``q``: NOT_STORED, STORED (needs a commit) or REJECTED."""
        limited = q.max_length is not None or q.max_bytes is not None
        if limited and q.overflow != "drop-head" and (
            (q.max_length is not None and len(q.ready) >= q.max_length)
            or (q.max_bytes is not None and q.ready.bytes + msg.body_size > q.max_bytes)
        ):
            self._log("rejected", q.vhost, msg, q.name, reason="maxlen")
            if q.overflow == "reject-publish-dlx":
                self._dead_letter_message(q, msg, "maxlen")
            return REJECTED
        e = Entry(q.take_position(), msg)
        if type(q.ready) is PriorityReadyList:
            e.priority = priority_of(msg.properties_raw) or 0
        self.arm_ttl(q, e)
        persist = msg.persistent and q.durable and not q.exclusive
        if persist:
            if not msg.stored:
                msg.stored = True
                self.store_ops.append(P.put_message(msg))
            e.stored = True
            self.store_ops.append(P.put_entry(q, e))
            if len(q.ready) >= self.body_window:
                self.evictable.append((q, e))
        else:
            msg.pinned += 1
        self._log("routed", q.vhost, msg, q.name)
        q.ready.append(e)
        if limited:
            self._enforce_limits(q)
        return STORED if persist else NOT_STORED

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

    def route(self, vh: VHost, ex: Exchange, routing_key: str, msg: Message) -> list[Queue]:
        """Follow exchange-to-exchange bindings and alternate exchanges to queues."""
        seen: set[str] = set()
        found: dict[str, Queue] = {}
        stack = [ex]
        headers = msg.headers
        while stack:
            e = stack.pop()
            if e.name in seen:
                continue
            seen.add(e.name)
            dests = e.route(routing_key, headers)
            if not dests:
                ae_name = e.alternate_exchange
                if ae_name is not None:
                    ae = vh.exchanges.get(ae_name)
                    if ae is not None:
                        stack.append(ae)
                continue
            for kind, name in dests:
                if kind == "queue":
                    q = vh.queues.get(name)
                    if q is not None:
                        found[name] = q
                else:
                    nxt = vh.exchanges.get(name)
                    if nxt is not None:
                        stack.append(nxt)
        return list(found.values())

    # ------------------------------------------------------ flow / confirm / tx
    def channel_flow(self, ch: ChannelState, active: bool) -> None:
        if not active:
            raise E.not_implemented("active=false", CHANNEL_FLOW)
        ch.flow = True

    def confirm_select(self, ch: ChannelState) -> None:
        if ch.tx:
            raise E.precondition("cannot switch from tx to confirm mode", CONFIRM_SELECT)
        ch.confirm = True

    def tx_select(self, ch: ChannelState) -> None:
        if ch.confirm:
            raise E.precondition("cannot switch from confirm to tx mode", TX_SELECT)
        ch.tx = True

    def tx_commit(self, ch: ChannelState) -> bool:
        """Apply the transaction; True when it wrote to the store (commit-ok waits)."""
        if not ch.tx:
            raise E.precondition("channel is not transactional", TX_COMMIT)
        vh = self.vhosts[ch.session.vhost]
        pubs, acks = ch.tx_publishes, ch.tx_acks
        ch.tx_publishes, ch.tx_acks = [], []
        stored = False
        ch.tx = False  # apply for real
        try:
            for exchange, rk, props, body, mandatory in pubs:
                ex = vh.exchanges.get(exchange)
                if ex is None:
                    continue
                if self.publish(vh, ex, rk, props, body, mandatory, ch).stored:
                    stored = True
            for kind, tag, multiple, requeue in acks:
                try:
                    if kind == "ack":
                        self.basic_ack(ch, tag, multiple)
                    else:
                        self.basic_nack(ch, tag, multiple, requeue)
                except ChannelError:
                    continue  # already settled inside this transaction
        finally:
            ch.tx = True
        return stored

    def tx_rollback(self, ch: ChannelState) -> None:
        if not ch.tx:
            raise E.precondition("channel is not transactional", TX_ROLLBACK)
        ch.tx_publishes.clear()
        ch.tx_acks.clear()

    # ------------------------------------------------------------ resuming
    def resume_session(self, session: Session) -> None:
        """A connection's write buffer drained: let its consumers receive again."""
        qs: set[Queue] = set()
        for ch in session.channels.values():
            for c in ch.consumers.values():
                qs.add(c.queue)
        for q in qs:
            self._dispatch(q)
