"""A trio AMQP 0-9-1 client connection for links: one socket, the ``client_protocol`` state
machine, a reader task and heartbeats, in a nursery the caller owns.

Only what a shovel needs: synchronous calls on a channel (one at a time per
channel), publishes, acks, and a stream of deliveries and confirms. Any
channel or connection close by the peer ends the connection with
:class:`ProtocolFailure` carrying the peer's reply code and text; the
shovel then reconnects from scratch, which is how RabbitMQ's shovels recover.
"""

from __future__ import annotations

import errno
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress

import attrs
import trio

from amqplite.links.client_protocol import (
    ClientProtocol,
    ContentIn,
    Event,
    MethodIn,
    PeerClosed,
    ProtocolFailure,
)
from amqplite.links.uri import Endpoint
from amqplite.protocol.methods import (
    BasicAck,
    BasicCancel,
    BasicNack,
    ChannelClose,
    ChannelCloseOk,
    ConnectionBlocked,
    ConnectionClose,
    ConnectionUnblocked,
    Method,
)

#: deliveries the reader may hand over before the link takes them: one read's worth
#: passes without a task switch per message (the source's prefetch bounds them too)
DELIVERY_BUFFER = 512


@attrs.frozen
class Confirm:
    """A publisher confirm: ``ack`` False for a nack."""

    delivery_tag: int
    multiple: bool
    ack: bool


