"""AMQP URIs as RabbitMQ's shovels read them, and their masked form for the API.

``amqp://user:pass@host:port/vhost?heartbeat=..`` (port 5672, or 5671 for
``amqps``); no path, ``/`` and ``/%2F`` all mean vhost ``/``. ``amqp://`` with no
host is "the local broker" (RabbitMQ's direct connection): ``local`` is set
and the caller connects to its own listener; without credentials as well
(``credentials`` False) the link logs in as the user who defined it
(``links/access.py``), never as ``guest``. With a host and no credentials the
remote broker is asked for ``guest:guest``, as RabbitMQ's URIs do. TLS options come as query
parameters, RabbitMQ's names: ``cacertfile``, ``certfile``, ``keyfile``,
``verify`` (``verify_peer``/``verify_none``), ``server_name_indication``; and
``connection_timeout`` (milliseconds, as RabbitMQ's URIs give it): how long the TCP
connect and then the AMQP handshake may each take (default 15 s).
Pure: no sockets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit, urlunsplit

import attrs

SCHEMES = ("amqp", "amqps")
_TLS_KEYS = ("cacertfile", "certfile", "keyfile", "verify", "server_name_indication")
#: seconds the TCP connect, and then the AMQP handshake, may take without ``connection_timeout``
CONNECTION_TIMEOUT = 15.0
_KNOWN_KEYS = (*_TLS_KEYS, "heartbeat", "connection_timeout", "channel_max", "frame_max",
               "auth_mechanism")


@attrs.frozen
class Endpoint:
    """Where and how to connect."""

    tls: bool
    host: str
    port: int
    vhost: str
    user: str
    password: str
    #: no host in the URI: the broker's own listener
    local: bool = False
    #: the URI named a user (else ``user``/``password`` are the guest defaults)
    credentials: bool = False
    heartbeat: int = 60
    cacertfile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    verify: bool = True
    server_name: str | None = None
    #: seconds the TCP connect may take, and then the AMQP (and TLS) handshake
    timeout: float = CONNECTION_TIMEOUT


def parse(uri: str, field: str = "uri") -> Endpoint:
    """The endpoint of ``uri``; ValueError naming ``field`` when it is not one."""
    if not isinstance(uri, str):
        raise ValueError(f"{field}: must be a string AMQP URI")
    try:
        u = urlsplit(uri)
        port = u.port
    except ValueError as exc:
        raise ValueError(f"{field}: not a valid URI ({exc})") from None
    if u.scheme not in SCHEMES:
        raise ValueError(f"{field}: scheme must be amqp:// or amqps://, not "
                         f"'{u.scheme or uri}'")
    tls = u.scheme == "amqps"
    query = parse_qs(u.query, keep_blank_values=True)
    for key in query:
        if key not in _KNOWN_KEYS:
            raise ValueError(f"{field}: unknown query parameter '{key}'")
    q = {k: v[-1] for k, v in query.items()}
    path = u.path[1:] if u.path.startswith("/") else u.path
    if "/" in path:
        raise ValueError(f"{field}: the vhost must be one path segment (use %2F for '/')")
    vhost = unquote(path) if path else "/"
    heartbeat = 60
    if "heartbeat" in q:
        try:
            heartbeat = int(q["heartbeat"])
        except ValueError:
            raise ValueError(f"{field}: heartbeat must be an integer") from None
    timeout = CONNECTION_TIMEOUT
    if "connection_timeout" in q:
        try:
            timeout = int(q["connection_timeout"]) / 1000
        except ValueError:
            timeout = 0
        if timeout <= 0:
            raise ValueError(f"{field}: connection_timeout must be a positive integer "
                             "(milliseconds)") from None
    verify = q.get("verify", "verify_peer")
    if verify not in ("verify_peer", "verify_none"):
        raise ValueError(f"{field}: verify must be verify_peer or verify_none")
    return Endpoint(
        tls=tls, host=u.hostname or "127.0.0.1", port=port or (5671 if tls else 5672),
        vhost=vhost,
        user=unquote(u.username) if u.username is not None else "guest",
        password=unquote(u.password) if u.password is not None else "guest",
        local=not u.hostname, credentials=u.username is not None, heartbeat=heartbeat,
        cacertfile=q.get("cacertfile"), certfile=q.get("certfile"), keyfile=q.get("keyfile"),
        verify=verify == "verify_peer",
        server_name=q.get("server_name_indication"), timeout=timeout)


def mask(uri: str) -> str:
    """``uri`` with its password replaced by ``***`` (what the API shows back)."""
    try:
        u = urlsplit(uri)
        if u.password is None:
            return uri
        host = u.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{quote(unquote(u.username or ''), safe='')}:***@{host}"
        if u.port is not None:
            netloc += f":{u.port}"
        return urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))
    except ValueError:  # not parseable: show nothing that may be secret
        return uri.rsplit("@", 1)[-1]


def uri_list(value: Mapping[str, Any], field: str) -> tuple[str, ...]:
    """``value[field]``, one URI or a non-empty list of them (shovel ``src-uri``/``dest-uri``,
    federation ``uri``), each checked; ValueError naming ``field``."""
    raw = value.get(field)
    if raw is None:
        raise ValueError(f"{field}: is required (a URI or a non-empty list of URIs)")
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not items:
        raise ValueError(f"{field}: must be a URI or a non-empty list of URIs")
    for u in items:
        parse(u, field)
    return tuple(items)


def mask_fields(value: Any, fields: tuple[str, ...]) -> Any:
    """A parameter value with the passwords of the URIs in ``fields`` hidden (what the
    API shows); a value that is not a JSON object comes back as it is."""
    if not isinstance(value, dict):
        return value
    out = dict(value)
    for field in fields:
        v = out.get(field)
        if isinstance(v, str):
            out[field] = mask(v)
        elif isinstance(v, list):
            out[field] = [mask(x) if isinstance(x, str) else x for x in v]
    return out


def strip_credentials(uri: str) -> str:
    """``uri`` without user and password (what RabbitMQ's federation shows and puts in
    ``x-received-from``)."""
    try:
        u = urlsplit(uri)
        netloc = u.netloc.rsplit("@", 1)[-1]
        return urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))
    except ValueError:
        return uri.rsplit("@", 1)[-1]
