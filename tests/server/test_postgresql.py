"""The broker on PostgreSQL: confirmed messages survive kill -9, one broker per database,
and a missing driver is one line naming the extra (issue 22, item 17)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pika
import psutil
import psycopg
import pytest

from amqplite.server.datalock import DatabaseLock, DatabaseLockLost
from amqplite.store.dblock import LockSession
from tests.brokerproc import BrokerProcess, wait_for
from tests.pg_server import PgServer
from tests.server.conftest import connect


def terminate(url: str, backend: int) -> None:
    """End a PostgreSQL session as an operator (or a server restart) would."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (backend,))


def pg_broker(tmp_path: Path, url: str, name: str = "b") -> BrokerProcess:
    return BrokerProcess(tmp_path / name, None, "--database-url", url)


def refused(tmp_path: Path, url: str, name: str) -> subprocess.CompletedProcess[str]:
    """Run a second ``amqplite serve`` on ``url`` to its end (it must refuse)."""
    b = pg_broker(tmp_path, url, name)
    return subprocess.run(
        [sys.executable, "-m", "amqplite", "serve", "--host", "127.0.0.1", "--port",
         str(b.port), "--admin-port", str(b.admin_port), "--data-dir", str(b.data_dir),
         "--mqtt-port", "0", "--stomp-port", "0", "--kafka-port", "0", "--database-url", url],
        capture_output=True, text=True, timeout=60)


def publish_until_killed(b: BrokerProcess, queue: str, kill_after: int) -> list[bytes]:
    """Publish persistent messages with confirms; SIGKILL the broker once ``kill_after``
    of them are confirmed, mid-stream. The bodies confirmed before the crash."""
    confirmed: list[bytes] = []
    c = connect(b)
    ch = c.channel()
    ch.queue_declare(queue, durable=True)
    ch.confirm_delivery()
    enough = threading.Event()

    def killer() -> None:
        enough.wait(60)
        b.kill()

    t = threading.Thread(target=killer)
    t.start()
    try:
        i = 0
        while True:
            body = b"m%06d" % i
            ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
            confirmed.append(body)  # basic_publish returned: the broker confirmed it
            i += 1
            if i == kill_after:
                enough.set()
    except (pika.exceptions.AMQPError, OSError):
        pass  # the broker died under us
    finally:
        enough.set()
        t.join()
    return confirmed


def drain(b: BrokerProcess, queue: str) -> list[bytes]:
    c = connect(b)
    ch = c.channel()
    got = []
    while True:
        _m, _p, body = ch.basic_get(queue, auto_ack=True)
        if body is None:
            break
        got.append(body)
    c.close()
    return got


def test_confirmed_messages_survive_kill_9(tmp_path: Path, pg_url: str) -> None:
    b = pg_broker(tmp_path, pg_url).start()
    try:
        confirmed = publish_until_killed(b, "crashq", kill_after=300)
        assert len(confirmed) >= 300
        b.start()
        got = drain(b, "crashq")
    finally:
        b.kill()
    assert set(confirmed) <= set(got), f"lost {sorted(set(confirmed) - set(got))[:5]}"
    assert len(got) == len(set(got)), "a message came back twice"
    assert got == sorted(got)  # in publish order


def test_second_broker_on_one_database_is_refused(tmp_path: Path, pg_server: PgServer,
                                                  pg_db: str) -> None:
    first = pg_broker(tmp_path, pg_server.url(pg_db), "first").start()
    try:
        # the same database under a password the refusal must not show
        url = pg_server.url(pg_db, password="s3cret-pw")
        out = refused(tmp_path, url, "second")
        assert out.returncode != 0
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
        line = lines[0]
        assert line.startswith("amqplite: cannot start: database ")
        assert "in use by another amqplite broker" in line and pg_db in line
        assert "s3cret-pw" not in line and "***" in line
        assert f"pid {first.proc.pid}" in line and str(first.port) in line  # type: ignore[union-attr]
        # the first broker never noticed
        c = connect(first)
        ch = c.channel()
        ch.queue_declare("still", durable=True)
        ch.confirm_delivery()
        ch.basic_publish("", "still", b"works", pika.BasicProperties(delivery_mode=2))
        assert ch.basic_get("still", auto_ack=True)[2] == b"works"
        c.close()
        # kill -9 frees the lock with the broker's session: the next one starts
        first.kill()
        third = pg_broker(tmp_path, pg_server.url(pg_db), "third").start()
        try:
            c = connect(third)
            c.channel().queue_declare("still", passive=True)
            c.close()
        finally:
            third.kill()
    finally:
        first.kill()


