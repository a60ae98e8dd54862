"""The root nursery: AMQP listeners, store writer bridge, page-ins and shutdown.

Every path into the broker ends in ``Server.interpret()`` (a batch of
commands) or ``Server.execute()`` (one command): both hand the broker's
Outcome to the one :class:`~amqplite.server.interpreter.Interpreter`.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import logging
import secrets
import signal
import ssl
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import trio

from amqplite import __version__, build
from amqplite.broker.auth import is_loopback
from amqplite.broker.core import Broker
from amqplite.broker.effects import LoadEntries, PageIn, ReadStream
from amqplite.config import Settings
from amqplite.protocol.handshake import default_server_properties
from amqplite.server.connection import CLOSE_OK_TIMEOUT, LINGER_TIMEOUT, AMQPConnection
from amqplite.server.counters import Counters
from amqplite.server.datalock import DatabaseLock, DatabaseLockLost, DataDirLock
from amqplite.server.disk import DiskMonitor
from amqplite.server.flow import Flow
from amqplite.server.gctune import tune_gc
from amqplite.server.interpreter import Interpreter
from amqplite.server.memory import MemoryMonitor
from amqplite.server.persistence import Persistence
from amqplite.server.ports import accepted_peer, listen_tcp
from amqplite.server.recovery import restore, seed_security, settled_queues
from amqplite.server.tls import accept as accept_tls
from amqplite.server.tls import peer_user, server_context
from amqplite.store.api import PruneRange
from amqplite.store.database import is_postgresql, masked
from amqplite.store.writer import ProcessStore
from amqplite.storeops import CLEAN_KEY, EXPORTED_KEY

log = logging.getLogger("amqplite.server")

#: a task the composition root runs beside the broker: ``service(server, task_status=...)``
Service = Callable[..., Awaitable[None]]
_R = TypeVar("_R")


#: how often the broker checks that it still holds its database lock (PostgreSQL)
DB_LOCK_CHECK_S = 5.0

#: the longest the timer sleeps with nothing armed (queue expiry is looked at then)
TIMER_NAP = 0.25


def _trio_deadline(now: float, at: float) -> float:
    """The trio clock's time for broker-clock time ``at``, a hair after it (so tick() sees
    the deadline passed)."""
    return trio.current_time() + max(at - now, 0.0) + 0.001


SHUTDOWN_TEXT = "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"


class Server:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.broker = Broker(log_level=settings.delivery_log, body_window=settings.body_window,
                             retained_max_bytes=settings.retained_max_bytes_value,
                             retained_max_length=settings.retained_max_length,
                             access_control=True, loopback_users=tuple(settings.loopback_users))
        #: the broker's users (seeded from the settings on the first start, then stored)
        self.users = self.broker.users
        self.store: ProcessStore | None = None
        self.persistence: Persistence | None = None
        self.interpreter: Interpreter | None = None
        #: publishers' readers paused while their queue's consumers catch up
        self.flow = Flow()
        #: what the metrics report beside the broker's own stats
        self.counters = Counters()
        self.connections: set[AMQPConnection] = set()
        #: plain AMQP ports, then AMQPS ports, once listening
        self.listen_ports: list[int] = []
        self.tls_ports: list[int] = []
        self._tls: ssl.SSLContext | None = None
        self.started_at = time.time()
        self._nursery: trio.Nursery | None = None
        self._paging: dict[tuple[str, str], trio.Event] = defaultdict(trio.Event)
        self._stopping = trio.Event()
        #: free-space watch on the data dir (None for a database server without one)
        self.disk: DiskMonitor | None = None
        #: RSS against memory_high_watermark; its ``paging``/``on_paging`` tell the
        #: broker when to move bodies out of RAM (exists once run() has started)
        self.memory: MemoryMonitor | None = None
        #: the MQTT listener (server/mqtt.py) once it runs, None when mqtt_port is 0;
        #: the admin API lists its connections
        self.mqtt: Any = None
        #: the STOMP listener (server/stomp/) once it runs, None when stomp_port is 0
        self.stomp: Any = None
        #: the Kafka listener (server/kafka/) once it runs, None when kafka_port is 0
        self.kafka: Any = None
        #: persistent MQTT sessions read back by recovery, for the MQTT listener
        self.mqtt_sessions: list[Any] = []
        #: Kafka groups' committed offsets read at start (PutKafkaOffset), for the Kafka
        #: listener's coordinator to restore
        self.kafka_offsets: list[Any] = []
        #: base URL of the admin HTTP API once it listens (None when disabled)
        self.admin_url: str | None = None
        #: the links supervisor once it runs (``links/supervisor.py`` sets it), for the
        #: admin API's shovel and federation rows; this layer never looks inside
        self.links: Any = None
        #: why the broker stopped, if another broker took its database (PostgreSQL)
        self._lock_lost: DatabaseLockLost | None = None
        #: the password this broker's own links log in with as the user who defined
        #: them (a URI without host and credentials); never leaves the process
        #: but on loopback, and a new one each start
        self.link_secret = secrets.token_urlsafe(32)

    def link_login(self, password: str, peer_host: str) -> bool:
        """Is this one of our own links logging in as its defining user?"""
        return is_loopback(peer_host) and hmac.compare_digest(password.encode(),
                                                              self.link_secret.encode())

    def server_properties(self) -> dict[str, Any]:
        """What connection.start announces (the protocol layer owns the capability list)."""
        return {**default_server_properties(), "cluster_name": self.settings.cluster_name}

    # ------------------------------------------------------------ effects
    def at_connection_limit(self) -> bool:
        """Is ``max_connections`` (0: none) reached by the clients admitted so far, AMQP
        and MQTT together (RabbitMQ counts MQTT connections against it too)?"""
        limit = self.settings.max_connections
        if not limit:
            return False
        admitted = sum(c.admitted for c in self.connections)
        admitted += 0 if self.stomp is None else len(self.stomp.clients)
        admitted += 0 if self.kafka is None else len(self.kafka.clients)
        return admitted + (0 if self.mqtt is None else len(self.mqtt.clients)) >= limit

    def vhost_connection_limit(self, vhost: str) -> int | None:
        """The vhost's ``max-connections`` when the clients admitted to it, AMQP, MQTT
        and STOMP together (as RabbitMQ counts them), have reached it (None: room
        left, or no limit)."""
        limit = self.broker.vhost_limit(vhost, "max-connections")
        if limit is None:
            return None
        n = sum(c.admitted and c.session is not None and c.session.vhost == vhost
                for c in self.connections)
        if self.mqtt is not None:
            n += sum(v == vhost for v, _ in self.mqtt.clients)
        if self.stomp is not None:
            n += sum(c.session is not None and c.session.vhost == vhost
                     for c in self.stomp.clients)
        return limit if n >= limit else None

    def interpret(self, *, flush: bool = True) -> None:
        """Carry out what the broker's commands since the last call asked for.

        ``flush=False`` leaves the store batch open so the caller can attach a
        waiter to it first (tx.commit-ok, a held declare-ok).
        """
        assert self.interpreter is not None, "the server is not running"
        self.interpreter.apply(self.broker.take_outcome(), flush=flush)
        if self.flow.waiting:  # an ack or a consume may have drained their queue
            self.flow.check()

    def execute(self, command: Callable[..., _R], *args: Any, **kwargs: Any) -> _R:
        """Run one broker command and carry out its Outcome at once (admin, timers)."""
        try:
            return command(*args, **kwargs)
        finally:
            self.interpret()

    async def committed(self) -> None:
        """Wait until everything the broker has asked of the store so far has committed."""
        self.interpret(flush=False)
        await self.persist.committed()

    @property
    def persist(self) -> Persistence:
        """The store bridge (exists once run() has opened the store)."""
        assert self.persistence is not None, "the server is not running"
        return self.persistence

    def _memory_paging(self, on: bool) -> None:
        """Above the paging threshold, transient messages deep in queues spill too."""
        self.execute(self.broker.set_memory_pressure, on)

    def _start_read(self, e: PageIn | LoadEntries | ReadStream) -> None:
        assert self._nursery is not None
        if isinstance(e, PageIn):
            self._nursery.start_soon(self._page_in, e)
        elif isinstance(e, ReadStream):
            self._nursery.start_soon(self._read_stream, e)
        else:
            self._nursery.start_soon(self._load, e)

    async def _load(self, e: LoadEntries) -> None:
        """Read spilled entries back once every earlier submission has committed."""
        assert self.store is not None
        rows: list[Any] = []
        try:
            rows = await self.persist.read("fetch_entries", e.queue.id, e.lo, e.hi, e.limit)
        except Exception:
            log.exception("loading spilled entries of queue %s failed; will retry",
                          e.queue.name)
            with trio.move_on_after(1):
                await self._stopping.wait()
            self.execute(self.broker.load_failed, e.queue)  # it asks again
        else:
            self.counters.page_ins += 1
            self.counters.paged_in_messages += len(rows)
            self.execute(self.broker.entries_loaded, e.queue, rows, e.limit, e.hi)
        ev = self._paging.pop((e.queue.vhost, e.queue.name), None)
        if ev is not None:
            ev.set()

    async def _read_stream(self, e: ReadStream) -> None:
        """A stream cursor's next batch, read once every earlier submission committed
        (so the appends up to ``e.hi`` are all there, or failed for good)."""
        assert self.store is not None
        try:
            chunks = await self.persist.read("fetch_stream", e.queue.id, e.lo, e.limit)
        except Exception:
            log.exception("reading stream %s failed; will retry", e.queue.name)
            with trio.move_on_after(1):
                await self._stopping.wait()
            self.execute(self.broker.stream_load_failed, e.queue, e.cursor)
        else:
            self.counters.page_ins += 1
            self.counters.paged_in_messages += sum(c[1] for c in chunks)
            self.execute(self.broker.stream_loaded, e.queue, e.cursor, chunks, e.hi, e.limit)

    async def _page_in(self, e: PageIn) -> None:
        """Read paged-out bodies once every earlier submission has committed.

        Waiting first means a body written moments ago (a dead-lettered copy)
        is readable, so a body the read does not find is truly gone.
        """
        assert self.store is not None
        keys = [x.message.key for x in e.entries if x.message.body is None]
        bodies: dict[int, bytes] = {}
        try:
            bodies = await self.persist.read("fetch_bodies", keys)
        except Exception:
            log.exception("page-in failed for queue %s; will retry", e.queue.name)
            self.execute(self.broker.paged_in, e.queue, {}, ())  # asks again on next dispatch
            with trio.move_on_after(1):
                await self._stopping.wait()
        else:
            self.counters.page_ins += 1
            self.counters.paged_in_messages += len(bodies)
            self.execute(self.broker.paged_in, e.queue, bodies, e.entries)
        ev = self._paging.pop((e.queue.vhost, e.queue.name), None)
        if ev is not None:
            ev.set()

    def _backlog(self) -> int:
        """Messages held, ready or unacked: when this falls a lot, freed heap is trimmed."""
        return sum(q.message_count + q.unacked
                   for vh in self.broker.vhosts.values() for q in vh.queues.values())

    async def wait_paged(self, vhost: str, queue: str) -> None:
        await self._paging[(vhost, queue)].wait()

    async def serve_mqtt_websocket(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """An ASGI websocket scope of the admin app: STOMP when a STOMP subprotocol is
        offered, else MQTT over WebSockets when enabled (each refuses when off)."""
        from amqplite.server.stomp.websocket import offers_stomp

        if offers_stomp(scope):
            from amqplite.server.stomp.websocket import serve_websocket as serve_stomp

            await serve_stomp(self.stomp, scope, receive, send)
            return
        from amqplite.server.mqtt.transports import serve_websocket  # the MQTT front, on use

        await serve_websocket(self.mqtt if self.settings.mqtt_websocket else None, scope,
                              receive, send)

    # ------------------------------------------------------------ running
    async def run(self, *, services: Sequence[Service] = (),
                  task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until stopped. ``services`` (the admin API...) are started in the root
        nursery once the listeners are up, each as ``nursery.start(service, self)``:
        the composition root chooses them, so this layer names none of them."""
        s = self.settings
        lock_dir = _lock_dir(s)
        lock: DataDirLock | DatabaseLock | None = None
        if lock_dir is not None:
            lock_dir.mkdir(parents=True, exist_ok=True)
            lock = DataDirLock(lock_dir)
            lock.acquire(ports=[s.port], admin_port=s.admin_port)
        elif is_postgresql(s.db_url):
            lock = DatabaseLock(s.db_url)
            await trio.to_thread.run_sync(functools.partial(
                lock.acquire, ports=[s.port], admin_port=s.admin_port))
        try:
            await self._run_locked(lock_dir, lock, services, task_status)
        finally:
            if lock is not None:
                lock.release()
        if self._lock_lost is not None:
            raise self._lock_lost

    async def _run_locked(self, lock_dir: Path | None, lock: DataDirLock | DatabaseLock | None,
                          services: Sequence[Service],
                          task_status: trio.TaskStatus[Server]) -> None:
        s = self.settings
        if s.tls_port is not None:
            self._tls = server_context(s)  # a bad certificate stops us before the store opens
        # the writer process does not linger on log rows: Persistence holds them
        # back on this side (LOG_DEFER_S), one frame and one commit per hand-over
        if s.store_writer == "thread":
            log.warning('store_writer = "thread" is no longer supported and is ignored: '
                        "the store writer runs in a child process")
        self.store = ProcessStore(s.db_url, durability=s.durability, log_linger_s=0)
        store = self.store
        # The writer process opens the database and does the start-up steps: this
        # process never imports SQLAlchemy (store.api). It starts on this thread,
        # whose end its death signal follows; the steps wait in a worker thread,
        # which pumps the socket until this loop does (Persistence.pump).
        store.start()
        clean = False
        try:
            await trio.to_thread.run_sync(store.create)
            recovered = await trio.to_thread.run_sync(store.load, s.body_window, settled_queues)
            unclean = recovered.meta.get(CLEAN_KEY) != "1"
            if unclean and recovered.entries:
                log.warning("the last run did not stop cleanly: recovered messages are "
                            "marked redelivered")
            restore(self.broker, recovered, unclean=unclean,
                    fetch=functools.partial(store.call, "fetch_entries"))
            seed_security(self.broker, recovered, s)
            self.mqtt_sessions = recovered.mqtt_sessions
            self.kafka_offsets = recovered.kafka_offsets
            del recovered
            tune_gc()
            await trio.to_thread.run_sync(store.mark_open)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(store.close)
            raise
        self.persistence = Persistence(store, self.broker, s.store_backlog_limit,
                                       self.counters)
        self.persistence.bind_loop()
        self.interpreter = Interpreter(self.broker, self.persistence, self._start_read,
                                       self.counters)
        self.interpret()  # the first start's seeds
        if lock_dir is not None:
            self.disk = DiskMonitor(lock_dir, s.disk_free_limit_bytes, self.persistence)
            self.disk.check()  # an alarm is in force before the first client arrives
        self.memory = MemoryMonitor(s.memory_watermark, self.persistence,
                                    paging_ratio=s.memory_paging_ratio, backlog=self._backlog,
                                    on_paging=self._memory_paging)
        self.memory.check()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                listeners = await self._open_listeners(s.port) if s.plain_listener else []
                secure = ([] if s.tls_port is None
                          else await self._open_listeners(s.tls_port, tls=True))
                self.listen_ports = _ports(listeners)
                self.tls_ports = _ports(secure)
                nursery.start_soon(self._serve, listeners, secure)
                nursery.start_soon(self._watch_signals)
                nursery.start_soon(self.persistence.pump)
                nursery.start_soon(self._timers)
                nursery.start_soon(self._retention)
                if self.disk is not None:
                    nursery.start_soon(self.disk.run, s.disk_check_interval)
                nursery.start_soon(self.memory.run, s.memory_check_interval)
                for service in services:
                    await nursery.start(service, self)
                if lock is not None:
                    await trio.to_thread.run_sync(functools.partial(
                        lock.update, ports=self.listen_ports + self.tls_ports,
                        admin_port=_port_of(self.admin_url)))
                if isinstance(lock, DatabaseLock):
                    nursery.start_soon(self._watch_db_lock, lock)
                log.info("amqplite %s (%s) listening on port(s) %s%s, data in %s; %s",
                         __version__, build(), self.listen_ports,
                         f", AMQPS on {self.tls_ports}" if secure else "", masked(s.db_url),
                         self.memory.describe())
                task_status.started(self)
                await self._stopping.wait()
                # a broker that lost its database to another writes no clean mark there
                clean = await self._shutdown() and self._lock_lost is None
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(functools.partial(store.close, clean=clean))

    async def _open_listeners(self, port: int, *, tls: bool = False,
                              ) -> list[trio.SocketListener]:
        return await listen_tcp(port, self.settings.host, "AMQPS" if tls else "AMQP",
                                "tls_port" if tls else "port")

    async def _serve(self, listeners: list[trio.SocketListener],
                     secure: list[trio.SocketListener]) -> None:
        async def handle(stream: trio.SocketStream, tls: ssl.SSLContext | None = None) -> None:
            peer = accepted_peer(stream)
            if peer is None:
                return
            if tls is None:
                await AMQPConnection(self, stream, peer).run()
                return
            # the handshake is this connection's own: a failure closes only it
            tls_stream = await accept_tls(stream, tls, f"{peer[0]}:{peer[1]}",
                                          self.settings.handshake_timeout)
            if tls_stream is not None:
                await AMQPConnection(self, tls_stream, peer,
                                     external_user=peer_user(tls_stream)).run()

        async with trio.open_nursery() as n:
            self._listen_scope = n.cancel_scope
            for ln in listeners:
                n.start_soon(trio.serve_listeners, handle, [ln])
            for ln in secure:
                n.start_soon(trio.serve_listeners, functools.partial(handle, tls=self._tls),
                             [ln])

    async def _timers(self) -> None:
        """Message TTL and queue expiry happen on time, consumers or not."""
        b = self.broker
        scope = trio.CancelScope()

        def wake(at: float) -> None:
            """A sooner TTL was armed while the timer sleeps: wake it then, not later."""
            scope.deadline = min(scope.deadline, _trio_deadline(b.now(), at))

        b.wake_timer = wake
        while True:
            deadline = b.next_deadline()
            now = b.now()
            # queue expiry (x-expires) does not wake the timer: it looks again after the nap
            wake_at = now + TIMER_NAP if deadline is None else min(deadline, now + TIMER_NAP)
            b.timer_wake_at = wake_at
            scope = trio.CancelScope(deadline=_trio_deadline(now, wake_at))
            with scope:
                await trio.sleep_forever()
            b.timer_wake_at = 0.0
            if b.next_deadline() is not None:
                try:
                    self.execute(b.tick)
                except Exception:  # a timer bug must not take the whole broker down
                    log.exception("timer tick failed; carrying on")

    async def _retention(self) -> None:
        """Prune delivery-log rows that are exported and older than the retention age.

        The audit job records its watermark in the meta table; nothing above it
        is ever pruned. The store deletes in bounded batches through the writer,
        so publishing never waits behind a long delete.
        """
        keep_us = int(self.settings.log_retention_days * 86400 * 1_000_000)
        while True:
            await trio.sleep(self.settings.log_prune_interval)
            try:
                mark = await self.persist.read("get_meta", EXPORTED_KEY)
                if mark is None:
                    continue
                cutoff = int(time.time() * 1_000_000) - keep_us
                n = await self._prune(self.persist, int(mark), cutoff)
                if n:
                    log.info("pruned %d delivery-log rows (exported up to id %s)", n, mark)
            except Exception:
                log.exception("delivery-log retention failed; will retry")

    @staticmethod
    async def _prune(persist: Persistence, max_id: int, older_than_us: int) -> int:
        """Delete the log's whole batches with ids up to ``max_id`` older than the cutoff,
        a range at a time: the writer finds each range (a read) and deletes it
        inside an ordinary group (submitted from this loop, like every write)."""
        total, lo = 0, 0
        while (hi := await persist.read("prune_range", lo, max_id, older_than_us)) is not None:
            op = PruneRange(lo, hi, older_than_us)
            done = trio.Event()
            outcome: list[BaseException | None] = []

            def committed(err: BaseException | None, outcome: list[BaseException | None] = outcome,
                          done: trio.Event = done) -> None:
                outcome.append(err)
                done.set()

            prune: list[Any] = [op]  # not a broker op: the writer reports what it deleted
            persist.store.submit(prune, committed)
            await done.wait()
            if outcome[0] is not None:
                raise outcome[0]
            total += op.deleted
            lo = op.hi
        return total

    async def _watch_db_lock(self, lock: DatabaseLock) -> None:
        """Keep the database lock: a session that broke (the database restarted) is
        replaced; if another broker took the lock meanwhile, this one stops, since
        two brokers on one database would deliver the same messages."""
        while True:
            await trio.sleep(DB_LOCK_CHECK_S)
            try:
                # abandoned on shutdown: a check stuck on an unreachable database
                # must not hold the broker's exit (the connection has timeouts)
                held = await trio.to_thread.run_sync(lock.check, abandon_on_cancel=True)
            except DatabaseLockLost as exc:
                log.critical("%s: shutting down", exc)
                self._lock_lost = exc
                self.stop()
                return
            if not held:
                log.warning("database lock not held right now (the database cannot be "
                            "reached, or the old session is still closing); retrying")

    async def _watch_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as sigs:
            async for sig in sigs:
                log.info("signal %s: shutting down", sig)
                self.stop()
                return

    def stop(self) -> None:
        self._stopping.set()

    async def _shutdown(self) -> bool:
        """Close every connection with 320, wait briefly for close-ok, flush the store.

        True when everything was flushed (a clean shutdown).
        """
        for c in list(self.connections):
            c.force_close(320, SHUTDOWN_TEXT)
        if self.mqtt is not None:
            self.mqtt.close_all(SHUTDOWN_TEXT)
        if self.stomp is not None:
            self.stomp.close_all(SHUTDOWN_TEXT)
        if self.kafka is not None:
            self.kafka.close_all(SHUTDOWN_TEXT)
        # each connection waits for close-ok, then lingers: both are bounded; an MQTT
        # client's writer sends its DISCONNECT (bounded by its FINISH_TIMEOUT)
        with trio.move_on_after(CLOSE_OK_TIMEOUT + LINGER_TIMEOUT + 1):
            while self.connections or (self.mqtt is not None and self.mqtt.connections) or (
                    self.stomp is not None and self.stomp.connections) or (
                    self.kafka is not None and self.kafka.connections):
                await trio.sleep(0.02)
        assert self.persistence is not None
        with trio.move_on_after(30):
            await self.persistence.wait_idle()
            return not self.connections
        return False


def _lock_dir(s: Settings) -> Path | None:
    """The directory one broker owns: the data dir, or a SQLite URL's folder; None for
    a database server (on PostgreSQL the broker holds a DatabaseLock instead)."""
    if not s.database_url:
        return Path(s.data_dir)
    url = s.database_url
    if url.startswith("sqlite") and ":///" in url:
        path = url.split(":///", 1)[1].split("?", 1)[0]
        if path and path != ":memory:":
            return Path(path).parent
    return None


def _ports(listeners: list[trio.SocketListener]) -> list[int]:
    return sorted({ln.socket.getsockname()[1] for ln in listeners})


def _port_of(url: str | None) -> int | None:
    if not url:
        return None
    with contextlib.suppress(ValueError):
        return int(url.rstrip("/").rsplit(":", 1)[1])
    return None

