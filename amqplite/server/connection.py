"""One AMQP connection: a reader, a writer and a heartbeat task in their own nursery.

The reader feeds bytes to the sans-I/O ``ServerConnection`` and turns its
events into broker commands; the writer drains the protocol's out-buffer in
large coalesced writes; the heartbeat task sends and enforces heartbeats. A
crash inside one connection closes that connection with 541 and never
touches the others.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from typing import TYPE_CHECKING, Any

import trio

from amqplite.broker.effects import Deliver, NeedPageIn
from amqplite.broker.model import ChannelState, Session
from amqplite.protocol import methods as M
from amqplite.protocol.connection import ServerConnection
from amqplite.protocol.errors import AMQPError, ChannelError
from amqplite.protocol.events import (
    ChannelClosed,
    ChannelOpened,
    ConnectionClosed,
    ConnectionClosing,
    ConnectionOpened,
    ConnectionState,
    MethodReceived,
)
from amqplite.server.hotpath import publish_run, write_deliveries

if TYPE_CHECKING:
    from amqplite.server.app import Server

log = logging.getLogger("amqplite.connection")

#: Consumers on a connection stop receiving while its unsent bytes exceed this.
WRITE_HIGH_WATER = 4 * 1024 * 1024
#: Bytes asked for per read. recv() allocates this much before it shrinks to what
#: arrived: kept under glibc's default mmap threshold (128 KiB), a read costs
#: ~3 µs; at 256 KiB every read was an mmap + page faults + munmap (~16 µs).
RECV_SIZE = 128 * 1024 - 256
#: How long we wait for the peer's close-ok after sending connection.close.
CLOSE_OK_TIMEOUT = 3.0
#: After the close handshake: half-close and read (discarding) until the peer
#: closes, at most this long, so a peer still writing never gets a reset.
LINGER_TIMEOUT = 2.0
#: A refused login is answered this much later (RabbitMQ is slow to refuse too).
LOGIN_FAILURE_DELAY = 1.0

_HANDSHAKE_STATES = frozenset({
    ConnectionState.AWAITING_HEADER, ConnectionState.STARTING, ConnectionState.TUNING,
    ConnectionState.OPENING,
})


class AMQPConnection:
    def __init__(self, server: Server, stream: trio.abc.Stream, peer: tuple[str, int], *,
                 external_user: str | None = None) -> None:
        """``stream``: a socket or TLS stream; ``external_user``: a verified client
        certificate's user name (TLS only), which SASL EXTERNAL may log in as."""
        self.server = server
        self.broker = server.broker
        self.stream = stream
        self.peer_host, self.peer_port = peer[0], peer[1]
        self.name = f"{self.peer_host}:{self.peer_port}"
        s = server.settings
        self.proto = ServerConnection(
            server_properties=server.server_properties(),
            authenticate=self._authenticate,
            check_vhost=self._check_vhost,
            channel_max=s.channel_max,
            frame_max=s.frame_max,
            heartbeat=s.heartbeat,
            max_message_size=s.max_message_size,
            mechanisms=tuple(s.auth_mechanisms),
            external_user=external_user,
        )
        #: the store bridge (the server runs, so it exists): read per publish
        self._persist = server.persist
        self.session: Session | None = None
        self.channels: dict[int, ChannelState] = {}
        self.writable = True
        self.alive = True
        self.connected_at = time.time()
        self.last_recv = time.monotonic()
        self.last_send = time.monotonic()
        self.bytes_in = 0
        self.bytes_out = 0
        self._wake = trio.Event()
        self._finishing = False
        self._writer_done = trio.Event()
        self._hb_wake = trio.Event()
        self._closing_deadline: float | None = None
        self._linger_deadline: float | None = None
        self._cancel: trio.CancelScope | None = None
        self._user: Any = None
        #: bytes handed to send_all and not yet written
        self._in_flight = 0
        #: a plain TCP socket's descriptor: flush() writes to it straight from the
        #: task that produced the bytes, without a wake-up of the writer (-1: TLS)
        self._fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else -1
        #: the part of a direct write the socket did not take: the writer sends it first
        self._carry: bytes | memoryview = b""
        #: the writer is between a wake-up and its next wait: it owns the socket
        self._writer_busy = False
        self._drained = trio.Event()
        self._reading_paused = False
        #: passed connection.open: counts against max_connections
        self.admitted = False
        #: alarm epoch of this connection's last publish: store back-pressure and
        #: alarms stop reading from it only if it published during the alarm
        self._publish_epoch = -1
        #: after a failed login nothing is sent before this (trio) time
        self._refused_until = 0.0

    # ------------------------------------------------------------- auth
    def _authenticate(self, username: str, password: str | None) -> bool:
        users = self.server.users
        if password is None:  # EXTERNAL
            user = users.identify(username, self.peer_host)
        elif self.server.link_login(password, self.peer_host):  # a link as its definer
            user = users.get(username)
        else:
            user = users.authenticate(username, password, self.peer_host)
        self._user = user
        self.server.counters.login(user is not None)
        if user is None:
            # what "For details see the broker logfile" points to: one line, the name
            # escaped, rate-limited per peer; the refusal waits LOGIN_FAILURE_DELAY
            line = users.failure_line(
                self.name, username, self.peer_host, time.monotonic(),
                refused="client certificate" if password is None else "")
            if line is not None:
                log.warning("%s", line)
            self._refused_until = trio.current_time() + LOGIN_FAILURE_DELAY
        return user is not None

    def _check_vhost(self, username: str, vhost: str) -> bool:
        """Grant the vhost within its and the node's connection limits, at
        connection.open as RabbitMQ (530, its texts): connections still in their
        handshake do not count, so half-open sockets cannot lock clients out."""
        self.broker.check_vhost_access(username, vhost)  # 530 in RabbitMQ's words
        if (vlimit := self.server.vhost_connection_limit(vhost)) is not None:
            log.warning("%s refused: vhost '%s' connection limit (%d) is reached",
                        self.name, vhost, vlimit)
            raise AMQPError(530, f"NOT_ALLOWED - access to vhost '{vhost}' refused for user "
                                 f"'{username}': connection limit ({vlimit}) is reached", 10, 40)
        limit = self.server.settings.max_connections
        if self.server.at_connection_limit():  # MQTT clients count too
            log.warning("%s refused: connection limit (%d) is reached", self.name, limit)
            raise AMQPError(530, "NOT_ALLOWED - connection refused: node connection limit "
                                 f"({limit}) is reached", 10, 40)
        self.admitted = True
        return True

    # ------------------------------------------------------------- tasks
    async def run(self) -> None:
        self.server.connections.add(self)
        try:
            async with trio.open_nursery() as nursery:
                self._cancel = nursery.cancel_scope
                nursery.start_soon(self._writer)
                nursery.start_soon(self._heartbeat)
                try:
                    await self._reader()
                finally:
                    # let the writer send what is queued (e.g. close-ok), then stop
                    self._finishing = True
                    self._wake.set()
                    with trio.move_on_after(1):
                        await self._writer_done.wait()
                    nursery.cancel_scope.cancel()
        except Exception:  # one bad connection never takes the broker down
            log.exception("connection %s crashed", self.name)
        finally:
            self.alive = False
            self.server.connections.discard(self)
            self._drop_session()
            with trio.move_on_after(1):
                await self.stream.aclose()

    async def _reader(self) -> None:
        proto = self.proto
        persistence = self._persist
        interpret = self.server.interpret
        fd = self._fd
        wait_readable = trio.lowlevel.wait_readable
        # plain TCP is read straight from its socket (ConnectionShell._reader says why),
        # inline: each coroutine frame in between is resumed on every wake-up
        was_full = True
        while self.alive:
            if (self._linger_deadline is None and not persistence.has_capacity
                    and self._publish_epoch == persistence.alarm_epoch):
                # as RabbitMQ's alarms: publishers wait, consumers keep acking
                await self._paused(self._wait_unblocked(persistence))
            if self._linger_deadline is None and self._unsent() > WRITE_HIGH_WATER:
                # a publisher that never reads what it is owed (confirms): stop reading
                await self._paused(self._wait_drained())
            if self.session is not None and self.session.congested is not None:
                await self._paused(self.server.flow.wait(self.session))  # see flow.py
            try:
                if fd < 0:
                    data = await self.stream.receive_some(RECV_SIZE)
                else:
                    if was_full:
                        await trio.lowlevel.checkpoint()
                    else:
                        await wait_readable(fd)
                    try:
                        data = os.read(fd, RECV_SIZE)
                    except BlockingIOError:  # woken without data (rare): wait again
                        was_full = False
                        continue
                    was_full = len(data) == RECV_SIZE
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return
            if not data:
                return
            self.last_recv = time.monotonic()
            self.bytes_in += len(data)
            proto.receive_data(data)
            if self._linger_deadline is not None:  # all discarded, closes answered
                self.flush()
                continue
            while True:  # after a connection error, the events the close leaves
                try:
                    done = await self._handle_events()
                    break
                except AMQPError as exc:
                    self._connection_error(exc)
                except Exception as exc:
                    log.exception("internal error on %s", self.name)
                    self._connection_error(AMQPError(541, f"INTERNAL_ERROR - {exc!r}"))
            # the outcome's frames (returns, confirms, deliveries) join this read's
            # replies in order and go out before the store hand-over: a consumer
            # acking each batch otherwise waits for its next deliveries behind the
            # encoding of its own acks. Nothing queued: nothing to flush
            interpret(flush=False)
            if proto.pending_bytes():
                self.flush()
            persistence.flush()
            if proto.pending_bytes():
                self.flush()
            if done:
                self._linger()

    def _unsent(self) -> int:
        """Bytes owed to the client: queued in the protocol plus the write in flight."""
        return self.proto.pending_bytes() + self._in_flight + len(self._carry)

    async def _paused(self, wait: Any) -> None:
        """Not reading on purpose: the client's silence is ours, not a missed heartbeat."""
        self._reading_paused = True
        try:
            await wait
        finally:
            self._reading_paused = False
            self.last_recv = time.monotonic()

    async def _wait_drained(self) -> None:
        while self.alive and self._unsent() > WRITE_HIGH_WATER // 2:
            self._drained = trio.Event()
            self._wake.set()
            await self._drained.wait()

    async def _wait_unblocked(self, persistence: Any) -> None:
        """The store is far behind: stop reading, and tell clients that understand it.

        RabbitMQ sends connection.blocked to publishers under resource alarms;
        clients with the ``connection.blocked`` capability surface it."""
        tell = self.session is not None and bool(
            self.proto.client_capabilities.get("connection.blocked"))
        if tell:
            self.proto.send_method(0, M.ConnectionBlocked(reason=persistence.block_reason))
            self._wake_writer()
        await persistence.wait_capacity()
        if tell and self.alive:
            self.proto.send_method(0, M.ConnectionUnblocked())
            self._wake_writer()

    async def _handle_events(self) -> bool:
        """Process every complete event; True when the connection is finished."""
        proto = self.proto
        while True:
            # publishes go to the broker natively; next_event then never returns one
            if publish_run(proto, self.broker, self.channels, self._channel_error):
                self._publish_epoch = self._persist.alarm_epoch
            if proto.close_pending():
                # what earlier frames are owed (returns, confirms) goes out before close-ok
                self.server.interpret(flush=False)
            ev = proto.next_event()
            if ev is None:
                return False
            if isinstance(ev, MethodReceived):
                if ev.channel == 0:
                    self._on_connection_method(ev.method)
                else:
                    await self._on_method(ev.channel, ev.method)
            elif isinstance(ev, ChannelOpened):
                assert self.session is not None  # closing discards later opens
                self.channels[ev.channel] = self.broker.open_channel(self.session, ev.channel)
            elif isinstance(ev, ChannelClosed):
                self._drop_channel(ev.channel)
            elif isinstance(ev, ConnectionOpened):
                self.session = self.broker.open_session(ev.username, ev.vhost, self.name)
                self.server.counters.connections_opened += 1
                self.session.client_properties = dict(ev.client_properties or {})
                self.session.transport = self
                self._hb_wake.set()  # heartbeats, if negotiated, start now
            elif isinstance(ev, ConnectionClosing):
                if self._closing_deadline is None:
                    self._closing_deadline = time.monotonic() + CLOSE_OK_TIMEOUT
                    self._hb_wake.set()
                self._drop_session()
            elif isinstance(ev, ConnectionClosed):
                self._drop_session()
                if self._refused_until:  # slows password guessing; others are not held up
                    await trio.sleep_until(self._refused_until)
                return True

    async def _writer(self) -> None:
        try:
            await self._write_loop()
        finally:
            self._writer_done.set()

    async def _write_loop(self) -> None:
        proto = self.proto
        data: bytes | memoryview
        while True:
            if self._finishing:
                self._writer_busy = True
                data = bytes(self._carry) + proto.data_to_send()
                self._carry = b""
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError,
                                         OSError):
                    if data:
                        await self.stream.send_all(data)
                    if (self._linger_deadline is not None
                            and isinstance(self.stream, trio.abc.HalfCloseableStream)):
                        await self.stream.send_eof()  # FIN after the last frame (not TLS)
                return
            self._writer_busy = False
            await self._wake.wait()
            self._wake = trio.Event()
            self._writer_busy = True
            while True:
                if self._refused_until:  # a failed login: the refusal goes out late
                    await trio.sleep_until(self._refused_until)
                if self._carry:
                    data, self._carry = self._carry, b""
                else:
                    data = proto.data_to_send()
                if not data:
                    break
                self._in_flight = len(data)
                try:
                    await self.stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    self.alive = False
                    if self._cancel is not None:
                        self._cancel.cancel()
                    return
                finally:
                    self._in_flight = 0
                self.bytes_out += len(data)
                self.last_send = time.monotonic()
                if proto.pending_bytes() <= WRITE_HIGH_WATER // 2:
                    self._drained.set()
            self._drained.set()
            if not self.writable:
                self.writable = True
                if self.session is not None:
                    self.server.execute(self.broker.set_writable, self.session, True)

    def flush(self) -> None:
        """Send what is queued now, from the task that queued it, when the socket
        takes it: a message to an idle connection then costs one send() and no
        wake-up of its writer task. The writer takes over whatever is left (a
        full socket, TLS, a delayed refusal, closing, a backed-up consumer)."""
        fd = self._fd
        if (fd < 0 or self._writer_busy or self._carry or self._finishing
                or self._refused_until or not self.alive or not self.writable):
            self._wake_writer()
            return
        data = self.proto.data_to_send()
        if not data:
            return
        try:
            n = os.write(fd, data)
        except BlockingIOError:
            n = 0
        except OSError:  # as the writer's failed send: the connection is gone
            self.alive = False
            if self._cancel is not None:
                self._cancel.cancel()
            return
        if n:
            self.bytes_out += n
            self.last_send = time.monotonic()
        if n < len(data):
            self._carry = memoryview(data)[n:]  # no copy of what is left
            self._wake_writer()
        elif self._reading_paused:  # only _wait_drained waits on it (no call per delivery)
            self._drained.set()

    def wake(self) -> None:
        """Let the writer task send what is queued (coalescing with what follows)."""
        self._wake_writer()

    def _wake_writer(self) -> None:
        self._wake.set()
        if self.writable and self.proto.pending_bytes() > WRITE_HIGH_WATER:
            self.writable = False
            if self.session is not None:
                self.broker.set_writable(self.session, False)  # no effects: nothing to carry out

    async def _heartbeat(self) -> None:
        """Heartbeats, plus every deadline of the connection's life: the handshake,
        the wait for close-ok, and the lingering close."""
        handshake_deadline = time.monotonic() + self.server.settings.handshake_timeout
        while True:
            hb = self.proto.heartbeat if self.session is not None else 0
            # without heartbeats and deadlines there is nothing to time: sleep until
            # woken (a timer per idle connection costs CPU by the thousand)
            delay = max(hb / 2, 0.5) if hb else math.inf
            deadline = self._linger_deadline or self._closing_deadline
            if deadline is None and self.proto.state in _HANDSHAKE_STATES:
                deadline = handshake_deadline
            if deadline is not None:
                delay = min(delay, max(0.0, deadline - time.monotonic()) + 0.01)
            with trio.move_on_after(delay):
                await self._hb_wake.wait()
            self._hb_wake = trio.Event()
            now = time.monotonic()
            # Checked in this order: a connection that is closing (forced close
            # included, which drops the session) is never mistaken for one that
            # did not finish its handshake.
            if self._linger_deadline is not None:
                if now > self._linger_deadline:
                    break
                continue
            if self._closing_deadline is not None:
                if now > self._closing_deadline:
                    log.info("%s: no close-ok within %ss", self.name, CLOSE_OK_TIMEOUT)
                    self._linger()
                continue
            if self.proto.state in _HANDSHAKE_STATES and now > handshake_deadline:
                log.info("%s: no handshake within %ss", self.name,
                         self.server.settings.handshake_timeout)
                break
            if hb:
                if now - self.last_recv > 2 * hb and not self._reading_paused:
                    log.info("%s: missed heartbeats, closing", self.name)
                    break
                if now - self.last_send >= hb / 2:
                    self.proto.send_heartbeat()
                    self.flush()  # written from here: no wake-up of the writer
        self.alive = False
        if self._cancel is not None:
            self._cancel.cancel()

    # ----------------------------------------------------------- cleanup
    def _drop_channel(self, number: int) -> None:
        ch = self.channels.pop(number, None)
        if ch is not None:
            self.server.execute(self.broker.close_channel, ch)

    def _drop_session(self) -> None:
        self.admitted = False  # closing: its slot is free for the next client
        if self.session is not None:
            s, self.session = self.session, None
            self.server.counters.connections_closed += 1
            self.channels.clear()
            self.server.execute(self.broker.close_session, s)

    def _linger(self) -> None:
        """The close handshake is over (or its wait timed out): read and discard
        (closes answered) until the peer closes or LINGER_TIMEOUT passes, so a peer
        still writing gets no reset (which loses its unread close-ok). FIN at once
        after our close (RabbitMQ resets); none after the client's, as RabbitMQ."""
        if self._linger_deadline is not None:
            return
        self._linger_deadline = time.monotonic() + LINGER_TIMEOUT
        self._closing_deadline = None
        self._drop_session()
        if not self.proto.peer_closed:
            self._finishing = True  # the writer sends what is queued, then FIN
        self._wake.set()
        self._hb_wake.set()

    def force_close(self, code: int, text: str) -> None:
        """Server-initiated close (shutdown, admin): connection.close then wait for close-ok."""
        if self.alive and self._linger_deadline is None and self._closing_deadline is None:
            self.proto.close(code, text)
            self._closing_deadline = time.monotonic() + CLOSE_OK_TIMEOUT
            self._hb_wake.set()
            self._drop_session()
            self._wake_writer()

    def _connection_error(self, exc: AMQPError) -> None:
        self.proto.close(exc.reply_code, exc.reply_text, exc.class_id, exc.method_id)
        self._closing_deadline = time.monotonic() + CLOSE_OK_TIMEOUT
        self._hb_wake.set()
        self._drop_session()

    def _channel_error(self, number: int, exc: ChannelError) -> None:
        self.proto.close_channel(number, exc.reply_code, exc.reply_text, exc.class_id,
                                 exc.method_id)
        self._drop_channel(number)

    # ------------------------------------------------------- broker -> wire
    # These queue frames only; the interpreter calls flush() (or wake()) once per
    # connection after the whole Outcome, so a batch of deliveries is one write.
    def deliver_run(self, run: list[Deliver]) -> None:
        """Consecutive Deliver effects to this connection: one native call for all."""
        if self.alive:
            write_deliveries(self.proto, self.channels, run)

    def deliver_stream(self, ch: ChannelState, consumer_tag: str, first_tag: int,
                       entries: list[Any]) -> None:
        """Stream entries (``StreamEntry``), written from their stored records."""
        if not self.alive or ch.number not in self.channels:
            return
        self.proto.send_stream_deliveries(ch.number, consumer_tag, first_tag, entries)

    def send_return(self, ch: ChannelState, code: int, text: str, message: Any) -> None:
        if not self.alive or ch.number not in self.channels:
            return
        self.proto.send_return(ch.number, code, text, message.exchange, message.routing_key,
                               message.properties_raw, message.body)

    def send_cancel(self, ch: ChannelState, consumer_tag: str) -> None:
        if (not self.alive or ch.number not in self.channels
                or not self.proto.client_capabilities.get("consumer_cancel_notify")):
            return  # RabbitMQ tells only clients announcing consumer_cancel_notify
        self.proto.send_method(ch.number, M.BasicCancel(consumer_tag=consumer_tag, no_wait=True))

    def send_confirm(self, ch: ChannelState, upto: int, multiple: bool, nack: bool) -> None:
        if not self.alive or self.channels.get(ch.number) is not ch:
            return
        if nack:
            self.proto.send_method(ch.number, M.BasicNack(delivery_tag=upto, multiple=multiple,
                                                          requeue=False))
        else:
            self.proto.send_method(ch.number, M.BasicAck(delivery_tag=upto, multiple=multiple))

    # ------------------------------------------------------- wire -> broker
    # (publishes: server/hotpath.py's publish_run, from _handle_events)
    def _on_connection_method(self, m: Any) -> None:
        """Channel-0 methods the protocol layer leaves to us (connection.update-secret).

        RabbitMQ's internal user database keeps the login it checked at start-ok
        and answers update-secret-ok whatever the new secret is; OAuth-style
        clients wait for that answer before they carry on.
        """
        if isinstance(m, M.ConnectionUpdateSecret):
            self.proto.send_method(0, M.ConnectionUpdateSecretOk())

    async def _on_method(self, number: int, m: Any) -> None:
        ch = self.channels.get(number)
        if ch is None:
            return
        handler = _HANDLERS.get(type(m))
        try:
            if handler is None:
                raise AMQPError(540, f"NOT_IMPLEMENTED - method {type(m).__name__} not supported",
                                m.CLASS_ID, m.METHOD_ID)
            await handler(self, ch, m)
        except ChannelError as exc:
            self._channel_error(number, exc)

    def _reply(self, ch: ChannelState, method: Any) -> None:
        self.proto.send_method(ch.number, method)

    async def _durable(self, ch: ChannelState) -> None:
        """Hold a metadata reply (declare-ok, bind-ok...) until its change has committed.

        A client told "declared" must find the queue after a restart; while the
        disk refuses writes the reply waits (the writer retries). Later frames
        of this connection wait too, so replies keep their order. With nothing
        to write (the queue exists) it still waits while metadata of a failed
        commit is written again: the client retrying after a 541 is told
        "declared" only once the store has the queue.
        """
        if not self.broker.outbox.pending() and not self._persist.repairing:
            return  # log rows only, or nothing
        self.server.interpret(flush=False)
        self._wake_writer()
        err = await self._persist.own_commit()
        if err is not None:
            raise ChannelError(541, f"INTERNAL_ERROR - store commit failed: {err}", 0, 0)

    # ---------------------------------------------------------- handlers
    async def _exchange_declare(self, ch: ChannelState, m: Any) -> None:
        self.broker.exchange_declare(
            ch, m.exchange, m.type, passive=m.passive, durable=m.durable,
            auto_delete=m.auto_delete, internal=m.internal, arguments=m.arguments,
        )
        await self._durable(ch)
        if not m.no_wait:
            self._reply(ch, M.ExchangeDeclareOk())

    async def _exchange_delete(self, ch: ChannelState, m: Any) -> None:
        self.broker.exchange_delete(ch, m.exchange, if_unused=m.if_unused)
        await self._durable(ch)
        if not m.no_wait:
            self._reply(ch, M.ExchangeDeleteOk())

    async def _exchange_bind(self, ch: ChannelState, m: Any) -> None:
        self.broker.exchange_bind(ch, m.destination, m.source, m.routing_key, m.arguments)
        await self._durable(ch)
        if not m.no_wait:
            self._reply(ch, M.ExchangeBindOk())

    async def _exchange_unbind(self, ch: ChannelState, m: Any) -> None:
        self.broker.exchange_bind(ch, m.destination, m.source, m.routing_key, m.arguments,
                                  unbind=True)
        await self._durable(ch)
        if not m.no_wait:
            self._reply(ch, M.ExchangeUnbindOk())

    async def _queue_declare(self, ch: ChannelState, m: Any) -> None:
        name, count, consumers = self.broker.queue_declare(
            ch, m.queue, passive=m.passive, durable=m.durable, exclusive=m.exclusive,
            auto_delete=m.auto_delete, arguments=m.arguments,
        )
        await self._durable(ch)
        if not m.no_wait:
            self._reply(ch, M.QueueDeclareOk(queue=name, message_count=count,
                                             consumer_count=consumers))

    async def _queue_bind(self, ch: ChannelState, m: Any) -> None:
        self.broker.queue_bind(ch, m.queue, m.exchange, m.routing_key, m.arguments)
        await self._durable(ch)
        if not m.no_wait:
            self._reply(ch, M.QueueBindOk())

    async def _queue_unbind(self, ch: ChannelState, m: Any) -> None:
        self.broker.queue_bind(ch, m.queue, m.exchange, m.routing_key, m.arguments, unbind=True)
        await self._durable(ch)
        self._reply(ch, M.QueueUnbindOk())

    async def _queue_purge(self, ch: ChannelState, m: Any) -> None:
        n = self.broker.queue_purge(ch, m.queue)
        await self._durable(ch)
        if not m.no_wait:
            self._reply(ch, M.QueuePurgeOk(message_count=n))

    async def _queue_delete(self, ch: ChannelState, m: Any) -> None:
        self.server.interpret(flush=False)  # what earlier frames are owed goes first
        n = self.broker.queue_delete(ch, m.queue, if_unused=m.if_unused, if_empty=m.if_empty)
        cancels = self.broker.take_effects()  # basic.cancel after delete-ok, as RabbitMQ
        try:
            await self._durable(ch)
            if not m.no_wait:
                self._reply(ch, M.QueueDeleteOk(message_count=n))
        finally:  # the queue is gone even if its commit failed
            self.broker.effects.extend(cancels)

    async def _basic_qos(self, ch: ChannelState, m: Any) -> None:
        self.broker.basic_qos(ch, m.prefetch_size, m.prefetch_count, m.global_)
        self._reply(ch, M.BasicQosOk())

    async def _basic_consume(self, ch: ChannelState, m: Any) -> None:
        tag = self.broker.basic_consume(
            ch, m.queue, m.consumer_tag, no_ack=m.no_ack, exclusive=m.exclusive,
            arguments=m.arguments,
        )
        if not m.no_wait:
            self._reply(ch, M.BasicConsumeOk(consumer_tag=tag))
        self.broker.start_consumer(ch, tag)

    async def _basic_cancel(self, ch: ChannelState, m: Any) -> None:
        self.broker.basic_cancel(ch, m.consumer_tag)
        if not m.no_wait:
            self._reply(ch, M.BasicCancelOk(consumer_tag=m.consumer_tag))

    async def _basic_get(self, ch: ChannelState, m: Any) -> None:
        while True:
            res = self.broker.basic_get(ch, m.queue, m.no_ack)
            if not isinstance(res, NeedPageIn):
                break
            self.server.interpret()  # starts the page-in
            await self.server.wait_paged(ch.session.vhost, m.queue)
        if res is None:
            self._reply(ch, M.BasicGetEmpty())
            return
        msg = res.message
        assert msg.body is not None  # basic_get pages the head in before it answers
        self.proto.send_get_ok(ch.number, res.delivery_tag, res.redelivered, msg.exchange,
                               msg.routing_key, res.message_count,
                               res.properties or msg.properties_raw, msg.body)

    async def _basic_ack(self, ch: ChannelState, m: Any) -> None:
        self.broker.basic_ack(ch, m.delivery_tag, m.multiple)

    async def _basic_reject(self, ch: ChannelState, m: Any) -> None:
        self.broker.basic_reject(ch, m.delivery_tag, m.requeue)

    async def _basic_nack(self, ch: ChannelState, m: Any) -> None:
        self.broker.basic_nack(ch, m.delivery_tag, m.multiple, m.requeue)

    async def _basic_recover(self, ch: ChannelState, m: Any) -> None:
        self.broker.basic_recover(ch, m.requeue)
        self._reply(ch, M.BasicRecoverOk())

    async def _basic_recover_async(self, ch: ChannelState, m: Any) -> None:
        self.broker.basic_recover(ch, m.requeue)

    async def _channel_flow(self, ch: ChannelState, m: Any) -> None:
        self.broker.channel_flow(ch, m.active)
        self._reply(ch, M.ChannelFlowOk(active=m.active))

    async def _channel_flow_ok(self, ch: ChannelState, m: Any) -> None:
        pass

    async def _confirm_select(self, ch: ChannelState, m: Any) -> None:
        self.broker.confirm_select(ch, settle_early=True)  # RabbitMQ's rule: see confirms.py
        if not m.no_wait:
            self._reply(ch, M.ConfirmSelectOk())

    async def _tx_select(self, ch: ChannelState, m: Any) -> None:
        self.broker.tx_select(ch)
        self._reply(ch, M.TxSelectOk())

    async def _tx_commit(self, ch: ChannelState, m: Any) -> None:
        stored = self.broker.tx_commit(ch)
        # RabbitMQ sends the transaction's basic.returns before commit-ok
        self.server.interpret(flush=False)
        if stored:
            number = ch.number

            def done(err: BaseException | None) -> None:
                if self.alive and self.channels.get(number) is ch:
                    if err is None:
                        self.proto.send_method(number, M.TxCommitOk())
                    else:
                        self._channel_error(number, ChannelError(
                            541, f"INTERNAL_ERROR - commit failed: {err}", 90, 20))
                    self._wake_writer()

            self._persist.add_waiter(done)
        else:
            self._reply(ch, M.TxCommitOk())

    async def _tx_rollback(self, ch: ChannelState, m: Any) -> None:
        self.broker.tx_rollback(ch)
        self._reply(ch, M.TxRollbackOk())


