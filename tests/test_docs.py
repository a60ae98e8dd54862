"""The docs' examples, run against a real broker so that they stay true.

Every fenced block of README.md and docs/*.md that holds commands or code (language
sh, bash, console, shell, python, js or html, or any block with ``$ `` lines) carries a
decision on the line right above it:

- ``<!-- not run: REASON -->``: the reason a reader accepts (RabbitMQ, a second host,
  an install, a benchmark or a Spark job taking minutes, ...);
- ``<!-- run -->``, optionally ``<!-- run: OPTION; OPTION -->``: run by this module.

Not-run examples are still checked for the ``--options`` they pass to ``amqplite``
and ``scripts/*.py``, and every TOML example loads as a config file.

A block with ``$ `` lines is a shell session: each command (with its ``\\``
continuations) runs in bash, and the lines after it, if any, are its expected
output: JSON compared by shape (the same keys and value types), anything else as
text with numbers, runs of blanks and table rules normalised (the values depend on
the broker's state) and ``...`` standing for anything. A shell block without ``$ ``
lines is a script, run with ``set -e``. A python block runs in a subprocess.

The documented ports (5672 AMQP, 15672 admin, 1883 MQTT, 61613 STOMP) become the
test broker's, in commands and in expected output; ``amqplite``,
``.venv/bin/amqplite`` and ``.venv/bin/python`` are this interpreter's, the
admin URL the CLI uses by default is the broker's, and each file's blocks run in
order in a scratch directory of their own. Options:

- ``fails``: every command exits non-zero; its output is stdout and stderr together;
- ``no broker``: the documented ports are ones nothing listens on;
- ``server``: the block starts a long-running broker; it is given free ports, must
  listen on all of them, then is stopped with SIGTERM and must exit 0;
- ``given NAME``: a precondition from ``GIVEN`` first (broker state, and for python
  a prelude that defines what a fragment uses);
- ``then q receives BODY, BODY (retained), ...``: after a python fragment given ``a
  channel``, queue ``q`` holds exactly these bodies, in order, the ones marked
  ``(retained)`` with the header ``x-retained: true``.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.admin.conftest import AdminBroker, start_admin_broker
from tests.brokerproc import free_port, wait_for
from tests.server.mqttclient import listening

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: fenced blocks in these languages need a decision (so does any with ``$ `` lines)
COMMAND_LANGS = {"sh", "bash", "console", "shell", "python", "js", "html"}
MARKER = re.compile(r"^<!-- (?:run(?::\s*(?P<opts>[^>]*?))?|not run:\s*(?P<reason>[^>]*?)) -->$")
FENCE = re.compile(r"^\s*```(\S*)")
OPTIONS = {"fails", "no broker", "server"}
#: settings still accepted so old files load, but ignored (with a warning at start)
OBSOLETE = ("store_writer",)


@dataclass
class Block:
    path: str
    line: int  # the opening fence's, 1-based
    lang: str
    body: str
    marker: str | None  # the comment line above, if it is a marker
    opts: list[str] = field(default_factory=list)
    reason: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def needs_decision(self) -> bool:
        return self.lang in COMMAND_LANGS or any(
            line.startswith("$ ") for line in self.body.splitlines())

    @property
    def runs(self) -> bool:
        return self.marker is not None and self.reason is None


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of a document, each with the marker right above it."""
    path = doc.relative_to(ROOT).as_posix()
    lines = doc.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        above = lines[i - 1].strip() if i else ""
        mk = MARKER.match(above)
        indent = len(lines[i]) - len(lines[i].lstrip())
        body = "".join(line[indent:] + "\n" for line in lines[i + 1:end])
        b = Block(path, i + 1, m.group(1), body,
                  above if mk else None)
        if mk:
            b.reason = mk.group("reason")
            b.opts = [o.strip() for o in (mk.group("opts") or "").split(";") if o.strip()]
        out.append(b)
        i = end + 1
    return out


ALL = [b for doc in DOCS for b in blocks(doc)]


def test_every_command_block_is_run_or_says_why_not() -> None:
    """A new example without a decision fails here, and so does a marker typo."""
    undecided = [b.where for b in ALL if b.needs_decision and b.marker is None]
    assert not undecided, f"mark these <!-- run --> or <!-- not run: REASON -->: {undecided}"
    for b in ALL:
        if b.reason is not None:
            assert len(b.reason.split()) >= 3, f"{b.where}: say why it is not run"
        for opt in b.opts:
            assert (opt in OPTIONS or opt.removeprefix("given ") in GIVEN
                    or opt.startswith(THEN)), \
                f"{b.where}: unknown run option {opt!r}"
        if b.runs:
            assert b.lang in ("python", "sh", "bash", "console", "shell", ""), b.where
    for doc in DOCS:
        text = doc.read_text()
        comments = re.findall(r"^\s*<!-- (?:not )?run\b.*$", text, re.M)
        marked = [b for b in blocks(doc) if b.marker is not None]
        assert len(comments) == len(marked), f"{doc}: a marker not right above a block"


