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
from amqplite.links import values as V

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
    #: seconds (RabbitMQ's default: 5); 0: a failed shovel is not restarted
    reconnect_delay: float = 5.0


def _str(value: dict[str, Any], field: str) -> str | None:
    """A name or routing key: carried as an AMQP shortstr."""
    v = value.get(field)
    return None if v is None else V.shortstr(v, field)


def _queue(value: dict[str, Any], field: str) -> str | None:
    """A queue the shovel declares: named (an empty name would make a new
    server-named durable queue at every connect)."""
    v = _str(value, field)
    if v == "":
        raise ValueError(f"{field}: must not be empty")
    return v


def _bool(value: dict[str, Any], field: str, default: bool = False) -> bool:
    return V.boolean(value.get(field, default), field)


def _either(value: dict[str, Any], field: str, old: str, default: Any) -> tuple[str, Any]:
    """(the name to report, the value) of a field RabbitMQ also reads by an older name."""
    if field in value:
        return field, value[field]
    if old in value:
        return old, value[old]
    return field, default


def parse(value: Any) -> ShovelSpec:
    """The spec of a shovel parameter's value; ValueError naming the first bad field.

    Every field is typed as RabbitMQ's shovel types it and as AMQP will carry it
    (``links.values``), so what is accepted here can be sent on every attempt."""
    if not isinstance(value, dict):
        raise ValueError("value: must be a JSON object")
    for key in value:
        if key not in FIELDS:
            raise ValueError(f"{str(key)[:60]}: unknown shovel field")
    for side in ("src", "dest"):
        proto = value.get(f"{side}-protocol", "amqp091")
        if proto != "amqp091":
            raise ValueError(f"{side}-protocol: only amqp091 is supported, not "
                             f"{str(proto)[:60]!r}")
    src_queue, src_exchange = _queue(value, "src-queue"), _str(value, "src-exchange")
    if (src_queue is None) == (src_exchange is None):
        raise ValueError("src-queue: exactly one of src-queue and src-exchange is required")
    dest_queue, dest_exchange = _queue(value, "dest-queue"), _str(value, "dest-exchange")
    if dest_queue is not None and dest_exchange is not None:
        raise ValueError("dest-queue: give dest-queue or dest-exchange, not both")
    ack_mode = value.get("ack-mode", "on-confirm")
    if ack_mode not in ACK_MODES:
        raise ValueError(f"ack-mode: must be one of {', '.join(ACK_MODES)}, not "
                         f"{str(ack_mode)[:60]!r}")
    name, raw_after = _either(value, "src-delete-after", "delete-after", "never")
    delete_after: str | int = raw_after if raw_after in ("never", "queue-length") else \
        V.integer(raw_after, name, 1)
    if delete_after == "queue-length" and src_queue is None:
        raise ValueError(f"{name}: queue-length needs src-queue")
    name, raw_prefetch = _either(value, "src-prefetch-count", "prefetch-count", 1000)
    prefetch = V.integer(raw_prefetch, name, 1)
    delay = V.reconnect_delay(value.get("reconnect-delay", 5))
    name, raw_props = _either(value, "dest-publish-properties", "publish-properties", {})
    props = V.publish_properties(raw_props, name)
    if "src-consumer-args" in value:
        V.table(value["src-consumer-args"], "src-consumer-args")
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
        publish_properties=props, ack_mode=ack_mode, reconnect_delay=delay)


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
