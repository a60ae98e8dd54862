"""Dispatch: consumers, deliveries, acknowledgements, requeues and prefetch."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

from amqplite.broker import errors as E
from amqplite.broker import persist as P
from amqplite.broker.base import REPLY_PREFIX, REPLY_TO, Counters, DeliveryLog
from amqplite.broker.commands import (
    BASIC_ACK,
    BASIC_CONSUME,
    BASIC_GET,
    BASIC_NACK,
    BASIC_QOS,
    BASIC_RECOVER,
    BASIC_REJECT,
    CHANNEL_FLOW,
)
from amqplite.broker.deadletter import DeadLetterer, with_delivery_count
from amqplite.broker.effects import NEED_PAGE_IN, Deliver, GetOk, NeedPageIn
from amqplite.broker.expiry import Expiry
from amqplite.broker.model import ChannelState, Consumer, Delivery, Entry, Session
from amqplite.broker.outbox import Outbox
from amqplite.broker.paging import Pager
from amqplite.broker.queue import Queue
from amqplite.broker.selector import Selector
from amqplite.broker.streams import Streams
from amqplite.broker.vhost import VHost

log = logging.getLogger("amqplite.broker")



class Dispatcher:
    """Hands ready entries to consumers with room, and settles what they return.

    Receives the clock, the vhost table, the outbox, the counters, the
    delivery log, the direct reply-to table and the parts built before it:
    streams (stream consumers), expiry (heads past their TTL), the pager
    (bodies and spilled entries to read) and the dead-letterer (rejects and
    delivery limits). ``wire`` hands it the queues part's ``_find_queue`` and
    ``_delete_queue`` (auto-delete), built after it.
    """

    def __init__(self, *, now: Callable[[], float], vhosts: dict[str, VHost], outbox: Outbox,
                 counters: Counters, log: DeliveryLog, reply_channels: dict[str, ChannelState],
                 streams: Streams, expiry: Expiry, pager: Pager,
                 dead_letterer: DeadLetterer) -> None:
        self.now = now
        self.vhosts = vhosts
        self.outbox = outbox
        self.effects = outbox.effects
        self.stats = counters.stats
        self._log_on = log.on
        self._log_full = log.full
        self._log_msg = log.log_msg
        self.log_event = log.log_event
        self.reply_channels = reply_channels
        self._stream_dispatch = streams._stream_dispatch
        self.stream_add_cursor = streams.stream_add_cursor
        self.stream_attach = streams.stream_attach
        self.stream_detach = streams.stream_detach
        self._expire = expiry._expire
        self._expire_head = expiry._expire_head
        self._request_load = pager._request_load
        self._request_page_in = pager._request_page_in
        self.load_batch = pager.load_batch
        self.dead_letter = dead_letterer.dead_letter

    def wire(self, *, find_queue: Callable[[ChannelState, str, tuple[int, int]], Queue],
             delete_queue: Callable[[VHost, Queue], Any]) -> None:
        """The queues part, built after this one."""
        self._find_queue = find_queue
        self._delete_queue = delete_queue

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
        selector: Selector | None = None,
    ) -> str:
        """``selector`` (STOMP's, on a shared queue): only the messages it matches
        come to this consumer; the others stay in the queue for other consumers."""
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
        if selector is not None and q.stream is not None:
            raise E.precondition(f"selectors are not supported on stream queue '{q.name}' "
                                 f"in vhost '{q.vhost}'", cm)
        start = self.stream_attach(ch, q, no_ack, arguments) if q.stream is not None else None
        prio = (arguments or {}).get("x-priority")
        if prio is not None and (isinstance(prio, bool) or not isinstance(prio, int)):
            raise E.precondition(
                f"invalid arg 'x-priority' for queue '{q.name}' in vhost '{q.vhost}': "
                f'"expected integer, got {E.amqp_type(prio)}"', cm)
        c = Consumer(consumer_tag, ch, q, no_ack, exclusive, ch.prefetch, arguments)
        if selector is not None:
            c.selector = selector
            q.selective = True
        unpark(q)  # a new consumer may want what the others did not
        ch.consumers[consumer_tag] = c
        if start is not None:
            self.stream_add_cursor(q, c, start)
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
        if q.stream is not None:
            handed_over = self.stream_detach(q, c)
        if c in q.consumers:
            handed_over = q.remove_consumer(c) or handed_over
            q.last_used = self.now()
            if q.selective and all(x.selector is None for x in q.consumers):
                q.selective = False  # the plain way again, with what was parked
                handed_over = unpark(q) or handed_over
        if q.auto_delete and q.had_consumer and not q.consumers and not q.deleted:
            vh = self.vhosts.get(q.vhost)
            if vh is not None:
                self._delete_queue(vh, q)
        return handed_over

    def basic_get(self, ch: ChannelState, queue: str, no_ack: bool) -> GetOk | NeedPageIn | None:
        """The head message, None when the queue is empty, or NEED_PAGE_IN.

        NEED_PAGE_IN: the head's body is on disk; a PageIn is on its way, ask
        again once it has landed.
        """
        q = self._find_queue(ch, queue, BASIC_GET)
        if q.stream is not None:
            raise E.not_implemented("basic.get not supported by stream queues "
                                    f"queue '{q.name}' in vhost '{q.vhost}'", BASIC_GET)
        unpark(q)  # a get takes the head, whatever the consumers' selectors
        self._expire_head(q)
        if not q.ready:
            self.stats["get_empty"] += 1
            q.n_get_empty += 1
            ch.n_get_empty += 1
            return None
        if q.ready.needs_load:
            self._request_load(q)
            return NEED_PAGE_IN
        head = q.ready.peek()
        if head.message.body is None:
            self._request_page_in(q)
            return NEED_PAGE_IN
        entry = q.ready.popleft()
        tag = ch.next_tag
        ch.next_tag = tag + 1
        redelivered = entry.redelivered
        proto = ch.session.protocol
        self.log_event("delivered", q.vhost, entry.message, q.name,
                       attempt=entry.delivery_count + 1, protocol=proto)
        stats = self.stats
        if no_ack:
            self.log_event("acked", q.vhost, entry.message, q.name,
                           attempt=entry.delivery_count + 1, protocol=proto)
            self._entry_done(q, entry)
            stats["delivered_get_auto_ack"] += 1
            q.n_get_no_ack += 1
            ch.n_get_no_ack += 1
        else:
            ch.unacked[tag] = Delivery(tag, q, entry, None)
            q.unacked += 1
            stats["delivered_get_manual_ack"] += 1
            q.n_get += 1
            ch.n_get += 1
        stats["delivered"] += 1
        if redelivered:
            stats["delivered_redelivered"] += 1
            q.n_redeliver += 1
            ch.n_redeliver += 1
        return GetOk(tag, redelivered, entry.message, q.message_count,
                     self._delivery_props(q, entry))

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
        if q.stream is not None:
            self._stream_dispatch(q)
            return
        if q.deleted:
            return
        # a read in flight (q.paging) does not stop the entries already in RAM: the
        # checks below stop at the head that needs it (no body, or spilled)
        ready = q.ready
        consumers = q.consumers  # changed in place only
        now = 0.0
        # the consumers do not change while this runs: their kind is read once
        simple = not q.single_active and not q.prioritised
        selective = q.selective
        while ready and consumers:
            if ready.disk_count and ready.needs_load:
                self._request_load(q)
                return
            head = ready.peek()
            if head.expires_at is not None:
                now = now or self.now()
                if head.expires_at <= now:
                    self._expire(q, ready.popleft())
                    continue
            if head.message.body is None:
                self._request_page_in(q)
                return
            if selective:
                # a consumer with a selector (Artemis' and ActiveMQ's rule): the head
                # goes, in turn, to a consumer with room whose selector matches it;
                # one that no consumer's selector matches is parked (kept, not
                # redelivered in a loop) until the consumers change; one whose
                # matching consumers are all full waits for them, and what is
                # behind it waits too (the order among matching messages is kept)
                chosen = q.pick_consumer(head.message)
                if chosen is None:
                    if q.selected_by_any(head.message):
                        break
                    q.parked.append(ready.popleft())
                    continue
                c = chosen
            elif len(consumers) == 1 and simple:
                # q.pick_consumer() with nothing to choose: Consumer.has_room, inlined
                c = consumers[0]
                ch = c.channel
                if not ch.flow or not ch.session.writable or (not c.no_ack and (
                        (c.prefetch and c.unacked >= c.prefetch)
                        or (ch.global_prefetch and len(ch.unacked) >= ch.global_prefetch))):
                    break
            else:
                # its own name: typed Consumer | None, kept apart from ``c`` (a
                # Consumer), which compiled code checks on assignment
                picked = q.pick_consumer()
                if picked is None:
                    break
                c = picked
            self._deliver(q, ready.popleft(), c)
        # read the next spilled entries before the head runs dry (fewer than one
        # read's worth left): checked on every way out, above all "consumers are
        # full", the usual one while draining; the read then overlaps the
        # deliveries instead of stalling them once the head is empty
        if ready.disk_count and consumers and ready.head_count < self.load_batch(ready):
            self._request_load(q)

    def _deliver(self, q: Queue, entry: Entry, c: Consumer) -> None:
        ch = c.channel
        tag = ch.next_tag
        ch.next_tag = tag + 1
        msg = entry.message
        if self._log_on and q.stream is None:  # stream reads: see streams.py
            proto = ch.session.protocol
            if self._log_full:
                self._log_msg("delivered", q.vhost, msg, q.name, c.tag, entry.delivery_count + 1,
                              proto)
            if c.no_ack:
                self._log_msg("acked", q.vhost, msg, q.name, c.tag, entry.delivery_count + 1,
                              proto)
        stats = self.stats
        if c.no_ack:
            if entry.stored:  # _entry_done, inlined
                entry.stored = False
                self.outbox._ops.append(P.delete_entry(q, entry))
                gate = entry.gate
                if gate is not None:  # taken by a consumer: counted out, see confirms.py
                    entry.gate = None
                    gate.pending -= 1
                    if not gate.pending and gate.confirm is not None:
                        gate.due.append(gate)
            else:
                msg.pinned -= 1
            stats["delivered_consume_auto_ack"] += 1
            q.n_deliver_no_ack += 1
            ch.n_deliver_no_ack += 1
        else:
            ch.unacked[tag] = Delivery(tag, q, entry, c)
            c.unacked += 1
            q.unacked += 1
            # no "delivered" row: see _requeue_deliveries for where that is written
            stats["delivered_consume_manual_ack"] += 1
            q.n_deliver += 1
            ch.n_deliver += 1
        stats["delivered"] += 1
        if entry.redelivered:
            stats["delivered_redelivered"] += 1
            q.n_redeliver += 1
            ch.n_redeliver += 1
        self.effects.append(Deliver(ch, c.tag, tag, entry.redelivered, msg,
                                    self._delivery_props(q, entry)
                                    if entry.delivery_count or q.quorum else None))

    def _take(self, ch: ChannelState, tag: int, multiple: bool, cm: tuple[int, int]) -> list[Delivery]:
        un = ch.unacked
        if multiple:
            if tag == 0:
                out = list(un.values())
                un.clear()
                return out
            if tag not in un:
                raise E.precondition(f"unknown delivery tag {tag}", cm)
            if tag == next(reversed(un)):  # up to the last tag given: all of them
                out = list(un.values())
                un.clear()
                return out
            # tags are given in increasing order, so the dict's order is theirs: one
            # pass to the first tag above, then the removals (no iterator per tag)
            out = []
            keys = []
            for t, d in un.items():
                if t > tag:
                    break
                keys.append(t)
                out.append(d)
            for t in keys:
                del un[t]
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
        touched: dict[Queue, None] = {}  # in first-acked order, as the set it stands for
        log_on = self._log_on
        store_ops = self.outbox._ops  # the list: CPython specialises list.append
        last = None
        for d in ds:
            q = d.queue
            c = d.consumer
            if c is not None:  # _release, inlined
                c.unacked -= 1
            q.unacked -= 1
            if not q.deleted:
                e = d.entry
                # a stream read (StreamEntry) settles nothing and logs nothing: streams.py
                if isinstance(e, Entry):
                    if log_on:
                        self._log_msg("acked", q.vhost, e.message, q.name,
                                      c.tag if c else None, e.delivery_count + 1,
                                      ch.session.protocol)
                    if e.stored:  # _entry_done, inlined
                        e.stored = False
                        store_ops.append(P.delete_entry(q, e))
                        gate = e.gate
                        if gate is not None:  # acked: counted out, see confirms.py
                            e.gate = None
                            gate.pending -= 1
                            if not gate.pending and gate.confirm is not None:
                                gate.due.append(gate)
                    else:
                        e.message.pinned -= 1
                q.n_ack += 1
                if q is not last:
                    touched[q] = None
                    last = q
        self.stats["acked"] += len(ds)
        ch.n_ack += len(ds)
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
        for d in ds:
            if d.queue.stream is not None:  # RabbitMQ's answer (the connection closes)
                raise E.not_implemented("basic.nack and basic.reject not supported by stream "
                                        f"queues queue '{d.queue.name}' in vhost "
                                        f"'{d.queue.vhost}'", cm)
        if requeue:
            touched = self._requeue_deliveries(ch, ds)
        else:
            touched = {}
            for d in ds:
                q = d.queue
                self._release(d)
                e = d.entry
                if q.deleted or not isinstance(e, Entry):  # stream reads were refused above
                    continue
                self.log_event("rejected", q.vhost, e.message, q.name,
                          consumer_tag=d.consumer.tag if d.consumer else None,
                          attempt=e.delivery_count + 1, reason="rejected")
                self.dead_letter(q, e, "rejected")
                touched[q] = None
        for q in touched:
            self._dispatch(q)

    def _release(self, d: Delivery) -> None:
        """Undo a delivery's counters (the entry leaves the unacked set)."""
        if d.consumer is not None:
            d.consumer.unacked -= 1
        d.queue.unacked -= 1

    def _requeue_deliveries(self, ch: ChannelState, ds: list[Delivery]) -> dict[Queue, None]:
        """Unacked deliveries go back to their queues, flagged redelivered; returns the
        queues touched, in the order first touched (a dict: a set's order would follow
        object addresses, and dispatch order must not change from run to run).

        This is the only place the store learns that an entry was delivered: a
        delivery itself writes nothing. A clean stop closes every channel first,
        which lands here, so each delivered entry is stored redelivered before
        the store closes; after an unclean stop recovery flags every entry
        (``mark_redelivered``), as RabbitMQ does. A per-delivery row would
        cost an UPDATE per message on the drain path and tell recovery nothing
        more.
        """
        touched: dict[Queue, None] = {}
        # put back highest position first so each insert lands at the front cheaply
        for d in sorted(ds, key=lambda d: d.entry.position, reverse=True):
            q = d.queue
            self._release(d)
            if q.deleted:
                continue
            e = d.entry
            if not isinstance(e, Entry):  # a stream read: the log keeps every entry
                touched[q] = None
                continue
            e.redelivered = True
            e.delivery_count += 1
            if q.delivery_limit is not None and e.delivery_count > q.delivery_limit:
                self.dead_letter(q, e, "delivery_limit")
                touched[q] = None
                continue
            self.log_event("requeued", q.vhost, e.message, q.name,
                      consumer_tag=d.consumer.tag if d.consumer else None,
                      attempt=e.delivery_count)
            if e.stored:
                self.outbox._ops.append(P.update_entry(q, e))
            q.ready.insert_sorted(e)
            touched[q] = None
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
            self.outbox._ops.append(P.delete_entry(q, e))
        else:
            e.message.pinned -= 1

    def channel_flow(self, ch: ChannelState, active: bool) -> None:
        if not active:
            raise E.not_implemented("active=false", CHANNEL_FLOW)
        ch.flow = True

    def set_writable(self, session: Session, writable: bool) -> None:
        """The shell's word on a connection's socket: backed up, or drained again.

        While not writable its consumers receive nothing (deliveries wait in
        their queues); when it drains they resume.
        """
        if session.writable == writable:
            return
        session.writable = writable
        if not writable:
            return
        qs: dict[Queue, None] = {}  # ordered: dispatch order is the same every run
        for ch in session.channels.values():
            for c in ch.consumers.values():
                qs[c.queue] = None
        for q in qs:
            self._dispatch(q)


def unpark(q: Queue) -> bool:
    """The parked entries go back to ``ready`` at their positions (the consumers
    changed: each is offered again); True when there were any."""
    parked = q.parked
    if not parked:
        return False
    ready = q.ready
    for e in reversed(parked):  # highest first: each lands at the front cheaply
        ready.insert_sorted(e)
    q.parked = []
    return True
