"""Exchange types: each keeps its own binding index and answers "where does this go?".

An exchange never touches queues directly: ``route`` returns the set of
destinations (queue or exchange keys) bound to it that match, and the vhost
follows exchange-to-exchange edges and alternate exchanges.
"""

from __future__ import annotations

from amqplite.broker.exchanges.base import Binding, Destination, Exchange, HeadersGetter
from amqplite.broker.exchanges.direct import DirectExchange
from amqplite.broker.exchanges.fanout import FanoutExchange
from amqplite.broker.exchanges.federation_upstream import FederationUpstreamExchange
from amqplite.broker.exchanges.headers import HeadersExchange
from amqplite.broker.exchanges.lvc import LvcExchange
from amqplite.broker.exchanges.recent_history import RecentHistoryExchange
from amqplite.broker.exchanges.topic import TopicExchange

EXCHANGE_TYPES: dict[str, type[Exchange]] = {
    "direct": DirectExchange,
    "fanout": FanoutExchange,
    "topic": TopicExchange,
    "headers": HeadersExchange,
    "x-recent-history": RecentHistoryExchange,
    "x-lvc": LvcExchange,
    "x-federation-upstream": FederationUpstreamExchange,
}

__all__ = [
    "EXCHANGE_TYPES",
    "Binding",
    "Destination",
    "DirectExchange",
    "Exchange",
    "FanoutExchange",
    "FederationUpstreamExchange",
    "HeadersExchange",
    "HeadersGetter",
    "LvcExchange",
    "RecentHistoryExchange",
    "TopicExchange",
]
