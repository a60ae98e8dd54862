"""The admin API's route table: paths, handlers, schemas.

One table drives the HTTP router (:mod:`amqplite.admin.http`) and the OpenAPI
document (:mod:`amqplite.admin.openapi`); it imports neither, so neither
imports the other through it.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["ROUTES", "VH", "Route", "is_list"]


@attrs.define(frozen=True)
class Route:
    method: str
    path: str
    handler: str
    summary: str
    write: bool = False
    public: bool = False
    #: request body schema name (components/schemas)
    body: str | None = None
    #: success body schema name; "[Name]" for an array of Name; None for no body
    response: str | None = None
    status: int = 200
    query: tuple[str, ...] = ()
    #: extra success status (PUT: 201 created / 204 updated)
    also: tuple[int, ...] = ()
    tag: str = "broker"
    #: a health check: 503 with the same body schema when it fails
    health: bool = False
    #: media type of the success body
    content: str = "application/json"
    #: the user tag the route needs (RabbitMQ's meaning); "" = administrator for
    #: writes, management (any management-ish tag, limited to the user's vhosts) for reads
    needs: str = ""


def is_list(r: Route) -> bool:
    """GET routes answering an array take RabbitMQ's list query parameters."""
    return r.method == "GET" and r.response is not None and r.response.startswith("[")


def _r(method: str, path: str, handler: str, summary: str, **kw: Any) -> Route:
    return Route(method, path, handler, summary, **kw)


