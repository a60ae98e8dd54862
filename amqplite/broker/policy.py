"""Queue arguments and policies: validation and the effective value of each setting.

A queue argument (``x-message-ttl``) wins over the matching policy key
(``message-ttl``), as in RabbitMQ; among policies the highest priority whose
regex matches the queue name applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from mypy_extensions import mypyc_attr

from amqplite.broker import patterns

OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")
QUEUE_TYPES = ("classic", "quorum", "stream")

#: policy key -> (queue argument, kind)
SETTINGS: dict[str, tuple[str, str]] = {
    "dead-letter-exchange": ("x-dead-letter-exchange", "str"),
    "dead-letter-routing-key": ("x-dead-letter-routing-key", "str"),
    "delivery-limit": ("x-delivery-limit", "nonneg"),
    "message-ttl": ("x-message-ttl", "nonneg"),
    "expires": ("x-expires", "pos"),
    "max-length": ("x-max-length", "nonneg"),
    "max-length-bytes": ("x-max-length-bytes", "nonneg"),
    "overflow": ("x-overflow", "overflow"),
    "max-age": ("x-max-age", "age"),
    "stream-max-segment-size-bytes": ("x-stream-max-segment-size-bytes", "stream-int"),
}
#: policy keys applied to exchanges (the ``alternate-exchange`` argument wins over it)
EXCHANGE_SETTINGS: dict[str, str] = {"alternate-exchange": "str"}
#: policy keys that federate the exchanges they match (RabbitMQ's federation plugin;
#: ``links/`` acts on them): each names upstreams, at most one per policy
FEDERATION_KEYS = ("federation-upstream", "federation-upstream-set",
                   "federation-upstream-pattern")
#: every policy key applied here (to queues, exchanges or federation links)
APPLIED_KEYS = frozenset((*SETTINGS, *EXCHANGE_SETTINGS, *FEDERATION_KEYS))
_MIRRORING = "classic queue mirroring: one node has no mirrors"
_PLACEMENT = "queue placement in a cluster: one node holds every queue"
#: policy keys RabbitMQ 3.10-3.13 knows that have no effect here -> why
IGNORED_KEYS: dict[str, str] = {
    "ha-mode": _MIRRORING, "ha-params": _MIRRORING, "ha-sync-mode": _MIRRORING,
    "ha-sync-batch-size": _MIRRORING, "ha-promote-on-shutdown": _MIRRORING,
    "ha-promote-on-failure": _MIRRORING,
    "queue-master-locator": _PLACEMENT, "queue-leader-locator": _PLACEMENT,
    "initial-cluster-size": "replica count of quorum queues and streams: one node",
    "queue-mode": "lazy queues: amqplite pages message bodies to disk anyway",
    "queue-version": "classic queue storage format: amqplite keeps messages in SQLite",
    "max-in-memory-length": "quorum queues' memory limit: amqplite pages bodies by its "
                            "own window",
    "max-in-memory-bytes": "quorum queues' memory limit: amqplite pages bodies by its "
                           "own window",
    "dead-letter-strategy": "at-least-once dead lettering (quorum queues) is not "
                            "implemented: dead lettering is at-most-once",
    "consumer-timeout": "amqplite has no consumer timeout: an unacked delivery never "
                        "closes its channel",
    "max-segment-size": "RabbitMQ 3.9's name: amqplite applies "
                        "stream-max-segment-size-bytes",
    "stream-filter-size-bytes": "stream filtering (3.13) is not implemented",
}
#: key prefixes of plugins we do not act on (other than the federation-upstream keys)
IGNORED_PREFIXES: dict[str, str] = {
    "ha-": _MIRRORING, "federation-": "a federation plugin key amqplite does not use",
    "shovel-": "a shovel plugin key amqplite does not use"}
ARG_KINDS: dict[str, str] = {arg: kind for arg, kind in SETTINGS.values()}
ARG_KINDS["x-max-priority"] = "priority"
ARG_KINDS["x-queue-type"] = "qtype"
ARG_KINDS["x-single-active-consumer"] = "bool"
ARG_KINDS["x-initial-cluster-size"] = "stream-int"

#: arguments a stream refuses (RabbitMQ: "... of queue type rabbit_stream_queue")
NOT_FOR_STREAMS = ("x-max-priority", "x-message-ttl", "x-dead-letter-exchange",
                   "x-dead-letter-routing-key", "x-max-length", "x-overflow", "x-expires",
                   "x-delivery-limit", "x-single-active-consumer")


def ignored_reason(key: str) -> str | None:
    """Why a policy key RabbitMQ knows has no effect here, or None (applied or unknown)."""
    if key in APPLIED_KEYS:
        return None
    if key in IGNORED_KEYS:
        return IGNORED_KEYS[key]
    for prefix, why in IGNORED_PREFIXES.items():
        if key.startswith(prefix):
            return why
    return None


def split_definition(definition: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the keys applied here, a note per key that is not: ignored with its reason, or
    unknown). The same rule for a declared and an imported policy: neither note is an
    error, and the policy holds only what it applies."""
    kept: dict[str, Any] = {}
    notes: list[str] = []
    for key, value in definition.items():
        why = ignored_reason(key)
        if why is not None:
            notes.append(f"{key} ignored ({why})")
        elif key in APPLIED_KEYS:
            kept[key] = value
        else:
            notes.append(f"{key} ignored (unknown policy key: neither RabbitMQ 3.10-3.13 "
                         "nor amqplite has it)")
    return kept, notes


