"""The store with its writer in a child process: SQLite's work on the second core.

Why: with a writer thread, every row the writer binds and every page SQLite
touches holds or fights for the GIL the event loop needs, so the broker never
uses more than one core, and each hand-over of the GIL between the loop and
the writer can cost the loop up to a switch interval (5 ms). Here the event
loop pickles each submission (a few microseconds per message, see
:mod:`.writer_frames`) and writes it to a socketpair without blocking; the child
(:mod:`.writer_main`) commits groups and answers with one frame of
acknowledgements per group, which the loop reads when the socket is readable.
No thread of this process takes part, so no GIL hand-over is on the path.

This module knows no event loop: the broker's loop calls :meth:`send_some`
when the socket is writable and :meth:`receive_some` when it is readable
(see ``server.persistence``), and sets the two hooks. Everything here runs on
that one thread, so nothing takes a lock or asks which thread it is on.

The child also opens the database for the broker: it creates or upgrades the
schema and reads everything back at start (:meth:`ProcessStore.call`), so
the broker process never imports SQLAlchemy (``store.api``). Page-ins are
the child's reads too, in order with the writes (:meth:`ProcessStore.read`);
the admin API's few reads open an engine here on first use
(:meth:`ProcessStore.engine`), beside the child's writes (SQLite's WAL).

If the child dies, the submissions it had are failed (publishers get a nack,
exactly as for a failed commit), store writes are reported failing (which
blocks publishers), and a new child takes over the submissions not yet sent.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from amqplite.storeops import Op

from .api import (
    LOG_LINGER_S,
    Callback,
    PruneRange,
    Recovered,
    StoreClosed,
    redelivered_queues,
    tell_failing,
)
from .database import MissingDriver
from .writer_frames import RECV_SIZE, FrameBuffer, encode

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from .reads import StoreReads

log = logging.getLogger(__name__)

#: a child that keeps dying is restarted after this, doubling up to the max
RESPAWN_MIN_S = 0.1
RESPAWN_MAX_S = 5.0
#: writers :meth:`ProcessStore.close` starts at most, when the one it stops dies
CLOSE_SPAWNS = 3
#: buffers handed to one sendmsg
MAX_IOV = 256


#: ``callback(result, error)`` of :meth:`ProcessStore.read`
ReadCallback = Callable[[Any, BaseException | None], None]


class StoreWriterError(Exception):
    """A commit failed in the writer process (its text names the original error)."""


class StoreWriterGone(StoreWriterError):
    """The writer process ended before it answered: the commit may or may not have
    landed, and says nothing about the submission's content."""


class StoreOpenError(StoreWriterError):
    """The writer process could not open the database (its text names the error)."""


