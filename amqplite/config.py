"""Settings: defaults < TOML file < environment (AMQPLITE_*) < command-line flags.

One attrs class so every entry point (CLI, tests, embedding) sees the same
names, types and validation.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

DURABILITY = ("fsync", "os")
STORE_WRITERS = ("process", "thread")
LOG_LEVELS = ("off", "lifecycle", "full")
#: SASL mechanisms a client may be offered (EXTERNAL: TLS client certificates)
AUTH_MECHANISMS = ("PLAIN", "AMQPLAIN", "EXTERNAL")


class ConfigError(ValueError):
    """A setting has a wrong name, type or value; the message names it."""


def _choice(options: tuple[str, ...]) -> Any:
    def check(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        if value not in options:
            raise ConfigError(f"{attr.name} must be one of {', '.join(options)}; got {value!r}")

    return check


def _positive(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if value < 0:
        raise ConfigError(f"{attr.name} must not be negative; got {value!r}")


def _at_least_one(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if value < 1:
        raise ConfigError(f"{attr.name} must be at least 1; got {value!r}")


def _u16(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if not 0 <= value <= 65_535:
        raise ConfigError(f"{attr.name} must be from 0 to 65535; got {value!r}")


_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": 1024**2, "mib": 1024**2,
          "g": 1024**3, "gib": 1024**3, "t": 1024**4, "tib": 1024**4,
          "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4}


def parse_size(value: str | int) -> int:
    """Bytes from ``50MB``/``1GiB``/``2000000``, with RabbitMQ's units.

    As in rabbitmq.conf, ``kB``/``MB``/``GB`` are powers of 1000 and
    ``k``/``M``/``G`` (or ``KiB``/``MiB``/``GiB``) powers of 1024.
    """
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a size must not be negative")
        return value
    text = str(value).strip()
    num = text.rstrip("kKmMgGtTiIbB ")
    unit = text[len(num):].strip().lower()
    if unit not in _UNITS or not num:
        raise ValueError(f"not a size: {value!r} (try 50MB, 1GB, 512MiB or bytes)")
    try:
        n = float(num)
    except ValueError:
        raise ValueError(f"not a size: {value!r} (try 50MB, 1GB, 512MiB or bytes)") from None
    if n < 0:
        raise ValueError("a size must not be negative")
    return int(n * _UNITS[unit])


def _mechanisms(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    unknown = [m for m in value if m not in AUTH_MECHANISMS]
    if unknown or not value:
        raise ConfigError(f"{attr.name} must be a non-empty list of "
                          f"{', '.join(AUTH_MECHANISMS)}; got {value!r}")


def _size(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    try:
        parse_size(value)
    except ValueError as exc:
        raise ConfigError(f"{attr.name}: {exc}") from None


@attrs.frozen
class Watermark:
    """RabbitMQ's ``vm_memory_high_watermark``: a fraction of RAM or a size in bytes."""

    relative: float | None = None
    absolute: int | None = None

    def limit(self, total: int) -> int:
        """Bytes the broker may use when ``total`` bytes of RAM are available to it."""
        if self.absolute is not None:
            return self.absolute
        assert self.relative is not None
        return int(total * self.relative)

    def __str__(self) -> str:
        return str(self.relative) if self.absolute is None else f"{self.absolute}B"


_WATERMARK_HINT = "a fraction of RAM such as 0.4, or a size such as 200MB, 1GiB or bytes"


def parse_watermark(value: str | float | int) -> Watermark:
    """A watermark from ``0.4``, ``200MB``, ``1GiB`` or plain bytes.

    A bare number up to 1 is a fraction of RAM (``vm_memory_high_watermark.relative``);
    a larger whole number or a size with a unit is absolute (``.absolute``). The
    ``relative 0.4`` / ``absolute 200MB`` forms of ``rabbitmqctl`` are accepted too.
    """
    text = str(value).strip()
    kind, _, rest = text.partition(" ")
    kind = kind.lower()
    if kind not in ("relative", "absolute"):
        kind, rest = "", text
    rest = rest.strip()
    try:
        number: float | None = float(rest)
    except ValueError:
        number = None
    if kind == "relative" or (not kind and number is not None and number <= 1):
        if number is None or not 0 <= number <= 1:
            raise ValueError(f"not a fraction of RAM between 0 and 1: {value!r}")
        return Watermark(relative=number)
    if number is not None and not number.is_integer():
        raise ValueError(f"not a memory watermark: {value!r} ({_WATERMARK_HINT})")
    try:
        return Watermark(absolute=parse_size(rest))
    except ValueError:
        raise ValueError(f"not a memory watermark: {value!r} ({_WATERMARK_HINT})") from None


