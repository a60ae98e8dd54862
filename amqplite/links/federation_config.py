"""Federation's runtime parameters (RabbitMQ's ``federation-upstream`` and
``federation-upstream-set``) and policy keys, validated; which upstreams a
federated exchange links to. Pure: no I/O.

The fields and defaults are RabbitMQ 3.10's (``rabbit_federation_parameters``):
an unknown field is refused naming it, so a typo never silently means a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from amqplite.broker import patterns
from amqplite.links import uri as U
from amqplite.links import values as V

ACK_MODES = ("on-confirm", "on-publish", "no-ack")
#: fields an upstream and an upstream-set entry share
SHARED_FIELDS = frozenset({
    "exchange", "queue", "consumer-tag", "prefetch-count", "reconnect-delay", "max-hops",
    "expires", "message-ttl", "trust-user-id", "ack-mode", "resource-cleanup-mode",
    "ha-policy", "bind-nowait", "channel-use-mode",
})
UPSTREAM_FIELDS = SHARED_FIELDS | {"uri"}
SET_FIELDS = SHARED_FIELDS | {"upstream"}
_ENUMS = {"ack-mode": ACK_MODES, "resource-cleanup-mode": ("default", "never"),
          "channel-use-mode": ("multiple", "single")}


@attrs.frozen
class UpstreamSpec:
    """One upstream as a link uses it (set-entry overrides applied)."""

    name: str
    uris: tuple[str, ...]
    #: the upstream's exchange; None: the federated exchange's own name
    exchange: str | None = None
    prefetch: int = 1000
    reconnect_delay: float = 5.0
    max_hops: int = 1
    #: upstream queue arguments x-expires / x-message-ttl (ms), None: not set
    expires: int | None = None
    message_ttl: int | None = None
    trust_user_id: bool = False
    ack_mode: str = "on-confirm"
    #: "never": the upstream queue and exchange are kept when the link is removed
    cleanup: str = "default"


#: x-max-hops travels as a long, a binding's ``hops`` in x-bound-from as a short
MAX_HOPS_LIMIT = 32767
#: x-expires / x-message-ttl as RabbitMQ bounds them (milliseconds)
MS_LIMIT = 0xFFFFFFFF


def _check_shared(value: Mapping[str, Any], prefix: str) -> None:
    """Each field typed as RabbitMQ types it and as the link will send it (names in
    shortstrs, counts in the AMQP integer they travel as); ValueError naming it."""
    for key, v in value.items():
        field = f"{prefix}{key}"
        if key in ("exchange", "queue", "consumer-tag"):
            V.shortstr(v, field)
        elif key in ("ha-policy", "upstream"):
            V.text(v, field)
        elif key == "prefetch-count":
            V.integer(v, field, 1)
        elif key == "max-hops":
            V.integer(v, field, 1, MAX_HOPS_LIMIT)
        elif key == "expires":
            V.integer(v, field, 1, MS_LIMIT)
        elif key == "message-ttl":
            V.integer(v, field, 0, MS_LIMIT)
        elif key == "reconnect-delay":
            V.reconnect_delay(v, field)
        elif key in ("trust-user-id", "bind-nowait"):
            V.boolean(v, field)
        elif key in _ENUMS and v not in _ENUMS[key]:
            raise ValueError(f"{field}: must be one of {', '.join(_ENUMS[key])}, not "
                             f"{str(v)[:60]!r}")


def parse_upstream(value: Any) -> dict[str, Any]:
    """A ``federation-upstream`` value, checked; ValueError naming the first bad field."""
    if not isinstance(value, dict):
        raise ValueError("value: must be a JSON object")
    for key in value:
        if key not in UPSTREAM_FIELDS:
            raise ValueError(f"{str(key)[:60]}: unknown federation-upstream field")
    U.uri_list(value, "uri")
    _check_shared(value, "")
    return value


def parse_upstream_set(value: Any) -> list[dict[str, Any]]:
    """A ``federation-upstream-set`` value: a list of ``{"upstream": name, ...overrides}``."""
    if not isinstance(value, list):
        raise ValueError("value: must be a JSON list of {\"upstream\": name, ...} objects")
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise ValueError(f"[{i}]: must be a JSON object")
        for key in entry:
            if key not in SET_FIELDS:
                raise ValueError(f"[{i}].{str(key)[:60]}: unknown federation-upstream-set "
                                 "field")
        if "upstream" not in entry:
            raise ValueError(f"[{i}].upstream: is required")
        _check_shared(entry, f"[{i}].")
    return value


def spec_of(name: str, value: Mapping[str, Any]) -> UpstreamSpec:
    """The link's view of an upstream value (already validated, overrides merged)."""
    raw = value["uri"]
    return UpstreamSpec(
        name=name, uris=(raw,) if isinstance(raw, str) else tuple(raw),
        exchange=value.get("exchange"), prefetch=int(value.get("prefetch-count", 1000)),
        reconnect_delay=float(value.get("reconnect-delay", 5)),
        max_hops=int(value.get("max-hops", 1)), expires=value.get("expires"),
        message_ttl=value.get("message-ttl"),
        trust_user_id=bool(value.get("trust-user-id", False)),
        ack_mode=value.get("ack-mode", "on-confirm"),
        cleanup=value.get("resource-cleanup-mode", "default"))


def upstreams_for(definition: Mapping[str, Any] | None,
                  params: Mapping[str, Mapping[str, Any]],
                  sets: Mapping[str, Any]) -> list[UpstreamSpec]:
    """The upstreams a policy definition federates from, as RabbitMQ resolves them:
    ``federation-upstream`` one by name, ``federation-upstream-set`` a set (``all``:
    every upstream of the vhost) with the set entry's fields overriding the
    upstream's, ``federation-upstream-pattern`` the upstreams whose names match.
    Names that name nothing are skipped (they may be defined later)."""
    if not definition:
        return []
    out: list[UpstreamSpec] = []
    if isinstance(one := definition.get("federation-upstream"), str):
        if one in params:
            out.append(spec_of(one, params[one]))
    elif isinstance(set_name := definition.get("federation-upstream-set"), str):
        if set_name == "all":
            out = [spec_of(n, v) for n, v in sorted(params.items())]
        else:
            for entry in sets.get(set_name) or []:
                up = entry.get("upstream")
                if up in params:
                    merged = {**params[up], **{k: v for k, v in entry.items()
                                              if k != "upstream"}}
                    out.append(spec_of(up, merged))
    elif isinstance(pat := definition.get("federation-upstream-pattern"), str):
        out = [spec_of(n, v) for n, v in sorted(params.items()) if patterns.search(pat, n)]
    return out


def masked_upstream(value: Any) -> Any:
    """An upstream's value with its URI passwords hidden (what the API shows)."""
    return U.mask_fields(value, ("uri",))
