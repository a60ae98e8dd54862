"""Test-wide settings (hypothesis must not fail on timing on a shared, loaded machine)
and the PostgreSQL fixtures (tests/pg_server.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.pg_server import PgServer, start_server

settings.register_profile(
    "amqplite",
    deadline=None,  # CI shares 2 cores with brokers and Spark; time is not a property
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("amqplite")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A PostgreSQL server for the session (skipped without one, except in CI)."""
    server, cluster = start_server()
    try:
        yield server
    finally:
        if cluster is not None:
            cluster.stop()


@pytest.fixture
def pg_db(pg_server: PgServer) -> Iterator[str]:
    """A fresh, empty database on ``pg_server``: its name (dropped afterwards)."""
    name = pg_server.create_db()
    yield name
    pg_server.drop_db(name)


@pytest.fixture
def pg_url(pg_server: PgServer, pg_db: str) -> str:
    """The URL of a fresh, empty PostgreSQL database."""
    return pg_server.url(pg_db)
