"""The session registry: which connection holds each session, who may take it
over, the packet ids and stored rows that outlive a connection, and when a
disconnected session expires.

A session is a (vhost, client id), as in RabbitMQ: the same client id in two
vhosts is two clients, two sessions, two wills, and one never takes the other
over. Within a vhost a new connection takes over the old one (Mosquitto's
rule), or, with ``mqtt_takeover = "user"``, only when the same user opened it.

The expiry countdowns run on the shell's :class:`~amqplite.sessions.mqtt.common.Timers`;
when one runs out the shell asks :meth:`SessionRegistry.expired`, then runs
:meth:`SessionRegistry.drop_session` as a broker command.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from amqplite.broker import mqtt_retained
from amqplite.broker.core import Broker
from amqplite.sessions.mqtt.accounting import MQTTStats
from amqplite.sessions.mqtt.common import Key, SharedPublish, Timers, queue_name
from amqplite.sessions.mqtt.inflight import PacketIds
from amqplite.sessions.mqtt.shared import SharedGroups
from amqplite.sessions.mqtt.wills import Wills
from amqplite.storeops import NEVER_EXPIRES, PutMQTTPacketId, PutMQTTSession

if TYPE_CHECKING:
    from amqplite.sessions.mqtt.session import MQTTSession

log = logging.getLogger("amqplite.mqtt")


class SessionRegistry:
    """Every session of the MQTT front, connected or not; the listener owns one."""

    def __init__(self, broker: Broker, exchange: str, takeover: str = "vhost",
                 retained_max_messages: int | None = None,
                 retained_max_bytes: int | None = None) -> None:
        self.broker = broker
        #: ``mqtt_exchange``: where publishes go and subscriptions are bound
        self.exchange = exchange
        #: ``mqtt_takeover``: "user" lets only a session's own user take it over
        self.takeover = takeover
        #: the connected session of each key
        self.clients: dict[Key, MQTTSession] = {}
        #: each session's QoS 2 packet ids in flight, kept across its connections
        self.packet_ids: dict[Key, PacketIds] = {}
        #: sessions with a stored row, and who opened each
        self.stored: dict[Key, str] = {}
        #: every vhost's MQTT retained-message bounds, built once (mqtt_retained.index)
        self.retained_limits = mqtt_retained.limits_of(
            broker.retained, retained_max_messages, retained_max_bytes)
        #: the wills not published yet
        self.wills = Wills(broker, exchange, self.retained_limits)
        #: members of the shared subscriptions' queues (shared.py)
        self.groups = SharedGroups(broker, exchange)
        #: vhosts whose retained quota refused a 3.1.1 publish (logged once each)
        self.quota_logged: set[str] = set()
        self.stats = MQTTStats()
        #: the last delivered message's topic and QoS 0 PUBLISH, for its next subscriber
        self.shared = SharedPublish()
        #: the expiry countdowns, once the shell runs them
        self.timers: Timers | None = None
        #: the ``$SYS`` tree's current values, when the shell runs it (server/mqtt/systree.py)
        self.sys_values: Callable[[], dict[str, str]] | None = None

    def ids(self, key: Key) -> PacketIds:
        """The session's QoS 2 packet ids (new ones for a new session)."""
        ids = self.packet_ids.get(key)
        if ids is None:
            ids = self.packet_ids[key] = PacketIds(*key)
        return ids

    def may_take_over(self, key: Key, user: str) -> bool:
        """May ``user`` open the session ``key``, taking over its connection or its
        stored state? Any user of the vhost may (Mosquitto's rule), unless
        ``mqtt_takeover`` is "user": then only the user who opened it."""
        if self.takeover != "user":
            return True
        old = self.clients.get(key)
        if old is not None and old.session is not None and old.session.username != user:
            return False
        return self.stored.get(key, "") in ("", user)  # "": an older version's row

    # ------------------------------------------------------------ restart
    def restore_packet_id(self, row: PutMQTTPacketId) -> None:
        """A packet id row read back at start-up."""
        self.ids((row.vhost, row.client_id)).restore(row)

    def restore_session(self, row: PutMQTTSession, now: float) -> None:
        """A session row read back at start-up: its countdown resumes (a session
        connected at a crash counts from ``now``)."""
        key = (row.vhost, row.client_id)
        self.stored[key] = row.user
        for pid in row.awaiting_pubrel:  # an older database's: rows now
            self.ids(key).restore_inbound(pid)
            self.broker.mqtt_packet_id_put(PutMQTTPacketId(row.vhost, row.client_id, pid, False))
        gone = now - (row.disconnected_at if row.disconnected_at is not None else now)
        self.expire_later(row.vhost, row.client_id, row.expiry, max(0.0, gone))

    # ------------------------------------------------------------ expiry
    def expire_later(self, vhost: str, client_id: str, expiry: int, gone: float = 0.0) -> None:
        """MQTT 5 session expiry: ``expiry`` seconds after the disconnect (``gone``
        seconds ago) the session's queues and row go, unless it reconnected."""
        if expiry == NEVER_EXPIRES or self.timers is None:
            return
        self.timers.start((vhost, client_id), expiry - gone)

    def keep(self, key: Key) -> None:
        """The client reconnected: its countdown stops."""
        if self.timers is not None:
            self.timers.stop(key)

    def expired(self, key: Key) -> bool:
        """The countdown of ``key`` ran out: does the session go (not reconnected)?
        Its packet ids go at once; :meth:`drop_session` does the rest."""
        if key in self.clients:
            return False
        log.info("MQTT session %r of vhost %r expired", key[1], key[0])
        self.packet_ids.pop(key, None)
        return True

    def drop_session(self, vhost: str, client_id: str, now: float) -> None:
        """The session expired: its will, if still delayed, is published now; its
        queues, shared memberships and row go."""
        self.wills.fire((vhost, client_id), now)
        b = self.broker
        vh = b.vhosts.get(vhost)
        for qos in (0, 1):
            q = None if vh is None else vh.queues.get(queue_name(client_id, qos))
            if vh is not None and q is not None:
                b.delete_queue(vh, q)
        self.groups.leave(vhost, client_id)
        self.stored.pop((vhost, client_id), None)
        b.mqtt_session_delete(vhost, client_id)
