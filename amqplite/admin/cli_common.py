"""Plumbing of the admin CLI: connection and output options, the output formats.

Every admin command gets ``--admin-url``, ``--user/-u``, ``--password/-p`` and
``--vhost/-V`` (rabbitmqadmin's short options) and ``-f/--format
table|json|tsv|csv`` (``--json`` is an alias of ``--format json``); ``_table``
prints the table or the rows as the running command's format says. The same
options (and ``-H/--host``, ``-P/--port``) may also come before the command, as
rabbitmqadmin has them: ``group_options`` puts them on the top-level group, which
keeps what was given in ``ctx.meta``; an option given after the command wins.
"""

from __future__ import annotations

import csv
import functools
import json
import re
import sys
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import click

from amqplite.admin.client import DEFAULT_URL, Client

F = TypeVar("F", bound=Callable[..., Any])

#: output formats of the listing commands
FORMATS = ("table", "json", "tsv", "csv")
#: the running command's output format: ``_table`` prints rows when it is "tsv" or "csv"
OUTPUT: ContextVar[str] = ContextVar("OUTPUT", default="table")


class Ctx:
    """What every admin command needs: the client, the vhost and the output mode."""

    def __init__(self, url: str, user: str, password: str, vhost: str, as_json: bool) -> None:
        self.client = Client(url, user, password)
        self.vhost = vhost
        self.as_json = as_json

    def emit_json(self, data: Any) -> None:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def _connection_options(f: F) -> F:
    for opt in (
        click.option("--vhost", "-V", envvar="AMQPLITE_VHOST", default="/", show_default=True,
                     help="Virtual host (env AMQPLITE_VHOST)."),
        click.option("--password", "-p", envvar="AMQPLITE_PASSWORD", default="guest",
                     show_default=True, help="Password (env AMQPLITE_PASSWORD)."),
        click.option("--user", "-u", envvar="AMQPLITE_USER", default="guest",
                     show_default=True, help="User name (env AMQPLITE_USER)."),
        click.option("--admin-url", envvar="AMQPLITE_ADMIN_URL", default=DEFAULT_URL,
                     show_default=True, help="Admin API base URL (env AMQPLITE_ADMIN_URL)."),
    ):
        f = opt(f)
    return f


#: ``ctx.meta`` key of the options given before the command
GROUP_META = "amqplite.admin.options"


def group_options(f: F) -> F:
    """The admin options for the top-level group: given before the command, they
    apply to it unless the command is given its own."""
    for opt in (
        click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default=None,
                     help="Output of admin commands: table, json, tsv or csv."),
        click.option("--port", "-P", type=click.IntRange(1, 65535), default=None,
                     help="Admin API port (replaces the port of --admin-url)."),
        click.option("--host", "-H", default=None,
                     help="Admin API host (replaces the host of --admin-url)."),
        click.option("--vhost", "-V", default=None, help="Virtual host of admin commands."),
        click.option("--password", "-p", default=None, help="Password of admin commands."),
        click.option("--user", "-u", default=None, help="User name of admin commands."),
        click.option("--admin-url", default=None, help="Admin API base URL."),
    ):
        f = opt(f)
    return f


def remember_group_options(ctx: click.Context, admin_url: str | None, host: str | None,
                           port: int | None, **given: str | None) -> None:
    """Keep the group's admin options for ``common`` (host and port folded into the URL)."""
    if host is not None or port is not None:
        from urllib.parse import urlsplit

        base = urlsplit(admin_url or _env_url())
        netloc = f"{host or base.hostname}:{port or base.port or 15672}"
        if ":" in (host or "") and not (host or "").startswith("["):
            netloc = f"[{host}]:{port or base.port or 15672}"
        admin_url = base._replace(netloc=netloc).geturl()
    given["admin_url"] = admin_url
    ctx.meta[GROUP_META] = {k: v for k, v in given.items() if v is not None}


def _env_url() -> str:
    import os

    return os.environ.get("AMQPLITE_ADMIN_URL") or DEFAULT_URL


