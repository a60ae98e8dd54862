"""A lean asyncio AMQP 0-9-1 client and the scenarios used by scripts/bench*.py."""
