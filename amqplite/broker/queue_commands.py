"""Queue lifecycle: declare, bind, purge, delete, and the length limits."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from amqplite.broker import errors as E
from amqplite.broker import persist as P
from amqplite.broker.base import REPLY_PREFIX, REPLY_TO, Counters, DeliveryLog
from amqplite.broker.commands import (
    QUEUE_BIND,
    QUEUE_DECLARE,
    QUEUE_DELETE,
    QUEUE_PURGE,
    QUEUE_UNBIND,
)
from amqplite.broker.deadletter import DeadLetterer
from amqplite.broker.dispatch import Dispatcher
from amqplite.broker.effects import CancelNotify
from amqplite.broker.exchanges import Binding, Exchange
from amqplite.broker.exchanges.base import freeze_args
from amqplite.broker.model import ChannelState, Entry
from amqplite.broker.outbox import Outbox
from amqplite.broker.permissions import Access
from amqplite.broker.policy import validate_queue_args
from amqplite.broker.policy_commands import Policies
from amqplite.broker.queue import Queue
from amqplite.broker.streams import Streams
from amqplite.broker.vhost import VHost


class Queues:
    """Queues of a vhost: creation with RabbitMQ's equivalence checks, and removal.

    Receives the clock, the vhost table, the outbox, the counters, the
    delivery log, the direct reply-to table, the expiry part's table of
    expiring queues and the parts built before it: access (checks), policies
    (a new queue's policy), streams (declare checks), the dispatcher
    (``_entry_done``) and the dead-letterer (purges by limit). ``wire`` hands
    it the exchanges part's binding methods (built after it). It owns the
    queue ids.
    """

    def __init__(self, *, now: Callable[[], float], vhosts: dict[str, VHost], outbox: Outbox,
                 counters: Counters, log: DeliveryLog, reply_channels: dict[str, ChannelState],
                 expiring_queues: dict[Queue, None], access: Access, policies: Policies,
                 streams: Streams, dispatcher: Dispatcher,
                 dead_letterer: DeadLetterer) -> None:
        self.now = now
        self.vhosts = vhosts
        self.outbox = outbox
        self.effects = outbox.effects
        self.stats = counters.stats
        self.log_event = log.log_event
        self.reply_channels = reply_channels
        self._expiring_queues = expiring_queues
        self._authorize = access._authorize
        self._authorize_binding_key = access._authorize_binding_key
        self._match_policy = policies._match_policy
        self._vhost_limit = policies.vhost_limit
        self.check_stream_declare = streams.check_stream_declare
        self._entry_done = dispatcher._entry_done
        self.dead_letter = dead_letterer.dead_letter
        self._next_queue_id = 1

    def wire(self, *, add_binding: Callable[..., None],
             check_binding: Callable[[Exchange, dict[str, Any] | None, tuple[int, int]], None],
             drop_binding: Callable[..., None]) -> None:
        """The exchanges part's binding methods (it is built after this one)."""
        self._add_binding = add_binding
        self._check_binding = check_binding
        self._drop_binding = drop_binding

    def seed_queue_ids(self, max_queue_id: int) -> None:
        """Recovery: ids continue past the stored ones."""
        self._next_queue_id = max(self._next_queue_id, max_queue_id + 1)

    def _queue_id(self) -> int:
        i = self._next_queue_id
        self._next_queue_id = i + 1
        return i

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
        self._authorize(ch, "configure", "queue", name, cm)
        bad = validate_queue_args(arguments or {})
        if bad is not None:
            raise E.precondition(
                f"invalid arg '{bad[0]}' for queue '{name}' in vhost '{vh.name}': {bad[1]}", cm
            )
        q = vh.queues.get(name)
        if q is None and (arguments or {}).get("x-queue-type") in ("stream", b"stream"):
            self.check_stream_declare(name, vh.name, durable=durable, exclusive=exclusive,
                                      auto_delete=auto_delete, arguments=arguments or {})
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
            self.stats["queues_declared"] += 1
            return q.name, q.message_count, len(q.consumers)
        dlx = (arguments or {}).get("x-dead-letter-exchange")
        if isinstance(dlx, str | bytes):  # a new queue may only dead-letter where it may write
            self._authorize(ch, "read", "queue", name, cm)
            self._authorize(ch, "write", "exchange",
                            dlx.decode() if isinstance(dlx, bytes) else dlx, cm)
        limit = self._vhost_limit(vh.name, "max-queues")
        if limit is not None and len(vh.queues) >= limit:  # RabbitMQ's text
            raise E.precondition(f"cannot declare queue '{name}': queue limit in vhost "
                                 f"'{vh.name}' ({limit}) is reached", cm)
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
        self.stats["queues_declared"] += 1
        self.stats["queues_created"] += 1
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
        "x-max-age",
        "x-stream-max-segment-size-bytes",
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
            self._expiring_queues[q] = None
        if q.durable and not q.exclusive and persist:
            self.outbox.emit(P.put_queue(q))

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
        """The queue a consume, get or purge reads from: read permission first."""
        name = self._queue_name(ch, name, cm)
        self._authorize(ch, "read", "queue", name, cm)
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
        self._authorize(ch, "write", "queue", queue, cm)
        if exchange == "":
            raise E.default_exchange(cm)
        self._authorize(ch, "read", "exchange", exchange, cm)
        self._authorize_binding_key(ch, vh, exchange, routing_key, cm)
        b = Binding(exchange, ("queue", queue), routing_key, freeze_args(arguments))
        if unbind:
            # Unbinding what is not bound succeeds, even when the queue or the
            # exchange is gone; only an existing binding checks exclusivity.
            if vh.bound(b):
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
        self._check_binding(ex, arguments, cm)
        self._add_binding(vh, ex, b, durable=ex.durable and self._queue_persisted(q))

    @staticmethod
    def _queue_persisted(q: Queue) -> bool:
        """Exclusive queues are never written, whatever their durable flag."""
        return q.durable and not q.exclusive

    def queue_purge(self, ch: ChannelState, queue: str) -> int:
        q = self._find_queue(ch, queue, QUEUE_PURGE)
        if q.stream is not None:
            raise E.not_implemented("queue.purge not supported by stream queues "
                                    f"queue '{q.name}' in vhost '{q.vhost}'", QUEUE_PURGE)
        return self.purge(q)

    def purge(self, q: Queue) -> int:
        spilled, lo, hi = q.ready.drop_disk()
        if spilled:  # rows only: one range delete (the log names no message for them)
            self.outbox.emit(P.delete_entries(q, lo, hi))
            self.log_event("purged", q.vhost, None, q.name, reason=f"spilled:{spilled}")
        gone = q.ready.clear() + q.parked
        q.parked = []
        self.purge_entries(q, gone)
        return len(gone) + spilled

    def purge_entries(self, q: Queue, gone: list[Entry], reason: str | None = None) -> None:
        """Ready entries taken out of ``q`` leave for good (delivery-log ``purged``)."""
        for e in gone:
            self.log_event("purged", q.vhost, e.message, q.name, reason=reason)
            self._entry_done(q, e)

    def queue_delete(
        self, ch: ChannelState, queue: str, *, if_unused: bool = False, if_empty: bool = False
    ) -> int:
        vh = self.vhosts[ch.session.vhost]
        cm = QUEUE_DELETE
        queue = self._queue_name(ch, queue, cm)
        self._authorize(ch, "configure", "queue", queue, cm)
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
        self.stats["queues_deleted"] += 1
        vh.queues.pop(q.name, None)
        self._expiring_queues.pop(q, None)
        for c in list(q.consumers):
            self.effects.append(CancelNotify(c.channel, c.tag))
            c.channel.consumers.pop(c.tag, None)
        q.consumers.clear()
        q.active = None
        for b in list(vh.bindings_to.get(("queue", q.name), ())):
            self._drop_binding(vh, b, persist_durable=False)
        count = q.message_count
        parked = [e for e, _ in q.awaiting_body] + q.parked
        q.awaiting_body.clear()
        q.parked = []
        q.ready.drop_disk()
        for e in q.ready.clear() + parked:
            if e.stored:
                e.stored = False  # DeleteQueue removes the rows wholesale
            else:
                e.message.pinned -= 1
        if (q.durable and not q.exclusive) or q.spilled:
            self.outbox.emit(P.delete_queue(q))
        return count

    def _over_limit(self, q: Queue) -> bool:
        count, used = q.backlog()
        return (q.max_length is not None and count > q.max_length) or (
            q.max_bytes is not None and used > q.max_bytes
        )

    def _enforce_limits(self, q: Queue) -> None:
        """drop-head: the oldest messages make room (dead-lettered as maxlen): those no
        selector matched (parked, older than what is ready), then the ready ones."""
        while (q.parked or q.ready) and self._over_limit(q):
            self.dead_letter(q, q.parked.pop(0) if q.parked else q.ready.popleft(), "maxlen")
