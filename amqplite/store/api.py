"""The store's vocabulary that both of the broker's processes speak, without SQLAlchemy.

Why a module of its own: the broker process on SQLite never imports SQLAlchemy
(about 17 MiB of its memory); its writer child opens the database, creates
the schema and reads everything back at start (``store.writer``). What the
two exchange (the records start-up reads back, the prune op, the errors and
callbacks of a submission) lives here, where both can import it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

import attrs

from amqplite.storeops import (
    CLEAN_KEY,
    PutBinding,
    PutExchange,
    PutKafkaOffset,
    PutMQTTPacketId,
    PutMQTTSession,
    PutMQTTWill,
    PutParameter,
    PutPermission,
    PutPolicy,
    PutQueue,
    PutRetained,
    PutTopicPermission,
    PutUser,
    PutVHost,
)

log = logging.getLogger("amqplite.store")

#: ``callback(None | error)`` of a submission, once it committed or failed
Callback = Callable[[BaseException | None], None]

#: A group of delivery-log rows alone waits this long for more work before it
#: commits: nobody waits on those rows, and one commit per 50 ms instead of one
#: per message is what makes a trickle of transient traffic cheap.
LOG_LINGER_S = 0.05


class StoreClosed(RuntimeError):
    """The store takes no more submissions (it is closing or closed): the one
    refusal that means the broker is stopping. Any other error from ``submit``
    (an op that cannot be encoded) is about that submission alone."""


def tell_failing(hook: Callable[[str | None], None] | None, reason: str | None) -> None:
    """Call a store's ``on_failing`` hook; a hook that raises is logged, not passed on."""
    if hook is not None:
        try:
            hook(reason)
        except Exception:
            log.exception("store health hook raised")


class PruneRange:
    """Internal op: delete the log batches within ``lo < id <= hi`` whose every event
    is older than a time; ``deleted`` is their number of events."""

    __slots__ = ("deleted", "hi", "lo", "older_than_us")

    def __init__(self, lo: int, hi: int, older_than_us: int) -> None:
        self.lo, self.hi, self.older_than_us = lo, hi, older_than_us
        self.deleted = 0


@attrs.frozen
class RecoveredEntry:
    """One queue entry as persisted. ``body`` is None outside the body window."""

    position: int
    message_id: int
    delivery_count: int
    redelivered: bool
    exchange: str
    routing_key: str
    properties: bytes
    body: bytes | None
    body_size: int


@attrs.define
class Recovered:
    """Everything durable, as found at start-up."""

    vhosts: list[PutVHost] = attrs.Factory(list)
    users: list[PutUser] = attrs.Factory(list)
    permissions: list[PutPermission] = attrs.Factory(list)
    topic_permissions: list[PutTopicPermission] = attrs.Factory(list)
    policies: list[PutPolicy] = attrs.Factory(list)
    parameters: list[PutParameter] = attrs.Factory(list)
    #: the MQTT listener's state as the ops that wrote it: sessions, packet ids, wills
    mqtt_sessions: list[PutMQTTSession | PutMQTTPacketId | PutMQTTWill] = attrs.Factory(list)
    #: Kafka consumer groups' committed offsets, by vhost, group, topic, partition
    kafka_offsets: list[PutKafkaOffset] = attrs.Factory(list)
    exchanges: list[PutExchange] = attrs.Factory(list)
    queues: list[PutQueue] = attrs.Factory(list)
    bindings: list[PutBinding] = attrs.Factory(list)
    #: queue_id -> entries in position order (queues without entries absent)
    entries: dict[int, list[RecoveredEntry]] = attrs.Factory(dict)
    #: queue_id -> (count, bytes, lo, hi) of the entries after the first window,
    #: left in the store (the broker loads them as the queue drains)
    spilled: dict[int, tuple[int, int, int, int]] = attrs.Factory(dict)
    #: retained publications of durable owners, oldest first
    retained: list[PutRetained] = attrs.Factory(list)
    #: highest ids ever used (seed the broker's counters above these)
    max_queue_id: int = 0
    max_message_id: int = 0
    max_log_id: int = 0
    meta: dict[str, str] = attrs.Factory(dict)
    #: stream queue_id -> its segments in order, as (segment, first_offset,
    #: last_offset, first_ts_us, last_ts_us, size); the open (last) one counted
    #: from its entries, since its row is written only when it opens and seals
    streams: dict[int, list[tuple[int, int, int, int, int, int]]] = attrs.Factory(dict)


def redelivered_queues(rec: Recovered,
                       settled: Callable[[Recovered], Collection[int]] | None) -> list[int]:
    """The queues whose spilled entries a start marks redelivered: after an unclean
    stop, all but those ``settled`` names (ids whose stored flags hold)."""
    if not rec.spilled or rec.meta.get(CLEAN_KEY) == "1":
        return []
    keep = settled(rec) if settled is not None else ()
    return [q for q in rec.spilled if q not in keep]
