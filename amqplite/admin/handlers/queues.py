"""Queue handlers: list, declare, delete, purge."""

from __future__ import annotations

from amqplite.admin import validate as V
from amqplite.admin import views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.nodes import NODE
from amqplite.admin.plumbing import PURGED_HEADER, Request, Response, bad_request
from amqplite.admin.validate import body_args, body_bool
from amqplite.broker.policy import validate_queue_args


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
        name = V.shortstr(req.params["name"], "name", allow_empty=False)
        body = req.json()
        args = body_args(body)
        bad = validate_queue_args(args)
        if bad is not None:
            raise bad_request(f"invalid arg '{bad[0]}': {bad[1]}")
        durable, auto_delete = body_bool(body, "durable", True), body_bool(body, "auto_delete")
        node = body.get("node")  # rabbitmqadmin's declare queue node=...
        if node is not None and node != NODE:
            raise V.Invalid("node", f"{node!r} is not this broker's node ({NODE}); "
                                    "amqplite is one node")
        existed = name in vh.queues
        undo = self._journal()
        undo.queue(vh.name, name)
        await self._write_as(req, vh.name, self.broker.queue_declare, name, durable=durable,
                             auto_delete=auto_delete, arguments=args, undo=undo)
        return Response(None, 204 if existed else 201)

    async def delete_queue(self, req: Request) -> Response:
        vh, q = self._queue(req)
        if req.flag("if-empty") and q.message_count:
            raise bad_request(f"queue '{q.name}' in vhost '{vh.name}' is not empty")
        if req.flag("if-unused") and q.consumers:
            raise bad_request(f"queue '{q.name}' in vhost '{vh.name}' in use")
        self._check_perm(req, vh.name, "configure", "queue", q.name)  # queue.delete's
        await self._write(lambda: self.broker.delete_queue(vh, q))
        return Response(None, 204)

    async def purge_queue(self, req: Request) -> Response:
        vh, q = self._queue(req)
        self._check_perm(req, vh.name, "read", "queue", q.name)  # queue.purge's
        n = await self._write(lambda: self.broker.purge(q))
        # RabbitMQ answers 204 with no body; the count rides in a header of ours
        return Response(None, 204, headers={PURGED_HEADER: str(n)})
