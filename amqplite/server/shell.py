"""What a protocol front's connection shell does the same way for every protocol:
a reader, a writer and a timer task in the connection's own nursery; a crash
that closes only that connection; a writer that drains the sans-I/O object's
out-buffer in large writes and, once the connection is finishing, sends the
rest, then FIN, then ends the nursery (DESIGN.md section 11).

The STOMP and MQTT clients (server/stomp/client.py, server/mqtt/client.py) are
built on it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, MutableSet
from typing import Any, Protocol

import trio

from amqplite.broker.core import Broker
from amqplite.broker.model import Session
from amqplite.server.persistence import Persistence

#: bytes asked for per read
RECV_SIZE = 64 * 1024
#: a client's consumers stop receiving while this much is queued unsent to it
WRITE_HIGH_WATER = 4 * 1024 * 1024
#: after the connection ends, how long the writer may take to send what is queued
FINISH_TIMEOUT = 2.0

GONE = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
#: what ``ConnectionShell._wait_readable`` returns: bytes may be there; the reader
#: ends and the connection stays (parked); the connection is finishing
READ, PARK, FINISH = 0, 1, 2


class Wire(Protocol):
    """The sans-I/O connection object, as far as the shell needs it."""

    def receive_data(self, data: bytes | bytearray | memoryview, now: float) -> None: ...

    def pending_bytes(self) -> int: ...


class Front(Protocol):
    """The front's listener, as far as the shell needs it."""

    execute: Callable[..., Any]
    interpret: Callable[..., None]
    committed: Callable[[], Awaitable[None]]
    persistence: Persistence


