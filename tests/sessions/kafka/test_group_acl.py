"""Group ACLs with plain calls on the Kafka session (docs/kafka.md, Permissions): a
group id needs the user's read permission to be used (joined, committed for,
described, listed), configure to be deleted; offsets of a topic need read on its
stream. User "app" may read ``orders`` and groups ``app.*``, and nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.protocol.kafka.messages import ApiKey
from amqplite.sessions.kafka.coordinator import GroupCoordinator
from amqplite.sessions.kafka.session import KafkaSession
from amqplite.sessions.kafka.steps import AfterCommit, GroupWait
from amqplite.storeops import DeleteKafkaOffsets
from tests.sessions.kafka.test_session import PORT, answer, produce, request
from tests.sessions.kafka.topic_node import Node

DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
MINE, OTHER = "app.readers", "billing"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with Node(tmp_path / "k.db", access_control=True) as n:
        n.b.put_user("app", "", "", persist=False)
        n.b.set_permissions("app", "/", "", "", r"^(orders|app\..*)$", persist=False)
        yield n


def sessions(node: Node) -> tuple[KafkaSession, KafkaSession]:
    """Guest's session and app's, sharing one coordinator; topics ``orders`` and
    ``secret`` made (by guest) with two records each."""
    coordinator = GroupCoordinator()

    def login(user: str, conn_id: int) -> KafkaSession:
        return KafkaSession(node.b, node.topics, coordinator, conn_id=conn_id,
                            peer=f"127.0.0.1:{conn_id}", peer_host="127.0.0.1",
                            advertised=("127.0.0.1", PORT), anonymous=user)
    guest, app = login("guest", 1), login("app", 2)
    for topic in ("orders", "secret"):
        produce(guest, [b"a", b"b"], topic=topic)
    node.shell.settle()
    return guest, app


def call(s: KafkaSession, key: int, version: int, body: dict) -> dict:
    step = s.handle(request(key, version, body), 0.0)
    if isinstance(step, GroupWait):
        (reply,) = [r for a in s.take_answers() for r in a.replies if r.handle == step.handle]
        step = step.build(reply.answer)
    if isinstance(step, AfterCommit):
        step = step.build()
    return answer(key, version, step)


def join(s: KafkaSession, group: str) -> dict:
    return call(s, ApiKey.JOIN_GROUP, 3, {
        "group_id": group, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
        "member_id": "", "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"m"}]})


def commit(s: KafkaSession, group: str, topic: str = "orders", generation: int = -1,
           member: str = "") -> list[int]:
    body = call(s, ApiKey.OFFSET_COMMIT, 7, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]})
    return [p["error_code"] for t in body["topics"] for p in t["partitions"]]


def fetched(s: KafkaSession, group: str, topics: Any = None, version: int = 7) -> dict:
    if version >= 8:
        return call(s, ApiKey.OFFSET_FETCH, 8, {"groups": [
            {"group_id": group, "topics": topics}]})["groups"][0]
    return call(s, ApiKey.OFFSET_FETCH, 7, {"group_id": group, "topics": topics})


def test_a_group_the_user_may_read_works_as_before(node: Node) -> None:
    _guest, app = sessions(node)
    coord = call(app, ApiKey.FIND_COORDINATOR, 2, {"key": MINE, "key_type": 0})
    assert (coord["error_code"], coord["port"]) == (0, PORT)
    joined = join(app, MINE)  # the group is created by the first join: read suffices
    assert joined["error_code"] == 0
    sync = call(app, ApiKey.SYNC_GROUP, 3, {
        "group_id": MINE, "generation_id": joined["generation_id"],
        "member_id": joined["member_id"], "assignments": [
            {"member_id": joined["member_id"], "assignment": b"a"}]})
    assert sync["error_code"] == 0
    assert commit(app, MINE, generation=joined["generation_id"],
                  member=joined["member_id"]) == [0]
    got = fetched(app, MINE)
    assert got["error_code"] == 0
    assert got["topics"][0]["partitions"][0]["committed_offset"] == 1
    described = call(app, ApiKey.DESCRIBE_GROUPS, 4, {"groups": [MINE]})["groups"][0]
    assert (described["error_code"], described["group_state"]) == (0, "Stable")


def test_a_group_outside_the_read_permission_is_refused_everywhere(node: Node) -> None:
    guest, app = sessions(node)
    assert commit(guest, OTHER) == [0]  # guest (administrator, .*) may: the group exists
    assert join(guest, "app.second")["error_code"] == 0
    coord = call(app, ApiKey.FIND_COORDINATOR, 2, {"key": OTHER, "key_type": 0})
    assert (coord["error_code"], coord["node_id"]) == (DENIED, -1)
    v4 = call(app, ApiKey.FIND_COORDINATOR, 4, {"key_type": 0,
                                                 "coordinator_keys": [OTHER, MINE]})
    assert [c["error_code"] for c in v4["coordinators"]] == [DENIED, 0]
    assert join(app, OTHER)["error_code"] == DENIED
    assert call(app, ApiKey.SYNC_GROUP, 3, {"group_id": OTHER, "generation_id": 1,
                                            "member_id": "m", "assignments": []}
                )["error_code"] == DENIED
    assert call(app, ApiKey.HEARTBEAT, 3, {"group_id": OTHER, "generation_id": 1,
                                           "member_id": "m"})["error_code"] == DENIED
    assert call(app, ApiKey.LEAVE_GROUP, 3, {"group_id": OTHER, "members": [
        {"member_id": "m"}]})["error_code"] == DENIED
    assert commit(app, OTHER) == [DENIED]
    assert fetched(app, OTHER)["error_code"] == DENIED
    assert fetched(app, OTHER, version=8)["error_code"] == DENIED
    described = call(app, ApiKey.DESCRIBE_GROUPS, 4, {"groups": [OTHER, "app.second"]})
    assert [g["error_code"] for g in described["groups"]] == [DENIED, 0]
    listed = call(app, ApiKey.LIST_GROUPS, 4, {"states_filter": []})["groups"]
    assert [g["group_id"] for g in listed] == ["app.second"]  # guest sees both
    assert {g["group_id"] for g in call(guest, ApiKey.LIST_GROUPS, 4, {
        "states_filter": []})["groups"]} == {OTHER, "app.second"}
    # nothing of the refused calls reached the group: guest's offset is as it was
    assert fetched(guest, OTHER)["topics"][0]["partitions"][0]["committed_offset"] == 1


def test_deleting_a_group_needs_configure(node: Node) -> None:
    guest, app = sessions(node)
    assert commit(app, MINE) == [0]
    body = call(app, ApiKey.DELETE_GROUPS, 2, {"groups_names": [MINE]})
    assert body["results"] == [{"group_id": MINE, "error_code": DENIED}]
    assert fetched(app, MINE)["topics"][0]["partitions"][0]["committed_offset"] == 1
    node.shell.settle()
    body = call(guest, ApiKey.DELETE_GROUPS, 2, {"groups_names": [MINE]})
    assert body["results"] == [{"group_id": MINE, "error_code": 0}]
    assert DeleteKafkaOffsets("/", MINE, None) in node.b.take_outcome().store_ops


def test_offsets_of_a_topic_need_read_on_its_stream(node: Node) -> None:
    guest, app = sessions(node)
    assert commit(app, MINE, topic="secret") == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    assert commit(guest, MINE, topic="secret") == [0]  # guest may; app then may not see it
    assert commit(app, MINE) == [0]
    every = fetched(app, MINE)  # all the group's offsets: the unreadable topic left out
    assert [t["name"] for t in every["topics"]] == ["orders"]
    named = fetched(app, MINE, [{"name": "secret", "partition_indexes": [0]}])
    [p] = named["topics"][0]["partitions"]
    assert (p["error_code"], p["committed_offset"]) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)


def test_each_partition_of_a_topic_needs_read_on_its_own_stream(node: Node) -> None:
    """A super stream's partitions are streams of their own: read on some of them lets
    offsets of those through, in one request with the others refused."""
    guest, app = sessions(node)
    assert node.topics.create_topic(node.ch, "multi", 3).error == ErrorCode.NONE
    node.b.set_permissions("app", "/", "", "", r"^(multi-0|multi-2|app\..*)$", persist=False)
    parts = [{"partition_index": i, "committed_offset": 0, "committed_metadata": ""}
             for i in range(3)]
    body = {"group_id": MINE, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": "multi", "partitions": parts}]}
    assert [p["error_code"] for p in call(guest, ApiKey.OFFSET_COMMIT, 7, body)["topics"][0][
        "partitions"]] == [0, 0, 0]
    assert [p["error_code"] for p in call(app, ApiKey.OFFSET_COMMIT, 7, body)["topics"][0][
        "partitions"]] == [0, ErrorCode.TOPIC_AUTHORIZATION_FAILED, 0]
    every = fetched(app, MINE)
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
            for t in every["topics"]] == [("multi", [0, 2])]
    named = fetched(app, MINE, [{"name": "multi", "partition_indexes": [0, 1, 2]}])
    assert [p["error_code"] for p in named["topics"][0]["partitions"]] == [
        0, ErrorCode.TOPIC_AUTHORIZATION_FAILED, 0]
