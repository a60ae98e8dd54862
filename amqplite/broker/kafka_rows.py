"""The Kafka shell's stored rows: consumer groups' committed offsets.

The group coordinator (``sessions/kafka``) decides what a commit writes and
returns it as store ops, and says whether a deletion (of a group, of a topic)
leaves offsets to delete, whose op is built here; they reach the store with the
broker's outcome like every other change, so the shell hands them here instead
of touching the outbox. An OffsetCommit answer then waits for the commit
(``Server.committed()``), as CONNACK does for MQTT's rows.
"""

from __future__ import annotations

from collections.abc import Iterable

from amqplite import storeops as ops
from amqplite.broker.outbox import Outbox


class KafkaRows:
    """Store commands of the Kafka shell (committed offsets); receives the outbox only."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def kafka_offsets_write(self, rows: Iterable[ops.PutKafkaOffset]) -> None:
        """Committed offsets, in the coordinator's order."""
        self.outbox.emit_all(rows)

    def kafka_offsets_delete(self, vhost: str, *, group_id: str | None = None,
                             topic: str | None = None) -> None:
        """A deleted group's committed offsets (``group_id``), or a deleted topic's in
        every group of ``vhost`` (``topic``)."""
        self.outbox.emit(ops.DeleteKafkaOffsets(vhost, group_id=group_id, topic=topic))
