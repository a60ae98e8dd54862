"""Connection, channel and consumer handlers (read-only but for close)."""

from __future__ import annotations

from typing import Any

from amqplite.admin import views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import HTTPError, Request, Response, not_found

FORCED_TEXT = "CONNECTION_FORCED - Closed via management plugin"


class ConnectionHandlers(HandlerBase):
    """Routes tagged ``connections``."""

    def _connection(self, name: str, req: Request) -> Any:
        """A connection by name (AMQP or MQTT): 404 if none, 401 if another user's
        (management users see their own only)."""
        for c in [*self.server.connections, *views.mqtt_connections(self.server)]:
            if c.name == name:
                self._check_own(req, c.session.username if c.session is not None else None)
                return c
        raise not_found(f"no connection '{name}'")

    def _channels(self, req: Request) -> list[tuple[Any, Any]]:
        """Open channels the user may see: all, or only those of its own connections."""
        return [(c, ch) for c, ch in views.channels(self.server) if self._owns(req, c)]

    async def list_connections(self, req: Request) -> Response:
        conns = sorted(self.server.connections, key=lambda c: c.connected_at)
        mqtt = sorted(views.mqtt_connections(self.server), key=lambda c: c.connected_at)
        return Response([views.connection_info(c) for c in conns if self._owns(req, c)]
                        + [views.mqtt_connection_info(c) for c in mqtt if self._owns(req, c)])

    def _owns(self, req: Request, c: Any) -> bool:
        """May the requesting user see connection ``c`` (AMQP or MQTT)?"""
        return self._own(req, c.session.username if c.session is not None else None)

    async def get_connection(self, req: Request) -> Response:
        c = self._connection(req.params["name"], req)
        return Response(views.mqtt_connection_info(c) if hasattr(c, "client_id")
                        else views.connection_info(c))

    async def close_connection(self, req: Request) -> Response:
        """A user closes its own connections; another user's needs the administrator
        tag, monitoring or not (RabbitMQ 3.10.8: 401, checked)."""
        c = self._connection(req.params["name"], req)
        assert req.user is not None
        owner = c.session.username if c.session is not None else None
        if not req.user.is_admin and owner != req.user.name:
            raise HTTPError(401, "not_authorised", "User not authorised to access object")
        c.force_close(320, FORCED_TEXT)
        return Response(None, 204)

    async def list_channels(self, req: Request) -> Response:
        return Response([views.channel_info(c, ch, self.rates) for c, ch in self._channels(req)])

    async def connection_channels(self, req: Request) -> Response:
        c = self._connection(req.params["name"], req)
        return Response([views.channel_info(c, ch, self.rates)
                         for conn, ch in views.channels(self.server) if conn is c])

    async def get_channel(self, req: Request) -> Response:
        """One channel by RabbitMQ's name for it: ``<connection name> (<number>)``."""
        for c, ch in views.channels(self.server):
            info = views.channel_info(c, ch, self.rates)
            if info["name"] == req.params["name"]:
                self._check_own(req, info["user"])
                return Response(info)
        raise not_found(f"no channel '{req.params['name']}'")

    async def list_consumers(self, req: Request) -> Response:
        """Consumers on the user's own channels (all of them for monitoring), as
        RabbitMQ filters them by ``channel_details.user``."""
        vhost = req.params.get("vhost")
        if vhost is not None:
            self._vhost(vhost)
        out = []
        for c, ch in self._channels(req):
            for cons in ch.consumers.values():
                if vhost is None or cons.queue.vhost == vhost:
                    out.append(views.consumer_info(c, ch, cons))
        return Response(out)
