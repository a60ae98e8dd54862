"""Node, health-check and cluster handlers: what probes and monitoring tools poll."""

from __future__ import annotations

from typing import Any

from amqplite.admin import views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.nodes import NODE, listener_ports, node_info
from amqplite.admin.plumbing import (
    HTTPError,
    Request,
    Response,
    bad_request,
    from_amqp,
    not_found,
)
from amqplite.broker.effects import GetOk
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.properties import BasicProperties, encode_properties

ALIVENESS_QUEUE = "aliveness-test"
#: protocol names RabbitMQ's protocol-listener check accepts for what we serve
PROTOCOLS = {"amqp": "amqp", "amqp091": "amqp", "amqp0-9-1": "amqp", "http": "http",
             "management": "http", "prometheus": "http"}


def _ok(**extra: Any) -> Response:
    return Response({"status": "ok", **extra})


def _failed(reason: str, **extra: Any) -> Response:
    return Response({"status": "failed", "reason": reason, **extra}, 503)


class NodeHandlers(HandlerBase):
    """Routes tagged ``nodes`` and ``health``."""

    async def list_nodes(self, req: Request) -> Response:
        return Response([self._node()])

    async def get_node(self, req: Request) -> Response:
        if req.params["name"] != NODE:
            raise not_found(f"no node '{req.params['name']}' (this one is {NODE})")
        return Response(self._node())

    def _node(self) -> dict[str, Any]:
        """The node, with its HTTP contexts as RabbitMQ's /api/nodes has them."""
        return {**node_info(self.server, views.alarms(self.server)),
                "contexts": views.contexts(self.server)}

    async def cluster_name(self, req: Request) -> Response:
        return Response({"name": self.server.settings.cluster_name})

    async def extensions(self, req: Request) -> Response:
        """Management UI plugins: none (the dashboard is not served yet)."""
        return Response([])

    async def health_node(self, req: Request) -> Response:
        """The pre-3.8 check: RabbitMQ answered 200 with status failed and a reason."""
        alarms = views.alarms(self.server)
        if not alarms:
            return _ok()
        return Response({"status": "failed", "reason": "; ".join(a["reason"] for a in alarms)})

    async def health_named_node(self, req: Request) -> Response:
        if req.params["name"] != NODE:
            raise not_found(f"no node '{req.params['name']}' (this one is {NODE})")
        return await self.health_node(req)

    async def health_local_alarms(self, req: Request) -> Response:
        return await self.health_alarms(req)

    async def health_alarms(self, req: Request) -> Response:
        """RabbitMQ's alarms health check: load balancers and probes key on the status."""
        alarms = views.alarms(self.server)
        if not alarms:
            return Response({"status": "ok"})
        return Response({"status": "failed", "reason": "There are alarms in effect in the node",
                         "alarms": alarms}, 503)

    async def health_port_listener(self, req: Request) -> Response:
        try:
            port = int(req.params["port"])
        except ValueError:
            raise bad_request(f"'{req.params['port']}' is not a valid port number") from None
        ports = listener_ports(self.server)
        if port in ports:
            return _ok(port=port)
        return _failed("No active listener", missing=port, ports=ports)

    async def health_protocol_listener(self, req: Request) -> Response:
        want = req.params["protocol"].lower()
        have = ["amqp"] + (["http"] if self.server.admin_url else [])
        if PROTOCOLS.get(want) in have:
            return _ok(protocol=want)
        return _failed("No active listener", missing=want, protocols=have)

    async def health_virtual_hosts(self, req: Request) -> Response:
        """Every vhost lives in this process, so none can be down while it answers."""
        return _ok()

    async def health_quorum_critical(self, req: Request) -> Response:
        """One node and no replicas: stopping it never costs a quorum (RabbitMQ's
        reason for a node alone)."""
        return _ok(reason="single node cluster")

    async def aliveness_test(self, req: Request) -> Response:
        """RabbitMQ's aliveness test: declare, publish to and get from a queue."""
        vh = self._vhost(req.params["vhost"])
        ch = self._channel(vh.name, self._actor(req))
        try:
            ex = self.server.execute
            ex(self.broker.queue_declare, ch, ALIVENESS_QUEUE, durable=False,
               auto_delete=False, arguments={})
            ex(self.broker.basic_publish, ch, "", ALIVENESS_QUEUE,
               encode_properties(BasicProperties()), b"test_message")
            got = ex(self.broker.basic_get, ch, ALIVENESS_QUEUE, no_ack=True)
        except AMQPError as exc:
            if exc.reply_code == 403:  # the user may not: RabbitMQ's 401, not a failed node
                raise from_amqp(exc) from None
            return _failed(exc.reply_text)
        finally:
            self._close(ch)
        if not isinstance(got, GetOk) or got.message.body != b"test_message":
            raise HTTPError(503, "failed", "the test message did not come back")
        return _ok()
