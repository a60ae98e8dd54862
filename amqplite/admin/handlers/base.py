"""The state and lookups every admin handler group shares.

Handler groups (one module per resource) subclass :class:`HandlerBase`;
:class:`amqplite.admin.api.AdminAPI` combines them into one object whose
method names match ``Route.handler``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from amqplite.admin import views, writes
from amqplite.admin.plumbing import Request, bad_request, from_amqp, not_found
from amqplite.protocol.errors import AMQPError

if TYPE_CHECKING:
    from amqplite.broker.core import VHost
    from amqplite.broker.model import ChannelState, Session
    from amqplite.broker.queue import Queue
    from amqplite.server.app import Server

_R = TypeVar("_R")


class HandlerBase:
    """Broker access for the handlers: lookups that answer 404, admin channels."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.broker = server.broker
        self.rates = views.Rates()
        self._sessions: dict[str, Session] = {}
        self._next_channel = itertools.count(1)

    async def run_sampler(self) -> None:
        """Sample counters for the message rates (every ``views.SAMPLE_INTERVAL``)."""
        while True:
            self.rates.sample(self.server)
            await trio.sleep(views.SAMPLE_INTERVAL)

    # ---------------------------------------------------------------- helpers
    def _vhosts(self, req: Request) -> list[VHost]:
        name = req.params.get("vhost")
        if name is None:
            return list(self.broker.vhosts.values())
        return [self._vhost(name)]

    def _vhost(self, name: str) -> VHost:
        vh = self.broker.vhosts.get(name)
        if vh is None:
            raise not_found(f"no vhost '{name}'")
        return vh

    def _queue(self, req: Request) -> tuple[VHost, Queue]:
        vh = self._vhost(req.params["vhost"])
        q = vh.queues.get(req.params["name"])
        if q is None:
            raise not_found(f"no queue '{req.params['name']}' in vhost '{vh.name}'")
        return vh, q

    def _channel(self, vhost: str, user: str | None) -> ChannelState:
        """A fresh channel in ``vhost`` acting as ``user`` (their permissions apply, as in
        RabbitMQ's API), or as the broker itself when None (definitions import); close
        it when done."""
        key = f"{user}\x00{vhost}" if user is not None else f"\x00{vhost}"
        s = self._sessions.get(key)
        if s is None or s.id not in self.broker.sessions:
            s = self.broker.open_session(user if user is not None else "", vhost, "admin-api")
            s.internal = user is None
            self._sessions[key] = s
        n = next(self._next_channel)
        return self.broker.open_channel(s, n)

    @staticmethod
    def _actor(req: Request) -> str:
        """Whom an API change acts as: the authenticated user (no user, no permissions)."""
        return req.user.name if req.user is not None else ""

    async def _write(self, step: Callable[[], _R], undo: writes.Undo | None = None) -> _R:
        """Run ``step`` as one store submission and answer from its own commit (500 when
        it failed, after ``undo`` put memory back); the broker's refusals (AMQP errors,
        ValueError) become HTTP errors."""
        try:
            return await writes.write(self.server, step, undo)
        except AMQPError as exc:
            raise from_amqp(exc) from None
        except ValueError as exc:
            raise bad_request(str(exc)) from None

    async def _write_as(self, req: Request, vhost: str, command: Callable[..., _R],
                        *args: Any, undo: writes.Undo | None = None, **kwargs: Any) -> _R:
        """A channel command run as the request's user (see ``_write``); the channel
        opens and closes inside the step, so its ops share the submission."""
        ch = self._channel(vhost, self._actor(req))

        def step() -> _R:
            try:
                return command(ch, *args, **kwargs)
            finally:
                self.broker.close_channel(ch)
        return await self._write(step, undo)

    def _journal(self) -> writes.Undo:
        return writes.Undo(self.broker)

    def _close(self, ch: ChannelState) -> None:
        self.server.execute(self.broker.close_channel, ch)

    def _ubytes(self) -> dict[int, int]:
        return views.unacked_bytes(self.server)
