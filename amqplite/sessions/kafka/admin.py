"""The Kafka session's group and admin requests: FindCoordinator, the classic group
protocol through the ``GroupCoordinator``, OffsetCommit/OffsetFetch, DescribeGroups,
ListGroups, CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs.

Kept apart from ``session`` (the data path) for size; each handler takes the
session, the request and ``now``, and returns a step (``steps``).

Group ACLs on amqplite's permissions (docs/kafka.md, "Permissions"): a group id
is a resource of its vhost, matched by the user's regexes as a queue name is.
Using a group (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups; creating it on first use included)
needs **read** on its id, Kafka's Group READ: a group is a reader's identity and
its offsets are where it reads. Deleting it needs **configure**, as deleting a
queue does. ListGroups shows the groups the user may read. A refusal is
GROUP_AUTHORIZATION_FAILED; committing or fetching offsets of a topic also needs
read on the partition's stream (TOPIC_AUTHORIZATION_FAILED), as Kafka's Topic READ.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amqplite.broker.streamlog import parse_age
from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.protocol.kafka.messages import ApiKey, Request
from amqplite.sessions.kafka.answers import GroupView, JoinAnswer, SyncAnswer
from amqplite.sessions.kafka.steps import AfterCommit, GroupWait, Step
from amqplite.sessions.kafka.topics import NODE_ID, Answer

if TYPE_CHECKING:
    from amqplite.broker.queue import Queue
    from amqplite.sessions.kafka.session import KafkaSession

#: DescribeConfigs' resource types
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
#: config_source: a topic's own setting, or the default
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5


def _vhost(s: KafkaSession) -> str:
    return s.vhost


def may_group(s: KafkaSession, group_id: str, perm: str = "read") -> bool:
    """Does the session's user hold ``perm`` on the group id (see the module doc)?"""
    sess = s.session
    assert sess is not None
    return sess.internal or s.broker.may(sess.username, sess.vhost, perm, "group", group_id)


def _may_read_partition(s: KafkaSession, parts: list[Queue] | None, partition: int) -> bool:
    """Read on a partition's stream; ``parts`` are its topic's partitions, looked up
    once per topic of a request (``Topics.partitions`` walks a super stream's bindings)."""
    if parts is None or not 0 <= partition < len(parts):
        return True  # the caller reports it unknown
    sess = s.session
    assert sess is not None
    return sess.internal or s.broker.may(sess.username, sess.vhost, "read", "queue",
                                         parts[partition].name)


DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED


# ------------------------------------------------------------ coordinator
def find_coordinator(s: KafkaSession, req: Request, now: float) -> bytes:
    """This node coordinates every group; transactions have no coordinator."""
    body = req.body
    host, port = s.advertised

    def row(key: str) -> dict:
        error, message = ErrorCode.NONE, None
        if body["key_type"] != 0:
            error, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, \
                "transactions are not supported"
        elif not may_group(s, key):
            error, message = DENIED, f"no read permission on group '{key}'"
        ok = error == ErrorCode.NONE
        return {"key": key, "node_id": NODE_ID if ok else -1, "host": host if ok else "",
                "port": port if ok else -1, "error_code": error, "error_message": message}
    if req.api_version >= 4:
        return s.answer(req, {"throttle_time_ms": 0, "coordinators": [
            row(k) for k in body["coordinator_keys"]]})
    one = row(body["key"])
    del one["key"]
    return s.answer(req, {"throttle_time_ms": 0, **one})


