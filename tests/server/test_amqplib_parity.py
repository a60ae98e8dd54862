"""Node.js amqplib against the real broker: the RabbitMQ-parity cases, driven by
tests/node/parity.js (one connection per case, one JSON line of what it saw).

Skipped where node or amqplib is absent. amqplib is looked up in
tests/node/node_modules (scripts/test.sh installs it there) and then in the
directories of NODE_PATH, which node itself honours for ``require``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.brokerproc import BrokerProcess
from tests.server.conftest import connect

NODE_DIR = Path(__file__).resolve().parent.parent / "node"
REPLY_TO = "amq.rabbitmq.reply-to"


def _amqplib_available() -> bool:
    dirs = [NODE_DIR / "node_modules"]
    dirs += [Path(p) for p in os.environ.get("NODE_PATH", "").split(os.pathsep) if p]
    return any((d / "amqplib").is_dir() for d in dirs)


@pytest.fixture(scope="module")
def parity(broker: BrokerProcess) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None or not _amqplib_available():
        pytest.skip("node or amqplib not installed (scripts/test.sh installs them)")
    out = subprocess.run([node, str(NODE_DIR / "parity.js"), broker.url],
                         capture_output=True, text=True, timeout=60, cwd=NODE_DIR)
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def case(parity: dict[str, Any], name: str) -> dict[str, Any]:
    r = parity[name]
    assert "error" not in r or name == "checkDefaultExchange", r
    return r


def test_update_secret_resolves_on_update_secret_ok(parity: dict[str, Any]) -> None:
    r = case(parity, "updateSecret")
    # amqplib resolves only when connection.update-secret-ok arrives (the event)
    assert r["resolved"] is True and r["event"] is True
    assert r["body"] == "after-rotation"


def test_direct_reply_to_rpc(parity: dict[str, Any]) -> None:
    r = case(parity, "directReplyTo")
    assert r["replies"] == {"0": "REQ0", "1": "REQ1", "2": "REQ2"}
    seen = r["seenReplyTo"]
    assert len(seen) == 3 and len(set(seen)) == 1, seen
    # the server only ever sees the rewritten, private name
    assert seen[0].startswith(REPLY_TO + ".") and len(seen[0]) > len(REPLY_TO) + 1


def test_check_default_exchange_is_refused_403(parity: dict[str, Any]) -> None:
    r = case(parity, "checkDefaultExchange")
    msg = "ACCESS_REFUSED - operation not permitted on the default exchange"
    # the promise rejects with the channel.close code and RabbitMQ's text
    assert r["outcome"]["code"] == 403 and msg in r["outcome"]["error"], r
    assert "resolved" not in r["outcome"]
    assert [e["code"] for e in r["channelErrors"]] == [403]
    assert r["channelClosed"] is True
    assert r["connectionUsable"] is True


def test_unbind_queue_after_exchange_deleted_resolves(parity: dict[str, Any]) -> None:
    r = case(parity, "unbindAfterExchangeGone")
    assert r == {"resolved": True, "ok": True, "queueAfter": True, "errors": []}


def test_close_right_after_mandatory_burst(parity: dict[str, Any],
                                          broker: BrokerProcess) -> None:
    r = case(parity, "burstThenClose")
    # the broker does return unroutable mandatory messages (checked under confirms)
    assert r["confirmedReturns"] == 5
    # close() resolves on close-ok: no EPIPE / ECONNRESET from the broker
    assert r["closeResolved"] is True and r["closeError"] is None, r
    assert r["connErrors"] == [] and r["chErrors"] == [], r
    assert r["closeEvent"] is True
    # amqplib drops frames after it sent connection.close, so how many of the
    # burst's returns it surfaced is not fixed; it can never be more than 2000
    assert 0 <= r["burstReturns"] <= 2000
    # and the broker is still serving
    c = connect(broker)
    try:
        assert c.channel().queue_declare("", exclusive=True).method.queue
    finally:
        c.close()


def test_prefetch_and_consumer_priority(parity: dict[str, Any]) -> None:
    r = case(parity, "prefetchPriority")
    # priority 10 takes messages while its prefetch window (5) has room, then the
    # priority-0 consumer gets the rest; plain round-robin would give 4/4
    assert r["phase1"] == {"high": ["0", "1", "2", "3", "4"], "low": ["5", "6", "7"]}
    # both windows full (5 + 5): the last two stay ready
    assert r["phase2"] == {"high": 5, "low": 5, "ready": 2}
    # one ack on the high consumer: the next ready message goes to it
    assert r["phase3"] == {"highLast": "10", "low": 5}
