"""Meta handlers: OpenAPI document, overview, identity, vhosts."""

from __future__ import annotations

from amqplite.admin import views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import HTTPError, Request, Response, bad_request


class MetaHandlers(HandlerBase):
    """Routes tagged ``meta``."""

    async def openapi(self, req: Request) -> Response:
        from amqplite.admin.openapi import document

        return Response(document())

    async def get_overview(self, req: Request) -> Response:
        return Response(views.overview(self.server, self.rates,
                                       req.user.name if req.user is not None else None,
                                       self._visible_vhosts(req)))

    async def get_memory(self, req: Request) -> Response:
        return Response(views.memory(self.server))

    async def set_memory_high_watermark(self, req: Request) -> Response:
        """rabbitmqctl set_vm_memory_high_watermark: applies at once, lost on restart."""
        from amqplite.config import parse_watermark

        value = req.json().get("memory_high_watermark")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise bad_request("memory_high_watermark must be a string or a number")
        try:
            watermark = parse_watermark(value)
        except ValueError as exc:
            raise bad_request(f"memory_high_watermark: {exc}") from None
        if self.server.memory is None:
            raise HTTPError(503, "unavailable", "the memory monitor is not running")
        self.server.memory.set_watermark(watermark)
        return Response(views.memory(self.server))

    async def whoami(self, req: Request) -> Response:
        """RabbitMQ's fields, and (amqplite) which AMQP permissions the user holds in
        some vhost, so the dashboard offers only forms its writes can pass."""
        assert req.user is not None
        b, name = self.broker, req.user.name
        held = [p for (u, _vh), p in b.permissions.items() if u == name]
        permitted = [kind for kind in ("configure", "write", "read")
                     if not b.access_control
                     or any(getattr(p, kind) not in ("", "^$") for p in held)]
        return Response({"name": name, "tags": list(req.user.tags),
                         "is_admin": req.user.is_admin, "permitted": permitted})

    async def list_vhosts(self, req: Request) -> Response:
        stats = views.vhost_message_stats(self.server, self.rates)
        return Response([views.vhost_info(vh, stats.get(vh.name))
                         for vh in self.broker.vhosts.values()])
