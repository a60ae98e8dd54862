"""amqplite.protocol."""
