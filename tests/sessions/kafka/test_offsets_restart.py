"""Committed offsets survive a restart (issue 37): the coordinator's commit ops go
through the broker (``kafka_offsets_write``) to the store writer, and the next
server hands them back (``Server.kafka_offsets``) for the coordinator to restore.
A real server in a trio nursery on a real SQLite file; only the Kafka listener is
left out (the coordinator is called as it would call it)."""

from __future__ import annotations

from pathlib import Path

import trio

from amqplite.config import Settings
from amqplite.server.app import Server
from amqplite.sessions.kafka.answers import FetchedOffset
from amqplite.sessions.kafka.coordinator import GroupCoordinator
from tests.sessions.kafka.helpers import G, V, lone_member

T = "orders"


async def test_committed_offsets_come_back_after_a_restart(tmp_path: Path) -> None:
    settings = Settings(host=["127.0.0.1"], port=0, data_dir=str(tmp_path))
    c = GroupCoordinator()
    member, gen = lone_member(c)
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(Server(settings).run)
        _errors, rows = c.commit_offsets(0, V, G, gen, member,
                                         [(T, 0, 41, "a"), (T, 1, 7, "")], wall_us=1)
        server.broker.kafka_offsets_write(V, G, rows)
        _errors, rows = c.commit_offsets(1, V, G, gen, member, [(T, 0, 42, "b")], wall_us=2)
        server.broker.kafka_offsets_write(V, G, rows)
        # another group's offsets of a topic that is then deleted go too
        _errors, rows = c.commit_offsets(1, V, "other", -1, "", [("gone", 0, 5, "")])
        server.broker.kafka_offsets_write(V, "other", rows)
        assert c.delete_topic(V, "gone")
        server.broker.kafka_offsets_delete(V, topic="gone")
        await server.committed()
        server.stop()
    async with trio.open_nursery() as nursery:
        server = await nursery.start(Server(settings).run)
        again = GroupCoordinator()
        again.restore(server.kafka_offsets)
        server.stop()
    assert again.fetch_offsets(V, G, None) == [FetchedOffset(T, 0, 42, "b"),
                                               FetchedOffset(T, 1, 7, "")]
    assert again.list_groups(V)[0].state == "Empty" and len(again.list_groups(V)) == 1
