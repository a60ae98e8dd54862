"""The records of the store operations the core emits and the store carries out.

A top-level module of plain data (frozen, slotted attrs classes and
NamedTuples), importing nothing of amqplite's layers, so the broker core
emits these records without importing ``amqplite.store`` and the store
carries them out without importing the broker. The event loop builds them
cheaply and hands them to the writer without sharing mutable state.
Argument tables are plain dicts; the writer CBOR-encodes them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import attrs

Args = dict[str, Any]


def _args(value: Any) -> Any:
    return {} if value is None else value


# --- metadata ---------------------------------------------------------------


#: meta key where the audit job records what it exported; the broker prunes
#: delivery-log rows only at or below it (here, not in schema: no SQLAlchemy)
EXPORTED_KEY = "audit_exported_id"
#: meta key set once transient messages were written to spill them (recovery drops them)
TRANSIENT_KEY = "transient_spilled"
#: meta key set once the default vhost and the configured users were written: they
#: seed the database on the first start only, later edits (API, CLI) stay
SEEDED_KEY = "security_seeded"
#: meta key: "1" after a clean shutdown, "0" while a broker runs (store.lifecycle.mark_open)
CLEAN_KEY = "clean_shutdown"


@attrs.frozen
class PutExchange:
    """Create or replace a durable exchange."""

    vhost: str
    name: str
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: Args = attrs.field(factory=dict, converter=_args)


@attrs.frozen
class DeleteExchange:
    """Delete an exchange and every binding whose source or destination it is."""

    vhost: str
    name: str


@attrs.frozen
class PutQueue:
    """Create or replace a queue; ``queue_id`` is assigned by the broker."""

    queue_id: int
    vhost: str
    name: str
    durable: bool = True
    exclusive: bool = False
    auto_delete: bool = False
    arguments: Args = attrs.field(factory=dict, converter=_args)


@attrs.frozen
class DeleteQueue:
    """Delete a queue, its entries, the bindings to it, and messages left orphaned."""

    queue_id: int


@attrs.frozen
class PutBinding:
    """Add a binding (idempotent: the same key twice is one row)."""

    vhost: str
    source: str
    destination: str
    destination_kind: str  # 'queue' | 'exchange'
    routing_key: str
    arguments: Args = attrs.field(factory=dict, converter=_args)


@attrs.frozen
class DeleteBinding:
    """Remove the binding with exactly this key and argument table."""

    vhost: str
    source: str
    destination: str
    destination_kind: str
    routing_key: str
    arguments: Args = attrs.field(factory=dict, converter=_args)


@attrs.frozen
class PutPolicy:
    """Create or replace a policy; ``definition`` is a dict (CBOR on disk)."""

    vhost: str
    name: str
    pattern: str
    apply_to: str
    priority: int
    definition: Args = attrs.field(factory=dict, converter=_args)


@attrs.frozen
class DeletePolicy:
    """Delete a policy."""

    vhost: str
    name: str


@attrs.frozen
class PutParameter:
    """Create or replace a runtime parameter (RabbitMQ's ``/api/parameters``: a
    shovel, a federation upstream); ``value`` is a dict, or a list for an upstream
    set (CBOR on disk)."""

    component: str
    vhost: str
    name: str
    value: Any = attrs.field(factory=dict, converter=_args)
    #: the user who defined it: its links act with that user's permissions
    defined_by: str | None = None


@attrs.frozen
class DeleteParameter:
    """Delete a runtime parameter."""

    component: str
    vhost: str
    name: str


@attrs.frozen
class PutRetained:
    """Keep one retained publication (broker/retained.py) of a durable owner.

    ``kind``/``owner`` name the index (kind "exchange": the exchange ``owner``
    of ``vhost``), ``key`` the message's key in it; ``message_id`` is the
    message's broker key (never reused): one row per owner and message (a
    message may reach two retaining exchanges)."""

    message_id: int
    vhost: str
    kind: str
    owner: str
    key: str
    exchange: str
    routing_key: str
    properties: bytes
    body: bytes


@attrs.frozen
class DeleteRetained:
    """Drop one retained publication (replaced, evicted by a limit, or cleared)."""

    vhost: str
    kind: str
    owner: str
    message_id: int


@attrs.frozen
class ClearRetained:
    """Drop every retained publication of one owner."""

    vhost: str
    kind: str
    owner: str


@attrs.frozen
class PutVHost:
    """Create or replace a virtual host row."""

    name: str
    description: str = ""


@attrs.frozen
class DeleteVHost:
    """Delete a vhost and every row in it: queues (entries, orphaned messages),
    exchanges, bindings, policies and permissions.

    ``keep_queues``: ids of queues left alone. A re-submitted delete (see
    ``REPLAYABLE``) may run after a later submission created the vhost again
    with queues and entries; those belong to the new vhost."""

    name: str
    keep_queues: tuple[int, ...] = ()


@attrs.frozen
class PutUser:
    """Create or replace a user; ``password_hash`` in RabbitMQ's sha256 format,
    ``tags`` comma-separated as RabbitMQ writes them."""

    name: str
    password_hash: str
    tags: str = ""


@attrs.frozen
class DeleteUser:
    """Delete a user and its permissions."""

    name: str


@attrs.frozen
class PutPermission:
    """Set a user's configure/write/read regular expressions in a vhost."""

    user: str
    vhost: str
    configure: str
    write: str
    read: str


