"""Admin commands for vhosts, users, permissions and definitions (``amqplite vhosts``...).

They talk to the admin API like the other admin commands: a table for humans,
``--json`` for scripts, one line on stderr and a non-zero exit on errors.
Definitions files are RabbitMQ's JSON format, so ``definitions import`` reads
what ``rabbitmqctl export_definitions`` writes.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from amqplite.admin.cli import Ctx, _plural, _table, common
from amqplite.admin.client import AdminError, path


def _done(ctx: Ctx, key: str, value: str, text: str) -> None:
    if ctx.as_json:
        ctx.emit_json({key: value})
    else:
        click.echo(text)


# -------------------------------------------------------------------- vhosts
def _list_vhosts(ctx: Ctx) -> None:
    data = ctx.client.get(path("vhosts"))
    if ctx.as_json:
        return ctx.emit_json(data)
    _table("Virtual hosts", ["Name", "Description", "Messages"],
           [[v["name"], v.get("description", ""), v.get("messages", 0)] for v in data],
           _plural(len(data), "vhost"), right=("Messages",))


@click.group(invoke_without_command=True)
@common
def vhosts(ctx: Ctx) -> None:
    """List virtual hosts (or ``vhosts add`` / ``vhosts delete``)."""
    if click.get_current_context().invoked_subcommand is None:
        _list_vhosts(ctx)


@vhosts.command("list")
@common
def vhosts_list(ctx: Ctx) -> None:
    """List virtual hosts."""
    _list_vhosts(ctx)


def vhost_description(ctx: Ctx, name: str) -> str:
    """The description vhost ``name`` has ("" for none or no such vhost): a PUT
    replaces it, so an update that does not change it must send it back."""
    return next((str(v.get("description") or "") for v in ctx.client.get(path("vhosts"))
                 if v["name"] == name), "")


@vhosts.command("add")
@click.argument("name")
@click.option("--description", default=None,
              help="Free text shown in listings (an existing vhost keeps its own if not given).")
@common
def vhosts_add(ctx: Ctx, name: str, description: str | None) -> None:
    """Create vhost NAME; the user running the command gets full permissions in it.

    An existing vhost is updated: its description changes only if --description is
    given, and the answer says "updated"."""
    if description is None:
        description = vhost_description(ctx, name)
    r = ctx.client.call("PUT", path("vhosts", name), json={"description": description})
    outcome = "added" if r.status_code == 201 else "updated"
    _done(ctx, outcome, name, f"Vhost '{name}' {outcome}.")


@vhosts.command("delete")
@click.argument("name")
@common
def vhosts_delete(ctx: Ctx, name: str) -> None:
    """Delete vhost NAME with everything in it; its connections are closed (320)."""
    ctx.client.send("DELETE", path("vhosts", name))
    _done(ctx, "deleted", name, f"Vhost '{name}' deleted.")


# --------------------------------------------------------------------- users
def _list_users(ctx: Ctx) -> None:
    data = ctx.client.get(path("users"))
    if ctx.as_json:
        return ctx.emit_json(data)
    _table("Users", ["Name", "Tags"], [[u["name"], ", ".join(u["tags"])] for u in data],
           _plural(len(data), "user"))


@click.group(invoke_without_command=True)
@common
def users(ctx: Ctx) -> None:
    """List users (or ``users add`` / ``users delete`` / ``users password``)."""
    if click.get_current_context().invoked_subcommand is None:
        _list_users(ctx)


@users.command("list")
@common
def users_list(ctx: Ctx) -> None:
    """List users."""
    _list_users(ctx)


def _new_password(given: str | None, from_stdin: bool) -> str:
    """The password from --password-stdin (its first line), --new-password / env, or a
    hidden prompt typed twice; a script never needs a terminal."""
    if from_stdin:
        if given is not None:
            raise AdminError("give either --password-stdin or --new-password, not both")
        line = sys.stdin.readline()
        password = line[:-1] if line.endswith("\n") else line
        password = password[:-1] if password.endswith("\r") else password
        if not password:
            raise AdminError("--password-stdin: no password on standard input")
        return password
    if given is not None:
        return given
    value: str = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    return value


def _password_options(f: Any) -> Any:
    f = click.option("--password-stdin", "password_stdin", is_flag=True,
                     help="Read the password from the first line of standard input "
                     "(for scripts: echo \"$PW\" | amqplite users add NAME "
                     "--password-stdin).")(f)
    return click.option("--new-password", envvar="AMQPLITE_NEW_PASSWORD", default=None,
                        help="The password on the command line (env AMQPLITE_NEW_PASSWORD;"
                        " visible to other local users, prefer --password-stdin).")(f)


@users.command("add")
@click.argument("name")
@_password_options
@click.option("--tags", default="", help="Comma-separated: administrator, monitoring, "
              "policymaker, management.")
@common
def users_add(ctx: Ctx, name: str, new_password: str | None, password_stdin: bool,
              tags: str) -> None:
    """Create (or replace) user NAME; grant it permissions with ``permissions set``.

    The password comes from --password-stdin, --new-password (or env
    AMQPLITE_NEW_PASSWORD), or else a hidden prompt that asks for it twice.
    """
    password = _new_password(new_password, password_stdin)
    r = ctx.client.call("PUT", path("users", name), json={"password": password, "tags": tags})
    outcome = "added" if r.status_code == 201 else "updated"
    _done(ctx, outcome, name, f"User '{name}' {outcome}.")


@users.command("password")
@click.argument("name")
@_password_options
@common
def users_password(ctx: Ctx, name: str, new_password: str | None,
                   password_stdin: bool) -> None:
    """Change NAME's password (its tags stay); new logins need it at once.

    The password comes as for ``users add``: --password-stdin, --new-password, or a
    prompt.
    """
    password = _new_password(new_password, password_stdin)
    current = ctx.client.get(path("users", name))
    ctx.client.send("PUT", path("users", name),
                    {"password": password, "tags": current.get("tags", [])})
    _done(ctx, "changed", name, f"Password of '{name}' changed.")


@users.command("delete")
@click.argument("name")
@common
def users_delete(ctx: Ctx, name: str) -> None:
    """Delete user NAME and its permissions; its connections are closed (320)."""
    ctx.client.send("DELETE", path("users", name))
    _done(ctx, "deleted", name, f"User '{name}' deleted.")


# --------------------------------------------------------------- permissions
def _list_permissions(ctx: Ctx, user: str | None) -> None:
    url = path("users", user, "permissions") if user else path("vhosts", ctx.vhost,
                                                               "permissions")
    data = ctx.client.get(url)
    if ctx.as_json:
        return ctx.emit_json(data)
    title = f"Permissions of user {user}" if user else f"Permissions in vhost {ctx.vhost}"
    _table(title, ["User", "Vhost", "Configure", "Write", "Read"],
           [[p["user"], p["vhost"], p["configure"], p["write"], p["read"]] for p in data],
           _plural(len(data), "permission"))


@click.group(invoke_without_command=True)
@click.option("--of", "of_user", default=None, help="List one user's permissions instead.")
@common
def permissions(ctx: Ctx, of_user: str | None) -> None:
    """List permissions in the vhost (or ``permissions set`` / ``clear``; topic
    permissions: ``set-topic`` / ``clear-topic`` / ``list-topic``)."""
    if click.get_current_context().invoked_subcommand is None:
        _list_permissions(ctx, of_user)


@permissions.command("set")
@click.argument("username", metavar="USER")
@click.argument("configure")
@click.argument("write")
@click.argument("read")
@common
def permissions_set(ctx: Ctx, username: str, configure: str, write: str, read: str) -> None:
    """Set USER's CONFIGURE, WRITE and READ regular expressions in the vhost.

    RabbitMQ's semantics: a search on the resource name ("^app-" anchors it, "" allows
    nothing), e.g. ``permissions set app '^app-.*' '^app-.*' '^app-.*'``.
    """
    ctx.client.send("PUT", path("permissions", ctx.vhost, username),
                    {"configure": configure, "write": write, "read": read})
    _done(ctx, "set", username, f"Permissions of '{username}' in vhost {ctx.vhost} set.")


@permissions.command("clear")
@click.argument("username", metavar="USER")
@common
def permissions_clear(ctx: Ctx, username: str) -> None:
    """Remove USER's permissions in the vhost (its next connection.open is refused)."""
    ctx.client.send("DELETE", path("permissions", ctx.vhost, username))
    _done(ctx, "cleared", username,
          f"Permissions of '{username}' in vhost {ctx.vhost} cleared.")


