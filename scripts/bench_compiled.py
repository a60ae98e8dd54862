"""Compare the compiled build with pure Python on ``scripts/bench_core.py``.

The tree compiled in place (``python setup.py build_ext --inplace``, or
``--build`` here) runs the hot path compiled; ``AMQPLITE_PURE=1`` makes the same
tree import its ``.py`` sources. The two runs alternate, round by round, and the
medians are printed with the speed-up::

    .venv/bin/python scripts/bench_compiled.py --build --rounds 3

Prints figures; never asserts on them. ``--build`` needs mypy and a C compiler.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bench(pure: bool, repeat: int) -> tuple[str, dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AMQPLITE_PURE": "1" if pure else "0"}
    version = subprocess.run([sys.executable, "-m", "amqplite", "--version"], env=env,
                             capture_output=True, text=True, check=True).stdout.strip()
    out = subprocess.run([sys.executable, str(ROOT / "scripts/bench_core.py"),
                          "--repeat", str(repeat)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return version, {m[1].strip(): float(m[2])
                     for m in re.finditer(r"^(.+?)\s+([\d.]+) µs/msg", out, re.M)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--repeat", type=int, default=3, help="bench_core --repeat")
    parser.add_argument("--build", action="store_true",
                        help="compile the tree in place first (AMQPLITE_COMPILE=1)")
    args = parser.parse_args()
    if args.build:
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace", "-j", "2"],
                       cwd=ROOT, check=True, env={**os.environ, "AMQPLITE_COMPILE": "1"})
    figures: dict[bool, dict[str, list[float]]] = {False: defaultdict(list),
                                                   True: defaultdict(list)}
    for r in range(args.rounds):
        for pure in (False, True) if r % 2 == 0 else (True, False):
            version, cases = bench(pure, args.repeat)
            if not pure and "compiled" not in version:
                print(f"not compiled ({version}): build in place first (--build)")
                return 1
            for case, us in cases.items():
                figures[pure][case].append(us)
    print(f"bench_core, µs per message, median of {args.rounds} alternating rounds")
    print(f"{'case':<44}{'compiled':>10}{'pure':>10}{'speed-up':>10}")
    for case, pure_us in figures[True].items():
        c, p = statistics.median(figures[False][case]), statistics.median(pure_us)
        print(f"{case:<44}{c:>10.2f}{p:>10.2f}{p / c:>9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
