"""Audit job settings: database targets, durations, and preflight checks."""

from __future__ import annotations

import os
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

#: Name of the broker's SQLite database inside its data directory.
DB_FILENAME = "amqplite.db"

SQLITE_JAR_ENV = "AMQPLITE_SQLITE_JDBC_JAR"
POSTGRES_JAR_ENV = "AMQPLITE_POSTGRES_JDBC_JAR"
SQLITE_JAR_DEFAULT = "/usr/share/java/sqlite-jdbc.jar"
POSTGRES_JAR_DEFAULT = "/usr/share/java/postgresql.jar"
READER_ENV = "AMQPLITE_AUDIT_READER"

#: How the job reads the log: ``auto`` (SQLite on the driver, PostgreSQL over
#: JDBC), ``jdbc`` (Spark's JDBC source; SQLite needs the sqlite-jdbc jar) or
#: ``python`` (SQLite only: Python's sqlite3 on the driver, no jar).
READERS = ("auto", "jdbc", "python")

#: Directories the JVM searches for JNI libraries on Debian/Ubuntu.
_JNI_DIRS = (
    "/usr/java/packages/lib",
    "/usr/lib/x86_64-linux-gnu/jni",
    "/usr/lib/aarch64-linux-gnu/jni",
    "/usr/lib/jni",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib",
)

#: Default PostgreSQL settle lag: ids are assigned at insert but visible at commit.
POSTGRES_SETTLE_LAG_S = 30.0


class AuditSetupError(Exception):
    """Something the job needs is missing; the message says what to install."""


@dataclass(frozen=True)
class DbTarget:
    """Where the delivery log lives, as Spark's JDBC source needs it."""

    kind: str  # "sqlite" | "postgresql"
    jdbc_url: str
    driver: str
    jar: str
    properties: dict[str, str] = field(default_factory=dict)
    display: str = ""  # the URL without a password, for reports and logs
    sqlalchemy_url: str = ""

    @property
    def sqlite_path(self) -> Path | None:
        """The database file for SQLite targets."""
        if self.kind != "sqlite":
            return None
        return Path(self.jdbc_url.removeprefix("jdbc:sqlite:"))


def sqlite_target(path: str | os.PathLike[str], jar: str | None = None) -> DbTarget:
    """A read-only JDBC target for the SQLite file at ``path``."""
    p = Path(path).expanduser().resolve()
    return DbTarget(
        kind="sqlite",
        jdbc_url=f"jdbc:sqlite:{p}",
        driver="org.sqlite.JDBC",
        jar=jar or os.environ.get(SQLITE_JAR_ENV, SQLITE_JAR_DEFAULT),
        # SQLITE_OPEN_READONLY: the job never writes to the broker's database.
        properties={"open_mode": "1", "busy_timeout": "10000"},
        display=f"sqlite:///{p}",
        sqlalchemy_url=f"sqlite:///file:{p}?mode=ro&uri=true",
    )


