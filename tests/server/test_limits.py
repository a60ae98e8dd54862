"""Guardrails: the node-wide connection limit and the disk-free alarm."""

from __future__ import annotations

from pathlib import Path

import pika
import pytest
from pika.exceptions import ProbableAccessDeniedError

from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect


def test_max_connections_refuses_the_one_too_many(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", None, "--max-connections", "3").start()
    try:
        conns = [connect(b) for _ in range(3)]
        # pika reports a close during connection.open as "probable access denied"
        with pytest.raises(ProbableAccessDeniedError) as info:
            connect(b)
        assert "(530) 'NOT_ALLOWED - connection refused: node connection limit (3) is reached'" \
            in str(info.value)
        # the connections already open are unaffected
        for c in conns:
            ch = c.channel()
            ch.queue_declare("", exclusive=True)
        conns.pop().close()
        extra = wait_for(lambda: _try_connect(b), 10, what="a freed slot")
        extra.channel().basic_publish("", "nowhere", b"x")
        extra.close()
        for c in conns:
            c.close()
        assert "Traceback" not in b.log()
    finally:
        b.stop()


def _try_connect(b: BrokerProcess) -> pika.BlockingConnection | None:
    try:
        return connect(b)
    except ProbableAccessDeniedError:
        return None
