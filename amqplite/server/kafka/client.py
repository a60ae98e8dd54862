"""One Kafka connection: the trio shell (server/shell.py) on the sans-I/O codec and the
``KafkaSession`` rules.

Kafka clients pipeline requests and read responses in request order, so every
request that is answered gets a slot in one queue, in order; the writer sends
only the filled head of it. A slot whose answer waits (a commit, a Confirm, a
long-polling Fetch, a rebalance) is filled by a task of the connection, so a
slow answer never holds the reader, and never lets a later answer overtake it.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from amqplite.broker.model import Session
from amqplite.protocol.kafka.framing import FrameBuffer, FrameError
from amqplite.protocol.kafka.messages import UnsupportedRequest, decode_request, unsupported_answer
from amqplite.protocol.kafka.primitives import CodecError
from amqplite.server.shell import WRITE_HIGH_WATER, ConnectionShell
from amqplite.server.tls import peer_user
from amqplite.sessions.kafka.session import KafkaSession
from amqplite.sessions.kafka.steps import (
    AfterCommit,
    AfterConfirm,
    Close,
    FetchWait,
    GroupWait,
    Reads,
    Step,
)

if TYPE_CHECKING:
    from amqplite.server.kafka.listener import KafkaListener

log = logging.getLogger("amqplite.kafka")

_ids = itertools.count(1)
#: requests awaiting their answers past which the connection is not read (Kafka's
#: clients keep at most max.in.flight.requests.per.connection, 5 by default)
MAX_PENDING = 1000


class Slot:
    """One response's place in the connection's answer order (None: not ready yet)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | None = None) -> None:
        self.data = data


class KafkaWire:
    """The connection's bytes: frames in, the ordered answers out."""

    def __init__(self, max_frame: int) -> None:
        self.frames = FrameBuffer(max_frame)
        self.slots: deque[Slot] = deque()
        self.ready_bytes = 0

    def receive_data(self, data: bytes | bytearray | memoryview, now: float) -> None:
        self.frames.feed(data)

    def pending_bytes(self) -> int:
        return self.ready_bytes

    def take(self) -> bytes:
        """The filled head of the answer queue, joined."""
        slots = self.slots
        out = []
        while slots and slots[0].data is not None:
            data = slots.popleft().data
            assert data is not None
            out.append(data)
        self.ready_bytes = 0
        for s in slots:
            if s.data is not None:
                self.ready_bytes += len(s.data)
        return b"".join(out)