def resolve_db(
    data_dir: str | os.PathLike[str] | None = None,
    db_url: str | None = None,
    jar: str | None = None,
) -> DbTarget:
    """Turn ``--data-dir`` or ``--db-url`` into a :class:`DbTarget`.

    Accepted URLs: ``sqlite:///path``, ``jdbc:sqlite:path``, a bare file path,
    ``postgresql://user:pw@host:port/db`` (also ``postgres://``,
    ``postgresql+driver://``) and ``jdbc:postgresql://...``.
    """
    if (data_dir is None) == (db_url is None):
        raise ValueError("give exactly one of data_dir and db_url")
    if data_dir is not None:
        return sqlite_target(Path(data_dir) / DB_FILENAME, jar)
    assert db_url is not None
    url = db_url.strip()
    if url.startswith("jdbc:sqlite:"):
        return sqlite_target(url.removeprefix("jdbc:sqlite:"), jar)
    if url.startswith("sqlite:"):
        path = re.sub(r"^sqlite(\+\w+)?:///", "", url).split("?", 1)[0]
        if not path or path == ":memory:":
            raise ValueError(f"not a SQLite file URL: {db_url}")
        return sqlite_target(path if Path(path).is_absolute() else Path.cwd() / path, jar)
    if url.startswith("jdbc:postgresql:"):
        return DbTarget(
            kind="postgresql",
            jdbc_url=url,
            driver="org.postgresql.Driver",
            jar=jar or os.environ.get(POSTGRES_JAR_ENV, POSTGRES_JAR_DEFAULT),
            display=url.split("?", 1)[0],
        )
    if re.match(r"^postgres(ql)?(\+\w+)?://", url):
        parts = urlsplit(url)
        host = parts.hostname or "localhost"
        if ":" in host:
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port else ""
        query = [(k, v) for k, v in parse_qsl(parts.query) if k in {"sslmode", "options"}]
        qs = "&".join(f"{k}={v}" for k, v in query)
        jdbc = f"jdbc:postgresql://{host}{port}{parts.path}" + (f"?{qs}" if qs else "")
        props: dict[str, str] = {}
        if parts.username:
            props["user"] = unquote(parts.username)
        if parts.password:
            props["password"] = unquote(parts.password)
        netloc = (f"{unquote(parts.username)}@" if parts.username else "") + f"{host}{port}"
        return DbTarget(
            kind="postgresql",
            jdbc_url=jdbc,
            driver="org.postgresql.Driver",
            jar=jar or os.environ.get(POSTGRES_JAR_ENV, POSTGRES_JAR_DEFAULT),
            properties=props,
            display=f"postgresql://{netloc}{parts.path}",
            sqlalchemy_url=re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql://", url),
        )
    if "://" not in url:
        return sqlite_target(url, jar)
    raise ValueError(f"unsupported database URL (want sqlite or postgresql): {db_url}")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str) -> float:
    """``"90"``, ``"90s"``, ``"30m"``, ``"1h"``, ``"2d"`` → seconds."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"not a duration: {text!r} (use e.g. 45s, 30m, 1h, 2d)")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


@dataclass
class AuditConfig:
    """Everything one run of the job needs."""

    db: DbTarget
    out: Path
    #: Parquet dataset location; default ``OUT/log``. May be an hdfs:// or s3a://
    #: URI on a cluster (state and reports stay under ``out`` on the driver).
    dataset: str | None = None
    #: Spark master; ``None`` keeps whatever spark-submit (or pyspark's default) says.
    master: str | None = None
    stuck_after_s: float = 3600.0
    #: Rows younger than this are left for the next run (PostgreSQL commit order).
    settle_lag_s: float | None = None
    top_n: int = 20
    #: Cap on listed messages (stuck, redelivered) in JSON/HTML; ``stuck.csv`` is complete.
    list_limit: int = 1000
    jdbc_partitions: int = 1
    spark_conf: dict[str, str] = field(default_factory=dict)
    #: One of :data:`READERS`.
    reader: str = "auto"
    #: Rows per page of the ``python`` reader: its memory bound on the driver.
    page_rows: int = 100_000

    def __post_init__(self) -> None:
        self.out = Path(self.out).expanduser().resolve()
        if self.settle_lag_s is None:
            self.settle_lag_s = POSTGRES_SETTLE_LAG_S if self.db.kind == "postgresql" else 0.0
        if self.reader not in READERS:
            raise ValueError(f"unknown reader {self.reader!r} (want one of {', '.join(READERS)})")
        if self.reader == "python" and self.db.kind != "sqlite":
            raise ValueError("the python reader reads SQLite only; use --reader jdbc for PostgreSQL")
        if self.page_rows < 1:
            raise ValueError(f"page_rows must be positive, not {self.page_rows}")

    @property
    def uses_jdbc(self) -> bool:
        """Whether Spark reads the log over JDBC (and so needs the driver jar)."""
        return self.reader == "jdbc" or self.db.kind != "sqlite"

    @property
    def dataset_path(self) -> str:
        """Where the exported Parquet rows live."""
        return self.dataset or str(self.out / "log")


def under_spark_submit() -> bool:
    """True when this Python process was started by ``spark-submit`` (JVM already up)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def find_java() -> str | None:
    """Path of the ``java`` executable the pyspark launcher will use."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.exists():
            return str(candidate)
    return shutil.which("java")


def _jar_has_native_libs(jar: str) -> bool:
    try:
        with zipfile.ZipFile(jar) as z:
            return any(n.startswith("org/sqlite/native/") and n.endswith(".so") for n in z.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def preflight(db: DbTarget, *, check_jvm: bool = True, jdbc: bool = True) -> None:
    """Fail early, with one line naming the package, if the job cannot run.

    ``jdbc=False`` (SQLite read on the driver) skips the jar checks: then
    ``pip install 'amqplite[audit]'`` and Java are all the job needs.
    """
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise AuditSetupError(
            f"{exc.name} is not installed: pip install 'amqplite[audit]' (pyspark>=4.0, pandas<3, pyarrow)"
        ) from None
    if not check_jvm:
        return
    if find_java() is None:
        raise AuditSetupError(
            "Java is not installed (the audit job runs Spark on a JVM): "
            "apt-get install openjdk-17-jre-headless (or set JAVA_HOME)"
        )
    if db.kind == "sqlite":
        if jdbc and not Path(db.jar).is_file():
            raise AuditSetupError(
                f"SQLite JDBC driver not found at {db.jar}: apt-get install "
                f"libxerial-sqlite-jdbc-java (or set {SQLITE_JAR_ENV} to a sqlite-jdbc jar; "
                "or leave out --reader jdbc)"
            )
        if jdbc and not _jar_has_native_libs(db.jar) and not any(
            (Path(d) / "libsqlitejdbc.so").exists() for d in _JNI_DIRS
        ):
            raise AuditSetupError(
                f"{db.jar} has no native library and libsqlitejdbc.so is missing: "
                "apt-get install libxerial-sqlite-jdbc-jni"
            )
        path = db.sqlite_path
        if path is not None and not path.is_file():
            raise AuditSetupError(f"broker database not found: {path}")
    elif not Path(db.jar).is_file():
        raise AuditSetupError(
            f"PostgreSQL JDBC driver not found at {db.jar}: apt-get install "
            f"libpostgresql-jdbc-java (or set {POSTGRES_JAR_ENV} to a postgresql jar)"
        )
