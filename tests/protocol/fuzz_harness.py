"""Shared by the hypothesis fuzz tests and scripts/fuzz.py: inputs, mutations, the oracle.

The oracle: whatever bytes arrive, ``ServerConnection`` never raises, hands
out only its own event types, writes well-formed frames, and every close it
sends carries a real AMQP reply code other than 541 (541 means one of our own
exceptions escaped a parser and was caught by the last-resort handler: a bug).
"""

from __future__ import annotations

import random
import socket
import struct
import time
from typing import Any

from pamqp import commands as pc

from amqplite.protocol.connection import ServerConnection
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.events import (
    ChannelClosed,
    ChannelOpened,
    ConnectionClosed,
    ConnectionClosing,
    ConnectionOpened,
    ContentReceived,
    MethodReceived,
)
from amqplite.protocol.methods import BasicQosOk, ChannelClose, ConnectionClose, decode_method
from amqplite.protocol.spec import PROTOCOL_HEADER, ReplyCode
from tests.protocol.client import make_connection, marshal, publish, start_ok

EVENTS = (ChannelClosed, ChannelOpened, ConnectionClosed, ConnectionClosing, ConnectionOpened,
          ContentReceived, MethodReceived)
VALID_CODES = frozenset(int(c) for c in ReplyCode) - {int(ReplyCode.INTERNAL_ERROR)}
_HEAD = struct.Struct(">BHI")


def handshake() -> list[bytes]:
    """What a client sends up to an open channel 1, one frame per item."""
    return [
        PROTOCOL_HEADER,
        start_ok(),
        marshal(pc.Connection.TuneOk(2047, 131072, 60)),
        marshal(pc.Connection.Open("/")),
        marshal(pc.Channel.Open(), 1),
    ]


def session() -> list[bytes]:
    """A realistic session after the handshake: declares, publishes, acks, closes."""
    props = pc.Basic.Properties(content_type="text/plain", delivery_mode=2,
                                headers={"k": "v", "n": 1, "l": [1, "x"]}, priority=3)
    return [
        marshal(pc.Confirm.Select(), 1),
        marshal(pc.Exchange.Declare(exchange="x", exchange_type="topic",
                                    arguments={"alternate-exchange": "ae"}), 1),
        marshal(pc.Queue.Declare(queue="q", durable=True,
                                 arguments={"x-max-length": 10, "x-message-ttl": 500}), 1),
        marshal(pc.Queue.Bind(queue="q", exchange="x", routing_key="a.#"), 1),
        marshal(pc.Basic.Qos(prefetch_count=5), 1),
        marshal(pc.Basic.Consume(queue="q", consumer_tag="c1"), 1),
        publish(1, b"hello", exchange="x", routing_key="a.b", properties=props),
        publish(1, b"x" * 300_000, routing_key="q", frame_max=131072),
        marshal(pc.Basic.Ack(delivery_tag=1, multiple=True), 1),
        marshal(pc.Basic.Nack(delivery_tag=2, requeue=False), 1),
        marshal(pc.Channel.Open(), 2),
        marshal(pc.Tx.Select(), 2),
        publish(2, b"", routing_key="q"),
        marshal(pc.Tx.Commit(), 2),
        marshal(pc.Channel.Close(200, "bye", 0, 0), 2),
        marshal(pc.Connection.Close(200, "bye", 0, 0)),
    ]


HANDSHAKE = b"".join(handshake())
SESSION = session()


def feed(chunks: list[bytes], conn: ServerConnection | None = None,
         react: random.Random | None = None) -> ServerConnection:
    """Drive a connection with ``chunks``, checking the oracle after each one.

    With ``react``, play a server too: answer events with replies, deliveries,
    returns, channel errors, heartbeats and forced closes, so the paths the
    broker drives are fuzzed along with the parser.
    """
    conn = conn or make_connection()
    closed = False
    for chunk in chunks:
        conn.receive_data(chunk)  # must never raise
        events = drain(conn, react)
        if closed:  # consistent once over: nothing more in, nothing more out
            assert not events, f"events after ConnectionClosed: {events}"
        closed = closed or any(isinstance(e, ConnectionClosed) for e in events)
    return conn


