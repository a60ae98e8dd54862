"""Queue handlers: list, declare, delete, purge."""

from __future__ import annotations

from amqplite.admin import views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import (
    Request,
    Response,
    _bool,
    _obj,
    bad_request,
    from_amqp,
)
from amqplite.protocol.errors import AMQPError


class QueueHandlers(HandlerBase):
    """Routes tagged ``queues``."""

    async def list_queues(self, req: Request) -> Response:
        ub = self._ubytes()
        return Response([views.queue_info(self.server, q, self.rates, ub)
                         for vh in self._vhosts(req)
                         for q in sorted(vh.queues.values(), key=lambda q: q.name)])

    async def get_queue(self, req: Request) -> Response:
        _, q = self._queue(req)
        return Response(views.queue_info(self.server, q, self.rates, self._ubytes()))

    async def put_queue(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        name = req.params["name"]
        body = req.json()
        args = _obj(body, "arguments")
        try:
            from amqplite.broker.policy import validate_queue_args
        except ImportError:  # pragma: no cover - older broker
            validate_queue_args = None  # type: ignore[assignment]
        if validate_queue_args is not None:
            bad = validate_queue_args(args)
            if bad is not None:
                raise bad_request(f"invalid arg '{bad[0]}': {bad[1]}")
        existed = name in vh.queues
        ch = self._channel(vh.name, self._actor(req))
        try:
            self.server.execute(self.broker.queue_declare, ch, name, durable=_bool(body, "durable", True),
                                      auto_delete=_bool(body, "auto_delete"), arguments=args)
        except AMQPError as exc:
            raise from_amqp(exc) from None
        finally:
            self._close(ch)
        return Response(None, 204 if existed else 201)

    async def delete_queue(self, req: Request) -> Response:
        vh, q = self._queue(req)
        if req.flag("if-empty") and q.message_count:
            raise bad_request(f"queue '{q.name}' in vhost '{vh.name}' is not empty")
        if req.flag("if-unused") and q.consumers:
            raise bad_request(f"queue '{q.name}' in vhost '{vh.name}' in use")
        self._check_perm(req, vh.name, "configure", "queue", q.name)  # queue.delete's
        self.server.execute(self.broker.delete_queue, vh, q)
        return Response(None, 204)

    async def purge_queue(self, req: Request) -> Response:
        vh, q = self._queue(req)
        self._check_perm(req, vh.name, "read", "queue", q.name)  # queue.purge's
        n = self.server.execute(self.broker.purge, q)
        return Response({"purged": n})
