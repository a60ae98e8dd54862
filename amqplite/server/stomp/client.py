"""One STOMP connection: a trio shell on the sans-I/O ``StompConnection`` and the
``StompSession`` rules. Reader, writer and heart-beat timer; nothing else."""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
import time
from typing import TYPE_CHECKING

import trio

from amqplite import __version__
from amqplite.broker.model import Session
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.stomp import errors as stomp_errors
from amqplite.protocol.stomp.connection import StompConnection
from amqplite.protocol.stomp.events import ConnectRequested, DisconnectReceived, ProtocolError
from amqplite.sessions.stomp.session import StompSession

if TYPE_CHECKING:
    from amqplite.server.stomp.listener import StompListener

log = logging.getLogger("amqplite.stomp")

RECV_SIZE = 64 * 1024
#: a client's consumers stop receiving while this much is queued unsent to it
WRITE_HIGH_WATER = 4 * 1024 * 1024
#: after the connection ends, how long the writer may take to send what is queued
FINISH_TIMEOUT = 2.0
#: a DISCONNECT's RECEIPT waits for the commits before it, at most this many rounds
_DISCONNECT_ROUNDS = 20


class StompClient:
    """One STOMP connection."""

    def __init__(self, listener: StompListener, stream: trio.abc.Stream,
                 peer: tuple[str, int]) -> None:
        self.listener = listener
        self.broker = listener.broker
        self.stream = stream
        self.tls = isinstance(stream, trio.SSLStream)
        self.peer_host, self.peer_port = peer[0], peer[1]
        self.name = f"{self.peer_host}:{self.peer_port}"
        self.proto = StompConnection(listener.limits, trio.current_time())
        self.connected_at = time.time()
        self.bytes_in = 0
        self.bytes_out = 0
        self.alive = True
        self.rules: StompSession | None = None
        #: what the admin listing reads (the CONNECT's ``client-id``, if any)
        self.client_id = ""
        self._wake = trio.Event()
        self._timer_wake = trio.Event()
        self._finishing = False
        self._cancel: trio.CancelScope | None = None

    @property
    def session(self) -> Session | None:
        """The broker session (None before login): what the admin listing reads."""
        return None if self.rules is None else self.rules.session

    @property
    def protocol(self) -> str:
        return f"STOMP {self.proto.version or '1.0'}"

    @property
    def timeout(self) -> int:
        """The heart-beat we expect from the client, in seconds (0: none)."""
        return int(self.proto.receive_interval)

    # ------------------------------------------------------------ tasks
    async def run(self) -> None:
        self.listener.connections.add(self)
        try:
            async with trio.open_nursery() as nursery:
                self._cancel = nursery.cancel_scope
                nursery.start_soon(self._writer)
                nursery.start_soon(self._timers)
                nursery.start_soon(self._reader)
        except Exception:  # one bad connection never takes the broker down
            log.exception("STOMP connection %s crashed", self.name)
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
                if not persistence.has_capacity and self.rules is not None:
                    await persistence.wait_capacity()  # as RabbitMQ's alarms
                    proto.receive_data(b"", trio.current_time())  # our silence, not theirs
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

    async def _handle_events(self) -> None:
        proto = self.proto
        while (ev := proto.next_event()) is not None:
            rules = self.rules
            if type(ev) is ConnectRequested:
                self._connect(ev)
            elif type(ev) is ProtocolError:
                log.info("STOMP %s: %s: %s", self.name, ev.message, ev.detail.strip())
                self._finish()
            elif rules is not None:
                rules.handle(ev)
                if type(ev) is DisconnectReceived:
                    await self._disconnect(rules)
                    return
            if self._finishing:
                return
        if self.rules is not None and self.rules.held:
            await self.listener.committed()  # a RECEIPT means it is stored
            self.rules.release_held()
        if proto.closed:
            self._finish()

    async def _disconnect(self, rules: StompSession) -> None:
        """DISCONNECT: its RECEIPT once everything before it is confirmed, then close."""
        for _ in range(_DISCONNECT_ROUNDS):
            await self.listener.committed()
            rules.release_held()
            if not rules.receipts_pending:
                break
        self.proto.close()
        self._finish()

    def _connect(self, ev: ConnectRequested) -> None:
        listener = self.listener
        login = ev.login
        vhost = ev.host or listener.settings.stomp_default_vhost
        users = listener.users
        user = None if login is None else users.authenticate(login, ev.passcode or "",
                                                             self.peer_host)
        if user is None:
            name = login or ""
            line = users.failure_line(f"STOMP {self.name}", name, self.peer_host,
                                      time.monotonic())
            if line is not None:
                log.warning("%s", line)
            self.proto.reject(stomp_errors.access_refused(name))
            return
        assert login is not None
        try:
            self.broker.check_vhost_access(login, vhost)
        except AMQPError:
            log.warning("STOMP %s: user %r may not use vhost %r", self.name, login, vhost)
            self.proto.reject(stomp_errors.vhost_access_denied(vhost))
            return
        if listener.at_connection_limit():  # as AMQP's 530: the node's limit is reached
            log.warning("STOMP %s refused: connection limit (%d) is reached", self.name,
                        listener.settings.max_connections)
            self.proto.reject(stomp_errors.StompError(
                "Bad CONNECT", "connection refused: node connection limit "
                               f"({listener.settings.max_connections}) is reached\n"))
            return
        name = "session-" + secrets.token_urlsafe(16)
        self.rules = StompSession(self.broker, self.proto, user=login, vhost=vhost,
                                  peer=self.name, name=name, flush=self.flush,
                                  finish=self._finish)
        self.client_id = ev.headers.get("client-id", "")
        self.proto.accept(name, trio.current_time(), server=f"amqplite/{__version__}")
        self._timer_wake.set()  # the heart-beat deadlines start now

    async def _writer(self) -> None:
        """Sends what the protocol queued; once finishing, the rest, then FIN, then ends
        the connection's nursery."""
        while True:
            if not self._finishing:
                await self._wake.wait()
            self._wake = trio.Event()
            while True:
                data = self.proto.data_to_send(trio.current_time())
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
                    if isinstance(self.stream, trio.abc.HalfCloseableStream):  # not TLS
                        await self.stream.send_eof()
                assert self._cancel is not None
                self._cancel.cancel()
                return

    async def _timers(self) -> None:
        """The login timeout and heart-beats both ways (the protocol object keeps the
        clock; this task only wakes it at its deadline)."""
        proto = self.proto
        while not proto.closed:
            deadline = proto.deadline
            with trio.move_on_at(math.inf if deadline is None else deadline):
                await self._timer_wake.wait()
            self._timer_wake = trio.Event()
            if proto.check_timers(trio.current_time()):
                log.info("STOMP %s: %s", self.name, "no heart-beat from the client"
                         if self.rules is not None else "no CONNECT in time")
                self._finish()
                return
            if proto.pending_bytes():
                self._wake.set()

    # ------------------------------------------------------------ the end
    def _end_session(self) -> None:
        rules = self.rules
        if rules is not None and not rules.closed:
            self.listener.execute(rules.close)

    def force_close(self, text: str) -> None:
        """Shutdown: ERROR with the reason; the session ends now."""
        if self.rules is not None:
            self.rules.force_close(320, text)
            self._end_session()
        self._finish()

    def flush(self) -> None:
        self._wake.set()
        s = self.session
        if s is not None and s.writable and self.proto.pending_bytes() > WRITE_HIGH_WATER:
            # a slow reader: its consumers wait until the writer drains (as for AMQP)
            self.broker.set_writable(s, False)
