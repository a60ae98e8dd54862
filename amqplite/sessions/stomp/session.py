"""One logged-in STOMP connection's rules, as RabbitMQ's STOMP plugin maps them
onto the AMQP core: SEND, SUBSCRIBE/UNSUBSCRIBE, ACK/NACK, transactions and
receipts in; the broker's deliveries and publisher confirms out as MESSAGE
and RECEIPT frames.

A connection is a broker session with one channel in confirm mode for its
SENDs (a RECEIPT for a SEND leaves when its confirm does, so a persistent
message's RECEIPT waits for the store commit), one no-ack channel for its
temp queues, and one channel per subscription: a subscription's prefetch,
its cumulative ``client`` acks (``basic.ack multiple``) and its deliveries
stay its own, and an UNSUBSCRIBE cancels the consumer but keeps the
channel, so its unacked messages can still be ACKed until the connection
closes (RabbitMQ acks on one channel for all, which makes ``client`` acks
cross subscriptions). Transactions are buffered here, as RabbitMQ's plugin
does: COMMIT replays the SENDs and ACK/NACKs, ABORT drops them.

Plain Python: no trio, no sockets, no clock. The shell gives it ``flush``
(bytes are queued) and ``finish`` (the connection must end), carries out
the broker's Outcome after each batch of events, and sends the ``held``
receipts once the store has committed what came before them.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections.abc import Callable
from typing import Any

from amqplite.broker.core import Broker
from amqplite.broker.exchanges.selected import SELECTOR_ARG
from amqplite.broker.model import ChannelState
from amqplite.broker.selector import Selector, SelectorError, parse
from amqplite.protocol import streamrecord
from amqplite.protocol.codec import Timestamp
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.stomp.connection import StompConnection
from amqplite.protocol.stomp.destinations import Destination, Kind, format_destination
from amqplite.protocol.stomp.errors import StompError, keeps_open
from amqplite.protocol.stomp.events import (
    AbortReceived,
    AckMode,
    AckReceived,
    BeginReceived,
    CommitReceived,
    DisconnectReceived,
    NackReceived,
    SendReceived,
    SettleFrame,
    StompEvent,
    SubscribeReceived,
    UnsubscribeReceived,
)
from amqplite.protocol.stomp.frames import V12
from amqplite.protocol.stomp.mapping import amqp_properties, stomp_headers

log = logging.getLogger("amqplite.stomp")

PUBLISH_CH = 1
TEMP_CH = 2
#: the delivery log's protocol name of a STOMP session ("stomp-1.2"), beside
#: "amqp-0-9-1" and "mqtt-3.1.1"
LOG_PROTOCOL = "stomp-{}"
TEMP_PREFIX = "/temp-queue/"
REPLY_PREFIX = "/reply-queue/"

#: SUBSCRIBE/SEND headers that become queue arguments, and how each is read
_INT_ARGS = ("x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes",
             "x-max-priority", "x-delivery-limit")
_TEXT_ARGS = ("x-dead-letter-exchange", "x-dead-letter-routing-key", "x-overflow",
              "x-queue-type", "x-max-age", "x-queue-mode")


def _check_selector(d: Destination, text: str) -> Selector | None:
    """A SUBSCRIBE's selector, refused with the parser's words when it does not
    parse. A /topic/ or /exchange/ subscription filters at routing, on its own
    queue's binding (None here); on a shared queue the consumer carries it
    (returned) and the dispatcher hands it only what it matches."""
    try:
        sel = parse(text)
    except SelectorError as exc:
        raise StompError("Invalid selector", f"{exc}\n") from None
    return None if d.kind is Kind.TOPIC or d.kind is Kind.EXCHANGE else sel


def queue_arguments(headers: dict[str, str]) -> dict[str, Any] | None:
    """The ``x-`` queue arguments a SEND or SUBSCRIBE carries (RabbitMQ's list)."""
    if not any(k.startswith("x-") for k in headers):
        return None
    args: dict[str, Any] = {}
    for name in _INT_ARGS:
        value = headers.get(name)
        if value is not None:
            if not (value.lstrip("-").isdigit() and value.isascii()):
                raise StompError("Invalid header", f"'{name}' must be an integer, not '{value}'\n")
            args[name] = int(value)
    for name in _TEXT_ARGS:
        value = headers.get(name)
        if value is not None:
            args[name] = value
    sac = headers.get("x-single-active-consumer")
    if sac is not None:
        args["x-single-active-consumer"] = sac == "true"
    return args or None


def stream_offset(value: str | None) -> Any:
    """A SUBSCRIBE's ``x-stream-offset`` as the broker takes it (RabbitMQ's forms):
    ``first``, ``last``, ``next`` (the default), ``offset=<n>``, ``timestamp=<s>``;
    anything else (an interval such as ``1h``) as it is."""
    if value is None:
        return "next"
    kind, sep, number = value.partition("=")
    if sep and number.isdigit() and number.isascii():
        if kind == "offset":
            return int(number)
        if kind == "timestamp":
            return Timestamp(int(number))
    return value


def subscription_queue(destination: str, sub_id: str, scope: str = "") -> str:
    """A topic or exchange subscription's queue name: the same for the same
    destination and id (and ``scope``: the STOMP session of a non-durable one),
    so a durable subscription finds its queue again on every reconnect."""
    digest = hashlib.md5(f"{scope}\n{destination}\n{sub_id}".encode(), usedforsecurity=False)
    return "stomp-subscription-" + digest.hexdigest()


def _amqp_error(exc: AMQPError) -> StompError:
    """An AMQP refusal as RabbitMQ's plugin words it: ``message:not_found``,
    the AMQP text as the body."""
    kind, _, _ = exc.reply_text.partition(" - ")
    return StompError(kind.lower() if kind.isupper() else "Processing error", exc.reply_text)


class Subscription:
    """A SUBSCRIBE: its consumer on its own channel."""

    def __init__(self, id: str | None, tag: str, channel: ChannelState, queue: str,
                 ack: AckMode, durable: bool, active: bool = True) -> None:
        #: the ``id`` header; None for a 1.0 subscription keyed by its destination
        self.id = id
        self.tag = tag
        self.channel = channel
        self.queue = queue
        self.ack = ack
        #: the queue outlives the connection (a durable topic subscription)
        self.durable = durable
        self.active = active

    def __repr__(self) -> str:
        return f"Subscription(id={self.id!r}, tag={self.tag!r}, queue={self.queue!r})"


def _nothing() -> None:
    """The default ``flush`` and ``finish`` (a module function: compiled, a lambda
    default broke)."""


class StompSession:
    """A logged-in STOMP connection; the broker's transport for its session."""

    def __init__(self, broker: Broker, proto: StompConnection, *, user: str, vhost: str,
                 peer: str, name: str, flush: Callable[[], None] = _nothing,
                 finish: Callable[[], None] = _nothing,
                 default_nack_requeue: bool = True) -> None:
        self.broker = broker
        self.proto = proto
        #: the CONNECTED ``session`` header, part of every ``message-id``
        self.name = name
        self._flush = flush
        self._finish = finish
        self.default_nack_requeue = default_nack_requeue
        s = self.session = broker.open_session(user, vhost, peer)
        s.protocol = LOG_PROTOCOL.format(proto.version or "1.0")
        s.transport = self
        connect = proto.connect
        s.client_properties = {"product": "STOMP " + (proto.version or "1.0")}
        if connect is not None and "client-id" in connect.headers:
            s.client_id = connect.headers["client-id"]
            s.client_properties["client_id"] = s.client_id
        self.pub = broker.open_channel(s, PUBLISH_CH)
        broker.confirm_select(self.pub)
        self.temp_ch: ChannelState | None = None
        #: subscriptions by id (1.0 without id: by destination header)
        self.subs: dict[str, Subscription] = {}
        #: every consumer tag this connection used: acks stay valid after UNSUBSCRIBE
        self._by_tag: dict[str, Subscription] = {}
        self._by_channel: dict[int, Subscription] = {}
        self._next_channel = itertools.count(TEMP_CH + 1)
        #: temp-queue id -> its queue
        self.temp_queues: dict[str, str] = {}
        #: queues this connection declared already (RabbitMQ declares once per connection)
        self._declared: set[str] = set()
        #: publisher-confirm seq -> receipts that leave with its confirm
        self._receipts: dict[int, list[str]] = {}
        self._confirmed_upto = 0
        #: open transactions: the SENDs and ACK/NACKs COMMIT replays
        self.transactions: dict[str, list[SendReceived | SettleFrame]] = {}
        #: receipts that leave once the store committed what came before
        self.held: list[str] = []
        #: how many RECEIPTs the last confirm released: more than one means a
        #: publisher with a window of them (the shell then gathers its SENDs)
        self.last_released = 0
        self.closed = False
        self.delivered = 0
        self.received = 0

    # ------------------------------------------------------------ events in
    def handle(self, ev: StompEvent) -> None:
        """One client frame; a refusal is answered with ERROR (the connection closes)."""
        try:
            t = type(ev)
            if t is SendReceived:
                assert isinstance(ev, SendReceived)
                self.send(ev)
            elif t is AckReceived or t is NackReceived:
                assert isinstance(ev, SettleFrame)
                self.settle(ev)
            elif t is SubscribeReceived:
                assert isinstance(ev, SubscribeReceived)
                self.subscribe(ev)
            elif t is UnsubscribeReceived:
                assert isinstance(ev, UnsubscribeReceived)
                self.unsubscribe(ev)
            elif t is BeginReceived:
                assert isinstance(ev, BeginReceived)
                self.begin(ev.transaction, ev.receipt)
            elif t is CommitReceived:
                assert isinstance(ev, CommitReceived)
                self.commit(ev.transaction, ev.receipt)
            elif t is AbortReceived:
                assert isinstance(ev, AbortReceived)
                self.abort(ev.transaction, ev.receipt)
            elif t is DisconnectReceived:
                assert isinstance(ev, DisconnectReceived)
                if ev.receipt is not None:
                    self._after_everything(ev.receipt)
        except StompError as exc:  # compiled, one name has one type: not ``exc`` below
            self._refuse(exc, getattr(ev, "receipt", None), keeps_open(exc))
        except AMQPError as amqp_exc:
            self._refuse(_amqp_error(amqp_exc), getattr(ev, "receipt", None))

    def _refuse(self, exc: StompError, receipt: str | None, keep_open: bool = False) -> None:
        """ERROR, then the close; after a frame refused by the STOMP rules (not by
        the broker) the connection goes on, as in RabbitMQ (``keeps_open``)."""
        log.info("STOMP %s: %s", self.session.peer, exc)
        self.proto.send_error(exc.message, exc.detail, receipt=receipt, close=not keep_open)
        if not keep_open:
            self._finish()

    # ------------------------------------------------------------ SEND
    def send(self, ev: SendReceived) -> None:
        if ev.transaction is not None:
            self._transaction(ev.transaction).append(ev)
            if ev.receipt is not None:
                self.held.append(ev.receipt)
            return
        self.publish(ev)
        if ev.receipt is not None:
            self._receipts.setdefault(self.pub_seq, []).append(ev.receipt)

    @property
    def pub_seq(self) -> int:
        """The confirm seq of the last publish."""
        st = self.pub.confirms
        assert st is not None
        return st.next_seq - 1

    def publish(self, ev: SendReceived) -> None:
        d = ev.destination
        h = ev.headers
        reply_to = None
        rt = h.get("reply-to")
        if rt is not None and rt.startswith(TEMP_PREFIX):
            reply_to = REPLY_PREFIX + self.temp_queue(rt[len(TEMP_PREFIX):])
        if d.kind is Kind.QUEUE:
            self._ensure_queue(d.name, h)
        exchange, routing_key = d.routing()
        self.broker.basic_publish(self.pub, exchange, routing_key,
                                  amqp_properties(h, reply_to), ev.body)
        self.received += 1

    def _ensure_queue(self, name: str, h: dict[str, str]) -> None:
        """``/queue/<name>``: a durable shared queue, declared on first use (the
        ``durable``, ``auto-delete`` and ``exclusive`` headers may say otherwise)."""
        if name in self._declared:
            return
        self.broker.queue_declare(
            self.pub, name, durable=h.get("durable", "true") != "false",
            auto_delete=h.get("auto-delete") == "true", exclusive=h.get("exclusive") == "true",
            arguments=queue_arguments(h))
        self._declared.add(name)

    def temp_queue(self, temp_id: str) -> str:
        """The reply queue of ``/temp-queue/<id>``: exclusive to this connection,
        consumed without acks; what arrives there comes as MESSAGE with
        ``subscription: /temp-queue/<id>``."""
        name = self.temp_queues.get(temp_id)
        if name is not None:
            return name
        b = self.broker
        if self.temp_ch is None:
            self.temp_ch = b.open_channel(self.session, TEMP_CH)
        ch = self.temp_ch
        name, _, _ = b.queue_declare(ch, "", exclusive=True, auto_delete=True)
        tag = b.basic_consume(ch, name, TEMP_PREFIX + temp_id, no_ack=True)
        b.start_consumer(ch, tag)
        self.temp_queues[temp_id] = name
        return name

    # ------------------------------------------------------------ SUBSCRIBE
    def subscribe(self, ev: SubscribeReceived) -> None:
        h = ev.headers
        raw = h.get("destination", "")
        key = ev.subscription_id if ev.subscription_id is not None else raw
        tag = f"T_{ev.subscription_id}" if ev.subscription_id is not None else f"Q_{raw}"
        selector = h.get("selector")
        consumer_selector = None
        if selector is not None:  # RabbitMQ ignores it and delivers everything: never us
            consumer_selector = _check_selector(ev.destination, selector)
        if key in self.subs:
            raise StompError("Duplicated subscription identifier",
                             f"A subscription identified by '{tag}' already exists.")
        b = self.broker
        # the same id again after UNSUBSCRIBE: its channel again, so the delivery
        # tags (and message-ids) of the old deliveries, still ACKable, stay unique
        old = self._by_tag.get(tag)
        fresh = old is None or not old.channel.open
        if old is None or not old.channel.open:
            ch = b.open_channel(self.session, next(self._next_channel))
        else:
            ch = old.channel
        durable = False
        try:
            queue, durable = self._subscription_queue(ch, ev.destination, raw, ev)
            prefetch = h.get("prefetch-count")
            if prefetch is not None and not (prefetch.isdigit() and prefetch.isascii()):
                raise StompError("Invalid header",
                                 f"'prefetch-count' must be an integer, not '{prefetch}'\n")
            if prefetch is not None or not fresh:  # a reused channel forgets the old one's
                b.basic_qos(ch, 0, int(prefetch or 0), False)
            vh = b.vhosts.get(self.session.vhost)
            q = None if vh is None else vh.queues.get(queue)
            args = None
            if q is not None and q.stream is not None:
                key = streamrecord.OFFSET_HEADER
                args = {key: stream_offset(h.get(key))}
            b.basic_consume(ch, queue, tag, no_ack=ev.ack is AckMode.AUTO, arguments=args,
                            selector=consumer_selector)
        except BaseException:
            if fresh:
                b.close_channel(ch)
            raise
        sub = Subscription(ev.subscription_id, tag, ch, queue, ev.ack, durable)
        self.subs[key] = sub
        self._by_tag[tag] = sub
        self._by_channel[ch.number] = sub
        if ev.receipt is not None:
            self.held.append(ev.receipt)
        b.start_consumer(ch, tag)

    def _subscription_queue(self, ch: ChannelState, d: Destination, raw: str,
                            ev: SubscribeReceived) -> tuple[str, bool]:
        """The queue a SUBSCRIBE consumes, declared and bound as RabbitMQ does."""
        b = self.broker
        h = ev.headers
        kind = d.kind
        if kind is Kind.QUEUE:
            if d.name not in self._declared:
                b.queue_declare(ch, d.name, durable=h.get("durable", "true") != "false",
                                auto_delete=h.get("auto-delete") == "true",
                                exclusive=h.get("exclusive") == "true",
                                arguments=queue_arguments(h))
                self._declared.add(d.name)
            return d.name, False
        if kind is Kind.AMQ_QUEUE or kind is Kind.REPLY_QUEUE:
            return d.name, False  # never declared: consuming a missing one is not_found
        exchange, pattern = d.routing()
        selector = h.get("selector")
        sub_id = ev.subscription_id or raw
        durable = ev.subscription_id is not None and (
            h.get("durable") == "true" or h.get("persistent") == "true") and (
            h.get("auto-delete") != "true")
        name = h.get("x-queue-name") or subscription_queue(
            raw, sub_id, "" if durable else self.name)
        if durable:
            b.queue_declare(ch, name, durable=True, auto_delete=False,
                            arguments=queue_arguments(h))
        else:
            b.queue_declare(ch, name, exclusive=True, auto_delete=True,
                            arguments=queue_arguments(h))
        args = None if selector is None else {SELECTOR_ARG: selector}
        if durable:
            self._drop_other_selectors(ch, name, exchange, pattern, args)
        b.queue_bind(ch, name, exchange, pattern, args)
        return name, durable

    def _drop_other_selectors(self, ch: ChannelState, queue: str, exchange: str, pattern: str,
                              args: dict[str, str] | None) -> None:
        """A durable subscription subscribed again with another selector (or none)
        filters with the new one only: its queue's old binding goes."""
        vh = self.broker.vhosts.get(self.session.vhost)
        if vh is None:
            return
        for old in list(vh.bindings_to.get(("queue", queue), ())):
            if (old.source == exchange and old.routing_key == pattern
                    and old.args_dict != (args or {})):
                self.broker.queue_bind(ch, queue, exchange, pattern, old.args_dict, unbind=True)

    def unsubscribe(self, ev: UnsubscribeReceived) -> None:
        key = ev.subscription_id if ev.subscription_id is not None else ev.destination
        sub = self.subs.pop(key or "", None)
        if sub is None:
            what = f"id='{key}'" if ev.subscription_id is not None else f"destination='{key}'"
            raise StompError("No subscription found",
                             "UNSUBSCRIBE must refer to an existing subscription.\n"
                             f'Subscription to "{what}" not found.\n')
        sub.active = False
        b = self.broker
        if sub.tag in sub.channel.consumers:
            b.basic_cancel(sub.channel, sub.tag)
        h = ev.headers
        if sub.durable and (h.get("durable") == "true" or h.get("persistent") == "true"):
            b.queue_delete(sub.channel, sub.queue)  # the configure permission is checked
        if ev.receipt is not None:
            self.held.append(ev.receipt)

    # ------------------------------------------------------------ ACK / NACK
    def settle(self, ev: SettleFrame) -> None:
        sub, tag = self._delivery(ev)
        if ev.transaction is not None:
            self._transaction(ev.transaction).append(ev)
        else:
            self._settle(ev, sub, tag)
        if ev.receipt is not None:
            self.held.append(ev.receipt)

    def _settle(self, ev: SettleFrame, sub: Subscription, tag: int) -> None:
        multiple = sub.ack is AckMode.CLIENT
        if isinstance(ev, NackReceived):
            requeue = self.default_nack_requeue if ev.requeue is None else ev.requeue
            self.broker.basic_nack(sub.channel, tag, multiple, requeue)
        else:
            self.broker.basic_ack(sub.channel, tag, multiple)

    def _delivery(self, ev: SettleFrame) -> tuple[Subscription, int]:
        """The subscription and delivery tag a ``message-id`` (``ack``) names:
        ``<consumer tag>@@<session>@@<delivery tag>``."""
        command = "NACK" if isinstance(ev, NackReceived) else "ACK"
        parts = ev.ack_id.rsplit("@@", 2)
        if len(parts) != 3 or not (parts[2].isdigit() and parts[2].isascii()):
            header = "id" if self.proto.version == V12 else "message-id"
            raise StompError("Invalid header", f'"{command}" must include a valid "{header}" header\n')
        sub = self._by_tag.get(parts[0])
        if sub is None or parts[1] != self.name:
            raise StompError("Subscription not found",
                             f'Message with id "{ev.ack_id}" has no subscription')
        return sub, int(parts[2])

    # ------------------------------------------------------------ transactions
    def _transaction(self, tx: str) -> list[SendReceived | SettleFrame]:
        frames = self.transactions.get(tx)
        if frames is None:
            raise StompError("Bad transaction", f'Invalid transaction identifier: "{tx}"\n')
        return frames

    def begin(self, tx: str, receipt: str | None) -> None:
        if tx in self.transactions:
            raise StompError("Bad transaction", f'Transaction "{tx}" is already open\n')
        self.transactions[tx] = []
        if receipt is not None:
            self.held.append(receipt)

    def commit(self, tx: str, receipt: str | None) -> None:
        """Replay the transaction's frames in order; the RECEIPT leaves with the
        confirm of its last SEND (after the commit, for persistent ones)."""
        frames = self._transaction(tx)
        del self.transactions[tx]
        published = False
        for ev in frames:
            if isinstance(ev, SendReceived):
                self.publish(ev)
                published = True
            else:
                sub, tag = self._delivery(ev)
                self._settle(ev, sub, tag)
        if receipt is not None:
            if published:
                self._receipts.setdefault(self.pub_seq, []).append(receipt)
            else:
                self.held.append(receipt)

    def abort(self, tx: str, receipt: str | None) -> None:
        self._transaction(tx)
        del self.transactions[tx]
        if receipt is not None:
            self.held.append(receipt)

    def _after_everything(self, receipt: str) -> None:
        """DISCONNECT's RECEIPT: after every SEND before it is confirmed."""
        if self.pub_seq > self._confirmed_upto:
            self._receipts.setdefault(self.pub_seq, []).append(receipt)
        else:
            self.held.append(receipt)

    @property
    def receipts_pending(self) -> bool:
        return bool(self._receipts or self.held)

    def release_held(self) -> None:
        """The store committed everything so far: the held receipts go."""
        held, self.held = self.held, []
        for r in held:
            self.proto.send_receipt(r)
        if held:
            self._flush()

    # ------------------------------------------------------------ broker -> wire
    # The shell's interpreter calls these for this session's effects, then flush().
    def send_confirm(self, ch: ChannelState, upto: int, multiple: bool, nack: bool) -> None:
        if upto > self._confirmed_upto:
            self._confirmed_upto = upto
        receipts = self._receipts
        if not receipts:
            return
        seqs = list(itertools.takewhile(lambda s: s <= upto, receipts)) if multiple else [upto]
        released = 0
        for seq in seqs:
            for r in receipts.pop(seq, ()):
                if nack:
                    self.proto.send_error("Message rejected",
                                          "The broker could not take the message.\n",
                                          receipt=r)
                    self._finish()
                else:
                    self.proto.send_receipt(r)
                    released += 1
        if released:
            self.last_released = released

    def deliver(self, ch: ChannelState, consumer_tag: str, delivery_tag: int,
                redelivered: bool, message: Any, properties: bytes | None = None) -> None:
        if self.closed or self.proto.closed:
            return  # unacked: back to the queue when the session closes
        self.delivered += 1
        raw = bytes(properties or message.properties_raw)
        message_id = f"{consumer_tag}@@{self.name}@@{delivery_tag}"
        sub = self._by_channel.get(ch.number)
        if sub is None:  # a temp queue's reply
            subscription: str | None = consumer_tag
            destination = REPLY_PREFIX + message.routing_key
            ack = None
        else:
            subscription = sub.id
            destination = format_destination(message.exchange, message.routing_key)
            ack = None if sub.ack is AckMode.AUTO else message_id
        self.proto.send_message(destination=destination, message_id=message_id,
                                subscription=subscription, redelivered=redelivered, ack=ack,
                                headers=stomp_headers(raw), body=bytes(message.body or b""))

    def deliver_stream(self, ch: ChannelState, consumer_tag: str, first_tag: int,
                       entries: list[Any]) -> None:
        """Stream entries, their ``x-stream-offset`` among the headers (the stored
        properties hold it)."""
        sub = self._by_channel.get(ch.number)
        if sub is None or self.closed or self.proto.closed:
            return
        for i, e in enumerate(entries):
            _ts, _key, exchange, routing_key, props, body = streamrecord.decode(e.data, e.at)
            message_id = f"{consumer_tag}@@{self.name}@@{first_tag + i}"
            self.proto.send_message(
                destination=format_destination(exchange, routing_key), message_id=message_id,
                subscription=sub.id, ack=None if sub.ack is AckMode.AUTO else message_id,
                headers=stomp_headers(props), body=body)
        self.delivered += len(entries)

    def send_return(self, ch: ChannelState, code: int, text: str, message: Any) -> None:
        """SENDs are never mandatory."""

    def send_cancel(self, ch: ChannelState, consumer_tag: str) -> None:
        """The queue went under the subscription (deleted): RabbitMQ's notice,
        the connection stays."""
        sub = self._by_tag.get(consumer_tag)
        if sub is None or not sub.active:
            return
        sub.active = False
        self.subs.pop(sub.id if sub.id is not None else consumer_tag[2:], None)
        headers = {"subscription": sub.id} if sub.id is not None else None
        self.proto.send_error("Server cancelled subscription",
                              "The server has canceled a subscription.\n"
                              f"No more messages will be delivered for {consumer_tag}.\n",
                              headers=headers, close=False)

    def force_close(self, code: int, text: str) -> None:
        """Server-side close (shutdown, admin): ERROR with the reason, then gone."""
        if not self.closed:
            self.proto.send_error("Connection closed", text)
            self._finish()

    def flush(self) -> None:
        self._flush()

    def wake(self) -> None:
        """The same as ``flush`` (the broker's name for it); a method, not an alias,
        which a compiled class cannot have."""
        self._flush()

    # ------------------------------------------------------------ end
    def close(self) -> None:
        """The connection is gone: unacked deliveries return to their queues
        (redelivered), temp and non-durable subscription queues go."""
        if self.closed:
            return
        self.closed = True
        b = self.broker
        # every consumer first: else close_session, requeueing one channel's unacked
        # messages, hands them to this session's no-ack consumers on the channels
        # not closed yet, and they are lost with it
        for ch in list(self.session.channels.values()):
            for tag in list(ch.consumers):
                b.basic_cancel(ch, tag)
        b.close_session(self.session)
