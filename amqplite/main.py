"""The composition root: the broker and the services beside it, in one root nursery.

``server/`` knows nothing of ``admin/``; this is the one place that puts them
together, so the layers keep importing downward only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amqplite.config import Settings
from amqplite.links.supervisor import run_links
from amqplite.server.app import Server, Service

if TYPE_CHECKING:
    from amqplite.admin.node import NodeView

    def _admin_sees_the_server(server: Server) -> NodeView:
        """mypy's check that the Server provides the admin API's NodeView."""
        return server


async def serve(settings: Settings) -> None:
    """Run the AMQP server, its store, the links (shovels) and, when configured, the
    MQTT, STOMP and Kafka listeners and the admin API."""
    services: list[Service] = [run_links]  # before the admin API, which shows its shovels
    if settings.mqtt_port or settings.mqtt_tls_port is not None:
        from amqplite.server.mqtt import run_mqtt

        services.append(run_mqtt)
    if settings.stomp_port or settings.stomp_tls_port is not None:
        from amqplite.server.stomp import run_stomp

        services.append(run_stomp)
    if settings.kafka_port or settings.kafka_tls_port is not None:
        from amqplite.server.kafka import run_kafka

        services.append(run_kafka)
    if settings.admin_port:
        from amqplite.admin.http import run_admin

        services.append(run_admin)
    await Server(settings).run(services=services)