@attrs.frozen
class DeletePermission:
    """Clear a user's permissions in a vhost."""

    user: str
    vhost: str


@attrs.frozen
class PutTopicPermission:
    """Set a user's topic permission (write/read expressions) for one exchange."""

    user: str
    vhost: str
    exchange: str
    write: str
    read: str


@attrs.frozen
class DeleteTopicPermission:
    """Clear a user's topic permission for one exchange, or (None) all in the vhost."""

    user: str
    vhost: str
    exchange: str | None = None


@attrs.frozen
class PutMQTTSession:
    """A persistent MQTT session's state beside its queues (server/mqtt/), so a
    restart knows its expiry. ``awaiting_pubrel`` is read from older databases
    only: the ids are :class:`PutMQTTPacketId` rows now, written at receipt.

    ``expiry``: seconds it outlives a disconnect (NEVER_EXPIRES for 3.1.1
    clean session 0); ``disconnected_at``: wall-clock seconds, None while
    connected (a crash then counts from the restart); ``user``: who opened it
    (``mqtt_takeover = "user"``; empty in rows of older versions)."""

    vhost: str
    client_id: str
    expiry: int
    disconnected_at: float | None = None
    awaiting_pubrel: tuple[int, ...] = ()
    user: str = ""


#: PutMQTTSession.expiry of a session that never expires
NEVER_EXPIRES = 0xFFFFFFFF


@attrs.frozen
class DeleteMQTTSession:
    """A persistent MQTT session ended (clean start, expiry); its packet ids go too.
    MQTT state is keyed by (vhost, client id): two vhosts' ``sensor-42`` are two."""

    vhost: str
    client_id: str


@attrs.frozen
class PutMQTTPacketId:
    """A persistent MQTT session's packet id whose state must outlive a crash.

    Inbound (``outbound`` False): a QoS 2 PUBLISH acknowledged with PUBREC and
    not released yet; written with the message, so a retransmission after a
    kill -9 is not routed again. Outbound: our QoS 2 PUBLISH of the message
    ``message_key`` (still unacked in the session's queue), ``released`` once
    the client's PUBREC came and PUBREL is owed until PUBCOMP."""

    vhost: str
    client_id: str
    packet_id: int
    outbound: bool
    message_key: int = 0
    released: bool = False


@attrs.frozen
class DeleteMQTTPacketId:
    """A packet id's flow ended (PUBREL received, PUBCOMP received)."""

    vhost: str
    client_id: str
    packet_id: int
    outbound: bool


