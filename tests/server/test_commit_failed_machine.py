"""A state machine over declare / bind / delete / publish / commit failure / restart.

The broker runs in this process (``Server`` in the test's trio loop, with its
real store-writer process and SQLite file); the machine's rules are real pika
clients on a worker thread. A commit fails for real: the writer process is
stopped while an operation's commit is with it, then killed (kill -9).

Invariant at every restart: what the store recovers equals what memory held
(durable queues with their ids, bindings), every message a publisher was
confirmed is there, and everything a client was told (declare-ok, bind-ok,
delete-ok) holds.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika
import trio
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pika.exceptions import AMQPChannelError, NackError, UnroutableError

from amqplite.config import Settings
from amqplite.server.app import Server
from tests.brokerproc import wait_for
from tests.server.dying_writer import commit_with_dying_writer, dead

QUEUES = ["a", "b", "c"]
KEYS = ["k1", "k2"]
EXCHANGE = "x.m"


class Harness:
    """Starts and stops in-process servers on the test's trio loop, from the machine's thread."""

    def __init__(self, nursery: trio.Nursery, token: trio.lowlevel.TrioToken) -> None:
        self.nursery = nursery
        self.token = token

    def start(self, data_dir: Path) -> tuple[Server, threading.Event]:
        done = threading.Event()

        async def run(task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                settings = Settings(host=["127.0.0.1"], port=0, data_dir=str(data_dir))
                await Server(settings).run(task_status=task_status)
            finally:
                done.set()

        async def start() -> Server:
            server: Server = await self.nursery.start(run)
            return server

        return trio.from_thread.run(start, trio_token=self.token), done

    def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the loop's thread (the broker's state is the loop's)."""
        return trio.from_thread.run_sync(fn, trio_token=self.token)


def snapshot(server: Server) -> tuple[dict[str, int], set[tuple[str, str]]]:
    """Durable queues (name -> id) and the bindings of the test's exchange, in memory."""
    vh = server.broker.vhosts["/"]
    queues = {n: q.id for n, q in vh.queues.items() if q.durable}
    ex = vh.exchanges.get(EXCHANGE)
    binds = set() if ex is None else {(b.destination[1], b.routing_key) for b in ex.bindings}
    return queues, binds


