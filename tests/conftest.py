"""Test-wide settings: hypothesis must not fail on timing on a shared, loaded machine."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "amqplite",
    deadline=None,  # CI shares 2 cores with brokers and Spark; time is not a property
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("amqplite")
