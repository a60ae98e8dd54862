"""Closing races against the real broker: many clients closing twice at once, and a
channel.open read together with a frame that fails the connection.

conformance/test_close_races.py pins the wire against RabbitMQ; these add what
only our broker shows: its log, and many connections at once.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from conformance._raw import RawConnection, shortstr
from tests.brokerproc import BrokerProcess
from tests.server.test_close import _read_to_eof

CLIENTS = 32
#: the broker's LINGER_TIMEOUT (2 s) plus room for a busy machine
EOF_WITHIN = 10.0


def test_clients_closing_twice_at_once_all_get_two_close_oks(broker: BrokerProcess) -> None:
    """As Go's amqp091-go does when two goroutines call Close(): two writers on one
    socket, each sending connection.close, each waiting for a close-ok."""
    raws = [RawConnection(broker.url).open() for _ in range(CLIENTS)]
    start = threading.Barrier(2 * CLIENTS, timeout=30)

    def close(raw: RawConnection) -> None:
        start.wait()
        raw.send_raw(raw.close_frame())

    try:
        with ThreadPoolExecutor(2 * CLIENTS) as pool:
            for sent in [pool.submit(close, raw) for raw in raws for _ in range(2)]:
                sent.result(timeout=30)
        for raw in raws:
            assert [raw.read_method().ids for _ in range(2)] == [(10, 51), (10, 51)]
        started = time.monotonic()
        for raw in raws:  # then the broker closes: it does not wait for us forever
            assert _read_to_eof(raw.sock, EOF_WITHIN) == b""
        assert time.monotonic() - started < EOF_WITHIN
    finally:
        for raw in raws:
            raw.sock.close()


def test_channel_open_read_with_a_failing_publish_is_discarded_quietly(
    broker: BrokerProcess,
) -> None:
    """The publish fails the connection (540) while the channel.open read with it
    waits: the open is discarded (no open-ok after the close), close-ok ends the
    connection at once, and the broker logs no traceback for it."""
    logged = len(broker.log_path.read_bytes())
    raw = RawConnection(broker.url).open()
    try:
        queue = raw.queue_declare("", exclusive=True)
        raw.send_raw(raw.publish_frames("", queue, b"x", immediate=True)
                     + raw.method_frame(2, 20, 10, shortstr("")))
        close = raw.read_method()
        assert (close.channel, close.ids) == (0, (10, 50))
        assert close.close_reason() == (540, "NOT_IMPLEMENTED - immediate=true")
        raw.send_raw(raw.method_frame(3, 20, 10, shortstr("")) + raw.method_frame(0, 10, 51, b""))
        assert _read_to_eof(raw.sock, EOF_WITHIN) == b""  # no channel.open-ok, then FIN
    finally:
        raw.sock.close()
    # the broker logs (synchronously) before it ends a connection; a later one works
    RawConnection(broker.url).open().close()
    tail = broker.log_path.read_bytes()[logged:].decode(errors="replace")
    assert "Traceback" not in tail and "internal error" not in tail, tail
