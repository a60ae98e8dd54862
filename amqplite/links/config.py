"""A dynamic shovel's definition (RabbitMQ's ``shovel`` runtime parameter), validated.

Everything that can be known when the parameter is PUT is checked here, each
refusal naming its field (the API answers 400 with it); what can only be
known by connecting (a wrong password, a missing queue) shows in the
shovel's status instead, and the shovel retries. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from amqplite.links import uri as U

ACK_MODES = ("on-confirm", "on-publish", "no-ack")

#: the fields RabbitMQ 3.10 accepts for an AMQP 0-9-1 dynamic shovel
FIELDS = frozenset({
    "src-uri", "src-queue", "src-exchange", "src-exchange-key", "src-prefetch-count",
    "src-delete-after", "src-protocol", "src-predeclared", "src-consumer-args",
    "dest-uri", "dest-queue", "dest-exchange", "dest-exchange-key",
    "dest-add-forward-headers", "dest-add-timestamp-header", "dest-publish-properties",
    "dest-protocol", "dest-predeclared", "ack-mode", "reconnect-delay",
    # the older names RabbitMQ still reads
    "prefetch-count", "delete-after", "add-forward-headers", "publish-properties",
})


@attrs.frozen
class ShovelSpec:
    """A validated shovel definition."""

    src_uris: tuple[str, ...]
    dest_uris: tuple[str, ...]
    src_queue: str | None = None
    src_exchange: str | None = None
    src_exchange_key: str = "#"
    prefetch: int = 1000
    #: "never", "queue-length" or a message count
    delete_after: str | int = "never"
    src_predeclared: bool = False
    dest_queue: str | None = None
    dest_exchange: str | None = None
    dest_exchange_key: str | None = None
    dest_predeclared: bool = False
    add_forward_headers: bool = False
    add_timestamp_header: bool = False
    publish_properties: dict[str, Any] = attrs.field(factory=dict)
    ack_mode: str = "on-confirm"
    reconnect_delay: float = 5.0


def _str(value: dict[str, Any], field: str) -> str | None:
    v = value.get(field)
    if v is not None and not isinstance(v, str):
        raise ValueError(f"{field}: must be a string")
    return v


def _bool(value: dict[str, Any], field: str, default: bool = False) -> bool:
    v = value.get(field, default)
    if not isinstance(v, bool):
        raise ValueError(f"{field}: must be true or false")
    return v


def _count(v: Any, field: str, *, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"{field}: must be an integer >= {minimum}")
    return v


def parse(value: Any) -> ShovelSpec:
    """The spec of a shovel parameter's value; ValueError naming the first bad field."""
    if not isinstance(value, dict):
        raise ValueError("value: must be a JSON object")
    for key in value:
        if key not in FIELDS:
            raise ValueError(f"{key}: unknown shovel field")
    for side in ("src", "dest"):
        proto = value.get(f"{side}-protocol", "amqp091")
        if proto != "amqp091":
            raise ValueError(f"{side}-protocol: only amqp091 is supported, not {proto!r}")
    src_queue, src_exchange = _str(value, "src-queue"), _str(value, "src-exchange")
    if (src_queue is None) == (src_exchange is None):
        raise ValueError("src-queue: exactly one of src-queue and src-exchange is required")
    dest_queue, dest_exchange = _str(value, "dest-queue"), _str(value, "dest-exchange")
    if dest_queue is not None and dest_exchange is not None:
        raise ValueError("dest-queue: give dest-queue or dest-exchange, not both")
    ack_mode = value.get("ack-mode", "on-confirm")
    if ack_mode not in ACK_MODES:
        raise ValueError(f"ack-mode: must be one of {', '.join(ACK_MODES)}, not {ack_mode!r}")
    raw_after = value.get("src-delete-after", value.get("delete-after", "never"))
    delete_after: str | int = raw_after if raw_after in ("never", "queue-length") else \
        _count(raw_after, "src-delete-after", minimum=1)
    if delete_after == "queue-length" and src_queue is None:
        raise ValueError("src-delete-after: queue-length needs src-queue")
    prefetch = _count(value.get("src-prefetch-count", value.get("prefetch-count", 1000)),
                      "src-prefetch-count", minimum=1)
    delay = value.get("reconnect-delay", 5)
    if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
        raise ValueError("reconnect-delay: must be a number of seconds >= 0")
    props = value.get("dest-publish-properties", value.get("publish-properties", {}))
    if not isinstance(props, dict):
        raise ValueError("dest-publish-properties: must be a JSON object")
    key = _str(value, "src-exchange-key")
    return ShovelSpec(
        src_uris=U.uri_list(value, "src-uri"), dest_uris=U.uri_list(value, "dest-uri"),
        src_queue=src_queue, src_exchange=src_exchange,
        src_exchange_key="#" if key is None else key, prefetch=prefetch,
        delete_after=delete_after, src_predeclared=_bool(value, "src-predeclared"),
        dest_queue=dest_queue, dest_exchange=dest_exchange,
        dest_exchange_key=_str(value, "dest-exchange-key"),
        dest_predeclared=_bool(value, "dest-predeclared"),
        add_forward_headers=_bool(value, "dest-add-forward-headers",
                                  _bool(value, "add-forward-headers")),
        add_timestamp_header=_bool(value, "dest-add-timestamp-header"),
        publish_properties=dict(props), ack_mode=ack_mode, reconnect_delay=float(delay))


def masked(value: dict[str, Any]) -> dict[str, Any]:
    """The value with every URI's password hidden (what the API shows)."""
    return U.mask_fields(value, ("src-uri", "dest-uri"))


def _components() -> dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]]:
    from amqplite.links import federation_config as F

    return {"shovel": (parse, masked),
            "federation-upstream": (F.parse_upstream, F.masked_upstream),
            "federation-upstream-set": (F.parse_upstream_set, lambda v: v)}


#: component name -> (validator, masker) of the components this broker knows; a
#: value is a JSON object, but an upstream set's is a list (RabbitMQ's shapes)
COMPONENTS = _components()