class KafkaClient(ConnectionShell):
    """One Kafka connection."""

    kind = "Kafka"
    protocol = "Kafka"
    listener: KafkaListener
    proto: KafkaWire
    timeout = 0

    def __init__(self, listener: KafkaListener,
                 stream: trio.SocketStream | trio.SSLStream[trio.SocketStream],
                 peer: tuple[str, int]) -> None:
        super().__init__(stream, peer, log)
        self.listener = listener
        self.broker = listener.broker
        self.proto = KafkaWire(listener.max_frame)
        self.conn_id = next(_ids)
        s = listener.settings
        sock = stream.socket if isinstance(stream, trio.SocketStream) \
            else stream.transport_stream.socket
        local = sock.getsockname()
        users = listener.users
        anonymous = None
        #: the certificate's CN that may not log in (a client skipping SASL is closed)
        self._cert_refused: str | None = None
        cert_user = None if isinstance(stream, trio.SocketStream) else peer_user(stream)
        if cert_user is not None and s.kafka_ssl_cert_login:
            # SASL EXTERNAL's rule: the CN is a user that may connect from here
            if users.identify(cert_user, self.peer_host) is not None:
                anonymous = cert_user
            else:
                self._cert_refused = cert_user
        elif s.kafka_allow_anonymous and users.identify(s.kafka_default_user,
                                                        self.peer_host) is not None:
            anonymous = s.kafka_default_user
        self.rules = KafkaSession(
            self.broker, listener.topics, listener.coordinator, conn_id=self.conn_id,
            peer=self.name, peer_host=self.peer_host,
            advertised=(s.kafka_advertised_host or local[0], local[1]),
            authenticate=self._authenticate, anonymous=anonymous,
            default_vhost=s.kafka_vhost, flush=self.flush, finish=self.finish)
        self._jobs_tx, self._jobs_rx = trio.open_memory_channel[
            Callable[[], Awaitable[None]]](math.inf)
        self._confirmed = trio.Event()
        self._went_out = trio.Event()

    @property
    def session(self) -> Session | None:
        return self.rules.session

    @property
    def client_id(self) -> str:
        return self.rules.client_id

    async def run(self) -> None:
        await self.serve(self.listener.connections)

    def _authenticate(self, name: str, password: str) -> str | None:
        users = self.listener.users
        if users.authenticate(name, password, self.peer_host) is not None:
            return name
        line = users.failure_line(f"Kafka {self.name}", name, self.peer_host,
                                  time.monotonic())
        if line is not None:
            log.warning("%s", line)
        return None

    # ------------------------------------------------------------ the shell's hooks
    def _outgoing(self) -> bytes:
        return self.proto.take()

    def flush(self) -> None:
        """After this connection's effects: Confirms may have come (an ``acks=all``
        Produce waits for them), and answers may be ready."""
        self._confirmed.set()
        self._confirmed = trio.Event()
        self.send_now()

    def _drained(self) -> None:
        self._went_out.set()

    def _fill(self, slot: Slot, data: bytes) -> None:
        slot.data = data
        self.proto.ready_bytes += len(data)
        self.send_now()
        self._went_out.set()  # a reader held by MAX_PENDING looks again

    async def _handle_events(self) -> None:
        proto = self.proto
        rules = self.rules
        listener = self.listener
        while True:
            try:
                frame = proto.frames.next_frame()
                if frame is None:
                    break
                req = decode_request(frame, strict=False)
            except UnsupportedRequest as exc:
                answer = unsupported_answer(exc.header)
                if answer is None:
                    log.info("Kafka %s: %s: closing", self.name, exc)
                    self.finish()
                    return
                self._queue(answer)
                continue
            except (FrameError, CodecError) as exc:
                log.info("Kafka %s: undecodable request (%s): closing", self.name, exc)
                self.finish()
                return
            try:
                step = rules.handle(req, trio.current_time())
            except Close as exc:
                if self._cert_refused is not None and rules.session is None:
                    line = listener.users.failure_line(
                        f"Kafka {self.name}", self._cert_refused, self.peer_host,
                        time.monotonic(), refused="client certificate")
                    if line is not None:  # (None: over the failed-login rate limit)
                        log.warning("%s: closing", line)
                else:
                    log.info("Kafka %s: %s: closing", self.name, exc)
                self.finish()
                return
            self._start(step)
            answers = rules.take_answers()
            if answers:
                listener.dispatch(answers)
            if rules.closing:
                self.finish()
                return
        # a client that sends without reading its answers is not read until they drain
        while (len(proto.slots) > MAX_PENDING or proto.ready_bytes > WRITE_HIGH_WATER) \
                and not self._finishing:
            self._went_out = trio.Event()
            listener.interpret()  # what was asked so far goes on, and its answers out
            self.flush()
            self._wake.set()
            await self._went_out.wait()

    def _queue(self, data: bytes | None) -> Slot:
        slot = Slot(data)
        self.proto.slots.append(slot)
        if data is not None:
            self.proto.ready_bytes += len(data)
        return slot

    def _start(self, step: Step) -> None:
        """A slot for the answer, filled now or by a task of the connection."""
        if step is None:
            return
        if isinstance(step, bytes):
            self._queue(step)
            return
        slot = self._queue(None)
        if isinstance(step, GroupWait):
            self.listener.waiting[step.handle] = (self, slot, step.build)
            return
        job: Callable[[], Awaitable[None]]
        if isinstance(step, AfterCommit):
            job = lambda: self._after_commit(slot, step)  # noqa: E731
        elif isinstance(step, AfterConfirm):
            job = lambda: self._after_confirm(slot, step)  # noqa: E731
        elif isinstance(step, FetchWait):
            job = lambda: self._fetch(slot, step)  # noqa: E731
        else:
            assert isinstance(step, Reads)
            job = lambda: self._reads(slot, step)  # noqa: E731
        self._jobs_tx.send_nowait(job)

    async def _timers(self) -> None:
        """The tasks that fill waiting slots, in this connection's nursery."""
        async with trio.open_nursery() as nursery:
            async for job in self._jobs_rx:
                nursery.start_soon(job)

    # ------------------------------------------------------------ waiting answers
    async def _reads(self, slot: Slot, step: bytes | Reads) -> None:
        listener = self.listener
        while isinstance(step, Reads):
            listener.interpret()
            chunks = [await listener.persistence.read("fetch_stream", q, lo, limit)
                      for q, lo, limit in step.reads]
            step = step.resume(chunks)
        self._fill(slot, step)

    async def _after_commit(self, slot: Slot, step: AfterCommit) -> None:
        await self.listener.committed()
        await self._reads(slot, step.build())

    async def _after_confirm(self, slot: Slot, step: AfterConfirm) -> None:
        rules = self.rules
        while not rules.confirmed(step.seq):
            await self._confirmed.wait()
        self._fill(slot, step.build())

    async def _fetch(self, slot: Slot, step: FetchWait) -> None:
        """The long poll: answered when the partitions have ``min_bytes`` of records
        (or an error), or at ``max_wait_ms``; an append to any partition asked for
        wakes it to look again."""
        rules = self.rules
        topics = self.listener.topics
        while True:
            plan = rules.fetch_plan(step)
            if (rules.fetch_ready(plan, step.request.body["min_bytes"])
                    or trio.current_time() >= step.deadline):
                break
            woken = trio.Event()
            cancels = [topics.wait_append(v, t, p, woken.set)
                       for v, t, p in rules.wait_targets(plan)]
            try:
                with trio.move_on_at(step.deadline):
                    await woken.wait()
            finally:
                for cancel in cancels:
                    if cancel is not None:
                        cancel()
        await self._reads(slot, rules.fetch_reads(step, plan))

    # ------------------------------------------------------------ the end
    def _end(self) -> None:
        self.listener.forget(self)
        if not self.rules.closed:
            self.listener.execute(self.rules.close)

    def force_close(self, code: int, text: str) -> None:
        """Server-side close (shutdown, the admin API): Kafka has no close frame."""
        self._end()
        self.finish()

