"""The Kafka session tests' shared fixture: a topic node over a real SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sessions.kafka.topic_node import Node


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with Node(tmp_path / "k.db") as n:
        yield n