@attrs.frozen
class PutMQTTWill:
    """A will not published yet: a connected client's (it fires after a crash, when
    the restart ends that connection) or a delayed one (MQTT 5 Will Delay
    Interval) with ``due_at``, wall-clock seconds. ``properties`` are the AMQP
    properties it is published with (MQTT 5 will properties mapped)."""

    client_id: str
    vhost: str
    user: str
    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: bytes
    delay: int = 0
    due_at: float | None = None


@attrs.frozen
class DeleteMQTTWill:
    """A will was published or cancelled (normal DISCONNECT, resumed session)."""

    vhost: str
    client_id: str


@attrs.frozen
class PutKafkaOffset:
    """A Kafka consumer group's committed offset of one topic-partition
    (``sessions/kafka``): OffsetCommit stores whatever the client commits, a lower
    offset too, as Kafka does. ``committed_at``: wall-clock microseconds."""

    vhost: str
    group_id: str
    topic: str
    partition: int
    offset: int
    metadata: str = ""
    committed_at: int = 0


@attrs.frozen
class DeleteKafkaOffsets:
    """A group's committed offsets go (the group is deleted: ``topic`` None), or one
    topic's in every group of the vhost (its stream is deleted: ``group_id`` None)."""

    vhost: str
    group_id: str | None = None
    topic: str | None = None


@attrs.frozen
class PutMeta:
    """Set a key in the ``meta`` table (e.g. the audit watermark mirror)."""

    key: str
    value: str


# --- hot path ---------------------------------------------------------------
#
# The per-message ops are built once per message by the broker and again by the
# writer when it unpickles them: plain slotted attrs classes, equal and hashable by
# value like the frozen ones but with a plain ``__init__`` (a frozen one sets each
# field through ``object.__setattr__``: three times the cost, twice per message).
# Nothing mutates an op once built.


@attrs.define(unsafe_hash=True)
class PutMessage:
    """Store one message body, shared by every entry that references it."""

    message_id: int
    exchange: str
    routing_key: str
    properties: bytes  # the raw AMQP content-header property bytes
    body: bytes
    #: delivery mode 2: the broker knows it, so the store never parses properties
    #: (a transient one is written only to spill it; recovery drops those)
    persistent: bool = True


@attrs.frozen
class CopyMessage:
    """Store a new message whose body is copied from a stored one, inside the database.

    Dead-lettering a message whose body was paged out of RAM writes the
    copy without reading the body back through Python. Ordered like a
    metadata op: it sees every op before it in the group.
    """

    message_id: int
    source_id: int
    exchange: str
    routing_key: str
    properties: bytes
    persistent: bool = True


@attrs.define(unsafe_hash=True)
class PutEntry:
    """Place a message in a queue at a broker-assigned position."""

    queue_id: int
    position: int
    message_id: int
    delivery_count: int = 0
    redelivered: bool = False


@attrs.define(unsafe_hash=True)
class DeleteEntry:
    """Remove an entry (ack, drop, expiry); its message goes with its last entry."""

    queue_id: int
    position: int
    message_id: int


@attrs.frozen
class DeleteEntries:
    """Delete a queue's entries at positions ``lo..hi`` (a purged spilled run), and
    the messages no other entry holds."""

    queue_id: int
    lo: int
    hi: int


@attrs.define(unsafe_hash=True)
class UpdateEntry:
    """Record a delivery attempt / requeue on an entry."""

    queue_id: int
    position: int
    delivery_count: int
    redelivered: bool


@attrs.frozen
class LogEvent:
    """One delivery_log row (see docs/internals.md); field order is column order."""

    ts_us: int
    event: str
    vhost: str
    exchange: str
    routing_key: str
    queue: str | None = None
    message_id: str | None = None
    message_key: int | None = None
    consumer_tag: str | None = None
    attempt: int | None = None
    size: int | None = None
    reason: str | None = None
    #: the client protocol of a publish, delivery or ack ("amqp-0-9-1", "mqtt-3.1.1",
    #: "mqtt-5.0", "mqtt-3.1"); None for the broker's own events (routed, expired...)
    #: and in rows written before it existed
    protocol: str | None = None


