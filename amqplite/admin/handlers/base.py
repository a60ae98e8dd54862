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
from amqplite.admin.plumbing import HTTPError, Request, bad_request, from_amqp, not_found
from amqplite.broker.permissions import refused
from amqplite.protocol.errors import AMQPError

if TYPE_CHECKING:
    from amqplite.admin.node import NodeView
    from amqplite.broker.core import VHost
    from amqplite.broker.model import ChannelState, Session
    from amqplite.broker.queue import Queue

_R = TypeVar("_R")


class HandlerBase:
    """Broker access for the handlers: lookups that answer 404, admin channels."""

    def __init__(self, server: NodeView) -> None:
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

    def _check_perm(self, req: Request, vhost: str, perm: str, kind: str, name: str) -> None:
        """The user's AMQP permission, for what the API does without an AMQP command that
        checks it: RabbitMQ's management API acts as that user over AMQP and answers a
        refusal with 401 (and no challenge: the login was right)."""
        user = req.user
        if user is None:
            return
        b = self.broker
        if b.access_control and (user.name, vhost) not in b.permissions:
            raise HTTPError(401, "not_authorised", "User not authorised to access virtual host")
        if not b.may(user.name, vhost, perm, kind, name):
            exc = refused(kind, name, vhost, user.name, (0, 0))
            assert isinstance(exc, AMQPError)
            raise from_amqp(exc)

    def _check_read(self, req: Request, vhost: str, queue: str) -> None:
        """Message bodies need the user's AMQP read permission on the queue, whatever its
        tags, as RabbitMQ's HTTP get, which reads as that user over AMQP."""
        self._check_perm(req, vhost, "read", "queue", queue)

    @staticmethod
    def _sees_all(req: Request) -> bool:
        """monitoring and administrator see every user's connections, channels and
        consumers; management and policymaker only their own (RabbitMQ's rule)."""
        return req.user is None or req.user.can_monitor

    def _own(self, req: Request, username: str | None) -> bool:
        return self._sees_all(req) or (req.user is not None and req.user.name == username)

    def _check_own(self, req: Request, username: str | None) -> None:
        """A single connection or channel of another user: 401, RabbitMQ's answer."""
        if not self._own(req, username):
            raise HTTPError(401, "not_authorised", "User not authorised to access object")

    def _visible_vhosts(self, req: Request) -> set[str] | None:
        """The vhosts whose objects the user's aggregates count; None for all."""
        if self._sees_all(req):
            return None
        assert req.user is not None
        name = req.user.name
        return {vh for (u, vh) in self.broker.permissions if u == name}

    @staticmethod
    def _actor(req: Request) -> str:
        """Whom an API change acts as: the authenticated user (no user, no permissions)."""
        return req.user.name if req.user is not None else ""

    async def _write(self, step: Callable[[], _R], undo: writes.Undo | None = None,
                     to_http: Callable[[AMQPError], HTTPError] = from_amqp) -> _R:
        """Run ``step`` as one store submission and answer from its own commit (500 when
        it failed, after ``undo`` put memory back); the broker's refusals (AMQP errors,
        through ``to_http``, and ValueError) become HTTP errors."""
        try:
            return await writes.write(self.server, step, undo)
        except AMQPError as exc:
            raise to_http(exc) from None
        except ValueError as exc:
            raise bad_request(str(exc)) from None

    async def _write_as(self, req: Request, vhost: str, command: Callable[..., _R],
                        *args: Any, undo: writes.Undo | None = None,
                        to_http: Callable[[AMQPError], HTTPError] = from_amqp,
                        **kwargs: Any) -> _R:
        """A channel command run as the request's user (see ``_write``); the channel
        opens and closes inside the step, so its ops share the submission."""
        ch = self._channel(vhost, self._actor(req))

        def step() -> _R:
            try:
                return command(ch, *args, **kwargs)
            finally:
                self.broker.close_channel(ch)
        return await self._write(step, undo, to_http)

    def _journal(self) -> writes.Undo:
        return writes.Undo(self.broker)

    def _close(self, ch: ChannelState) -> None:
        self.server.execute(self.broker.close_channel, ch)

    def _ubytes(self) -> dict[int, int]:
        return views.unacked_bytes(self.server)
