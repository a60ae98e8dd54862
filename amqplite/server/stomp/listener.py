"""The STOMP listener: accepts clients; each is a ``StompClient`` (client.py)."""

from __future__ import annotations

import logging
import math
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from amqplite.broker.auth import UserDB
from amqplite.broker.core import Broker
from amqplite.config import Settings, parse_size
from amqplite.protocol.stomp.connection import ServerLimits
from amqplite.protocol.stomp.frames import ParserLimits
from amqplite.server.persistence import Persistence
from amqplite.server.ports import accepted_peer
from amqplite.server.stomp.client import ACK_LINGER_S, StompClient
from amqplite.server.tls import accept as accept_tls
from amqplite.server.tls import peer_user, serve_front

if TYPE_CHECKING:
    from amqplite.server.app import Server

log = logging.getLogger("amqplite.stomp")


class StompListener:
    """Accepts STOMP clients. Its dependencies are explicit, as the MQTT
    listener's: the settings, the broker and its users, the server's
    ``execute``/``interpret``/``committed`` and the store bridge."""

    def __init__(self, settings: Settings, broker: Broker, users: UserDB,
                 execute: Callable[..., Any], interpret: Callable[..., None],
                 committed: Callable[[], Awaitable[None]], persistence: Persistence,
                 at_limit: Callable[[], bool] = lambda: False,
                 vhost_limit: Callable[[str], int | None] = lambda vhost: None) -> None:
        self.settings = settings
        self.broker = broker
        self.users = users
        self.execute = execute
        self.interpret = interpret
        self.committed = committed
        self.persistence = persistence
        self.limits = ServerLimits(
            max_frame_size_unauthenticated=parse_size(
                settings.stomp_max_frame_size_unauthenticated),
            parser=ParserLimits(max_frame_size=parse_size(settings.stomp_max_frame_size)))
        self.connections: set[StompClient] = set()
        #: is max_connections reached, by AMQP, MQTT and STOMP clients together
        self.at_connection_limit = at_limit
        #: a vhost's max-connections when reached (None: room), all protocols counted
        self.vhost_connection_limit = vhost_limit
        self.ports: list[int] = []
        self.tls_ports: list[int] = []
        self._tls: ssl.SSLContext | None = None
        #: when ``_flusher`` hands the open store batch over (None: not asked)
        self._flush_at: float | None = None
        #: the batch that deadline is for (``Persistence.batches`` then)
        self._flush_batch = -1
        #: when ``_flusher`` wakes next (inf: not armed)
        self._flusher_at = math.inf
        #: when a client last sent a read of ACK/NACKs only (trio time; see
        #: ``StompClient._interpret``)
        self.acked_at = -math.inf
        self._flush_wake = trio.Event()

    @property
    def clients(self) -> list[StompClient]:
        """The logged-in connections (they count against max_connections)."""
        return [c for c in self.connections if c.rules is not None]

    async def serve(self, task_status: trio.TaskStatus[list[int]] = trio.TASK_STATUS_IGNORED,
                    ) -> None:
        await serve_front(self.settings, "stomp", "STOMP", log, handle=self._handle,
                          handle_tls=self._handle_tls, bound=self._bound,
                          tasks=(self._flusher,), task_status=task_status)

    def _bound(self, ports: list[int], tls_ports: list[int],
               ctx: ssl.SSLContext | None) -> None:
        self.ports, self.tls_ports, self._tls = ports, tls_ports, ctx

    def flush_soon(self, delay: float = ACK_LINGER_S) -> None:
        """Hand the store batch over within ``delay`` seconds, unless a flush by
        anyone (the next read's ``interpret``) takes it along before.

        The deadline is the open batch's: once that batch is handed over (or its
        waiters released), it lapses, and a later batch gets its own. Before,
        a deadline armed for one window of receipted SENDs, released by its
        ACKs, handed the next window's batch over before its ACKs came: a
        commit and an fsync the window's receipts waited for."""
        at = trio.current_time() + delay
        batch = self.persistence.batches
        if self._flush_at is None or batch != self._flush_batch or at < self._flush_at:
            self._flush_at, self._flush_batch = at, batch
            if at < self._flusher_at:  # else it wakes earlier and sleeps on to ``at``
                self._flush_wake.set()

    async def _flusher(self) -> None:
        persistence = self.persistence
        while True:
            at = self._flush_at
            if at is not None and persistence.batches != self._flush_batch:
                self._flush_at = at = None  # that batch went without us
            if at is None or trio.current_time() < at:
                self._flusher_at = math.inf if at is None else at
                with trio.move_on_at(self._flusher_at):
                    await self._flush_wake.wait()
                self._flush_wake = trio.Event()
                continue
            self._flush_at = None
            self.interpret()

    async def _handle(self, stream: trio.SocketStream) -> None:
        peer = accepted_peer(stream)
        if peer is not None:
            await StompClient(self, stream, peer).run()

    async def _handle_tls(self, stream: trio.SocketStream) -> None:
        """Each socket's own handshake (a failure closes only it), then a client
        carrying the verified certificate's user name, if any."""
        peer = accepted_peer(stream)
        if peer is None or self._tls is None:
            return
        tls = await accept_tls(stream, self._tls, f"STOMP {peer[0]}:{peer[1]}",
                               self.settings.handshake_timeout)
        if tls is not None:
            await StompClient(self, tls, peer, peer_user(tls)).run()

    def close_all(self, text: str) -> None:
        """Shutdown: every client told and its session ended now, so what that
        writes (requeues) reaches the store before it closes."""
        for c in list(self.connections):
            c.force_close(320, text)


async def run_stomp(server: Server,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """A service of the composition root: the STOMP listener beside AMQP and MQTT."""
    listener = StompListener(server.settings, server.broker, server.users, server.execute,
                             server.interpret, server.committed, server.persist,
                             server.at_connection_limit, server.vhost_connection_limit)
    server.stomp = listener
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.serve)
        task_status.started()