@permissions.command("set-topic")
@click.argument("username", metavar="USER")
@click.argument("exchange")
@click.argument("write")
@click.argument("read")
@common
def permissions_set_topic(ctx: Ctx, username: str, exchange: str, write: str,
                          read: str) -> None:
    """Set USER's topic permission on topic EXCHANGE in the vhost (rabbitmqctl
    set_topic_permissions): a publish's routing key must match WRITE, a binding key
    READ. ``{username}``, ``{vhost}`` and (MQTT) ``{client_id}`` are expanded, e.g.
    ``permissions set-topic app amq.topic '^{username}\\.' '^{username}\\.'``."""
    ctx.client.send("PUT", path("topic-permissions", ctx.vhost, username),
                    {"exchange": exchange, "write": write, "read": read})
    _done(ctx, "set", username,
          f"Topic permission of '{username}' on exchange '{exchange}' in vhost "
          f"{ctx.vhost} set.")


@permissions.command("clear-topic")
@click.argument("username", metavar="USER")
@click.argument("exchange", required=False)
@common
def permissions_clear_topic(ctx: Ctx, username: str, exchange: str | None) -> None:
    """Remove USER's topic permission on EXCHANGE in the vhost, or all of them."""
    ctx.client.send("DELETE", path("topic-permissions", ctx.vhost, username),
                    **({"exchange": exchange} if exchange is not None else {}))
    which = f"on exchange '{exchange}' " if exchange is not None else ""
    _done(ctx, "cleared", username,
          f"Topic permissions of '{username}' {which}in vhost {ctx.vhost} cleared.")