class ConnectionShell:
    """One client connection over any byte stream. Subclasses say what to do with
    events of the bytes read (``_handle_events``), what to write (``_outgoing``), what their timers
    do (``_timers``) and how the session ends (``_end``); they set ``broker``,
    ``listener`` and ``proto`` and offer ``session``. Bytes read go to ``proto``,
    then its events to ``_handle_events``, inline: no extra call per read."""

    # slots: at 10,000 idle MQTT connections an instance dict was ~1.6 KiB each
    # (a subclass without __slots__ has one again, for its own attributes)
    __slots__ = ("_cancel", "_carry", "_fd", "_finishing", "_wake",
                 "_writer_busy", "alive", "bytes_in", "bytes_out", "connected_at", "log",
                 "name", "peer_host", "peer_port", "stream", "tls")

    #: the log's name for this kind of connection ("STOMP")
    kind = "client"
    broker: Broker
    listener: Front
    proto: Wire

    def __init__(self, stream: trio.abc.Stream, peer: tuple[str, int],
                 log: logging.Logger) -> None:
        self.stream = stream
        self.tls = isinstance(stream, trio.SSLStream)
        self.peer_host, self.peer_port = peer[0], peer[1]
        self.name = f"{self.peer_host}:{self.peer_port}"
        self.log = log
        self.connected_at = time.time()
        self.bytes_in = 0
        self.bytes_out = 0
        self.alive = True
        self._wake = trio.Event()
        self._finishing = False
        self._cancel: trio.CancelScope | None = None
        #: the socket's fd for ``send_now`` (-1: TLS, WebSocket: the writer sends all)
        self._fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else -1
        #: what ``send_now`` could not write, sent first by the writer task
        self._carry: memoryview | None = None
        self._writer_busy = False

    # ------------------------------------------------------------ for subclasses
    async def _handle_events(self) -> None:
        """Act on the events the bytes just read produced."""
        raise NotImplementedError

    def _outgoing(self) -> bytes | None:
        """The bytes to send next (empty: none); None when they may leave only once
        the store has committed (the writer awaits the listener's ``committed``, then asks again)."""
        raise NotImplementedError

    async def _timers(self) -> None:
        raise NotImplementedError

    async def _paused(self, wait: Awaitable[None]) -> None:
        """As RabbitMQ under an alarm, a logged-in client is not read while the store
        is over capacity; the silence is ours, not the client's."""
        await wait
        self.proto.receive_data(b"", trio.current_time())

    @property
    def session(self) -> Session | None:
        """The broker session (None before login)."""
        return None

    def flush(self) -> None:
        """After this connection's effects (the interpreter's call): wake the writer."""
        self._wake.set()
        s = self.session
        if s is not None and s.writable and self.proto.pending_bytes() > WRITE_HIGH_WATER:
            # a slow reader: its consumers wait until the writer drains (as for AMQP)
            self.broker.set_writable(s, False)

    def _drained(self) -> None:
        """Everything queued was written: consumers stopped by ``flush`` go on."""
        s = self.session
        if s is not None and not s.writable:
            self.listener.execute(self.broker.set_writable, s, True)

    def _end(self) -> None:
        """The connection is gone: end its session."""

    def _interpret(self) -> None:
        """After the events of one read: the broker's outcome carried out, the
        store batch handed over (a front may keep the batch open a moment)."""
        self.listener.interpret()

    # ------------------------------------------------------------ tasks
    async def serve(self, connections: MutableSet[Any]) -> None:
        """Run the connection to its end, listed in ``connections`` meanwhile."""
        connections.add(self)
        try:
            async with trio.open_nursery() as nursery:
                self._cancel = nursery.cancel_scope
                nursery.start_soon(self._writer)
                nursery.start_soon(self._timers)
                nursery.start_soon(self._reader)
        except Exception:  # one bad connection never takes the broker down
            self.log.exception("%s connection %s crashed", self.kind, self.name)
        finally:
            self.alive = False
            connections.discard(self)
            self._end()
            with trio.move_on_after(1):
                await self.stream.aclose()

    def finish(self) -> None:
        """Stop reading; the writer sends what is queued, then everything ends."""
        self._finishing = True
        self._wake.set()
        if self._cancel is not None:
            self._cancel.deadline = min(self._cancel.deadline,
                                        trio.current_time() + FINISH_TIMEOUT)

    async def _wait_readable(self) -> int:
        """Plain TCP: wait until the socket has bytes (READ). A front may park the
        connection instead (PARK: the reader ends, the connection stays) or end the
        wait when it finishes (FINISH): MQTT's does (server/mqtt/idle.py)."""
        await trio.lowlevel.wait_readable(self._fd)
        return READ

    async def _reader(self, wait: bool = True) -> bool:
        """Read until the connection ends (then ``finish``) or parks (True). Plain TCP
        reads its socket itself, as the AMQP connection does: ``SocketStream.receive_some``
        tries a recv first (on a mostly idle connection that fails: nothing came
        yet), then waits, then reads, then takes one more trip through the
        scheduler. After a short read (``wait``) the socket is almost surely empty,
        so this waits first and reads once: one wake-up and two syscalls per read
        where there were two and four. After a full read it only lets the others
        run (a busy client must not starve them). TLS and WebSocket read the stream."""
        proto = self.proto
        persistence = self.listener.persistence
        fd = self._fd
        parked = False
        try:
            while not self._finishing:
                if not persistence.has_capacity and self.session is not None:
                    await self._paused(persistence.wait_capacity())
                    continue
                if fd < 0:
                    try:
                        data = await self.stream.receive_some(RECV_SIZE)
                    except GONE:
                        return False
                else:
                    if wait:
                        try:
                            why = await self._wait_readable()
                        except GONE:  # closed while waiting: the connection ends quietly
                            return False
                        if why != READ:
                            parked = why == PARK
                            return parked
                    try:
                        data = os.read(fd, RECV_SIZE)
                    except BlockingIOError:  # woken without data: wait again
                        wait = True
                        continue
                    except OSError:
                        return False
                    wait = len(data) < RECV_SIZE
                    if not wait:
                        await trio.lowlevel.checkpoint()
                if not data:
                    return False
                self.bytes_in += len(data)
                proto.receive_data(data, trio.current_time())
                await self._handle_events()
                self._interpret()
                self.flush()
            return False
        finally:
            if not parked:
                self.finish()

    def send_now(self) -> None:
        """Send what is queued now, from the task that queued it, when the socket
        takes it (as the AMQP connection's flush): a RECEIPT released by a commit,
        or a batch of MESSAGEs, then costs one send() and no scheduling round of
        the writer task, and with a window of receipts latency is throughput. The
        writer takes over what is left (a full socket, TLS, closing)."""
        fd = self._fd
        if (fd < 0 or self._writer_busy or self._carry is not None or self._finishing
                or not self.alive):  # a closed fd may be reused: never write to it
            self._wake.set()
            return
        data = self._outgoing()
        if not data:
            if data is None:  # held until a commit: the writer waits for it
                self._wake.set()
            return
        try:
            n = os.write(fd, data)
        except OSError:  # would block, or gone: the writer's send finds out which
            n = 0
        self.bytes_out += n
        if n < len(data):
            self._carry = memoryview(data)[n:]  # no copy of what is left
            self._wake.set()

    def _take(self) -> bytes | memoryview | None:
        """What ``send_now`` left first, then the next bytes (None: held, see _outgoing)."""
        carry = self._carry
        if carry is not None:
            self._carry = None
            return carry
        return self._outgoing()

    async def _writer(self) -> None:
        while True:
            if not self._finishing:
                await self._wake.wait()
            self._wake = trio.Event()
            await self._send_queued()
            if not self._finishing:
                self._drained()
                continue
            await self._close_write()
            return

    async def _send_queued(self) -> None:
        """Send until nothing is queued (a held write waits for its commit)."""
        self._writer_busy = True
        while True:
            data = self._take()
            if not data:
                if data is None:  # held: nothing awaited between commit and take
                    await self.listener.committed()
                    continue
                break
            try:
                if self._fd >= 0:
                    await self._write_fd(data)
                else:
                    await self.stream.send_all(data)
            except GONE:
                self._finishing = True
                break
            self.bytes_out += len(data)
        self._writer_busy = False

    async def _write_fd(self, data: bytes | memoryview) -> None:
        """Plain TCP: write ``data`` to the socket itself, waiting only while it is
        full. trio's ``send_all`` takes a trip through the scheduler after every
        send, and a writer task started per delivery (MQTT fan-out) paid it each time."""
        fd = self._fd
        view = memoryview(data)
        while view:
            if not self.alive:  # closed (or closing): its fd may be another's soon
                raise trio.ClosedResourceError("the connection is closed")
            try:
                n = os.write(fd, view)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(fd)
                continue
            view = view[n:]

    async def _close_write(self) -> None:
        """The connection is finishing and nothing awaited since the last empty
        _outgoing(): all of it went. FIN, then the connection's nursery ends."""
        with contextlib.suppress(*GONE):
            if isinstance(self.stream, trio.abc.HalfCloseableStream):  # not TLS
                await self.stream.send_eof()
        assert self._cancel is not None
        self._cancel.cancel()
