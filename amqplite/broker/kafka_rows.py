"""The Kafka shell's stored rows: consumer groups' committed offsets.

The group coordinator (``sessions/kafka``) decides what a commit writes (its
rows, as plain tuples) and whether a deletion (of a group, of a topic) leaves
offsets to delete; their store ops are built here, as every store op is in
broker/, and reach the store with the broker's outcome like every other change,
so the shell hands them here instead of touching the outbox. An OffsetCommit answer then waits for the commit
(``Server.committed()``), as CONNACK does for MQTT's rows.
"""

from __future__ import annotations

from collections.abc import Iterable

from amqplite import storeops as ops
from amqplite.broker.outbox import Outbox

#: a committed offset: (topic, partition, offset, metadata, committed_at), the
#: last one wall-clock microseconds
CommittedRow = tuple[str, int, int, str, int]


class KafkaRows:
    """Store commands of the Kafka shell (committed offsets); receives the outbox only."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def kafka_offsets_write(self, vhost: str, group_id: str,
                            rows: Iterable[CommittedRow]) -> None:
        """A group's committed offsets, in the coordinator's order."""
        self.outbox.emit_all(ops.PutKafkaOffset(vhost, group_id, *r) for r in rows)

    def kafka_offsets_delete(self, vhost: str, *, group_id: str | None = None,
                             topic: str | None = None) -> None:
        """A deleted group's committed offsets (``group_id``), or a deleted topic's in
        every group of ``vhost`` (``topic``)."""
        self.outbox.emit(ops.DeleteKafkaOffsets(vhost, group_id=group_id, topic=topic))
