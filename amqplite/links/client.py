"""A trio AMQP 0-9-1 client connection for links: one socket, the ``client_protocol`` state
machine, a reader task and heartbeats, in a nursery the caller owns.

Only what a shovel needs: synchronous calls on a channel (one at a time per
channel), publishes, acks, and a stream of deliveries and confirms. Any
channel or connection close by the peer ends the connection with
:class:`ProtocolFailure` carrying the peer's reply code and text; the
shovel then reconnects from scratch, which is how RabbitMQ's shovels recover.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress

import attrs
import trio

from amqplite.links.client_protocol import ClientProtocol, ContentIn, Event, MethodIn, ProtocolFailure
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

#: how long connecting and the handshake may take
CONNECT_TIMEOUT = 15.0
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


@asynccontextmanager
async def connect(ep: Endpoint, host: str, port: int, *, name: str = "amqplite link",
                  peer_check: Callable[[str], str | None] | None = None,
                  ) -> AsyncIterator[Connection]:
    """An open connection to ``host:port`` as ``ep`` says (TLS, login, vhost), with its
    reader running; closed when the block ends. Failures raise ProtocolFailure or
    OSError; a handshake that stalls raises ProtocolFailure after CONNECT_TIMEOUT.
    ``peer_check(address)`` may refuse the address connected to (its reason raised)
    before anything is sent."""
    with trio.move_on_after(CONNECT_TIMEOUT) as scope:
        sock = await trio.open_tcp_stream(host, port)
    if scope.cancelled_caught:
        raise ProtocolFailure(f"connecting to {host}:{port} timed out")
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
        with trio.move_on_after(CONNECT_TIMEOUT) as scope:
            await conn._flush()
            while not proto.open:
                data = await stream.receive_some(65536)
                if not data:
                    raise ProtocolFailure(
                        "the peer closed the connection during the handshake "
                        "(wrong user or password, or no access to the vhost?)")
                proto.feed(data)
                await conn._flush()
        if scope.cancelled_caught:
            raise ProtocolFailure(f"no AMQP handshake with {host}:{port} within "
                                  f"{CONNECT_TIMEOUT}s")
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
