"""A throwaway PostgreSQL cluster for the tests: initdb + pg_ctl in a temp dir.

It listens on a unix socket in its own directory only (no TCP port to collide
with anyone's), trusts local connections, and runs as the ``postgres`` user
when the tests run as root (PostgreSQL refuses root). ``PG_URL`` (a URL whose
role may create databases) replaces it with a server someone else runs.

Without PostgreSQL the tests that need it are skipped, except in CI (``CI``
set to true, or ``AMQPLITE_PG_REQUIRED=1`` as scripts/test.sh sets), where
they fail: CI installs PostgreSQL, so absence is a bug.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

#: the database superuser of the throwaway cluster
SUPERUSER = "postgres"

#: run a test on SQLite and on PostgreSQL: its ``backend`` fixture (see
#: tests/store/conftest.py) is then "sqlite" or "postgresql"
both_backends = pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)


def missing(reason: str) -> None:
    """Skip, or fail in CI, where PostgreSQL must be there."""
    if (os.environ.get("CI", "").lower() in ("true", "1", "yes")
            or os.environ.get("AMQPLITE_PG_REQUIRED") == "1"):
        pytest.fail(f"{reason} (CI must provide PostgreSQL: scripts/test.sh installs it)")
    pytest.skip(reason)


def find_bindir() -> Path | None:
    """The newest PostgreSQL server binaries: ``PG_BIN``, Debian's layout, or PATH."""
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name)
                   if Path(p).parent.parent.name.isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PgCluster:
    """One PostgreSQL server: the URL of a fresh database per call of :meth:`create_db`."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="amqplite-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.root, "postgres")

    def _run(self, *cmd: str) -> None:
        out = subprocess.run([*self._as, *cmd], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n"
                               f"{out.stdout}\n{out.stderr}\n{self.server_log()}")

    def start(self) -> PgCluster:
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", SUPERUSER,
                  "--auth=trust", "-E", "UTF8", "--no-sync")
        opts = f"-k {self.root} -c listen_addresses='' -c max_connections=100"
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                  "-o", opts, "-w", "-t", "60", "start")
        return self

    def url(self, db: str = "postgres", *, password: str | None = None) -> str:
        auth = SUPERUSER + (f":{password}" if password else "")
        return f"postgresql://{auth}@/{db}?host={self.root}"

    def server_log(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                      "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


class PgServer:
    """Databases on a cluster of ours or on ``PG_URL``'s server."""

    def __init__(self, admin_url: str, cluster: PgCluster | None = None) -> None:
        from sqlalchemy.engine import make_url

        self.admin_url = admin_url
        self.cluster = cluster
        self._base = make_url(admin_url)

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self._base.set(drivername="postgresql").render_as_string(
                hide_password=False), autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]  # names are ours: t_<hex>

    def create_db(self) -> str:
        """A new empty database's name."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self._admin(f'CREATE DATABASE "{name}"')
        return name

    def drop_db(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def url(self, db: str, *, password: str | None = None) -> str:
        u = self._base.set(database=db)
        if password is not None:
            u = u.set(password=password)
        return u.render_as_string(hide_password=False)


def start_server() -> tuple[PgServer, PgCluster | None]:
    """``PG_URL``'s server, else a throwaway cluster; skips (fails in CI) without one."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        missing("psycopg is not installed (pip install -e '.[dev]' brings it)")
    if os.environ.get("PG_URL"):
        return PgServer(os.environ["PG_URL"]), None
    bindir = find_bindir()
    if bindir is None or not (bindir / "initdb").exists():
        missing("PostgreSQL is not installed (apt-get install postgresql, or set PG_URL)")
    assert bindir is not None
    cluster = PgCluster(bindir).start()
    return PgServer(cluster.url()), cluster
