"""Topic permission handlers: RabbitMQ's ``/api/topic-permissions`` and the per-user
and per-vhost lists, in its shapes (``broker/topic_permissions.py`` says what they
mean).

As RabbitMQ 3.10 answers: a PUT creates (201) or replaces (204) the permission of
one exchange; GET of a user in a vhost lists one entry per exchange (404 when
there is none); DELETE clears them all. ``DELETE ...?exchange=X`` clears only X's
(RabbitMQ 3.10 ignores the parameter and clears all; ``rabbitmqctl
clear_topic_permissions`` takes an exchange, so the CLI needs it here).
"""

from __future__ import annotations

from typing import Any

from amqplite.admin import validate as V
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import Request, Response, not_found
from amqplite.broker import topic_permissions as topics


def shown(user: str, vhost: str, tp: topics.TopicPermission) -> dict[str, Any]:
    return {"user": user, "vhost": vhost, "exchange": tp.exchange, "write": tp.write,
            "read": tp.read}


class TopicPermissionHandlers(HandlerBase):
    """Routes tagged ``users`` and ``vhosts`` for topic permissions."""

    def _topic_permissions(self, *, user: str | None = None,
                           vhost: str | None = None) -> list[dict[str, Any]]:
        return [shown(u, v, tp)
                for u, v, tp in self.broker.topic_permissions.items(user=user, vhost=vhost)]

    async def list_topic_permissions(self, req: Request) -> Response:
        return Response(self._topic_permissions())

    async def vhost_topic_permissions(self, req: Request) -> Response:
        return Response(self._topic_permissions(vhost=self._vhost(req.params["vhost"]).name))

    async def user_topic_permissions(self, req: Request) -> Response:
        user = self.broker.users.get(req.params["user"])
        if user is None:
            raise not_found(f"no user '{req.params['user']}'")
        return Response(self._topic_permissions(user=user.name))

    async def get_topic_permission(self, req: Request) -> Response:
        vhost, user = req.params["vhost"], req.params["user"]
        found = self._topic_permissions(user=user, vhost=vhost)
        if not found:
            raise not_found(f"no topic permissions for user '{user}' in vhost '{vhost}'")
        return Response(found)

    async def put_topic_permission(self, req: Request) -> Response:
        vhost, user = req.params["vhost"], req.params["user"]
        body = req.json()
        if "exchange" not in body:
            raise V.Invalid("exchange", "is required (the topic exchange it applies to)")
        exchange = V.shortstr(body["exchange"], "exchange")
        write, read = (V.pattern(body.get(k, ""), k, topics.validate) for k in ("write", "read"))
        existed = exchange in (self.broker.topic_permissions.of(user, vhost) or {})
        undo = self._journal()
        undo.topic_permissions(user, vhost)
        await self._write(lambda: self.broker.set_topic_permission(
            user, vhost, exchange, write, read), undo)
        return Response(None, 204 if existed else 201)

    async def delete_topic_permission(self, req: Request) -> Response:
        vhost, user = req.params["vhost"], req.params["user"]
        exchange = req.query.get("exchange")
        undo = self._journal()
        undo.topic_permissions(user, vhost)
        if not await self._write(lambda: self.broker.clear_topic_permissions(
                user, vhost, exchange), undo):
            which = f" for exchange '{exchange}'" if exchange is not None else ""
            raise not_found(f"no topic permissions{which} for user '{user}' in vhost "
                            f"'{vhost}'")
        return Response(None, 204)