def _join_body(a: JoinAnswer) -> dict:
    return {"throttle_time_ms": 0, "error_code": a.error, "generation_id": a.generation_id,
            "protocol_type": a.protocol_type, "protocol_name": a.protocol_name or "",
            "leader": a.leader, "member_id": a.member_id,
            "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                         "metadata": m.metadata} for m in a.members]}


def _handle(s: KafkaSession, req: Request) -> tuple[int, int]:
    """The coordinator's name for a waiting request: connection and correlation id."""
    return s.conn_id, req.header.correlation_id


def join_group(s: KafkaSession, req: Request, now: float) -> Step:
    b = req.body
    if not may_group(s, b["group_id"]):
        return s.answer(req, _join_body(JoinAnswer(DENIED, b["member_id"])))
    handle = _handle(s, req)
    s._answers.append(s.coordinator.join_group(
        now, handle, _vhost(s), b["group_id"], b["member_id"], b["protocol_type"],
        [(p["name"], bytes(p["metadata"])) for p in b["protocols"]],
        b["session_timeout_ms"], b["rebalance_timeout_ms"],
        instance_id=b["group_instance_id"], require_known_member_id=req.api_version >= 4,
        client_id=s.client_id, client_host=s.peer_host))
    return GroupWait(handle, lambda a: s.answer(req, _join_body(a)))


def _sync_body(a: SyncAnswer) -> dict:
    return {"throttle_time_ms": 0, "error_code": a.error, "protocol_type": a.protocol_type,
            "protocol_name": a.protocol_name, "assignment": a.assignment}


def sync_group(s: KafkaSession, req: Request, now: float) -> Step:
    b = req.body
    if not may_group(s, b["group_id"]):
        return s.answer(req, _sync_body(SyncAnswer(DENIED)))
    handle = _handle(s, req)
    s._answers.append(s.coordinator.sync_group(
        now, handle, _vhost(s), b["group_id"], b["generation_id"], b["member_id"],
        [(a["member_id"], bytes(a["assignment"])) for a in b["assignments"]],
        instance_id=b["group_instance_id"], protocol_type=b["protocol_type"],
        protocol_name=b["protocol_name"]))
    return GroupWait(handle, lambda a: s.answer(req, _sync_body(a)))


def heartbeat(s: KafkaSession, req: Request, now: float) -> bytes:
    b = req.body
    if not may_group(s, b["group_id"]):
        return s.answer(req, {"throttle_time_ms": 0, "error_code": DENIED})
    error = s.coordinator.heartbeat(now, _vhost(s), b["group_id"], b["generation_id"],
                                    b["member_id"], b["group_instance_id"])
    return s.answer(req, {"throttle_time_ms": 0, "error_code": error})


def leave_group(s: KafkaSession, req: Request, now: float) -> bytes:
    b = req.body
    if not may_group(s, b["group_id"]):
        return s.answer(req, {"throttle_time_ms": 0, "error_code": DENIED, "members": []})
    members = ([(b["member_id"], None)] if req.api_version < 3
               else [(m["member_id"], m["group_instance_id"]) for m in b["members"]])
    answer, answers = s.coordinator.leave_group(now, _vhost(s), b["group_id"], members)
    s._answers.append(answers)
    return s.answer(req, {"throttle_time_ms": 0, "error_code": answer.error, "members": [
        {"member_id": m.member_id, "group_instance_id": m.instance_id, "error_code": m.error}
        for m in answer.members]})


# ------------------------------------------------------------ offsets
def offset_commit(s: KafkaSession, req: Request, now: float) -> Step:
    """Answered once the offsets are stored (as ``acks=all``)."""
    b = req.body
    vhost = _vhost(s)
    unknown: dict[tuple[str, int], ErrorCode] = {}
    parts: list[tuple[str, int, int, str]] = []
    group_ok = may_group(s, b["group_id"])
    for t in b["topics"]:
        known = s.topics.partitions(vhost, t["name"])
        for p in t["partitions"]:
            i = p["partition_index"]
            if not group_ok:
                unknown[(t["name"], i)] = DENIED
            elif not _may_read_partition(s, known, i):
                unknown[(t["name"], i)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif known is None or not 0 <= i < len(known):
                unknown[(t["name"], i)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                parts.append((t["name"], i, p["committed_offset"],
                              p["committed_metadata"] or ""))
    results, rows = s.coordinator.commit_offsets(
        now, vhost, b["group_id"], b["generation_id_or_member_epoch"], b["member_id"], parts,
        instance_id=b["group_instance_id"], wall_us=int(time.time() * 1_000_000)) \
        if group_ok else ([], [])
    errors = {(t, p): e for t, p, e in results} | unknown
    if rows:
        s.broker.kafka_offsets_write(vhost, b["group_id"], rows)

    def build() -> bytes:
        return s.answer(req, {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"],
                 "error_code": errors.get((t["name"], p["partition_index"]), ErrorCode.NONE)}
                for p in t["partitions"]]} for t in b["topics"]]})
    return AfterCommit(build) if rows else build()


def _fetched_topics(s: KafkaSession, group_id: str, topics: Any) -> list[dict]:
    wanted = None if topics is None else [(t["name"], i) for t in topics
                                          for i in t["partition_indexes"]]
    vhost = _vhost(s)
    rows = s.coordinator.fetch_offsets(vhost, group_id, wanted)
    by_topic: dict[str, list[dict]] = {}
    known: dict[str, list[Queue] | None] = {}
    for r in rows:
        parts = known[r.topic] if r.topic in known else known.setdefault(
            r.topic, s.topics.partitions(vhost, r.topic))
        readable = _may_read_partition(s, parts, r.partition)
        if not readable and wanted is None:
            continue  # every committed offset asked for: those of unreadable topics left out
        by_topic.setdefault(r.topic, []).append(
            {"partition_index": r.partition,
             "committed_offset": r.offset if readable else -1, "committed_leader_epoch": -1,
             "metadata": r.metadata if readable else "",
             "error_code": r.error if readable else ErrorCode.TOPIC_AUTHORIZATION_FAILED})
    return [{"name": t, "partitions": ps} for t, ps in by_topic.items()]


