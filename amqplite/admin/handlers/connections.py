"""Connection, channel and consumer handlers (read-only but for close)."""

from __future__ import annotations

from typing import Any

from amqplite.admin import views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import Request, Response, not_found

FORCED_TEXT = "CONNECTION_FORCED - Closed via management plugin"


class ConnectionHandlers(HandlerBase):
    """Routes tagged ``connections``."""

    def _connection(self, name: str) -> Any:
        for c in [*self.server.connections, *views.mqtt_connections(self.server)]:
            if c.name == name:
                return c
        raise not_found(f"no connection '{name}'")

    async def list_connections(self, req: Request) -> Response:
        conns = sorted(self.server.connections, key=lambda c: c.connected_at)
        mqtt = sorted(views.mqtt_connections(self.server), key=lambda c: c.connected_at)
        return Response([views.connection_info(c) for c in conns]
                        + [views.mqtt_connection_info(c) for c in mqtt])

    async def get_connection(self, req: Request) -> Response:
        c = self._connection(req.params["name"])
        return Response(views.mqtt_connection_info(c) if hasattr(c, "client_id")
                        else views.connection_info(c))

    async def close_connection(self, req: Request) -> Response:
        c = self._connection(req.params["name"])
        c.force_close(320, FORCED_TEXT)
        return Response(None, 204)

    async def list_channels(self, req: Request) -> Response:
        return Response([views.channel_info(c, ch, self.rates)
                         for c, ch in views.channels(self.server)])

    async def connection_channels(self, req: Request) -> Response:
        c = self._connection(req.params["name"])
        return Response([views.channel_info(c, ch, self.rates)
                         for conn, ch in views.channels(self.server) if conn is c])

    async def get_channel(self, req: Request) -> Response:
        """One channel by RabbitMQ's name for it: ``<connection name> (<number>)``."""
        for c, ch in views.channels(self.server):
            info = views.channel_info(c, ch, self.rates)
            if info["name"] == req.params["name"]:
                return Response(info)
        raise not_found(f"no channel '{req.params['name']}'")

    async def list_consumers(self, req: Request) -> Response:
        vhost = req.params.get("vhost")
        if vhost is not None:
            self._vhost(vhost)
        out = []
        for c, ch in views.channels(self.server):
            for cons in ch.consumers.values():
                if vhost is None or cons.queue.vhost == vhost:
                    out.append(views.consumer_info(c, ch, cons))
        return Response(out)
