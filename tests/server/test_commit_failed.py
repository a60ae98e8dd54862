"""A failed store commit leaves memory equal to the store (issue 22, item 1).

The store writer process is killed (kill -9, as the OOM killer would) while a
declare's commit is in flight. The client that got 541 retries as clients do;
whatever it is told afterwards must hold after a restart: every queue that
answered declare-ok, its bindings, and every confirmed message come back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pika
import psutil
import pytest
import trio
from pika.exceptions import AMQPChannelError, NackError, UnroutableError

from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect
from tests.server.dying_writer import commit_with_dying_writer

ROUNDS = 3
PER_QUEUE = 40


def _writer(b: BrokerProcess) -> psutil.Process | None:
    """The broker's live store-writer child, if there is one now."""
    assert b.proc is not None
    for p in psutil.Process(b.proc.pid).children():
        try:
            if ("amqplite.store.writer_main" in " ".join(p.cmdline())
                    and p.status() != psutil.STATUS_ZOMBIE):
                return p
        except psutil.NoSuchProcess:
            continue
    return None


def _in_memory(api: httpx.Client, queue: str) -> bool:
    return api.get(f"/api/queues/%2F/{queue}").status_code == 200


def _declare_until_ok(conn: pika.BlockingConnection, queue: str, exchange: str,
                      ) -> pika.adapters.blocking_connection.BlockingChannel:
    """Declare the queue and bind it as a client does: retry on a channel error."""
    for _ in range(50):
        ch = conn.channel()
        try:
            ch.queue_declare(queue, durable=True)
            ch.queue_bind(queue, exchange, routing_key=queue)
            return ch
        except AMQPChannelError:
            continue
    raise AssertionError(f"declare of {queue} never succeeded")


def _publish_confirmed(ch: pika.adapters.blocking_connection.BlockingChannel, exchange: str,
                       queue: str, n: int) -> list[bytes]:
    """Publish ``n`` persistent messages with confirms, republishing what is nacked."""
    props = pika.BasicProperties(delivery_mode=2)
    confirmed: list[bytes] = []
    for i in range(n):
        body = f"{queue}-{i}".encode()
        for _attempt in range(100):
            try:
                ch.basic_publish(exchange, queue, body, props, mandatory=True)
            except (NackError, UnroutableError):
                continue
            confirmed.append(body)
            break
        else:
            raise AssertionError(f"{body!r} was never confirmed")
    return confirmed


@pytest.mark.timeout(180)
def test_declare_whose_commit_died_with_the_writer_is_not_lost(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "d").start()
    exchange = "x.commit"
    confirmed: dict[str, list[bytes]] = {}
    failed_declares = 0
    try:
        api = httpx.Client(base_url=b.admin_url or "", auth=("guest", "guest"), timeout=10)
        conn = connect(b)
        setup = conn.channel()
        setup.exchange_declare(exchange, "direct", durable=True)
        setup.close()
        for r in range(ROUNDS):
            queue = f"q.commit.{r}"
            writer = wait_for(lambda: _writer(b), 30, what="a store writer")
            err = commit_with_dying_writer(
                writer.pid, b.url, lambda ch, q=queue: ch.queue_declare(q, durable=True),
                lambda q=queue: _in_memory(api, q))
            assert err is not None, "the declare's commit died: not declare-ok"
            failed_declares += 1
            ch = _declare_until_ok(conn, queue, exchange)
            ch.confirm_delivery()
            confirmed[queue] = _publish_confirmed(ch, exchange, queue, PER_QUEUE)
            ch.close()
        conn.close()
    finally:
        b.kill()  # a crash: only what committed comes back
    assert failed_declares == ROUNDS
    assert "store writer process exited" in b.log()

    b2 = BrokerProcess(tmp_path / "d").start()
    try:
        conn = connect(b2)
        for queue, bodies in confirmed.items():
            ch = conn.channel()
            try:
                depth = ch.queue_declare(queue, passive=True).method.message_count
            except AMQPChannelError as exc:
                raise AssertionError(f"{queue} answered declare-ok but is gone after a "
                                     f"restart ({len(bodies)} confirmed messages lost)") from exc
            got = []
            for _ in range(depth):
                _m, _p, body = ch.basic_get(queue, auto_ack=True)
                got.append(body)
            assert set(bodies) <= set(got), f"{queue}: confirmed messages lost"
            # the binding came back too: a publish through the exchange reaches the queue
            ch.confirm_delivery()
            ch.basic_publish(exchange, queue, b"after", mandatory=True)
            ch.close()
        conn.close()
    finally:
        b2.kill()


