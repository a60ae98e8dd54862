"""Consumers of one group join, sync, heartbeat, commit, leave, crash and time out
in any order under a moving clock (hypothesis state machine, plain calls on the
pure coordinator; issue 37). What must hold:

- every request is answered at most once, and one not answered yet is held by
  a member of the group (nothing lost);
- the generation of successful JoinGroup answers only grows;
- a SyncGroup answer of generation G carries exactly what G's leader assigned
  to that member, so the partitions have one owner each per generation;
- a removed member never gets a successful heartbeat, and a successful
  heartbeat names the current generation;
- a commit succeeds only with the current generation (or as a simple commit of
  an Empty group), and OffsetFetch returns the last successful commit of each
  partition (Kafka stores a lower one too).
"""

from __future__ import annotations

import attrs
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.sessions.kafka.answers import Answers, FetchedOffset, JoinAnswer, SyncAnswer
from amqplite.sessions.kafka.coordinator import GroupCoordinator
from amqplite.sessions.kafka.group import EMPTY

E = ErrorCode
V, G, T = "/", "g", "t"
NAMES = ("a", "b", "c")
PARTITIONS = 6
PROTOCOLS = {"a": [("range", b"a"), ("roundrobin", b"a")],
             "b": [("roundrobin", b"b"), ("range", b"b")],
             "c": [("range", b"c")]}
#: "c" is a static member (group.instance.id): a restart replaces its old self
INSTANCE = {"c": "pod-c"}


