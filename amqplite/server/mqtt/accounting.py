"""The MQTT figures' labels, where ``/metrics`` looks them up (the counters and their
rules: sessions/mqtt/accounting.py)."""

from amqplite.sessions.mqtt.accounting import PROTOCOL_LABELS, label

__all__ = ["PROTOCOL_LABELS", "label"]