class CommitMachine(RuleBasedStateMachine):
    harness: Harness
    root: Path
    examples = 0

    def __init__(self) -> None:
        super().__init__()
        CommitMachine.examples += 1
        self.dir = self.root / f"ex{CommitMachine.examples}"
        self.server, self.done = self.harness.start(self.dir)
        self.conn = self._connect()
        self._retry(lambda ch: ch.exchange_declare(EXCHANGE, "direct", durable=True))
        self.queues: set[str] = set()  # what clients were told exists
        self.binds: set[tuple[str, str]] = set()
        self.confirmed: dict[str, list[bytes]] = {}
        self.published = 0
        self.failed_commits = 0

    # ------------------------------------------------------------ plumbing
    def _connect(self) -> pika.BlockingConnection:
        port = self.server.listen_ports[0]
        return pika.BlockingConnection(pika.URLParameters(
            f"amqp://guest:guest@127.0.0.1:{port}/%2F?heartbeat=0"))

    def _retry(self, op: Callable[[Any], Any]) -> Any:
        """Run ``op`` on a fresh channel until it is answered ok, as a client retries."""
        for _ in range(100):
            ch = self.conn.channel()
            try:
                result = op(ch)
            except AMQPChannelError:
                continue
            ch.close()
            return result
        raise AssertionError("an operation never succeeded")

    def _writer_pid(self) -> int:
        """The pid of a live writer (not one killed and not yet noticed as gone)."""
        store: Any = self.server.store

        def live() -> int | None:
            pid = store.writer_pid
            return int(pid) if store.sock is not None and not dead(pid) else None

        return int(wait_for(live, 30, what="a store writer"))

    def _with_dying_writer(self, op: Callable[[Any], Any], arrived: Callable[[], bool]) -> None:
        """Do ``op`` while its commit is with a writer that is stopped, then killed."""
        port = self.server.listen_ports[0]
        commit_with_dying_writer(self._writer_pid(), f"amqp://guest:guest@127.0.0.1:{port}/%2F",
                                 op, lambda: self.harness.call(arrived))
        self.failed_commits += 1

    def _memory(self) -> tuple[dict[str, int], set[tuple[str, str]]]:
        return self.harness.call(lambda: snapshot(self.server))

    # ------------------------------------------------------------ rules
    @rule(name=st.sampled_from(QUEUES))
    def declare(self, name: str) -> None:
        self._retry(lambda ch: ch.queue_declare(name, durable=True))
        self.queues.add(name)

    @precondition(lambda self: len(self.queues) < len(QUEUES))
    @rule(data=st.data())
    def declare_while_writer_dies(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(set(QUEUES) - self.queues)))
        vh = self.server.broker.vhosts["/"]
        self._with_dying_writer(lambda ch: ch.queue_declare(name, durable=True),
                                lambda: name in vh.queues)
        self._retry(lambda ch: ch.queue_declare(name, durable=True))  # the client retries
        self.queues.add(name)

    @precondition(lambda self: bool(self.queues))
    @rule(data=st.data(), key=st.sampled_from(KEYS))
    def bind(self, data: st.DataObject, key: str) -> None:
        self._bind(data.draw(st.sampled_from(sorted(self.queues))), key)

    def _bind(self, name: str, key: str) -> None:
        self._retry(lambda ch: ch.queue_bind(name, EXCHANGE, routing_key=key))
        self.binds.add((name, key))

    @precondition(lambda self: bool(self.queues))
    @rule(data=st.data(), key=st.sampled_from(KEYS))
    def bind_while_writer_dies(self, data: st.DataObject, key: str) -> None:
        name = data.draw(st.sampled_from(sorted(self.queues)))
        if (name, key) in self.binds:
            return  # nothing to commit
        ex = self.server.broker.vhosts["/"].exchanges[EXCHANGE]
        self._with_dying_writer(
            lambda ch: ch.queue_bind(name, EXCHANGE, routing_key=key),
            lambda: any(b.destination[1] == name and b.routing_key == key for b in ex.bindings))
        self._bind(name, key)

    @precondition(lambda self: bool(self.queues))
    @rule(data=st.data(), dying=st.booleans())
    def delete(self, data: st.DataObject, dying: bool) -> None:
        name = data.draw(st.sampled_from(sorted(self.queues)))
        if dying:
            vh = self.server.broker.vhosts["/"]
            self._with_dying_writer(lambda ch: ch.queue_delete(name), lambda: name not in vh.queues)
        self._retry(lambda ch: ch.queue_delete(name))
        self.queues.discard(name)
        self.binds = {b for b in self.binds if b[0] != name}
        self.confirmed.pop(name, None)

    @precondition(lambda self: bool(self.queues))
    @rule(data=st.data(), n=st.integers(1, 20))
    def publish(self, data: st.DataObject, n: int) -> None:
        name = data.draw(st.sampled_from(sorted(self.queues)))
        ch = self.conn.channel()
        ch.confirm_delivery()
        props = pika.BasicProperties(delivery_mode=2)
        for _ in range(n):
            self.published += 1
            body = f"{name}-{self.published}".encode()
            for _attempt in range(100):
                try:
                    ch.basic_publish("", name, body, props, mandatory=True)
                except (NackError, UnroutableError):
                    continue
                self.confirmed.setdefault(name, []).append(body)
                break
            else:
                raise AssertionError(f"{body!r} never confirmed")
        ch.close()

    @rule()
    def kill_writer(self) -> None:
        """The writer dies with whatever it holds (maybe nothing)."""
        pid = self._writer_pid()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: dead(pid), 30, what="the killed writer to die")

    @rule()
    def restart(self) -> None:
        before = self._memory()
        self._stop()
        self.server, self.done = self.harness.start(self.dir)
        self.conn = self._connect()
        after = self._memory()
        assert after == before, "the store recovered something else than memory held"
        self._check_messages()

    # ------------------------------------------------------------ checks
    @invariant()
    def clients_were_told_the_truth(self) -> None:
        queues, binds = self._memory()
        assert set(queues) == self.queues
        assert binds == self.binds

    def _check_messages(self) -> None:
        for name, bodies in self.confirmed.items():
            ch = self.conn.channel()
            got = []
            while True:
                _m, _p, body = ch.basic_get(name, auto_ack=False)
                if body is None:
                    break
                got.append(body)
            ch.close()  # back to the queue, unacked
            assert set(bodies) <= set(got), f"{name}: confirmed messages lost"

    def _stop(self) -> None:
        if self.conn.is_open:
            self.conn.close()
        self.harness.call(self.server.stop)
        assert self.done.wait(60)

    def teardown(self) -> None:
        self._stop()


async def test_memory_equals_store_after_failed_commits(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        CommitMachine.harness = Harness(nursery, trio.lowlevel.current_trio_token())
        CommitMachine.root = tmp_path
        test = CommitMachine.TestCase
        # no shrinking: each step is a real client against a real writer, and a
        # failing sequence of ten steps reads well as it is
        test.settings = settings(max_examples=8, stateful_step_count=10, deadline=None,
                                 phases=[Phase.explicit, Phase.reuse, Phase.generate],
                                 suppress_health_check=list(HealthCheck))
        await trio.to_thread.run_sync(lambda: test().runTest())
