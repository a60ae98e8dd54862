"""The MQTT listener: accepts clients, logs them in, keeps the session registry
and the disconnected persistent sessions' expiry countdowns.

A session is a (vhost, client id), as in RabbitMQ: the same client id in two
vhosts is two clients, two sessions, two wills, and one never takes the other
over. Within a vhost a new connection takes over the old one (Mosquitto's
rule), or, with ``mqtt_takeover = "user"``, only when the same user opened it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from amqplite.broker import mqtt_retained
from amqplite.broker.auth import UserDB
from amqplite.broker.core import Broker
from amqplite.config import Settings, parse_size
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.server.mqtt.accounting import MQTTStats
from amqplite.server.mqtt.client import MQTTClient
from amqplite.server.mqtt.common import LIMITS, Login, queue_name
from amqplite.server.mqtt.inflight import PacketIds
from amqplite.server.mqtt.shared import SharedGroups
from amqplite.server.mqtt.transports import open_tls, tls_handler
from amqplite.server.mqtt.wills import Key, Wills
from amqplite.server.persistence import Persistence
from amqplite.server.ports import accepted_peer, listen_tcp
from amqplite.storeops import (
    NEVER_EXPIRES,
    PutMQTTPacketId,
    PutMQTTSession,
    PutMQTTWill,
)

if TYPE_CHECKING:
    from amqplite.server.app import Server

log = logging.getLogger("amqplite.mqtt")


class MQTTListener:
    """Accepts MQTT clients and keeps the session registry (session takeover).

    Its dependencies are explicit: the settings, the broker and its users, and
    the server's ``execute`` (a command and its Outcome), ``interpret`` (the
    Outcome so far), ``committed`` (wait for the store) and the store bridge.
    """

    def __init__(self, settings: Settings, broker: Broker, users: UserDB,
                 execute: Callable[..., Any], interpret: Callable[..., None],
                 committed: Callable[[], Awaitable[None]], persistence: Persistence,
                 stored_sessions: list[Any] | None = None,
                 at_limit: Callable[[], bool] = lambda: False) -> None:
        self.settings = settings
        self.broker = broker
        self.users = users
        #: what the protocol layer enforces and MQTT 5 clients are told (CONNACK)
        self.limits = attrs.evolve(
            LIMITS, max_packet_size=parse_size(settings.mqtt_max_packet_size),
            max_packet_size_unauthenticated=parse_size(
                settings.mqtt_max_packet_size_unauthenticated))
        self.execute = execute
        self.interpret = interpret
        self.committed = committed
        #: the store bridge: publishers stop being read while it is far behind
        self.persistence = persistence
        self.connections: set[MQTTClient] = set()
        #: the connected client of each session, (vhost, client id)
        self.clients: dict[Key, MQTTClient] = {}
        #: each session's QoS 2 packet ids in flight, kept across its connections
        self.packet_ids: dict[Key, PacketIds] = {}
        #: sessions with a mqtt_sessions row, and who opened each
        self.stored: dict[Key, str] = {}
        #: MQTT state read back from the store (sessions, packet ids, wills) as the
        #: ops that wrote it: the expiry countdowns start in serve()
        self._recovered = stored_sessions or []
        #: the countdown of each disconnected session that expires
        self._expiring: dict[Key, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self.ports: list[int] = []
        self.tls_ports: list[int] = []
        #: every vhost's MQTT retained-message bounds, built once (mqtt_retained.index)
        self.retained_limits = mqtt_retained.limits_of(
            broker.retained, settings.mqtt_retained_max_messages,
            settings.mqtt_retained_max_bytes_value)
        #: the wills not published yet
        self.wills = Wills(settings, broker, execute, self.retained_limits)
        #: vhosts whose retained quota refused a 3.1.1 publish (logged once each)
        self.quota_logged: set[str] = set()
        #: members of the shared subscriptions' queues (shared.py)
        self.groups = SharedGroups(broker, settings.mqtt_exchange)
        self.stats = MQTTStats()
        #: is max_connections reached, AMQP and MQTT clients together (the server's rule)
        self.at_connection_limit = at_limit

    async def serve(self, task_status: trio.TaskStatus[list[int]] = trio.TASK_STATUS_IGNORED,
                    ) -> None:
        s = self.settings
        listeners = await listen_tcp(s.mqtt_port, s.host, "MQTT", "mqtt_port") \
            if s.mqtt_port else []
        self.ports = sorted({ln.socket.getsockname()[1] for ln in listeners})
        tls = await open_tls(s)
        self.tls_ports = [] if tls is None else sorted(
            {ln.socket.getsockname()[1] for ln in tls[0]})
        log.info("MQTT listening on port(s) %s%s", self.ports,
                 f", MQTT over TLS on {self.tls_ports}" if tls else "")
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            now = time.time()
            self.wills.start(nursery, [w for w in self._recovered if isinstance(w, PutMQTTWill)])
            for st in self._recovered:
                if isinstance(st, PutMQTTPacketId):
                    self.ids((st.vhost, st.client_id)).restore(st)
                elif isinstance(st, PutMQTTSession):
                    key = (st.vhost, st.client_id)
                    self.stored[key] = st.user
                    for pid in st.awaiting_pubrel:  # an older database's: rows now
                        self.ids(key).inbound.add(pid)
                        self.broker.mqtt_packet_id_put(
                            PutMQTTPacketId(st.vhost, st.client_id, pid, False))
                    # a session connected at a crash counts from now
                    gone = now - (st.disconnected_at if st.disconnected_at is not None else now)
                    self.expire_later(st.vhost, st.client_id, st.expiry, max(0.0, gone))
            self._recovered = []
            self.execute(self.groups.recover, set(self.stored))
            if listeners:
                nursery.start_soon(trio.serve_listeners, self._handle, listeners)
            if tls is not None:
                nursery.start_soon(trio.serve_listeners, tls_handler(self, tls[1]),
                                   tls[0])
            task_status.started(self.ports)
            await trio.sleep_forever()

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
        if self.settings.mqtt_takeover != "user":
            return True
        old = self.clients.get(key)
        if old is not None and old.session is not None and old.session.username != user:
            return False
        return self.stored.get(key, "") in ("", user)  # "": an older version's row

    def expire_later(self, vhost: str, client_id: str, expiry: int, gone: float = 0.0) -> None:
        """MQTT 5 session expiry: ``expiry`` seconds after the disconnect (``gone``
        seconds ago) the session's queues and row go, unless it reconnected."""
        if expiry == NEVER_EXPIRES or self._nursery is None:
            return
        key = (vhost, client_id)
        self.keep(key)
        scope = self._expiring[key] = trio.CancelScope()
        self._nursery.start_soon(self._expire, key, expiry - gone, scope)

    def keep(self, key: Key) -> None:
        """The client reconnected: its countdown stops."""
        scope = self._expiring.pop(key, None)
        if scope is not None:
            scope.cancel()

    async def _expire(self, key: Key, delay: float, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep(max(0.0, delay))  # a timer: the session's lifetime
            if self._expiring.get(key) is scope:
                del self._expiring[key]
            if key in self.clients:
                return
            log.info("MQTT session %r of vhost %r expired", key[1], key[0])
            self.packet_ids.pop(key, None)
            self.execute(self._drop_session, *key)

    def _drop_session(self, vhost: str, client_id: str) -> None:
        """The session expired: its will, if still delayed, is published now."""
        self.wills.fire((vhost, client_id))
        b = self.broker
        vh = b.vhosts.get(vhost)
        for qos in (0, 1):
            q = None if vh is None else vh.queues.get(queue_name(client_id, qos))
            if vh is not None and q is not None:
                b.delete_queue(vh, q)
        self.groups.leave(vhost, client_id)
        self.stored.pop((vhost, client_id), None)
        b.mqtt_session_delete(vhost, client_id)

    def close_all(self, text: str) -> None:
        """Shutdown: every client closed and its session ended now, so what that
        writes (wills, requeues) reaches the store before it closes."""
        for c in list(self.connections):
            c.force_close(320, text)

    async def _handle(self, stream: trio.SocketStream) -> None:
        peer = accepted_peer(stream)
        if peer is not None:
            await self.serve_stream(stream, peer)

    async def serve_stream(self, stream: trio.abc.Stream, peer: tuple[str, int],
                           cert_user: str | None = None) -> None:
        """One client over any byte stream: TCP, TLS (``cert_user``: its verified
        certificate's CN) or a WebSocket (transports.py)."""
        await MQTTClient(self, stream, peer, cert_user).run()

    def login(self, username: str | None, password: bytes | None, peer_host: str) -> Login:
        """``vhost:user`` names a vhost, else ``mqtt_vhost``; no user name is the
        default user when anonymous logins are allowed (RabbitMQ's rules)."""
        s = self.settings
        if username is None:
            if not s.mqtt_allow_anonymous:
                return Login(refused=ReasonCode.NOT_AUTHORIZED)
            name, vhost = s.mqtt_default_user, s.mqtt_vhost
            user = self.users.identify(name, peer_host)
        else:
            vhost, sep, name = username.partition(":")
            if not sep:
                vhost, name = s.mqtt_vhost, username
            try:
                secret = (password or b"").decode()
            except UnicodeDecodeError:
                return Login(refused=ReasonCode.BAD_USER_NAME_OR_PASSWORD)
            user = self.users.authenticate(name, secret, peer_host)
        if user is None:
            return Login(refused=ReasonCode.BAD_USER_NAME_OR_PASSWORD)
        try:
            self.broker.check_vhost_access(name, vhost)
        except AMQPError:
            return Login(refused=ReasonCode.NOT_AUTHORIZED)
        return Login(name, vhost)


async def run_mqtt(server: Server,
                   task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """A service of the composition root: the MQTT listener beside the AMQP one."""
    listener = MQTTListener(server.settings, server.broker, server.users, server.execute,
                            server.interpret, server.committed, server.persist,
                            server.mqtt_sessions,
                            server.at_connection_limit)
    server.mqtt = listener
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.serve)
        task_status.started()