class EncodedLog(NamedTuple):
    """Delivery-log rows already encoded as one batch's JSON (``store/logbatch.py``).

    The process store turns a submission's row tuples into these on the event
    loop before it pickles the submission: orjson writes a row faster than
    pickle does, and the writer then stores the bytes as they came, where
    unpickling and re-encoding rows one by one cost about 1 µs each.
    """

    events: str
    n_events: int
    first_ts_us: int
    last_ts_us: int
    #: the highest message key among the rows (0: none), for the writer's mark
    max_message_key: int


# --- streams ----------------------------------------------------------------


class AppendStream(NamedTuple):
    """Append one entry to a stream's log at a broker-assigned offset (hot path).

    ``record`` is the entry as stored (``amqplite.protocol.streamrecord``: route,
    properties with x-stream-offset, body), or its pieces ``(route, before,
    after, body)`` with the offset to go between ``before`` and ``after``
    (``properties.long_header_splice``): the broker sends the pieces and the
    writer joins them (``store.apply.record_bytes``), because the event loop is the
    busy side of an append and the join copies the whole entry. ``size`` is
    what the segment counts for it (body + properties as published). The
    writer packs consecutive appends of one stream into one chunk row. A
    NamedTuple, not a frozen attrs class like the others: built once per entry
    on the event loop, where the attrs initialiser cost a microsecond more.
    """

    queue_id: int
    offset: int
    segment: int
    ts_us: int
    message_key: int
    size: int
    record: bytes | tuple[bytes, bytes, bytes, bytes]


#: one entry of AppendStreams: AppendStream's fields after ``queue_id``
StreamEntryRow = tuple[int, int, int, int, int, "bytes | tuple[bytes, bytes, bytes, bytes]"]


class AppendStreams(NamedTuple):
    """Consecutive appends to one stream, as the broker makes them (hot path).

    ``entries`` are plain tuples in AppendStream's field order after
    ``queue_id``: pickle writes a list of plain tuples in C, where every
    NamedTuple op took a Python-level reducer call, about a tenth of the event
    loop's time during a stream publish. The broker extends the last op of its
    batch while appends to the same stream follow one another.
    """

    queue_id: int
    entries: list[StreamEntryRow]


def stream_appends(ops: Any) -> list[AppendStream]:
    """The appends among ``ops``, one AppendStream per entry (tests, tools)."""
    out: list[AppendStream] = []
    for op in ops:
        if type(op) is AppendStream:
            out.append(op)
        elif type(op) is AppendStreams:
            out.extend(AppendStream(op.queue_id, *e) for e in op.entries)
    return out


@attrs.frozen
class PutStreamSegment:
    """Create or replace a segment's row: written when it opens (``last_offset`` is
    ``first_offset - 1``, ``size`` 0) and again, complete, when it is sealed."""

    queue_id: int
    segment: int
    first_offset: int
    last_offset: int
    first_ts_us: int
    last_ts_us: int
    size: int


@attrs.frozen
class DeleteStreamSegments:
    """Retention: drop a stream's segments numbered below ``segment`` and their
    entries (offsets below ``first_offset``, the first one kept): two range deletes."""

    queue_id: int
    segment: int
    first_offset: int


#: Ops that set one key to a value or remove one key (with what hangs on it):
#: applying such an op again, followed again by every later op of these kinds,
#: leaves the store as applying them once did. The metadata ops of a
#: submission whose commit failed are re-submitted that way
#: (``server.persistence``): memory already holds them, and the failed commit
#: may even have landed (a writer killed before it answered), so writing them
#: again is right either way, where undoing them in memory would be wrong in
#: the second case. Not here: message bodies (``CopyMessage`` too: an insert),
#: entries, acks, log rows and stream appends; a failed publish is withdrawn
#: and nacked instead (``Broker.commit_failed``).
REPLAYABLE: frozenset[type] = frozenset({
    PutExchange, DeleteExchange, PutQueue, DeleteQueue, DeleteEntries, PutBinding,
    DeleteBinding, PutPolicy, DeletePolicy, PutParameter, DeleteParameter, PutVHost,
    DeleteVHost, PutUser, DeleteUser,
    PutPermission, DeletePermission, PutMeta, PutStreamSegment, DeleteStreamSegments,
    PutMQTTSession, DeleteMQTTSession, PutMQTTPacketId, DeleteMQTTPacketId, PutMQTTWill,
    DeleteMQTTWill, PutKafkaOffset, DeleteKafkaOffsets,
    PutTopicPermission, DeleteTopicPermission,
    # removals of retained messages; a PutRetained is message data (its message row
    # is not written again): ``RetainedStore.commit_failed`` withdraws it instead
    DeleteRetained, ClearRetained,
})


