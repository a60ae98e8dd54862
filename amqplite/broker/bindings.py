"""Exchanges and bindings: declare, delete, bind and unbind, with their store rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from amqplite.broker import errors as E
from amqplite.broker import persist as P
from amqplite.broker.base import DeliveryLog
from amqplite.broker.commands import (
    EXCHANGE_BIND,
    EXCHANGE_DECLARE,
    EXCHANGE_DELETE,
    EXCHANGE_UNBIND,
)
from amqplite.broker.exchanges import EXCHANGE_TYPES, Binding, Exchange
from amqplite.broker.exchanges.base import freeze_args
from amqplite.broker.exchanges.retaining import RETAINED_HEADER, owner_of
from amqplite.broker.exchanges.selected import message_headers, selector_error
from amqplite.broker.model import ChannelState, Message
from amqplite.broker.outbox import Outbox
from amqplite.broker.permissions import Access
from amqplite.broker.queue import Queue
from amqplite.broker.queue_commands import Queues
from amqplite.broker.retained import RetainedStore
from amqplite.broker.topology import Topology
from amqplite.broker.vhost import VHost
from amqplite.protocol.properties import with_header


class Exchanges:
    """Exchange lifecycle and the binding graph of each vhost.

    Receives the vhost table, the outbox, the retained store (replayed to a
    new binding), the topology observer, the delivery log, access (checks),
    the queues part (``_queue_persisted``), the publisher's ``enqueue`` and
    ``new_message_key`` and the dispatcher's ``_dispatch`` (retained replay).
    """

    def __init__(self, *, vhosts: dict[str, VHost], outbox: Outbox, retained: RetainedStore,
                 topology: Topology, log: DeliveryLog, access: Access, queues: Queues,
                 enqueue: Callable[[Queue, Message], int], new_message_key: Callable[[], int],
                 dispatch: Callable[[Queue], None],
                 refresh_exchange: Callable[[str, Exchange], None]) -> None:
        self.vhosts = vhosts
        self._refresh_exchange = refresh_exchange  # the policy's alternate exchange
        self.outbox = outbox
        self.retained = retained
        self.topology = topology
        self.log_event = log.log_event
        self._authorize = access._authorize
        self._authorize_binding_key = access._authorize_binding_key
        self._queue_persisted = queues._queue_persisted
        self.enqueue = enqueue
        self.new_message_key = new_message_key
        self._dispatch = dispatch

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
        self._authorize(ch, "configure", "exchange", name, cm)
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
        err = cls.argument_error(arguments or {})
        if err is not None:
            raise E.precondition(err, cm)
        ae = (arguments or {}).get("alternate-exchange")
        if isinstance(ae, str | bytes):  # a new exchange may only fall back where it may write
            self._authorize(ch, "read", "exchange", name, cm)
            self._authorize(ch, "write", "exchange",
                            ae.decode() if isinstance(ae, bytes) else ae, cm)
        ex = cls(name, durable=durable, auto_delete=auto_delete, internal=internal,
                 arguments=arguments)
        self.add_exchange(vh, ex)

    def add_exchange(self, vh: VHost, ex: Exchange, *, persist: bool = True) -> None:
        vh.exchanges[ex.name] = ex
        self._refresh_exchange(vh.name, ex)
        if ex.durable and persist:
            self.outbox.emit(P.put_exchange(vh.name, ex))
        if self.topology.observers:
            self.topology.exchanges(vh.name)

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
        self._authorize(ch, "configure", "exchange", name, cm)
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
        if ex.retains:  # its retained rows go with DeleteExchange's (same transaction)
            self.retained.close(owner_of(vh.name, ex.name), persist=False)
        if ex.durable:
            self.outbox.emit(P.delete_exchange(vh.name, ex.name))
        if self.topology.observers:
            self.topology.exchanges(vh.name)

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
        self._authorize(ch, "write", "exchange", destination, cm)
        if source == "" or destination == "":
            raise E.default_exchange(cm)
        self._authorize(ch, "read", "exchange", source, cm)
        self._authorize_binding_key(ch, vh, source, routing_key, cm)
        b = Binding(source, ("exchange", destination), routing_key, freeze_args(arguments))
        if unbind:
            # RabbitMQ: unbinding what is not bound succeeds, even when the source or
            # the destination is gone (its bindings went with it).
            if vh.bound(b):
                self._drop_binding(vh, b)
            return
        src = vh.exchanges.get(source)
        if src is None:
            raise E.no_exchange(source, vh.name, cm)
        dst = vh.exchanges.get(destination)
        if dst is None:
            raise E.no_exchange(destination, vh.name, cm)
        self._check_binding(src, arguments, cm)
        self._add_binding(vh, src, b, durable=src.durable and dst.durable)

    @staticmethod
    def _check_binding(ex: Exchange, arguments: dict[str, Any] | None,
                       cm: tuple[int, int]) -> None:
        """The exchange type's say on a binding's arguments (x-publish-on-request),
        and a selector's (``x-selector``: one that does not parse is refused)."""
        err = ex.binding_error(arguments) or selector_error(ex, arguments)
        if err is not None:
            raise E.precondition(err, cm)

    def _add_binding(self, vh: VHost, src: Exchange, b: Binding, *, durable: bool,
                     persist: bool = True) -> None:
        new = src.add_binding(b)
        if new:
            vh.bindings_to.setdefault(b.destination, set()).add(b)
            if durable and persist:
                self.outbox.emit(P.put_binding(vh.name, b))
            if self.topology.observers:
                self.topology.binding(vh.name, b, True)
        if src.retains and persist:  # not at recovery: nothing is handed out again
            self._replay_retained(vh, src, b, new)

    def _replay_retained(self, vh: VHost, src: Exchange, b: Binding, new: bool) -> None:
        """Hand a binding what its retaining exchange gives it (at bind, or on
        request): each message a copy with ``x-retained: true``, body shared."""
        msgs = src.replay(self.retained, vh.name, b, new)
        if not msgs:
            return
        kind, name = b.destination
        dst = vh.exchanges.get(name) if kind == "exchange" else None
        why = "bind" if new else "request"
        token = src.selector_tokens.get(b)
        selector = None if token is None else src.selected[token][1]
        touched: dict[int, Queue] = {}
        for m in msgs:
            if selector is not None and not selector.matches(message_headers(m)):
                continue
            copy = Message(self.new_message_key(), m.exchange, m.routing_key,
                           with_header(m.properties_raw, RETAINED_HEADER, True, "t"), m.body,
                           body_size=m.body_size, persistent=m.persistent)
            if dst is not None:
                targets = vh.route(dst, m.routing_key, copy).queues
            else:
                q = vh.queues.get(name)
                targets = () if q is None else (q,)
            for q in targets:
                self.log_event("retained", vh.name, copy, q.name, reason=why)
                self.enqueue(q, copy)
                touched[id(q)] = q
        for q in touched.values():
            self._dispatch(q)

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
        if self.topology.observers:
            self.topology.binding(vh.name, b, False)
        if persist_durable is None:
            persist_durable = self._binding_durable(vh, b)
        if persist_durable:
            self.outbox.emit(P.delete_binding(vh.name, b))
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

    def route(self, vh: VHost, ex: Exchange, routing_key: str, msg: Message) -> Sequence[Queue]:
        """The queues ``msg`` reaches from ``ex`` (exchange bindings and alternates followed)."""
        return vh.route(ex, routing_key, msg).queues
