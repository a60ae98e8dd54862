"""What a protocol front's connection shell does the same way for every protocol:
a reader, a writer and a timer task in the connection's own nursery; a crash
that closes only that connection; a writer that drains the sans-I/O object's
out-buffer in large writes and, once the connection is finishing, sends the
rest, then FIN, then ends the nursery (DESIGN.md section 11).

The STOMP client is built on it; MQTT's client (server/mqtt/client.py) has the
same three loops written out and can move onto it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import MutableSet
from typing import Any

import trio

#: bytes asked for per read
RECV_SIZE = 64 * 1024
#: after the connection ends, how long the writer may take to send what is queued
FINISH_TIMEOUT = 2.0

_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class ConnectionShell:
    """One client connection over any byte stream. Subclasses say what to do with
    bytes read (``_received``), what to write (``_outgoing``), what their timers
    do (``_timers``) and how the session ends (``_end``)."""

    #: the log's name for this kind of connection ("STOMP")
    kind = "client"

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
    async def _received(self, data: bytes | bytearray) -> None:
        raise NotImplementedError

    def _outgoing(self) -> bytes:
        raise NotImplementedError

    async def _timers(self) -> None:
        raise NotImplementedError

    async def _before_read(self) -> None:
        """Back-pressure: wait here while this client must not be read."""

    def _drained(self) -> None:
        """Everything queued was written."""

    def _end(self) -> None:
        """The connection is gone: end its session."""

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

    async def _reader(self) -> None:
        try:
            while not self._finishing:
                await self._before_read()
                try:
                    data = await self.stream.receive_some(RECV_SIZE)
                except _GONE:
                    return
                if not data:
                    return
                self.bytes_in += len(data)
                await self._received(data)
        finally:
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
            return
        try:
            n = os.write(fd, data)
        except OSError:  # would block, or gone: the writer's send finds out which
            n = 0
        self.bytes_out += n
        if n < len(data):
            self._carry = memoryview(data)[n:]  # no copy of what is left
            self._wake.set()

    def _take(self) -> bytes | memoryview:
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
            self._writer_busy = True
            while data := self._take():
                try:
                    await self.stream.send_all(data)
                except _GONE:
                    self._finishing = True
                    break
                self.bytes_out += len(data)
            self._writer_busy = False
            if not self._finishing:
                self._drained()
                continue
            # nothing awaited since the last empty _outgoing(): all of it went
            with contextlib.suppress(*_GONE):
                if isinstance(self.stream, trio.abc.HalfCloseableStream):  # not TLS
                    await self.stream.send_eof()
            assert self._cancel is not None
            self._cancel.cancel()
            return