#: the vhost limits RabbitMQ has, kept as its ``vhost-limits`` runtime parameter
VHOST_LIMITS = ("max-connections", "max-queues")
VHOST_LIMITS_COMPONENT, VHOST_LIMITS_NAME = "vhost-limits", "limits"


def check_vhost_limits(value: Any) -> dict[str, int]:
    """A ``vhost-limits`` value as RabbitMQ takes it (a negative limit: none); ValueError."""
    if not isinstance(value, dict):
        raise ValueError("vhost limits must be a JSON object")
    out: dict[str, int] = {}
    for key, limit in value.items():
        if key not in VHOST_LIMITS:
            raise ValueError(f"unknown vhost limit '{key}' (known: {', '.join(VHOST_LIMITS)})")
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise ValueError(f"vhost limit '{key}' must be an integer; got {limit!r}")
        out[key] = limit
    return out


def _plain(v: Any) -> Any:
    return v.decode("utf-8", "replace") if isinstance(v, bytes | bytearray) else v


def check_value(kind: str, value: Any) -> str | None:
    """None when ``value`` suits ``kind``, else RabbitMQ-style reason text."""
    if kind == "bool":
        from amqplite.broker.errors import amqp_type

        return None if isinstance(value, bool) else f"{{unacceptable_type,{amqp_type(value)}}}"
    if kind == "stream-int" and (isinstance(value, bool) or not isinstance(value, int)):
        from amqplite.broker.errors import amqp_type  # the stream arguments' wording

        return f'"expected integer, got {amqp_type(value)}"'
    if kind == "stream-int":
        kind = "pos"
    value = _plain(value)
    if kind == "str":
        return None if isinstance(value, str) else f"{{unacceptable_type,{type(value).__name__}}}"
    if kind in ("nonneg", "pos", "priority"):
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{{unacceptable_type,{type(value).__name__}}}"
        if kind == "pos" and value <= 0:
            return f"{{value_zero,{value}}}" if value == 0 else f"{{value_negative,{value}}}"
        if value < 0:
            return f"{{value_negative,{value}}}"
        if kind == "priority" and value > 255:
            return f"{{value_too_large,{value},255}}"
        return None
    if kind == "age":
        from amqplite.broker.streamlog import parse_age

        return None if parse_age(value) is not None else "invalid_max_age"
    if kind == "overflow":
        return None if value in OVERFLOW_MODES else f"{{unknown_overflow_mode,{value}}}"
    if kind == "qtype":
        return None if value in QUEUE_TYPES else f"{{unsupported_queue_type,{value}}}"
    return None


