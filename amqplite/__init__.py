"""amqplite: an AMQP 0-9-1 broker in one process, durable on one SQLite file."""

__version__ = "0.1.0"
