"""Meta handlers: OpenAPI document, overview, identity, vhosts."""

from __future__ import annotations

from amqplite.admin import views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import Request, Response


class MetaHandlers(HandlerBase):
    """Routes tagged ``meta``."""

    async def openapi(self, req: Request) -> Response:
        from amqplite.admin.openapi import document

        return Response(document())

    async def get_overview(self, req: Request) -> Response:
        return Response(views.overview(self.server, self.rates))

    async def whoami(self, req: Request) -> Response:
        assert req.user is not None
        return Response({"name": req.user.name, "tags": list(req.user.tags),
                         "is_admin": req.user.is_admin})

    async def list_vhosts(self, req: Request) -> Response:
        out = []
        for vh in self.broker.vhosts.values():
            ready = sum(q.message_count for q in vh.queues.values())
            un = sum(q.unacked for q in vh.queues.values())
            out.append({"name": vh.name, "messages": ready + un, "messages_ready": ready,
                        "messages_unacknowledged": un})
        return Response(out)
