"""Node.js amqplib against the real broker (skipped where node or amqplib is absent)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.brokerproc import BrokerProcess

NODE_DIR = Path(__file__).resolve().parent.parent / "node"


def test_amqplib_confirms_prefetch_topic_and_requeue(broker: BrokerProcess) -> None:
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "amqplib").is_dir():
        pytest.skip("node or amqplib not installed (scripts/test.sh installs them)")
    out = subprocess.run([node, str(NODE_DIR / "amqplib_smoke.js"), broker.url],
                         capture_output=True, text=True, timeout=60, cwd=NODE_DIR)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["count"] == 20 and result["sorted"] == list(range(20))
    assert result["redelivered"] is True


def test_amqplib_cancelled_consumer(broker: BrokerProcess) -> None:
    """amqplib's own "cancelled consumer" test: delete-ok must come before the
    consumer's basic.cancel, or the channel closes with deleteQueue unanswered."""
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "amqplib").is_dir():
        pytest.skip("node or amqplib not installed (scripts/test.sh installs them)")
    out = subprocess.run([node, str(NODE_DIR / "amqplib_cancelled.js"), broker.url,
                          "amqplib-cancelled-consumer"],
                         capture_output=True, text=True, timeout=60, cwd=NODE_DIR)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"messageCount": 0}
