"""Admin API handlers, one module per resource (see :mod:`amqplite.admin.api`)."""