def validate_queue_args(args: Mapping[str, Any]) -> tuple[str, str] | None:
    """First bad argument as (name, reason), or None when all are acceptable."""
    for name, value in args.items():
        kind = ARG_KINDS.get(name)
        if kind is None:
            continue
        reason = check_value(kind, value)
        if reason is not None:
            return name, reason
    if "x-dead-letter-routing-key" in args and "x-dead-letter-exchange" not in args:
        return "x-dead-letter-routing-key", "{missing_dependent_argument,x-dead-letter-exchange}"
    return None


@mypyc_attr(native_class=False)
@attrs.define
class Policy:
    name: str
    pattern: str
    definition: dict[str, Any]
    priority: int = 0
    apply_to: str = "queues"
    vhost: str = "/"

    def matches_queue(self, queue_name: str) -> bool:
        if self.apply_to not in ("queues", "all"):
            return False
        return patterns.search(self.pattern, queue_name)

    def matches_exchange(self, exchange_name: str) -> bool:
        if self.apply_to not in ("exchanges", "all"):
            return False
        return patterns.search(self.pattern, exchange_name)

    def as_dict(self) -> dict[str, Any]:
        return {"vhost": self.vhost, "name": self.name, "pattern": self.pattern,
                "apply-to": self.apply_to, "priority": self.priority,
                "definition": dict(self.definition)}


def make_policy(vhost: str, name: str, pattern: str, definition: Mapping[str, Any],
                priority: int = 0, apply_to: str = "queues", *, stored: bool = False) -> Policy:
    """Validate and build a policy; ValueError names what is wrong. A ``stored``
    policy's pattern is not checked: one RE2 refuses matches nothing."""
    if not name:
        raise ValueError("policy name must not be empty")
    why = None if stored else patterns.check(pattern)
    if why is not None:
        raise ValueError(f"policy pattern is not a valid regex: {why}")
    if apply_to not in ("queues", "exchanges", "all"):
        raise ValueError(f"apply-to must be queues, exchanges or all; got {apply_to!r}")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"priority must be an integer; got {priority!r}")
    if not definition:
        raise ValueError("policy definition must not be empty")
    clean: dict[str, Any] = {}
    why = federation_error(definition)
    if why is not None:
        raise ValueError(why)
    for key, value in definition.items():
        if key in FEDERATION_KEYS:
            clean[key] = _plain(value)
            continue
        kind = SETTINGS[key][1] if key in SETTINGS else EXCHANGE_SETTINGS.get(key)
        if kind is None:
            raise ValueError(f"unknown policy definition key {key!r} "
                             f"(known: {', '.join(sorted(APPLIED_KEYS))})")
        reason = check_value(kind, value)
        if reason is not None:
            raise ValueError(f"invalid value {value!r} for policy key {key!r}: {reason}")
        clean[key] = _plain(value)
    return Policy(name, pattern, clean, priority, apply_to, vhost)


def federation_error(definition: Mapping[str, Any]) -> str | None:
    """Why a definition's federation keys are refused (RabbitMQ's wording), or None."""
    keys = [k for k in FEDERATION_KEYS if k in definition]
    if len(keys) > 1:
        return ("cannot specify federation-upstream, federation-upstream-set or "
                "federation-upstream-pattern together")
    for k in keys:
        v = _plain(definition[k])
        if not isinstance(v, str):
            return f"{v!r} is not a valid {k.removesuffix('-set')} name"
        if k == "federation-upstream-pattern" and (why := patterns.check(v)) is not None:
            return f"could not compile pattern {v} to a regular expression: {why}"
    return None


def effective(args: Mapping[str, Any], policy: Policy | None, key: str) -> Any:
    """Queue argument first, then the policy's value, else None."""
    arg = SETTINGS[key][0]
    if arg in args:
        return _plain(args[arg])
    if policy is not None and key in policy.definition:
        return policy.definition[key]
    return None