def offset_fetch(s: KafkaSession, req: Request, now: float) -> bytes:
    b = req.body
    if req.api_version >= 8:
        return s.answer(req, {"throttle_time_ms": 0, "groups": [
            {"group_id": g["group_id"], "topics": _fetched_topics(s, g["group_id"], g["topics"]),
             "error_code": 0} if may_group(s, g["group_id"]) else
            {"group_id": g["group_id"], "topics": [], "error_code": DENIED}
            for g in b["groups"]]})
    if not may_group(s, b["group_id"]):
        return s.answer(req, {"throttle_time_ms": 0, "error_code": DENIED, "topics": []})
    return s.answer(req, {"throttle_time_ms": 0, "error_code": 0,
                          "topics": _fetched_topics(s, b["group_id"], b["topics"])})


def describe_groups(s: KafkaSession, req: Request, now: float) -> bytes:
    views = [s.coordinator.describe_group(_vhost(s), g) if may_group(s, g)
             else GroupView(g, "", "", "", error=DENIED) for g in req.body["groups"]]
    return s.answer(req, {"throttle_time_ms": 0, "groups": [
        {"error_code": v.error, "group_id": v.group_id, "group_state": v.state,
         "protocol_type": v.protocol_type, "protocol_data": v.protocol, "members": [
             {"member_id": m.member_id, "group_instance_id": m.instance_id,
              "client_id": m.client_id, "client_host": m.client_host,
              "member_metadata": m.metadata, "member_assignment": m.assignment}
             for m in v.members]} for v in views]})


def list_groups(s: KafkaSession, req: Request, now: float) -> bytes:
    listed = [g for g in s.coordinator.list_groups(_vhost(s),
                                                   req.body.get("states_filter") or ())
              if may_group(s, g.group_id)]
    return s.answer(req, {"throttle_time_ms": 0, "error_code": 0, "groups": [
        {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state}
        for g in listed]})


def delete_groups(s: KafkaSession, req: Request, now: float) -> Step:
    """Only an Empty group goes (NON_EMPTY_GROUP otherwise), with its offsets: answered
    once their deletion is stored."""
    rows = []
    stored = False
    for gid in req.body["groups_names"]:
        if not may_group(s, gid, "configure"):
            rows.append({"group_id": gid, "error_code": DENIED})
            continue
        error = s.coordinator.delete_group(_vhost(s), gid)
        if error == ErrorCode.NONE:
            s.broker.kafka_offsets_delete(_vhost(s), group_id=gid)
            stored = True
        rows.append({"group_id": gid, "error_code": error})

    def build() -> bytes:
        return s.answer(req, {"throttle_time_ms": 0, "results": rows})
    return AfterCommit(build) if stored else build()


# ------------------------------------------------------------ topics
def create_topics(s: KafkaSession, req: Request, now: float) -> AfterCommit:
    assert s.ch is not None
    b = req.body
    rows: list[dict[str, Any]] = []
    for t in b["topics"]:
        message: str | None
        configs = {c["name"]: c["value"] for c in t["configs"]}
        n = t["num_partitions"]
        error, message = ErrorCode.NONE, None
        if t["assignments"]:
            n, error, message = _assigned_partitions(t)
        if error == ErrorCode.NONE:
            made = s.topics.create_topic(s.ch, t["name"], n, t["replication_factor"],
                                         configs, validate_only=b["validate_only"])
            error, message = made.error, made.message
        n = n if n > 0 else s.topics.num_partitions
        rows.append({"name": t["name"], "error_code": error, "error_message": message,
                     "num_partitions": n if error == ErrorCode.NONE else -1,
                     "replication_factor": 1 if error == ErrorCode.NONE else -1,
                     "configs": None})
    return AfterCommit(lambda: s.answer(req, {"throttle_time_ms": 0, "topics": rows}))


def _assigned_partitions(t: dict[str, Any]) -> tuple[int, ErrorCode, str | None]:
    """A manual replica assignment, as a one-node Kafka takes it: every partition
    0..N-1 once, each on this node alone; (N, error, message)."""
    if t["num_partitions"] != -1 or t["replication_factor"] != -1:
        return 0, ErrorCode.INVALID_REQUEST, "give either replica assignments or " \
            "num_partitions and replication_factor, not both"
    indexes = sorted(a["partition_index"] for a in t["assignments"])
    if indexes != list(range(len(indexes))):
        return 0, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions must be numbered " \
            f"0 to {len(indexes) - 1}, each once"
    for a in t["assignments"]:
        if list(a["broker_ids"]) != [NODE_ID]:
            return 0, ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"partition " \
                f"{a['partition_index']}: amqplite is one node (id {NODE_ID}), not " \
                f"{list(a['broker_ids'])}"
    return len(indexes), ErrorCode.NONE, None


