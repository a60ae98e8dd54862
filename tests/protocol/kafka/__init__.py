"""Tests of the sans-I/O Kafka codec (amqplite.protocol.kafka)."""
