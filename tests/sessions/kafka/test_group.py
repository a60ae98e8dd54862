"""The classic group protocol's rules, one by one, with plain calls on the pure
coordinator (issue 37): joins, MEMBER_ID_REQUIRED, protocol choice, SyncGroup,
heartbeats, leaving, timeouts, static members, views."""

from __future__ import annotations

from amqplite.protocol.kafka.errors import RETRIABLE, ErrorCode
from amqplite.sessions.kafka.answers import JoinAnswer, JoinMember, LeftMember, Listed, SyncAnswer
from amqplite.sessions.kafka.coordinator import GroupCoordinator
from tests.sessions.kafka.helpers import RANGE, G, V, join, lone_member, second_joins, sync

E = ErrorCode


def test_error_codes_are_kafkas() -> None:
    assert (E.UNKNOWN_SERVER_ERROR, E.NONE, E.OFFSET_OUT_OF_RANGE) == (-1, 0, 1)
    assert (E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID, E.REBALANCE_IN_PROGRESS) == (22, 25, 27)
    assert (E.MEMBER_ID_REQUIRED, E.FENCED_INSTANCE_ID, E.UNSTABLE_OFFSET_COMMIT) == (79, 82, 88)
    assert E.NOT_COORDINATOR in RETRIABLE and E.ILLEGAL_GENERATION not in RETRIABLE


def test_a_v4_join_first_gets_its_member_id_then_leads_generation_1() -> None:
    c = GroupCoordinator()
    first = join(c, 0, "h1", require_known_member_id=True)["h1"]
    assert isinstance(first, JoinAnswer) and first.error is E.MEMBER_ID_REQUIRED
    assert first.member_id and c.describe_group(V, G).state == "Empty"
    ans = join(c, 0.1, "h2", first.member_id, require_known_member_id=True)["h2"]
    assert ans == JoinAnswer(E.NONE, first.member_id, 1, "consumer", "range", first.member_id,
                             (JoinMember(first.member_id, None, b"meta-range"),))
    assert c.describe_group(V, G).state == "CompletingRebalance"


def test_an_old_join_gets_a_member_id_at_once() -> None:
    c = GroupCoordinator()
    ans = join(c, 0, "h", client_id="app")["h"]
    assert isinstance(ans, JoinAnswer) and ans.error is E.NONE
    assert ans.member_id.startswith("app-") and ans.leader == ans.member_id


def test_a_second_member_rebalances_and_followers_wait_for_the_leader() -> None:
    c = GroupCoordinator()
    a, gen1 = lone_member(c)
    b_join = join(c, 1, "b")  # waits for a to rejoin
    assert b_join == {}
    assert c.heartbeat(1, V, G, gen1, a) is E.REBALANCE_IN_PROGRESS
    got = join(c, 2, "a2", a)
    ja, jb = got["a2"], got["b"]
    assert isinstance(ja, JoinAnswer) and isinstance(jb, JoinAnswer)
    assert ja.generation_id == jb.generation_id == gen1 + 1
    assert ja.leader == jb.leader == a and {m.member_id for m in ja.members} == {a, jb.member_id}
    assert jb.members == ()  # only the leader sees the members
    b = jb.member_id
    assert sync(c, 3, "b-sync", gen1 + 1, b) == {}  # the follower waits
    got = sync(c, 4, "a-sync", gen1 + 1, a, {a: b"p0", b: b"p1"})
    assert got == {"a-sync": SyncAnswer(E.NONE, b"p0", "consumer", "range"),
                   "b-sync": SyncAnswer(E.NONE, b"p1", "consumer", "range")}
    assert c.describe_group(V, G).state == "Stable"
    assert c.heartbeat(5, V, G, gen1 + 1, b) is E.NONE


def test_a_member_left_out_of_the_assignment_gets_an_empty_one() -> None:
    c = GroupCoordinator()
    a, jb = second_joins(c)
    sync(c, 2, "b-sync", jb.generation_id, jb.member_id)
    got = sync(c, 2, "a-sync", jb.generation_id, a, {a: b"everything"})
    assert got["b-sync"] == SyncAnswer(E.NONE, b"", "consumer", "range")