class ProcessStore:
    """The broker's store: its writer is ``python -m amqplite.store.writer_main``.

    Thread model: one thread (the event loop's) calls everything that writes
    (:meth:`start`, :meth:`submit`, :meth:`read`, :meth:`send_some`,
    :meth:`receive_some`) and runs the callbacks; it must live as long as the
    store (the child's death signal follows the thread that started it).
    :meth:`call` (the start-up steps), :meth:`close` and :meth:`flush` pump the
    socket themselves, where that loop does not. The local reads
    (:meth:`fetch_bodies`...) are safe from any thread.
    """

    def __init__(self, url: str, durability: str = "fsync", *, busy_timeout_ms: int = 10_000,
                 log_linger_s: float = LOG_LINGER_S) -> None:
        self.url = url
        self.durability = durability
        self.busy_timeout_ms = busy_timeout_ms
        #: how long a log-only group waits for company (0: commit at once)
        self.log_linger_s = log_linger_s
        self._closed = False
        #: reads on this process's own connections, opened on first use
        self._local: StoreReads | None = None
        #: why the last writer could not open the database (None once one did)
        self.open_error: Exception | None = None
        self._submitted = 0
        self._completed = 0
        self._stopping = False
        #: submissions whose commit failed for good, or that the writer never answered
        self._failed = 0
        #: committed (or failed) groups so far, and the size of the last one
        self.groups = 0
        self.last_group_size = 0
        #: why writes fail right now (the writer retries), else None
        self.failing: str | None = None
        #: called on the loop's thread with ``failing`` whenever it changes
        self.on_failing: Callable[[str | None], None] | None = None
        #: frames not yet written whole: (sid, frame); sid -1 for init and stop
        self._out: deque[tuple[int, bytes]] = deque()
        #: bytes of ``_out[0]`` already written
        self._head_off = 0
        self._callbacks: dict[int, tuple[Callback | None, Sequence[Op]]] = {}
        self._reads: dict[int, ReadCallback] = {}
        self._next_sid = 0
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._frames = FrameBuffer()
        #: one receive buffer, reused: a fresh RECV_SIZE bytes per recv costs an
        #: allocation of that size each time, and stream reads answer in megabytes
        self._scratch = memoryview(bytearray(RECV_SIZE))
        self._started = False
        self._stop_acked = False
        self._last_spawn = 0.0
        self._respawn_delay = RESPAWN_MIN_S
        #: the writer process's pid (for memory accounting and operators)
        self.writer_pid: int | None = None
        #: writer processes started after the first (each one a crash)
        self.restarts = 0
        #: called when frames wait for the socket to be writable
        self.on_output: Callable[[], None] | None = None
        #: called with the old socket before it is closed (the loop may wait on it)
        self.on_socket_closing: Callable[[socket.socket], None] | None = None

    # --- life cycle -------------------------------------------------------------

    @property
    def sock(self) -> socket.socket | None:
        """The socket to the current writer process (None while there is none)."""
        return self._sock

    def start(self) -> None:
        """Start the writer process (once), on the thread that will pump it."""
        if self._started:
            raise RuntimeError("store already started")
        if self._closed:
            raise StoreClosed("store is closed")
        self._started = True
        self._spawn()

    def _spawn(self) -> None:
        mine, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "amqplite.store.writer_main", str(theirs.fileno()),
                 str(os.getpid())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        mine.setblocking(False)
        init = encode(("i", self.url, self.durability, self.busy_timeout_ms,
                       self.log_linger_s, logging.getLogger().getEffectiveLevel()))
        # the init frame goes first; frames still queued go to this child
        self._out.appendleft((-1, init))
        self._head_off = 0
        self._sock, self._proc, self.writer_pid = mine, proc, proc.pid
        self._frames = FrameBuffer()
        self._last_spawn = time.monotonic()
        self.send_some()

    @property
    def respawn_delay(self) -> float:
        """How long to wait before :meth:`respawn`: longer while children die young."""
        return self._respawn_delay

    def respawn(self) -> None:
        """Start a new writer after :meth:`receive_some` reported the last one gone."""
        if self._sock is None and not self._stopping:
            self.restarts += 1
            self._spawn()

    def close(self, timeout: float | None = None, *, clean: bool = False) -> None:
        """Let the child commit everything, stop it, and record a clean stop if asked
        (the child writes the mark after its last group, if nothing failed).

        Drives the socket itself: by now the event loop pumps it no more.
        """
        if self._closed:
            return
        if self._started:
            self._stopping = True
            self.on_socket_closing = None  # the loop waits on the socket no more
            deadline = None if timeout is None else time.monotonic() + timeout
            for _ in range(CLOSE_SPAWNS):
                if self._sock is None:
                    if self.open_error is not None:
                        break  # a new writer could not open the database either
                    # the last writer died and the loop stopped before it started the
                    # next (or it died now): what is queued for it (a repair of failed
                    # metadata too) is written by one started here, not dropped
                    self.restarts += 1
                    self._spawn()
                # a dead writer's frames to stop are gone with it
                self._out.append((-1, encode(("x", clean and not self._failed))))
                if self._drive(lambda: self._stop_acked, deadline) or self._sock is not None:
                    break
            if not self._stop_acked:
                self._kill()
                self._fail(list(self._callbacks), "store writer process did not stop in time")
                if self.open_error is None:
                    raise TimeoutError("store writer process did not stop in time")
            if self._proc is not None:
                try:
                    self._proc.wait(5)
                except subprocess.TimeoutExpired:
                    self._kill()
            self._fail(list(self._callbacks), "store writer process stopped")
            if self._sock is not None:
                self._sock.close()
                self._sock = None
        self._stopping = True
        self._closed = True
        if self._local is not None:
            self._local.engine.dispose()

    # --- start-up: the child opens the database --------------------------------------

    def call(self, name: str, *args: Any) -> Any:
        """Ask the writer for one of its reads or start-up steps and wait for the
        answer, pumping the socket on this thread: only where the event loop does
        not (start-up, tools, tests). A writer that dies first is replaced and
        asked again; one that cannot open the database raises why."""
        if not self._started:
            raise RuntimeError("start the store first: its writer process answers")
        box: list[tuple[Any, BaseException | None]] = []
        self.read(name, args, lambda result, err: box.append((result, err)))
        while not box:
            if self._sock is None:
                if self.open_error is not None:
                    raise self.open_error
                time.sleep(self._respawn_delay)
                self.respawn()
            self._drive(lambda: bool(box) or self._sock is None, None)
        result, err = box[0]
        if err is not None:
            raise self.open_error or err
        return result

    def create(self) -> None:
        """Create the tables if missing and stamp the schema version (idempotent)."""
        self.call("create")

    def load(self, body_window: int = 1000,
             settled: Callable[[Recovered], Collection[int]] | None = None) -> Recovered:
        """Clean up orphans and read everything durable back; after an unclean stop the
        spilled entries are marked redelivered, except in the queues ``settled``
        names (``store.lifecycle.load``'s, in two steps: ``settled`` runs here)."""
        rec: Recovered = self.call("recover", body_window)
        if queues := redelivered_queues(rec, settled):
            self.call("mark_redelivered", queues)
        return rec

    def mark_open(self) -> None:
        """Record that a broker runs on this database (call after ``load``)."""
        self.call("mark_open")

    # --- the admin API's reads, on this process's own connections ---------------------

    @property
    def engine(self) -> Engine:
        """An engine of this process's own (the admin API's reads): opened, and
        SQLAlchemy imported, on first use; safe from any thread."""
        return self._local_reads().engine

    def _local_reads(self) -> StoreReads:
        local = self._local
        if local is None:
            # no lock (the loop's side takes none): two first reads at once each open
            # an engine and one is dropped, which costs nothing but its creation
            from .committer import open_engine
            from .reads import LocalReads

            local = self._local = LocalReads(open_engine(self.url, self.durability,
                                                         self.busy_timeout_ms))
        return local

    def fetch_bodies(self, message_ids: Sequence[int]) -> dict[int, bytes]:
        return self._local_reads().fetch_bodies(message_ids)

    def fetch_stream(self, queue_id: int, lo: int, limit: int) -> list[tuple[int, int, bytes]]:
        return self._local_reads().fetch_stream(queue_id, lo, limit)

    @property
    def failed_submissions(self) -> int:
        """Submissions whose commit failed for good (a clean stop needs none)."""
        return self._failed

    def flush(self, timeout: float | None = None) -> None:
        """Block until everything submitted so far has committed (or failed),
        pumping the socket on this thread (call it only where the loop is not)."""
        target = self._submitted
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._drive(lambda: self._completed >= target, deadline):
            raise TimeoutError("store flush timed out")

    def _drive(self, done: Callable[[], bool], deadline: float | None) -> bool:
        while not done():
            sock = self._sock
            if sock is None:
                return done()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            r, w, _x = select.select([sock], [sock] if self._out else [], [], remaining)
            if w:
                self.send_some()
            if r and not self.receive_some():
                return done()
        return True

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    # --- writing ------------------------------------------------------------------

    def submit(self, ops: Sequence[Op], callback: Callback | None = None, *,
               urgent: bool = False) -> None:
        """Hand ops to the writer; ``callback(None | error)`` runs on this thread once
        they committed or failed. ``urgent``: someone waits on this commit, so a
        group of log rows must not linger for it. Never blocks. Do not mutate
        ``ops`` after submitting it."""
        if self._stopping:
            raise StoreClosed("store is closed")
        sid = self._next_sid
        frame = encode(("s", sid, ops, urgent))  # an op it cannot encode fails it alone
        self._next_sid = sid + 1
        self._callbacks[sid] = (callback, ops)
        self._submitted += 1
        if self._send_or_queue(sid, frame) and self.on_output is not None:
            self.on_output()

    def _send_or_queue(self, sid: int, frame: bytes) -> bool:
        """Write the frame now if nothing waits before it and
        the socket takes it whole; else queue (the rest of) it. True if queued."""
        sock = self._sock
        if not self._out and sock is not None:
            try:
                n = sock.send(frame)
            except OSError:  # would block, or the child is gone (the loop sees it)
                n = 0
            if n == len(frame):
                return False
            self._head_off = n
        self._out.append((sid, frame))
        return True

    def read(self, name: str, args: tuple[Any, ...], callback: ReadCallback) -> None:
        """Ask the writer for one of the store's reads (``fetch_entries``,
        ``fetch_bodies``, ``fetch_stream``); ``callback(result, error)`` runs on the
        loop's thread.

        Why the writer reads: it answers after every submission sent before the
        request has committed (no round trip to wait for that first), and the
        rows are built on its core, not under the event loop's GIL.
        """
        if self._stopping:
            raise StoreClosed("store is closed")
        rid = self._next_sid
        frame = encode(("r", rid, name, args))
        self._next_sid = rid + 1
        self._reads[rid] = callback
        if self._send_or_queue(rid, frame) and self.on_output is not None:
            self.on_output()

    def send_some(self) -> bool:
        """Write queued frames until the socket would block; True if some remain."""
        out, sock = self._out, self._sock
        while out:
            if sock is None:
                return True
            bufs = [memoryview(out[0][1])[self._head_off:]]
            for i in range(1, min(len(out), MAX_IOV)):
                bufs.append(memoryview(out[i][1]))
            try:
                n = sock.sendmsg(bufs)
            except OSError:
                return True
            n += self._head_off
            while out and n >= len(out[0][1]):
                n -= len(out.popleft()[1])
            self._head_off = n
        return False

    def receive_some(self) -> bool:
        """Take what the writer sent and run the callbacks of what it committed.

        False when the writer is gone: its submissions have been failed, and
        :meth:`respawn` (after :attr:`respawn_delay`) starts the next one.
        """
        sock = self._sock
        if sock is None:
            return False
        frames = self._frames
        view = self._scratch
        eof = False
        while True:
            try:
                n = sock.recv_into(view)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                n = 0
            if not n:
                eof = True
                break
            frames.feed(view[:n])
            if n < RECV_SIZE:
                break
        while (msg := frames.next()) is not None:
            self._handle(msg)
        if eof:
            self._writer_gone(sock)
            return False
        return True

    def _handle(self, msg: Any) -> None:
        kind = msg[0]
        if kind == "d":
            _kind, batch, groups, size = msg
            callbacks = self._callbacks
            calls = [(callbacks.pop(sid), err, res) for sid, err, res in batch]
            self.groups, self.last_group_size = groups, size
            self.open_error = None
            if self.failing is not None and not self._stopping:
                self._set_failing(None)  # a (new) writer commits again
            for (cb, ops), err, res in calls:
                if res:
                    prunes: list[Any] = [op for op in ops if type(op) is PruneRange]
                    for prune, n in zip(prunes, res, strict=True):
                        prune.deleted = n
                if cb is not None:
                    try:
                        cb(None if err is None else StoreWriterError(err))
                    except Exception:
                        log.exception("store callback raised")
            self._completed += len(calls)
        elif kind == "r":
            _kind, rid, result, err = msg
            self.open_error = None
            read_cb = self._reads.pop(rid)
            try:
                read_cb(result, None if err is None else StoreWriterError(err))
            except Exception:
                log.exception("store read callback raised")
        elif kind == "f":
            self._set_failing(msg[1])
        elif kind == "e":
            _kind, name, text = msg
            self.open_error = (MissingDriver(text) if name == "MissingDriver"
                               else StoreOpenError(f"{name}: {text}"))
            log.error("store writer process cannot open the database: %s", self.open_error)
        elif kind == "x":
            self._failed += msg[1]
            self._stop_acked = True

    def _writer_gone(self, sock: socket.socket) -> None:
        self._sock = None
        queued = {sid for sid, _f in self._out}
        if self._head_off and self._out:
            queued.discard(self._out[0][0])  # half written to the dead child
            self._out.popleft()
        self._head_off = 0
        self._out = deque((sid, f) for sid, f in self._out if sid >= 0)
        lost = [sid for sid in self._callbacks if sid not in queued]
        lost_reads = [(rid, self._reads.pop(rid)) for rid in list(self._reads)
                      if rid not in queued]
        hook = self.on_socket_closing
        if hook is not None:
            hook(sock)
        sock.close()
        code = self._proc.wait() if self._proc is not None else None
        for _rid, read_cb in lost_reads:
            try:
                read_cb(None, StoreWriterError(f"store writer process exited with code {code}"))
            except Exception:
                log.exception("store read callback raised")
        if self._stopping:
            self._fail(lost, "store writer process stopped")
            return
        young = time.monotonic() - self._last_spawn < 1.0
        self._respawn_delay = (min(self._respawn_delay * 2, RESPAWN_MAX_S) if young
                               else RESPAWN_MIN_S)
        log.error("store writer process exited with code %s: %d submissions failed; "
                  "starting a new one", code, len(lost))
        self._fail(lost, f"store writer process exited with code {code}")
        self._set_failing(f"store writer process exited with code {code}")

    def _fail(self, sids: list[int], why: str) -> None:
        """Call back the submissions ``sids`` with the writer's end as their error."""
        if not sids:
            return
        err = StoreWriterGone(why)
        calls = [self._callbacks.pop(sid) for sid in sids if sid in self._callbacks]
        self._failed += len(calls)
        for cb, _ops in calls:
            if cb is not None:
                try:
                    cb(err)
                except Exception:
                    log.exception("store callback raised")
        self._completed += len(calls)

    def _set_failing(self, reason: str | None) -> None:
        self.failing = reason
        tell_failing(self.on_failing, reason)
