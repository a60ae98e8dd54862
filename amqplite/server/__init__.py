"""amqplite.server."""
