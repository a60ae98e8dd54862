"""One consumer group of the classic protocol: its members, its state and the moves
between states, as Kafka's group coordinator makes them.

Why the rules are Kafka's and not simpler ones: librdkafka, the Java client,
kafka-python, aiokafka and kafkajs each react to specific error codes at
specific moments (rejoin on REBALANCE_IN_PROGRESS, reset the member id on
UNKNOWN_MEMBER_ID, retry on ILLEGAL_GENERATION after a commit), so a rebalance
that ends differently than in Kafka leaves some client stuck or looping.

- States: Empty -> PreparingRebalance -> CompletingRebalance -> Stable, back to
  PreparingRebalance whenever the membership or a member's protocols change;
  Dead once deleted. A generation is one completed join phase: its id only grows
  (an Empty group's too: Kafka bumps it when the last member leaves), so a stale
  member's heartbeat, sync or commit is told ILLEGAL_GENERATION, never accepted.
- The join phase ends when every member has rejoined, or at the rebalance timeout
  (the members' largest); whoever has not rejoined by then is removed, and the
  others get their JoinGroup answers: the leader with every member's metadata.
- The protocol is chosen by vote: among the protocols every member supports, each
  member votes for its first; most votes wins (ties: the leader's order). The
  leader's assignor of that name computes the assignment it sends in SyncGroup;
  followers' SyncGroups wait for it. A member missing from the leader's
  assignment gets an empty one, as in Kafka.
- Liveness: a member not awaiting a JoinGroup or SyncGroup answer must heartbeat
  within its session timeout; a member that got its JoinGroup answer must send
  SyncGroup within the rebalance timeout. Either failure removes it and starts a
  rebalance. A member id issued with MEMBER_ID_REQUIRED (JoinGroup v4+) is
  "pending": it holds no place in the generation until it joins with that id,
  and is forgotten after its session timeout.
- Static membership (``group.instance.id``) is accepted minimally: the instance id
  is recorded, a request naming it with another member id is FENCED_INSTANCE_ID,
  and a static member rejoining with an empty member id replaces its old self
  (whose waiting requests get FENCED_INSTANCE_ID) through an ordinary rebalance;
  unlike Kafka, a static member is removed like a dynamic one when it misses a
  rebalance, and its return always rebalances.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.sessions.kafka.answers import (
    Answers,
    Evicted,
    Handle,
    JoinAnswer,
    JoinMember,
    Reply,
    SyncAnswer,
)

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

#: how long a new member's JoinGroup may wait before the member is dropped
#: (Kafka's ``group.new.member.join.timeout.ms``, 5 minutes)
NEW_MEMBER_JOIN_TIMEOUT = 300.0


@attrs.frozen
class Committed:
    """A committed offset: the offset, the client's metadata string, wall-clock µs."""

    offset: int
    metadata: str
    committed_at: int


@attrs.define(eq=False)
class Member:
    """One member of a group's current or coming generation."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    #: seconds
    session_timeout: float
    rebalance_timeout: float
    protocol_type: str
    #: (name, metadata) in the member's order of preference
    protocols: list[tuple[str, bytes]]
    #: the heartbeat deadline (``now`` units); ignored while awaiting an answer,
    #: unless the member is new
    deadline: float
    assignment: bytes = b""
    #: the JoinGroup / SyncGroup request awaiting its answer
    join_handle: Handle | None = None
    sync_handle: Handle | None = None
    #: joined but never answered yet: its heartbeat deadline applies while it waits
    is_new: bool = True

    def names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def satisfied(self) -> bool:
        """A member waiting for a rebalance's answer owes no heartbeat (unless new)."""
        return not self.is_new and (self.join_handle is not None or self.sync_handle is not None)


