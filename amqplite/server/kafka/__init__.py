"""The Kafka front's trio shell: the listener and one client per connection, on the
sans-I/O codec (protocol/kafka/) and the session rules (sessions/kafka/)."""

from amqplite.server.kafka.listener import KafkaListener, run_kafka

__all__ = ["KafkaListener", "run_kafka"]