@attrs.define
class Client:
    """What a consumer knows: its member id, the generation it joined, its join answer."""

    incarnation: int = 0
    member_id: str = ""
    generation: int = -1
    joined: JoinAnswer | None = None
    synced: bool = False
    busy: bool = False  # a JoinGroup or SyncGroup of it awaits its answer


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.c = GroupCoordinator(initial_rebalance_delay=0.0)
        self.now = 0.0
        self.seq = 0
        self.clients = {n: Client() for n in NAMES}
        #: handle -> (client name, incarnation, generation of a SyncGroup or None)
        self.waiting: dict[tuple[str, int], tuple[str, int, int | None]] = {}
        self.removed: set[str] = set()
        self.max_gen = 0
        self.leader_sent: dict[int, dict[str, bytes]] = {}
        self.committed: dict[tuple[str, int], int] = {}

    # ------------------------------------------------------------ plumbing
    def _handle(self, name: str, sync_gen: int | None = None) -> tuple[str, int]:
        self.seq += 1
        h = (name, self.seq)
        self.waiting[h] = (name, self.clients[name].incarnation, sync_gen)
        self.clients[name].busy = True
        return h

    def _group_gen(self) -> int | None:
        g = self.c.groups.get((V, G))
        return None if g is None else g.generation

    def _take(self, out: Answers) -> None:
        self.removed.update(e.member_id for e in out.evicted)
        for r in out.replies:
            assert r.handle in self.waiting, f"{r.handle} answered twice or never asked"
            name, inc, sync_gen = self.waiting.pop(r.handle)  # type: ignore[call-overload]
            ans = r.answer
            if isinstance(ans, JoinAnswer) and ans.error is E.NONE:
                assert ans.generation_id >= self.max_gen, "generation went back"
                self.max_gen = ans.generation_id
            if isinstance(ans, SyncAnswer) and ans.error is E.NONE:
                assert sync_gen is not None
                sent = self.leader_sent.get(sync_gen)
                assert sent is not None, "a follower was answered before its leader synced"
                cl = self.clients[name]
                assert ans.assignment == sent.get(cl.member_id, b"") or inc != cl.incarnation
            cl = self.clients[name]
            if inc != cl.incarnation:
                continue  # a crashed incarnation's answer: nobody reads it
            cl.busy = False
            if isinstance(ans, JoinAnswer):
                if ans.error is E.NONE:
                    cl.member_id, cl.generation, cl.joined = (ans.member_id, ans.generation_id,
                                                               ans)
                    cl.synced = False
                elif ans.error is E.MEMBER_ID_REQUIRED:
                    cl.member_id = ans.member_id
                elif ans.error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
                    self._reset(name)
            elif ans.error is E.NONE:
                cl.synced = True
            elif ans.error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
                self._reset(name)
            else:
                cl.joined = None
        if (V, G) not in self.c.groups:  # a forgotten group starts again at generation 1
            self.max_gen = 0
            self.leader_sent.clear()

    def _reset(self, name: str) -> None:
        cl = self.clients[name]
        cl.member_id, cl.generation, cl.joined, cl.synced = "", -1, None, False

    # --------------------------------------------------------------- rules
    #: mostly within a session (10 s); sometimes past it, or past the rebalance timeout
    @rule(dt=st.sampled_from([0.0, 1.0, 2.5, 4.0, 6.0, 10.0, 21.0]))
    def advance(self, dt: float) -> None:
        self.now += dt
        self._take(self.c.tick(self.now))

    @rule(name=st.sampled_from(NAMES), v4=st.booleans())
    def join(self, name: str, v4: bool) -> None:
        cl = self.clients[name]
        if cl.busy:
            return
        h = self._handle(name)
        self._take(self.c.join_group(self.now, h, V, G, cl.member_id, "consumer",
                                     PROTOCOLS[name], 10_000, 20_000,
                                     require_known_member_id=v4,
                                     instance_id=INSTANCE.get(name)))

    @rule(name=st.sampled_from(NAMES))
    def sync(self, name: str) -> None:
        cl = self.clients[name]
        j = cl.joined
        if cl.busy or j is None or cl.synced:
            return
        assignments: dict[str, bytes] = {}
        if j.members:  # the leader: partitions dealt round robin to the members
            ids = [m.member_id for m in j.members]
            for p in range(PARTITIONS):
                mid = ids[p % len(ids)]
                assignments[mid] = assignments.get(mid, b"") + bytes([p])
        h = self._handle(name, j.generation_id)
        out = self.c.sync_group(self.now, h, V, G, j.generation_id, cl.member_id,
                                list(assignments.items()), instance_id=INSTANCE.get(name))
        mine = next((r.answer for r in out.replies if r.handle == h), None)
        if j.members and mine is not None and mine.error is E.NONE:
            # only an accepted leader's assignment counts: a generation number comes
            # again once a forgotten group starts afresh, and a stale leader of the old
            # one (refused: its member id is unknown) must not stand for the new one
            sent = self.leader_sent.setdefault(j.generation_id, assignments)
            assert sent == assignments, "a leader's generation assigned twice"
        self._take(out)

    @rule(name=st.sampled_from(NAMES))
    def behave(self, name: str) -> None:
        """What a well-behaved consumer does next: join, sync, or heartbeat."""
        cl = self.clients[name]
        if cl.busy:
            return
        if cl.joined is None:
            self.join(name, v4=True)
        elif not cl.synced:
            self.sync(name)
        else:
            self.heartbeat(name)

    @rule(name=st.sampled_from(NAMES))
    def heartbeat(self, name: str) -> None:
        cl = self.clients[name]
        if not cl.member_id:
            return
        error = self.c.heartbeat(self.now, V, G, cl.generation, cl.member_id,
                                 INSTANCE.get(name))
        if error is E.NONE:
            assert cl.member_id not in self.removed, "a removed member's heartbeat succeeded"
            assert cl.generation == self._group_gen() == self.max_gen
        elif error is E.REBALANCE_IN_PROGRESS and not cl.busy:
            cl.joined = None
        elif error in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION, E.FENCED_INSTANCE_ID) \
                and not cl.busy:
            if error is not E.ILLEGAL_GENERATION:
                self._reset(name)
            else:
                cl.joined = None

    @rule(name=st.sampled_from(NAMES))
    def leave(self, name: str) -> None:
        cl = self.clients[name]
        if not cl.member_id:
            return
        answer, out = self.c.leave_group(self.now, V, G, [(cl.member_id, INSTANCE.get(name))])
        [left] = answer.members
        if left.error is E.NONE:
            self.removed.add(cl.member_id)
        self._take(out)
        cl.incarnation += 1  # the consumer closes; a later one starts afresh
        self._reset(name)
        cl.busy = False

    @rule(name=st.sampled_from(NAMES))
    def crash(self, name: str) -> None:
        cl = self.clients[name]
        cl.incarnation += 1
        self._reset(name)
        cl.busy = False

    @rule(name=st.sampled_from(NAMES))
    def reconnect(self, name: str) -> None:
        """The connection drops: answers in flight are lost, but the consumer keeps its
        member id and generation, now perhaps stale."""
        cl = self.clients[name]
        cl.incarnation += 1
        cl.busy = False

    @rule(name=st.sampled_from(NAMES), partition=st.integers(0, PARTITIONS - 1),
          offset=st.integers(0, 1000))
    def commit(self, name: str, partition: int, offset: int) -> None:
        cl = self.clients[name]
        if not cl.member_id:
            return
        gen_before = self._group_gen()
        g = self.c.groups.get((V, G))
        empty = g is None or g.state == EMPTY
        errors, rows = self.c.commit_offsets(self.now, V, G, cl.generation, cl.member_id,
                                             [(T, partition, offset, name)],
                                             instance_id=INSTANCE.get(name))
        [(_t, _p, error)] = errors
        if error is E.NONE:
            # Kafka takes generation -1 in an Empty group whatever the member id says
            simple = cl.generation < 0 and empty
            assert simple or cl.generation == gen_before, "a stale generation's commit"
            assert simple or cl.member_id not in self.removed
            self.committed[(T, partition)] = offset
            assert [o for _t, _p, o, *_ in rows] == [offset]
        else:
            assert rows == []

    @rule(partition=st.integers(0, PARTITIONS - 1), offset=st.integers(0, 1000))
    def simple_commit(self, partition: int, offset: int) -> None:
        g = self.c.groups.get((V, G))
        empty = g is None or g.state == EMPTY
        errors, _ops = self.c.commit_offsets(self.now, V, G, -1, "", [(T, partition, offset, "")])
        [(_t, _p, error)] = errors
        assert (error is E.NONE) == empty
        if error is E.NONE:
            self.committed[(T, partition)] = offset

    # ----------------------------------------------------------- invariants
    @invariant()
    def nothing_waits_unheld(self) -> None:
        g = self.c.groups.get((V, G))
        held = set() if g is None else {
            h for m in g.members.values() for h in (m.join_handle, m.sync_handle) if h}
        assert set(self.waiting) <= held, set(self.waiting) - held

    @invariant()
    def fetch_returns_the_last_commit(self) -> None:
        assert self.c.fetch_offsets(V, G, None) == [
            FetchedOffset(t, p, o, self.c.groups[(V, G)].offsets[(t, p)].metadata)
            for (t, p), o in sorted(self.committed.items())]

    @invariant()
    def one_owner_per_partition_per_generation(self) -> None:
        for sent in self.leader_sent.values():
            owned = b"".join(sent.values())
            assert sorted(owned) == list(range(PARTITIONS))

    @precondition(lambda self: self.c.next_deadline() is not None)
    @invariant()
    def deadlines_lie_ahead_after_a_tick(self) -> None:
        self._take(self.c.tick(self.now))
        deadline = self.c.next_deadline()
        assert deadline is None or deadline > self.now


