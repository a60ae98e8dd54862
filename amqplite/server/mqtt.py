"""The MQTT listener: a trio shell on the sans-I/O ``MQTTConnection``, mapped onto
the AMQP core as RabbitMQ's MQTT plugin maps it (docs/mqtt.md).

A client is a broker session with three channels: one in confirm mode for its
PUBLISH (QoS 1/2 are acknowledged when the publisher confirm arrives, i.e.
after the store commit), and one consumer channel for each of its queues
``mqtt-subscription-{clientid}qos0`` (no-ack) and ``...qos1`` (acked by PUBACK,
prefetch = the client's Receive Maximum). Subscriptions are bindings of those
queues to ``mqtt_exchange``. Each connection is its own nursery: a reader,
a writer and a keep-alive task; a crash closes that connection only.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from amqplite.broker import mqtt_retained
from amqplite.broker.auth import UserDB
from amqplite.broker.core import Broker
from amqplite.broker.model import ChannelState, Session
from amqplite.broker.retained import RetainedSet
from amqplite.config import Settings
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.connection import (
    FlowControlError,
    MQTTConnection,
    ServerLimits,
    State,
)
from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.events import (
    ConnectReceived,
    DisconnectReceived,
    ProtocolViolation,
    PubAckReceived,
    PublishReceived,
    SubscribeReceived,
    UnsubscribeReceived,
)
from amqplite.protocol.mqtt.packets import MQTT_5, Will
from amqplite.protocol.mqtt.topics import (
    binding_key_to_filter,
    filter_to_binding_key,
    matches,
    routing_key_to_topic,
    topic_to_routing_key,
)
from amqplite.protocol.properties import BasicProperties, delivery_mode_of, encode_properties
from amqplite.server.persistence import Persistence
from amqplite.server.ports import accepted_peer, listen_tcp
from amqplite.store.ops import NEVER_EXPIRES, DeleteMQTTSession, PutMQTTSession

if TYPE_CHECKING:
    from amqplite.server.app import Server

log = logging.getLogger("amqplite.mqtt")

RECV_SIZE = 64 * 1024
#: a client's consumers stop receiving while this much is queued unsent to it
WRITE_HIGH_WATER = 4 * 1024 * 1024
#: after the connection ends, how long the writer may take to send what is queued
FINISH_TIMEOUT = 2.0
#: what this shell does not offer yet (issue 23): advertised to MQTT 5 clients
LIMITS = ServerLimits(shared_subscription_available=False,
                      subscription_identifier_available=False)
#: channel numbers of a client's broker session
PUBLISH_CH, QOS0_CH, QOS1_CH = 1, 2, 3
#: AMQP properties of an MQTT message by its QoS: QoS 1/2 are persistent
_PROPS = {0: encode_properties(BasicProperties(delivery_mode=1)),
          1: encode_properties(BasicProperties(delivery_mode=2)),
          2: encode_properties(BasicProperties(delivery_mode=2))}


def queue_name(client_id: str, qos: int) -> str:
    """RabbitMQ's name for a session's subscription queue."""
    return f"mqtt-subscription-{client_id}qos{qos}"


@attrs.frozen
class Login:
    """Who a CONNECT logs in as, or the reason code refusing it."""

    user: str = ""
    vhost: str = ""
    refused: int = 0


class MQTTListener:
    """Accepts MQTT clients and keeps the client-id registry (session takeover).

    Its dependencies are explicit: the settings, the broker and its users, and
    the server's ``execute`` (a command and its Outcome), ``interpret`` (the
    Outcome so far), ``committed`` (wait for the store) and the store bridge.
    """

    def __init__(self, settings: Settings, broker: Broker, users: UserDB,
                 execute: Callable[..., Any], interpret: Callable[..., None],
                 committed: Callable[[], Awaitable[None]], persistence: Persistence,
                 stored_sessions: list[PutMQTTSession] | None = None) -> None:
        self.settings = settings
        self.broker = broker
        self.users = users
        self.execute = execute
        self.interpret = interpret
        self.committed = committed
        #: the store bridge: publishers stop being read while it is far behind
        self.persistence = persistence
        self.connections: set[MQTTClient] = set()
        #: the connected client of each client id
        self.clients: dict[str, MQTTClient] = {}
        #: persistent sessions' inbound QoS 2 ids acknowledged (PUBREC) and not yet
        #: released: a retransmission after a reconnect is not routed again. Stored
        #: (PutMQTTSession) when the session disconnects.
        self.awaiting_pubrel: dict[str, frozenset[int]] = {}
        #: client ids with a mqtt_sessions row
        self.stored: set[str] = set()
        #: sessions read back from the store: their expiry countdowns start in serve()
        self._recovered = stored_sessions or []
        #: the countdown of each disconnected session that expires
        self._expiring: dict[str, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self.ports: list[int] = []
        #: vhosts whose retained quota refused a 3.1.1 publish (logged once each)
        self.quota_logged: set[str] = set()

    async def serve(self, task_status: trio.TaskStatus[list[int]] = trio.TASK_STATUS_IGNORED,
                    ) -> None:
        s = self.settings
        listeners = await listen_tcp(s.mqtt_port, s.host, "MQTT", "mqtt_port")
        self.ports = sorted({ln.socket.getsockname()[1] for ln in listeners})
        log.info("MQTT listening on port(s) %s", self.ports)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            now = time.time()
            for st in self._recovered:  # a session connected at a crash counts from now
                self.stored.add(st.client_id)
                if st.awaiting_pubrel:
                    self.awaiting_pubrel[st.client_id] = frozenset(st.awaiting_pubrel)
                gone = now - (st.disconnected_at if st.disconnected_at is not None else now)
                self.expire_later(st.vhost, st.client_id, st.expiry, max(0.0, gone))
            self._recovered = []
            task_status.started(self.ports)
            await trio.serve_listeners(self._handle, listeners)

    def expire_later(self, vhost: str, client_id: str, expiry: int, gone: float = 0.0) -> None:
        """MQTT 5 session expiry: ``expiry`` seconds after the disconnect (``gone``
        seconds ago) the session's queues and row go, unless it reconnected."""
        if expiry == NEVER_EXPIRES or self._nursery is None:
            return
        self.keep(client_id)
        scope = self._expiring[client_id] = trio.CancelScope()
        self._nursery.start_soon(self._expire, vhost, client_id, expiry - gone, scope)

    def keep(self, client_id: str) -> None:
        """The client reconnected: its countdown stops."""
        scope = self._expiring.pop(client_id, None)
        if scope is not None:
            scope.cancel()

    async def _expire(self, vhost: str, client_id: str, delay: float,
                      scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep(max(0.0, delay))  # a timer: the session's lifetime
            if self._expiring.get(client_id) is scope:
                del self._expiring[client_id]
            if client_id in self.clients:
                return
            log.info("MQTT session %r expired", client_id)
            self.awaiting_pubrel.pop(client_id, None)
            self.execute(self._drop_session, vhost, client_id)

    def _drop_session(self, vhost: str, client_id: str) -> None:
        b = self.broker
        vh = b.vhosts.get(vhost)
        for qos in (0, 1):
            q = None if vh is None else vh.queues.get(queue_name(client_id, qos))
            if vh is not None and q is not None:
                b.delete_queue(vh, q)
        self.stored.discard(client_id)
        b.store_ops.append(DeleteMQTTSession(client_id))

    def close_all(self, text: str) -> None:
        """Shutdown: every client closed and its session ended now, so what that
        writes (wills, requeues) reaches the store before it closes."""
        for c in list(self.connections):
            c.force_close(320, text)

    async def _handle(self, stream: trio.SocketStream) -> None:
        peer = accepted_peer(stream)
        if peer is not None:
            await MQTTClient(self, stream, peer).run()

    def login(self, username: str | None, password: bytes | None, peer_host: str) -> Login:
        """``vhost:user`` names a vhost, else ``mqtt_vhost``; no user name is the
        default user when anonymous logins are allowed (RabbitMQ's rules)."""
        s = self.settings
        if username is None:
            if not s.mqtt_allow_anonymous:
                return Login(refused=ReasonCode.NOT_AUTHORIZED)
            name, vhost = s.default_user, s.mqtt_vhost
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


class MQTTClient:
    """One MQTT connection; the broker's transport for its session's deliveries."""

    def __init__(self, listener: MQTTListener, stream: trio.SocketStream,
                 peer: tuple[str, int]) -> None:
        self.listener = listener
        self.broker = listener.broker
        self.stream = stream
        self.peer_host, self.peer_port = peer[0], peer[1]
        self.name = f"{self.peer_host}:{self.peer_port}"
        self.proto = MQTTConnection(LIMITS, trio.current_time())
        self.connected_at = time.time()
        self.bytes_in = 0
        self.bytes_out = 0
        self.alive = True
        self.session: Session | None = None
        self.channels: dict[int, ChannelState] = {}
        self.client_id = ""
        #: clean session 0 (3.1.1) or a session expiry (5.0): queues outlive us
        self.persistent = False
        self.will: Will | None = None
        #: publisher-confirm seq -> inbound packet id (None: QoS 0)
        self._confirms: dict[int, int | None] = {}
        #: outbound packet id -> delivery tag on the qos1 channel
        self._tags: dict[int, int] = {}
        #: delivery tags of QoS 0 messages sent from the qos1 queue: acked by the writer
        self._auto_acks: list[int] = []
        self._wake = trio.Event()
        self._ka_wake = trio.Event()
        self._finishing = False
        self._reading_paused = False
        self._cancel: trio.CancelScope | None = None

    @property
    def protocol(self) -> str:
        return "MQTT 5.0" if self.proto.version >= MQTT_5 else (
            "MQTT 3.1" if self.proto.version == 3 else "MQTT 3.1.1")

    # ------------------------------------------------------------ tasks
    async def run(self) -> None:
        self.listener.connections.add(self)
        try:
            async with trio.open_nursery() as nursery:
                self._cancel = nursery.cancel_scope
                nursery.start_soon(self._writer)
                nursery.start_soon(self._keepalive)
                nursery.start_soon(self._reader)
        except Exception:  # one bad connection never takes the broker down
            log.exception("MQTT connection %s crashed", self.name)
        finally:
            self.alive = False
            self.listener.connections.discard(self)
            self._end_session()
            with trio.move_on_after(1):
                await self.stream.aclose()

    def _finish(self) -> None:
        """Stop reading; the writer sends what is queued, then everything ends."""
        self._finishing = True
        self._wake.set()
        if self._cancel is not None:
            self._cancel.deadline = min(self._cancel.deadline,
                                        trio.current_time() + FINISH_TIMEOUT)

    async def _reader(self) -> None:
        proto = self.proto
        persistence = self.listener.persistence
        try:
            while not self._finishing:
                if not persistence.has_capacity and self.session is not None:
                    await self._paused(persistence.wait_capacity())
                try:
                    data = await self.stream.receive_some(RECV_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    return
                if not data:
                    return
                self.bytes_in += len(data)
                proto.receive_data(data, trio.current_time())
                await self._handle_events()
                self.listener.interpret()
                self.flush()
        finally:
            self._finish()

    async def _paused(self, wait: Awaitable[None]) -> None:
        """As RabbitMQ under an alarm: publishers are not read. The silence is ours,
        so the keep-alive clock restarts when reading does."""
        self._reading_paused = True
        try:
            await wait
        finally:
            self._reading_paused = False
            self.proto.receive_data(b"", trio.current_time())
            self._ka_wake.set()

    async def _writer(self) -> None:
        """Sends what the protocol queued; once finishing, the rest, then FIN, then ends
        the connection's nursery."""
        while True:
            if not self._finishing:
                await self._wake.wait()
            self._wake = trio.Event()
            while True:
                if self._auto_acks and QOS1_CH in self.channels:
                    tags, self._auto_acks = self._auto_acks, []
                    self.listener.execute(self._ack_all, self.channels[QOS1_CH], tags)
                data = self.proto.data_to_send()
                if not data:
                    break
                try:
                    await self.stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    self._finishing = True
                    break
                self.bytes_out += len(data)
            s = self.session
            if s is not None and not s.writable and not self._finishing:
                self.listener.execute(self.broker.set_writable, s, True)
            if self._finishing:  # nothing awaited since the last empty data_to_send()
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError,
                                         OSError):
                    await self.stream.send_eof()
                assert self._cancel is not None
                self._cancel.cancel()
                return

    def _ack_all(self, ch: ChannelState, tags: list[int]) -> None:
        for tag in tags:
            self.broker.basic_ack(ch, tag)

    async def _keepalive(self) -> None:
        """1.5 x keep alive after the last bytes (and the CONNECT timeout)."""
        proto = self.proto
        while not proto.closed:
            deadline = proto.deadline
            with trio.move_on_at(math.inf if deadline is None else deadline):
                await self._ka_wake.wait()
            self._ka_wake = trio.Event()
            if self._reading_paused:
                await self._ka_wake.wait()  # set when reading resumes
                continue
            if proto.check_deadline(trio.current_time()):
                log.info("MQTT %s (%s): keep alive expired", self.name, self.client_id)
                self._finish()
                return

    # ------------------------------------------------------------ events
    async def _handle_events(self) -> None:
        proto = self.proto
        while (ev := proto.next_event()) is not None:
            t = type(ev)
            if t is PublishReceived:
                assert isinstance(ev, PublishReceived)
                self._publish(ev.publish.topic, ev.publish.payload, ev.publish.qos,
                              ev.publish.packet_id, ev.publish.retain)
            elif t is PubAckReceived:
                assert isinstance(ev, PubAckReceived)
                tag = self._tags.pop(ev.packet_id, None)
                ch = self.channels.get(QOS1_CH)
                if tag is not None and ch is not None:
                    self.broker.basic_ack(ch, tag)
            elif t is ConnectReceived:
                assert isinstance(ev, ConnectReceived)
                await self._connect(ev)
            elif t is SubscribeReceived:
                assert isinstance(ev, SubscribeReceived)
                await self._subscribe(ev)
            elif t is UnsubscribeReceived:
                assert isinstance(ev, UnsubscribeReceived)
                await self._unsubscribe(ev)
            elif t is DisconnectReceived:
                assert isinstance(ev, DisconnectReceived)
                if not ev.publish_will:
                    self.will = None  # [MQTT-3.14.4-3]: a normal DISCONNECT drops it
                self._finish()
            elif t is ProtocolViolation:
                assert isinstance(ev, ProtocolViolation)
                log.info("MQTT %s (%s): %s", self.name, self.client_id, ev.message)
                self._finish()
        if proto.closed:
            self._finish()

    async def _connect(self, ev: ConnectReceived) -> None:
        c = ev.connect
        listener = self.listener
        login = listener.login(c.username, c.password, self.peer_host)
        if login.refused:
            log.warning("MQTT %s: login refused for %r", self.name, c.username)
            self.proto.reject(login.refused)
            return
        self.client_id = ev.client_id
        old = listener.clients.get(ev.client_id)
        if old is not None and old is not self:
            old.take_over()  # [MQTT-3.1.4-3]: the existing client is disconnected
        listener.clients[ev.client_id] = self
        listener.keep(ev.client_id)
        self.will = c.will
        self.persistent = (self.proto.session_expiry_interval > 0 if c.protocol_level >= MQTT_5
                           else not c.clean_start)
        b = self.broker
        s = self.session = b.open_session(login.user, login.vhost, self.name)
        s.client_properties = {"client_id": ev.client_id}
        s.transport = self
        for n in (PUBLISH_CH, QOS0_CH, QOS1_CH):
            self.channels[n] = b.open_channel(s, n)
        b.confirm_select(self.channels[PUBLISH_CH])
        pubrel = listener.awaiting_pubrel.pop(ev.client_id, frozenset())
        kept: list[int] = []
        for qos in (0, 1):
            if self._queue_exists(qos):
                if c.clean_start:  # a clean start forgets the previous session
                    self._delete_queue(qos)
                else:
                    kept.append(qos)
        cid = ev.client_id
        if self.persistent:  # its row says so across a restart
            listener.stored.add(cid)
            b.store_ops.append(PutMQTTSession(login.vhost, cid, self._expiry()))
        elif cid in listener.stored and c.clean_start:
            listener.stored.discard(cid)
            b.store_ops.append(DeleteMQTTSession(cid))
        await listener.committed()
        if self.session is not s or self.proto.closed:  # taken over meanwhile
            return
        self.proto.accept(session_present=bool(kept))
        if not c.clean_start and pubrel:
            self.proto.resume((), pubrel)
        self._ka_wake.set()  # the keep-alive deadline starts now
        for qos in kept:  # deliveries only after CONNACK
            self._consume(qos)

    def take_over(self) -> None:
        """Another connection with our client id arrived: we go now, with our will
        (MQTT 5 clients hear 0x8E), and our deliveries return to the queues."""
        log.info("MQTT %s: client id %r taken over", self.name, self.client_id)
        self.proto.disconnect(ReasonCode.SESSION_TAKEN_OVER)
        self._end_session()
        self._finish()

    def _end_session(self) -> None:
        """Publish the will unless a normal DISCONNECT cancelled it, then close the
        broker session (clean sessions' exclusive queues go with it)."""
        s = self.session
        if s is None:
            return
        listener = self.listener
        if listener.clients.get(self.client_id) is self:
            del listener.clients[self.client_id]
        if self.persistent:
            pubrel = self.proto.awaiting_pubrel()
            if pubrel:
                listener.awaiting_pubrel[self.client_id] = pubrel
            expiry = self._expiry()
            self.broker.store_ops.append(PutMQTTSession(s.vhost, self.client_id, expiry,
                                                        time.time(), tuple(sorted(pubrel))))
            if listener.clients.get(self.client_id) is None:
                listener.expire_later(s.vhost, self.client_id, expiry)
        will, self.will = self.will, None
        if will is not None:
            try:
                self._publish(will.topic, will.payload, will.qos, None, will.retain)
            except Exception:
                log.exception("MQTT %s: will publication failed", self.name)
        self.session = None
        self.channels = {}
        self._tags.clear()
        listener.execute(self.broker.close_session, s)

    def _expiry(self) -> int:
        """The session's lifetime after a disconnect (3.1.1 persistent: forever)."""
        if self.proto.version >= MQTT_5:
            return min(self.proto.session_expiry_interval, NEVER_EXPIRES)
        return NEVER_EXPIRES

    # ------------------------------------------------------------ queues
    def _queue_exists(self, qos: int) -> bool:
        assert self.session is not None
        vh = self.broker.vhosts.get(self.session.vhost)
        return vh is not None and queue_name(self.client_id, qos) in vh.queues

    def _delete_queue(self, qos: int) -> None:
        self.broker.queue_delete(self.channels[QOS0_CH], queue_name(self.client_id, qos))

    def _declare(self, qos: int) -> None:
        """The session's queue for ``qos`` and its consumer, when not there yet."""
        if self._queue_exists(qos):
            return
        ch = self.channels[QOS0_CH if qos == 0 else QOS1_CH]
        durable = self.persistent
        self.broker.queue_declare(ch, queue_name(self.client_id, qos), durable=durable,
                                  exclusive=not durable, auto_delete=False)
        self._consume(qos)

    def _consume(self, qos: int) -> None:
        b = self.broker
        if qos == 0:
            ch = self.channels[QOS0_CH]
            tag = b.basic_consume(ch, queue_name(self.client_id, 0), "mqtt-qos0", no_ack=True)
        else:
            ch = self.channels[QOS1_CH]
            b.basic_qos(ch, 0, min(self.proto.client_receive_maximum, 65_535), False)
            tag = b.basic_consume(ch, queue_name(self.client_id, 1), "mqtt-qos1")
        b.start_consumer(ch, tag)

    async def _subscribe(self, ev: SubscribeReceived) -> None:
        """Bind each filter to the queue of its (granted) QoS, unbind it from the other.
        RabbitMQ grants at most QoS 1; a shared subscription is not offered yet."""
        b = self.broker
        exchange = self.listener.settings.mqtt_exchange
        codes: list[int] = []
        #: (filter, granted QoS) of the retained messages owed after the SUBACK
        owed: list[tuple[str, int]] = []
        for req in ev.requests:
            if req.reason_code or req.parsed is None:
                codes.append(req.reason_code or ReasonCode.TOPIC_FILTER_INVALID)
                continue
            if req.parsed.share_group is not None:
                codes.append(ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED)
                continue
            qos = min(req.qos, 1)
            key = filter_to_binding_key(req.parsed.topic_filter)
            if req.retain_handling == 0 or (req.retain_handling == 1
                                            and not self._subscribed(key)):
                owed.append((req.parsed.topic_filter, qos))
            try:
                self._declare(qos)
                b.queue_bind(self.channels[QOS0_CH], queue_name(self.client_id, qos),
                             exchange, key)
                if self._queue_exists(1 - qos):
                    b.queue_bind(self.channels[QOS0_CH], queue_name(self.client_id, 1 - qos),
                                 exchange, key, unbind=True)
            except AMQPError as exc:
                log.info("MQTT %s: subscription to %r refused: %s", self.name,
                         req.topic_filter, exc)
                codes.append(ReasonCode.NOT_AUTHORIZED if _refused(exc)
                             else ReasonCode.UNSPECIFIED_ERROR)
                continue
            codes.append(qos)
        await self.listener.committed()  # a SUBACK means the subscription is stored
        self.proto.send_suback(ev.packet_id, codes)
        for topic_filter, qos in owed:
            self._send_retained(topic_filter, qos)

    def _subscribed(self, key: str) -> bool:
        """Is ``key`` already bound to one of our queues (retain handling 1)?"""
        s = self.session
        vh = self.broker.vhosts.get(s.vhost) if s is not None else None
        if vh is None:
            return False
        exchange = self.listener.settings.mqtt_exchange
        return any(b.source == exchange and b.routing_key == key
                   for qos in (0, 1)
                   for b in vh.bindings_to.get(("queue", queue_name(self.client_id, qos)), ()))

    def _send_retained(self, topic_filter: str, qos: int) -> None:
        """A new subscription receives the retained messages its filter matches, with
        the retain flag set ([MQTT-3.3.1-6]; also under retain-as-published 0,
        [MQTT-3.3.1-12] is about live forwarding). They go straight to the client,
        as RabbitMQ's plugin sends them, at the lower of the two QoS."""
        s = self.session
        if s is None:
            return
        store = self.broker.retained
        rs = store.find(mqtt_retained.owner(s.vhost))
        for r in mqtt_retained.matching(store, rs, topic_filter):
            m = r.message
            q = min(qos, 1 if m.persistent else 0)
            try:  # a QoS 1 one's PUBACK finds no delivery tag in _tags: nothing to ack
                self.proto.send_publish(r.key, bytes(m.body or b""), q, retain=True)
            except FlowControlError:
                log.info("MQTT %s: retained %r not sent: receive maximum reached",
                         self.name, r.key)
        self.flush()

    async def _unsubscribe(self, ev: UnsubscribeReceived) -> None:
        exchange = self.listener.settings.mqtt_exchange
        codes: list[int] = []
        for parsed in ev.parsed:
            if parsed is None:
                codes.append(ReasonCode.TOPIC_FILTER_INVALID)
                continue
            key = filter_to_binding_key(parsed.topic_filter)
            for qos in (0, 1):
                with contextlib.suppress(AMQPError):
                    self.broker.queue_bind(self.channels[QOS0_CH],
                                           queue_name(self.client_id, qos), exchange, key,
                                           unbind=True)
            codes.append(0)
        await self.listener.committed()
        self.proto.send_unsuback(ev.packet_id, codes)

    # ------------------------------------------------------------ publish
    def _publish(self, topic: str, payload: bytes, qos: int, packet_id: int | None,
                 retain: bool = False) -> None:
        """Into the broker's publish path; QoS 1/2 are acknowledged by the confirm."""
        ch = self.channels.get(PUBLISH_CH)
        if ch is None:
            return
        st = ch.confirms
        assert st is not None
        seq = st.next_seq
        rs = None
        if retain:
            rs = self._retained_index()
            if payload and mqtt_retained.over_quota(rs, topic, len(payload)):
                if self.proto.version >= MQTT_5:  # refused whole: nothing routed
                    log.info("MQTT %s: retained publish to %r over quota", self.name, topic)
                    if packet_id is not None:
                        self.proto.ack_publish(packet_id, ReasonCode.QUOTA_EXCEEDED)
                    return
                vhost = rs.owner[0]
                if vhost not in self.listener.quota_logged:
                    self.listener.quota_logged.add(vhost)
                    log.warning("MQTT retained messages of vhost %r over quota "
                                "(mqtt_retained_max_messages/_bytes): publishes are routed, "
                                "not retained", vhost)
                rs = None
        try:
            self.broker.basic_publish(ch, self.listener.settings.mqtt_exchange,
                                      topic_to_routing_key(topic), _PROPS[qos], payload)
        except AMQPError as exc:
            log.info("MQTT %s: publish to %r refused: %s", self.name, topic, exc)
            if packet_id is not None and self.proto.version >= MQTT_5:
                self.proto.ack_publish(packet_id, ReasonCode.NOT_AUTHORIZED if _refused(exc)
                                       else ReasonCode.UNSPECIFIED_ERROR)
            elif packet_id is not None:  # 3.1.1 has no negative acknowledgement
                self.proto.disconnect(ReasonCode.NOT_AUTHORIZED)
            return
        if rs is not None:
            kept = mqtt_retained.retain(self.broker.retained, rs, self.broker.new_message_key(),
                                        topic, self.listener.settings.mqtt_exchange,
                                        topic_to_routing_key(topic), _PROPS[qos], payload)
            if kept:  # its row commits before the confirm (PUBACK), as a queue entry's
                st.stored = True
        if packet_id is not None:
            self._confirms[seq] = packet_id

    def _retained_index(self) -> RetainedSet:
        s = self.listener.settings
        assert self.session is not None
        return mqtt_retained.index(self.broker.retained, self.session.vhost,
                                   s.mqtt_retained_max_messages,
                                   s.mqtt_retained_max_bytes_value)

    # ------------------------------------------------------------ broker -> wire
    # The interpreter calls these for this session's effects, then flush().
    def send_confirm(self, ch: ChannelState, upto: int, multiple: bool, nack: bool) -> None:
        confirms = self._confirms
        seqs = [upto]
        if multiple:  # seqs are keys in ascending order: stop at the first above
            seqs = list(itertools.takewhile(lambda s: s <= upto, confirms))
        for seq in seqs:
            pid = confirms.pop(seq, None)
            if pid is None:
                continue
            if not nack:
                self.proto.ack_publish(pid)
            elif self.proto.version >= MQTT_5:
                self.proto.ack_publish(pid, ReasonCode.UNSPECIFIED_ERROR)
            # a refused 3.1.1 message stays unacknowledged: the client sends it again

    def deliver(self, ch: ChannelState, consumer_tag: str, delivery_tag: int,
                redelivered: bool, message: Any, properties: bytes | None = None) -> None:
        if (not self.alive or self.proto.state is not State.CONNECTED
                or self.channels.get(ch.number) is not ch):
            return  # unacked: back to the queue when the session closes
        props = properties or message.properties_raw
        qos = 1 if ch.number == QOS1_CH and delivery_mode_of(props) == 2 else 0
        topic = routing_key_to_topic(message.routing_key)
        out = None
        if topic.startswith("$") and not self._dollar_match(ch, topic):
            pass  # [MQTT-4.7.2-1]: only a filter not starting with a wildcard gets it
        else:
            try:
                out = self.proto.send_publish(topic, bytes(message.body), qos)
            except FlowControlError:  # prefetch keeps us inside the window; never expected
                log.warning("MQTT %s: receive maximum reached", self.name)
        if ch.number == QOS1_CH:
            if out is not None and out.packet_id is not None:
                self._tags[out.packet_id] = delivery_tag
            else:
                self._auto_acks.append(delivery_tag)
                self._wake.set()

    def _dollar_match(self, ch: ChannelState, topic: str) -> bool:
        """Does a subscription of the delivering queue match a ``$`` topic under MQTT's
        rule? The AMQP topic exchange routed it by ``#``/``*`` alone."""
        s = self.session
        vh = self.broker.vhosts.get(s.vhost) if s is not None else None
        if vh is None:
            return False
        qos = 0 if ch.number == QOS0_CH else 1
        exchange = self.listener.settings.mqtt_exchange
        for b in vh.bindings_to.get(("queue", queue_name(self.client_id, qos)), ()):
            if b.source == exchange and matches(binding_key_to_filter(b.routing_key), topic):
                return True
        return False

    def deliver_stream(self, ch: ChannelState, consumer_tag: str, first_tag: int,
                       entries: list[Any]) -> None:
        """Stream queues are not MQTT subscription queues."""

    def send_return(self, ch: ChannelState, code: int, text: str, message: Any) -> None:
        """MQTT publishes are never mandatory."""

    def send_cancel(self, ch: ChannelState, consumer_tag: str) -> None:
        """A subscription queue deleted under us (admin): the client is told by a close
        (the session ends in ``run``, not inside the interpreter calling us)."""
        if self.alive:
            self.proto.disconnect(ReasonCode.ADMINISTRATIVE_ACTION, "subscription queue deleted")
            self._finish()

    def force_close(self, code: int, text: str) -> None:
        """Server-side close (shutdown, admin): MQTT 5 clients hear why; the session
        (and its will) ends now."""
        if self.alive:
            reason = (ReasonCode.SERVER_SHUTTING_DOWN if "shutdown" in text
                      else ReasonCode.ADMINISTRATIVE_ACTION)
            self.proto.disconnect(reason, text)
            self._end_session()
            self._finish()

    def flush(self) -> None:
        self._wake.set()
        s = self.session
        if s is not None and s.writable and self.proto.pending_bytes() > WRITE_HIGH_WATER:
            # a slow reader: its consumers wait until the writer drains (as for AMQP)
            self.broker.set_writable(s, False)

    wake = flush


def _refused(exc: AMQPError) -> bool:
    return exc.reply_code == 403


async def run_mqtt(server: Server,
                   task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """A service of the composition root: the MQTT listener beside the AMQP one."""
    listener = MQTTListener(server.settings, server.broker, server.users, server.execute,
                            server.interpret, server.committed, server.persist,
                            server.mqtt_sessions)
    server.mqtt = listener
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.serve)
        task_status.started()