def test_the_protocol_is_chosen_by_vote_among_those_all_support() -> None:
    c = GroupCoordinator()
    both = [("range", b"r"), ("roundrobin", b"rr")]
    first = join(c, 0, "a", protocols=both, rebalance_ms=10_000)["a"]
    # a formed generation 1 alone; b and c join the rebalance: a must rejoin
    assert isinstance(first, JoinAnswer) and first.generation_id == 1
    join(c, 0, "b", protocols=[("roundrobin", b"rr"), ("range", b"r")], rebalance_ms=10_000)
    join(c, 0, "c", protocols=[("roundrobin", b"rr"), ("sticky", b"s")], rebalance_ms=10_000)
    got = join(c, 1, "a2", first.member_id, protocols=both)
    assert {ans.protocol_name for ans in got.values()} == {"roundrobin"}  # type: ignore[union-attr]
    leader = next(a for a in got.values() if isinstance(a, JoinAnswer) and a.members)
    assert sorted(m.metadata for m in leader.members) == [b"rr", b"rr", b"rr"]


def test_a_tie_goes_to_the_leaders_preference() -> None:
    c = GroupCoordinator()
    a = join(c, 0, "a", protocols=[("roundrobin", b""), ("range", b"")])["a"]
    assert isinstance(a, JoinAnswer)
    join(c, 0, "b", protocols=[("range", b""), ("roundrobin", b"")])
    got = join(c, 0, "a2", a.member_id, protocols=[("roundrobin", b""), ("range", b"")])
    assert {ans.protocol_name for ans in got.values()} == {"roundrobin"}  # type: ignore[union-attr]


def test_no_common_protocol_or_another_type_is_inconsistent() -> None:
    c = GroupCoordinator()
    lone_member(c)
    assert join(c, 1, "x", protocols=[("sticky", b"")])["x"].error is E.INCONSISTENT_GROUP_PROTOCOL
    other = c.join_group(1, "y", V, G, "", "connect", RANGE, 10_000)
    assert other.replies[0].answer.error is E.INCONSISTENT_GROUP_PROTOCOL
    assert join(c, 1, "z", protocols=[])["z"].error is E.INCONSISTENT_GROUP_PROTOCOL


def test_requests_that_are_refused_outright() -> None:
    c = GroupCoordinator(max_group_size=1)
    assert join(c, 0, "h", session_ms=1000)["h"].error is E.INVALID_SESSION_TIMEOUT
    assert join(c, 0, "h", session_ms=3_600_000)["h"].error is E.INVALID_SESSION_TIMEOUT
    bad = c.join_group(0, "h", V, "", "", "consumer", RANGE, 10_000)
    assert bad.replies[0].answer.error is E.INVALID_GROUP_ID
    assert join(c, 0, "h", "ghost")["h"].error is E.UNKNOWN_MEMBER_ID  # no such group
    lone_member(c)
    assert join(c, 1, "full")["full"].error is E.GROUP_MAX_SIZE_REACHED


def test_heartbeat_errors() -> None:
    c = GroupCoordinator()
    assert c.heartbeat(0, V, G, 1, "nobody") is E.UNKNOWN_MEMBER_ID  # no such group
    a, gen = lone_member(c)
    assert c.heartbeat(1, V, G, gen, "nobody") is E.UNKNOWN_MEMBER_ID
    assert c.heartbeat(1, V, G, gen - 1, a) is E.ILLEGAL_GENERATION
    assert c.heartbeat(1, V, G, gen, a) is E.NONE


def test_a_silent_member_is_removed_at_its_session_timeout() -> None:
    c = GroupCoordinator()
    a, gen = lone_member(c, now=0)
    assert c.next_deadline() == 10.0
    assert c.tick(9.9).evicted == []
    assert c.heartbeat(9.9, V, G, gen, a) is E.NONE
    assert c.next_deadline() is not None and c.next_deadline() <= 19.9  # type: ignore[operator]
    out = c.tick(19.9)
    assert [e.member_id for e in out.evicted] == [a]
    assert c.heartbeat(20, V, G, gen, a) is E.UNKNOWN_MEMBER_ID
    assert c.list_groups(V) == []  # empty and no offsets: forgotten
    assert c.next_deadline() is None


def test_a_forgotten_group_starts_at_generation_1_and_its_old_leader_is_unknown() -> None:
    """Generation numbers come again after a group is forgotten (Kafka's too, once its
    cleanup drops an Empty group without offsets): the old leader's SyncGroup of
    "its" generation 1 is refused, the new leader's assignment stands."""
    c = GroupCoordinator()
    old, gen = lone_member(c, now=0)
    c.tick(10)
    assert c.list_groups(V) == []
    new, new_gen = lone_member(c, now=10, name="b", assignment=b"mine")
    assert new_gen == gen == 1
    assert sync(c, 11, "old", gen, old, {old: b"stale"}) == {"old": SyncAnswer(E.UNKNOWN_MEMBER_ID)}
    assert sync(c, 11, "new", gen, new)["new"] == SyncAnswer(E.NONE, b"mine", "consumer", "range")