def _react(conn: ServerConnection, ev: Any, rng: random.Random) -> None:
    roll = rng.random()
    if isinstance(ev, ContentReceived):
        if roll < 0.4:
            conn.send_deliver(ev.channel, "ctag", 1, False, ev.method.exchange,
                              ev.method.routing_key, ev.properties_raw, ev.body)
        elif roll < 0.6:
            conn.send_return(ev.channel, 312, "NO_ROUTE", ev.method.exchange,
                             ev.method.routing_key, ev.properties_raw, ev.body)
    elif isinstance(ev, MethodReceived) and ev.channel:
        if roll < 0.3:
            conn.send_method(ev.channel, BasicQosOk())
        elif roll < 0.45:
            conn.close_channel(ev.channel, 404, "NOT_FOUND - fuzz", 50, 10)
        elif roll < 0.5:
            conn.send_error(ev.channel, AMQPError(503, "COMMAND_INVALID - fuzz"))
        elif roll < 0.55:
            conn.send_get_ok(ev.channel, 7, True, "", "q", 3, b"\x00\x00", b"body")
    if rng.random() < 0.05:
        conn.send_heartbeat()
    if rng.random() < 0.01:
        conn.close(320, "CONNECTION_FORCED - fuzz")


def drain(conn: ServerConnection, react: random.Random | None = None) -> list[Any]:
    events = []
    while (ev := conn.next_event()) is not None:
        assert isinstance(ev, EVENTS), f"unexpected event {ev!r}"
        if react is not None:
            _react(conn, ev, react)
        if isinstance(ev, ConnectionClosing):  # ours (ConnectionClosed may echo the client's)
            assert ev.reply_code in VALID_CODES, f"bad close {ev}"
        if isinstance(ev, (ConnectionClosing, ConnectionClosed)):
            assert not ev.reply_text.startswith("INTERNAL_ERROR"), f"internal error: {ev}"
        events.append(ev)
    check_output(conn.data_to_send())
    return events


def check_output(data: bytes, partial: bool = False) -> list[int]:
    """Server output is whole frames; every close names a valid reply code.

    Returns the reply codes of the closes found. ``partial``: the read was cut
    short, so a truncated last frame is fine.
    """
    codes: list[int] = []
    if data.startswith(b"AMQP"):
        assert data[:8] == PROTOCOL_HEADER
        data = data[8:]
    pos = 0
    while pos < len(data):
        if partial and (len(data) - pos < 8 or pos + 8 + _HEAD.unpack_from(data, pos)[2]
                        > len(data)):
            break
        assert len(data) - pos >= 8, "truncated frame in output"
        ftype, _ch, size = _HEAD.unpack_from(data, pos)
        end = pos + 7 + size
        assert ftype in (1, 2, 3, 8), f"bad frame type {ftype} in output"
        assert end < len(data) and data[end] == 0xCE, "bad frame end in output"
        if ftype == 1 and data[pos + 7:pos + 11] in (b"\x00\x0a\x00\x32", b"\x00\x14\x00\x28"):
            m = decode_method(data, pos + 7, end)
            assert isinstance(m, (ConnectionClose, ChannelClose))
            assert m.reply_code in VALID_CODES, f"close with {m.reply_code} {m.reply_text}"
            codes.append(m.reply_code)
        pos = end + 1
    return codes


# ------------------------------------------------------------------ mutations
_INTERESTING = (0, 1, 0x7F, 0x80, 0xCE, 0xFF)
_INTERESTING_32 = (0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 131072, 131073, 4096)


def mutate(data: bytes, rng: random.Random, rounds: int = 0) -> bytes:
    """A havoc-style mutation: flips, interesting values, splices, cuts, repeats."""
    buf = bytearray(data)
    for _ in range(rounds or rng.randint(1, 4)):
        if not buf:
            buf += bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
            continue
        op = rng.randrange(8)
        i = rng.randrange(len(buf))
        if op == 0:
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf[i] = rng.choice(_INTERESTING)
        elif op == 2 and len(buf) - i >= 4:
            struct.pack_into(">I", buf, i, rng.choice(_INTERESTING_32))
        elif op == 3 and len(buf) - i >= 2:
            struct.pack_into(">H", buf, i, rng.choice((0, 1, 2, 2047, 2048, 0xFFFF)))
        elif op == 4:
            del buf[i:i + rng.randint(1, 32)]
        elif op == 5:
            buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
        elif op == 6:
            j = rng.randrange(len(buf))
            buf[i:i] = buf[j:j + rng.randint(1, 64)]
        else:
            del buf[i:]
    return bytes(buf)


