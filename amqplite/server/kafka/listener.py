"""The Kafka listener: accepts clients (each a ``KafkaClient``, client.py), owns the
node's topics and group coordinator, and runs the coordinator's timer."""

from __future__ import annotations

import logging
import math
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from amqplite.broker.auth import UserDB
from amqplite.broker.core import Broker
from amqplite.config import Settings
from amqplite.protocol.kafka.framing import DEFAULT_MAX_FRAME
from amqplite.server.kafka.client import KafkaClient, Slot
from amqplite.server.persistence import Persistence
from amqplite.server.ports import accepted_peer
from amqplite.server.tls import accept as accept_tls
from amqplite.server.tls import serve_front
from amqplite.sessions.kafka.answers import Answers
from amqplite.sessions.kafka.coordinator import GroupCoordinator
from amqplite.sessions.kafka.topics import Topics

if TYPE_CHECKING:
    from amqplite.server.app import Server

log = logging.getLogger("amqplite.kafka")

#: seconds between sweeps of idle idempotent producers' state
PRODUCER_SWEEP = 60.0


class KafkaListener:
    """Accepts Kafka clients. Its dependencies are explicit, as the STOMP
    listener's: the settings, the broker and its users, the server's
    ``execute``/``interpret``/``committed`` and the store bridge."""

    def __init__(self, settings: Settings, broker: Broker, users: UserDB,
                 execute: Callable[..., Any], interpret: Callable[..., None],
                 committed: Callable[[], Awaitable[None]], persistence: Persistence,
                 at_limit: Callable[[], bool] = lambda: False,
                 offsets: list[Any] | None = None) -> None:
        self.settings = settings
        self.broker = broker
        self.users = users
        self.execute = execute
        self.interpret = interpret
        self.committed = committed
        self.persistence = persistence
        self.at_connection_limit = at_limit
        self.max_frame = DEFAULT_MAX_FRAME
        self.coordinator = GroupCoordinator(
            initial_rebalance_delay=settings.kafka_group_initial_rebalance_delay_ms / 1000)
        self.coordinator.restore(offsets or [])
        self.topics = Topics(broker, coordinator=self.coordinator,
                             auto_create=settings.kafka_auto_create_topics,
                             num_partitions=settings.kafka_num_partitions)
        self.connections: set[KafkaClient] = set()
        #: JoinGroup/SyncGroup requests awaiting the coordinator: handle -> where to answer
        self.waiting: dict[Any, tuple[KafkaClient, Slot, Callable[[Any], bytes]]] = {}
        self.ports: list[int] = []
        self.tls_ports: list[int] = []
        self._tls: ssl.SSLContext | None = None
        self._coordinator_wake = trio.Event()
        # the groups follow the broker's vhosts for the coordinator's whole life: a vhost
        # created again at once must not find the deleted one's groups and offsets
        broker.topology.watch_vhosts(self.vhost_deleted)

    @property
    def clients(self) -> list[KafkaClient]:
        """The logged-in connections (they count against max_connections)."""
        return [c for c in self.connections if c.session is not None]

    async def serve(self, task_status: trio.TaskStatus[list[int]] = trio.TASK_STATUS_IGNORED,
                    ) -> None:
        await serve_front(self.settings, "kafka", "Kafka", log, handle=self._handle,
                          handle_tls=self._handle_tls, bound=self._bound,
                          tasks=(self._coordinate,), task_status=task_status)

    def _bound(self, ports: list[int], tls_ports: list[int],
               ctx: ssl.SSLContext | None) -> None:
        self.ports, self.tls_ports, self._tls = ports, tls_ports, ctx

    async def _handle(self, stream: trio.SocketStream) -> None:
        peer = accepted_peer(stream)
        if peer is not None and not await self._at_limit(stream, peer):
            await KafkaClient(self, stream, peer).run()

    async def _handle_tls(self, stream: trio.SocketStream) -> None:
        """Each socket's own handshake (a failure closes only it), then a client."""
        peer = accepted_peer(stream)
        if peer is None or self._tls is None or await self._at_limit(stream, peer):
            return
        tls = await accept_tls(stream, self._tls, f"Kafka {peer[0]}:{peer[1]}",
                               self.settings.handshake_timeout)
        if tls is not None:
            await KafkaClient(self, tls, peer).run()

    async def _at_limit(self, stream: trio.SocketStream, peer: tuple[str, int]) -> bool:
        """``max_connections`` reached: the socket is closed (Kafka has no refusal)."""
        if not self.at_connection_limit():
            return False
        log.warning("Kafka %s:%d refused: connection limit (%d) is reached", peer[0], peer[1],
                    self.settings.max_connections)
        await stream.aclose()
        return True

    # ------------------------------------------------------------ the coordinator
    def dispatch(self, batches: list[Answers]) -> None:
        """Send the group answers calls completed, to whichever connection waits."""
        for answers in batches:
            for r in answers.replies:
                entry = self.waiting.pop(r.handle, None)
                if entry is not None:
                    client, slot, build = entry
                    if client.alive:
                        client._fill(slot, build(r.answer))
            for ev in answers.evicted:
                log.info("Kafka group %r in vhost %r: member %s removed (%s)", ev.group_id,
                         ev.vhost, ev.member_id, ev.reason)
        self._coordinator_wake.set()

    async def _coordinate(self) -> None:
        """Tick the coordinator at its next deadline (a group call may move it), and
        now and then forget idle idempotent producers."""
        c = self.coordinator
        expire_at = trio.current_time() + PRODUCER_SWEEP
        while True:
            deadline = c.next_deadline()
            with trio.move_on_at(min(expire_at, math.inf if deadline is None else deadline)):
                await self._coordinator_wake.wait()
            self._coordinator_wake = trio.Event()
            now = trio.current_time()
            answers = c.tick(now)
            if answers.replies or answers.evicted:
                self.dispatch([answers])
            if now >= expire_at:
                self.topics.producers.expire(self.broker.now())
                expire_at = now + PRODUCER_SWEEP

    def vhost_deleted(self, vhost: str) -> None:
        """The broker deleted ``vhost`` (its members' connections were closed with it):
        its groups go at once (the store drops their offsets' rows with the vhost's)."""
        self.dispatch([self.coordinator.delete_vhost(vhost)])

    def forget(self, client: KafkaClient) -> None:
        """A closed connection's waiting group answers are dropped (its members stay
        until their session timeout, as in Kafka)."""
        for handle in [h for h, e in self.waiting.items() if e[0] is client]:
            del self.waiting[handle]

    def close_all(self, text: str) -> None:
        for c in list(self.connections):
            c.force_close(320, text)


async def run_kafka(server: Server,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """A service of the composition root: the Kafka listener beside the others."""
    listener = KafkaListener(server.settings, server.broker, server.users, server.execute,
                             server.interpret, server.committed, server.persist,
                             server.at_connection_limit, server.kafka_offsets)
    server.kafka = listener
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(listener.serve)
            task_status.started()
    finally:  # the core outlives this listener (tests, a restarted service)
        server.broker.topology.unwatch_vhosts(listener.vhost_deleted)
