"""amqplite.broker."""
