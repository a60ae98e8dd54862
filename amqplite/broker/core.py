"""The pure broker: AMQP commands in, one Outcome of effects and store operations out.

``Broker`` is a thin façade composed of the core's parts (see base.py for
the shape): each part is one module with one reason to change. The server
shell calls one method per AMQP command, then takes the batch's Outcome
(``take_outcome``) and carries it out. No I/O, no clock of its own (``now``
is injected), no event loop, so every rule is testable with plain calls.

Operations for admin and recovery are public here (``delete_queue``,
``restore_binding``, ``move_entries``, ``would_reject``): nothing outside the
broker reaches into its private methods.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from amqplite.broker import persist as P
from amqplite.broker.base import REPLY_TO
from amqplite.broker.bindings import ExchangeOps
from amqplite.broker.confirms import Confirms
from amqplite.broker.deadletter import DeadLettering
from amqplite.broker.dispatch import Dispatch
from amqplite.broker.effects import NEED_PAGE_IN, PublishResult
from amqplite.broker.exchanges import Binding, Exchange
from amqplite.broker.expiry import Expiry, parse_expiration
from amqplite.broker.model import ChannelState, Entry, Message, Session
from amqplite.broker.mqtt_rows import MQTTRows
from amqplite.broker.paging import Paging
from amqplite.broker.permissions import AccessOps
from amqplite.broker.policy_commands import PolicyOps
from amqplite.broker.publish import Publishing
from amqplite.broker.queue import Queue
from amqplite.broker.queue_commands import QueueOps
from amqplite.broker.streams import Streams
from amqplite.broker.tx import Transactions
from amqplite.broker.vhost import VHost
from amqplite.broker.vhost_commands import VHostOps

log = logging.getLogger("amqplite.broker")

__all__ = ["NEED_PAGE_IN", "REPLY_TO", "Broker", "PublishResult", "VHost", "parse_expiration"]


class Broker(
    ExchangeOps,
    QueueOps,
    PolicyOps,
    Publishing,
    Dispatch,
    Streams,
    Paging,
    DeadLettering,
    Expiry,
    Confirms,
    Transactions,
    AccessOps,
    VHostOps,
    MQTTRows,
):
    """The broker core: sessions and channels, plus every part's commands."""

    # ------------------------------------------------------------ sessions
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
        if session.transport is not None:  # a client's, not the admin API's own
            self.stats["channels_opened"] += 1
        return ch

    def close_channel(self, ch: ChannelState) -> None:
        """Channel gone: requeue its unacked deliveries, cancel its consumers."""
        if not ch.open:
            return
        ch.open = False
        if ch.session.transport is not None:
            self.stats["channels_closed"] += 1
        ch.session.channels.pop(ch.number, None)
        self.stream_channel_closing(ch)
        touched = self._requeue_deliveries(ch, list(ch.unacked.values()))
        ch.unacked.clear()
        self._drop_reply_consumer(ch)
        for c in list(ch.consumers.values()):
            if self._remove_consumer(c):
                touched[c.queue] = None  # a waiting single active consumer took over
        for q in touched:
            self._dispatch(q)

    # ------------------------------------------- admin and recovery operations
    def delete_queue(self, vh: VHost, q: Queue) -> int:
        """Delete ``q`` as queue.delete would (consumers cancelled); returns its depth."""
        return self._delete_queue(vh, q)

    def drop_binding(self, vh: VHost, b: Binding) -> None:
        """Remove ``b`` as queue.unbind would, with no channel (MQTT session cleanup)."""
        self._drop_binding(vh, b)

    def commit_abandoned(self, ops: Iterable[Any]) -> None:
        """Store ops that could not be written, however often tried: undo them in memory.

        The creates are undone as a delete would (consumers of a queue get
        basic.cancel); the delete this writes is harmless for a row that is not
        there. Anything else (a delete, a policy, a user...) cannot be undone
        here: it stays in memory only, and is logged.
        """
        for op in ops:
            t = type(op)
            vh = self.vhosts.get(getattr(op, "vhost", ""))
            if t is P.ops.PutQueue:
                q = vh.queues.get(op.name) if vh is not None else None
                if vh is not None and q is not None and q.id == op.queue_id:
                    self._delete_queue(vh, q)
            elif t is P.ops.PutExchange:
                ex = vh.exchanges.get(op.name) if vh is not None else None
                if vh is not None and ex is not None and ex.name:
                    self._delete_exchange(vh, ex)
            elif t is P.ops.PutBinding:
                dest = (op.destination_kind, op.destination)
                for b in list(vh.bindings_to.get(dest, ())) if vh is not None else ():
                    if (vh is not None and b.source == op.source
                            and b.routing_key == op.routing_key
                            and P.plain_args(b.args_dict) == op.arguments):
                        self._drop_binding(vh, b)
            else:
                # by kind and name: its value may be too deep to repr
                log.error("store: %s %r in vhost %r is in memory only: it could not be "
                          "written", t.__name__, str(getattr(op, "name", ""))[:100],
                          str(getattr(op, "vhost", ""))[:100])

    def restore_binding(self, vh: VHost, src: Exchange, b: Binding) -> None:
        """Recovery: a durable binding read from the store (not written again)."""
        self._add_binding(vh, src, b, durable=True, persist=False)

    def would_reject(self, q: Queue, msg: Message) -> bool:
        """True when ``q`` refuses ``msg`` (x-overflow reject-publish at its limit)."""
        return self._refuses(q, msg.body_size)

    def move_entries(self, vh: VHost, src: Queue,
                     moves: list[tuple[Entry, list[Queue], str, str, bytes]]) -> None:
        """Admin move/replay: copy each entry to its targets and take it out of ``src``.

        Each copy is a new message (fresh key, the given exchange and routing
        key); its inserts and the original's delete land in the same store
        batch, so a crash never loses a message or leaves it in both places.
        """
        touched: dict[int, Queue] = {}
        for e, targets, exchange, routing_key, body in moves:
            msg = e.message
            new = Message(self.new_message_key(), exchange, routing_key, msg.properties_raw,
                          body, body_size=msg.body_size, persistent=msg.persistent)
            new._mid = msg.message_id  # the same message to the delivery log
            self.log_event("replayed", vh.name, msg, src.name)
            for q in targets:
                self.enqueue(q, new)
                touched[id(q)] = q
        if moves:
            ids = {id(m[0]) for m in moves}
            src.ready.remove_where(lambda x: id(x) in ids)
            for e, *_ in moves:
                self._entry_done(src, e)
            for q in touched.values():
                if q is not src:
                    self._dispatch(q)

