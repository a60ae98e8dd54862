"""Entry point of the store-writer process (``python -m amqplite.store.writer_main``).

The broker starts it with one end of a socketpair and its own pid. It runs a
:class:`~amqplite.store.committer.Committer`'s group commit (retries,
per-submission isolation): submissions in, one frame of acknowledgements out
per committed group; reads (page-ins) are answered in order with the writes.
It dies with the broker: ``PR_SET_PDEATHSIG`` kills it the moment the broker
exits, and end-of-stream on the socket ends it without
committing anything more, so a broker killed with -9 leaves no writer behind to
race the next one on the database.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .api import PruneRange
from .base import StoreBase
from .committer import Committer, needs_fsync
from .writer_frames import RECV_SIZE, FrameBuffer, encode, recv_into

PR_SET_PDEATHSIG = 1
#: the reads the broker may ask the writer to do (in order with its writes), and the
#: start-up steps it asks for the same way (the broker process has no engine)
READS = frozenset({"fetch_entries", "fetch_bodies", "fetch_stream", "get_meta", "prune_range",
                   "create", "recover", "mark_redelivered", "mark_open"})
#: Under load, while messages are both stored and acked, commits start at most
#: this often (RabbitMQ's message store syncs every 25 ms while busy). Confirms
#: then trail deliveries by about this much: a publisher's window of unconfirmed
#: messages holds messages its consumers already have instead of a queue's
#: backlog (publish->deliver latency is in-flight / throughput), and a message
#: acked within the interval is never written (S3's fan-out to ten durable
#: queues: 72k deliveries/s unpaced, 103k paced). Stream appends are paced too:
#: a stream's chunk rows are built per group, and a paced group makes chunks that
#: readers fetch in fewer, larger rows (reads from ``first`` 100k -> 120k msg/s
#: per consumer, the publish rate unchanged). Otherwise waiting cancels nothing:
#: without acks (a backlog being published) it only delays the confirms a
#: publisher's window waits on (the backlog scenario published 53k msg/s paced,
#: 84k unpaced, for the same CPU per message), and with acks alone (a backlog
#: drained) it leaves the writer idle a fifth of the time while reads and acks
#: queue (docs/dev/performance-history.md).
COMMIT_PACE_S = 0.01
#: "Under load": the previous group held at least this many ops. A publisher
#: waiting for each confirm (a few ops per group) is answered at once.
PACE_MIN_OPS = 128
#: ... and no paced group grows beyond this many ops.
PACE_MAX_OPS = 50_000

log = logging.getLogger(__name__)


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: end-of-stream still stops us
        pass
    if os.getppid() != parent:  # the broker died before prctl took effect
        os._exit(0)


def error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


class WalSync:
    """fdatasync of an SQLite database's WAL file, off the committing thread.

    Why: a FULL commit waits for the fsync of its WAL frames before the next
    group can start, and a backlog's publish or drain spent a quarter of the
    writer's time there. Groups now commit under NORMAL (the frames are
    written, not synced) and the sending thread syncs the WAL before it sends
    the acknowledgements of those commits, while this thread applies the next
    group. One sync covers every write completed before it began (same
    inode), so an acknowledged commit is as durable as under FULL; until then
    nobody has heard of it, and a power loss meanwhile loses it as it would
    lose a FULL commit in flight (NORMAL keeps the WAL consistent either way).
    """

    def __init__(self, database: str) -> None:
        self.path = database + "-wal"
        self._fd: int | None = None
        self._ino: tuple[int, int] | None = None
        self.syncs = 0

    def sync(self) -> None:
        """Sync the WAL as it is now (raises OSError when the disk refuses)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            # every connection closed since the commit: SQLite checkpointed the WAL
            # into the database, synced it, and removed the WAL
            return
        ino = (st.st_dev, st.st_ino)
        if self._fd is None or ino != self._ino:
            # a new WAL (the old one was removed as above). The old descriptor is
            # closed only then: SQLite keeps no locks on the WAL file itself
            if self._fd is not None:
                os.close(self._fd)
            self._fd, self._ino = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC), ino
        os.fdatasync(self._fd)
        self.syncs += 1


