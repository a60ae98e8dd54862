"""kill -9 under load: a publisher sends persistent receipted SENDs flat out while a
``client-individual`` subscriber is mid-stream (acking with receipts, leaving some
unacked); the broker gets SIGKILL and restarts on the same data directory."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import stomp

from tests.brokerproc import BrokerProcess, free_port, wait_for
from tests.server.stompclient import DEADLINE, Recorder, connect

#: the publisher stops here if the kill has not come first (a bound on the test)
MAX_SENDS = 20_000
#: receipts the publisher waits for before sending more
IN_FLIGHT = 50
QUEUE = "/queue/k9"


class Subscriber(Recorder):
    """Acks (with a receipt) every message but each fourth, from the receiver thread."""

    def __init__(self) -> None:
        super().__init__()
        self.conn: Any = None
        self.delivered: list[int] = []

    def on_message(self, frame: Any) -> None:
        i = int(frame.body)
        with self.cond:
            self.delivered.append(i)
        if i % 4:
            with contextlib.suppress(stomp.exception.StompException, OSError):
                self.conn.ack(frame.headers["ack"], receipt=f"a{i}")
        super().on_message(frame)


def _publish(c: stomp.Connection12, rec: Recorder, stop: threading.Event) -> None:
    """Send until the broker dies (or the bound); at most IN_FLIGHT unanswered."""
    try:
        for i in range(MAX_SENDS):
            def room(sent: int = i) -> bool:
                return len(rec.receipts) >= sent - IN_FLIGHT or stop.is_set() or rec.disconnected

            with rec.cond:
                rec.cond.wait_for(room, DEADLINE)
            if stop.is_set() or rec.disconnected:
                return
            c.send(QUEUE, str(i), headers={"persistent": "true"}, receipt=f"r{i}")
    except (stomp.exception.StompException, OSError):
        return  # the broker is gone


def test_kill_9_under_load_loses_nothing_receipted(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path, None, "--stomp-port", str(free_port())).start()
    stop = threading.Event()
    try:
        sub_conn, srec = connect(b)
        sub = Subscriber()
        sub.conn = sub_conn
        sub_conn.set_listener("sub", sub)
        sub_conn.subscribe(QUEUE, id="k9", ack="client-individual", receipt="ready")
        srec.wait_receipt("ready")
        pub_conn, prec = connect(b)
        pub = threading.Thread(target=_publish, args=(pub_conn, prec, stop), daemon=True)
        pub.start()
        # mid-stream: hundreds receipted, hundreds delivered (some acked, some not)
        wait_for(lambda: len(prec.receipts) >= 600 and len(sub.delivered) >= 400,
                 120, what="the stream to be under way")
        b.kill()
        stop.set()
        pub.join(DEADLINE)
        assert not pub.is_alive()
        with prec.cond, sub.cond:
            receipted = {int(r[1:]) for r in prec.receipts if r.startswith("r")}
            acked = {int(r[1:]) for r in sub.receipts if r.startswith("a")}
            delivered = set(sub.delivered)
        for c in (sub_conn, pub_conn):
            with contextlib.suppress(Exception):
                c.disconnect()

        b.start()
        d, rec = connect(b)
        d.subscribe(QUEUE, id="after", ack="client-individual")
        d.send(QUEUE, "-1", headers={"persistent": "true"}, receipt="end")
        # FIFO: everything stored before the restart comes before the marker
        rec.wait(lambda: any(m.body == "-1" for m in rec.messages), "the end marker")
        after = [m for m in rec.messages if m.body != "-1"]
        d.disconnect()
    finally:
        stop.set()
        b.stop()
    got = [int(m.body) for m in after]
    assert len(got) == len(set(got)), "a message came back twice"
    # an ACK sent without its RECEIPT back may or may not have been stored: its
    # message is back or gone; every other receipted message must be back
    ack_sent = {i for i in delivered if i % 4}
    lost = receipted - ack_sent - set(got)
    assert not lost, f"{len(lost)} receipted messages lost, e.g. {sorted(lost)[:5]}"
    assert not acked & set(got), "a message whose ACK had its RECEIPT came back"
    # (a message can reach the subscriber before its commit: unreceipted, it may go)
    unacked = (delivered - ack_sent) & receipted
    assert unacked <= set(got), "a delivered, unacked, receipted message is missing"
    flags = {int(m.body): m.headers["redelivered"] for m in after}
    assert all(flags[i] == "true" for i in unacked), "an unacked message came back " \
                                                    "without redelivered:true"
    assert len(receipted) >= 600 and len(unacked) >= 100
    print(f"receipted {len(receipted)}, delivered {len(delivered)}, acked {len(acked)}, "
          f"unacked {len(unacked)}, back after restart {len(got)}")
