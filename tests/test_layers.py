"""Layers import downward only (DESIGN.md section 1), checked in fresh interpreters."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

CASES = {
    "amqplite.protocol.connection": ("trio", "sqlalchemy", "pyspark", "amqplite.broker"),
    "amqplite.protocol.stomp.connection": ("trio", "sqlalchemy", "pyspark", "amqplite.broker",
                                           "amqplite.protocol.mqtt"),
    "amqplite.protocol.kafka.errors": ("trio", "sqlalchemy", "pyspark", "amqplite.broker"),
    "amqplite.protocol.kafka.messages": ("trio", "sqlalchemy", "pyspark", "amqplite.broker",
                                         "amqplite.server", "amqplite.protocol.mqtt",
                                         "amqplite.protocol.stomp"),
    "amqplite.protocol.kafka.records": ("trio", "sqlalchemy", "pyspark", "amqplite.broker",
                                        "amqplite.server"),
    "amqplite.broker.core": ("trio", "sqlalchemy", "pyspark", "amqplite.store"),
    "amqplite.storeops": ("trio", "sqlalchemy", "pyspark", "amqplite.protocol", "amqplite.broker",
                          "amqplite.store"),
    "amqplite.store.engine": ("trio", "pyspark", "amqplite.broker", "amqplite.server"),
    "amqplite.store.writer": ("trio", "pyspark", "amqplite.broker", "amqplite.server"),
    "amqplite.store.writer_main": ("trio", "pyspark", "amqplite.broker", "amqplite.server"),
    "amqplite.server.app": ("pyspark", "amqplite.admin"),
    "amqplite.server.connection": ("pyspark", "amqplite.admin"),
    "amqplite.cli": ("pyspark",),
}
#: a front's session rules (DESIGN.md section 11): plain objects, no loop, no sockets,
#: no SQL; ``session`` and ``registry`` between them import every module of sessions/mqtt
SESSION_MODULES = ("amqplite.sessions", "amqplite.sessions.mqtt",
                   "amqplite.sessions.mqtt.session", "amqplite.sessions.mqtt.registry",
                   "amqplite.sessions.stomp.session", "amqplite.sessions.kafka.coordinator",
                   "amqplite.sessions.kafka.topics")
for _name in SESSION_MODULES:
    CASES[_name] = ("trio", "sqlalchemy", "pyspark", "amqplite.server", "amqplite.store",
                    "amqplite.admin")


@pytest.mark.parametrize("module", sorted(CASES))
def test_module_does_not_import_upward(module: str) -> None:
    forbidden = CASES[module]
    code = (
        f"import sys, {module}\n"
        f"bad = [m for m in {forbidden!r} if any(k == m or k.startswith(m + '.') "
        "for k in sys.modules)]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"{module} imports {out.stdout.strip()}"


def _imports(path: Path, module: str, package: str) -> set[str]:
    """Modules of ``amqplite`` that ``path`` imports, lazy ones included.

    Imports under ``if TYPE_CHECKING:`` are left out: they never run.
    """
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for n in nodes:
            if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
                visit(n.orelse)
                continue
            if isinstance(n, ast.Import):
                found.update(a.name for a in n.names)
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    parts = package.split(".")[: len(package.split(".")) - n.level + 1]
                    base = ".".join([*parts, *([n.module] if n.module else [])])
                found.add(base)
                found.update(f"{base}.{a.name}" for a in n.names)
            for child in ast.iter_child_nodes(n):
                if isinstance(child, ast.stmt):
                    visit([child])
            for field in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(n, field, ()) or ():
                    if isinstance(child, ast.ExceptHandler):
                        visit(child.body)

    visit(ast.parse(path.read_text()).body)
    return found - {module}


def test_no_import_cycles() -> None:
    root = Path(__file__).resolve().parent.parent
    modules: dict[str, Path] = {}
    for p in (root / "amqplite").rglob("*.py"):
        name = ".".join(p.relative_to(root).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = p
    graph = {}
    for name, p in modules.items():
        package = name if p.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {m for m in _imports(p, name, package) if m in modules}
    # depth-first search for a back edge, reporting the cycle it closes
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return [*stack[stack.index(w):], w]
            if w not in state and (cycle := walk(w)) is not None:
                return cycle
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state:
            cycle = walk(v)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


#: DESIGN.md: modules with one reason to change each; past this, split the module.
MAX_MODULE_LINES = 800


def test_no_module_exceeds_the_line_limit() -> None:
    root = Path(__file__).resolve().parent.parent
    long = {str(p.relative_to(root)): n for p in sorted((root / "amqplite").rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_broker_parts_are_composed_not_inherited() -> None:
    """DESIGN.md §10: the core's parts receive what they use; none has two or more
    bases (mypyc takes single inheritance only), none inherits a shared state base,
    and no part declares another's methods as TYPE_CHECKING stubs."""
    import ast
    root = Path(__file__).resolve().parent.parent
    for path in sorted((root / "amqplite" / "broker").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                assert len(bases) < 2, f"{path.name}: {node.name} has bases {bases}"
                assert "BrokerBase" not in bases, f"{path.name}: {node.name} inherits BrokerBase"
            if (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)):
                stubs = [n.name for b in node.body for n in ast.walk(b)
                         if isinstance(n, ast.FunctionDef)]
                assert not stubs, f"{path.name}: TYPE_CHECKING stubs {stubs}"