def test_who_does_not_rejoin_in_time_is_removed_and_the_rest_go_on() -> None:
    c = GroupCoordinator()
    a, gen = lone_member(c)
    join(c, 1, "b", rebalance_ms=20_000)  # a must rejoin within 30 s (its rebalance timeout)
    for t in (5.0, 10.0, 15.0, 20.0, 25.0):  # a keeps heartbeating but never rejoins
        assert c.heartbeat(t, V, G, gen, a) is E.REBALANCE_IN_PROGRESS
        assert c.tick(t).replies == []
    out = c.tick(31.0)
    assert [e.member_id for e in out.evicted] == [a]
    [reply] = out.replies
    assert reply.handle == "b" and isinstance(reply.answer, JoinAnswer)
    assert reply.answer.generation_id == gen + 1 and reply.answer.leader == reply.answer.member_id


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    c = GroupCoordinator()
    a = join(c, 0, "a")["a"]
    assert isinstance(a, JoinAnswer)
    for t in (5.0, 10.0, 15.0, 20.0, 25.0):  # alive, but no SyncGroup
        assert c.heartbeat(t, V, G, a.generation_id, a.member_id) is E.NONE
        assert c.tick(t).evicted == []
    out = c.tick(30.0)
    assert [e.reason for e in out.evicted] == ["no SyncGroup before the rebalance timeout"]
    assert sync(c, 31, "late", a.generation_id, a.member_id)["late"].error is E.UNKNOWN_MEMBER_ID


def test_a_pending_member_id_is_forgotten_after_the_session_timeout() -> None:
    c = GroupCoordinator()
    first = join(c, 0, "h", require_known_member_id=True)["h"]
    assert c.next_deadline() == 10.0
    c.tick(10.0)
    assert join(c, 11, "h2", first.member_id)["h2"].error is E.UNKNOWN_MEMBER_ID  # type: ignore[union-attr]


def test_leave_group_v3_batch() -> None:
    c = GroupCoordinator()
    a, jb = second_joins(c)
    b = jb.member_id
    answer, out = c.leave_group(2, V, G, [(a, None), (b, None), ("ghost", None)])
    assert answer.members == (LeftMember(a, None, E.NONE), LeftMember(b, None, E.NONE),
                              LeftMember("ghost", None, E.UNKNOWN_MEMBER_ID))
    assert {e.member_id for e in out.evicted} == {a, b}
    assert c.list_groups(V) == []


def test_leaving_during_a_rebalance_completes_it_for_the_others() -> None:
    c = GroupCoordinator()
    a, gen = lone_member(c)
    join(c, 1, "b")
    _answer, out = c.leave_group(2, V, G, [(a, None)])
    [reply] = out.replies
    assert reply.handle == "b" and reply.answer.error is E.NONE
    assert isinstance(reply.answer, JoinAnswer) and reply.answer.generation_id == gen + 1


def test_a_rejoin_in_completing_rebalance_repeats_the_answer() -> None:
    c = GroupCoordinator()
    a = join(c, 0, "a")["a"]
    assert isinstance(a, JoinAnswer)
    again = join(c, 1, "a-again", a.member_id)["a-again"]
    assert again == a


def test_an_initial_delay_gathers_the_first_members_into_one_generation() -> None:
    c = GroupCoordinator(initial_rebalance_delay=3.0)
    assert join(c, 0, "a") == {} and join(c, 2, "b") == {}
    assert c.tick(2.9).replies == []
    assert c.tick(3.0).replies == []  # b came within the delay: extended
    got = {r.handle: r.answer for r in c.tick(6.0).replies}
    assert set(got) == {"a", "b"}
    assert {a.generation_id for a in got.values()} == {1}  # type: ignore[union-attr]


def test_static_members_are_fenced_and_replaced() -> None:
    c = GroupCoordinator()
    old = join(c, 0, "a", instance_id="pod-1")["a"]
    assert isinstance(old, JoinAnswer) and old.error is E.NONE
    assert sync(c, 0, "s", old.generation_id, "someone-else",
                instance_id="pod-1")["s"].error is E.FENCED_INSTANCE_ID
    assert sync(c, 0, "s", old.generation_id, old.member_id,
                instance_id="pod-1")["s"].error is E.NONE
    new = join(c, 1, "a-again", instance_id="pod-1")["a-again"]  # the pod restarted
    assert isinstance(new, JoinAnswer) and new.member_id != old.member_id
    assert new.generation_id == old.generation_id + 1
    assert c.heartbeat(2, V, G, new.generation_id, old.member_id,
                       "pod-1") is E.FENCED_INSTANCE_ID
    answer, _ = c.leave_group(3, V, G, [("", "pod-1")])
    assert answer.members == (LeftMember(new.member_id, "pod-1", E.NONE),)


