"""Database URLs and engines: which driver a URL needs, and what to say when it is missing.

Why a module of its own: the broker opens the database from two processes
(the broker and its writer) and for two purposes (the store and the
one-broker lock), and every one of them must read a URL the same way and
fail the same way. Only :func:`make_engine` imports SQLAlchemy: the broker
process names and masks URLs without it (``store.api``). PostgreSQL's driver
is an optional extra, so its absence is an operator's mistake to be named in
one line, never a traceback.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Engine

#: the extra that brings each optional driver (``pip install 'amqplite[EXTRA]'``)
DRIVER_EXTRAS = {"psycopg": "postgresql"}

_PG_PLAIN = re.compile(r"^postgres(?:ql)?://")


class MissingDriver(Exception):
    """The URL names a database whose Python driver is not installed; the message says
    which package brings it."""


def sqlalchemy_url(url: str) -> str:
    """The URL SQLAlchemy is given: a plain ``postgresql://`` (or ``postgres://``) means
    psycopg 3, the driver of our ``postgresql`` extra, whatever SQLAlchemy's own
    default (psycopg2 before 2.1). An explicit ``+driver`` is kept."""
    return _PG_PLAIN.sub("postgresql+psycopg://", url, count=1)


def masked(url: str) -> str:
    """The URL with its password hidden, for logs and error messages."""
    if "@" not in url:
        return url  # no user part, so no password (every SQLite URL)
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy can parse: show no part of it that may be secret
        return url.split("@", 1)[-1] if "@" in url else url


def make_engine(url: str, **kwargs: Any) -> Engine:
    """``create_engine`` on :func:`sqlalchemy_url`; a driver that is not installed
    raises :class:`MissingDriver` naming the package to install."""
    from sqlalchemy import create_engine

    real = sqlalchemy_url(url)
    try:
        return create_engine(real, **kwargs)
    except ModuleNotFoundError as exc:
        module = (exc.name or "").split(".")[0]
        extra = DRIVER_EXTRAS.get(module)
        if extra is not None:
            hint = f"pip install 'amqplite[{extra}]'"
        else:
            hint = f"install the Python package that provides {module!r}"
        raise MissingDriver(
            f"the database driver {module!r} for {masked(url)} is not installed: "
            f"{hint}") from None


def is_postgresql(url: str) -> bool:
    """Is this a PostgreSQL URL (any driver)? The backend is the scheme up to its
    ``+driver``, as SQLAlchemy reads it."""
    return _backend(sqlalchemy_url(url)) == "postgresql"


def _backend(url: str) -> str:
    scheme, sep, _rest = url.partition(":")
    return scheme.split("+", 1)[0].lower() if sep else ""