class _Outgoing:
    """Frames to the broker, in order. A frame that acknowledges a commit owing a
    sync goes only after ``WalSync.sync`` (one sync for everything queued by then),
    sent by a thread of its own so the committing thread goes on; every frame
    behind it waits with it. A frame with nothing ahead of it (a read's answer,
    most of all: a stream reader waits on each) is sent by the caller at once:
    a hand-over to that thread cost a wake-up and a copy of up to a megabyte."""

    def __init__(self, sock: socket.socket, wal: WalSync | None) -> None:
        self.sock = sock
        self.wal = wal
        self._items: list[tuple[bytes, bool]] = []
        self._cond = threading.Condition()
        #: a thread is sending (or syncing for) frames taken off ``_items``
        self._busy = False
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="amqplite-writer-send",
                                        daemon=True)
        self._thread.start()

    def put(self, frame: bytes, sync: bool = False) -> None:
        with self._cond:
            if sync or self._items or self._busy:
                self._items.append((frame, sync))
                self._cond.notify()
                return
            self._busy = True  # nothing is ahead of it: this thread sends it
        try:
            self.sock.sendall(frame)
        except OSError:
            pass  # the broker is gone: the reader thread sees the end of stream
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify()  # the sending thread: frames queued meanwhile, or close

    def close(self) -> None:
        """Send what is queued, then stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                # frames to send and nobody sending, or closing with everything sent
                cond.wait_for(lambda: not self._busy and (bool(self._items) or self._closing))
                items, self._items = self._items, []
                if not items:
                    return  # closing, and everything went
                self._busy = True
            try:
                if self.wal is not None and any(sync for _f, sync in items):
                    try:
                        self.wal.sync()
                    except OSError:
                        # the kernel may have dropped the pages it failed to write: no
                        # retry can prove them durable. Stop; the broker fails what it
                        # has not heard of and starts a new writer (recovery rereads).
                        log.critical("syncing the WAL failed: stopping the writer",
                                     exc_info=True)
                        os._exit(3)
                for frame, _sync in items:
                    self.sock.sendall(frame)
            except OSError:
                return  # the broker is gone: the reader thread sees the end of stream
            finally:
                with cond:
                    self._busy = False


class _Writer:
    """Read what arrived, commit it as one group, acknowledge, repeat.

    A reader thread only moves bytes off the socket (the GIL is free while it
    waits in recv); this thread parses, commits and answers. The next group is
    everything that arrived during the last commit (group commit).
    ``db`` answers the reads; ``committer`` commits.
    """

    def __init__(self, sock: socket.socket, db: StoreBase, committer: Committer,
                 wal: WalSync | None = None) -> None:
        self.sock = sock
        self.out = _Outgoing(sock, wal)
        self.db = db
        self.committer = committer
        self.frames = FrameBuffer()
        self.pending: list[tuple[Any, ...]] = []
        #: ops in ``pending``'s submissions, and whether a read is among them
        self.pending_ops = 0
        self.reading = False
        #: when the last commit started (monotonic), how many ops it held, and
        #: whether it is worth waiting after: it both inserted and deleted entries,
        #: or appended to streams (see COMMIT_PACE_S)
        self.last_commit_at = 0.0
        self.last_ops = 0
        self.last_paced = False
        self.urgent = False
        self.stop = False
        #: the stop frame asks for a clean-stop mark (the broker saw no failure)
        self.clean = False
        self.eof = False
        #: what the reader thread received, not yet parsed
        self.chunks: list[bytes] = []
        self.arrived = threading.Condition()

    def send(self, obj: Any, sync: bool = False) -> None:
        self.out.put(encode(obj), sync)

    def _take(self) -> None:
        """Move every whole frame received so far into ``pending``."""
        while (msg := self.frames.next()) is not None:
            if msg[0] == "s":
                self.pending.append(msg)
                self.pending_ops += len(msg[2])
                if not self.urgent and (msg[3] or needs_fsync((msg[2],))):
                    self.urgent = True
            elif msg[0] == "r":
                self.pending.append(msg)
                self.urgent = self.reading = True  # someone waits for the answer
            elif msg[0] == "x":
                self.stop = True
                self.clean = len(msg) > 1 and bool(msg[1])

    def _fill(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` (None: for ever) for bytes, then take all that came."""
        with self.arrived:
            if not self.chunks and not self.eof:
                self.arrived.wait(timeout)
            chunks, self.chunks = self.chunks, []
        for chunk in chunks:
            self.frames.feed(chunk)
        self._take()

    def receive(self) -> None:
        """The reader thread: drain the socket as fast as the broker writes, so a
        group is everything that arrived during the last commit (the socket's own
        buffer holds only a few hundred KiB, which would cap the group size)."""
        sock = self.sock
        while True:
            try:
                chunk = sock.recv(RECV_SIZE)
            except OSError:
                chunk = b""
            with self.arrived:
                if chunk:
                    self.chunks.append(chunk)
                else:
                    self.eof = True
                self.arrived.notify()
            if not chunk:
                return

    def _commit(self, group: list[tuple[Any, ...]]) -> None:
        if not group:
            return
        committer = self.committer
        errors = committer.commit_group([item[2] for item in group])
        acks = []
        for item, err in zip(group, errors, strict=True):
            results = None
            ops = item[2]
            if err is None and len(ops) == 1 and type(ops[0]) is PruneRange:
                results = [ops[0].deleted]  # prune_delivery_log submits them alone
            acks.append((item[1], None if err is None else error_text(err), results))
        sync, committer.owes_sync = committer.owes_sync, False
        self.send(("d", acks, committer.groups, committer.last_group_size), sync)

    def _read(self, item: tuple[Any, ...]) -> None:
        _kind, rid, name, args = item
        result, err = None, None
        try:
            if name not in READS:
                raise ValueError(f"not a store read: {name!r}")
            result = getattr(self.db, name)(*args)
        except Exception as exc:
            # the broker raises it where it asked (start-up names it to the operator)
            err = error_text(exc)
            log.error("store read %s failed: %s", name, err.splitlines()[0])
            log.debug("store read %s failed", name, exc_info=True)
        self.send(("r", rid, result, err))

    def _gather_until(self, deadline: float, more: Callable[[], bool]) -> None:
        """Take in what arrives until ``deadline`` while ``more()`` holds (the log's
        linger and the pace under load both wait this way); stops at end of stream."""
        while not self.eof and more():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._fill(remaining)

    def _pace(self) -> None:
        """Under load, let the next group gather until COMMIT_PACE_S after the last
        commit started. Never for a read (a page-in waits on it), a stop, a light
        load (the last group was small: a publisher waiting for each confirm), a
        group already large, or after a group that neither both inserted and
        deleted entries nor appended to a stream (waiting would gain nothing)."""
        if self.last_ops < PACE_MIN_OPS or not self.last_paced:
            return
        self._gather_until(self.last_commit_at + COMMIT_PACE_S, lambda: bool(
            self.pending and not self.reading and not self.stop
            and self.pending_ops < PACE_MAX_OPS))

    def run(self) -> int:
        linger = self.db.log_linger_s
        while True:
            if not self.pending and not self.stop:
                self._fill(None)
            if self.eof:
                os._exit(0)  # the broker is gone: nothing more is committed for it
            if self.pending and not self.urgent and not self.stop and linger > 0:
                self._gather_until(time.monotonic() + linger,
                                   lambda: not self.urgent and not self.stop)
                if self.eof:
                    os._exit(0)
            self._pace()
            if self.eof:
                os._exit(0)
            self.last_commit_at, self.last_ops = time.monotonic(), self.pending_ops
            ins, dels, apps = self.committer.traffic
            items, self.pending, self.urgent = self.pending, [], False
            self.pending_ops, self.reading = 0, False
            group: list[tuple[Any, ...]] = []
            for item in items:
                if item[0] == "s":
                    group.append(item)
                else:  # a read sees every submission before it committed
                    self._commit(group)
                    group = []
                    self._read(item)
            self._commit(group)
            ins_after, dels_after, apps_after = self.committer.traffic
            self.last_paced = (ins_after != ins and dels_after != dels) or apps_after != apps
            if self.stop and not self.pending:
                self.committer.close()
                if self.clean and not self.committer.failed:
                    try:
                        self.db.mark_clean()
                    except Exception:
                        log.exception("could not record the clean shutdown")
                self.db.engine.dispose()
                self.send(("x", self.committer.failed))
                self.out.close()
                return 0


