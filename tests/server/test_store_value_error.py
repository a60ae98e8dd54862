"""A value the store cannot encode fails its own submission, never the store (issue 33,
item 10).

A runtime parameter nested thousands deep makes pickling the submission raise
RecursionError, a RuntimeError; the persistence layer took that for "the store
is closed" and switched its repair path off for the process's life, so the
metadata of a commit that died with the writer afterwards was never written
again and its durable queue was gone after a restart. The broker runs in this
process (its real writer process and SQLite file); the commit dies for real
(the writer is stopped with the declare's commit, then killed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pika
import trio

from amqplite.config import Settings
from amqplite.server.app import Server
from tests.brokerproc import wait_for
from tests.server.dying_writer import commit_with_dying_writer, dead


def nested(depth: int) -> dict[str, Any]:
    v: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        v = {"a": v}
    return v


def live_writer(server: Server) -> int:
    store: Any = server.store

    def live() -> int | None:
        pid = store.writer_pid
        return int(pid) if store.sock is not None and not dead(pid) else None

    return int(wait_for(live, 30, what="a store writer"))


async def test_value_error_fails_its_submission_and_repair_stays_on(tmp_path: Path) -> None:
    settings = Settings(host=["127.0.0.1"], port=0, data_dir=str(tmp_path))
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(Server(settings).run)
        persist = server.persist
        # straight to the broker: the admin API refuses such a value at PUT now; this is
        # the defence behind it
        server.execute(server.broker.parameters.put, "shovel", "/", "deep", nested(3000))
        await persist.committed()  # failed: its metadata is tried again, op by op at the
        await persist.repaired()  # last try, and then given up alone
        assert persist.abandoned == 1

        # the store is open: a commit that dies with the writer is written again
        port = server.listen_ports[0]
        url = f"amqp://guest:guest@127.0.0.1:{port}/%2F?heartbeat=0"
        token = trio.lowlevel.current_trio_token()
        queue = "q.after-value-error"

        def arrived() -> bool:
            return bool(trio.from_thread.run_sync(
                lambda: queue in server.broker.vhosts["/"].queues, trio_token=token))

        refused = await trio.to_thread.run_sync(
            commit_with_dying_writer, live_writer(server), url,
            lambda ch: ch.queue_declare(queue, durable=True), arrived)
        assert refused is not None, "the declare's commit died: not declare-ok"
        await persist.repaired()
        assert queue in server.broker.vhosts["/"].queues
        nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        server = await nursery.start(Server(settings).run)
        port = server.listen_ports[0]

        def passive() -> int:
            c = pika.BlockingConnection(pika.URLParameters(
                f"amqp://guest:guest@127.0.0.1:{port}/%2F?heartbeat=0"))
            try:
                return int(c.channel().queue_declare(queue, passive=True)
                           .method.message_count)
            finally:
                c.close()

        assert await trio.to_thread.run_sync(passive) == 0, f"{queue} lost after a restart"
        nursery.cancel_scope.cancel()
