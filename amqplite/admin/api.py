"""The admin API handlers, modelled on RabbitMQ's management API.

Handlers run on the broker's trio loop and read or mutate broker state
directly; a write is one synchronous step answered from its own commit
(:mod:`amqplite.admin.writes`), after its input passed
:mod:`amqplite.admin.validate`. They live in
:mod:`amqplite.admin.handlers`, one module per resource, and are combined
here into the one object the router dispatches to. The route table lives in
:mod:`amqplite.admin.routes`, the source of the OpenAPI document too; the
HTTP plumbing (requests, responses, errors) in :mod:`amqplite.admin.plumbing`.
"""

from __future__ import annotations

from amqplite.admin.handlers.bindings import BindingHandlers
from amqplite.admin.handlers.connections import ConnectionHandlers
from amqplite.admin.handlers.exchanges import ExchangeHandlers
from amqplite.admin.handlers.kafka import KafkaHandlers
from amqplite.admin.handlers.messages import MessageHandlers
from amqplite.admin.handlers.meta import MetaHandlers
from amqplite.admin.handlers.metrics import MetricsHandlers
from amqplite.admin.handlers.nodes import NodeHandlers
from amqplite.admin.handlers.parameters import ParameterHandlers
from amqplite.admin.handlers.policies import PolicyHandlers
from amqplite.admin.handlers.queues import QueueHandlers
from amqplite.admin.handlers.retained import RetainedHandlers
from amqplite.admin.handlers.security import SecurityHandlers
from amqplite.admin.handlers.streams import StreamHandlers
from amqplite.admin.handlers.topic_permissions import TopicPermissionHandlers

__all__ = ["AdminAPI"]


class AdminAPI(MetaHandlers, ConnectionHandlers, ExchangeHandlers, QueueHandlers,
               MessageHandlers, BindingHandlers, PolicyHandlers, MetricsHandlers,
               NodeHandlers, SecurityHandlers, StreamHandlers, RetainedHandlers,
               ParameterHandlers, TopicPermissionHandlers, KafkaHandlers):
    """One instance per server; handler names match ``Route.handler``."""
