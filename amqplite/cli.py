"""The ``amqplite`` command: ``serve`` runs the broker; other commands administer it."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from amqplite import __version__, build
from amqplite.admin.cli_common import group_options, remember_group_options
from amqplite.config import ConfigError, load_settings


class _Main(click.Group):
    """The top-level group: every error, from any command or from click's own
    argument checks, is one ``amqplite: ...`` line on stderr and exit status 1
    (2 for usage errors, as click has it)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except click.exceptions.Abort:
            click.echo("amqplite: aborted", err=True)
            sys.exit(1)
        except click.ClickException as exc:
            show_error(exc)
            sys.exit(exc.exit_code)
        # without standalone mode, click returns the exit code of --help and friends
        sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)


def show_error(exc: click.ClickException) -> None:
    """Print ``exc`` in the one style: usage first for a usage error, then the line."""
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        click.echo(exc.ctx.get_usage(), err=True)
        click.echo(f"Try '{exc.ctx.command_path} --help' for help.", err=True)
    click.echo(f"amqplite: {exc.format_message()}", err=True)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="amqplite",
                      message=f"%(prog)s %(version)s ({build()})")
@group_options
def main(**admin_options: Any) -> None:
    """amqplite: an AMQP 0-9-1 broker in one process, durable on one SQLite file.

    The admin options (-u, -p, -V, -H, -P, --admin-url, -f) may come before the
    command, as rabbitmqadmin has them, or after it; after it, they win.
    """
    remember_group_options(click.get_current_context(), **admin_options)


@main.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="TOML settings file (also AMQPLITE_CONFIG).")
@click.option("--host", multiple=True, help="Address to listen on (repeatable). Default: all.")
@click.option("--port", type=int, help="AMQP port (default 5672).")
@click.option("--data-dir", type=click.Path(file_okay=False), help="Where amqplite.db lives.")
@click.option("--database-url", help="SQLAlchemy URL instead of the SQLite file in --data-dir.")
@click.option("--durability", type=click.Choice(["fsync", "os"]), help="Commit durability.")
@click.option("--store-writer", type=click.Choice(["process", "thread"]), hidden=True,
              help="Obsolete: the SQLite writer always runs in a child process; "
                   "'thread' is ignored with a warning.")
@click.option("--delivery-log", type=click.Choice(["off", "lifecycle", "full"]),
              help="Delivery log level.")
@click.option("--heartbeat", type=int, help="Heartbeat interval the server proposes (s).")
@click.option("--max-connections", type=int,
              help="AMQP connections open at once; further ones are refused (0: unlimited).")
@click.option("--disk-free-limit",
              help="Block publishers below this free space on the data disk (default 50MB).")
@click.option("--memory-high-watermark",
              help="Block publishers above this memory use: a fraction of RAM (default 0.4) "
                   "or a size such as 200MB or 1GiB.")
@click.option("--plain/--no-plain", "plain_listener", default=None,
              help="Serve plain AMQP on --port (default) or AMQPS only (needs --tls-port).")
@click.option("--tls-port", type=int, help="AMQPS port (RabbitMQ uses 5671); off by default.")
@click.option("--tls-cert", type=click.Path(dir_okay=False),
              help="PEM server certificate (chain) for AMQPS.")
@click.option("--tls-key", type=click.Path(dir_okay=False), help="PEM private key of --tls-cert.")
@click.option("--tls-ca", type=click.Path(dir_okay=False),
              help="PEM CA certificate(s) that client certificates must chain to.")
@click.option("--tls-verify-peer", is_flag=True, default=None,
              help="Ask AMQPS clients for a certificate and verify it against --tls-ca.")
@click.option("--tls-fail-if-no-peer-cert", is_flag=True, default=None,
              help="With --tls-verify-peer: refuse clients that send no certificate.")
@click.option("--auth-mechanisms",
              help="SASL mechanisms to offer, comma-separated (default PLAIN,AMQPLAIN; "
                   "add EXTERNAL for client-certificate login).")
@click.option("--admin-host", help="Admin HTTP API address (default 127.0.0.1).")
@click.option("--admin-port", type=int, help="Admin HTTP API port (default 15672).")
@click.option("--admin-tls", is_flag=True, default=None,
              help="Serve the admin API over HTTPS (with --tls-cert/--tls-key unless "
                   "--admin-tls-cert is given).")
@click.option("--admin-tls-cert", type=click.Path(dir_okay=False),
              help="PEM certificate for the admin API's HTTPS (implies --admin-tls).")
@click.option("--admin-tls-key", type=click.Path(dir_okay=False),
              help="PEM private key of --admin-tls-cert.")
@click.option("--mqtt-port", type=int,
              help="MQTT listener port (default 1883; 0 turns MQTT off).")
@click.option("--mqtt-tls-port", type=int,
              help="MQTT over TLS port (RabbitMQ uses 8883), with the --tls-* certificates; "
                   "off by default.")
@click.option("--mqtt-ssl-cert-login", is_flag=True, default=None,
              help="MQTT TLS clients with a verified certificate and no user name log in as "
                   "its CN (needs --tls-verify-peer).")
