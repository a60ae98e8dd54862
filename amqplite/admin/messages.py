"""Pure helpers shared by the HTTP API and the CLI: JSON-safe values, body previews,
dead-letter summaries and message filters.

Nothing here touches the broker or the network, so both sides of the API
(server and CLI) render a message the same way.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import fnmatch
import json
from collections.abc import Mapping
from typing import Any

from amqplite.protocol.properties import printable

#: basic.get acknowledgement modes of the management API (RabbitMQ's names)
ACK_MODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false")

#: Fields a filter may name (besides ``header.<name>``); values are shell-style globs.
FILTER_FIELDS = (
    "reason", "queue", "exchange", "routing_key", "origin_queue", "message_id",
    "content_type", "type", "app_id", "correlation_id", "body",
)


def jsonable(v: Any) -> Any:
    """A JSON-safe copy of a decoded AMQP value (field tables, arrays, longstr bytes...).

    Text from a non-UTF-8 shortstr property is escaped (``\\xNN``): one odd
    message must not make a whole listing unencodable.
    """
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, str):
        return printable(v)
    if isinstance(v, int):
        return int(v)  # Timestamp -> seconds
    if isinstance(v, float):
        return v
    if isinstance(v, bytes | bytearray | memoryview):
        raw = bytes(v)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii")
    if isinstance(v, Mapping):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [jsonable(x) for x in v]
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, _dt.datetime):
        return iso(v.timestamp())
    return str(v)


def iso(ts: float | int | None) -> str | None:
    """Seconds since the epoch as ``2024-05-01T12:00:00Z`` (None stays None)."""
    if ts is None:
        return None
    try:
        return _dt.datetime.fromtimestamp(float(ts), tz=_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return None


def _s(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bytes | bytearray):
        return bytes(v).decode("utf-8", "replace")
    return str(v)


def death_summary(headers: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Why and where a message died, from RabbitMQ's ``x-death`` headers; None if it never did.

    ``reason``/``queue``/``exchange``/``routing_keys`` describe the latest death
    (``x-death`` is newest first); ``origin_*`` the first one, where a replay
    sends it back; ``count`` is the total number of deaths.
    """
    if not headers:
        return None
    raw = headers.get("x-death")
    deaths = [d for d in raw if isinstance(d, Mapping)] if isinstance(raw, list) else []
    if not deaths and "x-first-death-queue" not in headers:
        return None
    entries: list[dict[str, Any]] = []
    for d in deaths:
        keys = d.get("routing-keys")
        t = d.get("time")
        entries.append({
            "count": int(d["count"]) if isinstance(d.get("count"), int) else 1,
            "reason": _s(d.get("reason")),
            "queue": _s(d.get("queue")),
            "exchange": _s(d.get("exchange")),
            "routing_keys": [_s(k) for k in keys] if isinstance(keys, list) else [],
            "time": iso(int(t)) if isinstance(t, int) else None,
            "original_expiration": _s(d.get("original-expiration")),
            "_t": int(t) if isinstance(t, int) else None,
        })
    newest = entries[0] if entries else {}
    oldest = entries[-1] if entries else {}
    times = [e["_t"] for e in entries if e["_t"] is not None]
    for e in entries:
        del e["_t"]
    origin_queue = _s(headers.get("x-first-death-queue")) or oldest.get("queue")
    return {
        "reason": _s(headers.get("x-last-death-reason")) or newest.get("reason"),
        "queue": _s(headers.get("x-last-death-queue")) or newest.get("queue"),
        "exchange": _s(headers.get("x-last-death-exchange")) if newest.get("exchange") is None
        else newest.get("exchange"),
        "routing_keys": newest.get("routing_keys", []),
        "count": sum(e["count"] for e in entries) if entries else 1,
        "first_death_at": iso(min(times)) if times else None,
        "last_death_at": iso(max(times)) if times else None,
        "origin_queue": origin_queue,
        "origin_exchange": _s(headers.get("x-first-death-exchange")) or oldest.get("exchange"),
        "origin_reason": _s(headers.get("x-first-death-reason")) or oldest.get("reason"),
        "origin_routing_keys": oldest.get("routing_keys", []),
        "deaths": entries,
    }


def preview(body: bytes | None, content_type: str | None = None,
            limit: int = 80) -> tuple[str, str]:
    """A one-line preview of a body and how it was decoded: ``json``, ``text`` or ``hex``."""
    if body is None:
        return "", "none"
    text: str | None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        looks_json = (content_type or "").endswith("json") or text.lstrip()[:1] in ("{", "[")
        if looks_json:
            try:
                out = json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
                return _cut(out, limit), "json"
            except ValueError:
                pass
        if text.isprintable() or all(c.isprintable() or c in "\r\n\t" for c in text):
            return _cut(" ".join(text.split()) if "\n" in text else text, limit), "text"
    hexed = body[: max(1, limit // 2)].hex(" ")
    return (hexed + (" …" if len(body) > limit // 2 else "")), "hex"


def _cut(s: str, limit: int) -> str:
    return s if len(s) <= limit else s[: limit - 1] + "…"


def decode_payload(payload: str | None, encoding: str | None) -> bytes:
    """The body bytes of a message JSON object (``payload`` + ``payload_encoding``)."""
    if payload is None:
        return b""
    if encoding == "base64":
        return base64.b64decode(payload)
    return payload.encode("utf-8")


def encode_payload(body: bytes, encoding: str = "auto") -> tuple[str, str]:
    """(payload, payload_encoding) as RabbitMQ's management API: ``string`` or ``base64``."""
    if encoding != "base64":
        try:
            return body.decode("utf-8"), "string"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(body).decode("ascii"), "base64"


def parse_filter(spec: Any) -> dict[str, str]:
    """Normalise a filter: a dict ``{field: glob}`` or a list of ``"field=glob"`` strings.

    Raises ValueError naming the bad part.
    """
    if spec is None:
        return {}
    items: list[tuple[str, Any]]
    if isinstance(spec, Mapping):
        items = list(spec.items())
    elif isinstance(spec, str):
        items = [_split(spec)]
    elif isinstance(spec, list):
        items = [_split(x) if isinstance(x, str) else ("", x) for x in spec]
    else:
        raise ValueError("filter must be an object {field: pattern} or a list of 'field=pattern'")
    out: dict[str, str] = {}
    for k, v in items:
        if not isinstance(v, str):
            raise ValueError(f"filter value for {k!r} must be a string")
        if k not in FILTER_FIELDS and not (k.startswith("header.") and len(k) > 7):
            raise ValueError(f"unknown filter field {k!r} (known: {', '.join(FILTER_FIELDS)}, "
                             "header.<name>)")
        out[k] = v
    return out


def _split(s: str) -> tuple[str, str]:
    k, sep, v = s.partition("=")
    if not sep:
        raise ValueError(f"filter {s!r} is not of the form field=pattern")
    return k.strip(), v


def matches(flt: Mapping[str, str], fields: Mapping[str, Any],
            headers: Mapping[str, Any] | None, body: bytes | None) -> bool:
    """True when every filter glob matches its field (missing fields never match)."""
    for k, pat in flt.items():
        if k == "body":
            if body is None:
                return False
            value: Any = body.decode("utf-8", "replace")
        elif k.startswith("header."):
            value = (headers or {}).get(k[7:])
        else:
            value = fields.get(k)
        if isinstance(value, list):
            if not any(fnmatch.fnmatchcase(str(jsonable(x)), pat) for x in value):
                return False
            continue
        if value is None or not fnmatch.fnmatchcase(str(jsonable(value)), pat):
            return False
    return True
