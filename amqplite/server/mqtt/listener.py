"""The MQTT listener: accepts clients, logs them in, reads back the stored sessions
and runs the timers of the session rules (wills' delays, sessions' expiry).
The rules themselves (takeover, expiry, wills) are the registry's:
amqplite/sessions/mqtt/registry.py."""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from amqplite.broker.auth import UserDB
from amqplite.broker.core import Broker
from amqplite.config import Settings, parse_size
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.server.mqtt.client import MQTTClient
from amqplite.server.mqtt.idle import Readiness
from amqplite.server.mqtt.systree import SysTicker
from amqplite.server.mqtt.timers import Deadlines, KeyTimers
from amqplite.server.mqtt.transports import open_tls, tls_handler
from amqplite.server.persistence import Persistence
from amqplite.server.ports import accepted_peer, listen_tcp
from amqplite.sessions.mqtt.accounting import MQTTStats
from amqplite.sessions.mqtt.common import LIMITS, Key, Login
from amqplite.sessions.mqtt.registry import SessionRegistry
from amqplite.sessions.mqtt.session import MQTTSession
from amqplite.storeops import PutMQTTPacketId, PutMQTTSession, PutMQTTWill

if TYPE_CHECKING:
    from amqplite.server.app import Server

log = logging.getLogger("amqplite.mqtt")

#: accept() failures that pass (trio.serve_listeners' list)
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