def serve(sock: socket.socket) -> int:
    frames = FrameBuffer()
    init = None
    while init is None:
        if not recv_into(sock, frames):
            return 0
        init = frames.next()
    _kind, url, durability, busy_timeout_ms, linger, level = init
    logging.basicConfig(level=level,
                        format="%(asctime)s %(levelname)s %(name)s[writer]: %(message)s")
    try:
        db = StoreBase(url, durability, busy_timeout_ms=busy_timeout_ms, log_linger_s=linger)
        database = db.engine.url.database
        wal = (WalSync(database) if db.engine.dialect.name == "sqlite" and durability == "fsync"
               and database and database != ":memory:" and not database.startswith("file:")
               else None)
        committer = Committer(db.engine, durability, defer_sync=wal is not None)
    except Exception as exc:  # the broker names it to the operator and stops
        with contextlib.suppress(OSError):
            sock.sendall(encode(("e", type(exc).__name__, str(exc))))
        return 1
    writer = _Writer(sock, db, committer, wal)
    writer.frames = frames
    committer.on_failing = lambda reason: writer.send(("f", reason))
    # The writer keeps CPython's collector thresholds: with the broker's (tune_gc)
    # it used 3-4 % less CPU in S1 but held 25-30 MiB more RSS in S1 and S5, and
    # since held batches settle most of S1 before it (server.persistence) its
    # collector is no longer a fifth of its CPU.
    writer._take()
    threading.Thread(target=writer.receive, name="amqplite-writer-recv", daemon=True).start()
    return writer.run()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    fd, parent = int(args[0]), int(args[1])
    _die_with_parent(parent)
    # Ctrl-C or a service manager's SIGTERM to the whole group is the broker's to
    # handle: it stops this writer once its own shutdown has flushed the store
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    return serve(sock)


if __name__ == "__main__":
    sys.exit(main())
