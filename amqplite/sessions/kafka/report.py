"""Consumer groups as an operator reads them: state, members and what each was
assigned, and per topic-partition the committed offset, the log end offset and
the lag between them (``kafka-consumer-groups --describe``'s columns).

Why here and not in the admin layer: what a group "is" (which partitions count,
when an assignment is meaningful, what lag means for a partition that never
committed) is the coordinator's knowledge; the admin API, the CLI, Prometheus and
the dashboard only render these records. The log end offsets come from the
streams through ``Topics.partitions`` (the broker's own state, read on the event
loop, nothing written); a partition with no commit has no lag (Kafka shows "-").

Lag is ``log end offset - committed offset`` (never below 0): the records
appended since the group's last commit, including records not yet committed to
the store, as Kafka counts up to its log end and not its high watermark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import attrs

from amqplite.protocol.kafka.consumer import CONSUMER, decode_assignment
from amqplite.sessions.kafka.coordinator import GroupCoordinator
from amqplite.sessions.kafka.group import STABLE, Group
from amqplite.sessions.kafka.topics import Topics

#: (log start offset, log end offset) of each partition of a topic, None: no such topic
Ends = Callable[[str, str], Sequence[tuple[int, int]] | None]


@attrs.frozen
class MemberReport:
    """A member as ``kafka-consumer-groups --describe --members`` lists it."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    #: (topic, partitions) the leader assigned; None while not Stable or not decodable
    assignment: tuple[tuple[str, tuple[int, ...]], ...] | None


@attrs.frozen
class PartitionReport:
    """One topic-partition of a group: where it committed, how far the log is."""

    topic: str
    partition: int
    #: -1: the group committed nothing for this partition
    committed_offset: int
    metadata: str
    #: wall-clock µs of the commit (0: none)
    committed_at: int
    #: None: the topic or partition no longer exists
    log_start_offset: int | None
    log_end_offset: int | None
    lag: int | None
    #: the member the partition is assigned to (None: nobody, or not Stable)
    member_id: str | None = None
    client_id: str | None = None
    client_host: str | None = None


@attrs.frozen
class GroupReport:
    """One group: its state and members, and its partitions sorted by topic."""

    vhost: str
    group_id: str
    #: Empty, PreparingRebalance, CompletingRebalance or Stable
    state: str
    protocol_type: str
    protocol: str
    generation: int
    leader: str | None
    members: tuple[MemberReport, ...]
    partitions: tuple[PartitionReport, ...]

    @property
    def lag(self) -> int:
        """The group's total lag over the partitions it committed."""
        return sum(p.lag for p in self.partitions if p.lag is not None)


def stream_ends(topics: Topics) -> Ends:
    """Each partition stream's first and next offset, read from the broker now."""
    def ends(vhost: str, topic: str) -> list[tuple[int, int]] | None:
        parts = topics.partitions(vhost, topic)
        if parts is None:
            return None
        return [(q.stream.first_offset, q.stream.next_offset) if q.stream is not None
                else (0, 0) for q in parts]
    return ends


def _member(g: Group, member_id: str, instance_id: str | None, client_id: str,
            client_host: str, assignment: bytes) -> MemberReport:
    parts = None
    if g.state == STABLE and g.protocol_type == CONSUMER:
        decoded = decode_assignment(assignment)
        if decoded is not None:
            parts = tuple((t, tuple(ps)) for t, ps in decoded)
    return MemberReport(member_id, instance_id, client_id, client_host, parts)


def report(g: Group, ends: Ends) -> GroupReport:
    """One group now."""
    members = tuple(_member(g, m.member_id, m.instance_id, m.client_id, m.client_host,
                            m.assignment) for m in g.members.values())
    owner: dict[tuple[str, int], MemberReport] = {}
    for m in members:
        for topic, ps in m.assignment or ():
            for p in ps:
                owner[(topic, p)] = m
    keys = sorted(set(g.offsets) | set(owner))
    known: dict[str, Sequence[tuple[int, int]] | None] = {}
    rows = []
    for topic, p in keys:
        if topic not in known:
            known[topic] = ends(g.vhost, topic)
        parts = known[topic]
        start, end = parts[p] if parts is not None and 0 <= p < len(parts) else (None, None)
        c = g.offsets.get((topic, p))
        offset = -1 if c is None else c.offset
        lag = None if end is None or offset < 0 else max(0, end - offset)
        who = owner.get((topic, p))
        rows.append(PartitionReport(
            topic, p, offset, "" if c is None else c.metadata,
            0 if c is None else c.committed_at, start, end, lag,
            None if who is None else who.member_id, None if who is None else who.client_id,
            None if who is None else who.client_host))
    return GroupReport(g.vhost, g.group_id, g.state, g.protocol_type or "", g.protocol or "",
                       g.generation, g.leader, members, tuple(rows))


def group_reports(coordinator: GroupCoordinator, ends: Ends,
                  vhosts: Iterable[str] | None = None) -> list[GroupReport]:
    """Every group (of ``vhosts`` when given), by vhost and group id."""
    want = None if vhosts is None else set(vhosts)
    return [report(g, ends) for (v, _gid), g in sorted(coordinator.groups.items())
            if want is None or v in want]


@attrs.frozen
class GroupLags:
    """What ``/metrics`` shows of a group: its state, how many members, and per
    partition it committed on a topic that exists, (topic, partition, committed
    offset, lag). No assignment decoded, nothing of the members: a scrape reads
    every group."""

    vhost: str
    group_id: str
    state: str
    members: int
    lags: tuple[tuple[str, int, int, int], ...]


def group_lags(coordinator: GroupCoordinator, ends: Ends) -> list[GroupLags]:
    """Every group's ``GroupLags`` (the rows of ``report`` that have a lag), by vhost
    and group id; each topic's ends are read once for all groups."""
    known: dict[tuple[str, str], Sequence[tuple[int, int]] | None] = {}
    out = []
    for (vhost, gid), g in sorted(coordinator.groups.items()):
        lags = []
        for (topic, p), c in sorted(g.offsets.items()):
            key = (vhost, topic)
            parts = known[key] if key in known else known.setdefault(key, ends(vhost, topic))
            if parts is not None and 0 <= p < len(parts) and c.offset >= 0:
                lags.append((topic, p, c.offset, max(0, parts[p][1] - c.offset)))
        out.append(GroupLags(vhost, gid, g.state, len(g.members), tuple(lags)))
    return out


def group_report(coordinator: GroupCoordinator, ends: Ends, vhost: str,
                 group_id: str) -> GroupReport | None:
    """One group, or None when the coordinator does not know it."""
    g = coordinator.groups.get((vhost, group_id))
    return None if g is None else report(g, ends)
