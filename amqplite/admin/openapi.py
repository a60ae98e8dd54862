"""The OpenAPI 3.1 document of the admin API, generated from the route table.

Paths and operations come from :data:`amqplite.admin.routes.ROUTES`, so the
document cannot list a route the server lacks or miss one it has; the
schemas below are written by hand and the tests validate live responses
against them.
"""

from __future__ import annotations

import re
from typing import Any

from amqplite import __version__
from amqplite.admin.listing import LIST_QUERY, MAX_PAGE_SIZE
from amqplite.admin.routes import ROUTES, Route, is_list
from amqplite.admin.views import OVERVIEW_STATS, QUEUE_FIELDS, SHELL_STATS
from amqplite.broker.model import CHANNEL_STATS

S = dict[str, Any]


def _ref(name: str) -> S:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(props: S, required: list[str] | None = None, extra: bool = True) -> S:
    out: S = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    if not extra:
        out["additionalProperties"] = False
    return out


STR: S = {"type": "string"}
NSTR: S = {"type": ["string", "null"]}
INT: S = {"type": "integer"}
#: an integer written as a string, as rabbitmqadmin sends numbers
NUMSTR: S = {"type": "string", "pattern": "^ *[0-9]+ *$"}
NINT: S = {"type": ["integer", "null"]}
BOOL: S = {"type": "boolean"}
NUM: S = {"type": "number"}
ANYOBJ: S = {"type": "object"}
RATE: S = _obj({"rate": NUM}, ["rate"])
#: RabbitMQ's HTTP contexts (overview and nodes): the port is a string, as RabbitMQ's
CONTEXTS: S = {"type": "array", "items": _obj(
    {"node": STR, "description": STR, "path": STR, "ip": STR, "port": STR,
     "ssl_opts": {"type": "array"}}, ["node", "description", "path", "port"])}


def _stats(names: tuple[str, ...], optional: tuple[str, ...] = ()) -> S:
    """message_stats: each count and its ``<name>_details`` rate, as RabbitMQ's."""
    props: S = {}
    for k in (*names, *optional):
        props[k], props[k + "_details"] = INT, RATE
    return _obj(props, [*names, *(k + "_details" for k in names)])


#: what every channel, vhost and overview message_stats has (RabbitMQ's channel fields)
_CHANNEL_FIELDS = (*CHANNEL_STATS, "deliver_get")
CHANNEL_MSG_STATS = _stats(_CHANNEL_FIELDS)
QUEUE_MSG_STATS = _stats((*QUEUE_FIELDS, "deliver_get"))
#: the node's adds disk reads and writes, dead-lettered and expired (a management
#: user's overview has its vhosts' channel fields only)
OVERVIEW_MSG_STATS = _stats(_CHANNEL_FIELDS, tuple(
    k for k in (*OVERVIEW_STATS, *SHELL_STATS) if k not in _CHANNEL_FIELDS))
FILTER: S = {
    "description": "Field -> shell-style glob; all must match. Fields: reason, queue, "
                   "origin_queue, exchange, routing_key, message_id, content_type, type, "
                   "app_id, correlation_id, body, header.<name>. A list of 'field=glob' "
                   "strings is accepted too.",
    "anyOf": [{"type": "object", "additionalProperties": STR},
              {"type": "array", "items": STR}],
}

_MEMORY: dict[str, S] = {
    "mem_used": NINT, "mem_limit": NINT, "mem_alarm": BOOL, "mem_paging": BOOL,
    "mem_paging_limit": NINT, "mem_available": NINT, "memory_high_watermark": STR,
}

