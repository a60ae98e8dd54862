"""Compile the broker core with mypyc in a scratch copy; compare it with pure Python.

Issue 27's lever, kept reproducible. This tree stays pure Python (see
docs/dev/performance-history.md, "Compiling the whole core"); the script makes a copy
mypyc accepts, builds it, and prints ``scripts/bench_core.py`` for both,
alternating rounds. The core's classes compile as they are: its parts are
composed, not mixed in (single inheritance, no ``if`` in a class body, both of
which mypyc needs). What the copy still changes, and why:

- classes made by attrs stay ordinary Python classes (``native_class=False``);
- a few modules stay interpreted (``INTERPRETED``, with the reason);
- one local in the frame reader is typed ``Any``.

With ``--keep DIR`` the compiled copy stays for end-to-end benches::

    .venv/bin/python scripts/mypyc_trial.py --keep /tmp/mypyc --rounds 3
    PYTHONPATH=/tmp/mypyc .venv/bin/python -m amqplite serve --port 25811 ...

Prints figures; never asserts on them. Needs a C compiler (gcc).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: modules left to the interpreter, and why mypyc cannot take them as they are
INTERPRETED = {
    "protocol/codec.py": "FieldTable/FieldArray subclass dict/list",
    "protocol/methods.py": "attrs subclasses of a class mypyc would make native",
    "broker/auth.py": "an attrs field(factory=list) fails mypyc's type check at import",
    "broker/effects.py": "the same (Outcome.log)",
}


def add_import(src: str, line: str) -> str:
    return src.replace("from __future__ import annotations\n",
                       f"from __future__ import annotations\n\n{line}\n", 1)


def non_native_attrs(src: str) -> str:
    """Mark every attrs class ``native_class=False`` (attrs rewrites the class)."""
    out: list[str] = []
    for line in src.split("\n"):
        if line.startswith("@attrs.") and not (out and out[-1].startswith("@")):
            out.append("@mypyc_attr(native_class=False)")
        out.append(line)
    new = "\n".join(out)
    return new if new == src else add_import(new, "from mypy_extensions import mypyc_attr")


def transform(copy: Path) -> list[Path]:
    """Rewrite the copy at ``copy`` for mypyc; returns the modules to compile."""
    texts: dict[Path, str] = {}
    pkg = copy / "amqplite"

    def text(rel: str) -> str:
        path = pkg / rel
        if path not in texts:
            texts[path] = path.read_text()
        return texts[path]

    # mypyc infers None for this local; typed as the dict's value type, the compiled
    # reader dropped every publish, so it is typed Any (as the interpreter sees it)
    reader = text("protocol/reader.py")
    if "            publish = cache.get(key)\n" not in reader:
        raise SystemExit("protocol/reader.py: the publish cache lookup not found")
    texts[pkg / "protocol/reader.py"] = reader.replace(
        "            publish = cache.get(key)\n", "            publish: Any = cache.get(key)\n")
    modules = [p for p in sorted((pkg / "broker").glob("*.py")) + sorted(
        (pkg / "protocol").glob("*.py")) if str(p.relative_to(pkg)) not in INTERPRETED]
    for path in modules:
        texts[path] = non_native_attrs(text(str(path.relative_to(pkg))))
    for path, src in texts.items():
        path.write_text(src)
    return modules


def bench(script: Path, repeat: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, str(script), "--repeat", str(repeat)],
                         capture_output=True, text=True, check=True).stdout
    return {m[1].strip(): float(m[2]) for m in re.finditer(r"^(.+?)\s+([\d.]+) µs/msg", out, re.M)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--repeat", type=int, default=3, help="bench_core --repeat")
    parser.add_argument("--keep", type=Path, help="build the copy here and leave it")
    args = parser.parse_args()
    copy = args.keep or Path(tempfile.mkdtemp(prefix="mypyc-trial-"))
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(ROOT / "amqplite", copy / "amqplite",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copytree(ROOT / "scripts", copy / "scripts", ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", copy)
    modules = transform(copy)
    print(f"compiling {len(modules)} modules in {copy} (interpreted: {', '.join(INTERPRETED)})",
          flush=True)
    mypyc = Path(sys.executable).parent / "mypyc"
    build = subprocess.run([str(mypyc), *map(str, modules)], cwd=copy,
                           capture_output=True, text=True)
    if build.returncode:
        print(build.stdout[-4000:], build.stderr[-4000:], sep="\n")
        return 1
    figures: dict[str, dict[str, list[float]]] = {"compiled": defaultdict(list),
                                                  "pure": defaultdict(list)}
    for r in range(args.rounds):
        order = [("compiled", copy), ("pure", ROOT)]
        for label, tree in order if r % 2 == 0 else order[::-1]:
            for case, us in bench(tree / "scripts/bench_core.py", args.repeat).items():
                figures[label][case].append(us)
    print(f"\nbench_core, µs per message, median of {args.rounds} alternating rounds")
    print(f"{'case':<44}{'compiled':>10}{'pure':>10}{'speed-up':>10}")
    for case, pure in figures["pure"].items():
        c, p = statistics.median(figures["compiled"][case]), statistics.median(pure)
        print(f"{case:<44}{c:>10.2f}{p:>10.2f}{p / c:>9.2f}x")
    if not args.keep:
        shutil.rmtree(copy, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
