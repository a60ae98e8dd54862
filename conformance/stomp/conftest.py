"""Fixtures for the STOMP part of the conformance suite.

The broker is ``STOMP_HOST`` / ``STOMP_PORT`` (no default: without ``STOMP_PORT``
the part is skipped, saying so), logged into as ``STOMP_LOGIN`` /
``STOMP_PASSCODE`` (guest/guest) on vhost ``/``. The tests encode what RabbitMQ
3.10.8's rabbitmq_stomp does (docs/dev/stomp-reference.md) where a client can see
it; run them against a throwaway RabbitMQ
(``RABBITMQ_STOMP_PORT=N scripts/rabbitmq.sh start DIR PORT``), then against
amqplite (``--stomp-port N``). Every test uses destinations of its own.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from conformance.stomp._raw import RawStomp


def port() -> int | None:
    value = os.environ.get("STOMP_PORT")
    return int(value) if value else None


#: every test module of this part carries it
needs_stomp = pytest.mark.skipif(port() is None, reason="conformance/stomp needs STOMP_PORT "
                                 "(a broker serving STOMP)")


def host() -> str:
    return os.environ.get("STOMP_HOST", "127.0.0.1")


def login_headers(version: str = "1.2") -> dict[str, str]:
    return {"accept-version": version, "host": "/",
            "login": os.environ.get("STOMP_LOGIN", "guest"),
            "passcode": os.environ.get("STOMP_PASSCODE", "guest")}


@pytest.fixture
def name() -> str:
    """A destination name unique to the test."""
    return f"conf-stomp-{uuid.uuid4().hex[:10]}"


Factory = Callable[..., RawStomp]


@pytest.fixture
def stomp() -> Iterator[Factory]:
    """``stomp(version="1.2", connect=True)``: a raw connection, logged in (the
    CONNECTED frame read) unless ``connect`` is False."""
    made: list[RawStomp] = []

    def factory(version: str = "1.2", connect: bool = True) -> RawStomp:
        p = port()
        assert p is not None
        c = RawStomp(host(), p)
        made.append(c)
        if connect:
            c.send("CONNECT", login_headers(version))
            c.expect("CONNECTED")
        return c

    yield factory
    for c in made:
        c.close()
