"""One broker per data directory: an exclusive ``flock`` on ``DATA/amqplite.lock``.

Two brokers on one SQLite file would interleave recoveries and hand out the
same messages twice. ``flock`` belongs to the open file description, so the
kernel drops it when the process dies in any way (kill -9 included): a stale
lock file never blocks a restart. The owner writes its pid, host and ports
into the file so the refused second broker can say who holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from pathlib import Path
from typing import Any

LOCK_NAME = "amqplite.lock"


class DataDirLocked(Exception):
    """Another live broker holds the data directory; the message names it."""


class DataDirLock:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory).resolve() / LOCK_NAME
        self._fd: int | None = None

    def acquire(self, **info: Any) -> None:
        """Take the lock or raise :class:`DataDirLocked` at once (never waits)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _describe(os.pread(fd, 4096, 0))
            os.close(fd)
            raise DataDirLocked(
                f"data directory {self.path.parent} is in use by another amqplite broker "
                f"({owner}); lock file {self.path}") from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.update(**info)

    def update(self, **info: Any) -> None:
        """Rewrite the owner record (ports are known only once the listeners are bound)."""
        if self._fd is None:
            return
        record = {"pid": os.getpid(), "host": socket.gethostname(), **info}
        data = (json.dumps(record) + "\n").encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        """Unlock and close; the file stays (removing it would race a starting broker)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the last descriptor releases the flock


def _describe(raw: bytes) -> str:
    try:
        rec = json.loads(raw.decode())
    except ValueError:
        return "owner unknown"
    if not isinstance(rec, dict):
        return "owner unknown"
    parts = [f"pid {rec.get('pid', '?')} on host {rec.get('host', '?')}"]
    if rec.get("ports"):
        parts.append(f"AMQP port(s) {', '.join(str(p) for p in rec['ports'])}")
    if rec.get("admin_port"):
        parts.append(f"admin port {rec['admin_port']}")
    return ", ".join(parts)