SCHEMAS: dict[str, S] = {
    "Error": _obj({"error": STR, "reason": STR}, ["error", "reason"]),
    "Metrics": {"type": "string", "description": "Prometheus text exposition format 0.0.4"},
    "Node": _obj({
        "name": STR, "type": STR, "running": BOOL, "uptime": INT, "os_pid": STR,
        "processors": INT, "mem_used": INT, "mem_limit": INT, "mem_alarm": BOOL,
        "disk_free": NINT, "disk_free_limit": NINT, "disk_free_alarm": BOOL, "fd_used": INT,
        "fd_total": INT, "sockets_used": INT, "sockets_total": INT,
        "partitions": {"type": "array"}, "exchange_types": {"type": "array"},
        "enabled_plugins": {"type": "array", "items": STR}, "contexts": CONTEXTS,
    }, ["name", "type", "running", "uptime", "mem_used", "mem_limit", "mem_alarm",
        "disk_free_alarm", "fd_used", "fd_total", "partitions", "contexts"]),
    "ClusterName": _obj({"name": STR}, ["name"]),
    "Extension": ANYOBJ,
    "OpenAPI": _obj({"openapi": STR, "paths": ANYOBJ}, ["openapi", "paths"]),
    "Overview": _obj({
        "product_name": STR, "product_version": STR, "management_version": STR,
        "rabbitmq_version": STR, "erlang_version": STR, "node": STR, "cluster_name": STR,
        "statistics_db_node": STR, "rates_mode": STR, "exchange_types": {"type": "array"},
        "uptime": INT,
        "message_stats": OVERVIEW_MSG_STATS,
        "queue_totals": _obj({"messages": INT, "messages_ready": INT,
                              "messages_unacknowledged": INT},
                             ["messages", "messages_ready", "messages_unacknowledged"]),
        "object_totals": _obj({k: INT for k in ("connections", "channels", "exchanges",
                                                "queues", "consumers")},
                              ["connections", "channels", "exchanges", "queues", "consumers"]),
        "listeners": {"type": "array", "items": _obj(
            {"node": STR, "protocol": STR, "ip_address": STR, "port": INT})},
        "disk_free_alarm": BOOL, "disk_free": NINT, "disk_free_limit": NINT,
        **_MEMORY,
        "alarms": {"type": "array", "items": ANYOBJ}, "contexts": CONTEXTS,
    }, ["product_name", "product_version", "management_version", "rabbitmq_version", "node",
        "message_stats", "queue_totals", "object_totals", "contexts"]),
    "Memory": _obj(_MEMORY, ["mem_used", "mem_limit", "mem_alarm"]),
    "MemoryPut": _obj({"memory_high_watermark": {
        "description": "A fraction of RAM (0.4) or a size (200MB, 1GiB, bytes)",
        "anyOf": [STR, NUM]}}, ["memory_high_watermark"]),
    "HealthCheck": _obj({
        "status": {"enum": ["ok", "failed"]}, "reason": STR,
        "alarms": {"type": "array", "items": _obj({"node": STR, "resource": STR,
                                                   "reason": STR}, ["node", "resource"])},
    }, ["status"]),
    "User": _obj({"name": STR, "tags": {"type": "array", "items": STR}, "is_admin": BOOL,
                  "permitted": {"type": "array", "items": STR}},
                 ["name", "tags", "is_admin"]),
    "VHost": _obj({"name": STR, "description": STR, "tags": {"type": "array", "items": STR},
                   "metadata": _obj({"description": STR, "tags": {"type": "array"}}),
                   "tracing": BOOL, "default_queue_type": STR,
                   "messages": INT, "messages_ready": INT,
                   "messages_unacknowledged": INT, "message_stats": CHANNEL_MSG_STATS},
                  ["name", "tracing"]),
    "VHostPut": _obj({"description": STR, "tracing": {"anyOf": [BOOL, STR],
                                                       "description": "false only"},
                      "tags": {"anyOf": [STR, {"type": "array"}]}}),
    "UserRecord": _obj({"name": STR, "password_hash": STR, "hashing_algorithm": STR,
                        "tags": {"type": "array", "items": STR}, "limits": ANYOBJ},
                       ["name", "password_hash", "hashing_algorithm", "tags"]),
    "UserPut": _obj({"password": STR, "password_hash": STR, "hashing_algorithm": STR,
                     "tags": {"anyOf": [STR, {"type": "array", "items": STR}]}}),
    "Permission": _obj({"user": STR, "vhost": STR, "configure": STR, "write": STR,
                        "read": STR}, ["user", "vhost", "configure", "write", "read"]),
    "PermissionPut": _obj({"configure": STR, "write": STR, "read": STR}),
    "TopicPermission": _obj({"user": STR, "vhost": STR, "exchange": STR, "write": STR,
                             "read": STR}, ["user", "vhost", "exchange", "write", "read"]),
    "TopicPermissionPut": _obj({"exchange": STR, "write": STR, "read": STR}, ["exchange"]),
    "Definitions": _obj({
        "users": {"type": "array", "items": ANYOBJ},
        "vhosts": {"type": "array", "items": ANYOBJ},
        "permissions": {"type": "array", "items": ANYOBJ},
        "policies": {"type": "array", "items": ANYOBJ},
        "exchanges": {"type": "array", "items": ANYOBJ},
        "queues": {"type": "array", "items": ANYOBJ},
        "bindings": {"type": "array", "items": ANYOBJ},
    }),
    "Connection": _obj({
        "name": STR, "node": STR, "type": STR, "user": NSTR, "user_provided_name": NSTR,
        "vhost": NSTR, "state": STR, "protocol": STR, "ssl": BOOL, "peer_host": STR,
        "peer_port": INT, "host": NSTR, "port": NINT, "channels": INT, "channel_max": INT,
        "frame_max": INT, "timeout": INT, "connected_at": INT, "recv_oct": INT,
        "send_oct": INT, "client_properties": ANYOBJ,
    }, ["name", "node", "user", "vhost", "state", "peer_host", "peer_port", "channels",
        "timeout", "connected_at", "client_properties"]),
    "Channel": _obj({
        "name": STR, "number": INT, "user": NSTR, "vhost": NSTR,
        "connection_details": _obj({"name": STR, "peer_host": STR, "peer_port": INT}),
        "consumer_count": INT, "messages_unacknowledged": INT, "prefetch_count": INT,
        "global_prefetch_count": INT, "confirm": BOOL, "transactional": BOOL, "state": STR,
        "node": STR, "messages_uncommitted": INT, "acks_uncommitted": INT,
        "message_stats": CHANNEL_MSG_STATS,
    }, ["name", "node", "number", "connection_details", "consumer_count",
        "messages_unacknowledged", "prefetch_count", "state", "message_stats"]),
    "Consumer": _obj({
        "consumer_tag": STR,
        "queue": _obj({"name": STR, "vhost": STR}, ["name", "vhost"]),
        "channel_details": _obj({"name": STR, "number": INT, "connection_name": STR,
                                 "peer_host": STR, "peer_port": INT, "node": STR,
                                 "user": NSTR}),
        "ack_required": BOOL, "exclusive": BOOL, "prefetch_count": INT,
        "messages_unacknowledged": INT, "active": BOOL, "arguments": ANYOBJ,
    }, ["consumer_tag", "queue", "channel_details", "ack_required", "prefetch_count"]),
    "Exchange": _obj({
        "name": STR, "vhost": STR, "type": STR, "durable": BOOL, "auto_delete": BOOL,
        "internal": BOOL, "arguments": ANYOBJ,
        "retained": _obj({"messages": INT, "bytes": INT}, ["messages", "bytes"]),
    }, ["name", "vhost", "type", "durable", "auto_delete", "internal", "arguments"]),
    "ExchangePut": _obj({
        "type": {"enum": ["direct", "fanout", "topic", "headers", "x-recent-history", "x-lvc"]},
        "durable": BOOL,
        "auto_delete": BOOL, "internal": BOOL, "arguments": ANYOBJ,
    }, ["type"]),
    "Queue": _obj({
        "name": STR, "vhost": STR, "node": STR, "type": STR, "durable": BOOL,
        "auto_delete": BOOL, "exclusive": BOOL, "arguments": ANYOBJ, "state": STR,
        "messages": INT,
        "messages_ready": INT, "messages_unacknowledged": INT, "consumers": INT,
        "message_bytes": INT, "message_bytes_ready": INT, "message_bytes_unacknowledged": INT,
        "policy": NSTR, "effective_policy_definition": ANYOBJ,
        "message_stats": QUEUE_MSG_STATS,
        "stream": _obj({"first_offset": INT, "last_offset": INT, "messages": INT,
                        "segments": INT, "size_bytes": INT,
                        "consumer_groups": {"type": "array", "items": _obj(
                            {"name": STR, "members": INT, "active": NSTR, "offset": NINT},
                            ["name", "members", "active", "offset"])}},
                       ["first_offset", "last_offset", "messages", "segments", "size_bytes"]),
    }, ["name", "vhost", "node", "durable", "auto_delete", "exclusive", "arguments",
        "messages",
        "messages_ready", "messages_unacknowledged", "consumers", "message_bytes", "policy",
        "effective_policy_definition", "message_stats"]),
    "StreamEntries": _obj({
        "entries": {"type": "array", "items": _obj({
            "offset": INT, "timestamp": STR, "exchange": STR, "routing_key": STR,
            "message_id": NSTR, "properties": ANYOBJ, "payload": NSTR,
            "payload_bytes": INT, "payload_encoding": STR,
            "truncated": {"type": "boolean", "description": "the payload shown is shorter"},
        }, ["offset", "timestamp", "exchange", "routing_key", "properties", "payload",
            "payload_bytes", "payload_encoding"])},
        "next": {"type": "integer", "description": "the offset to read from next"},
        "first_offset": INT, "last_offset": INT,
        "max_bytes_reached": {"type": "boolean",
                              "description": "the page stopped at admin_peek_max_bytes"},
    }, ["entries", "next", "first_offset", "last_offset"]),
    "SuperStream": _obj({
        "name": STR, "vhost": STR, "routing": {"enum": ["key", "hash"]},
        "partitions": {"type": "array", "items": _obj(
            {"name": STR, "routing_key": STR, "order": INT}, ["name", "routing_key", "order"])},
    }, ["name", "vhost", "routing", "partitions"]),
    "SuperStreamPut": _obj({
        "partitions": {"type": "integer", "minimum": 1,
                       "description": "NAME-0..NAME-(N-1), routing keys 0..N-1"},
        "routing_keys": {"type": "array", "items": STR,
                         "description": "one partition NAME-<key> per key (instead of "
                                        "partitions)"},
        "arguments": {"type": "object", "description": "stream arguments for every "
                      "partition: x-max-length-bytes, x-max-age, "
                      "x-stream-max-segment-size-bytes"},
        "routing": {"enum": ["key", "hash"], "default": "key",
                    "description": "hash: the exchange routes by murmur3 of the routing "
                                   "key over the partitions (x-super-stream-routing)"},
    }),
    "QueuePut": _obj({"durable": BOOL, "auto_delete": BOOL, "arguments": ANYOBJ,
                      "node": {"type": "string", "description": "this node only"}}),
    "Binding": _obj({
        "source": STR, "vhost": STR, "destination": STR,
        "destination_type": {"enum": ["queue", "exchange"]}, "routing_key": STR,
        "arguments": ANYOBJ, "properties_key": STR,
    }, ["source", "vhost", "destination", "destination_type", "routing_key", "arguments",
        "properties_key"]),
    "BindingPost": _obj({"routing_key": STR, "arguments": ANYOBJ}),
    "VHostLimit": _obj({"vhost": STR, "value": ANYOBJ}, ["vhost", "value"]),
    "VHostLimitPut": _obj({"value": INT}, ["value"]),
    "Policy": _obj({
        "vhost": STR, "name": STR, "pattern": STR,
        "apply-to": {"enum": ["queues", "exchanges", "all"]}, "priority": INT,
        "definition": ANYOBJ,
    }, ["vhost", "name", "pattern", "apply-to", "priority", "definition"]),
    "PolicyPut": _obj({
        "pattern": STR, "definition": ANYOBJ, "priority": INT,
        "apply-to": {"enum": ["queues", "exchanges", "all"]},
    }, ["pattern", "definition"]),
    "Parameter": _obj({"component": STR, "vhost": STR, "name": STR,
                       "value": {"type": ["object", "array"]}},
                      ["component", "vhost", "name", "value"]),
    "KafkaGroup": _obj({
        "vhost": STR, "name": STR, "state": {"enum": [
            "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]},
        "protocol_type": STR, "protocol": STR, "generation": INT, "leader": NSTR,
        "lag": {"type": "integer", "description": "sum of the partitions' lag"},
        "members": {"type": "array", "items": _obj({
            "member_id": STR, "group_instance_id": NSTR, "client_id": STR, "client_host": STR,
            "assignment": {"type": ["array", "null"], "items": _obj(
                {"topic": STR, "partitions": {"type": "array", "items": INT}},
                ["topic", "partitions"])}},
            ["member_id", "client_id", "client_host", "assignment"])},
        "partitions": {"type": "array", "items": _obj({
            "topic": STR, "partition": INT,
            "committed_offset": {"type": "integer", "description": "-1: none committed"},
            "metadata": STR, "committed_at": NINT, "log_start_offset": NINT,
            "log_end_offset": NINT,
            "lag": {"type": ["integer", "null"],
                    "description": "log end offset - committed offset; null: no commit"},
            "member_id": NSTR, "client_id": NSTR, "client_host": NSTR},
            ["topic", "partition", "committed_offset", "log_end_offset", "lag"])},
    }, ["vhost", "name", "state", "protocol_type", "protocol", "lag", "members",
        "partitions"]),
    "Shovel": _obj({"name": STR, "vhost": STR, "type": STR,
                    "state": {"enum": ["starting", "running", "terminated"]},
                    "reason": STR, "src_uri": STR, "dest_uri": STR, "forwarded": INT},
                   ["name", "vhost", "type", "state"]),
    "FederationLink": _obj({
        "node": STR, "exchange": STR, "upstream_exchange": STR, "type": STR, "vhost": STR,
        "upstream": STR, "id": STR, "status": {"enum": ["starting", "running", "error"]},
        "local_connection": STR, "uri": STR, "timestamp": STR, "error": STR,
        "forwarded": INT}, ["exchange", "vhost", "upstream", "id", "status"]),
    "ParameterPut": _obj({"value": {"type": ["object", "array"]}, "component": STR,
                          "vhost": STR, "name": STR},
                         ["value"]),
    "PublishRequest": _obj({
        "routing_key": STR, "payload": STR,
        "payload_encoding": {"enum": ["string", "base64"]},
        "properties": _ref("Properties"),
    }, ["routing_key", "payload"]),
    "PublishResult": _obj({"routed": BOOL}, ["routed"]),
    "Properties": _obj({
        "content_type": STR, "content_encoding": STR, "headers": ANYOBJ,
        "delivery_mode": INT, "priority": INT, "correlation_id": STR, "reply_to": STR,
        "expiration": STR, "message_id": STR, "timestamp": INT, "type": STR, "user_id": STR,
        "app_id": STR, "cluster_id": STR,
    }),
    "Death": _obj({
        "reason": NSTR, "queue": NSTR, "exchange": NSTR,
        "routing_keys": {"type": "array", "items": NSTR}, "count": INT,
        "first_death_at": NSTR, "last_death_at": NSTR, "origin_queue": NSTR,
        "origin_exchange": NSTR, "origin_reason": NSTR,
        "origin_routing_keys": {"type": "array", "items": NSTR},
        "deaths": {"type": "array", "items": ANYOBJ},
    }, ["reason", "queue", "exchange", "routing_keys", "count", "first_death_at",
        "origin_queue", "deaths"]),
    "GetRequest": _obj({
        # as RabbitMQ's: a number or a string of one (rabbitmqadmin sends "1")
        "count": {"oneOf": [{"type": "integer", "minimum": 0}, NUMSTR]},
        "ackmode": {"enum": ["ack_requeue_true", "ack_requeue_false", "reject_requeue_true",
                             "reject_requeue_false"]},
        "encoding": {"enum": ["auto", "base64"]},
        "truncate": {"oneOf": [{"type": "integer", "minimum": 0}, NUMSTR]},
    }),
    "Message": _obj({
        "payload": NSTR, "payload_encoding": {"enum": ["string", "base64", "none"]},
        "payload_bytes": INT, "redelivered": BOOL, "exchange": STR, "routing_key": STR,
        "message_id": STR, "message_count": INT, "properties": _ref("Properties"),
        # only on a dead-lettered message: a null breaks rabbitmqadmin's table
        "death": _ref("Death"),
    }, ["payload", "payload_encoding", "payload_bytes", "redelivered", "exchange",
        "routing_key", "properties"]),
    "RetainedMessage": {"allOf": [_ref("Message"), _obj({"key": STR, "stored": BOOL},
                                                        ["key", "stored"])]},
    "RetainedCleared": _obj({"removed": INT}, ["removed"]),
    "PeekedMessage": {"allOf": [_ref("Message"), _obj({
        "index": INT, "position": INT, "delivery_count": INT, "expires_at": NSTR,
        "truncated": {"type": "boolean", "description": "the payload shown is shorter than "
                      "payload_bytes (truncate, or the peek's byte cap)"},
    }, ["index", "position", "delivery_count"])]},
    "TraceRow": _obj({
        "id": INT, "ts_us": INT, "time": STR, "event": STR, "vhost": STR, "exchange": NSTR,
        "routing_key": NSTR, "queue": NSTR, "message_id": NSTR, "message_key": NINT,
        "consumer_tag": NSTR, "attempt": NINT, "size": NINT, "reason": NSTR,
    }, ["id", "ts_us", "time", "event", "vhost", "queue", "message_id", "reason"]),
    "MoveRequest": _obj({
        "to_queue": STR, "to_exchange": STR,
        "routing_key": {"type": "string", "description": "default: each message's own"},
        "limit": {"type": "integer", "minimum": 1}, "filter": FILTER,
    }),
    "ReplayRequest": _obj({
        "queue": {"type": "string", "description": "send every message here instead"},
        "to": {"enum": ["origin", "exchange"],
               "description": "origin: the queue it first died in (default); exchange: "
                              "re-route through the exchange and routing keys it had"},
        "limit": {"type": "integer", "minimum": 1}, "filter": FILTER,
    }),
    "ImportReport": _obj({
        "ignored": {"type": "array", "items": STR},
        "skipped": {"type": "array", "items": STR},
    }, ["ignored", "skipped"]),
    "MoveResult": _obj({
        "moved": INT, "skipped": INT, "remaining": INT,
        "errors": {"type": "array", "items": _obj(
            {"message_id": STR, "position": INT, "reason": STR}, ["reason"])},
    }, ["moved", "skipped", "errors", "remaining"]),
}

_QUERY: dict[str, S] = {
    "if-unused": {"type": "boolean"}, "if-empty": {"type": "boolean"},
    "limit": {"type": "integer", "minimum": 0, "default": 100},
    "offset": {"type": "integer", "minimum": 0, "default": 0},
    "encoding": {"enum": ["auto", "base64"], "default": "auto"},
    "exchange": {"type": "string"},
    "truncate": {"type": "integer", "minimum": 0},
    "from": {"type": "string", "default": "first",
             "description": "first, last, next, an offset, an interval (10m) or a time "
                            "(ISO 8601, or @<unix seconds>)"},
    "count": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
    "filter": {"type": "string", "description": "field=glob (repeatable or comma-separated)"},
    "columns": {"type": "string", "description": "comma-separated fields to keep; dotted "
                "paths reach nested ones (message_stats.publish)"},
    "sort": {"type": "string", "description": "field (or dotted path) to sort by"},
    "sort_reverse": {"type": "boolean"},
    "page": {"type": "integer", "minimum": 1,
             "description": "answer a page object instead of the whole list"},
    "page_size": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE, "default": 100},
    "name": {"type": "string", "description": "with page: keep items whose name contains "
             "this (case-insensitive), or matches it as a regex with use_regex"},
    "use_regex": {"type": "boolean"},
}

_ERRORS = {
    400: "Bad request (invalid JSON, bad field, precondition failed)",
    401: "Missing or wrong credentials (with WWW-Authenticate), or, without it, no access "
         "to this vhost or object, or refused by the user's AMQP permissions",
    403: "Authenticated user lacks the tag this needs (administrator, policymaker or "
         "monitoring)",
    404: "No such vhost, queue, exchange, connection, binding or policy",
    409: "Resource locked (exclusive queue of another connection)",
    415: "A body (or a POST without X-Requested-With) not sent as application/json",
    500: "The store did not commit the change; nothing was changed",
}


def _response(schema: str | None, text: str, content: str = "application/json") -> S:
    if schema is None:
        return {"description": text}
    s = ({"type": "array", "items": _ref(schema[1:-1])} if schema.startswith("[")
         else _ref(schema))
    return {"description": text, "content": {content: {"schema": s}}}


def _paged(schema: str) -> S:
    """A list answer: the array, or RabbitMQ's page object when ?page= is given."""
    items: S = {"type": "array", "items": _ref(schema[1:-1])}
    page = _obj({"filtered_count": INT, "item_count": INT, "items": items, "page": INT,
                 "page_count": INT, "page_size": INT, "total_count": INT},
                ["filtered_count", "item_count", "items", "page", "page_count", "page_size",
                 "total_count"])
    return {"description": "Success (a page object with ?page=)",
            "content": {"application/json": {"schema": {"anyOf": [items, page]}}}}



def operation_id(r: Route) -> str:
    return r.handler if sum(1 for x in ROUTES if x.handler == r.handler) == 1 else (
        r.handler + "_" + "_".join(re.findall(r"\{(\w+)\}", r.path)))


def _operation(r: Route) -> S:
    params = [{"name": p, "in": "path", "required": True, "schema": STR}
              for p in re.findall(r"\{(\w+)\}", r.path)]
    query = [*r.query, *(q for q in LIST_QUERY if is_list(r) and q not in r.query)]
    if r.method == "GET" and not is_list(r) and r.response and r.content == "application/json":
        query.append("columns")
    params += [{"name": q, "in": "query", "required": False, "schema": _QUERY[q]}
               for q in query]
    responses: S = {str(r.status): _paged(r.response) if is_list(r) and r.response else
                    _response(r.response, "Success", r.content)}
    if r.health:
        responses["503"] = _response(r.response, "The check failed")
    for extra in r.also:
        responses[str(extra)] = _response(
            None, "Already existed; updated" if r.method == "PUT" else "Nothing to report")
    errs = set()
    if not r.public:
        errs.add(401)
    if r.write or r.needs:
        errs.add(403)
    if "{" in r.path:
        errs.add(404)
    if r.body or query or (r.health and "{" in r.path):
        errs.add(400)
    if r.write and "{" in r.path:
        errs |= {400, 409}
    if r.write:
        errs |= {415, 500}
    for code in sorted(errs):
        responses[str(code)] = _response("Error", _ERRORS[code])
    op: S = {"operationId": operation_id(r), "summary": r.summary, "tags": [r.tag],
             "responses": responses}
    if params:
        op["parameters"] = params
    if r.body:
        op["requestBody"] = {"required": False,
                             "content": {"application/json": {"schema": _ref(r.body)}}}
    if r.public:
        op["security"] = []
    return op


def document() -> S:
    paths: dict[str, S] = {}
    for r in ROUTES:
        paths.setdefault(r.path, {})[r.method.lower()] = _operation(r)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "amqplite admin API",
            "version": __version__,
            "description": "Modelled on RabbitMQ's management HTTP API. The vhost '/' is "
                           "written %2F in paths; the default exchange is amq.default.",
        },
        "servers": [{"url": "/"}],
        "security": [{"basic": []}],
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
        },
    }