_HANDLERS: dict[type, Any] = {
    M.ExchangeDeclare: AMQPConnection._exchange_declare,
    M.ExchangeDelete: AMQPConnection._exchange_delete,
    M.ExchangeBind: AMQPConnection._exchange_bind,
    M.ExchangeUnbind: AMQPConnection._exchange_unbind,
    M.QueueDeclare: AMQPConnection._queue_declare,
    M.QueueBind: AMQPConnection._queue_bind,
    M.QueueUnbind: AMQPConnection._queue_unbind,
    M.QueuePurge: AMQPConnection._queue_purge,
    M.QueueDelete: AMQPConnection._queue_delete,
    M.BasicQos: AMQPConnection._basic_qos,
    M.BasicConsume: AMQPConnection._basic_consume,
    M.BasicCancel: AMQPConnection._basic_cancel,
    M.BasicGet: AMQPConnection._basic_get,
    M.BasicAck: AMQPConnection._basic_ack,
    M.BasicReject: AMQPConnection._basic_reject,
    M.BasicNack: AMQPConnection._basic_nack,
    M.BasicRecover: AMQPConnection._basic_recover,
    M.BasicRecoverAsync: AMQPConnection._basic_recover_async,
    M.ChannelFlow: AMQPConnection._channel_flow,
    M.ChannelFlowOk: AMQPConnection._channel_flow_ok,
    M.ConfirmSelect: AMQPConnection._confirm_select,
    M.TxSelect: AMQPConnection._tx_select,
    M.TxCommit: AMQPConnection._tx_commit,
    M.TxRollback: AMQPConnection._tx_rollback,
}
