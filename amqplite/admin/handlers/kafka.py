"""Kafka consumer groups for operators: ``/api/kafka/groups[/{vhost}[/{group}]]``.

The rows are ``sessions.kafka.report``'s (state, members and their assignments,
committed offset, log end offset and lag per topic-partition), read from the
Kafka listener's group coordinator on the event loop. A node without a Kafka
listener lists no groups; a user sees the groups of the vhosts it may use (all
of them with the monitoring tag), as it sees queues.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import HTTPError, Request, Response, not_found
from amqplite.sessions.kafka.report import (
    GroupReport,
    group_report,
    group_reports,
    stream_ends,
)

if TYPE_CHECKING:
    from amqplite.admin.node import NodeView


def kafka_groups(server: NodeView, vhosts: set[str] | None = None) -> list[GroupReport]:
    """Every consumer group the node's Kafka listener coordinates (none when Kafka is off)."""
    kafka = getattr(server, "kafka", None)  # the Kafka front, when it runs
    if kafka is None:
        return []
    return group_reports(kafka.coordinator, stream_ends(kafka.topics), vhosts)


def group_info(r: GroupReport) -> dict[str, Any]:
    """A group as the API shows it."""
    return {
        "vhost": r.vhost, "name": r.group_id, "state": r.state,
        "protocol_type": r.protocol_type, "protocol": r.protocol,
        "generation": r.generation, "leader": r.leader, "lag": r.lag,
        "members": [{
            "member_id": m.member_id, "group_instance_id": m.instance_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "assignment": None if m.assignment is None else [
                {"topic": t, "partitions": list(ps)} for t, ps in m.assignment],
        } for m in r.members],
        "partitions": [{
            "topic": p.topic, "partition": p.partition,
            "committed_offset": p.committed_offset, "metadata": p.metadata,
            "committed_at": p.committed_at // 1000 if p.committed_at else None,
            "log_start_offset": p.log_start_offset, "log_end_offset": p.log_end_offset,
            "lag": p.lag, "member_id": p.member_id, "client_id": p.client_id,
            "client_host": p.client_host,
        } for p in r.partitions],
    }


class KafkaHandlers(HandlerBase):
    """Routes tagged ``kafka``."""

    def _group_vhosts(self, req: Request) -> set[str] | None:
        """The vhosts whose groups the user sees (None: all)."""
        name = req.params.get("vhost")
        visible = self._visible_vhosts(req)
        if name is None:
            return visible
        self._vhost(name)
        if visible is not None and name not in visible:
            raise HTTPError(401, "not_authorised", "User not authorised to access virtual host")
        return {name}

    async def list_kafka_groups(self, req: Request) -> Response:
        return Response([group_info(r) for r in kafka_groups(self.server,
                                                               self._group_vhosts(req))])

    async def get_kafka_group(self, req: Request) -> Response:
        self._group_vhosts(req)
        kafka = getattr(self.server, "kafka", None)  # the Kafka front, when it runs
        vhost, name = req.params["vhost"], req.params["group"]
        r = None if kafka is None else group_report(kafka.coordinator,
                                                    stream_ends(kafka.topics), vhost, name)
        if r is None:
            raise not_found(f"no Kafka consumer group '{name}' in vhost '{vhost}'")
        return Response(group_info(r))