def test_writer_killed_keeps_the_lock_and_the_broker_working(tmp_path: Path,
                                                             pg_url: str) -> None:
    """The lock is the broker process's, not its writer's: a killed writer lets no
    second broker in, and the restarted writer commits as before."""
    b = pg_broker(tmp_path, pg_url).start()
    try:
        assert b.proc is not None
        writers = [p for p in psutil.Process(b.proc.pid).children()
                   if "amqplite.store.writer_main" in " ".join(p.cmdline())]
        assert len(writers) == 1
        os.kill(writers[0].pid, signal.SIGKILL)
        out = refused(tmp_path, pg_url, "second")
        assert out.returncode != 0 and "in use by another amqplite broker" in out.stderr

        def new_writer() -> bool:
            assert b.proc is not None
            return any("amqplite.store.writer_main" in " ".join(p.cmdline())
                       and p.pid != writers[0].pid
                       for p in psutil.Process(b.proc.pid).children())

        wait_for(new_writer, 30, what="a new writer process")
        confirmed = publish_until_killed(b, "afterq", kill_after=50)
        b.start()
        got = drain(b, "afterq")
        assert set(confirmed) <= set(got)
    finally:
        b.kill()


def test_lost_lock_session_is_replaced_or_reported(pg_url: str) -> None:
    """The database dropped the lock's session (a restart, an admin): the broker takes
    the lock again if it is free, and learns it if another broker took it."""
    lock = DatabaseLock(pg_url, grace_s=0)
    lock.acquire(ports=[5672], admin_port=15672)
    admin = LockSession(pg_url, "test admin")
    try:
        assert lock.check()
        backend = admin.holder()
        assert backend is not None and "ports=5672" in backend[1]
        terminate(pg_url, backend[0])
        assert lock.check()  # replaced: the lock was free
        again = admin.holder()
        assert again is not None and again[0] != backend[0]
        # our own old session, still alive on the server, is not a takeover:
        # the check waits for it to go (a session with our record stands in for it)
        terminate(pg_url, again[0])
        wait_for(lambda: admin.holder() is None, 10, what="the lock to be released")
        ours = LockSession(pg_url, lock._record())
        assert ours.try_lock()
        assert lock.check() is False
        ours.close()
        wait_for(lambda: admin.holder() is None, 10, what="the lock to be released")
        assert lock.check()
        third = admin.holder()
        assert third is not None
        terminate(pg_url, third[0])
        wait_for(lambda: admin.holder() is None, 10, what="the lock to be released")
        assert admin.try_lock()  # another broker takes it meanwhile
        with pytest.raises(DatabaseLockLost, match="taken over by another amqplite broker"):
            lock.check()
    finally:
        lock.release()
        admin.close()


def test_a_session_dropped_before_the_ports_are_published_is_left_to_check(
        pg_url: str) -> None:
    """The lock session dies as the broker publishes its ports (update): that is not a
    failed start; check() then replaces the session, or reports the takeover."""
    lock = DatabaseLock(pg_url, grace_s=0)
    lock.acquire()
    admin = LockSession(pg_url, "test admin")
    try:
        found = admin.holder()
        assert found is not None
        terminate(pg_url, found[0])
        lock.update(ports=[5672], admin_port=15672)  # raised OperationalError before
        assert lock.check()  # the lock was free: a new session holds it
        again = admin.holder()
        assert again is not None and "ports=5672" in again[1]
    finally:
        lock.release()
        admin.close()


def test_broker_stops_when_another_takes_its_database(tmp_path: Path, pg_url: str) -> None:
    """Its lock session dropped and the lock taken by another: the broker stops,
    non-zero, saying so, and records no clean shutdown in the other's database."""
    b = pg_broker(tmp_path, pg_url).start()
    thief = LockSession(pg_url, "amqplite-thief")
    try:
        def steal() -> bool:
            found = thief.holder()
            if found is not None and found[1].startswith("amqplite pid="):
                terminate(pg_url, found[0])
            return thief.try_lock()

        wait_for(steal, 20, interval=0.01, what="the lock to change hands")
        assert b.proc is not None
        assert b.proc.wait(30) != 0
        log = b.log()
        assert "amqplite: stopped: database " in log
        assert "taken over by another amqplite broker" in log
        with psycopg.connect(pg_url) as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'clean_shutdown'").fetchone()
        assert row == ("0",)
    finally:
        thief.close()
        b.kill()


def test_missing_driver_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    """psycopg hidden from the interpreter (it is not our component): one line, no
    traceback, the pip command, no password."""
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from amqplite.cli import main\n"
            "sys.argv = ['amqplite'] + sys.argv[1:]\n"
            "main()\n")
    out = subprocess.run(
        [sys.executable, "-c", code, "serve", "--port", "0", "--admin-port", "0",
         "--mqtt-port", "0", "--stomp-port", "0", "--kafka-port", "0", "--data-dir", str(tmp_path),
         "--database-url",
         "postgresql://amqp:hunter2@127.0.0.1:1/broker"],
        capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert out.stderr.strip().splitlines() == [
        "amqplite: cannot start: the database driver 'psycopg' for "
        "postgresql://amqp:***@127.0.0.1:1/broker is not installed: "
        "pip install 'amqplite[postgresql]'"], out.stderr