#: The delivery_log columns after ``id``, in row order: LogEvent's fields. The one
#: definition of that order; the table, the writer, the broker's row tuples and
#: the audit job follow it (this module stays free of SQLAlchemy and pyspark).
LOG_FIELDS: tuple[str, ...] = tuple(a.name for a in attrs.fields(LogEvent))


HOT_OPS = (PutMessage, PutEntry, DeleteEntry, UpdateEntry, LogEvent, AppendStream,
           AppendStreams, EncodedLog)
Op = (
    AppendStream
    | AppendStreams
    | PutStreamSegment
    | DeleteStreamSegments
    | CopyMessage
    | PutExchange
    | DeleteExchange
    | PutRetained
    | DeleteRetained
    | ClearRetained
    | PutQueue
    | DeleteQueue
    | DeleteEntries
    | PutBinding
    | DeleteBinding
    | PutPolicy
    | DeletePolicy
    | PutParameter
    | DeleteParameter
    | PutVHost
    | DeleteVHost
    | PutUser
    | DeleteUser
    | PutPermission
    | DeletePermission
    | PutTopicPermission
    | DeleteTopicPermission
    | PutMeta
    | PutMQTTSession
    | DeleteMQTTSession
    | PutMQTTPacketId
    | DeleteMQTTPacketId
    | PutMQTTWill
    | DeleteMQTTWill
    | PutKafkaOffset
    | DeleteKafkaOffsets
    | PutMessage
    | PutEntry
    | DeleteEntry
    | UpdateEntry
    | LogEvent
    | EncodedLog
)


def settle_batch(ops: list[Any]) -> list[Any]:
    """``ops`` without the entries inserted and deleted within it (a message delivered
    and acked before its batch was handed over), their updates, and the message rows
    none of whose entries is left. A batch with a metadata op goes as it is: a later
    op may still read a cancelled message's row, and a row kept without its entry
    pair would be written with no entry and no delete to sweep it (an orphan until
    recovery); the store's ``Applier`` cancels such pairs within its own segments.

    The shell drops what it cancels before a receipt waits on it
    (``Persistence.flush_settled``), and the writer commits a group whose ops all
    cancel without an fsync (``store.committer.needs_fsync``)."""
    puts: dict[tuple[int, int], int] = {}
    drop: set[int] = set()
    for i, op in enumerate(ops):
        t = type(op)
        if t is PutEntry:
            puts[(op.queue_id, op.position)] = i
        elif t is DeleteEntry:
            j = puts.pop((op.queue_id, op.position), None)
            if j is not None:
                drop.add(j)
                drop.add(i)
        elif t is not PutMessage and t is not UpdateEntry and type(op) is not tuple:
            return ops
    if not drop:
        return ops
    cancelled = {(ops[j].queue_id, ops[j].position) for j in drop if type(ops[j]) is PutEntry}
    gone = {ops[j].message_id for j in drop if type(ops[j]) is PutEntry}
    live = {op.message_id for i, op in enumerate(ops) if type(op) is PutEntry and i not in drop}
    gone -= live
    kept = []
    for i, op in enumerate(ops):
        t = type(op)
        if i in drop or (t is PutMessage and op.message_id in gone) or (
                t is UpdateEntry and (op.queue_id, op.position) in cancelled):
            continue
        kept.append(op)
    return kept
