"""Kafka wire protocol: framing, API codecs and record batches, sans-I/O."""