@permissions.command("list-topic")
@click.option("--of", "of_user", default=None, help="List one user's instead.")
@common
def permissions_list_topic(ctx: Ctx, of_user: str | None) -> None:
    """List topic permissions in the vhost (or one user's, in every vhost)."""
    url = (path("users", of_user, "topic-permissions") if of_user
           else path("vhosts", ctx.vhost, "topic-permissions"))
    data = ctx.client.get(url)
    if ctx.as_json:
        return ctx.emit_json(data)
    title = (f"Topic permissions of user {of_user}" if of_user
             else f"Topic permissions in vhost {ctx.vhost}")
    _table(title, ["User", "Vhost", "Exchange", "Write", "Read"],
           [[p["user"], p["vhost"], p["exchange"], p["write"], p["read"]] for p in data],
           _plural(len(data), "topic permission"))


# --------------------------------------------------------------- definitions
@click.group()
def definitions() -> None:
    """Export or import definitions (RabbitMQ's JSON format)."""


@definitions.command("export")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--only-vhost", is_flag=True, help="Only the --vhost's objects.")
@common
def definitions_export(ctx: Ctx, file: str, only_vhost: bool) -> None:
    """Write users, vhosts, permissions, policies, exchanges, queues and bindings to FILE
    ('-' for stdout)."""
    data = ctx.client.get(path("definitions", ctx.vhost) if only_vhost else path("definitions"))
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if file == "-":
        click.echo(text, nl=False)
        return
    with open(file, "w", encoding="utf-8") as fh:
        fh.write(text)
    counts = {k: len(v) for k, v in data.items() if isinstance(v, list) and v}
    if ctx.as_json:
        return ctx.emit_json({"exported": file, "counts": counts})
    click.echo(f"Exported to {file}: " + (", ".join(f"{n} {k}" for k, n in counts.items())
                                          or "nothing"))


@definitions.command("import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option("--only-vhost", is_flag=True,
              help="Import objects into the --vhost, whatever vhost the file names.")
@common
def definitions_import(ctx: Ctx, file: Any, only_vhost: bool) -> None:
    """Read FILE (e.g. from ``rabbitmqctl export_definitions``) and create what it lists."""
    try:
        data = json.load(file)
    except ValueError as exc:
        raise AdminError(f"{file.name} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise AdminError(f"{file.name} is not a definitions object")
    url = path("definitions", ctx.vhost) if only_vhost else path("definitions")
    report = ctx.client.send("POST", url, data) or {}
    if ctx.as_json:
        return ctx.emit_json({"imported": file.name, "ignored": report.get("ignored", []),
                              "skipped": report.get("skipped", [])})
    click.echo(f"Imported {file.name}.")
    for key in ("ignored", "skipped"):  # what has no meaning here, what is not supported
        for line in report.get(key, []):
            click.echo(f"  {key}: {line}")


COMMANDS: list[click.Command] = [vhosts, users, permissions, definitions]


def register(main: click.Group) -> None:
    """Attach the security commands to the ``amqplite`` group."""
    for cmd in COMMANDS:
        if cmd.name not in main.commands:
            main.add_command(cmd)
