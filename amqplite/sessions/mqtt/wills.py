"""Wills not published yet, in the store so a restart (kill -9 included) keeps them.

A CONNECT with a will writes its row (``PutMQTTWill``, no due time) before the
CONNACK. A normal DISCONNECT deletes it. Any other end of the connection
makes it due after its delay: MQTT 5's Will Delay Interval, capped by the
session expiry ([MQTT-3.1.3-9]: the session's end publishes it too), 0 for
3.1.1. A due will is published at once; a delayed one gets its due time
stored and a timer, and is cancelled when the client id reconnects to the
session in time (a session is a (vhost, client id): the same id in another
vhost is another client and never touches this will), published at once
when it reconnects with a clean start or when the session expires. After a
restart a will whose client was connected at the crash counts its delay from
the restart.

A will is published through a broker session of its own, opened as the user
who connected (the permission checks are the client's) and closed right after.

The rules are here, the clock is not: ``now`` comes in, and the delays run on a
:class:`Timers` the shell hands in (server/mqtt/timers.py), which calls
:meth:`Wills.fire` when one is due.
"""

from __future__ import annotations

import logging

import attrs

from amqplite.broker import mqtt_retained
from amqplite.broker.core import Broker
from amqplite.broker.retained import Limits
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.topics import topic_to_routing_key
from amqplite.protocol.properties import decode_properties, encode_properties, expiration_of
from amqplite.sessions.mqtt.common import Key, Timers
from amqplite.storeops import PutMQTTWill

log = logging.getLogger("amqplite.mqtt")


class Wills:
    """The pending wills of every session."""

    def __init__(self, broker: Broker, exchange: str, retained_limits: Limits) -> None:
        self.broker = broker
        #: where wills are published (``mqtt_exchange``)
        self.exchange = exchange
        #: the MQTT retained index's bounds (the listener's, built once)
        self.retained_limits = retained_limits
        #: (vhost, client id) -> its stored will
        self.pending: dict[Key, PutMQTTWill] = {}
        #: the delays' timers, once the shell runs them (until then a will is due at once)
        self.timers: Timers | None = None

    def restore(self, timers: Timers, stored: list[PutMQTTWill], now: float) -> None:
        """Wills read back from the store: due ones go now, delayed ones wait."""
        self.timers = timers
        for w in stored:
            key = (w.vhost, w.client_id)
            self.pending[key] = w
            due = w.due_at if w.due_at is not None else now + w.delay
            if w.due_at is None and w.delay:
                self.pending[key] = w = attrs.evolve(w, due_at=due)
                self.broker.mqtt_will_put(w)
            timers.start(key, max(0.0, due - now))

    # ------------------------------------------------------------ the client's life
    def connected(self, key: Key, resumed: bool, will: PutMQTTWill | None, now: float) -> None:
        """A CONNECT for the session ``key``: a delayed will of the previous connection
        is cancelled when it resumes the session, published when it starts clean;
        the new connection's will is stored."""
        if key in self.pending:
            if resumed:
                self._drop(key)
            else:
                self.fire(key, now)
        if will is not None:
            self.pending[key] = will
            self.broker.mqtt_will_put(will)

    def cancel(self, key: Key) -> None:
        """A normal DISCONNECT: the will is never published."""
        if key in self.pending:
            self._drop(key)

    def gone(self, key: Key, delay: int, now: float) -> None:
        """The connection ended otherwise: the will is due in ``delay`` seconds."""
        w = self.pending.get(key)
        if w is None:
            return
        if delay <= 0 or self.timers is None:
            self.fire(key, now)
            return
        w = self.pending[key] = attrs.evolve(w, delay=delay, due_at=now + delay)
        self.broker.mqtt_will_put(w)
        self.timers.start(key, delay)

    # ------------------------------------------------------------ publication
    def fire(self, key: Key, now: float) -> None:
        """Publish the pending will of the session ``key`` now (inside a broker command)."""
        w = self.pending.get(key)
        if w is None:
            return
        self._drop(key)
        try:
            self._publish(w, now)
        except Exception:
            log.exception("MQTT will of %r in vhost %r: publication failed", key[1], key[0])

    def _publish(self, w: PutMQTTWill, now: float) -> None:
        b = self.broker
        if w.vhost not in b.vhosts:
            return
        session = b.open_session(w.user, w.vhost, f"will of {w.client_id}")
        session.client_id = w.client_id  # topic permissions: {client_id}, MQTT key form
        try:
            ch = b.open_channel(session, 1)
            rk = topic_to_routing_key(w.topic)
            props = w.properties
            if expiration_of(props) is not None:  # its expiry counts from the publication
                p = decode_properties(props)
                props = encode_properties(attrs.evolve(p, timestamp=int(now)))
            try:
                b.basic_publish(ch, self.exchange, rk, props, w.payload)
            except AMQPError as exc:
                log.info("MQTT will of %r to %r refused: %s", w.client_id, w.topic, exc)
                return
            if w.retain:
                rs = mqtt_retained.index(b.retained, w.vhost, self.retained_limits)
                if w.payload and mqtt_retained.over_quota(rs, w.topic, len(w.payload)):
                    log.warning("MQTT will of %r: over the retained quota, not retained",
                                w.client_id)
                else:
                    mqtt_retained.retain(b.retained, rs, b.new_message_key(), w.topic,
                                         self.exchange, rk, props, w.payload)
        finally:
            b.close_session(session)

    def _drop(self, key: Key) -> None:
        del self.pending[key]
        if self.timers is not None:
            self.timers.stop(key)
        self.broker.mqtt_will_delete(*key)
