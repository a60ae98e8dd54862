"""The Kafka front's group rules as plain objects (DESIGN.md section 11): the classic
consumer group protocol's coordinator and the committed offsets, apart from
sockets and clocks. The shell (amqplite/server/kafka/) decodes requests with the
sans-I/O codecs (amqplite/protocol/kafka/), passes ``now`` in, sends the answers
these return, sleeps until ``next_deadline()`` and hands the store ops to
``Broker.kafka_offsets_write``.

Modules: ``coordinator`` (``GroupCoordinator``: JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, the timers, DescribeGroups/ListGroups/DeleteGroups), ``group`` (one
group's members, states and transitions), ``offsets`` (OffsetCommit and
OffsetFetch), ``answers`` (what the calls return); topics on streams: ``topics``
(``Topics``: CreateTopics, DeleteTopics, Metadata, Produce, Fetch, ListOffsets),
``records`` (records <-> AMQP messages), ``producers`` (idempotent producers).
"""
