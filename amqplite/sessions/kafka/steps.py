"""The steps a Kafka session's ``handle`` returns (see ``session``): what an answer
waits for before the shell can send it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from amqplite.protocol.kafka.messages import Request


class Close(Exception):
    """The connection must close (a client that is not logged in, a failed login)."""


@attrs.frozen
class AfterCommit:
    """The response once everything so far is committed; ``build`` may still need reads."""

    build: Callable[[], bytes | Reads]


@attrs.frozen
class AfterConfirm:
    """An ``acks=all`` Produce: the response once Confirms cover ``seq``."""

    seq: int
    build: Callable[[], bytes]


@attrs.frozen
class Reads:
    """Store reads: ``fetch_stream(queue_id, lo, limit)`` each, then ``resume(chunks)``."""

    reads: list[tuple[int, int, int]]
    resume: Callable[[list[Any]], bytes | Reads]


@attrs.define
class FetchWait:
    """A Fetch: answered when a partition has records (or an error), else at ``deadline``."""

    request: Request
    deadline: float


@attrs.frozen
class GroupWait:
    """A JoinGroup or SyncGroup: the coordinator answers ``handle`` (``build`` encodes)."""

    handle: Any
    build: Callable[[Any], bytes]


Step = bytes | None | AfterCommit | AfterConfirm | Reads | FetchWait | GroupWait
