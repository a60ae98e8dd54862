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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import attrs
import trio

from amqplite.broker import mqtt_retained
from amqplite.broker.core import Broker
from amqplite.broker.retained import Limits
from amqplite.config import Settings
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.topics import topic_to_routing_key
from amqplite.protocol.properties import decode_properties, encode_properties, expiration_of
from amqplite.storeops import PutMQTTWill

log = logging.getLogger("amqplite.mqtt")

#: a session: (vhost, client id)
Key = tuple[str, str]


class Wills:
    """The pending wills of every session, and their timers."""

    def __init__(self, settings: Settings, broker: Broker,
                 execute: Callable[..., Any], retained_limits: Limits) -> None:
        self.settings = settings
        self.broker = broker
        self.execute = execute
        #: the MQTT retained index's bounds (the listener's, built once)
        self.retained_limits = retained_limits
        #: (vhost, client id) -> its stored will
        self.pending: dict[Key, PutMQTTWill] = {}
        self._timers: dict[Key, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None

    def start(self, nursery: trio.Nursery, stored: list[PutMQTTWill]) -> None:
        """Wills read back from the store: due ones go now, delayed ones wait."""
        self._nursery = nursery
        now = time.time()
        for w in stored:
            key = (w.vhost, w.client_id)
            self.pending[key] = w
            due = w.due_at if w.due_at is not None else now + w.delay
            if w.due_at is None and w.delay:
                self.pending[key] = w = attrs.evolve(w, due_at=due)
                self.broker.mqtt_will_put(w)
            self._schedule(key, due - now)

    # ------------------------------------------------------------ the client's life
    def connected(self, key: Key, resumed: bool, will: PutMQTTWill | None) -> None:
        """A CONNECT for the session ``key``: a delayed will of the previous connection
        is cancelled when it resumes the session, published when it starts clean;
        the new connection's will is stored."""
        if key in self.pending:
            if resumed:
                self._drop(key)
            else:
                self.fire(key)
        if will is not None:
            self.pending[key] = will
            self.broker.mqtt_will_put(will)

    def cancel(self, key: Key) -> None:
        """A normal DISCONNECT: the will is never published."""
        if key in self.pending:
            self._drop(key)

    def gone(self, key: Key, delay: int) -> None:
        """The connection ended otherwise: the will is due in ``delay`` seconds."""
        w = self.pending.get(key)
        if w is None:
            return
        if delay <= 0 or self._nursery is None:
            self.fire(key)
            return
        w = self.pending[key] = attrs.evolve(w, delay=delay, due_at=time.time() + delay)
        self.broker.mqtt_will_put(w)
        self._schedule(key, delay)

    # ------------------------------------------------------------ publication
    def fire(self, key: Key) -> None:
        """Publish the pending will of the session ``key`` now (inside a broker command)."""
        w = self.pending.get(key)
        if w is None:
            return
        self._drop(key)
        try:
            self._publish(w)
        except Exception:
            log.exception("MQTT will of %r in vhost %r: publication failed", key[1], key[0])

    def _publish(self, w: PutMQTTWill) -> None:
        b = self.broker
        s = self.settings
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
                props = encode_properties(attrs.evolve(p, timestamp=int(time.time())))
            try:
                b.basic_publish(ch, s.mqtt_exchange, rk, props, w.payload)
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
                                         s.mqtt_exchange, rk, props, w.payload)
        finally:
            b.close_session(session)

    # ------------------------------------------------------------ timers
    def _drop(self, key: Key) -> None:
        del self.pending[key]
        scope = self._timers.pop(key, None)
        if scope is not None:
            scope.cancel()
        self.broker.mqtt_will_delete(*key)

    def _schedule(self, key: Key, delay: float) -> None:
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        assert self._nursery is not None
        scope = self._timers[key] = trio.CancelScope()
        self._nursery.start_soon(self._later, key, max(0.0, delay), scope)

    async def _later(self, key: Key, delay: float, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep(delay)  # a timer: the will's delay
            if self._timers.get(key) is scope:
                del self._timers[key]
                self.execute(self.fire, key)

