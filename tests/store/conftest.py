"""Fixtures: a real database per test (a SQLite file, or a fresh PostgreSQL database for
tests marked ``tests.pg_server.both_backends``), and a fresh DBAPI connection to inspect it."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from amqplite.store import Store


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "amqplite.db"


@pytest.fixture
def db_url(backend: str, db_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "postgresql":
        return str(request.getfixturevalue("pg_url"))
    return f"sqlite:///{db_path}"


@pytest.fixture
def make_store(db_url: str) -> Iterator[Callable[..., Store]]:
    """Create (not start) stores on the test's database; all are closed at teardown."""
    stores: list[Store] = []

    def make(durability: str = "os") -> Store:
        store = Store(db_url, durability=durability)
        store.create()
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close(timeout=10)


@pytest.fixture
def store(make_store: Callable[..., Store]) -> Store:
    s = make_store()
    s.start()
    return s


@pytest.fixture
def raw(backend: str, db_path: Path, db_url: str) -> Callable[..., list[tuple]]:
    """Run a query (``?`` placeholders) on a brand-new connection: sees only committed data."""

    def query(sql: str, *params: object) -> list[tuple]:
        if backend == "postgresql":
            import psycopg

            with psycopg.connect(db_url) as pg:
                return pg.execute(sql.replace("?", "%s"), params).fetchall()  # type: ignore[arg-type]
        conn = sqlite3.connect(db_path)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    return query
