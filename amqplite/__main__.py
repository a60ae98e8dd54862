"""``python -m amqplite`` runs the CLI."""

from amqplite.cli import main

main()