class MQTTListener:
    """Accepts MQTT clients; owns the session registry and runs its timers.

    Its dependencies are explicit: the settings, the broker and its users, and
    the server's ``execute`` (a command and its Outcome), ``interpret`` (the
    Outcome so far), ``committed`` (wait for the store) and the store bridge.
    """

    def __init__(self, settings: Settings, broker: Broker, users: UserDB,
                 execute: Callable[..., Any], interpret: Callable[..., None],
                 committed: Callable[[], Awaitable[None]], persistence: Persistence,
                 stored_sessions: list[Any] | None = None,
                 at_limit: Callable[[], bool] = lambda: False,
                 vhost_limit: Callable[[str], int | None] = lambda vhost: None) -> None:
        self.settings = settings
        self.broker = broker
        self.users = users
        #: what the protocol layer enforces and MQTT 5 clients are told (CONNACK)
        self.limits = attrs.evolve(
            LIMITS, max_packet_size=parse_size(settings.mqtt_max_packet_size),
            max_packet_size_unauthenticated=parse_size(
                settings.mqtt_max_packet_size_unauthenticated),
            server_keep_alive=settings.mqtt_max_keepalive or None)
        self.execute = execute
        self.interpret = interpret
        self.committed = committed
        #: the store bridge: publishers stop being read while it is far behind
        self.persistence = persistence
        self.connections: set[MQTTClient] = set()
        #: the connections' keep-alive deadlines, watched by one task
        self.deadlines = Deadlines()
        #: the plain TCP connections' waits for bytes (idle ones have no task)
        self.readiness = Readiness()
        #: runs the plain TCP connections' tasks (serve() opens it)
        self.nursery: trio.Nursery | None = None
        #: the session rules' state: connected clients, packet ids, rows, wills, groups
        self.registry = SessionRegistry(broker, settings.mqtt_exchange, settings.mqtt_takeover,
                                        settings.mqtt_retained_max_messages,
                                        settings.mqtt_retained_max_bytes_value)
        #: MQTT state read back from the store (sessions, packet ids, wills) as the
        #: ops that wrote it: the expiry countdowns start in serve()
        self._recovered = stored_sessions or []
        self.ports: list[int] = []
        self.tls_ports: list[int] = []
        #: is max_connections reached, AMQP and MQTT clients together (the server's rule)
        self.at_connection_limit = at_limit
        #: the $SYS tree (None: mqtt_sys_interval 0); run_mqtt sets the server's start
        self.sys: SysTicker | None = None
        if settings.mqtt_sys_interval:
            self.sys = SysTicker(self, time.time())
            self.registry.sys_values = self.sys.values
        #: a vhost's max-connections when reached (None: room), all protocols counted
        self.vhost_connection_limit = vhost_limit

    @property
    def clients(self) -> dict[Key, MQTTSession]:
        """The connected session of each (vhost, client id)."""
        return self.registry.clients

    @property
    def stats(self) -> MQTTStats:
        return self.registry.stats

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
            self.nursery = nursery
            nursery.start_soon(self.readiness.run)
            nursery.start_soon(self.readiness.sweep)
            reg = self.registry
            now = time.time()
            reg.timers = KeyTimers(nursery, self._expired)
            reg.wills.restore(KeyTimers(nursery, self._will_due),
                              [w for w in self._recovered if isinstance(w, PutMQTTWill)], now)
            for st in self._recovered:
                if isinstance(st, PutMQTTPacketId):
                    reg.restore_packet_id(st)
                elif isinstance(st, PutMQTTSession):
                    reg.restore_session(st, now)
            self._recovered = []
            self.execute(reg.groups.recover, set(reg.stored))
            nursery.start_soon(self.deadlines.run)
            for ln in listeners:
                nursery.start_soon(self._accept, ln)
            if tls is not None:
                nursery.start_soon(trio.serve_listeners, tls_handler(self, tls[1]),
                                   tls[0])
            if self.sys is not None:
                nursery.start_soon(self.sys.run, s.mqtt_sys_interval)
            task_status.started(self.ports)
            await trio.sleep_forever()

    def _expired(self, key: Key) -> None:
        """A disconnected session's countdown ran out."""
        if self.registry.expired(key):
            self.execute(self.registry.drop_session, *key, time.time())

    def _will_due(self, key: Key) -> None:
        """A will's delay ran out."""
        self.execute(self.registry.wills.fire, key, time.time())

    def close_all(self, text: str) -> None:
        """Shutdown: every client closed and its session ended now, so what that
        writes (wills, requeues) reaches the store before it closes."""
        for c in list(self.connections):
            c.force_close(320, text)

    async def _accept(self, ln: trio.SocketListener) -> None:
        """trio.serve_listeners' loop, but the connection outlives its first task (its
        reader parks, idle.py): the client closes the stream, not the handler's end."""
        async with ln:
            while True:
                try:
                    stream = await ln.accept()
                except OSError as exc:
                    if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                        raise
                    log.error("MQTT accept: %s; retrying in 0.1 s", exc)
                    await trio.sleep(0.1)  # out of descriptors: as serve_listeners
                    continue
                assert self.nursery is not None
                self.nursery.start_soon(self._handle, stream)

    async def _handle(self, stream: trio.SocketStream) -> None:
        peer = accepted_peer(stream)
        if peer is None:
            await trio.aclose_forcefully(stream)
        else:  # serve() itself: two coroutine frames less per connection
            await MQTTClient(self, stream, peer).serve(self.connections)

    async def serve_stream(self, stream: trio.abc.Stream, peer: tuple[str, int],
                           cert_user: str | None = None) -> None:
        """One client over any byte stream: TCP, TLS (``cert_user``: its verified
        certificate's CN) or a WebSocket (transports.py)."""
        await MQTTClient(self, stream, peer, cert_user).run()

    def login(self, username: str | None, password: bytes | None, peer_host: str) -> Login:
        """``vhost:user`` names a vhost, else ``mqtt_vhost``. No user name, or a
        zero-length one (gmqtt sends it; Mosquitto takes it as none), is the default
        user when anonymous logins are allowed, bound by its loopback rule: guest
        from elsewhere is refused (RabbitMQ's rules)."""
        s = self.settings
        if not username:
            if not s.mqtt_allow_anonymous:
                return Login(refused=ReasonCode.NOT_AUTHORIZED)
            name, vhost = s.mqtt_default_user, s.mqtt_vhost
            if self.users.identify(name, peer_host) is None:
                return Login(refused=ReasonCode.NOT_AUTHORIZED)
        else:
            vhost, sep, name = username.partition(":")
            if not sep:
                vhost, name = s.mqtt_vhost, username
            try:
                secret = (password or b"").decode()
            except UnicodeDecodeError:
                return Login(refused=ReasonCode.BAD_USER_NAME_OR_PASSWORD)
            if self.users.authenticate(name, secret, peer_host) is None:
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
                            server.at_connection_limit, server.vhost_connection_limit)
    server.mqtt = listener
    if listener.sys is not None:
        listener.sys.started_at = server.started_at
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.serve)
        task_status.started()
