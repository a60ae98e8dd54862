"""Sessions and channels: a connection's lifetime in the core.

A closing channel hands its unacked deliveries back and cancels its
consumers; a closing session closes its channels, then drops its exclusive
queues.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amqplite.broker.base import Counters
from amqplite.broker.dispatch import Dispatcher
from amqplite.broker.effects import CloseConnection
from amqplite.broker.model import ChannelState, Session
from amqplite.broker.outbox import Outbox
from amqplite.broker.queue import Queue
from amqplite.broker.queue_commands import Queues
from amqplite.broker.streams import Streams
from amqplite.broker.vhost import VHost


class Sessions:
    """The open sessions (connections) and their channels.

    Receives the vhost table, the outbox (CloseConnection effects), the
    counters, and the parts a closing channel goes through: streams (its
    stream readers), the dispatcher (requeue, cancel, dispatch) and the queues
    part (exclusive and auto-delete queues).
    """

    def __init__(self, *, vhosts: dict[str, VHost], outbox: Outbox, counters: Counters,
                 streams: Streams, dispatcher: Dispatcher, queues: Queues) -> None:
        self.vhosts = vhosts
        self.effects = outbox.effects
        self.stats = counters.stats
        self.sessions: dict[int, Session] = {}
        self._next_session = 1
        self.stream_channel_closing = streams.stream_channel_closing
        self._requeue_deliveries = dispatcher._requeue_deliveries
        self._drop_reply_consumer = dispatcher._drop_reply_consumer
        self._remove_consumer = dispatcher._remove_consumer
        self._dispatch = dispatcher._dispatch
        self._delete_queue: Callable[[VHost, Any], int] = queues._delete_queue

    def open_session(self, username: str, vhost: str, peer: str = "") -> Session:
        s = Session(self._next_session, username, vhost, peer)
        self._next_session += 1
        self.sessions[s.id] = s
        return s

    def close_session(self, session: Session) -> None:
        """Connection gone: close its channels, then drop its exclusive queues.

        Every channel's consumers go before any requeued delivery is
        dispatched: one channel's unacked messages must not reach a consumer of
        another channel of the same closing connection (a no-ack one would
        lose them with the socket).
        """
        touched: dict[Queue, None] = {}
        for ch in list(session.channels.values()):
            touched.update(self._close(ch))
        for q in touched:
            self._dispatch(q)
        vh = self.vhosts.get(session.vhost)
        if vh is not None:
            for q in [q for q in vh.queues.values() if q.exclusive_owner is session]:
                self._delete_queue(vh, q)
        self.sessions.pop(session.id, None)

    def close_sessions(self, which: Callable[[Session], bool], reason: str) -> None:
        """Close matching connections with 320 CONNECTION_FORCED and RabbitMQ's reason
        (a vhost or a user deleted); the session is gone before the close goes out."""
        for s in [s for s in self.sessions.values() if which(s)]:
            self.effects.append(CloseConnection(s, 320, f"CONNECTION_FORCED - {reason}"))
            self.close_session(s)

    def open_channel(self, session: Session, number: int) -> ChannelState:
        ch = ChannelState(session, number)
        session.channels[number] = ch
        if session.transport is not None:  # a client's, not the admin API's own
            self.stats["channels_opened"] += 1
        return ch

    def close_channel(self, ch: ChannelState) -> None:
        """Channel gone: requeue its unacked deliveries, cancel its consumers."""
        for q in self._close(ch):
            self._dispatch(q)

    def _close(self, ch: ChannelState) -> dict[Queue, None]:
        """Close ``ch`` and return the queues to dispatch again (its requeued
        deliveries, a single active consumer's successor)."""
        if not ch.open:
            return {}
        ch.open = False
        if ch.session.transport is not None:
            self.stats["channels_closed"] += 1
        ch.session.channels.pop(ch.number, None)
        vh = self.vhosts.get(ch.session.vhost)
        if vh is not None:
            vh.channel_closed(ch)
        self.stream_channel_closing(ch)
        touched = self._requeue_deliveries(ch, list(ch.unacked.values()))
        ch.unacked.clear()
        self._drop_reply_consumer(ch)
        for c in list(ch.consumers.values()):
            if self._remove_consumer(c):
                touched[c.queue] = None  # a waiting single active consumer took over
        return touched