def _from_group(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each option the command was not given taken from the group."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    before = ctx.meta.get(GROUP_META, {})
    out = dict(values)
    for name, value in before.items():
        source = ctx.get_parameter_source(name)
        if name in out and source in (ParameterSource.DEFAULT, ParameterSource.ENVIRONMENT):
            out[name] = value
    return out


def given_vhost() -> bool:
    """Was -V given (before or after the command)? ``list`` then lists one vhost only."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    return "vhost" in ctx.meta.get(GROUP_META, {}) or ctx.get_parameter_source("vhost") in (
        ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def _run(f: Callable[..., Any], fmt: str, admin_url: str, user: str, password: str,
         vhost: str, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
    conn = _from_group({"admin_url": admin_url, "user": user, "password": password,
                        "vhost": vhost, "fmt": fmt})
    fmt = conn["fmt"]
    ctx = Ctx(conn["admin_url"], conn["user"], conn["password"], conn["vhost"],
              fmt == "json")
    token = OUTPUT.set(fmt)
    try:
        return f(ctx, *args, **kw)
    finally:
        OUTPUT.reset(token)
        ctx.client.close()


def _common(short_format: bool) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        names = ("--format", "-f", "fmt") if short_format else ("--format", "fmt")

        @click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
        @click.option(*names, type=click.Choice(FORMATS), default="table",
                      show_default=True, help="Output: an aligned table, the API's JSON, "
                      "or tab- or comma-separated rows with a header line.")
        @_connection_options
        @functools.wraps(f)
        def wrapper(admin_url: str, user: str, password: str, vhost: str, fmt: str,
                    as_json: bool, *args: Any, **kw: Any) -> Any:
            if as_json:
                fmt = "json"
                click.get_current_context().set_parameter_source(
                    "fmt", click.core.ParameterSource.COMMANDLINE)
            return _run(f, fmt, admin_url, user, password, vhost, args, kw)

        return wrapper  # type: ignore[return-value]

    return decorate


#: connection and output options shared by the admin commands; passes ``ctx: Ctx``
common = _common(short_format=True)
#: ``common`` for a command whose ``-f`` is its own (``stream tail -f`` follows)
common_long_format = _common(short_format=False)


def common_json_only(f: F) -> F:
    """``common`` for a command with a ``--format`` of its own (a file format): the
    output is a table, or JSON with ``--json``."""

    @click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
    @_connection_options
    @functools.wraps(f)
    def wrapper(admin_url: str, user: str, password: str, vhost: str, as_json: bool,
                *args: Any, **kw: Any) -> Any:
        return _run(f, "json" if as_json else "table", admin_url, user, password, vhost,
                    args, kw)

    return wrapper  # type: ignore[return-value]


def _console(err: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if err else sys.stdout
    tty = stream.isatty()
    # piped output: wide enough that tables never wrap mid-row
    return Console(file=stream, width=None if tty else 250, highlight=False,
                   soft_wrap=False, no_color=not tty)


def _table(title: str | None, columns: list[str], rows: list[list[Any]],
           caption: str | None = None, right: tuple[str, ...] = ()) -> None:
    if OUTPUT.get() == "tsv":
        for r in [columns, *rows]:
            click.echo("\t".join("" if v is None else _tsv_cell(v) for v in r))
        return
    if OUTPUT.get() == "csv":
        out = csv.writer(sys.stdout, lineterminator="\n")
        for r in [columns, *rows]:
            out.writerow(["" if v is None else str(v) for v in r])
        return
    from rich import box
    from rich.table import Table

    t = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, title_justify="left",
              caption_justify="left", pad_edge=False)
    for c in columns:
        t.add_column(c, justify="right" if c in right else "left", overflow="fold")
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    con = _console()
    with con.capture() as captured:
        con.print(t)
    # rich pads every cell to its column's width, the last one too: no trailing blanks
    con.file.write("".join(_TRAILING.sub(r"\1", ln) for ln in
                           captured.get().splitlines(keepends=True)))
    con.file.flush()


#: blanks at the end of a line, before any closing style codes
_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*\n?)$")


def _tsv_cell(v: Any) -> str:
    """One TSV field: tabs and line breaks would split it, so they become spaces."""
    return str(v).replace("\t", " ").replace("\r", " ").replace("\n", " ")


def _progress(total: int | None, what: str) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    con = _console(err=True)
    return Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), console=con,
                    transient=True, disable=not con.is_terminal)