def test_describe_and_list() -> None:
    c = GroupCoordinator()
    assert c.describe_group(V, G).state == "Dead" and c.describe_group(V, G).members == ()
    a, _ = lone_member(c, assignment=b"p0,p1")
    view = c.describe_group(V, G)
    assert (view.state, view.protocol_type, view.protocol) == ("Stable", "consumer", "range")
    assert [(m.member_id, m.metadata, m.assignment) for m in view.members] == [
        (a, b"meta-range", b"p0,p1")]
    assert c.list_groups(V) == [Listed(G, "consumer", "Stable")]
    assert c.list_groups(V, ["Empty"]) == [] and c.list_groups("other") == []


def test_groups_are_per_vhost() -> None:
    c = GroupCoordinator()
    lone_member(c)
    out = c.join_group(0, "h", "tenant", G, "", "consumer", RANGE, 10_000)
    ans = out.replies[0].answer
    assert isinstance(ans, JoinAnswer) and ans.generation_id == 1
    assert [lg.group_id for lg in c.list_groups("tenant")] == [G]
    out = c.delete_vhost("tenant")
    assert out.replies == [] and c.list_groups("tenant") == [] and c.list_groups(V) != []


def test_sync_group_errors() -> None:
    c = GroupCoordinator()
    assert sync(c, 0, "s", 1, "nobody")["s"].error is E.UNKNOWN_MEMBER_ID  # no such group
    a, jb = second_joins(c)
    gen = jb.generation_id
    assert sync(c, 2, "s", gen - 1, a)["s"].error is E.ILLEGAL_GENERATION
    assert sync(c, 2, "s", gen, a, protocol_name="roundrobin")["s"].error \
        is E.INCONSISTENT_GROUP_PROTOCOL
    assert sync(c, 2, "s", gen, a, protocol_type="connect")["s"].error \
        is E.INCONSISTENT_GROUP_PROTOCOL
    join(c, 2, "c")  # a third member: PreparingRebalance again
    assert sync(c, 3, "s", gen, a)["s"].error is E.REBALANCE_IN_PROGRESS


def test_a_rebalance_tells_a_waiting_follower_to_rejoin() -> None:
    c = GroupCoordinator()
    _a, jb = second_joins(c)
    assert sync(c, 2, "b-sync", jb.generation_id, jb.member_id) == {}
    got = join(c, 3, "c")  # before the leader synced
    assert got == {"b-sync": SyncAnswer(E.REBALANCE_IN_PROGRESS)}


def test_who_rejoins_a_stable_group_and_what_it_costs() -> None:
    c = GroupCoordinator()
    a, jb = second_joins(c)
    gen, b = jb.generation_id, jb.member_id
    sync(c, 2, "b-sync", gen, b)
    sync(c, 2, "a-sync", gen, a, {a: b"0", b: b"1"})
    # a follower with the same protocols learns the current generation: no rebalance
    same = join(c, 3, "b-again", b)["b-again"]
    assert isinstance(same, JoinAnswer) and same.generation_id == gen and same.members == ()
    assert c.describe_group(V, G).state == "Stable"
    # new metadata from a follower, or any join of the leader, rebalances
    assert join(c, 4, "b-new", b, protocols=[("range", b"new")]) == {}
    assert c.describe_group(V, G).state == "PreparingRebalance"
    got = join(c, 5, "a-again", a)
    assert {ans.generation_id for ans in got.values()} == {gen + 1}  # type: ignore[union-attr]


def test_a_pending_member_that_leaves_no_longer_holds_up_the_join() -> None:
    c = GroupCoordinator()
    a, gen = lone_member(c)
    pending = join(c, 1, "p", require_known_member_id=True)["p"].member_id  # type: ignore[union-attr]
    join(c, 1, "b")  # PreparingRebalance; a rejoins, the pending id is still awaited
    assert join(c, 2, "a2", a) == {}
    answer, out = c.leave_group(3, V, G, [(pending, None)])
    assert answer.members == (LeftMember(pending, None, E.NONE),)
    assert {r.handle for r in out.replies} == {"a2", "b"}
    assert {r.answer.generation_id for r in out.replies} == {gen + 1}  # type: ignore[union-attr]


def test_deleting_the_vhost_answers_whoever_waits() -> None:
    c = GroupCoordinator()
    a, _ = lone_member(c)
    join(c, 1, "b")
    out = c.delete_vhost(V)
    assert [(r.handle, r.answer.error) for r in out.replies] == [("b", E.COORDINATOR_NOT_AVAILABLE)]
    assert {e.member_id for e in out.evicted} >= {a}
    assert c.list_groups(V) == [] and c.next_deadline() is None