def create_partitions(s: KafkaSession, req: Request, now: float) -> AfterCommit:
    assert s.ch is not None
    b = req.body
    rows: list[dict[str, Any]] = []
    for t in b["topics"]:
        bad = [x for a in t["assignments"] or [] for x in a["broker_ids"] if x != NODE_ID]
        if bad:
            done = Answer(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                          f"amqplite is one node (id {NODE_ID}), not {bad}")
        else:
            done = s.topics.add_partitions(s.ch, t["name"], t["count"],
                                           validate_only=b["validate_only"])
        rows.append({"name": t["name"], "error_code": done.error,
                     "error_message": done.message})
    return AfterCommit(lambda: s.answer(req, {"throttle_time_ms": 0, "results": rows}))


def delete_topics(s: KafkaSession, req: Request, now: float) -> AfterCommit:
    assert s.ch is not None
    b = req.body
    names = (b["topic_names"] if req.api_version < 6
             else [t["name"] for t in b["topics"]])
    rows: list[dict[str, Any]] = []
    for name in names:
        if name is None:  # v6 by topic id: amqplite's topics have none
            rows.append({"name": None, "error_code": ErrorCode.UNKNOWN_TOPIC_ID})
            continue
        done = s.topics.delete_topic(s.ch, name)
        rows.append({"name": name, "error_code": done.error, "error_message": done.message})
    return AfterCommit(lambda: s.answer(req, {"throttle_time_ms": 0, "responses": rows}))


def topic_configs(args: dict[str, Any]) -> list[tuple[str, str | None, bool]]:
    """A topic's configs as Kafka names them, from its stream's arguments:
    (name, value, is_default)."""
    age = parse_age(args.get("x-max-age"))
    size = args.get("x-max-length-bytes")
    seg = args.get("x-stream-max-segment-size-bytes")
    return [("cleanup.policy", "delete", True),
            ("retention.ms", "-1" if age is None else str(int(age * 1000)), age is None),
            ("retention.bytes", "-1" if size is None else str(size), size is None),
            ("segment.bytes", str(seg if seg is not None else 500_000_000), seg is None),
            ("max.message.bytes", "1048588", True)]


def describe_configs(s: KafkaSession, req: Request, now: float) -> bytes:
    results = []
    for r in req.body["resources"]:
        kind, name, keys = r["resource_type"], r["resource_name"], r["configuration_keys"]
        error, message = ErrorCode.NONE, None
        configs: list[tuple[str, str | None, bool]] = []
        if kind == TOPIC_RESOURCE:
            parts = s.topics.partitions(_vhost(s), name)
            if parts is None:
                error, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic '{name}'"
            else:
                configs = topic_configs(parts[0].arguments)
        elif kind == BROKER_RESOURCE:
            configs = [("auto.create.topics.enable", str(s.topics.auto_create).lower(), False),
                       ("num.partitions", str(s.topics.num_partitions), False),
                       ("default.replication.factor", "1", True),
                       ("offsets.topic.replication.factor", "1", True)]
        else:
            error, message = ErrorCode.INVALID_REQUEST, f"resource type {kind} is not supported"
        if keys:  # null or empty: every config (as Kafka answers kafka-python's [])
            configs = [c for c in configs if c[0] in keys]
        results.append({"error_code": error, "error_message": message, "resource_type": kind,
                        "resource_name": name, "configs": [
                            {"name": n, "value": v, "read_only": kind == BROKER_RESOURCE,
                             "is_default": d,
                             "config_source": DEFAULT_CONFIG if d else DYNAMIC_TOPIC_CONFIG,
                             "is_sensitive": False, "synonyms": [], "config_type": 0,
                             "documentation": None} for n, v, d in configs]})
    return s.answer(req, {"throttle_time_ms": 0, "results": results})


HANDLERS: dict[int, Callable[[Any, Request, float], Step]] = {
    ApiKey.FIND_COORDINATOR: find_coordinator,
    ApiKey.JOIN_GROUP: join_group,
    ApiKey.SYNC_GROUP: sync_group,
    ApiKey.HEARTBEAT: heartbeat,
    ApiKey.LEAVE_GROUP: leave_group,
    ApiKey.OFFSET_COMMIT: offset_commit,
    ApiKey.OFFSET_FETCH: offset_fetch,
    ApiKey.DESCRIBE_GROUPS: describe_groups,
    ApiKey.LIST_GROUPS: list_groups,
    ApiKey.DELETE_GROUPS: delete_groups,
    ApiKey.CREATE_TOPICS: create_topics,
    ApiKey.DELETE_TOPICS: delete_topics,
    ApiKey.DESCRIBE_CONFIGS: describe_configs,
    ApiKey.CREATE_PARTITIONS: create_partitions,
}
