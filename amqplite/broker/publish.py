"""Publishing: the properties check at the door, routing, and enqueueing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from amqplite.broker import errors as E
from amqplite.broker import persist as P
from amqplite.broker.base import (
    NOT_STORED,
    REJECTED,
    REPLY_PREFIX,
    REPLY_TO,
    STORED,
    Counters,
    DeliveryLog,
)
from amqplite.broker.commands import BASIC_PUBLISH
from amqplite.broker.confirms import ConfirmGate, Confirms
from amqplite.broker.effects import Deliver, PublishResult, Return
from amqplite.broker.exchanges import Exchange
from amqplite.broker.expiry import Expiry, parse_expiration
from amqplite.broker.model import ChannelState, Entry, Message, PriorityReadyList
from amqplite.broker.outbox import Outbox
from amqplite.broker.paging import Pager
from amqplite.broker.permissions import Access
from amqplite.broker.queue import Queue
from amqplite.broker.retained import RetainedStore
from amqplite.broker.sender_selected import HEADERS_FLAG, bad_header, header_routes, route_all
from amqplite.broker.streams import Streams
from amqplite.broker.vhost import NO_ROUTE, VHost
from amqplite.protocol.errors import FrameSyntaxError
from amqplite.protocol.properties import (
    check_properties,
    expiration_of,
    headers_of,
    printable,
    priority_of,
    reply_to_of,
    user_id_of,
    with_reply_to,
)

#: the results of a publish to one queue, shared: nobody changes a result
_ROUTED: Final = PublishResult(True, False)
_ROUTED_STORED: Final = PublishResult(True, True)
_ROUTED_REJECTED: Final = PublishResult(True, False, True)
#: A queue with consumers and more ready messages than this after a publish is
#: "backlogged": the publishing session is told (``Session.congested``) and the
#: shell reads no more from it while the consumers drain the queue fast (credit
#: flow, as RabbitMQ's: accept only as fast as the queue hands messages on).
FLOW_READY: Final = 256


class Publisher:
    """basic.publish: checks, routes, enqueues, and counts the publish for confirms.

    Receives the vhost table, the outbox, the counters, the delivery log, the
    retained store, the direct reply-to table and the parts built before it
    that a publish goes through: access (checks), confirms (seqs), streams
    (appends), expiry (TTLs) and the pager (spilling under memory pressure).
    ``wire`` hands it the dispatcher's ``_dispatch``, the queues part's
    ``_enforce_limits`` and the dead-letterer's ``_dead_letter_message``, built
    after it. It owns the message keys (``new_message_key``).
    """

    def __init__(self, *, vhosts: dict[str, VHost], outbox: Outbox, counters: Counters,
                 log: DeliveryLog, retained: RetainedStore,
                 reply_channels: dict[str, ChannelState], access: Access, confirms: Confirms,
                 streams: Streams, expiry: Expiry, pager: Pager, body_window: int) -> None:
        self.vhosts = vhosts
        self.outbox = outbox
        self.effects = outbox.effects
        self.evictable = outbox.evictable
        self.stats = counters.stats
        self.new_sizes = counters.new_sizes
        self._log_on = log.on
        self._log_msg = log.log_msg
        self.log_event = log.log_event
        self.retained = retained
        self.reply_channels = reply_channels
        self.access_control = access.access_control
        self.topic_permissions = access.topic_permissions
        self._authorize = access._authorize
        self._authorize_topic = access._authorize_topic
        self._confirm_published = confirms._confirm_published
        self._gate_of = confirms.gate_of
        #: the ConfirmGate of the basic.publish under way (a ``settle_early`` channel's):
        #: ``enqueue`` counts each durable entry in it. Left set by a publish that
        #: raised, it may count a later entry too, which only holds its Confirm back
        self._gate: ConfirmGate | None = None
        self.stream_append = streams.stream_append
        self.stream_append_batch = streams.stream_append_batch
        self.arm_ttl = expiry.arm_ttl
        self._pager = pager
        self.spills = pager.spills
        self._store_entry = pager._store_entry
        self.body_window = body_window
        self._next_message_key = 1

    def wire(self, *, dispatch: Callable[[Queue], None],
             enforce_limits: Callable[[Queue], None],
             dead_letter_message: Callable[[Queue, Message, str], None]) -> None:
        """The parts built after this one that a publish reaches."""
        self._dispatch = dispatch
        self._enforce_limits = enforce_limits
        self._dead_letter_message = dead_letter_message

    # ------------------------------------------------------------------ keys
    def seed_message_keys(self, max_message_key: int) -> None:
        """Recovery: keys continue past the stored ones."""
        self._next_message_key = max(self._next_message_key, max_message_key + 1)

    @property
    def message_key_mark(self) -> int:
        """The highest message key handed out so far (every log row's key is at most this)."""
        return self._next_message_key - 1

    def new_message_key(self) -> int:
        """A fresh message id, never reused (recovery seeds past the stored ones)."""
        k = self._next_message_key
        self._next_message_key = k + 1
        return k

    # --------------------------------------------------------------- publish

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
        """Route and enqueue one message; in confirm mode it also takes a seq."""
        vh = self.vhosts[ch.session.vhost]
        cm = BASIC_PUBLISH
        if immediate:
            raise E.not_implemented("immediate=true", cm)
        if self.access_control:  # else _authorize has nothing to check
            self._authorize(ch, "write", "exchange", exchange, cm)
        ex = vh.exchanges.get(exchange)
        if ex is None:
            raise E.no_exchange(exchange, vh.name, cm)
        if ex.internal:
            raise E.access_refused(
                f"cannot publish to internal exchange '{exchange}' in vhost '{vh.name}'", cm
            )
        if self.topic_permissions.table:  # RabbitMQ checks them here, after internal
            self._authorize_topic(ch, ex, routing_key, "write", cm)
        if properties_raw != ch.last_props and properties_raw != b"\x00\x00":
            self._check_properties(ch, properties_raw)
        # past the check the flags are there; reply_to is flag bit 9 (first octet)
        if properties_raw[0] & 0x02 and reply_to_of(properties_raw) == REPLY_TO:
            if ch.reply_name is None:
                raise E.precondition("fast reply consumer does not exist", cm)
            properties_raw = with_reply_to(properties_raw, ch.reply_name)
        if ch.tx:
            ch.tx_publishes.append((exchange, routing_key, properties_raw, body, mandatory))
            res = PublishResult(True, False)
        elif ch.confirm:
            self._gate = self._gate_of(ch)
            try:
                res = self.publish(vh, ex, routing_key, properties_raw, body, mandatory, ch)
            finally:  # a refused publish must not leave later enqueues counting in
                self._gate = None
        else:
            res = self.publish(vh, ex, routing_key, properties_raw, body, mandatory, ch)
        # the global counters (RabbitMQ's), then the confirm seq
        ch.publishes += 1
        stats = self.stats
        if res.routed:
            stats["routed"] += 1
        elif mandatory:
            stats["unroutable_returned"] += 1
            ch.n_return_unroutable += 1
        else:
            stats["unroutable_dropped"] += 1
            ch.n_drop_unroutable += 1
        if ch.confirm:
            stats["received_confirm"] += 1
            self._confirm_published(ch, res)
        return res

    def stream_publish(self, ch: ChannelState, q: Queue, routing_key: str,
                       properties_raw: bytes, body: bytes) -> int:
        """Append one message to the stream ``q`` with no exchange between: a front whose
        client picks the stream itself (a Kafka partition). Counted, logged and
        confirmed as a publish on ``ch``; returns its offset. The caller checked the
        write permission on ``q`` and built the properties (they are not checked)."""
        st = q.stream
        assert st is not None
        off = st.next_offset
        key = self._next_message_key
        self._next_message_key = key + 1
        msg = Message(key, "", routing_key, properties_raw, body)
        stats = self.stats
        stats["published"] += 1
        self.new_sizes.append(len(body))
        if self._log_on:
            self._log_msg("published", q.vhost, msg, None, None, None, ch.session.protocol)
        self.stream_append(q, msg)
        ch.publishes += 1
        stats["routed"] += 1
        if q.consumers:
            self._dispatch(q)
        if ch.confirm:
            stats["received_confirm"] += 1
            self._confirm_published(ch, _ROUTED_STORED)
        return off

    def stream_publish_batch(self, ch: ChannelState, q: Queue, batch: bytes | memoryview,
                             count: int,
                             ) -> int:
        """Append a Kafka record batch of ``count`` records to the stream ``q`` as it
        came (``streamrecord.pack_batch``): ``count`` offsets, one store record, one
        confirm seq on ``ch``, and one published and one appended log row for the
        batch. The caller checked the write permission and the batch
        (``kafka.stored.storable``); AMQP readers see its records expanded."""
        key = self._next_message_key
        self._next_message_key = key + 1
        stats = self.stats
        stats["published"] += count
        # the size histogram counts records: each gets the batch's mean size
        self.new_sizes.extend([len(batch) // count] * count)
        off = self.stream_append_batch(q, batch, count, key, ch.session.protocol)
        ch.publishes += count
        stats["routed"] += count
        if q.consumers:
            self._dispatch(q)
        if ch.confirm:
            stats["received_confirm"] += 1
            self._confirm_published(ch, _ROUTED_STORED)
        return off

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
                except ValueError as bad:  # not ``exc``: compiled, one name has one type
                    raise E.invalid_expiration(printable(exp), str(bad), cm) from None
        if raw[1] & 0x10:  # user-id flag set
            uid = user_id_of(raw)
            if uid is not None and uid != ch.session.username:
                raise E.precondition(
                    f"user_id property set to '{printable(uid)}' but authenticated user was "
                    f"'{ch.session.username}'", cm,
                )
        if table and b"CC" in table:  # sender-selected distribution: arrays only
            headers = headers_of(raw)
            why = None if headers is None else bad_header(headers)
            if why is not None:
                raise E.invalid_message(why, cm)
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
        extra: list[str] | None = None
        # a headers flag and the bytes "CC": only then CC/BCC may add keys (BCC is stripped)
        if properties_raw[0] & HEADERS_FLAG and b"CC" in properties_raw:
            cc, bcc, properties_raw = header_routes(properties_raw)
            extra = cc + bcc
        key = self._next_message_key
        self._next_message_key = key + 1
        msg = Message(key, ex.name, routing_key, properties_raw, body)
        if extra and bcc:
            msg.bcc = tuple(bcc)
        self.stats["published"] += 1
        self.new_sizes.append(len(body))  # counted per batch (``fold_sizes``)
        if self._log_on:
            self._log_msg("published", vh.name, msg, None, None, None,
                          None if ch is None else ch.session.protocol)
        if not ex.name and routing_key.startswith(REPLY_PREFIX):
            target = self.reply_channels.get(routing_key)
            if target is not None and target.session.vhost == vh.name:
                self._deliver_reply(target, msg)
                return PublishResult(True, False)
            routed = NO_ROUTE
        elif extra:
            routed = route_all(vh, ex, routing_key, extra, msg)
        else:
            routed = vh.route(ex, routing_key, msg)
        queues = routed.queues
        if routed.retainers:  # x-recent-history, x-lvc: kept, routed or not
            return self._publish_retained(vh, routed.retainers, msg, queues, mandatory, ch)
        if not queues:
            if mandatory and ch is not None:
                self.effects.append(Return(ch, 312, "NO_ROUTE", msg))
                self.log_event("returned", vh.name, msg, reason="NO_ROUTE")
            return PublishResult(False, False)
        if len(queues) == 1:
            q = queues[0]
            r = self.enqueue(q, msg)
            if q.consumers:  # else nobody to hand to (a stream's readers are consumers too)
                self._dispatch(q)
                if ch is not None and len(q.ready) > FLOW_READY:
                    ch.session.congested = q
            if r == NOT_STORED:
                return _ROUTED
            return _ROUTED_STORED if r == STORED else _ROUTED_REJECTED
        stored = rejected = False
        for q in queues:
            r = self.enqueue(q, msg)
            if r == STORED:
                stored = True
            elif r == REJECTED:
                rejected = True
        for q in queues:
            self._dispatch(q)
            if ch is not None and q.consumers and len(q.ready) > FLOW_READY:
                ch.session.congested = q
        return PublishResult(True, stored, rejected)

    def _publish_retained(self, vh: VHost, retainers: tuple[Exchange, ...], msg: Message,
                          queues: Sequence[Queue], mandatory: bool,
                          ch: ChannelState | None) -> PublishResult:
        """A publish to (or through) a retaining exchange: each such exchange type
        keeps it in the retained store, then it goes to ``queues`` as any publish;
        a confirm waits for the retained rows' commit as for a queue entry's."""
        kept = self._retain(vh, retainers, msg)
        if kept and self._gate is not None:
            self._gate.pending += 1  # a retained row: no ack settles it, the commit must
        if not queues:
            if mandatory and ch is not None:
                self.effects.append(Return(ch, 312, "NO_ROUTE", msg))
                self.log_event("returned", vh.name, msg, reason="NO_ROUTE")
            return PublishResult(False, kept)
        stored = rejected = False
        for q in queues:
            r = self.enqueue(q, msg)
            stored = stored or r == STORED
            rejected = rejected or r == REJECTED
        for q in queues:
            self._dispatch(q)
        return PublishResult(True, stored or kept, rejected)

    def _retain(self, vh: VHost, retainers: tuple[Exchange, ...], msg: Message) -> bool:
        """The retaining exchanges a route passed (``RouteResult.retainers``) keep
        ``msg``; True when a store write must commit first. Publishes and dead
        letters both come here."""
        kept = False
        for e in retainers:
            kept = e.retain(self.retained, vh.name, msg) or kept
        return kept

    def _deliver_reply(self, ch: ChannelState, msg: Message) -> None:
        """A reply goes straight to its requester's no-ack consumer: no queue, no store."""
        assert ch.reply_consumer is not None
        tag = ch.next_tag
        ch.next_tag = tag + 1
        self.stats["delivered"] += 1
        self.stats["delivered_consume_auto_ack"] += 1
        ch.n_deliver_no_ack += 1
        self.log_event("delivered", ch.session.vhost, msg, REPLY_TO, consumer_tag=ch.reply_consumer)
        self.effects.append(Deliver(ch, ch.reply_consumer, tag, False, msg))

    @staticmethod
    def _refuses(q: Queue, size: int) -> bool:
        """x-overflow reject-publish(-dlx): a full queue refuses what would not fit."""
        if q.overflow == "drop-head":
            return False
        count, used = q.backlog()
        return (q.max_length is not None and count >= q.max_length) or (
            q.max_bytes is not None and used + size > q.max_bytes)

    def enqueue(self, q: Queue, msg: Message) -> int:
        """Append ``msg`` to ``q``: NOT_STORED, STORED (needs a commit) or REJECTED."""
        if q.stream is not None:
            if self._gate is not None:
                self._gate.pending += 1  # an append: no ack settles it, the commit must
            return self.stream_append(q, msg)
        limited = q.max_length is not None or q.max_bytes is not None
        if limited and self._refuses(q, msg.body_size):
            self.log_event("rejected", q.vhost, msg, q.name, reason="maxlen")
            if q.overflow == "reject-publish-dlx":
                self._dead_letter_message(q, msg, "maxlen")
            return REJECTED
        pos = q.next_position
        q.next_position = pos + 1
        e = Entry(pos, msg)
        ready = q.ready
        raw = msg.properties_raw
        if type(ready) is PriorityReadyList:
            e.priority = priority_of(raw) or 0
        # a TTL only when the queue has one or the expiration flag (bit 8) is set
        if q.ttl is not None or len(raw) < 2 or raw[0] & 0x01:
            self.arm_ttl(q, e)
        persist = msg.persistent and q.durable and q.exclusive_owner is None
        if persist:
            if not msg.stored:
                msg.stored = True
                self.outbox._ops.append(P.put_message(msg))
            e.stored = True
            self.outbox._ops.append(P.put_entry(q, e))
            self.stats["disk_writes"] += 1
            gate = self._gate
            if gate is not None:  # its ack counts it out (``Confirms.release_due``)
                e.gate = gate
                gate.pending += 1
            if len(ready) >= self.body_window:
                self.evictable.append((q, e))
        else:
            msg.pinned += 1
        if self._log_on:
            self._log_msg("routed", q.vhost, msg, q.name, None, None)
        ready.append(e)
        if (not persist and self._pager.memory_pressure and e.expires_at is None
                and len(ready) > self.body_window and self.spills(q)):
            self._store_entry(q, e)  # deep and short of memory: it spills once written
        if limited:
            self._enforce_limits(q)
        return STORED if persist else NOT_STORED
