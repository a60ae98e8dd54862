"""What the group coordinator's calls return: plain records the shell encodes.

Why "answers to send" instead of awaiting: a JoinGroup is answered when the
rebalance completes, which another member's request or a timeout decides, so
any call may finish requests of other members. Each waiting request is named
by the shell's opaque ``handle`` (its connection and correlation id); a call
returns every answer it completed, and the members it removed, for the log.
"""

from __future__ import annotations

from collections.abc import Hashable

import attrs

from amqplite.protocol.kafka.errors import ErrorCode

#: the shell's name for a request awaiting its answer (connection, correlation id)
Handle = Hashable


@attrs.frozen
class JoinMember:
    """One member as the leader's JoinGroup answer lists it, with its metadata for
    the chosen protocol (what the leader's assignor reads)."""

    member_id: str
    instance_id: str | None
    metadata: bytes


@attrs.frozen
class JoinAnswer:
    """A JoinGroup response's fields. ``members`` is filled for the leader only."""

    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinMember, ...] = ()
    skip_assignment: bool = False


@attrs.frozen
class SyncAnswer:
    """A SyncGroup response's fields: the member's assignment from the leader."""

    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@attrs.frozen
class Reply:
    """An answer for a request that waited (or the caller's own, answered at once)."""

    handle: Handle
    answer: JoinAnswer | SyncAnswer


@attrs.frozen
class Evicted:
    """A member the coordinator removed (for the log and the dashboard)."""

    vhost: str
    group_id: str
    member_id: str
    reason: str


@attrs.define
class Answers:
    """What one call completed: replies to send, members removed."""

    replies: list[Reply] = attrs.Factory(list)
    evicted: list[Evicted] = attrs.Factory(list)


@attrs.frozen
class LeftMember:
    """One member of a LeaveGroup (v3+ batches them) and its outcome."""

    member_id: str
    instance_id: str | None
    error: ErrorCode


@attrs.frozen
class LeaveAnswer:
    """A LeaveGroup response's fields (v0-2 answer with the one member's error)."""

    error: ErrorCode
    members: tuple[LeftMember, ...] = ()


@attrs.frozen
class MemberView:
    """A member as DescribeGroups shows it."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@attrs.frozen
class GroupView:
    """A group as DescribeGroups shows it (an unknown group: state "Dead", no members,
    as Kafka answers)."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberView, ...] = ()
    error: ErrorCode = ErrorCode.NONE


@attrs.frozen
class Listed:
    """A group as ListGroups shows it."""

    group_id: str
    protocol_type: str
    state: str


@attrs.frozen
class FetchedOffset:
    """One partition of an OffsetFetch answer: -1 and "" when nothing is committed."""

    topic: str
    partition: int
    offset: int
    metadata: str
    error: ErrorCode = ErrorCode.NONE
