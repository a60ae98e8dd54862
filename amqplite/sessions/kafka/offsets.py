"""OffsetCommit and OffsetFetch of the classic group protocol.

Why these checks: a commit from a member of an older generation may carry the
positions of partitions that now belong to someone else; Kafka refuses it
(ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, or REBALANCE_IN_PROGRESS while the
group waits for its leader's assignment) so the new owner's commits are not
overwritten. A commit with generation -1 and no member id is a "simple"
commit (the admin client, a consumer that assigns partitions itself): Kafka
takes it only while the group has no members, and creates the group for it.

What is stored is what was committed: Kafka keeps the last commit of each
partition even when it is lower than the one before (a consumer that seeks
back and commits means it), so "OffsetFetch returns the last successful
commit" is the rule, not "offsets never go back". Each accepted partition
becomes a row for ``Broker.kafka_offsets_write`` (which builds its store op);
the shell answers after the commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from amqplite.broker.kafka_rows import CommittedRow
from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.sessions.kafka.answers import FetchedOffset
from amqplite.sessions.kafka.group import COMPLETING_REBALANCE, DEAD, EMPTY, Committed, Group

#: Kafka's ``offset.metadata.max.bytes``: longer metadata is OFFSET_METADATA_TOO_LARGE
MAX_METADATA = 4096


def member_error(g: Group, member_id: str, instance_id: str | None) -> ErrorCode:
    """Kafka's validateMember: the member must be known, and a static member's
    instance id must still name it."""
    if instance_id is not None:
        owner = g.static.get(instance_id)
        if owner is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if owner != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
    if member_id not in g.members:
        return ErrorCode.UNKNOWN_MEMBER_ID
    return ErrorCode.NONE


def commit_error(g: Group | None, generation: int, member_id: str,
                 instance_id: str | None) -> ErrorCode:
    """Whether a commit is accepted, from the group's state (None: no such group,
    where only a simple commit is, and the caller creates the group)."""
    if g is None:
        return ErrorCode.NONE if generation < 0 else ErrorCode.ILLEGAL_GENERATION
    if g.state == DEAD:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if generation < 0 and g.state == EMPTY:
        return ErrorCode.NONE
    if generation >= 0 or member_id or instance_id is not None:
        error = member_error(g, member_id, instance_id)
        if error is not ErrorCode.NONE:
            return error
        if generation != g.generation:
            return ErrorCode.ILLEGAL_GENERATION
    elif g.state != EMPTY:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if g.state == COMPLETING_REBALANCE:
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.NONE


def store(g: Group, parts: Iterable[tuple[str, int, int, str]], wall_us: int,
          max_metadata: int = MAX_METADATA,
          ) -> tuple[list[tuple[str, int, ErrorCode]], list[CommittedRow]]:
    """Record accepted commits (topic, partition, offset, metadata) in the group:
    each partition's outcome and the rows of those recorded."""
    errors: list[tuple[str, int, ErrorCode]] = []
    rows: list[CommittedRow] = []
    for topic, partition, offset, metadata in parts:
        metadata = metadata or ""
        if len(metadata.encode()) > max_metadata:
            errors.append((topic, partition, ErrorCode.OFFSET_METADATA_TOO_LARGE))
            continue
        g.offsets[(topic, partition)] = Committed(offset, metadata, wall_us)
        rows.append((topic, partition, offset, metadata, wall_us))
        errors.append((topic, partition, ErrorCode.NONE))
    return errors, rows


def fetch(g: Group | None, parts: Sequence[tuple[str, int]] | None) -> list[FetchedOffset]:
    """The committed offsets of ``parts`` (-1 where none), or of every partition the
    group committed when ``parts`` is None (OffsetFetch with null topics)."""
    offsets = {} if g is None else g.offsets
    if parts is None:
        parts = sorted(offsets)
    out = []
    for topic, partition in parts:
        c = offsets.get((topic, partition))
        out.append(FetchedOffset(topic, partition, -1, "") if c is None else
                   FetchedOffset(topic, partition, c.offset, c.metadata))
    return out
