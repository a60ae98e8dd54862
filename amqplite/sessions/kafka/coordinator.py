"""The group coordinator: every consumer group of the Kafka front, keyed by
(vhost, group id), and the requests of the classic group protocol.

Why one coordinator for the whole node: amqplite is one broker, so every group's
coordinator is this node (FindCoordinator names it), and a group is a vhost's
like a stream: two vhosts' ``followers`` are two groups with their own offsets.

Time comes in as ``now`` (the shell's clock, seconds) on every call; nothing
here sleeps. A call returns the answers it completed (JoinGroup and SyncGroup
answers wait for the rebalance, so one member's request may answer another's)
and the members it removed; ``tick(now)`` does what the timeouts decide and
``next_deadline()`` says when the shell must call it next. Group state is not
stored: after a restart the clients' heartbeats get UNKNOWN_MEMBER_ID and they
rejoin, as after a Kafka coordinator moves. Committed offsets are stored:
commits return rows for ``Broker.kafka_offsets_write``, deletions say
whether there are rows for ``Broker.kafka_offsets_delete`` to delete, and
``restore`` takes the rows read back at start.

Out of scope: the consumer group protocol of KIP-848 (ConsumerGroupHeartbeat,
API key 68) is not offered, so a client asking for it finds no version in
ApiVersions and gets UNSUPPORTED_VERSION; group protocol types other than
"consumer" work like it (the coordinator never reads the metadata); offsets do
not expire (Kafka's ``offsets.retention.minutes``): they go with their group,
topic or vhost.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections.abc import Iterable, Sequence

from amqplite.broker.kafka_rows import CommittedRow
from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.sessions.kafka import offsets as _offsets
from amqplite.sessions.kafka.answers import (
    Answers,
    FetchedOffset,
    GroupView,
    Handle,
    JoinAnswer,
    JoinMember,
    LeaveAnswer,
    LeftMember,
    Listed,
    MemberView,
    Reply,
    SyncAnswer,
)
from amqplite.sessions.kafka.group import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    NEW_MEMBER_JOIN_TIMEOUT,
    PREPARING_REBALANCE,
    STABLE,
    Committed,
    Group,
    Member,
)
from amqplite.storeops import PutKafkaOffset

GroupKey = tuple[str, str]


class GroupCoordinator:
    """Every group of the node; the Kafka listener owns one.

    Settings carry Kafka's names and defaults: ``group.min.session.timeout.ms``
    (6 s), ``group.max.session.timeout.ms`` (30 min), ``group.max.size``
    (unbounded), ``group.initial.rebalance.delay.ms`` (Kafka: 3 s; here 0 by
    default, so a lone consumer in development or CI starts at once)."""

    def __init__(self, *, min_session_timeout: float = 6.0,
                 max_session_timeout: float = 1800.0, max_group_size: int | None = None,
                 initial_rebalance_delay: float = 0.0,
                 max_metadata: int = _offsets.MAX_METADATA) -> None:
        self.min_session_timeout = min_session_timeout
        self.max_session_timeout = max_session_timeout
        self.max_group_size = max_group_size
        self.initial_rebalance_delay = initial_rebalance_delay
        self.max_metadata = max_metadata
        self.groups: dict[GroupKey, Group] = {}
        #: (time, seq, key): when a group may have something to expire
        self._heap: list[tuple[float, int, GroupKey]] = []
        self._seq = itertools.count()

    # ------------------------------------------------------------- plumbing
    def _group(self, vhost: str, group_id: str, create: bool) -> Group | None:
        g = self.groups.get((vhost, group_id))
        if g is None and create:
            g = self.groups[(vhost, group_id)] = Group(
                vhost, group_id, initial_delay=self.initial_rebalance_delay)
        return g

    def _settle(self, g: Group) -> None:
        """After a change: forget an idle group, or queue its next deadline."""
        if g.idle():
            if self.groups.get((g.vhost, g.group_id)) is g:
                del self.groups[(g.vhost, g.group_id)]
            return
        due = g.due()
        if due is not None and (g.queued is None or due < g.queued):
            g.queued = due
            heapq.heappush(self._heap, (due, next(self._seq), (g.vhost, g.group_id)))

    def _live(self, when: float, key: GroupKey) -> Group | None:
        g = self.groups.get(key)
        return g if g is not None and g.queued == when else None

    def next_deadline(self) -> float | None:
        """When ``tick`` has work next (None: nothing waits on time)."""
        heap = self._heap
        while heap and self._live(heap[0][0], heap[0][2]) is None:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def tick(self, now: float) -> Answers:
        """Carry out the timeouts due by ``now``: members removed, join phases ended."""
        out = Answers()
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, _seq, key = heapq.heappop(heap)
            g = self._live(when, key)
            if g is None:
                continue
            g.queued = None
            g.expire(out, now)
            self._settle(g)
        return out

    # ------------------------------------------------------------- JoinGroup
    def join_group(self, now: float, handle: Handle, vhost: str, group_id: str,
                   member_id: str, protocol_type: str, protocols: Sequence[tuple[str, bytes]],
                   session_timeout_ms: int, rebalance_timeout_ms: int = -1, *,
                   instance_id: str | None = None, require_known_member_id: bool = False,
                   client_id: str = "", client_host: str = "") -> Answers:
        """A JoinGroup (``require_known_member_id``: version 4 or later, where a new
        member first gets MEMBER_ID_REQUIRED and its id). Its answer is among the
        replies at once or when the join phase ends."""
        out = Answers()

        def refuse(error: ErrorCode, mid: str = member_id) -> Answers:
            out.replies.append(Reply(handle, JoinAnswer(error, mid)))
            return out

        if not group_id:
            return refuse(ErrorCode.INVALID_GROUP_ID)
        session = session_timeout_ms / 1000
        if not self.min_session_timeout <= session <= self.max_session_timeout:
            return refuse(ErrorCode.INVALID_SESSION_TIMEOUT)
        rebalance = session if rebalance_timeout_ms < 0 else rebalance_timeout_ms / 1000
        g = self._group(vhost, group_id, create=not member_id)
        if g is None:
            return refuse(ErrorCode.UNKNOWN_MEMBER_ID)
        names = [name for name, _ in protocols]
        protos = list(protocols)
        try:
            if g.state == DEAD:
                return refuse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            known = member_id in g.members or member_id in g.pending
            if (self.max_group_size is not None and not known
                    and len(g.members) + len(g.pending) >= self.max_group_size):
                return refuse(ErrorCode.GROUP_MAX_SIZE_REACHED, "")
            if not g.supports(protocol_type, names, member_id):
                return refuse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            if not member_id:
                new_id = f"{instance_id or client_id}-{uuid.uuid4()}"
                if instance_id is not None:
                    old = g.static.get(instance_id)
                    if old is not None:  # the static member is back: its old self goes
                        g.drop(g.members[old], out, "replaced by a new member with its "
                               "group.instance.id", ErrorCode.FENCED_INSTANCE_ID)
                elif require_known_member_id:
                    g.pending[new_id] = now + session
                    return refuse(ErrorCode.MEMBER_ID_REQUIRED, new_id)
                self._add(g, out, now, handle, new_id, instance_id, client_id, client_host,
                          session, rebalance, protocol_type, protos)
                return out
            if member_id in g.pending:
                if instance_id is not None:
                    return refuse(ErrorCode.INVALID_REQUEST)
                del g.pending[member_id]
                self._add(g, out, now, handle, member_id, None, client_id, client_host,
                          session, rebalance, protocol_type, protos)
                return out
            error = _offsets.member_error(g, member_id, instance_id)
            if error is not ErrorCode.NONE:
                return refuse(error)
            m = g.members[member_id]
            unchanged = m.protocols == protos
            if g.state == COMPLETING_REBALANCE and unchanged:
                # a retry of a JoinGroup already answered: the same answer again
                out.replies.append(Reply(handle, self._joined(g, m, leader_view=True)))
            elif g.state == STABLE and unchanged and member_id != g.leader:
                out.replies.append(Reply(handle, self._joined(g, m, leader_view=False)))
            elif g.state in (PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE):
                g.update_member(m, protos, session, rebalance, handle, out, now)
            else:
                return refuse(ErrorCode.UNKNOWN_MEMBER_ID)
            return out
        finally:
            self._settle(g)

    @staticmethod
    def _add(g: Group, out: Answers, now: float, handle: Handle, member_id: str,
             instance_id: str | None, client_id: str, client_host: str, session: float,
             rebalance: float, protocol_type: str, protocols: list[tuple[str, bytes]]) -> None:
        g.add_member(Member(
            member_id, instance_id, client_id, client_host, session, rebalance,
            protocol_type, protocols, deadline=now + NEW_MEMBER_JOIN_TIMEOUT,
            join_handle=handle), out, now)

    @staticmethod
    def _joined(g: Group, m: Member, leader_view: bool) -> JoinAnswer:
        members: tuple[JoinMember, ...] = ()
        if leader_view and m.member_id == g.leader:
            members = tuple(JoinMember(x.member_id, x.instance_id, x.metadata(g.protocol))
                            for x in g.members.values())
        return JoinAnswer(ErrorCode.NONE, m.member_id, g.generation, g.protocol_type,
                          g.protocol, g.leader or "", members)

    # ------------------------------------------------------------- SyncGroup
    def sync_group(self, now: float, handle: Handle, vhost: str, group_id: str,
                   generation_id: int, member_id: str,
                   assignments: Iterable[tuple[str, bytes]] = (), *,
                   instance_id: str | None = None, protocol_type: str | None = None,
                   protocol_name: str | None = None) -> Answers:
        """A SyncGroup: the leader's carries every member's assignment; a follower's
        waits for it (or is answered at once in a Stable group)."""
        out = Answers()

        def answer(error: ErrorCode) -> Answers:
            out.replies.append(Reply(handle, SyncAnswer(error)))
            return out

        g = self.groups.get((vhost, group_id))
        if g is None or g.state == EMPTY:
            return answer(ErrorCode.UNKNOWN_MEMBER_ID)
        if g.state == DEAD:
            return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = _offsets.member_error(g, member_id, instance_id)
        if error is not ErrorCode.NONE:
            return answer(error)
        if generation_id != g.generation:
            return answer(ErrorCode.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != g.protocol_type) or \
                (protocol_name is not None and protocol_name != g.protocol):
            return answer(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if g.state == PREPARING_REBALANCE:
            return answer(ErrorCode.REBALANCE_IN_PROGRESS)
        m = g.members[member_id]
        g.pending_sync.discard(member_id)
        if g.state == COMPLETING_REBALANCE:
            if m.sync_handle is not None and m.sync_handle != handle:
                out.replies.append(Reply(m.sync_handle,
                                         SyncAnswer(ErrorCode.REBALANCE_IN_PROGRESS)))
            m.sync_handle = handle
            if member_id == g.leader:
                g.assign(dict(assignments), out, now)
        else:  # Stable: the assignment is known
            m.deadline = now + m.session_timeout
            out.replies.append(Reply(handle, SyncAnswer(
                ErrorCode.NONE, m.assignment, g.protocol_type, g.protocol)))
        self._settle(g)
        return out

    # ------------------------------------------------------------- Heartbeat
    def heartbeat(self, now: float, vhost: str, group_id: str, generation_id: int,
                  member_id: str, instance_id: str | None = None) -> ErrorCode:
        """A Heartbeat's error code: NONE keeps the member; REBALANCE_IN_PROGRESS asks
        it to rejoin (its session is still refreshed)."""
        g = self.groups.get((vhost, group_id))
        if g is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if g.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = _offsets.member_error(g, member_id, instance_id)
        if error is not ErrorCode.NONE:
            return error
        if generation_id != g.generation:
            return ErrorCode.ILLEGAL_GENERATION
        m = g.members[member_id]
        m.deadline = now + m.session_timeout
        self._settle(g)
        if g.state == PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # ------------------------------------------------------------ LeaveGroup
    def leave_group(self, now: float, vhost: str, group_id: str,
                    members: Sequence[tuple[str, str | None]]) -> tuple[LeaveAnswer, Answers]:
        """A LeaveGroup of (member id, instance id) pairs (v0-2 send one, with no
        instance id): each member's outcome, and the answers its going completed."""
        out = Answers()
        g = self.groups.get((vhost, group_id))
        if g is None:
            return LeaveAnswer(ErrorCode.UNKNOWN_MEMBER_ID, tuple(
                LeftMember(mid, iid, ErrorCode.UNKNOWN_MEMBER_ID) for mid, iid in members)), out
        if g.state == DEAD:
            return LeaveAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE), out
        results = []
        for member_id, instance_id in members:
            if instance_id is None and member_id in g.pending:
                del g.pending[member_id]
                results.append(LeftMember(member_id, None, ErrorCode.NONE))
                if g.state == PREPARING_REBALANCE and g.initial_left is None \
                        and g.all_joined():
                    g.complete_join(out, now)
                continue
            if instance_id is not None and not member_id:
                member_id = g.static.get(instance_id, "")  # Kafka: a static member by name
            error = _offsets.member_error(g, member_id, instance_id)
            if error is ErrorCode.NONE:
                g.remove(g.members[member_id], out, now, "left the group")
            results.append(LeftMember(member_id, instance_id, error))
        self._settle(g)
        return LeaveAnswer(ErrorCode.NONE, tuple(results)), out

    # --------------------------------------------------------------- offsets
    def commit_offsets(self, now: float, vhost: str, group_id: str, generation_id: int,
                       member_id: str, parts: Sequence[tuple[str, int, int, str]], *,
                       instance_id: str | None = None, wall_us: int = 0,
                       ) -> tuple[list[tuple[str, int, ErrorCode]], list[CommittedRow]]:
        """An OffsetCommit of (topic, partition, offset, metadata): each partition's
        error and the group's rows to write (``Broker.kafka_offsets_write``; answer
        once they committed). Whether the
        topics exist is the shell's to check before."""
        if not group_id:
            return [(t, p, ErrorCode.INVALID_GROUP_ID) for t, p, _o, _m in parts], []
        g = self.groups.get((vhost, group_id))
        error = _offsets.commit_error(g, generation_id, member_id, instance_id)
        if error is not ErrorCode.NONE:
            return [(t, p, error) for t, p, _o, _m in parts], []
        if g is None:
            g = self._group(vhost, group_id, create=True)
            assert g is not None
        elif member_id in g.members:
            m = g.members[member_id]
            m.deadline = now + m.session_timeout  # a commit counts as a heartbeat in Kafka
        result = _offsets.store(g, parts, wall_us, self.max_metadata)
        self._settle(g)
        return result

    def fetch_offsets(self, vhost: str, group_id: str,
                      parts: Sequence[tuple[str, int]] | None) -> list[FetchedOffset]:
        """An OffsetFetch (``parts`` None: every partition the group committed)."""
        return _offsets.fetch(self.groups.get((vhost, group_id)), parts)

    def restore(self, rows: Iterable[PutKafkaOffset]) -> None:
        """The committed offsets read back at start: their groups come back Empty."""
        for r in rows:
            g = self._group(r.vhost, r.group_id, create=True)
            assert g is not None
            g.offsets[(r.topic, r.partition)] = Committed(r.offset, r.metadata, r.committed_at)

    # -------------------------------------------------------------- deletion
    def delete_group(self, vhost: str, group_id: str) -> ErrorCode:
        """DeleteGroups of one group: only an Empty one goes, with its offsets (NONE:
        the caller deletes their rows, ``Broker.kafka_offsets_delete``)."""
        g = self.groups.get((vhost, group_id))
        if g is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if g.state != EMPTY or g.members:
            return ErrorCode.NON_EMPTY_GROUP
        g.state = DEAD
        del self.groups[(vhost, group_id)]
        return ErrorCode.NONE

    def delete_topic(self, vhost: str, topic: str) -> bool:
        """A topic (its stream or super stream) is deleted: every group's offsets of it
        go; True when some group had any (the caller deletes their rows)."""
        found = False
        for g in [g for (v, _gid), g in self.groups.items() if v == vhost]:
            for key in [k for k in g.offsets if k[0] == topic]:
                del g.offsets[key]
                found = True
            self._settle(g)
        return found

    def delete_vhost(self, vhost: str) -> Answers:
        """A vhost is deleted (the store drops its rows with it): its groups end, and
        requests waiting in them are told the coordinator is gone."""
        out = Answers()
        for key in [k for k in self.groups if k[0] == vhost]:
            g = self.groups.pop(key)
            for m in list(g.members.values()):
                g.drop(m, out, "vhost deleted", ErrorCode.COORDINATOR_NOT_AVAILABLE)
            g.state = DEAD
        return out

    # ----------------------------------------------------------------- views
    def describe_group(self, vhost: str, group_id: str) -> GroupView:
        """DescribeGroups of one group (members' metadata and assignments in Stable
        and CompletingRebalance, as Kafka shows them)."""
        g = self.groups.get((vhost, group_id))
        if g is None:
            return GroupView(group_id, DEAD, "", "")
        show = g.state in (STABLE, COMPLETING_REBALANCE)
        members = tuple(MemberView(m.member_id, m.instance_id, m.client_id, m.client_host,
                                   m.metadata(g.protocol) if show else b"",
                                   m.assignment if g.state == STABLE else b"")
                        for m in g.members.values())
        return GroupView(group_id, g.state, g.protocol_type or "",
                         (g.protocol or "") if show else "", members)

    def list_groups(self, vhost: str, states: Iterable[str] = ()) -> list[Listed]:
        """ListGroups of a vhost, optionally only groups in ``states`` (v4+)."""
        want = set(states)
        return [Listed(gid, g.protocol_type or "", g.state)
                for (v, gid), g in sorted(self.groups.items())
                if v == vhost and (not want or g.state in want)]