TestGroupMachine = GroupMachine.TestCase
TestGroupMachine.settings = settings(max_examples=200, stateful_step_count=50, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])


def _checked(state: GroupMachine) -> GroupMachine:
    """The machine's invariants, as hypothesis runs them between steps."""
    state.nothing_waits_unheld()
    state.fetch_returns_the_last_commit()
    state.one_owner_per_partition_per_generation()
    if state.c.next_deadline() is not None:
        state.deadlines_lie_ahead_after_a_tick()
    return state


def test_a_stale_leader_of_a_forgotten_group_assigns_nothing() -> None:
    """Shrunk from the machine: static "c" leads generation 1 and times out, the group
    is forgotten, "a" starts it afresh at generation 1 and leads; c, still holding the
    old generation 1's JoinGroup answer, syncs as its leader and is refused, so a's
    SyncGroup carries what a assigned (the model took c's refused assignment for it)."""
    state = _checked(GroupMachine())
    _checked(state).behave(name="c")
    _checked(state).advance(dt=10.0)
    _checked(state).behave(name="a")
    _checked(state).behave(name="a")
    _checked(state).behave(name="c")
    _checked(state).behave(name="a")
    _checked(state).teardown()
    a = state.clients["a"]
    assert a.synced and a.generation == 1
    assert state.leader_sent == {1: {a.member_id: bytes(range(PARTITIONS))}}
    assert state.clients["c"].member_id == ""  # told UNKNOWN_MEMBER_ID: joins afresh