@attrs.define(eq=False)
class Group:
    """One group's state; the coordinator calls these moves and sends what they
    answered."""

    vhost: str
    group_id: str
    #: the first rebalance of an Empty group waits this long for more members
    initial_delay: float = 0.0
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    #: insertion-ordered: the first member is the next leader when the leader goes
    members: dict[str, Member] = attrs.Factory(dict)
    #: member ids handed out with MEMBER_ID_REQUIRED -> forget-by deadline
    pending: dict[str, float] = attrs.Factory(dict)
    #: instance id -> member id of the static members
    static: dict[str, str] = attrs.Factory(dict)
    #: members of this generation that have not sent SyncGroup yet
    pending_sync: set[str] = attrs.Factory(set)
    #: when the join phase ends at the latest (PreparingRebalance)
    join_deadline: float | None = None
    #: when members still in ``pending_sync`` are removed
    sync_deadline: float | None = None
    #: the initial rebalance's remaining extension budget, None outside one
    initial_left: float | None = None
    new_member_added: bool = False
    #: committed offsets by (topic, partition)
    offsets: dict[tuple[str, int], Committed] = attrs.Factory(dict)
    #: the earliest time this group is queued in the coordinator's timer heap
    queued: float | None = None

    # ---------------------------------------------------------------- queries
    def rebalance_timeout(self) -> float:
        return max((m.rebalance_timeout for m in self.members.values()), default=0.0)

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_handle is not None
                                        for m in self.members.values())

    def supports(self, protocol_type: str, names: Sequence[str], member_id: str = "") -> bool:
        """May a member with these protocols join? An Empty group takes any non-empty
        offer; otherwise the type must match and one name be supported by all others."""
        if not protocol_type or not names:
            return False
        others = [m for mid, m in self.members.items() if mid != member_id]
        if self.state == EMPTY or not others:
            return True
        if protocol_type != self.protocol_type:
            return False
        common = set(names)
        for m in others:
            common.intersection_update(m.names())
        return bool(common)

    def select_protocol(self) -> str:
        """Each member votes for its first protocol that all support; most votes wins,
        ties go to the leader's order of preference."""
        members = list(self.members.values())
        common = set(members[0].names())
        for m in members[1:]:
            common.intersection_update(m.names())
        votes: dict[str, int] = {}
        for m in members:
            vote = next(name for name in m.names() if name in common)
            votes[vote] = votes.get(vote, 0) + 1
        leader = self.members.get(self.leader or "", members[0])
        order = {name: i for i, name in enumerate(leader.names())}
        return min(votes, key=lambda name: (-votes[name], order.get(name, len(order))))

    def due(self) -> float | None:
        """The earliest time something here times out."""
        times = [t for t in (self.join_deadline, self.sync_deadline) if t is not None]
        times.extend(self.pending.values())
        times.extend(m.deadline for m in self.members.values() if not m.satisfied())
        return min(times, default=None)

    def idle(self) -> bool:
        """Empty with nothing to keep: the coordinator forgets such a group."""
        return self.state == EMPTY and not self.members and not self.pending and not self.offsets

    # ------------------------------------------------------------------ moves
    def add_member(self, member: Member, out: Answers, now: float) -> None:
        """A joining member takes its place; it waits for the join phase's end."""
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static[member.instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id
        if self.protocol_type is None or self.state == EMPTY:
            self.protocol_type = member.protocol_type
        self.new_member_added = True
        self.rebalance_or_complete(out, now)

    def update_member(self, member: Member, protocols: list[tuple[str, bytes]],
                      session_timeout: float, rebalance_timeout: float, handle: Handle,
                      out: Answers, now: float) -> None:
        """A member rejoins (perhaps with new protocols): it waits for the join phase."""
        member.protocols = protocols
        member.session_timeout = session_timeout
        member.rebalance_timeout = rebalance_timeout
        if member.join_handle is not None and member.join_handle != handle:
            out.replies.append(Reply(member.join_handle, JoinAnswer(
                ErrorCode.REBALANCE_IN_PROGRESS, member.member_id)))
        member.join_handle = handle
        self.rebalance_or_complete(out, now)

    def rebalance_or_complete(self, out: Answers, now: float) -> None:
        """Kafka's maybePrepareRebalanceOrCompleteJoin."""
        if self.state in (EMPTY, STABLE, COMPLETING_REBALANCE):
            self.prepare_rebalance(out, now)
        elif (self.state == PREPARING_REBALANCE and self.initial_left is None
              and self.all_joined()):
            self.complete_join(out, now)

    def prepare_rebalance(self, out: Answers, now: float) -> None:
        """Start a join phase: members waiting for a sync answer are told to rejoin."""
        if self.state == COMPLETING_REBALANCE:
            for m in self.members.values():
                m.assignment = b""
                if m.sync_handle is not None:
                    out.replies.append(Reply(m.sync_handle,
                                             SyncAnswer(ErrorCode.REBALANCE_IN_PROGRESS)))
                    m.sync_handle = None
        self.pending_sync.clear()
        self.sync_deadline = None
        initial = self.state == EMPTY
        self.state = PREPARING_REBALANCE
        if initial and self.initial_delay > 0:
            self.join_deadline = now + self.initial_delay
            self.initial_left = max(self.rebalance_timeout() - self.initial_delay, 0.0)
            self.new_member_added = False
        elif self.all_joined():
            self.complete_join(out, now)
        else:
            self.join_deadline = now + self.rebalance_timeout()

    def join_timed_out(self, out: Answers, now: float) -> None:
        """The join deadline passed: extend an initial rebalance that keeps gaining
        members (within its budget), else end the join phase with who is there."""
        left = self.initial_left
        if left is not None and self.new_member_added and left > 0:
            step = min(self.initial_delay, left)
            self.join_deadline = now + step
            self.initial_left = left - step
            self.new_member_added = False
            return
        self.complete_join(out, now)

    def complete_join(self, out: Answers, now: float) -> None:
        """End the join phase: drop who did not rejoin, open the next generation and
        answer every JoinGroup (the leader's with the members' metadata)."""
        self.join_deadline = None
        self.initial_left = None
        for m in [m for m in self.members.values() if m.join_handle is None]:
            self.drop(m, out, "did not rejoin before the rebalance timeout")
        if self.state == DEAD:
            return
        self.generation += 1
        if not self.members:
            self.protocol = None
            self.leader = None
            self.state = EMPTY
            return
        self.protocol = self.select_protocol()
        self.state = COMPLETING_REBALANCE
        listing = tuple(JoinMember(m.member_id, m.instance_id, m.metadata(self.protocol))
                        for m in self.members.values())
        for m in self.members.values():
            assert m.join_handle is not None
            out.replies.append(Reply(m.join_handle, JoinAnswer(
                ErrorCode.NONE, m.member_id, self.generation, self.protocol_type,
                self.protocol, self.leader or "",
                listing if m.member_id == self.leader else ())))
            m.join_handle = None
            m.is_new = False
            m.deadline = now + m.session_timeout
        self.pending_sync = set(self.members)
        self.sync_deadline = now + self.rebalance_timeout()

    def assign(self, assignments: dict[str, bytes], out: Answers, now: float) -> None:
        """The leader's SyncGroup: every member's assignment, to whoever waits for it."""
        for m in self.members.values():
            m.assignment = assignments.get(m.member_id, b"")
            if m.sync_handle is not None:
                out.replies.append(Reply(m.sync_handle, SyncAnswer(
                    ErrorCode.NONE, m.assignment, self.protocol_type, self.protocol)))
                m.sync_handle = None
                m.deadline = now + m.session_timeout
        self.state = STABLE

    def drop(self, m: Member, out: Answers, reason: str,
             error: ErrorCode = ErrorCode.UNKNOWN_MEMBER_ID) -> None:
        """Remove a member (its waiting requests get ``error``); no rebalance here."""
        if m.join_handle is not None:
            out.replies.append(Reply(m.join_handle, JoinAnswer(error, "")))
        if m.sync_handle is not None:
            out.replies.append(Reply(m.sync_handle, SyncAnswer(error)))
        del self.members[m.member_id]
        self.pending_sync.discard(m.member_id)
        if m.instance_id is not None and self.static.get(m.instance_id) == m.member_id:
            del self.static[m.instance_id]
        if self.leader == m.member_id:
            self.leader = next(iter(self.members), None)
        out.evicted.append(Evicted(self.vhost, self.group_id, m.member_id, reason))

    def remove(self, m: Member, out: Answers, now: float, reason: str,
               error: ErrorCode = ErrorCode.UNKNOWN_MEMBER_ID) -> None:
        """Remove a member and let the group react (rebalance, or end the join phase)."""
        self.drop(m, out, reason, error)
        if self.state in (STABLE, COMPLETING_REBALANCE):
            self.prepare_rebalance(out, now)
        elif self.state == PREPARING_REBALANCE and self.initial_left is None \
                and self.all_joined():
            self.complete_join(out, now)

    def expire(self, out: Answers, now: float) -> None:
        """Everything whose deadline passed: pending ids, silent members, the join
        phase's end, members that never sent SyncGroup."""
        for mid in [mid for mid, t in self.pending.items() if t <= now]:
            del self.pending[mid]
            if self.state == PREPARING_REBALANCE and self.initial_left is None \
                    and self.all_joined():
                self.complete_join(out, now)
        for m in [m for m in self.members.values() if not m.satisfied() and m.deadline <= now]:
            # (re-checked: removing one may have ended a join phase and answered another)
            if m.member_id in self.members and not m.satisfied() and m.deadline <= now:
                self.remove(m, out, now, "session timeout expired")
        if self.join_deadline is not None and self.join_deadline <= now \
                and self.state == PREPARING_REBALANCE:
            self.join_timed_out(out, now)
        if self.sync_deadline is not None and self.sync_deadline <= now:
            self.sync_deadline = None
            late = [self.members[mid] for mid in self.pending_sync if mid in self.members]
            self.pending_sync.clear()
            if late and self.state in (COMPLETING_REBALANCE, STABLE):
                for m in late:
                    self.drop(m, out, "no SyncGroup before the rebalance timeout")
                self.prepare_rebalance(out, now)
