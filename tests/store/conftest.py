"""Fixtures: a real SQLite file per test, and a fresh DBAPI connection to inspect it."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from amqplite.store import Store


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "amqplite.db"


@pytest.fixture
def make_store(db_path: Path) -> Iterator[Callable[..., Store]]:
    """Create (not start) stores on the test's file; all are closed at teardown."""
    stores: list[Store] = []

    def make(durability: str = "os") -> Store:
        store = Store(f"sqlite:///{db_path}", durability=durability)
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
def raw(db_path: Path) -> Callable[[str], list[tuple]]:
    """Run a query on a brand-new sqlite3 connection: sees only committed data."""

    def query(sql: str, *params: object) -> list[tuple]:
        conn = sqlite3.connect(db_path)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    return query
