"""Plumbing of the admin CLI: connection and output options, the output formats.

Every admin command gets ``--admin-url``, ``--user/-u``, ``--password/-p`` and
``--vhost/-V`` (rabbitmqadmin's short options) and ``--format table|json|tsv``
(``--json`` is an alias of ``--format json``); ``_table`` prints the table or
TSV rows as the running command's format says.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import click

from amqplite.admin.client import DEFAULT_URL, Client

F = TypeVar("F", bound=Callable[..., Any])

#: output formats of the listing commands
FORMATS = ("table", "json", "tsv")
#: the running command's output format: ``_table`` prints TSV rows when it is "tsv"
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


def _run(f: Callable[..., Any], fmt: str, admin_url: str, user: str, password: str,
         vhost: str, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
    ctx = Ctx(admin_url, user, password, vhost, fmt == "json")
    token = OUTPUT.set(fmt)
    try:
        return f(ctx, *args, **kw)
    finally:
        OUTPUT.reset(token)
        ctx.client.close()


def common(f: F) -> F:
    """Connection and output options shared by the admin commands; passes ``ctx: Ctx``."""

    @click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
    @click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
                  show_default=True, help="Output: an aligned table, JSON, or "
                  "tab-separated rows with a header line.")
    @_connection_options
    @functools.wraps(f)
    def wrapper(admin_url: str, user: str, password: str, vhost: str, fmt: str,
                as_json: bool, *args: Any, **kw: Any) -> Any:
        return _run(f, "json" if as_json else fmt, admin_url, user, password, vhost, args, kw)

    return wrapper  # type: ignore[return-value]


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
    from rich import box
    from rich.table import Table

    t = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, title_justify="left",
              caption_justify="left", pad_edge=False)
    for c in columns:
        t.add_column(c, justify="right" if c in right else "left", overflow="fold")
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    _console().print(t)


def _tsv_cell(v: Any) -> str:
    """One TSV field: tabs and line breaks would split it, so they become spaces."""
    return str(v).replace("\t", " ").replace("\r", " ").replace("\n", " ")


def _progress(total: int | None, what: str) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    con = _console(err=True)
    return Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), console=con,
                    transient=True, disable=not con.is_terminal)