def commands(block: str) -> Iterator[list[str]]:
    """The simple commands of a shell block, as words (prompts, comments, ``\\``
    continuations, a template's ``[ ]`` and ``...`` taken out)."""
    lines = re.sub(r"\\\n", " ", block).splitlines()
    if any(line.startswith("$ ") for line in lines):  # a session: the rest is output
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    for line in lines:
        try:
            words = shlex.split(line.replace("[", " ").replace("]", " "), comments=True)
        except ValueError:
            continue
        cmd: list[str] = []
        for w in [*words, ";"]:
            if w in ("&&", "||", "|", ";", "&"):
                if cmd:
                    yield cmd
                cmd = []
            elif w != "...":
                cmd.append(w)


@functools.cache
def cli_options(path: tuple[str, ...]) -> frozenset[str]:
    """The long options ``amqplite PATH...`` takes (the top level's too, which may
    come before the command)."""
    import click

    from amqplite.cli import main

    ctx = click.Context(main)
    cmd: click.Command = main
    opts: set[str] = set()
    for word in ("", *path):
        if word:
            if not isinstance(cmd, click.Group) or cmd.get_command(ctx, word) is None:
                break
            cmd = cmd.get_command(ctx, word)  # type: ignore[assignment]
        for p in cmd.params:
            if isinstance(p, click.Option):
                opts.update(o for o in (*p.opts, *p.secondary_opts) if o.startswith("--"))
    return frozenset(opts | {"--help"})


@functools.cache
def script_help(script: str) -> str:
    r = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True,
                       text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, f"{script} --help: {r.stderr}"
    return r.stdout


def test_commands_not_run_use_options_that_exist() -> None:
    """What cannot run is still checked: every ``--option`` a not-run example gives
    to ``amqplite`` or to a ``scripts/*.py`` exists there."""
    bad = []
    for b in ALL:
        if b.reason is None or b.lang not in ("", "sh", "bash", "console", "shell"):
            continue
        for cmd in commands(b.body):
            for i, w in enumerate(cmd):
                flags = [f.split("=")[0] for f in cmd[i + 1:] if f.startswith("--")]
                if w == "amqplite" or w.endswith("/bin/amqplite"):
                    known = cli_options(tuple(cmd[i + 1:i + 3]))
                    bad += [f"{b.where}: amqplite {f}" for f in flags if f not in known]
                    break
                if w.startswith("scripts/") and w.endswith(".py"):
                    helptext = script_help(w)
                    bad += [f"{b.where}: {w} {f}" for f in flags
                            if not re.search(re.escape(f) + r"\b", helptext)]
                    break
    assert not bad, bad


@pytest.mark.parametrize("block", [b for b in ALL if b.lang == "toml"],
                         ids=lambda b: b.where)
def test_config_examples_load(block: Block, tmp_path: Path) -> None:
    """A TOML example is a config file the broker takes (unknown keys are errors)
    and sets no obsolete setting (one ignored with a warning at start)."""
    from amqplite.config import load_settings

    f = tmp_path / "amqplite.toml"
    f.write_text(block.body)
    load_settings(f, env={})
    for key in OBSOLETE:
        assert not re.search(rf"^{key}\s*=", block.body, re.M), f"{block.where}: {key} is obsolete"