def split(data: bytes, rng: random.Random, pieces: int = 4) -> list[bytes]:
    """Cut ``data`` at random places: the parser must not care where reads end."""
    cuts = sorted(rng.randrange(len(data) + 1) for _ in range(pieces - 1)) if data else []
    out, last = [], 0
    for c in [*cuts, len(data)]:
        out.append(data[last:c])
        last = c
    return out


def one_case(rng: random.Random) -> list[bytes]:
    """One input for the long-running fuzzer: which part gets mutated varies."""
    kind = rng.randrange(4)
    if kind == 0:  # the handshake itself
        data = mutate(HANDSHAKE + b"".join(SESSION[:3]), rng)
    elif kind == 1:  # one frame of a session after a valid handshake
        frames = list(SESSION)
        k = rng.randrange(len(frames))
        frames[k] = mutate(frames[k], rng)
        data = HANDSHAKE + b"".join(frames[: rng.randint(k + 1, len(frames))])
    elif kind == 2:  # random method payloads in well-formed frames
        data = HANDSHAKE + b"".join(random_frame(rng) for _ in range(rng.randint(1, 6)))
    else:  # anything after the handshake
        data = HANDSHAKE + bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
    return split(data, rng, rng.randint(1, 6))


_KNOWN_IDS = [(10, 50), (10, 51), (10, 70), (20, 10), (20, 20), (20, 40), (20, 41),
              (40, 10), (40, 20), (40, 30), (40, 40), (50, 10), (50, 20), (50, 30), (50, 40),
              (50, 50), (60, 10), (60, 20), (60, 30), (60, 40), (60, 70), (60, 80), (60, 90),
              (60, 100), (60, 110), (60, 120), (85, 10), (90, 10), (90, 20), (90, 30)]


def random_frame(rng: random.Random) -> bytes:
    """A frame with a valid envelope and a known method id but random arguments."""
    ftype = rng.choice((1, 1, 1, 2, 3, 8))
    ch = rng.choice((0, 1, 1, 2, 3))
    if ftype == 1:
        cid, mid = rng.choice(_KNOWN_IDS)
        payload = struct.pack(">HH", cid, mid) + bytes(
            rng.randrange(256) for _ in range(rng.randint(0, 40)))
    elif ftype == 2:
        payload = struct.pack(">HHQ", rng.choice((60, 60, 50)), 0,
                              rng.choice((0, 1, 5, 2**63))) + bytes(
            rng.randrange(256) for _ in range(rng.randint(0, 20)))
    else:
        payload = bytes(rng.randrange(256) for _ in range(rng.randint(0, 20)))
    return struct.pack(">BHI", ftype, ch, len(payload)) + payload + b"\xce"


def send_then_read(s: socket.socket, chunks: list[bytes], deadline: float) -> tuple[str, bytes]:
    """Send ``chunks`` (the peer may close before it has read them all), then read for
    ``deadline`` seconds: ('closed', bytes) on EOF or reset, ('open', bytes) when the
    peer stayed silent. The live fuzz tests' one case, whatever the protocol."""
    try:
        for c in chunks:
            s.sendall(c)
    except OSError:
        pass  # the broker may close before it has read everything
    data = b""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            got = s.recv(65536)
        except TimeoutError:
            return "open", data
        except OSError:
            return "closed", data
        if not got:
            return "closed", data
        data += got
    return "open", data


def run_batches(cases: list[Any], run: Any, check: Any, batch: int,
                budget: float) -> list[Any]:
    """The live fuzz tests' loop: ``run`` each case, a batch's connections at once (the
    cases the broker leaves open wait out their read deadline together, not in turns),
    and ``check(start)`` (the healthy clients) after each batch, until the cases or the
    time ``budget`` (seconds) run out; the results in case order."""
    from concurrent.futures import ThreadPoolExecutor

    out: list[Any] = []
    t0 = time.monotonic()
    with ThreadPoolExecutor(batch) as pool:
        for start in range(0, len(cases), batch):
            out.extend(pool.map(run, cases[start:start + batch]))
            check(start)
            if time.monotonic() - t0 > budget:
                break
    return out
