"""The docs' runnable examples, run against a real broker so that they stay true.

A fenced block right after a ``<!-- run -->`` line in README.md or docs/*.md is
a shell session: each ``$ `` line (with its ``\\`` continuations) is run by bash
against a fresh broker (``localhost:15672`` becomes its admin address; curl
with ``--fail-with-body``, so an error status fails), and the lines after it,
when there are any, are its expected output: JSON compared by shape (the
same keys and value types; the values themselves depend on the broker's
state), anything else as text.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.admin.conftest import AdminBroker, start_admin_broker

ROOT = Path(__file__).resolve().parent.parent
RUN = "<!-- run -->"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: what the examples assume exists (a dead-letter queue to replay from)
QUEUES = ("orders.dlq",)


def runnable(text: str) -> list[str]:
    """The fenced blocks that follow a ``<!-- run -->`` line."""
    return [m.group(1) for m in re.finditer(r"^<!-- run -->\n```[^\n]*\n(.*?)^```",
                                            text, re.S | re.M)]


def session(block: str) -> list[tuple[str, str]]:
    """(command, expected output) for each ``$ `` command of a block."""
    out: list[tuple[str, str]] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            raise AssertionError(f"a runnable block starts with '$ ': {line!r}")
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


EXAMPLES = [(doc.relative_to(ROOT).as_posix(), n, block)
            for doc in DOCS for n, block in enumerate(runnable(doc.read_text()))]


def test_docs_have_runnable_examples() -> None:
    """The marker is found (a typo in it would run nothing, silently)."""
    assert any(path == "docs/admin.md" for path, _, _ in EXAMPLES)
    for doc in DOCS:
        text = doc.read_text()
        assert text.count(RUN) == len(runnable(text)), doc


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminBroker]:
    b = start_admin_broker(tmp_path_factory.mktemp("docs-broker"))
    with b.api() as api:
        for q in QUEUES:
            assert api.put(f"/api/queues/%2F/{q}", json={"durable": True}).status_code \
                in (201, 204)
    yield b
    b.proc.stop()


@pytest.mark.parametrize(("path", "n", "block"), EXAMPLES,
                         ids=[f"{p}#{n}" for p, n, _ in EXAMPLES])
def test_example_runs(broker: AdminBroker, path: str, n: int, block: str) -> None:
    host = broker.admin_url.removeprefix("http://")
    for cmd, expected in session(block):
        run = cmd.replace("localhost:15672", host).replace("curl ", "curl --fail-with-body ", 1)
        r = subprocess.run(["bash", "-c", run], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{path}: {cmd}\n{r.stdout}{r.stderr}"
        if not expected:
            continue
        try:
            want = json.loads(expected)
        except ValueError:
            assert r.stdout.strip() == expected, f"{path}: {cmd}"
            continue
        assert shape(json.loads(r.stdout)) == shape(want), f"{path}: {cmd}\n{r.stdout}"
