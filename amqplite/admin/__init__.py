"""amqplite.admin."""
