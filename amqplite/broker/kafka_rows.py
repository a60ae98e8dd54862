"""The Kafka shell's stored rows: consumer groups' committed offsets.

The group coordinator (``sessions/kafka``) decides what a commit or a deletion
writes and returns it as store ops; they reach the store with the broker's
outcome like every other change, so the shell hands them here instead of
touching the outbox. An OffsetCommit answer then waits for the commit
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

    def kafka_offsets_write(self, rows: Iterable[ops.PutKafkaOffset | ops.DeleteKafkaOffsets],
                            ) -> None:
        """Commits and deletions of committed offsets, in the coordinator's order."""
        self.outbox.emit_all(rows)
