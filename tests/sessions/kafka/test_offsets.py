"""OffsetCommit and OffsetFetch on the pure coordinator (issue 37): who may commit in
which group state, what is stored (the last commit, lower ones too), the rows to write,
deletion by group and topic, and restoring the rows read at start."""

from __future__ import annotations

from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.sessions.kafka.answers import FetchedOffset, JoinAnswer
from amqplite.sessions.kafka.coordinator import GroupCoordinator
from amqplite.storeops import PutKafkaOffset
from tests.sessions.kafka.helpers import G, V, join, lone_member

E = ErrorCode
T = "orders"


def _commit(c: GroupCoordinator, gen: int, member: str, *parts: tuple[int, int],
            meta: str = "", now: float = 1.0) -> list[ErrorCode]:
    errors, _ops = c.commit_offsets(now, V, G, gen, member,
                                    [(T, p, o, meta) for p, o in parts], wall_us=5)
    return [e for _t, _p, e in errors]


def test_a_simple_commit_creates_an_empty_group_and_is_stored() -> None:
    c = GroupCoordinator()
    errors, rows = c.commit_offsets(0, V, G, -1, "", [(T, 0, 10, "m"), (T, 1, 20, "")],
                                    wall_us=123)
    assert errors == [(T, 0, E.NONE), (T, 1, E.NONE)]
    assert rows == [(T, 0, 10, "m", 123), (T, 1, 20, "", 123)]
    assert c.describe_group(V, G).state == "Empty"
    assert c.fetch_offsets(V, G, [(T, 0), (T, 2)]) == [FetchedOffset(T, 0, 10, "m"),
                                                       FetchedOffset(T, 2, -1, "")]
    assert c.fetch_offsets(V, G, None) == [FetchedOffset(T, 0, 10, "m"),
                                           FetchedOffset(T, 1, 20, "")]
    assert c.fetch_offsets(V, "unknown", [(T, 0)]) == [FetchedOffset(T, 0, -1, "")]


def test_a_generation_commit_to_an_unknown_group_is_illegal() -> None:
    c = GroupCoordinator()
    assert _commit(c, 3, "m", (0, 1)) == [E.ILLEGAL_GENERATION]
    assert c.list_groups(V) == []


def test_members_commit_with_their_generation_only() -> None:
    c = GroupCoordinator()
    a, gen = lone_member(c)
    assert _commit(c, gen, a, (0, 5)) == [E.NONE]
    assert _commit(c, gen - 1, a, (0, 6)) == [E.ILLEGAL_GENERATION]
    assert _commit(c, gen, "stranger", (0, 7)) == [E.UNKNOWN_MEMBER_ID]
    assert _commit(c, -1, "", (0, 8)) == [E.UNKNOWN_MEMBER_ID]  # simple commits: Empty only
    assert c.fetch_offsets(V, G, [(T, 0)]) == [FetchedOffset(T, 0, 5, "")]


def test_commits_during_a_rebalance() -> None:
    c = GroupCoordinator()
    a, gen = lone_member(c)
    join(c, 1, "b")  # PreparingRebalance: the current generation may still commit
    assert _commit(c, gen, a, (0, 9)) == [E.NONE]  # (what onPartitionsRevoked does)
    got = join(c, 2, "a2", a)
    ans = got["a2"]
    assert isinstance(ans, JoinAnswer)  # CompletingRebalance: wait for the assignment
    assert _commit(c, ans.generation_id, a, (0, 10)) == [E.REBALANCE_IN_PROGRESS]
    assert _commit(c, gen, a, (0, 11)) == [E.ILLEGAL_GENERATION]


def test_the_last_commit_wins_even_when_lower() -> None:
    c = GroupCoordinator()
    a, gen = lone_member(c)
    assert _commit(c, gen, a, (0, 100)) == [E.NONE]
    assert _commit(c, gen, a, (0, 40)) == [E.NONE]  # Kafka stores what is committed
    assert c.fetch_offsets(V, G, [(T, 0)]) == [FetchedOffset(T, 0, 40, "")]


def test_metadata_too_large_fails_that_partition_only() -> None:
    c = GroupCoordinator(max_metadata=8)
    errors, rows = c.commit_offsets(0, V, G, -1, "", [(T, 0, 1, "x" * 9), (T, 1, 2, "ok")])
    assert [e for _t, _p, e in errors] == [E.OFFSET_METADATA_TOO_LARGE, E.NONE]
    assert [partition for _t, partition, *_ in rows] == [1]


def test_an_empty_group_id_is_invalid() -> None:
    c = GroupCoordinator()
    errors, ops = c.commit_offsets(0, V, "", -1, "", [(T, 0, 1, "")])
    assert errors == [(T, 0, E.INVALID_GROUP_ID)] and ops == []


def test_a_group_keeps_its_offsets_when_its_members_go() -> None:
    c = GroupCoordinator()
    a, gen = lone_member(c)
    _commit(c, gen, a, (0, 5))
    c.leave_group(1, V, G, [(a, None)])
    assert c.describe_group(V, G).state == "Empty"
    assert c.fetch_offsets(V, G, [(T, 0)]) == [FetchedOffset(T, 0, 5, "")]
    assert _commit(c, -1, "", (0, 3)) == [E.NONE]  # now a simple commit is fine


def test_delete_group() -> None:
    c = GroupCoordinator()
    assert c.delete_group(V, G) == E.GROUP_ID_NOT_FOUND
    a, gen = lone_member(c)
    _commit(c, gen, a, (0, 5))
    assert c.delete_group(V, G) == E.NON_EMPTY_GROUP
    c.leave_group(1, V, G, [(a, None)])
    assert c.delete_group(V, G) == E.NONE
    assert c.fetch_offsets(V, G, [(T, 0)]) == [FetchedOffset(T, 0, -1, "")]


def test_delete_topic_drops_its_offsets_in_every_group() -> None:
    c = GroupCoordinator()
    for group in ("g1", "g2"):
        c.commit_offsets(0, V, group, -1, "", [(T, 0, 1, ""), ("audit", 0, 2, "")])
    assert c.delete_topic(V, T) is True
    assert c.fetch_offsets(V, "g1", None) == [FetchedOffset("audit", 0, 2, "")]
    assert c.delete_topic(V, T) is False  # nothing left to delete
    c.delete_topic(V, "audit")
    assert c.list_groups(V) == []  # nothing left in them either


def test_restored_offsets_are_fetched_and_their_groups_are_empty() -> None:
    c = GroupCoordinator()
    c.restore([PutKafkaOffset(V, G, T, 0, 42, "m", 7), PutKafkaOffset("tenant", G, T, 0, 9)])
    assert c.fetch_offsets(V, G, [(T, 0)]) == [FetchedOffset(T, 0, 42, "m")]
    assert c.fetch_offsets("tenant", G, None) == [FetchedOffset(T, 0, 9, "")]
    assert c.describe_group(V, G).state == "Empty"
    a, gen = lone_member(c)  # a consumer joins the restored group: generation 1
    assert gen == 1 and _commit(c, gen, a, (0, 43)) == [E.NONE]