def _watermark(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    try:
        parse_watermark(value)
    except ValueError as exc:
        raise ConfigError(f"{attr.name}: {exc}") from None


@attrs.define
class Settings:
    #: Addresses to listen on; empty means every interface, IPv4 and IPv6.
    host: list[str] = attrs.field(factory=list)
    port: int = attrs.field(default=5672, validator=_positive)
    data_dir: str = "./data"
    #: SQLAlchemy URL; default sqlite file in data_dir.
    database_url: str = ""
    durability: str = attrs.field(default="fsync", validator=_choice(DURABILITY))
    delivery_log: str = attrs.field(default="lifecycle", validator=_choice(LOG_LEVELS))
    #: kept so old config files load: the writer is always a child process now;
    #: "thread" (the removed in-process writer) is accepted, ignored, and warned about
    store_writer: str = attrs.field(default="process", validator=_choice(STORE_WRITERS))
    #: Delivery-log rows older than this (and already exported) are pruned.
    log_retention_days: float = attrs.field(default=7.0, validator=_positive)
    #: seconds between retention passes over the delivery log
    log_prune_interval: float = attrs.field(default=300.0, validator=_positive)
    heartbeat: int = attrs.field(default=60, validator=_positive)
    #: seconds a new connection may take to reach connection.open-ok (RabbitMQ: 10)
    handshake_timeout: float = attrs.field(default=10.0, validator=_positive)
    frame_max: int = attrs.field(default=131072, validator=_positive)
    channel_max: int = attrs.field(default=2047, validator=_positive)
    max_message_size: int = attrs.field(default=128 * 1024 * 1024, validator=_positive)
    #: Bodies kept in RAM at the head of each durable queue; the rest page from SQLite.
    body_window: int = attrs.field(default=2000, validator=_positive)
    #: RAM a retaining exchange (x-recent-history, x-lvc) holds (bodies, properties,
    #: keys, per-entry overhead) unless its x-max-length-bytes bounds its body bytes:
    #: no exchange holds unbounded RAM
    retained_max_bytes: str = attrs.field(default="64MiB", validator=_size)
    #: keys an x-lvc exchange keeps unless its x-max-length says otherwise
    retained_max_length: int = attrs.field(default=100_000, validator=_positive)
    #: AMQP connections open at once; 0 means unlimited (RabbitMQ's connection_max)
    max_connections: int = attrs.field(default=0, validator=_positive)
    #: links (shovel and federation-upstream parameters) a vhost may hold, and a user
    #: may have defined across vhosts; a PUT past either is refused with 403 naming
    #: the limit; 0 means unlimited (each link holds two connections)
    max_links_per_vhost: int = attrs.field(default=100, validator=_positive)
    max_links_per_user: int = attrs.field(default=100, validator=_positive)
    #: free space on the data dir's disk below which publishers are blocked (RabbitMQ's
    #: disk_free_limit.absolute, same default)
    disk_free_limit: str = attrs.field(default="50MB", validator=_size)
    #: seconds between free-space checks
    disk_check_interval: float = attrs.field(default=1.0, validator=_positive)
    #: memory use (RSS) above which publishers are blocked: a fraction of RAM (or of
    #: the cgroup limit when lower), or an absolute size (RabbitMQ's
    #: vm_memory_high_watermark, same default)
    memory_high_watermark: str = attrs.field(default="0.4", validator=_watermark)
    #: fraction of the watermark at which queues should page bodies out of RAM
    #: (RabbitMQ's vm_memory_high_watermark_paging_ratio)
    memory_paging_ratio: float = attrs.field(default=0.5, validator=_positive)
    #: seconds between memory checks (one read of /proc/self/statm)
    memory_check_interval: float = attrs.field(default=0.25, validator=_positive)
    #: store operations waiting for the writer before publishers are blocked
    store_backlog_limit: int = attrs.field(default=200_000, validator=_positive)
    #: this broker's name among brokers (RabbitMQ's cluster_name): sent as ``cluster_name``
    #: in connection.start, used in federation's queue names and ``x-received-from`` loop
    #: detection, so brokers that federate with each other need different names
    cluster_name: str = "amqplite"
    #: user name -> {"password": ..., "tags": "administrator"}
    users: dict[str, dict[str, str]] = attrs.field(factory=dict)
    #: the default user; like RabbitMQ's guest it may log in from loopback only
    default_user: str = "guest"
    default_pass: str = "guest"
    loopback_users: list[str] = attrs.field(factory=lambda: ["guest"])
    #: SASL mechanisms offered in connection.start, in order (RabbitMQ's auth_mechanisms);
    #: EXTERNAL is offered only on TLS connections with a verified client certificate
    auth_mechanisms: list[str] = attrs.field(factory=lambda: ["PLAIN", "AMQPLAIN"],
                                             validator=_mechanisms)
    #: False: no plain AMQP listener, AMQPS only (RabbitMQ's ``listeners.tcp = none``)
    plain_listener: bool = True
    #: AMQPS port; None: no TLS listener (0 picks a free port, as for ``port``)
    tls_port: int | None = attrs.field(default=None,
                                       validator=attrs.validators.optional(_positive))
    #: PEM files: the server's certificate (chain), its private key, and the CA(s)
    #: that client certificates must chain to
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    #: ask clients for a certificate and verify it against tls_ca
    tls_verify_peer: bool = False
    #: with tls_verify_peer: refuse the handshake of a client that sends no certificate
    tls_fail_if_no_peer_cert: bool = False
    #: MQTT listener port (1883, MQTT's registered port, as Mosquitto and RabbitMQ's
    #: plugin use it); 0 turns the listener off
    mqtt_port: int = attrs.field(default=1883, validator=_positive)
    #: MQTT over TLS (RabbitMQ uses 8883) with the AMQPS certificate settings (tls_cert,
    #: tls_key, tls_ca, tls_verify_peer, ...); None: off (0 picks a free port)
    mqtt_tls_port: int | None = attrs.field(default=None,
                                            validator=attrs.validators.optional(_positive))
    #: a TLS client with a verified certificate and no user name logs in as the
    #: certificate's CN (RabbitMQ's mqtt.ssl_cert_login; SASL EXTERNAL's rule)
    mqtt_ssl_cert_login: bool = False
    #: MQTT over WebSockets at /ws on the admin HTTP port while MQTT is on
    mqtt_websocket: bool = True
    #: the vhost of MQTT users who name none (``vhost:user`` names one)
    mqtt_vhost: str = "/"
    #: the topic exchange MQTT publishes go to and subscriptions bind to
    mqtt_exchange: str = "amq.topic"
    #: MQTT CONNECT without a user name (or a zero-length one) logs in as
    #: default_user (RabbitMQ's mqtt.allow_anonymous, on by default there too): guest
    #: is loopback-only, so out of the box anonymous works from this host alone, as
    #: Mosquitto 2's local-only listener; refused with CONNACK "not authorized" when off
    mqtt_allow_anonymous: bool = True
    #: whom an anonymous MQTT client acts as (RabbitMQ's mqtt.default_user); loopback
    #: rules apply to it as to any user
    mqtt_default_user: str = "guest"
    #: who may take over an MQTT session (a vhost and a client id): "vhost", any user
    #: of its vhost (Mosquitto's rule); "user", only the user who opened it
    #: (another gets CONNACK "identifier rejected")
    mqtt_takeover: str = attrs.field(default="vhost", validator=_choice(("vhost", "user")))
    #: Mosquitto's max_keepalive: an MQTT 5 client asking for a keep alive of 0 or
    #: above this many seconds is told to use this (CONNACK Server Keep Alive) and
    #: held to it; 3.1.1 clients keep theirs (as Mosquitto, v5 only). 0: off
    mqtt_max_keepalive: int = attrs.field(default=0, validator=_u16)
    #: Mosquitto's sys_interval: every this many seconds the ``$SYS/broker/...`` figures
    #: go to the MQTT clients subscribed to them (docs/mqtt.md, "$SYS"). 0: no $SYS tree
    mqtt_sys_interval: int = attrs.field(default=10, validator=_u16)
    #: the largest MQTT packet a logged-in client may send (MQTT 5 clients are told
    #: in the CONNACK); bigger: DISCONNECT 0x95 / the connection closed
    mqtt_max_packet_size: str = attrs.field(default="16MiB", validator=_size)
    #: the largest CONNECT (and AUTH) before the login is accepted (RabbitMQ's
    #: mqtt.max_packet_size_unauthenticated): a stranger cannot make us buffer much
    mqtt_max_packet_size_unauthenticated: str = attrs.field(default="64KiB", validator=_size)
    #: retained MQTT messages a vhost keeps (topics); a new topic past it is refused
    mqtt_retained_max_messages: int = attrs.field(default=100_000, validator=_positive)
    #: body bytes of a vhost's retained MQTT messages; a publish past it is refused
    mqtt_retained_max_bytes: str = attrs.field(default="64MiB", validator=_size)
    #: STOMP listener port (RabbitMQ's 61613); 0 turns the listener off
    stomp_port: int = attrs.field(default=61613, validator=_positive)
    #: STOMP over TLS (RabbitMQ uses 61614) with the AMQPS certificate settings
    #: (tls_cert, tls_key, tls_ca, tls_verify_peer, ...); None: off (0 picks a free port)
    stomp_tls_port: int | None = attrs.field(default=None,
                                             validator=attrs.validators.optional(_positive))
    #: a TLS client with a verified certificate and no ``login`` logs in as the
    #: certificate's CN (RabbitMQ's stomp.ssl_cert_login)
    stomp_ssl_cert_login: bool = False
    #: the vhost of STOMP clients whose CONNECT has no ``host`` header
    stomp_default_vhost: str = "/"
    #: a CONNECT without ``login`` logs in with these (RabbitMQ's stomp.default_user,
    #: guest/guest there too: guest is loopback-only); an empty user refuses it
    stomp_default_user: str = "guest"
    stomp_default_pass: str = "guest"
    #: a NACK without ``requeue`` requeues (RabbitMQ's stomp.default_nack_requeue)
    stomp_default_nack_requeue: bool = True
    #: the largest STOMP frame a logged-in client may send (RabbitMQ's stomp.max_frame_size)
    stomp_max_frame_size: str = attrs.field(default="4MiB", validator=_size)
    #: the largest frame before the login is accepted (stomp.max_frame_size_unauthenticated)
    stomp_max_frame_size_unauthenticated: str = attrs.field(default="64KiB", validator=_size)
    #: Kafka listener port (Kafka's 9092); 0 turns the listener off
    kafka_port: int = attrs.field(default=9092, validator=_positive)
    #: Kafka over TLS (security.protocol=SSL, or SASL_SSL) with the AMQPS certificate
    #: settings (tls_cert, tls_key, ...); None: off (0 picks a free port)
    kafka_tls_port: int | None = attrs.field(default=None,
                                             validator=attrs.validators.optional(_positive))
    #: the host Metadata and FindCoordinator tell Kafka clients to connect to; empty:
    #: the address the client reached (the socket's local address)
    kafka_advertised_host: str = ""
    #: the vhost of Kafka clients whose SASL user name names none (``vhost:user`` does)
    kafka_vhost: str = "/"
    #: a Kafka client that does not authenticate (no SASL) acts as kafka_default_user,
    #: as MQTT's anonymous clients do: guest is loopback-only, so out of the box this
    #: works from this host alone; off, such a client's first request closes it
    kafka_allow_anonymous: bool = True
    #: whom an anonymous Kafka client acts as (loopback rules apply to it as to any user)
    kafka_default_user: str = "guest"
    #: a Kafka TLS client with a verified certificate that does not authenticate by SASL
    #: acts as the certificate's CN in kafka_vhost (security.protocol=SSL with a client
    #: certificate, Kafka's ssl.client.auth=required; SASL EXTERNAL's rule: the user
    #: exists and may connect from there), instead of kafka_default_user
    kafka_ssl_cert_login: bool = False
    #: a Kafka client naming a topic that does not exist (Metadata, Produce) creates it
    #: (Kafka's auto.create.topics.enable, on by default there too)
    kafka_auto_create_topics: bool = True
    #: partitions of an auto-created topic, and of CreateTopics asking for the default
    #: (Kafka's num.partitions): 1 makes a plain stream, more a super stream
    kafka_num_partitions: int = attrs.field(default=1, validator=_at_least_one)
    #: an empty group's first rebalance waits this long (and as long again after each
    #: member that joins meanwhile, within the rebalance timeout) so that consumers
    #: started together share one generation: Kafka's group.initial.rebalance.delay.ms,
    #: 3000 there; 0 here, so a lone consumer in development or CI starts at once
    kafka_group_initial_rebalance_delay_ms: int = attrs.field(default=0, validator=_positive)
    admin_host: str = "127.0.0.1"
    #: 0 disables the admin HTTP API
    admin_port: int = attrs.field(default=15672, validator=_positive)
    #: serve the admin API over HTTPS (implied by admin_tls_cert); without its own
    #: certificate it uses tls_cert / tls_key
    admin_tls: bool = False
    admin_tls_cert: str = ""
    admin_tls_key: str = ""
    #: message payload bytes one peek (``GET /api/queues/{vhost}/{q}/messages``) or one
    #: stream read (``/api/streams/.../entries``) returns at most, besides its count limit
    admin_peek_max_bytes: str = attrs.field(default="16MiB", validator=_size)

    def __attrs_post_init__(self) -> None:
        """Refuse TLS settings that cannot work together, before anything listens."""
        if self.tls_port is not None and not (self.tls_cert and self.tls_key):
            raise ConfigError("tls_port needs tls_cert and tls_key")
        if self.tls_verify_peer and not self.tls_ca:
            raise ConfigError("tls_verify_peer needs tls_ca (the CA client certificates "
                              "must chain to)")
        if self.tls_fail_if_no_peer_cert and not self.tls_verify_peer:
            raise ConfigError("tls_fail_if_no_peer_cert needs tls_verify_peer")
        if self.mqtt_tls_port is not None and not (self.tls_cert and self.tls_key):
            raise ConfigError("mqtt_tls_port needs tls_cert and tls_key")
        if self.kafka_tls_port is not None and not (self.tls_cert and self.tls_key):
            raise ConfigError("kafka_tls_port needs tls_cert and tls_key")
        for name in ("mqtt_ssl_cert_login", "kafka_ssl_cert_login"):
            if getattr(self, name) and not self.tls_verify_peer:
                raise ConfigError(f"{name} needs tls_verify_peer (only a verified "
                                  "client certificate names a user)")
        if not self.plain_listener and self.tls_port is None:
            raise ConfigError("plain_listener = false leaves no listener: set tls_port")
        if self.admin_tls_cert or self.admin_tls_key:
            self.admin_tls = True
        if self.admin_tls and not all(self.admin_cert_files):
            raise ConfigError("admin_tls needs admin_tls_cert and admin_tls_key "
                              "(or tls_cert and tls_key)")

    @property
    def admin_cert_files(self) -> tuple[str, str]:
        """(certificate, key) of the admin HTTPS listener: its own, else the AMQPS pair."""
        if self.admin_tls_cert or self.admin_tls_key:
            return self.admin_tls_cert, self.admin_tls_key
        return self.tls_cert, self.tls_key

    @property
    def admin_peek_max_bytes_value(self) -> int:
        return parse_size(self.admin_peek_max_bytes)

    @property
    def retained_max_bytes_value(self) -> int:
        return parse_size(self.retained_max_bytes)

    @property
    def mqtt_retained_max_bytes_value(self) -> int:
        return parse_size(self.mqtt_retained_max_bytes)

    @property
    def disk_free_limit_bytes(self) -> int:
        return parse_size(self.disk_free_limit)

    @property
    def memory_watermark(self) -> Watermark:
        return parse_watermark(self.memory_high_watermark)

    @property
    def db_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{Path(self.data_dir).resolve() / 'amqplite.db'}"


_FIELDS = {a.name: a for a in attrs.fields(Settings)}

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_bool(value: Any) -> bool:
    """The boolean words the config file, the environment and the CLI take; ValueError."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ValueError("expected true or false")


def _verify(value: Any) -> bool:
    if value not in ("verify_peer", "verify_none"):
        raise ValueError("expected verify_peer or verify_none")
    return value == "verify_peer"


def _tcp_listener(value: Any) -> bool:
    if value != "none":
        raise ValueError('expected "none" (or listeners.tcp.default = PORT)')
    return False


#: rabbitmq.conf names accepted in the TOML file as dotted keys, e.g.
#: ``ssl_options.certfile = "server.pem"``: path -> (setting, conversion)
_RABBIT_KEYS: dict[tuple[str, ...], tuple[str, Any]] = {
    ("listeners", "tcp"): ("plain_listener", _tcp_listener),
    ("listeners", "tcp", "default"): ("port", None),
    ("listeners", "ssl", "default"): ("tls_port", None),
    ("ssl_options", "certfile"): ("tls_cert", None),
    ("ssl_options", "keyfile"): ("tls_key", None),
    ("ssl_options", "cacertfile"): ("tls_ca", None),
    ("ssl_options", "verify"): ("tls_verify_peer", _verify),
    ("ssl_options", "fail_if_no_peer_cert"): ("tls_fail_if_no_peer_cert", None),
    ("mqtt", "listeners", "ssl", "default"): ("mqtt_tls_port", None),
    ("mqtt", "ssl_cert_login"): ("mqtt_ssl_cert_login", None),
    ("mqtt", "default_user"): ("mqtt_default_user", None),
    ("mqtt", "max_packet_size_authenticated"): ("mqtt_max_packet_size", None),
    ("mqtt", "max_packet_size_unauthenticated"): ("mqtt_max_packet_size_unauthenticated",
                                                  None),
    ("management", "ssl", "port"): ("admin_port", None),
    ("management", "ssl", "ip"): ("admin_host", None),
    ("management", "ssl", "certfile"): ("admin_tls_cert", None),
    ("management", "ssl", "keyfile"): ("admin_tls_key", None),
}
_RABBIT_TABLES = {path[0] for path in _RABBIT_KEYS}


def _rabbit_keys(table: Mapping[str, Any], path: tuple[str, ...] = ()) -> dict[str, Any]:
    """Flatten rabbitmq.conf-style tables into settings; unknown keys are errors.

    ``management.ssl.*`` also turns HTTPS on for the admin API.
    """
    out: dict[str, Any] = {}
    for k, v in table.items():
        key = (*path, k)
        if isinstance(v, Mapping):
            out.update(_rabbit_keys(v, key))
            continue
        if key not in _RABBIT_KEYS:
            raise ConfigError(f"unknown setting '{'.'.join(key)}'")
        name, convert = _RABBIT_KEYS[key]
        try:
            out[name] = convert(v) if convert else v
        except ValueError as exc:
            raise ConfigError(f"{'.'.join(key)}: {exc}") from None
        if key[0] == "management":
            out["admin_tls"] = True
    return out


def _coerce(name: str, value: Any) -> Any:
    a = _FIELDS[name]
    t = a.type if isinstance(a.type, str) else str(a.type)
    try:
        if t == "int":
            return int(value)
        if t == "int | None":
            return None if value in (None, "", "none") else int(value)
        if t == "bool":
            return parse_bool(value)
        if t == "float":
            return float(value)
        if t == "list[str]":
            if isinstance(value, str):
                return [v.strip() for v in value.split(",") if v.strip()]
            return [str(v) for v in value]
        if t == "str":
            return str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: cannot use {value!r} ({exc})") from None
    return value


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Merge the three sources; unknown keys are errors, not silently ignored."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    path = config_file or env.get("AMQPLITE_CONFIG")
    if path:
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
        data = data.get("amqplite", data)
        rabbit = {k: data.pop(k) for k in list(data) if k in _RABBIT_TABLES}
        try:
            data.update(_rabbit_keys(rabbit))
        except ConfigError as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
        for k, v in data.items():
            key = k.replace("-", "_")
            if key not in _FIELDS:
                raise ConfigError(f"config file {path}: unknown setting '{k}'")
            values[key] = _coerce(key, v)
    for name in _FIELDS:
        ev = env.get("AMQPLITE_" + name.upper())
        if ev is not None and name != "users":
            values[name] = _coerce(name, ev)
    for k, v in (overrides or {}).items():
        if v is not None:
            values[k] = _coerce(k, v)
    try:
        return Settings(**values)
    except TypeError as exc:
        raise ConfigError(str(exc)) from None