@click.option("--mqtt-websocket/--no-mqtt-websocket", default=None,
              help="Serve MQTT over WebSockets at /ws on the admin port (default on).")
@click.option("--mqtt-vhost", help="Vhost of MQTT users who name none (default /).")
@click.option("--mqtt-exchange", help="Exchange MQTT publishes go to (default amq.topic).")
@click.option("--mqtt-allow-anonymous/--no-mqtt-allow-anonymous", default=None,
              help="Let MQTT clients without a user name in as the default user "
                   "(default on; guest, the default user, only from loopback).")
@click.option("--mqtt-max-keepalive", type=click.IntRange(0, 65535),
              help="MQTT 5 keep alive cap in seconds, told as Server Keep Alive "
                   "(Mosquitto's max_keepalive; default 0, off).")
@click.option("--mqtt-sys-interval", type=click.IntRange(0, 65535),
              help="Seconds between $SYS/broker/... updates to MQTT subscribers "
                   "(Mosquitto's sys_interval; default 10, 0 off).")
@click.option("--mqtt-retained-max-messages", type=int,
              help="Retained MQTT messages a vhost keeps (default 100000).")
@click.option("--mqtt-retained-max-bytes",
              help="Body bytes of a vhost's retained MQTT messages (default 64MiB).")
@click.option("--stomp-port", type=int,
              help="STOMP listener port (default 61613, as RabbitMQ; 0 turns STOMP off).")
@click.option("--stomp-tls-port", type=int,
              help="STOMP over TLS port (RabbitMQ uses 61614), with the --tls-* certificates; "
                   "off by default.")
@click.option("--stomp-ssl-cert-login", is_flag=True, default=None,
              help="STOMP TLS clients with a verified certificate and no login log in as its "
                   "CN (needs --tls-verify-peer).")
@click.option("--kafka-port", type=int,
              help="Kafka listener port (default 9092; 0 turns Kafka off).")
@click.option("--kafka-tls-port", type=int,
              help="Kafka over TLS port, with the --tls-* certificates; off by default.")
@click.option("--kafka-advertised-host",
              help="Host Kafka clients are told to connect to (default: the address "
                   "they reached).")
@click.option("--kafka-allow-anonymous/--no-kafka-allow-anonymous", default=None,
              help="Let Kafka clients without SASL in as the default user "
                   "(default on; guest, the default user, only from loopback).")
@click.option("--kafka-ssl-cert-login", is_flag=True, default=None,
              help="Kafka TLS clients with a verified certificate and no SASL log in as "
                   "its CN (needs --tls-verify-peer).")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
def serve(config_file: str | None, host: tuple[str, ...], log_level: str, **flags: Any) -> None:
    """Run the broker until SIGTERM or SIGINT."""
    import trio

    from amqplite.main import serve as run_server

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if host:
        flags["host"] = list(host)
    try:
        settings = load_settings(config_file, overrides=flags)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        trio.run(run_server, settings)
    except BaseException as exc:
        problem = _startup_problem(exc)
        if problem is None:
            raise
        raise click.ClickException(problem) from None


def _startup_problem(exc: BaseException) -> str | None:
    """A one-line reason for the failures an operator can fix (port, lock, files, database),
    ``cannot start: ...``, or ``stopped: ...`` for a broker that lost its database.

    trio reports errors from the nursery as exception groups; look inside.
    """
    from sqlalchemy.exc import SQLAlchemyError

    from amqplite.server.datalock import DatabaseLocked, DatabaseLockLost, DataDirLocked
    from amqplite.store.database import MissingDriver
    from amqplite.store.writer import StoreWriterError

    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _startup_problem(inner)
            if found is not None:
                return found
        return None
    if isinstance(exc, DatabaseLockLost):
        return f"stopped: {exc}"
    if isinstance(exc, (OSError, DataDirLocked, DatabaseLocked, MissingDriver)):
        return f"cannot start: {exc}"
    if isinstance(exc, SQLAlchemyError):
        return f"cannot start: database error: {getattr(exc, 'orig', None) or exc}"
    if isinstance(exc, StoreWriterError):  # the writer process opens the database
        return f"cannot start: database error: {str(exc).splitlines()[0]}"
    return None


def _register_optional() -> None:
    """Attach command groups that live in other packages (imported lazily inside)."""
    from amqplite.admin.cli import register as register_admin
    from amqplite.admin.cli_kafka import register as register_kafka
    from amqplite.admin.cli_links import register as register_links
    from amqplite.admin.cli_retained import register as register_retained
    from amqplite.admin.cli_security import register as register_security
    from amqplite.admin.cli_streams import register as register_streams
    from amqplite.admin.cli_verbs import register as register_verbs

    register_admin(main)
    register_security(main)
    register_streams(main)
    register_retained(main)
    register_links(main)
    register_verbs(main)
    register_kafka(main)
    try:
        from amqplite.audit.cli import audit
    except ImportError:  # pragma: no cover - audit package is part of the install
        return
    main.add_command(audit)


_register_optional()