async def test_metadata_the_store_refuses_for_good_is_undone_after_bounded_retries(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A value SQLite cannot store (a lone surrogate) fails every commit: the repair
    gives up after REDO_ATTEMPTS, the op beside it is still written, the bad queue
    leaves memory, and nothing loops."""
    from amqplite.broker.core import Broker
    from amqplite.broker.queue import Queue
    from amqplite.server.interpreter import Interpreter
    from amqplite.server.persistence import REDO_ATTEMPTS, Persistence
    from amqplite.store.engine import Store
    from amqplite.store.writer import ProcessStore

    url = f"sqlite:///{tmp_path / 'amqplite.db'}"
    store = ProcessStore(url, log_linger_s=0)
    store.start()
    store.create()
    store.load()
    broker = Broker()
    persistence = Persistence(store, broker)
    persistence.bind_loop()
    interpreter = Interpreter(broker, persistence, lambda _e: None)
    vh = broker.add_vhost("/")
    broker.add_queue(vh, Queue(1, "/", "ok", durable=True))
    broker.add_queue(vh, Queue(2, "/", "bad\udc80", durable=True))
    told: list[BaseException | None] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(persistence.pump)
        interpreter.apply(broker.take_outcome(), flush=False)
        persistence.add_waiter(told.append)
        persistence.flush()
        with trio.fail_after(30):
            await persistence.wait_idle()
        nursery.cancel_scope.cancel()
    assert len(told) == 1 and told[0] is not None  # the declare was told it failed
    assert set(vh.queues) == {"ok"}
    assert "undone in memory" in caplog.text
    # the whole group, REDO_ATTEMPTS - 1 repairs, then one op at a time: bounded
    assert store.groups <= 1 + REDO_ATTEMPTS + 3
    store.close(20)
    again = Store(url)
    rec = again.load()
    again.close()
    assert {q.name for q in rec.queues} == {"ok"}


def _answer_while_the_writer_dies(b: BrokerProcess, call: Callable[[], int],
                                  applied: Callable[[], bool]) -> int:
    """Stop the store writer, start the admin call, wait until memory shows it, kill
    the writer (its commit dies with it): the call's HTTP status."""
    import os
    import signal
    import threading

    from tests.server.dying_writer import dead

    writer = wait_for(lambda: _writer(b), 30, what="a store writer")
    os.kill(writer.pid, signal.SIGSTOP)
    answer: list[int] = []
    t = threading.Thread(target=lambda: answer.append(call()), daemon=True)
    t.start()
    try:
        wait_for(applied, 30, what="the change in memory")
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        wait_for(lambda: dead(writer.pid), 30, what="the killed writer to die")
    t.join(60)
    assert len(answer) == 1, "the admin call did not answer"
    return answer[0]


@pytest.mark.timeout(120)
def test_admin_write_undone_after_its_commit_died_stays_undone_after_restart(
        tmp_path: Path) -> None:
    """An admin write whose commit died with the writer answers 500 and is undone in
    memory; the metadata the persistence layer writes again must not outlive that
    undo in the store: the undo writes what it restored (the old policy)."""
    b = BrokerProcess(tmp_path / "d").start()
    hdr = {"content-type": "application/json"}
    old = {"pattern": "^old$", "definition": {"max-length": 1}, "priority": 1,
           "apply-to": "queues"}
    new = {"pattern": "^new$", "definition": {"max-length": 2}, "priority": 2,
           "apply-to": "queues"}
    try:
        api = httpx.Client(base_url=b.admin_url or "", auth=("guest", "guest"), timeout=60)
        assert api.put("/api/policies/%2F/p", json=old, headers=hdr).status_code == 201
        status = _answer_while_the_writer_dies(
            b, lambda: api.put("/api/policies/%2F/p", json=new, headers=hdr).status_code,
            lambda: api.get("/api/policies/%2F/p").json()["pattern"] == "^new$")
        assert status == 500, status
        assert api.get("/api/policies/%2F/p").json()["pattern"] == "^old$"
        # settle: a write after the repair has committed
        assert api.put("/api/vhosts/settle", json={}, headers=hdr).status_code == 201
        api.close()
    finally:
        b.kill()
    b2 = BrokerProcess(tmp_path / "d").start()
    try:
        with httpx.Client(base_url=b2.admin_url or "", auth=("guest", "guest")) as api:
            got = api.get("/api/policies/%2F/p").json()
            assert got["pattern"] == "^old$" and got["priority"] == 1, got
    finally:
        b2.kill()


@pytest.mark.timeout(120)
def test_admin_delete_whose_commit_died_answers_from_the_repair(tmp_path: Path) -> None:
    """A delete has no undo journal: when its commit dies with the writer, the repair
    writes it again, and the API answers from that repair (204), not 500 for a
    change that is in memory and then in the store."""
    b = BrokerProcess(tmp_path / "d").start()
    hdr = {"content-type": "application/json"}
    try:
        api = httpx.Client(base_url=b.admin_url or "", auth=("guest", "guest"), timeout=60)
        assert api.put("/api/queues/%2F/gone", json={"durable": True},
                       headers=hdr).status_code == 201
        status = _answer_while_the_writer_dies(
            b, lambda: api.delete("/api/queues/%2F/gone").status_code,
            lambda: not _in_memory(api, "gone"))
        assert status == 204, status
        api.close()
    finally:
        b.kill()
    b2 = BrokerProcess(tmp_path / "d").start()
    try:
        with httpx.Client(base_url=b2.admin_url or "", auth=("guest", "guest")) as api:
            assert not _in_memory(api, "gone")
    finally:
        b2.kill()