VH = "/api/{kind}/{vhost}"
ROUTES: list[Route] = [
    _r("GET", "/api/openapi.json", "openapi", "This OpenAPI document", public=True,
       response="OpenAPI", tag="meta"),
    _r("GET", "/metrics", "metrics",
       "Prometheus metrics, RabbitMQ's names; queue metrics summed (unauthenticated, as "
       "RabbitMQ serves them)", public=True, response="Metrics", content="text/plain",
       tag="metrics"),
    _r("GET", "/metrics/per-object", "metrics_per_object",
       "Prometheus metrics with one series per queue (labels vhost, queue)", public=True,
       response="Metrics", content="text/plain", tag="metrics"),
    _r("GET", "/api/overview", "get_overview", "Broker version, totals and message rates",
       response="Overview", tag="meta"),
    _r("GET", "/api/nodes", "list_nodes", "The node (amqplite is one process: one node)",
       response="[Node]", tag="nodes", needs="monitoring"),
    _r("GET", "/api/nodes/{name}", "get_node", "One node by name", response="Node",
       tag="nodes", needs="monitoring"),
    _r("GET", "/api/cluster-name", "cluster_name", "The cluster name", response="ClusterName",
       tag="nodes"),
    _r("GET", "/api/extensions", "extensions", "Management UI extensions (none)",
       response="[Extension]", tag="nodes"),
    _r("GET", "/api/healthchecks/node", "health_node",
       "RabbitMQ's older node health check: ok unless an alarm is in effect",
       response="HealthCheck", health=True, tag="health"),
    _r("GET", "/api/healthchecks/node/{name}", "health_named_node",
       "The older node health check for a named node", response="HealthCheck",
       health=True, tag="health"),
    _r("GET", "/api/health/checks/alarms", "health_alarms",
       "200 when no resource alarm is in effect, else 503 listing them",
       response="HealthCheck", health=True, tag="health"),
    _r("GET", "/api/health/checks/local-alarms", "health_local_alarms",
       "As /api/health/checks/alarms (one node: local is all)",
       response="HealthCheck", health=True, tag="health"),
    _r("GET", "/api/health/checks/port-listener/{port}", "health_port_listener",
       "200 when something of this node listens on the TCP port (AMQP or admin)",
       response="HealthCheck", health=True, tag="health"),
    _r("GET", "/api/health/checks/protocol-listener/{protocol}", "health_protocol_listener",
       "200 when this node serves the protocol (amqp091, http)",
       response="HealthCheck", health=True, tag="health"),
    _r("GET", "/api/health/checks/virtual-hosts", "health_virtual_hosts",
       "200 when every virtual host is up", response="HealthCheck", health=True,
       tag="health"),
    _r("GET", "/api/health/checks/node-is-quorum-critical", "health_quorum_critical",
       "200: stopping this node never costs a quorum (no replicas)",
       response="HealthCheck", health=True, tag="health"),
    _r("GET", "/api/aliveness-test/{vhost}", "aliveness_test",
       "Declare queue aliveness-test, publish a message and get it back",
       response="HealthCheck", health=True, tag="health"),
    _r("GET", "/api/node/memory", "get_memory",
       "Memory use, the high watermark, the alarm and the paging signal (amqplite)",
       response="Memory", tag="meta", needs="monitoring"),
    _r("PUT", "/api/node/memory", "set_memory_high_watermark",
       "Change memory_high_watermark at run time (rabbitmqctl set_vm_memory_high_watermark)",
       write=True, body="MemoryPut", response="Memory", tag="meta"),
    _r("GET", "/api/whoami", "whoami", "The authenticated user", response="User", tag="meta"),
    _r("GET", "/api/vhosts", "list_vhosts", "Virtual hosts", response="[VHost]", tag="vhosts"),
    _r("GET", "/api/vhosts/{vhost}", "get_vhost", "One virtual host", response="VHost",
       tag="vhosts"),
    _r("PUT", "/api/vhosts/{vhost}", "put_vhost",
       "Create a virtual host (its creator gets full permissions in it)", write=True,
       body="VHostPut", status=201, also=(204,), tag="vhosts"),
    _r("DELETE", "/api/vhosts/{vhost}", "delete_vhost",
       "Delete a virtual host, everything in it, and close its connections (320)",
       write=True, status=204, tag="vhosts"),
    _r("GET", "/api/vhosts/{vhost}/permissions", "vhost_permissions",
       "Permissions in one virtual host", response="[Permission]", tag="vhosts",
       needs="administrator"),
    _r("GET", "/api/users", "list_users", "Users", response="[UserRecord]", tag="users",
       needs="administrator"),
    _r("GET", "/api/users/{user}", "get_user", "One user", response="UserRecord",
       tag="users", needs="administrator"),
    _r("PUT", "/api/users/{user}", "put_user",
       "Create or update a user (password or password_hash, tags)", write=True,
       body="UserPut", status=201, also=(204,), tag="users"),
    _r("DELETE", "/api/users/{user}", "delete_user",
       "Delete a user, its permissions, and close its connections (320)", write=True,
       status=204, tag="users"),
    _r("GET", "/api/users/{user}/permissions", "user_permissions",
       "One user's permissions", response="[Permission]", tag="users",
       needs="administrator"),
    _r("GET", "/api/permissions", "list_permissions", "All permissions",
       response="[Permission]", tag="users", needs="administrator"),
    _r("GET", "/api/permissions/{vhost}/{user}", "get_permission",
       "A user's permissions in a vhost", response="Permission", tag="users",
       needs="administrator"),
    _r("PUT", "/api/permissions/{vhost}/{user}", "put_permission",
       "Set a user's configure/write/read expressions in a vhost", write=True,
       body="PermissionPut", status=201, also=(204,), tag="users"),
    _r("DELETE", "/api/permissions/{vhost}/{user}", "delete_permission",
       "Clear a user's permissions in a vhost", write=True, status=204, tag="users"),
    _r("GET", "/api/topic-permissions", "list_topic_permissions", "All topic permissions",
       response="[TopicPermission]", tag="users", needs="administrator"),
    _r("GET", "/api/topic-permissions/{vhost}/{user}", "get_topic_permission",
       "A user's topic permissions in a vhost, one per exchange",
       response="[TopicPermission]", tag="users", needs="administrator"),
    _r("PUT", "/api/topic-permissions/{vhost}/{user}", "put_topic_permission",
       "Set a user's write/read expressions for the routing keys of one topic exchange",
       write=True, body="TopicPermissionPut", status=201, also=(204,), tag="users"),
    _r("DELETE", "/api/topic-permissions/{vhost}/{user}", "delete_topic_permission",
       "Clear a user's topic permissions in a vhost (?exchange=: only that exchange's)",
       write=True, status=204, query=("exchange",), tag="users"),
    _r("GET", "/api/users/{user}/topic-permissions", "user_topic_permissions",
       "One user's topic permissions", response="[TopicPermission]", tag="users",
       needs="administrator"),
    _r("GET", "/api/vhosts/{vhost}/topic-permissions", "vhost_topic_permissions",
       "Topic permissions in one virtual host", response="[TopicPermission]",
       tag="vhosts", needs="administrator"),
    _r("GET", "/api/definitions", "get_definitions",
       "Export users, vhosts, permissions, policies, exchanges, queues, bindings "
       "(RabbitMQ's format)", response="Definitions", tag="definitions",
       needs="administrator"),
    _r("POST", "/api/definitions", "post_definitions",
       "Import definitions (RabbitMQ's format; password_hash as "
       "rabbit_password_hashing_sha256): all of it or nothing; 200 lists what was "
       "ignored or skipped, 204 when nothing was", write=True, body="Definitions",
       response="ImportReport", status=200, also=(204,), tag="definitions"),
    _r("GET", "/api/definitions/{vhost}", "get_vhost_definitions",
       "Export one vhost's policies, exchanges, queues and bindings",
       response="Definitions", tag="definitions", needs="administrator"),
    _r("POST", "/api/definitions/{vhost}", "post_vhost_definitions",
       "Import policies, exchanges, queues and bindings into one vhost (all or nothing)",
       write=True, body="Definitions", response="ImportReport", status=200, also=(204,),
       tag="definitions"),
    _r("GET", "/api/connections", "list_connections", "Open client connections",
       response="[Connection]", tag="connections"),
    _r("GET", "/api/connections/{name}", "get_connection", "One connection",
       response="Connection", tag="connections"),
    _r("DELETE", "/api/connections/{name}", "close_connection",
       "Close a connection (320 CONNECTION_FORCED)", write=True, status=204, tag="connections",
       needs="management"),
    _r("GET", "/api/connections/{name}/channels", "connection_channels",
       "Channels of one connection", response="[Channel]", tag="connections"),
    _r("GET", "/api/channels", "list_channels", "Open channels", response="[Channel]",
       tag="connections"),
    _r("GET", "/api/channels/{name}", "get_channel",
       "One channel (name: '<connection name> (<number>)')", response="Channel",
       tag="connections"),
    _r("GET", "/api/consumers", "list_consumers", "Consumers", response="[Consumer]",
       tag="connections"),
    _r("GET", "/api/consumers/{vhost}", "list_consumers", "Consumers of a vhost",
       response="[Consumer]", tag="connections"),
    _r("GET", "/api/exchanges", "list_exchanges", "Exchanges", response="[Exchange]",
       tag="exchanges"),
    _r("GET", "/api/exchanges/{vhost}", "list_exchanges", "Exchanges of a vhost",
       response="[Exchange]", tag="exchanges"),
    _r("GET", "/api/exchanges/{vhost}/{name}", "get_exchange", "One exchange",
       response="Exchange", tag="exchanges"),
    _r("PUT", "/api/exchanges/{vhost}/{name}", "put_exchange", "Declare an exchange",
       write=True, body="ExchangePut", status=201, also=(204,), tag="exchanges", needs="management"),
    _r("DELETE", "/api/exchanges/{vhost}/{name}", "delete_exchange", "Delete an exchange",
       write=True, status=204, query=("if-unused",), tag="exchanges", needs="management"),
    _r("GET", "/api/exchanges/{vhost}/{name}/bindings/source", "exchange_bindings_source",
       "Bindings from this exchange", response="[Binding]", tag="bindings"),
    _r("GET", "/api/exchanges/{vhost}/{name}/bindings/destination",
       "exchange_bindings_destination", "Bindings to this exchange (from other exchanges)",
       response="[Binding]", tag="bindings"),
    _r("GET", "/api/exchanges/{vhost}/{name}/retained", "list_retained",
       "Messages an x-lvc or x-recent-history exchange retains, oldest first (amqplite)",
       response="[RetainedMessage]", query=("limit", "offset", "encoding"), tag="retained"),
    _r("GET", "/api/exchanges/{vhost}/{name}/retained/{key}", "list_retained",
       "The retained messages under one key (x-lvc: its last value) (amqplite)",
       response="[RetainedMessage]", query=("limit", "offset", "encoding"), tag="retained"),
    _r("DELETE", "/api/exchanges/{vhost}/{name}/retained", "clear_retained",
       "Clear every message an exchange retains (amqplite)", write=True,
       response="RetainedCleared", tag="retained"),
    _r("DELETE", "/api/exchanges/{vhost}/{name}/retained/{key}", "clear_retained",
       "Clear the retained messages under one key (amqplite)", write=True,
       response="RetainedCleared", tag="retained"),
    _r("POST", "/api/exchanges/{vhost}/{name}/publish", "publish",
       "Publish a message through an exchange", write=True, body="PublishRequest",
       response="PublishResult", tag="exchanges", needs="management"),
    _r("GET", "/api/queues", "list_queues", "Queues", response="[Queue]", tag="queues"),
    _r("GET", "/api/queues/{vhost}", "list_queues", "Queues of a vhost", response="[Queue]",
       tag="queues"),
    _r("GET", "/api/queues/{vhost}/{name}", "get_queue", "One queue", response="Queue",
       tag="queues"),
    _r("PUT", "/api/queues/{vhost}/{name}", "put_queue", "Declare a queue", write=True,
       body="QueuePut", status=201, also=(204,), tag="queues", needs="management"),
    _r("DELETE", "/api/queues/{vhost}/{name}", "delete_queue", "Delete a queue", write=True,
       status=204, query=("if-empty", "if-unused"), tag="queues", needs="management"),
    _r("DELETE", "/api/queues/{vhost}/{name}/contents", "purge_queue",
       "Purge a queue's ready messages: 204 with no body, as RabbitMQ's; the count in "
       "the x-amqplite-purged header", write=True, status=204, tag="queues", needs="management"),
    _r("GET", "/api/queues/{vhost}/{name}/bindings", "queue_bindings", "Bindings to a queue",
       response="[Binding]", tag="bindings"),
    _r("POST", "/api/queues/{vhost}/{name}/get", "get_messages",
       "Get messages (consumes unless requeued; RabbitMQ ack modes)", write=True,
       body="GetRequest", response="[Message]", tag="messages", needs="management"),
    _r("GET", "/api/queues/{vhost}/{name}/messages", "peek_messages",
       "Peek at ready messages without consuming them (no side effects)",
       response="[PeekedMessage]",
       query=("limit", "offset", "encoding", "truncate", "filter"), tag="messages"),
    _r("POST", "/api/queues/{vhost}/{name}/move", "move_messages",
       "Move ready messages to another queue or exchange (atomic per message)", write=True,
       body="MoveRequest", response="MoveResult", tag="messages"),
    _r("POST", "/api/queues/{vhost}/{name}/replay", "replay_messages",
       "Send dead-lettered messages back to where they died (or to a chosen queue)",
       write=True, body="ReplayRequest", response="MoveResult", tag="messages"),
    _r("GET", "/api/streams/{vhost}/{name}/entries", "stream_entries",
       "Read a stream's entries from an offset without consuming (no consumer, no "
       "delivery-log row); 'next' in the answer continues the read (amqplite)",
       response="StreamEntries", query=("from", "count", "encoding", "truncate"),
       tag="streams"),
    _r("GET", "/api/super-streams/{vhost}/{name}", "get_super_stream",
       "A super stream's partitions in partition order (amqplite)", response="SuperStream",
       tag="streams"),
    _r("PUT", "/api/super-streams/{vhost}/{name}", "put_super_stream",
       "Create a super stream as rabbitmq-streams add_super_stream does: a direct exchange "
       "(x-super-stream) and one stream per partition (amqplite)", write=True,
       body="SuperStreamPut", response="SuperStream", status=201, tag="streams"),
    _r("DELETE", "/api/super-streams/{vhost}/{name}", "delete_super_stream",
       "Delete a super stream: its partition streams and its exchange (amqplite)",
       write=True, status=204, tag="streams"),
    *[_r("GET", p, "list_kafka_groups", "Kafka consumer groups" + w + ": state, members "
         "and assignments, committed offset, log end offset and lag per topic-partition "
         "(amqplite)", response="[KafkaGroup]", tag="kafka")
      for p, w in (("/api/kafka/groups", ""), ("/api/kafka/groups/{vhost}", " of a vhost"))],
    _r("GET", "/api/kafka/groups/{vhost}/{group}", "get_kafka_group",
       "One Kafka consumer group (amqplite)", response="KafkaGroup", tag="kafka"),
    _r("GET", "/api/trace/{message}", "trace_message",
       "A message's delivery-log history, oldest first (message id, or the broker's "
       "message key)", response="[TraceRow]", tag="messages"),
    _r("GET", "/api/bindings", "list_bindings", "Bindings", response="[Binding]",
       tag="bindings"),
    _r("GET", "/api/bindings/{vhost}", "list_bindings", "Bindings of a vhost",
       response="[Binding]", tag="bindings"),
    _r("GET", "/api/bindings/{vhost}/e/{exchange}/q/{queue}", "pair_bindings",
       "Bindings from an exchange to a queue", response="[Binding]", tag="bindings"),
    _r("POST", "/api/bindings/{vhost}/e/{exchange}/q/{queue}", "bind_queue",
       "Bind a queue to an exchange", write=True, body="BindingPost", status=201,
       tag="bindings", needs="management"),
    _r("GET", "/api/bindings/{vhost}/e/{exchange}/q/{queue}/{props}", "get_queue_binding",
       "One binding (props = its properties_key)", response="Binding", tag="bindings"),
    _r("DELETE", "/api/bindings/{vhost}/e/{exchange}/q/{queue}/{props}", "unbind_queue",
       "Remove a binding (props = its properties_key)", write=True, status=204,
       tag="bindings", needs="management"),
    _r("GET", "/api/bindings/{vhost}/e/{source}/e/{destination}", "exchange_pair_bindings",
       "Bindings from an exchange to an exchange", response="[Binding]", tag="bindings"),
    _r("POST", "/api/bindings/{vhost}/e/{source}/e/{destination}", "bind_exchange",
       "Bind an exchange to an exchange", write=True, body="BindingPost", status=201,
       tag="bindings", needs="management"),
    _r("GET", "/api/bindings/{vhost}/e/{source}/e/{destination}/{props}",
       "get_exchange_binding", "One exchange-to-exchange binding", response="Binding",
       tag="bindings"),
    _r("DELETE", "/api/bindings/{vhost}/e/{source}/e/{destination}/{props}",
       "unbind_exchange", "Remove an exchange-to-exchange binding", write=True, status=204,
       tag="bindings", needs="management"),
    _r("GET", "/api/policies", "list_policies", "Policies", response="[Policy]",
       tag="policies"),
    _r("GET", "/api/policies/{vhost}", "list_policies", "Policies of a vhost",
       response="[Policy]", tag="policies"),
    *[_r("GET", path, "list_operator_policies", "Operator policies: amqplite has none "
         "(always empty, as RabbitMQ's on a node without any)", response="[Policy]",
         tag="policies")
      for path in ("/api/operator-policies", "/api/operator-policies/{vhost}")],
    *[_r("GET", path, "list_vhost_limits", "Virtual host limits (max-connections, "
         "max-queues)", response="[VHostLimit]", tag="policies")
      for path in ("/api/vhost-limits", "/api/vhost-limits/{vhost}")],
    _r("PUT", "/api/vhost-limits/{vhost}/{name}", "put_vhost_limit",
       "Set a vhost's max-connections or max-queues (negative: none)", write=True,
       body="VHostLimitPut", status=204, tag="policies"),
    _r("DELETE", "/api/vhost-limits/{vhost}/{name}", "delete_vhost_limit",
       "Remove a vhost limit", write=True, status=204, tag="policies"),
    _r("GET", "/api/policies/{vhost}/{name}", "get_policy", "One policy", response="Policy",
       tag="policies"),
    _r("PUT", "/api/policies/{vhost}/{name}", "put_policy", "Create or replace a policy",
       write=True, body="PolicyPut", status=201, also=(204,), tag="policies",
       needs="policymaker"),
    _r("DELETE", "/api/policies/{vhost}/{name}", "delete_policy", "Delete a policy",
       write=True, status=204, tag="policies", needs="policymaker"),
    _r("GET", "/api/parameters", "list_parameters", "Runtime parameters (URI passwords "
       "masked)", response="[Parameter]", tag="parameters"),
    _r("GET", "/api/parameters/{component}", "list_parameters",
       "Runtime parameters of a component", response="[Parameter]", tag="parameters"),
    _r("GET", "/api/parameters/{component}/{vhost}", "list_parameters",
       "Runtime parameters of a component in a vhost", response="[Parameter]",
       tag="parameters"),
    _r("GET", "/api/parameters/{component}/{vhost}/{name}", "get_parameter",
       "One runtime parameter", response="Parameter", tag="parameters"),
    _r("PUT", "/api/parameters/{component}/{vhost}/{name}", "put_parameter",
       "Create or replace a runtime parameter (shovel, federation-upstream, "
       "federation-upstream-set)",
       write=True, body="ParameterPut", status=201, also=(204,), tag="parameters",
       needs="policymaker"),
    _r("GET", "/api/shovels", "list_shovels", "Shovel status (URI passwords masked)",
       response="[Shovel]", tag="parameters"),
    _r("GET", "/api/shovels/{vhost}", "list_shovels", "Shovel status in a vhost",
       response="[Shovel]", tag="parameters"),
    _r("DELETE", "/api/shovels/vhost/{vhost}/{name}/restart", "restart_shovel",
       "Restart a shovel (reconnects both ends)", write=True, status=204, tag="parameters",
       needs="policymaker"),
    _r("GET", "/api/federation-links", "list_federation_links",
       "Exchange federation links and their status (URIs without credentials)",
       response="[FederationLink]", tag="parameters"),
    _r("GET", "/api/federation-links/{vhost}", "list_federation_links",
       "Exchange federation links in a vhost", response="[FederationLink]",
       tag="parameters"),
    _r("DELETE", "/api/federation-links/vhost/{vhost}/{id}/restart", "restart_federation_link",
       "Restart a federation link (reconnects, rebinds upstream)", write=True, status=204,
       tag="parameters", needs="policymaker"),
    _r("DELETE", "/api/parameters/{component}/{vhost}/{name}", "delete_parameter",
       "Delete a runtime parameter", write=True, status=204, tag="parameters",
       needs="policymaker"),
]
