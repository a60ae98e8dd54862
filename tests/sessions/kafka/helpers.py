"""Plain-call helpers for the Kafka group coordinator's tests: a consumer's
requests as one-liners, and the answers of a call by handle."""

from __future__ import annotations

from collections.abc import Sequence

from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.sessions.kafka.answers import Answers, JoinAnswer, SyncAnswer
from amqplite.sessions.kafka.coordinator import GroupCoordinator

V = "/"
G = "followers"
RANGE = [("range", b"meta-range")]


def by_handle(out: Answers) -> dict[object, JoinAnswer | SyncAnswer]:
    """The replies of one call, by handle (each handle answered once)."""
    got: dict[object, JoinAnswer | SyncAnswer] = {}
    for r in out.replies:
        assert r.handle not in got, f"{r.handle} answered twice"
        got[r.handle] = r.answer
    return got


def join(c: GroupCoordinator, now: float, handle: object, member_id: str = "",
         protocols: Sequence[tuple[str, bytes]] = RANGE, session_ms: int = 10_000,
         rebalance_ms: int = 30_000, **kw: object) -> dict[object, JoinAnswer | SyncAnswer]:
    return by_handle(c.join_group(now, handle, V, G, member_id, "consumer", protocols,
                                  session_ms, rebalance_ms, **kw))  # type: ignore[arg-type]


def sync(c: GroupCoordinator, now: float, handle: object, generation: int, member_id: str,
         assignments: dict[str, bytes] | None = None,
         **kw: object) -> dict[object, JoinAnswer | SyncAnswer]:
    return by_handle(c.sync_group(now, handle, V, G, generation, member_id,
                                  list((assignments or {}).items()), **kw))  # type: ignore[arg-type]


def lone_member(c: GroupCoordinator, now: float = 0.0, name: str = "a",
                assignment: bytes = b"all") -> tuple[str, int]:
    """One consumer joined, synced and Stable: its member id and generation."""
    ans = join(c, now, name)[name]
    assert isinstance(ans, JoinAnswer) and ans.error is ErrorCode.NONE, ans
    got = sync(c, now, name + "-sync", ans.generation_id, ans.member_id,
               {ans.member_id: assignment})
    assert got[name + "-sync"] == SyncAnswer(ErrorCode.NONE, assignment, "consumer", "range")
    return ans.member_id, ans.generation_id


def second_joins(c: GroupCoordinator) -> tuple[str, JoinAnswer]:
    """A lone member "a", then "b" joins and "a" rejoins: a's id and b's join answer
    (generation 2, a leads; neither has synced)."""
    a, _gen = lone_member(c)
    join(c, 1, "b")
    jb = join(c, 1, "a2", a)["b"]
    assert isinstance(jb, JoinAnswer) and jb.error is ErrorCode.NONE
    return a, jb