def session(block: str) -> list[tuple[str, str]]:
    """(command, expected output) for each ``$ `` command of a block."""
    out: list[tuple[str, str]] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            raise AssertionError(f"a session starts with '$ ': {line!r}")
        cmd = [line[2:]]
        while cmd[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd.append(lines[i])
        i += 1
        expected = []
        while i < len(lines) and not lines[i].startswith("$ "):
            expected.append(lines[i])
            i += 1
        out.append(("\n".join(cmd), "\n".join(expected).strip()))
    return out


def shape(value: Any) -> Any:
    """A JSON value's keys and types, without its values."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def normal(text: str) -> str:
    """Text without what the broker's state decides: numbers, column widths, rules."""
    lines = []
    for line in text.splitlines():
        line = re.sub(r"─+", "─", re.sub(r"\d+", "0", line))
        if line.strip():
            lines.append(" ".join(line.split()))
    return "\n".join(lines)


def check_output(where: str, expected: str, actual: str) -> None:
    try:
        want = json.loads(expected)
    except ValueError:
        pattern = ".*?".join(re.escape(part) for part in normal(expected).split("..."))
        same = re.fullmatch(pattern, normal(actual), re.S) is not None
        assert same, \
            f"{where}: output differs\n--- documented\n{expected}\n--- actual\n{actual}"
        return
    assert shape(json.loads(actual)) == shape(want), f"{where}: JSON differs\n{actual}"


# -- preconditions ----------------------------------------------------------------

PRELUDE_CHANNEL = """\
import pika
conn = pika.BlockingConnection(pika.URLParameters("amqp://guest:guest@localhost:5672/%2F"))
ch = conn.channel()
q = ch.queue_declare("", exclusive=True).method.queue
ch.confirm_delivery()  # a publish returns once it is routed: what q holds is settled
def on_message(channel, method, properties, body):
    channel.basic_ack(method.delivery_tag)
"""

DEAD = [("ord-0", b'{"order":1017,"sku":"A-12"}', "application/json"),
        ("ord-1", b"refund 88", "text/plain"),
        ("ord-2", b"\x89PNG\x00\x01", None)]


def orders_with_dead_letters(b: AdminBroker) -> None:
    """Vhost / as admin.md's examples show it: ``orders`` (one message ready)
    dead-letters into ``orders.dlq``, which holds three rejected messages."""
    with b.api() as api:
        for q in api.get("/api/queues/%2F").json():
            api.delete(f"/api/queues/%2F/{q['name']}")
    conn = b.connect()
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("orders.dlq", durable=True)
        ch.queue_declare("orders", durable=True, arguments={
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq"})
        for mid, body, ctype in DEAD:
            ch.basic_publish("", "orders", body, pika.BasicProperties(
                delivery_mode=2, message_id=mid, content_type=ctype))
        for _ in DEAD:
            method, _props, _body = ch.basic_get("orders")
            assert method is not None
            ch.basic_reject(method.delivery_tag, requeue=False)
        ch.basic_publish("", "orders", b'{"order":1018}', pika.BasicProperties(
            delivery_mode=2, message_id="ord-3", content_type="application/json"))
    finally:
        conn.close()
    with b.api() as api:
        wait_for(lambda: api.get("/api/queues/%2F/orders.dlq").json()["messages"] == 3,
                 10, what="three dead letters")


def message_order_4711(b: AdminBroker) -> None:
    """A message with id ``order-4711`` has passed through the broker (audit.md's trace)."""
    conn = b.connect()
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("shipments", durable=True)
        ch.basic_publish("", "shipments", b'{"order":4711}', pika.BasicProperties(
            delivery_mode=2, message_id="order-4711"))
    finally:
        conn.close()


THEN = "then q receives "


def epilogue(opt: str) -> str:
    """Python that checks what ``q`` holds, for a ``then q receives ...`` option."""
    want = []
    for item in opt.removeprefix(THEN).split(","):
        body, retained = item.strip(), False
        if body.endswith("(retained)"):
            body, retained = body.removesuffix("(retained)").strip(), True
        want.append((body, retained))
    return f"""
got = []
while (m := ch.basic_get(q, auto_ack=True))[0] is not None:
    got.append((m[2].decode(), bool((m[1].headers or {{}}).get("x-retained"))))
assert got == {want!r}, got
"""


#: name -> (broker state to set up first, python prelude for a fragment)
GIVEN: dict[str, tuple[Callable[[AdminBroker], None] | None, str]] = {
    "a channel": (None, PRELUDE_CHANNEL),
    "orders with dead letters": (orders_with_dead_letters, ""),
    "a message order-4711": (message_order_4711, ""),
}


# -- running ------------------------------------------------------------------------

@dataclass
class Broker:
    admin: AdminBroker
    mqtt: int
    stomp: int

    def ports(self) -> dict[str, int]:
        return {"5672": self.admin.proc.port, "15672": int(self.admin.admin_url.rsplit(":", 1)[1]),
                "1883": self.mqtt, "61613": self.stomp}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    mqtt, stomp = free_port(), free_port()
    b = start_admin_broker(tmp_path_factory.mktemp("docs-broker"),
                           "--mqtt-port", str(mqtt), "--stomp-port", str(stomp))
    wait_for(lambda: listening(mqtt) and listening(stomp), 30, what="MQTT and STOMP")
    yield Broker(b, mqtt, stomp)
    b.proc.stop()


def substitute(text: str, ports: dict[str, int]) -> str:
    return re.sub(r"(?<!\d)(15672|5672|1883|61613)(?!\d)",
                  lambda m: str(ports[m.group(1)]), text)


def scratch(tmp: Path, admin_url: str) -> dict[str, str]:
    """An environment in which the docs' commands reach this tree and this broker."""
    bindir = tmp / ".venv" / "bin"
    bindir.mkdir(parents=True)
    for name, line in (("python", f'exec {sys.executable} "$@"'),
                       ("python3", f'exec {sys.executable} "$@"'),
                       ("amqplite", f'exec {sys.executable} -m amqplite "$@"')):
        (bindir / name).write_text(f"#!/bin/sh\n{line}\n")
        (bindir / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}",
               AMQPLITE_ADMIN_URL=admin_url, COLUMNS="250")
    for k in ("AMQPLITE_USER", "AMQPLITE_PASSWORD", "AMQPLITE_VHOST", "AMQPLITE_CONFIG"):
        env.pop(k, None)
    return env


def run_session(b: Block, ports: dict[str, int], env: dict[str, str], cwd: Path) -> None:
    fails = "fails" in b.opts
    for cmd, expected in session(b.body):
        run = substitute(cmd, ports)
        if not fails:
            run = run.replace("curl ", "curl --fail-with-body ", 1)
        r = subprocess.run(["bash", "-c", run], capture_output=True, text=True, timeout=60,
                           cwd=cwd, env=env)
        where = f"{b.where}: {cmd}"
        if fails:
            assert r.returncode != 0, f"{where}: succeeded\n{r.stdout}"
        else:
            assert r.returncode == 0, f"{where}\n{r.stdout}{r.stderr}"
        if expected:
            check_output(where, substitute(expected, ports),
                         r.stdout + r.stderr if fails else r.stdout)


def run_server(b: Block, env: dict[str, str], cwd: Path) -> None:
    given = {n: free_port() for n in ("PORT", "ADMIN_PORT", "MQTT_PORT", "STOMP_PORT")}
    env = dict(env, AMQPLITE_HOST="127.0.0.1", **{f"AMQPLITE_{n}": str(p) for n, p in given.items()})
    log = cwd / f"server-{b.line}.log"
    with log.open("wb") as out:
        p = subprocess.Popen(["bash", "-c", "exec " + b.body.strip()], cwd=cwd, env=env,
                             stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def up() -> bool:
            assert p.poll() is None, f"{b.where}: exited\n{log.read_text()}"
            return all(listening(port) for port in given.values())
        wait_for(up, 30, what=f"{b.where} to listen on {sorted(given.values())}")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
        rc = p.wait(30)
    assert rc == 0, f"{b.where}: exit status {rc}\n{log.read_text()}"


def run_block(b: Block, broker: Broker, env: dict[str, str], cwd: Path) -> None:
    ports = broker.ports()
    if "no broker" in b.opts:
        ports = {k: free_port() for k in ports}
        env = dict(env, AMQPLITE_ADMIN_URL=f"http://127.0.0.1:{ports['15672']}")
    prelude = after = ""
    for opt in b.opts:
        if opt.startswith(THEN):
            after += epilogue(opt)
        if opt.startswith("given "):
            setup, code = GIVEN[opt.removeprefix("given ")]
            if setup is not None:
                setup(broker.admin)
            prelude += code
    if b.lang == "python":
        script = cwd / f"snippet-{b.line}.py"
        script.write_text(substitute(prelude + b.body + after, ports))
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=60, cwd=cwd, env=env)
        assert r.returncode == 0, f"{b.where}\n{r.stdout}{r.stderr}"
    elif "server" in b.opts:
        run_server(b, env, cwd)
    elif any(line.startswith("$ ") for line in b.body.splitlines()):
        run_session(b, ports, env, cwd)
    else:
        r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", substitute(b.body, ports)],
                           capture_output=True, text=True, timeout=60, cwd=cwd, env=env)
        assert r.returncode == 0, f"{b.where}\n{r.stdout}{r.stderr}"


RUNNABLE = sorted({b.path for b in ALL if b.runs})


@pytest.mark.parametrize("path", RUNNABLE)
def test_doc_examples_run(broker: Broker, tmp_path: Path, path: str) -> None:
    """One file's examples, in order, as a reader would type them."""
    env = scratch(tmp_path, broker.admin.admin_url)
    for b in ALL:
        if b.path == path and b.runs:
            run_block(b, broker, env, tmp_path)
