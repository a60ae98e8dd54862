"""The operator's view of consumer groups (sessions/kafka/report.py) with plain calls:
members and their decoded assignments, committed offsets, log end offsets and lag."""

from __future__ import annotations

from amqplite.protocol.kafka.consumer import decode_assignment, encode_assignment
from amqplite.sessions.kafka.coordinator import GroupCoordinator
from amqplite.sessions.kafka.report import group_lags, group_report, group_reports
from tests.sessions.kafka.helpers import G, V, join, lone_member

#: topic -> each partition's (log start, log end)
LOGS = {"orders": [(0, 10), (5, 7), (0, 0)]}


def ends(vhost: str, topic: str) -> list[tuple[int, int]] | None:
    return LOGS.get(topic) if vhost == V else None


def test_assignments_round_trip_and_garbage_is_none() -> None:
    raw = encode_assignment([("orders", [0, 2]), ("audit", [1])], version=3)
    assert decode_assignment(raw) == [("orders", [0, 2]), ("audit", [1])]
    for bad in (b"", b"\x00", b"\x00\x00\x7f\xff\xff\xff", raw[:9], b"\xff\xff\x00\x00\x00\x00",
                b"all"):
        assert decode_assignment(bad) is None


def test_a_stable_group_shows_owner_committed_offset_and_lag() -> None:
    c = GroupCoordinator()
    member, gen = lone_member(c, assignment=encode_assignment([("orders", [0, 1, 2])]))
    errors, _ops = c.commit_offsets(0, V, G, gen, member, [("orders", 0, 4, "m"),
                                                           ("orders", 1, 7, "")])
    assert {e for _t, _p, e in errors} == {0}
    r = group_report(c, ends, V, G)
    assert r is not None and r.state == "Stable" and r.protocol == "range"
    (m,) = r.members
    assert m.member_id == member and m.assignment == (("orders", (0, 1, 2)),)
    rows = {(p.topic, p.partition): p for p in r.partitions}
    assert rows[("orders", 0)].lag == 6 and rows[("orders", 0)].metadata == "m"
    assert rows[("orders", 1)].lag == 0 and rows[("orders", 1)].log_start_offset == 5
    # assigned but never committed: shown, with no lag (Kafka's "-")
    assert rows[("orders", 2)].committed_offset == -1 and rows[("orders", 2)].lag is None
    assert {p.member_id for p in r.partitions} == {member}
    assert r.lag == 6


def test_a_rebalancing_group_shows_no_assignment_and_an_empty_one_its_offsets() -> None:
    c = GroupCoordinator()
    member, gen = lone_member(c, assignment=encode_assignment([("orders", [0])]))
    c.commit_offsets(0, V, G, gen, member, [("orders", 0, 3, "")])
    join(c, 1, "b")  # a second member: the group prepares a rebalance
    r = group_report(c, ends, V, G)
    assert r is not None and r.state == "PreparingRebalance"
    assert all(m.assignment is None for m in r.members)
    assert [(p.partition, p.member_id, p.lag) for p in r.partitions] == [(0, None, 7)]
    # everyone leaves: the group is Empty and keeps its offsets
    c2 = GroupCoordinator()
    m2, gen2 = lone_member(c2, assignment=b"not a consumer assignment")
    c2.commit_offsets(0, V, G, gen2, m2, [("orders", 0, 10, ""), ("gone", 0, 1, "")])
    assert group_report(c2, ends, V, G).members[0].assignment is None  # type: ignore[union-attr]
    c2.leave_group(1, V, G, [(m2, None)])
    r2 = group_report(c2, ends, V, G)
    assert r2 is not None and r2.state == "Empty" and r2.members == ()
    gone = next(p for p in r2.partitions if p.topic == "gone")
    assert gone.log_end_offset is None and gone.lag is None  # a deleted topic
    assert r2.lag == 0


def test_reports_by_vhost() -> None:
    c = GroupCoordinator()
    for vhost, group in (("/", "b"), ("/", "a"), ("other", "a")):
        c.commit_offsets(0, vhost, group, -1, "", [("orders", 0, 1, "")])
    assert [(r.vhost, r.group_id) for r in group_reports(c, ends)] == [
        ("/", "a"), ("/", "b"), ("other", "a")]
    assert [(r.vhost, r.group_id) for r in group_reports(c, ends, {"other"})] == [("other", "a")]
    assert group_report(c, ends, "/", "nope") is None


def test_metrics_lags_are_the_reports_rows_with_a_lag() -> None:
    """``group_lags`` (what /metrics reads) agrees with the full reports, and reads each
    topic's ends once however many groups committed on it."""
    c = GroupCoordinator()
    member, gen = lone_member(c, assignment=encode_assignment([("orders", [0, 1, 2])]))
    c.commit_offsets(0, V, G, gen, member, [("orders", 0, 4, "m"), ("orders", 1, 7, ""),
                                            ("gone", 0, 1, "")])
    for group in ("a", "b"):
        c.commit_offsets(0, V, group, -1, "", [("orders", 0, 1, ""), ("orders", 9, 1, "")])
    asked: list[tuple[str, str]] = []

    def counted(vhost: str, topic: str) -> list[tuple[int, int]] | None:
        asked.append((vhost, topic))
        return ends(vhost, topic)

    lags = group_lags(c, counted)
    assert sorted(asked) == [(V, "gone"), (V, "orders")]
    reports = group_reports(c, ends)
    assert [(r.vhost, r.group_id, r.state, len(r.members)) for r in reports] == [
        (g.vhost, g.group_id, g.state, g.members) for g in lags]
    for r, g in zip(reports, lags, strict=True):
        assert [(p.topic, p.partition, p.committed_offset, p.lag) for p in r.partitions
                if p.lag is not None] == list(g.lags)
    assert lags[-1].lags == (("orders", 0, 4, 6), ("orders", 1, 7, 0))
