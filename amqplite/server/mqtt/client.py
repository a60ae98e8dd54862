"""One MQTT connection: the trio shell (server/shell.py: reader, writer, timers) on
the sans-I/O ``MQTTConnection`` (bytes) and an ``MQTTSession`` (the rules,
amqplite/sessions/mqtt/session.py); the broker's transport for the session's
deliveries."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, MutableSet
from typing import TYPE_CHECKING, Any

import trio

from amqplite.broker.model import ChannelState, Session
from amqplite.protocol.mqtt.connection import MQTTConnection, State
from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.events import (
    ConnectReceived,
    DisconnectReceived,
    ProtocolViolation,
    SubscribeReceived,
    UnsubscribeReceived,
)
from amqplite.protocol.mqtt.packets import MQTT_5
from amqplite.server.mqtt.transports import login as transport_login
from amqplite.server.shell import FINISH, FINISH_TIMEOUT, GONE, WRITE_HIGH_WATER, ConnectionShell
from amqplite.sessions.mqtt.session import MQTTSession

if TYPE_CHECKING:
    from amqplite.server.mqtt.listener import MQTTListener

log = logging.getLogger("amqplite.mqtt")


class _StartWriter:
    """Stands in for the shell's writer Event: ``set()`` starts the writer task when
    none runs (an idle connection has none)."""

    __slots__ = ("c")

    def __init__(self, c: MQTTClient) -> None:
        self.c = c

    def set(self) -> None:
        c = self.c
        if not c._writer_running and c._nursery is not None and not c._closing:
            c._writer_running = True
            c._nursery.start_soon(c._writer)


class MQTTClient(ConnectionShell):
    """One MQTT connection; the broker's transport for its session's deliveries."""

    __slots__ = ("_closing", "_nursery", "_park_next", "_pause_scope", "_reading_paused",
                 "_starting", "_writer_done", "_writer_running", "broker", "cert_user",
                 "deliver", "due_at", "due_seq", "listener", "proto", "rules",
                 "send_confirm", "task")

    kind = "MQTT"
    listener: MQTTListener
    proto: MQTTConnection
    #: the broker calls these for the session's effects (the rules' own methods,
    #: bound in __init__: no extra call per message)
    deliver: Callable[..., None]
    send_confirm: Callable[[ChannelState, int, bool, bool], None]

    def __init__(self, listener: MQTTListener, stream: trio.abc.Stream,
                 peer: tuple[str, int], cert_user: str | None = None) -> None:
        self.listener = listener
        self.broker = listener.broker
        self.proto = MQTTConnection(listener.limits, trio.current_time())
        #: the session rules of this connection (before the shell's __init__, which
        #: sets ``alive``: the rules keep it)
        self.rules = MQTTSession(listener.registry, self.proto, f"{peer[0]}:{peer[1]}",
                                 self, listener.limits.max_topic_bytes, self._wake_writer,
                                 self.flush, self.finish, listener.execute)
        super().__init__(stream, peer, log)
        #: over TLS: the verified client certificate's user name (transports.login)
        self.cert_user = cert_user
        self.deliver = self.rules.deliver
        self.send_confirm = self.rules.send_confirm
        self._reading_paused = False
        #: the writer task runs only while there is something to write (see _writer)
        self._wake = _StartWriter(self)  # type: ignore[assignment]  # set() is all it needs
        self._writer_running = False
        self._nursery: trio.Nursery | None = None
        #: the task reading this connection: what it queues, it sends itself (flush);
        #: None while the connection is parked (plain TCP, see idle.py)
        self.task: trio.lowlevel.Task | None = None
        #: plain TCP: the next wait for bytes parks at once (the CONNECT was handled)
        self._park_next = False
        #: plain TCP: a task to run the parked connection is started, not running yet
        self._starting = False
        #: plain TCP: the connection's end (``_close``) has begun
        self._closing = False
        #: plain TCP: set when the writer task ends, while ``_close`` waits for it
        self._writer_done: trio.Event | None = None
        #: while reading is paused (store over capacity): ``finish`` cancels the wait
        self._pause_scope: trio.CancelScope | None = None
        #: this connection's entry on the listener's Deadlines heap (seq 0: none)
        self.due_at = 0.0
        self.due_seq = 0

    # what /api/connections and /metrics read (admin/views.py)
    @property
    def alive(self) -> bool:
        return self.rules.alive

    @alive.setter
    def alive(self, value: bool) -> None:
        self.rules.alive = value

    @property
    def session(self) -> Session | None:
        return self.rules.session

    @property
    def client_id(self) -> str:
        return self.rules.client_id

    @property
    def protocol(self) -> str:
        return "MQTT 5.0" if self.proto.version >= MQTT_5 else (
            "MQTT 3.1" if self.proto.version == 3 else "MQTT 3.1.1")

    @property
    def fd(self) -> int:
        return self._fd

    async def run(self) -> None:
        await self.serve(self.listener.connections)

    async def serve(self, connections: MutableSet[Any]) -> None:
        """Plain TCP: no task at all while idle (``_run``). Over TLS or a WebSocket,
        as the shell's but one task per idle connection: the reader runs in the
        connection's own task, the writer task is started when there is something to
        write and ends when it is written, and the keep-alive deadline is on the
        listener's heap (an idle connection was three trio tasks, ~12 KiB of 22)."""
        if self._fd >= 0:
            connections.add(self)
            self._nursery = self.listener.nursery
            self.listener.deadlines.watch(self, self.proto.deadline)
            try:
                self.listener.readiness.add(self)
            except OSError:  # gone already: _run ends it
                self._finishing = True
            await self._run()
            return
        connections.add(self)
        self.task = trio.lowlevel.current_task()
        deadlines = self.listener.deadlines
        deadlines.watch(self, self.proto.deadline)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._cancel = nursery.cancel_scope
                if self._finishing or self.proto.pending_bytes():
                    self._wake.set()  # asked for before the nursery was there
                await self._reader()
            self.task = None
        except Exception:  # one bad connection never takes the broker down
            self.log.exception("%s connection %s crashed", self.kind, self.name)
        finally:
            self.alive = False
            connections.discard(self)
            deadlines.forget(self)
            self._end()
            with trio.move_on_after(1):
                await self.stream.aclose()

    def flush(self) -> None:
        """What this connection's own reader queued (PUBACKs, its deliveries) it sends
        itself when the socket takes it (``send_now``): no writer task is woken.
        What other tasks queue (a publisher's fan-out to 1,000 subscribers) wakes
        the writer, which then sends several in one write: written inline, each
        send held up the publisher's reader (QoS 1 fan-out ran at half the rate).
        The writer also takes bytes held for a commit (``hold``: ``_outgoing``
        would clear it here, and the bytes would not wait) and deliveries to ack
        on the QoS 1 channel (``auto_acks``: a broker command)."""
        s = self.session
        rules = self.rules
        if ((s is not None and not s.writable) or rules.hold or rules.auto_acks
                or trio.lowlevel.current_task() is not self.task):
            self._wake.set()  # the writer task sends it (and makes the session writable)
        else:
            self.send_now()
        if s is not None and s.writable and self.proto.pending_bytes() > WRITE_HIGH_WATER:
            # a slow reader: its consumers wait until the writer drains (as for AMQP)
            self.broker.set_writable(s, False)

    async def _writer(self) -> None:
        """Write what is queued, then end (``_StartWriter`` starts it again); once the
        connection is finishing: the rest, then FIN, then the connection's end
        (plain TCP: ``_close`` does that, this only ends)."""
        if self._fd >= 0:
            await self._tcp_writer()
            return
        await self._send_queued()
        if not self._finishing:
            self._writer_running = False  # before _drained: what it queues starts one
            self._drained()
            return
        await self._close_write()

    def _wake_writer(self) -> None:
        self._wake.set()

    # ------------------------------------------------------------ plain TCP
    # The reader task ends while the connection is idle (it parks: idle.py) and
    # the listener's nursery runs the tasks (reader, writer, the end), so the
    # connection itself holds no task, nursery or cancel scope.
    async def _run(self) -> None:
        """The reader task: from the accept, or when bytes come to a parked connection
        (or it finishes); ends the connection unless it parks again."""
        self.task = trio.lowlevel.current_task()
        self._starting = False
        parked = False
        try:
            # a new task reads first: bytes are there (or the CONNECT soon is)
            parked = await self._reader(wait=False)
        except Exception:  # one bad connection never takes the broker down
            self.log.exception("%s connection %s crashed", self.kind, self.name)
        finally:
            self.task = None
            if not parked:
                self._finishing = True
                try:
                    await self._close()
                except Exception:  # the listener's nursery runs this task: never raise
                    self.log.exception("%s connection %s: closing failed", self.kind, self.name)

    def readable(self) -> None:
        """Bytes (or the peer's close) came to a parked connection."""
        if (self.task is None and not self._starting and not self._closing
                and self._nursery is not None):
            self._starting = True
            self._nursery.start_soon(self._run)

    async def _wait_readable(self) -> int:
        """The shell's reader waits on the listener's epoll set (idle.py); PARK right
        after the CONNECT, or once it has waited long."""
        park, self._park_next = self._park_next, False
        return await self.listener.readiness.wait(self, park)

    async def _tcp_writer(self) -> None:
        """In the listener's nursery: a failure ends this connection, never the nursery."""
        try:
            try:
                await self._send_queued()
            finally:
                self._writer_running = False  # before _drained: what it queues starts one
                if self._writer_done is not None:
                    self._writer_done.set()
            if not self._finishing:
                self._drained()
        except Exception:
            self.log.exception("%s connection %s: writing failed", self.kind, self.name)
            self.finish()

    async def _close(self) -> None:
        """The connection ends: what is queued is sent (the writer's, or here), then
        FIN, within FINISH_TIMEOUT; then the session ends and the socket closes."""
        if self._closing:
            return
        self._closing = True
        stream = self.stream
        assert isinstance(stream, trio.SocketStream)  # plain TCP only
        try:
            with trio.move_on_after(FINISH_TIMEOUT):
                while self._writer_running:
                    self._writer_done = trio.Event()
                    await self._writer_done.wait()
                await self._send_queued()
                with contextlib.suppress(*GONE):
                    await stream.send_eof()
        finally:
            self.alive = False
            listener = self.listener
            listener.connections.discard(self)
            listener.deadlines.forget(self)
            listener.readiness.remove(self)
            try:
                self._end()
            finally:
                stream.socket.close()

    def finish(self) -> None:
        """Plain TCP: the reader stops (a parked connection gets a task to end it);
        the rest is ``_close``'s."""
        if self._fd < 0:
            super().finish()
            return
        self._finishing = True
        if self._pause_scope is not None:
            self._pause_scope.cancel()
        if not self.listener.readiness.wake(self, FINISH) and self.task is None:
            self.readable()  # parked: a task to end it

    # ------------------------------------------------------------ the shell's hooks
    async def _paused(self, wait: Awaitable[None]) -> None:
        """As the shell's, and the keep-alive clock restarts when reading does."""
        self._reading_paused = True
        try:
            with trio.CancelScope() as self._pause_scope:
                await wait
        finally:
            self._pause_scope = None
            self._reading_paused = False
            self.proto.receive_data(b"", trio.current_time())
            self.listener.deadlines.watch(self, self.proto.deadline)

    def _outgoing(self) -> bytes | None:
        """Deliveries that need no PUBACK are acked first; a packet whose state goes
        to the store (``rules.hold``) leaves only once that is committed."""
        rules = self.rules
        if rules.auto_acks:
            rules.take_auto_acks()
        if rules.hold:
            rules.hold = False
            return None
        return self.proto.data_to_send()

    def _end(self) -> None:
        stats = self.listener.stats
        stats.bytes_received += self.bytes_in
        stats.bytes_sent += self.bytes_out
        self.rules.end(time.time())

    def deadline_due(self, now: float) -> None:
        """The listener's Deadlines: 1.5 x keep alive after the last bytes (and the
        CONNECT timeout) may have passed; if not, watch the real deadline."""
        proto = self.proto
        if proto.closed or self._finishing or self._reading_paused:
            return  # a paused reader is watched again when it resumes
        state = proto.state  # the check closes it: what was it waiting for?
        if not proto.check_deadline(now):
            self.listener.deadlines.watch(self, proto.deadline)
            return
        if state is State.CONNECTED:
            log.info("MQTT %s (%s): keep alive expired", self.name, self.client_id)
        else:  # a port scanner, a health check, a client on the wrong port
            log.info("MQTT %s: %s within %g s", self.name,
                     "CONNECT not accepted" if state is State.CONNECTING
                     else "no CONNECT", proto.limits.connect_timeout)
        self.finish()

    # ------------------------------------------------------------ events
    async def _handle_events(self) -> None:
        proto = self.proto
        rules = self.rules
        # PUBLISH and the acknowledgements: the rules' (compiled) dispatch
        while (ev := rules.handle_events()) is not None:
            t = type(ev)
            if t is ConnectReceived:
                assert isinstance(ev, ConnectReceived)
                await self._connect(ev)
            elif t is SubscribeReceived:
                assert isinstance(ev, SubscribeReceived)
                subs = rules.subs
                assert subs is not None
                codes, owed = subs.subscribe(ev)
                await self.listener.committed()  # a SUBACK means the subscription is stored
                subs.acknowledge(ev, codes, owed, time.time())
            elif t is UnsubscribeReceived:
                assert isinstance(ev, UnsubscribeReceived)
                subs = rules.subs
                assert subs is not None
                codes = subs.unsubscribe(ev)
                await self.listener.committed()
                proto.send_unsuback(ev.packet_id, codes)
            elif t is DisconnectReceived:
                assert isinstance(ev, DisconnectReceived)
                if not ev.publish_will:
                    rules.will = None  # [MQTT-3.14.4-3]: a normal DISCONNECT drops it
                self.finish()
            elif t is ProtocolViolation:
                assert isinstance(ev, ProtocolViolation)
                log.info("MQTT %s (%s): %s", self.name, self.client_id, ev.message)
                self.finish()
        if proto.closed:
            self.finish()

    async def _connect(self, ev: ConnectReceived) -> None:
        c = ev.connect
        listener = self.listener
        login = transport_login(listener, c, self.peer_host, self.cert_user)
        if login.refused:
            log.warning("MQTT %s: login refused for %r", self.name, c.username)
            self.proto.reject(login.refused)
            return
        # as AMQP's 530: the vhost's max-connections or the node's limit is reached
        vlimit = listener.vhost_connection_limit(login.vhost)
        if vlimit is not None or listener.at_connection_limit():
            listener.stats.refused_at_limit += 1
            log.warning("MQTT %s refused: %s connection limit (%d) is reached", self.name,
                        "the node's" if vlimit is None else f"vhost '{login.vhost}'",
                        listener.settings.max_connections if vlimit is None else vlimit)
            self.proto.reject(ReasonCode.QUOTA_EXCEEDED if c.protocol_level >= MQTT_5
                              else ReasonCode.SERVER_UNAVAILABLE)
            return
        opened = self.rules.connect(ev, login, time.time())
        if opened is None:
            return
        await listener.committed()
        if self.rules.accept(*opened, time.time()):
            # the keep-alive deadline starts now
            listener.deadlines.watch(self, self.proto.deadline)
            # parks at once: an idle client costs no task from now on, a busy one
            # pays for one new task when it sends next
            self._park_next = True

    # ------------------------------------------------------------ broker -> wire
    # The interpreter calls these (and deliver, send_confirm) for this session's
    # effects, then flush().
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
            self.finish()

    def force_close(self, code: int, text: str) -> None:
        """Server-side close (shutdown, admin): MQTT 5 clients hear why; the session
        (and its will) ends now."""
        if self.alive:
            reason = (ReasonCode.SERVER_SHUTTING_DOWN if "shutdown" in text
                      else ReasonCode.ADMINISTRATIVE_ACTION)
            self.proto.disconnect(reason, text)
            self.rules.end(time.time())
            self.finish()
