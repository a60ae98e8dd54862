"""Frames between the broker and its store-writer process (see :mod:`.writer`).

A frame is a 4-byte big-endian length and a pickle. Pickle because both ends
are the same amqplite in the same venv, started together; it never crosses a
trust boundary (a socketpair between parent and child). The hot ops are
pickled as ``(class, field tuple)`` through a private dispatch table: attrs'
own slotted-class pickling goes through Python per object and costs about
four times as much, and this runs on the event loop's thread.
"""

from __future__ import annotations

import copyreg
import io
import operator
import pickle
import socket
import struct
from collections.abc import Callable
from typing import Any

import attrs

from amqplite.storeops import HOT_OPS

_LEN = struct.Struct("!I")
#: frames above this are refused on receipt: a sign of a broken stream
MAX_FRAME = 1 << 31


def _reducer(cls: type) -> Callable[[Any], tuple[type, tuple[Any, ...]]]:
    if not attrs.has(cls):  # a NamedTuple: its fields are its items
        return lambda op: (cls, tuple(op))
    names = [f.name for f in attrs.fields(cls)]
    get = operator.attrgetter(*names)
    if len(names) == 1:
        return lambda op: (cls, (get(op),))
    return lambda op: (cls, get(op))


_TABLE: dict[type, Any] = dict(copyreg.dispatch_table)
for _cls in HOT_OPS:
    _TABLE[_cls] = _reducer(_cls)


def encode(obj: Any) -> bytes:
    """One frame: length prefix and pickle."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    p = pickle.Pickler(buf, pickle.HIGHEST_PROTOCOL)
    p.dispatch_table = _TABLE
    p.dump(obj)
    data = buf.getbuffer()
    _LEN.pack_into(data, 0, len(data) - 4)
    del data
    return buf.getvalue()


class FrameBuffer:
    """Bytes in, whole frames out (in order); no I/O of its own."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | memoryview) -> None:
        self._buf += data

    def next(self) -> Any | None:
        """The next whole frame's object, or None until more bytes arrive."""
        buf = self._buf
        if len(buf) < 4:
            return None
        (n,) = _LEN.unpack_from(buf, 0)
        if n >= MAX_FRAME:
            raise ValueError(f"store frame of {n} bytes: the stream is broken")
        if len(buf) < 4 + n:
            return None
        with memoryview(buf) as view:
            obj = pickle.loads(view[4 : 4 + n])
        del buf[: 4 + n]
        return obj


def recv_into(sock: socket.socket, frames: FrameBuffer) -> bool:
    """One recv into ``frames``; False at end of stream (or a reset)."""
    try:
        chunk = sock.recv(RECV_SIZE)
    except (BlockingIOError, InterruptedError):
        return True
    except OSError:
        return False
    if not chunk:
        return False
    frames.feed(chunk)
    return True


RECV_SIZE = 1 << 20
