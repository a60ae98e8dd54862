"""Tables of the durable store, as SQLAlchemy Core metadata.

Portable types only (the same tables run on PostgreSQL). Times are integer
microseconds since the epoch, UTC. The hot tables (``messages``,
``queue_entries``, ``log_batches``) have no foreign keys on purpose: the
writer flushes them as independent executemany batches, and referential
clean-up (orphan messages) is done set-based by the writer and at load.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    true,
)
from sqlalchemy.types import TypeEngine

from amqplite.storeops import LOG_FIELDS

#: Bumped when a table changes shape; stored in ``meta`` under ``schema_version``.
SCHEMA_VERSION = 5
#: Versions ``Store.create`` upgrades in place: 2 added the stream tables (which
#: ``create_all`` adds to an existing database), 3 replaced one row per stream
#: entry (``stream_entries``) by chunk rows, 4 one row per delivery-log event
#: (the ``delivery_log`` table) by batch rows (``store/upgrade.py`` moves both),
#: 5 keyed the MQTT tables by (vhost, client id) instead of the client id alone.
UPGRADABLE_VERSIONS = (1, 2, 3, 4)

#: Ids per statement for IN (...) lists; well under SQLite's and PostgreSQL's limits.
IN_CHUNK = 900

metadata = MetaData()

# A BIGINT that is still SQLite's rowid alias when it is the primary key
# (SQLite only aliases the rowid for a column declared exactly INTEGER).
BigIntPK = BigInteger().with_variant(Integer(), "sqlite")

vhosts = Table(
    "vhosts",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("description", String, nullable=False, default=""),
)

users = Table(
    "users",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("password_hash", String, nullable=False),
    Column("tags", String, nullable=False, default=""),
)

permissions = Table(
    "permissions",
    metadata,
    Column("user", String(255), nullable=False),
    Column("vhost", String(255), nullable=False),
    Column("configure", String, nullable=False),
    Column("write", String, nullable=False),
    Column("read", String, nullable=False),
    PrimaryKeyConstraint("user", "vhost"),
)

#: RabbitMQ's topic permissions (``broker/topic_permissions.py``); ``create_all``
#: adds the table to an older database.
topic_permissions = Table(
    "topic_permissions",
    metadata,
    Column("user", String(255), nullable=False),
    Column("vhost", String(255), nullable=False),
    Column("exchange", String(255), nullable=False),
    Column("write", String, nullable=False),
    Column("read", String, nullable=False),
    PrimaryKeyConstraint("user", "vhost", "exchange"),
)

policies = Table(
    "policies",
    metadata,
    Column("vhost", String(255), nullable=False),
    Column("name", String(255), nullable=False),
    Column("pattern", String, nullable=False),
    Column("apply_to", String(16), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("definition", LargeBinary, nullable=False),  # CBOR
    PrimaryKeyConstraint("vhost", "name"),
)

#: Runtime parameters (shovels, federation upstreams), RabbitMQ's
#: ``/api/parameters``. ``create_all`` adds the table to an older database, and
#: ``upgrade.parameters_defined_by`` its ``defined_by`` column: the user whose
#: permissions a link of the parameter acts with (NULL: stored before links had
#: one; they act as the configured default user).
parameters = Table(
    "parameters",
    metadata,
    Column("component", String(64), nullable=False),
    Column("vhost", String(255), nullable=False),
    Column("name", String(255), nullable=False),
    Column("value", LargeBinary, nullable=False),  # CBOR
    Column("defined_by", String(255), nullable=True),
    PrimaryKeyConstraint("component", "vhost", "name"),
)

#: Persistent MQTT sessions (server/mqtt/): expiry, and in older databases the
#: QoS 2 ids awaiting PUBREL ("1,5,9"; now ``mqtt_packet_ids``). ``create_all``
#: adds the MQTT tables to an older database.
mqtt_sessions = Table(
    "mqtt_sessions",
    metadata,
    Column("vhost", String(255), primary_key=True),
    Column("client_id", String(255), primary_key=True),
    Column("expiry", Integer, nullable=False),
    Column("disconnected_at", Float, nullable=True),
    Column("awaiting_pubrel", String, nullable=False),
    Column("user", String(255), nullable=False, default=""),
)

#: A persistent MQTT session's QoS 2 packet ids in flight (``PutMQTTPacketId``)
mqtt_packet_ids = Table(
    "mqtt_packet_ids",
    metadata,
    Column("vhost", String(255), nullable=False),
    Column("client_id", String(255), nullable=False),
    Column("outbound", Boolean, nullable=False),
    Column("packet_id", Integer, nullable=False),
    Column("message_key", BigInteger, nullable=False),
    Column("released", Boolean, nullable=False),
    PrimaryKeyConstraint("vhost", "client_id", "outbound", "packet_id"),
)

#: MQTT wills not published yet (``PutMQTTWill``)
mqtt_wills = Table(
    "mqtt_wills",
    metadata,
    Column("vhost", String(255), primary_key=True),
    Column("client_id", String(255), primary_key=True),
    Column("user", String(255), nullable=False),
    Column("topic", String, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("qos", Integer, nullable=False),
    Column("retain", Boolean, nullable=False),
    Column("properties", LargeBinary, nullable=False),
    Column("delay", Integer, nullable=False),
    Column("due_at", Float, nullable=True),
)

#: Kafka consumer groups' committed offsets (``PutKafkaOffset``): the group state
#: itself is not stored (Kafka's clients rejoin after a restart), the offsets are.
#: ``create_all`` adds the table to an older database (nothing moves: no version).
kafka_offsets = Table(
    "kafka_offsets",
    metadata,
    Column("vhost", String(255), nullable=False),
    Column("group_id", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("metadata", String, nullable=False),
    Column("committed_at", BigInteger, nullable=False),  # wall-clock microseconds
    PrimaryKeyConstraint("vhost", "group_id", "topic", "partition"),
)

exchanges = Table(
    "exchanges",
    metadata,
    Column("vhost", String(255), nullable=False),
    Column("name", String(255), nullable=False),
    Column("type", String(32), nullable=False),
    Column("durable", Boolean, nullable=False),
    Column("auto_delete", Boolean, nullable=False),
    Column("internal", Boolean, nullable=False),
    Column("arguments", LargeBinary, nullable=False),  # CBOR
    PrimaryKeyConstraint("vhost", "name"),
)

#: Retained publications (broker/retained.py): one row per message an owner
#: keeps (an x-recent-history or x-lvc exchange; kind "exchange"). Its own
#: copy of the body: queue entries settle independently. Added to older
#: databases by ``create_all`` (no schema version change: nothing moves).
retained = Table(
    "retained",
    metadata,
    Column("vhost", String(255), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("owner", String(255), nullable=False),
    Column("id", BigInteger, nullable=False),  # the message key (age order)
    Column("key", String(255), nullable=False),
    Column("exchange", String(255), nullable=False),
    Column("routing_key", String(255), nullable=False),
    Column("properties", LargeBinary, nullable=False),
    Column("body", LargeBinary, nullable=False),
    PrimaryKeyConstraint("vhost", "kind", "owner", "id"),
)

queues = Table(
    "queues",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),  # broker-assigned
    Column("vhost", String(255), nullable=False),
    Column("name", String(255), nullable=False),
    Column("durable", Boolean, nullable=False),
    Column("exclusive", Boolean, nullable=False),
    Column("auto_delete", Boolean, nullable=False),
    Column("arguments", LargeBinary, nullable=False),  # CBOR
    UniqueConstraint("vhost", "name", name="uq_queues_vhost_name"),
)

bindings = Table(
    "bindings",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("vhost", String(255), nullable=False),
    Column("source", String(255), nullable=False),
    Column("destination", String(255), nullable=False),
    Column("destination_kind", String(8), nullable=False),  # 'queue' | 'exchange'
    Column("routing_key", String(255), nullable=False),
    Column("arguments", LargeBinary, nullable=False),  # CBOR
    # sha256 hex of the canonical CBOR of the arguments: a fixed-width stand-in
    # for the argument table inside the unique key.
    Column("arguments_digest", String(64), nullable=False),
    UniqueConstraint(
        "vhost",
        "source",
        "destination",
        "destination_kind",
        "routing_key",
        "arguments_digest",
        name="uq_bindings_key",
    ),
)
Index("ix_bindings_destination", bindings.c.vhost, bindings.c.destination)

messages = Table(
    "messages",
    metadata,
    Column("id", BigIntPK, primary_key=True, autoincrement=False),  # broker-assigned
    Column("exchange", String(255), nullable=False),
    Column("routing_key", String(255), nullable=False),
    Column("properties", LargeBinary, nullable=False),  # raw AMQP property bytes
    Column("body", LargeBinary, nullable=False),
    Column("body_size", Integer, nullable=False),
    # delivery mode 2, as the broker saw it (PutMessage.persistent): recovery drops
    # spilled transient messages without parsing properties. Added to older
    # databases by ``upgrade.messages_persistent``.
    Column("persistent", Boolean, nullable=False, server_default=true()),
)

queue_entries = Table(
    "queue_entries",
    metadata,
    Column("queue_id", Integer, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("message_id", BigInteger, nullable=False),
    Column("delivery_count", Integer, nullable=False, default=0),
    Column("redelivered", Boolean, nullable=False, default=False),
    PrimaryKeyConstraint("queue_id", "position"),
    # Clustered on the primary key: one b-tree fewer to touch per insert/delete.
    sqlite_with_rowid=False,
)
Index("ix_queue_entries_message_id", queue_entries.c.message_id)

# Streams: chunks of consecutive entries (as RabbitMQ's osiris chunks), one row
# per stream per group commit (capped at CHUNK_BYTES / CHUNK_ENTRIES), keyed by
# (queue_id, first_offset). ``data`` is the entries' records back to back
# (amqplite.protocol.streamrecord); ``size`` sums what the segments count for
# them. A chunk never spans two segments, so retention is a range delete by
# offset; a read finds the chunk holding its offset by ``last_offset``.
# Segments are ranges of offsets with their sizes and times, so retention and
# the admin figures cost O(segments), never a scan of the log.
stream_chunks = Table(
    "stream_chunks",
    metadata,
    Column("queue_id", Integer, nullable=False),
    Column("first_offset", BigInteger, nullable=False),
    Column("last_offset", BigInteger, nullable=False),
    Column("segment", Integer, nullable=False),
    Column("first_ts_us", BigInteger, nullable=False),
    Column("last_ts_us", BigInteger, nullable=False),
    Column("count", Integer, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("data", LargeBinary, nullable=False),
    PrimaryKeyConstraint("queue_id", "first_offset"),
)
Index("ix_stream_chunks_last_offset", stream_chunks.c.queue_id, stream_chunks.c.last_offset)
#: a chunk closes at this many bytes of records, or entries (whichever first)
CHUNK_BYTES = 1024 * 1024
CHUNK_ENTRIES = 1000

stream_segments = Table(
    "stream_segments",
    metadata,
    Column("queue_id", Integer, nullable=False),
    Column("segment", Integer, nullable=False),
    Column("first_offset", BigInteger, nullable=False),
    Column("last_offset", BigInteger, nullable=False),
    Column("first_ts_us", BigInteger, nullable=False),
    Column("last_ts_us", BigInteger, nullable=False),
    Column("size", BigInteger, nullable=False),
    PrimaryKeyConstraint("queue_id", "segment"),
)

#: Type and nullability of each delivery_log column; their order is LOG_FIELDS'.
_LOG_COLUMN_TYPES: dict[str, tuple[TypeEngine[Any], bool]] = {
    "ts_us": (BigInteger(), False),
    "event": (String(16), False),
    "vhost": (String(255), False),
    "exchange": (String(255), False),
    "routing_key": (String(255), False),
    "queue": (String(255), True),
    "message_id": (String(255), True),
    "message_key": (BigInteger(), True),
    "consumer_tag": (String(255), True),
    "attempt": (Integer(), True),
    "size": (Integer(), True),
    "reason": (String(64), True),
    "protocol": (String(16), True),
}

#: The delivery log, stored as batches of events (``store/logbatch.py`` says why):
#: ``events`` is a JSON array of event arrays in LOG_FIELDS order, whose ids are
#: ``first_id`` + their index, up to ``last_id``.
log_batches = Table(
    "log_batches",
    metadata,
    Column("first_id", BigIntPK, primary_key=True, autoincrement=False),  # writer-assigned
    Column("last_id", BigInteger, nullable=False),
    Column("first_ts_us", BigInteger, nullable=False),
    Column("last_ts_us", BigInteger, nullable=False),
    Column("count", Integer, nullable=False),
    Column("events", Text, nullable=False),
)
Index("ix_log_batches_last_id", log_batches.c.last_id)

#: One row per event, as a view over ``log_batches`` (created by ``Store.create``,
#: not by ``create_all``): for ad-hoc SQL and the humans who write it. Programs
#: read the batches (``logbatch.iter_log_rows``): a filter on the view decodes
#: every batch.
views = MetaData()
delivery_log = Table(
    "delivery_log",
    views,
    Column("id", BigInteger, primary_key=True),
    *(
        Column(name, _LOG_COLUMN_TYPES[name][0], nullable=_LOG_COLUMN_TYPES[name][1])
        for name in LOG_FIELDS
    ),
)


def delivery_log_view_sql(dialect: str) -> str:
    """``CREATE VIEW delivery_log`` for SQLite (json_each) or PostgreSQL
    (json_array_elements); the columns of the old table, in its order."""
    # a row stores "" for the broker-assigned message id: shown as amq-KEY (with_message_ids)
    mid, key = LOG_FIELDS.index("message_id"), LOG_FIELDS.index("message_key")
    if dialect == "postgresql":
        cols = ",\n  ".join(
            f"CASE WHEN e.v ->> {mid} = '' AND e.v ->> {key} IS NOT NULL "
            f"THEN 'amq-' || (e.v ->> {key}) ELSE e.v ->> {mid} END"
            f" AS {name}" if i == mid else
            f"(e.v ->> {i})::{_PG_TYPES[name]} AS {name}" for i, name in enumerate(LOG_FIELDS))
        return ("CREATE OR REPLACE VIEW delivery_log AS SELECT b.first_id + e.n - 1 AS id,\n  "
                f"{cols}\nFROM log_batches AS b CROSS JOIN LATERAL "
                "json_array_elements(b.events::json) WITH ORDINALITY AS e(v, n)")
    cols = ",\n  ".join(
        f"CASE WHEN json_extract(j.value, '$[{mid}]') = '' AND "
        f"json_extract(j.value, '$[{key}]') IS NOT NULL THEN 'amq-' || "
        f"json_extract(j.value, '$[{key}]') ELSE json_extract(j.value, '$[{mid}]') END AS {name}"
        if i == mid else f"json_extract(j.value, '$[{i}]') AS {name}"
        for i, name in enumerate(LOG_FIELDS))
    return ("CREATE VIEW IF NOT EXISTS delivery_log AS SELECT b.first_id + j.key AS id,\n  "
            f"{cols}\nFROM log_batches AS b, json_each(b.events) AS j")


_PG_TYPES = {name: ("bigint" if isinstance(kind, BigInteger) else
                    "integer" if isinstance(kind, Integer) else "text")
             for name, (kind, _null) in _LOG_COLUMN_TYPES.items()}

meta = Table(
    "meta",
    metadata,
    Column("key", String(255), primary_key=True),
    Column("value", String, nullable=False),
)
