"""Kafka consumer groups for operators: ``/api/kafka/groups[/{vhost}[/{group}]]``.

The rows are ``sessions.kafka.report``'s (state, members and their assignments,
committed offset, log end offset and lag per topic-partition), read from the
Kafka listener's group coordinator on the event loop. A node without a Kafka
listener lists no groups; a user sees the groups of the vhosts it may use, as it
sees queues.
"""

from __future__ import annotations

from amqplite.admin import views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import Request, Response, not_found


class KafkaHandlers(HandlerBase):
    """Routes tagged ``kafka``. Which vhosts a user may read is the API's own rule
    (``http.API._authorize`` and ``_visible``), as for queues."""

    async def list_kafka_groups(self, req: Request) -> Response:
        vhosts = {vh.name for vh in self._vhosts(req)}
        return Response([views.group_info(r) for r in views.kafka_groups(self.server, vhosts)])

    async def get_kafka_group(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        name = req.params["group"]
        r = views.kafka_group(self.server, vh.name, name)
        if r is None:
            raise not_found(f"no Kafka consumer group '{name}' in vhost '{vh.name}'")
        return Response(views.group_info(r))