def tls_context(ep: Endpoint) -> ssl.SSLContext:
    """The client context for amqps://, from RabbitMQ's URI query parameters."""
    ctx = ssl.create_default_context(cafile=ep.cacertfile)
    if ep.certfile:
        ctx.load_cert_chain(ep.certfile, ep.keyfile)
    if not ep.verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class ChannelClosed(ProtocolFailure):
    """The peer closed the channel of a call (404 NOT_FOUND for a passive declare...)."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{code} {text}")
        self.code = code


class Connection:
    """An open client connection; build it with :func:`connect`."""

    def __init__(self, stream: trio.abc.Stream, proto: ClientProtocol) -> None:
        self._stream = stream
        self._proto = proto
        self._send_lock = trio.Lock()
        self._replies: dict[int, trio.MemorySendChannel[MethodIn]] = {}
        self._reply_rx: dict[int, trio.MemoryReceiveChannel[MethodIn]] = {}
        self._call_locks: dict[int, trio.Lock] = {}
        send, self.deliveries = trio.open_memory_channel[ContentIn](DELIVERY_BUFFER)
        self._deliveries_tx = send
        csend, self.confirms = trio.open_memory_channel[Confirm](float("inf"))
        self._confirms_tx = csend
        self._last_rx = trio.current_time()
        self._failed: BaseException | None = None
        self._holding = False
        #: the peer blocked our publishes (connection.blocked)
        self.blocked = trio.Event()
        self.unblocked = trio.Event()
        self.unblocked.set()

    @property
    def server_properties(self) -> dict[str, object]:
        """What the peer announced in connection.start (``cluster_name``...)."""
        return self._proto.server_properties

    async def _flush(self) -> None:
        data = self._proto.data_to_send()
        if data:
            async with self._send_lock:
                await self._stream.send_all(data)

    # ---------------------------------------------------------------- channel ops
    async def call(self, channel: int, method: Method) -> Method:
        """Send a synchronous method and return the reply."""
        if channel not in self._replies:
            tx, rx = trio.open_memory_channel[MethodIn](1)
            self._replies[channel], self._reply_rx[channel] = tx, rx
            self._call_locks[channel] = trio.Lock()
        async with self._call_locks[channel]:
            self._proto.send(channel, method)
            await self._flush()
            try:
                reply = await self._reply_rx[channel].receive()
            except trio.EndOfChannel:
                raise ProtocolFailure(str(self._failed or "connection closed")) from None
        if isinstance(reply.method, ChannelClose):
            raise ChannelClosed(reply.method.reply_code, str(reply.method.reply_text))
        return reply.method

    async def send(self, channel: int, method: Method, *, flush: bool = True) -> None:
        """Send an asynchronous method (basic.ack, basic.nack, ...); ``flush=False``
        leaves it buffered until the next :meth:`flush` (one write for many)."""
        self._proto.send(channel, method)
        if flush:
            await self._flush()

    async def publish(self, channel: int, method: Method, properties: bytes,
                      body: bytes, *, flush: bool = True) -> None:
        if not self.unblocked.is_set():  # (wait() checkpoints even when set)
            await self.unblocked.wait()
        self._proto.publish(channel, method, properties, body)
        if flush:
            await self._flush()

    async def flush(self) -> None:
        """Write what is buffered."""
        await self._flush()

    async def close(self) -> None:
        """Close politely (shielded, at most a second: this also runs when the link is
        cancelled), then drop the socket whatever happened, so the peer requeues
        what we had not acked. Nothing here raises Cancelled: :func:`connect` calls
        this in a ``finally`` inside its cancelled nursery, where a Cancelled would
        replace (and so swallow) the error that ended the link."""
        with trio.CancelScope(shield=True):
            try:
                with trio.move_on_after(1):
                    self._proto.send(0, ConnectionClose(200, "goodbye"))
                    with suppress(trio.BrokenResourceError, trio.ClosedResourceError,
                                  OSError, trio.BusyResourceError):
                        await self._flush()
            finally:
                await trio.aclose_forcefully(self._stream)

    # ---------------------------------------------------------------- tasks
    async def run(self) -> None:
        """Read and dispatch until the peer closes; then raise ProtocolFailure."""
        try:
            async with trio.open_nursery() as n:
                if self._proto.heartbeat:
                    n.start_soon(self._heartbeats, self._proto.heartbeat)
                await self._read()
        except BaseException as exc:
            self._failed = exc
            raise
        finally:
            for tx in self._replies.values():
                tx.close()
            self._deliveries_tx.close()
            self._confirms_tx.close()

    async def _read(self) -> None:
        while True:
            try:
                data = await self._stream.receive_some(65536)
            except (trio.BrokenResourceError, OSError) as exc:
                raise ProtocolFailure(f"connection lost: {exc}") from None
            if not data:
                raise ProtocolFailure("connection closed by the peer")
            self._last_rx = trio.current_time()
            try:
                events = self._proto.feed(data)
            finally:
                await self._flush()
            for ev in events:
                await self._dispatch(ev)
            await self._flush()  # close-oks the dispatch queued

    async def _dispatch(self, ev: Event) -> None:
        if isinstance(ev, ContentIn):
            try:
                self._deliveries_tx.send_nowait(ev)
                return
            except trio.WouldBlock:
                pass
            # while we hold a delivery back (the other end is slow or blocked) we read
            # nothing, so the peer's heartbeats count as seen meanwhile
            self._holding = True
            try:
                await self._deliveries_tx.send(ev)
            finally:
                self._holding = False
                self._last_rx = trio.current_time()
        elif isinstance(ev, MethodIn):
            m = ev.method
            if isinstance(m, BasicAck | BasicNack):
                self._confirms_tx.send_nowait(Confirm(m.delivery_tag, m.multiple,
                                                      isinstance(m, BasicAck)))
            elif isinstance(m, ChannelClose):
                self._proto.send(ev.channel, ChannelCloseOk())
                lock = self._call_locks.get(ev.channel)
                if lock is None or not lock.locked():  # nobody to tell: the link fails
                    raise ProtocolFailure(f"{m.reply_code} {m.reply_text}")
                self._replies[ev.channel].send_nowait(ev)
            elif isinstance(m, BasicCancel):
                raise ProtocolFailure("the source broker cancelled the consumer "
                                      "(its queue was deleted?)")
            elif isinstance(m, ConnectionBlocked):
                self.unblocked = trio.Event()
            elif isinstance(m, ConnectionUnblocked):
                self.unblocked.set()
            elif ev.channel in self._replies:
                self._replies[ev.channel].send_nowait(ev)

    async def _heartbeats(self, interval: int) -> None:
        while True:
            await trio.sleep(interval / 2)
            if not self._holding and trio.current_time() - self._last_rx > interval * 2:
                raise ProtocolFailure(f"missed heartbeats from the peer ({interval}s)")
            self._proto.heartbeat_frame()
            await self._flush()


class ConnectFailure(ProtocolFailure):
    """A connection that could not be opened, in plain words naming the host and port
    (what a link's status, the CLI and the log show); ``kind`` is one of
    :data:`KINDS`, for code that must tell them apart."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(text)
        self.kind = kind


#: what can go wrong opening a link's connection
KINDS = ("refused", "unreachable", "timed out", "tls", "authentication failed",
         "vhost not found", "vhost refused", "closed", "protocol")


def where(host: str, port: int) -> str:
    """``host:port`` as people write it (an IPv6 address in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _leaves(exc: BaseException) -> list[BaseException]:
    """The errors under ``exc``: trio's open_tcp_stream raises one OSError whose
    cause groups each address's attempt."""
    cause = exc.__cause__
    if isinstance(cause, BaseExceptionGroup):
        return [leaf for e in cause.exceptions for leaf in _leaves(e) or [e]]
    return [cause] if cause is not None else [exc]


def tcp_failure(exc: OSError, host: str, port: int, timeout: float) -> ConnectFailure:
    """What a failed TCP connect to ``host:port`` means."""
    at = where(host, port)
    if isinstance(exc, socket.gaierror):
        return ConnectFailure("unreachable", f"could not resolve host {host}")
    leaves = _leaves(exc)
    if any(isinstance(e, ConnectionRefusedError) for e in leaves):
        return ConnectFailure("refused", f"connection refused by {at}")
    if any(isinstance(e, TimeoutError) for e in leaves):
        return ConnectFailure("timed out", f"no answer from {at} within {timeout:g} s")
    unreachable = (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL)
    if any(isinstance(e, OSError) and e.errno in unreachable for e in leaves):
        return ConnectFailure("unreachable", f"no route to {at}")
    first = leaves[0]
    why = first.strerror if isinstance(first, OSError) and first.strerror else str(first)
    return ConnectFailure("unreachable", f"could not connect to {at}: {why}")


def handshake_failure(exc: BaseException, stage: str, ep: Endpoint, at: str) -> ConnectFailure:
    """What a failure during the TLS or AMQP handshake means, by how far it got
    (``ClientProtocol.stage``): a close (or a dropped socket, from a peer that does
    not announce why) right after the login is a refused login; after
    connection.open, a vhost that is missing or refused to the user."""
    user, vhost = ep.user, ep.vhost
    if isinstance(exc, PeerClosed):
        if exc.code == 403 and stage == "login":
            return ConnectFailure("authentication failed",
                                  f"authentication failed for user '{user}' at {at}")
        if exc.code == 530 and stage == "vhost":
            if "not found" in exc.text:
                return ConnectFailure("vhost not found", f"vhost '{vhost}' not found at {at}")
            return ConnectFailure("vhost refused", f"access to vhost '{vhost}' refused for "
                                                   f"user '{user}' at {at}")
        return ConnectFailure("closed", f"{at} closed the connection: {exc}")
    if isinstance(exc, ssl.SSLError):
        why = (f"certificate verify failed: {exc.verify_message}"
               if isinstance(exc, ssl.SSLCertVerificationError) else exc.reason or str(exc))
        return ConnectFailure("tls", f"TLS handshake with {at} failed: {why}")
    if stage == "login":
        return ConnectFailure("authentication failed", f"authentication failed for user "
                                                       f"'{user}' at {at} (the peer closed "
                                                       "the connection)")
    return ConnectFailure("closed", f"{at} closed the connection during the AMQP handshake")


@asynccontextmanager
async def connect(ep: Endpoint, host: str, port: int, *, name: str = "amqplite link",
                  peer_check: Callable[[str], str | None] | None = None,
                  ) -> AsyncIterator[Connection]:
    """An open connection to ``host:port`` as ``ep`` says (TLS, login, vhost), with its
    reader running; closed when the block ends. A connection that cannot be opened
    raises :class:`ConnectFailure`: the TCP connect and then the handshake each
    time out after ``ep.timeout`` (a peer that accepts and never answers fails too).
    ``peer_check(address)`` may refuse the address connected to (its reason raised)
    before anything is sent."""
    at = where(host, port)
    try:
        with trio.move_on_after(ep.timeout) as scope:
            sock = await trio.open_tcp_stream(host, port)
    except OSError as exc:
        raise tcp_failure(exc, host, port, ep.timeout) from None
    if scope.cancelled_caught:
        raise ConnectFailure("timed out", f"no answer from {at} within {ep.timeout:g} s")
    stream: trio.abc.Stream = sock
    try:
        why = None if peer_check is None else peer_check(str(sock.socket.getpeername()[0]))
        if why is not None:
            raise ProtocolFailure(why)
        if ep.tls:
            stream = trio.SSLStream(sock, tls_context(ep),
                                    server_hostname=ep.server_name or host)
        proto = ClientProtocol(ep.user, ep.password, ep.vhost, heartbeat=ep.heartbeat,
                               name=name)
        conn = Connection(stream, proto)
        try:
            with trio.move_on_after(ep.timeout) as scope:
                await conn._flush()
                while not proto.open:
                    data = await stream.receive_some(65536)
                    if not data:
                        raise ConnectFailure("closed", "")  # named below
                    proto.feed(data)
                    await conn._flush()
        except (ProtocolFailure, trio.BrokenResourceError, OSError) as exc:
            cause: BaseException = exc
            while isinstance(cause, trio.BrokenResourceError) and cause.__cause__ is not None:
                cause = cause.__cause__
            if isinstance(cause, ProtocolFailure) and \
                    not isinstance(cause, PeerClosed | ConnectFailure):
                # the peer broke the protocol (no PLAIN, another AMQP version...)
                raise ConnectFailure("protocol", f"{at}: {cause}") from None
            raise handshake_failure(cause, proto.stage, ep, at) from None
        if scope.cancelled_caught:
            raise ConnectFailure("timed out", f"no AMQP handshake from {at} within "
                                              f"{ep.timeout:g} s (it accepted the "
                                              "connection but did not answer)")
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    async with trio.open_nursery() as n:
        n.start_soon(conn.run)
        try:
            yield conn
        finally:
            n.cancel_scope.cancel()
            await conn.close()  # shielded inside: never raises Cancelled here


def failure_text(exc: BaseException) -> str:
    """Why a link's connection failed, as one line for its status and log: the first
    leaf of an exception group; a broken stream gives its cause (the TLS
    handshake's certificate error...); the peer's own close text as it came."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    while isinstance(exc, trio.BrokenResourceError) and exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, ProtocolFailure) else f"{type(exc).__name__}: {text}"