def test_only_the_broker_touches_its_outbox() -> None:
    """Store ops reach the broker's one outbox through broker commands: no code outside
    amqplite/broker/ appends to a public op list, truncates it or reads the outbox's
    private list (an Outcome's ``store_ops`` field, handed over by take_outcome, is fine)."""
    import re
    root = Path(__file__).resolve().parent.parent
    touch = re.compile(r"\b(?:broker|b|self\.broker)\.store_ops\b|\boutbox\._ops\b"
                       r"|\bconfirms\.stored\s*=|\bst\.stored\s*=")
    broker_dir = root / "amqplite" / "broker"
    hits = [f"{p.relative_to(root)}:{n}" for p in sorted((root / "amqplite").rglob("*.py"))
            if broker_dir not in p.parents
            for n, line in enumerate(p.read_text().splitlines(), 1) if touch.search(line)]
    assert not hits, f"outbox touched outside amqplite/broker/: {hits}"


#: Each part of amqplite (a package, or a top-level module) and the parts it may
#: import (DESIGN.md section 1; the root package, for ``__version__``, is open to all).
#: Vocabulary at the bottom (protocol, storeops, config), the pure core above it,
#: the store beside the core (they meet only in storeops), the shells above both.
ALLOWED: dict[str, set[str]] = {
    "protocol": set(),
    "storeops": set(),
    "config": set(),
    "broker": {"protocol", "storeops", "config"},
    "sessions": {"protocol", "broker", "storeops", "config"},
    "store": {"storeops"},
    "links": {"protocol", "broker"},
    "server": {"protocol", "broker", "sessions", "storeops", "store", "config"},
    "audit": {"store", "storeops", "links"},
    "admin": {"protocol", "broker", "sessions", "storeops", "config", "links", "audit", "server"},
    "main": {"server", "admin", "links", "config"},
    "cli": {"main", "server", "admin", "audit", "store", "config"},
    "__main__": {"cli"},
}
#: single modules allowed one more edge than their part, with why
EXTRA: dict[str, set[str]] = {
    # the stream record's byte format: the writer joins an append's pieces into it
    "amqplite.store.apply": {"amqplite.protocol.streamrecord"},
    # rewrites older databases' stream entries into today's records (a one-time move)
    "amqplite.store.upgrade": {"amqplite.protocol.streamrecord", "amqplite.protocol.properties"},
}


def test_parts_import_only_their_allowed_edges() -> None:
    root = Path(__file__).resolve().parent.parent
    parts = {p.stem if p.is_file() else p.name for p in (root / "amqplite").iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert not parts - set(ALLOWED), f"parts missing from ALLOWED: {sorted(parts - set(ALLOWED))}"
    bad: list[str] = []
    for p in sorted((root / "amqplite").rglob("*.py")):
        name = ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        if name == "amqplite":
            continue
        package = name if p.name == "__init__.py" else name.rpartition(".")[0]
        part = name.split(".")[1]
        for m in sorted(_imports(p, name, package)):
            target = m.split(".")[1] if m.startswith("amqplite.") else None
            if (target is None or target == part or target not in parts
                    or target in ALLOWED[part]):
                continue
            # ``from amqplite.protocol import streamrecord`` also names the package
            if any(m == e or m.startswith(e + ".") or e.startswith(m + ".")
                   for e in EXTRA.get(name, ())):
                continue
            bad.append(f"{name} -> {m} ({part} may import {sorted(ALLOWED[part]) or 'nothing'})")
    assert not bad, "imports outside the allowed edges:\n" + "\n".join(bad)
