#!/usr/bin/env python3
"""Long fuzz runs of the sans-I/O protocol (not in CI): millions of mutated inputs.

    .venv/bin/python scripts/fuzz.py --cases 1000000 --seed 1 --out fuzz-crashes

Inputs and the oracle come from tests/protocol/fuzz_harness.py (the same ones
the hypothesis tests use). A failing input is written to ``--out`` as a binary
file (its chunks joined) plus a ``.txt`` with the error, ready to become a
regression test. The seed makes a run repeatable; each case is derived from
(seed, index), so a failure can be replayed alone with ``--replay INDEX``.

With ``--kafka HOST:PORT`` the cases go to a running broker's Kafka listener
instead (tests/server/kafka_fuzz.py: mutated pipelined requests of every API,
bad sizes and versions, floods), eight connections at a time; a case fails when
what the broker wrote is not whole responses in request order, and the run
stops when the broker stops accepting connections. Check its log afterwards:
no traceback, at most one line per bad connection.

    amqplite serve --kafka-port 9092 &
    .venv/bin/python scripts/fuzz.py --kafka 127.0.0.1:9092 --cases 100000
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.protocol.fuzz_harness import HANDSHAKE, SESSION, feed, one_case


def case(seed: int, index: int) -> list[bytes]:
    return one_case(random.Random(seed * 1_000_003 + index))


def server(seed: int, index: int) -> random.Random | None:
    """Every other case also plays the server side (replies, errors, forced closes)."""
    return random.Random(~(seed * 1_000_003 + index)) if index % 2 else None


def kafka_case(seed: int, index: int) -> tuple[str, list[bytes], list[int]]:
    from tests.server.kafka_fuzz import case as make

    return make(random.Random(seed * 1_000_003 + index))


def live_kafka(address: str, seed: int, cases: int, out: Path, max_seconds: float,
               replay: int | None) -> int:
    """The Kafka cases against a running broker; 1 when one failed or the broker went."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.server.kafka_fuzz import run_case

    host, _, port_text = address.rpartition(":")
    port = int(port_text)
    if replay is not None:
        print(run_case(port, *kafka_case(seed, replay), host=host or "127.0.0.1")[0])
        return 0

    def one(i: int) -> str:
        try:
            return run_case(port, *kafka_case(seed, i), host=host or "127.0.0.1")[0]
        except ConnectionRefusedError:
            return "refused"
        except (AssertionError, OSError) as exc:
            out.mkdir(parents=True, exist_ok=True)
            (out / f"kafka-seed{seed}-case{i}.txt").write_text(
                f"seed {seed} case {i}\n" + "".join(traceback.format_exception(exc)))
            return f"failed: {type(exc).__name__}"

    kinds: dict[str, int] = {}
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        for start in range(0, cases, 64):
            for kind in pool.map(one, range(start, min(cases, start + 64))):
                kinds[kind] = kinds.get(kind, 0) + 1
            if kinds.get("refused"):
                print("the broker stopped accepting connections", flush=True)
                break
            if max_seconds and time.monotonic() - t0 > max_seconds:
                break
    done = sum(kinds.values())
    print(f"done: {done} Kafka cases in {time.monotonic() - t0:.0f}s, seed {seed}: {kinds}")
    return 1 if any(k.startswith("failed") or k == "refused" for k in kinds) else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--out", type=Path, default=Path("fuzz-crashes"))
    ap.add_argument("--max-seconds", type=float, default=0, help="stop early (0: no limit)")
    ap.add_argument("--replay", type=int, help="run one case by index, with its traceback")
    ap.add_argument("--kafka", metavar="HOST:PORT",
                    help="fuzz a running broker's Kafka listener instead")
    args = ap.parse_args()
    if args.kafka:
        return live_kafka(args.kafka, args.seed, args.cases, args.out, args.max_seconds,
                          args.replay)
    feed([HANDSHAKE, *SESSION])  # the oracle accepts the valid session
    if args.replay is not None:
        feed(case(args.seed, args.replay), react=server(args.seed, args.replay))
        print("case passes")
        return 0
    seen: set[str] = set()
    t0 = time.monotonic()
    done = 0
    for i in range(args.cases):
        chunks = case(args.seed, i)
        try:
            feed(chunks, react=server(args.seed, i))
        except Exception as exc:
            key = f"{type(exc).__name__}: {str(exc)[:120]}"
            if key not in seen:
                seen.add(key)
                args.out.mkdir(parents=True, exist_ok=True)
                stem = args.out / f"seed{args.seed}-case{i}"
                stem.with_suffix(".bin").write_bytes(b"".join(chunks))
                stem.with_suffix(".txt").write_text(
                    f"seed {args.seed} case {i} chunks {[len(c) for c in chunks]}\n"
                    + traceback.format_exc())
                print(f"case {i}: {key}", flush=True)
        done = i + 1
        if done % 100_000 == 0:
            el = time.monotonic() - t0
            print(f"{done} cases, {done / el:.0f}/s, {len(seen)} distinct failures", flush=True)
        if args.max_seconds and time.monotonic() - t0 > args.max_seconds:
            break
    el = time.monotonic() - t0
    print(f"done: {done} cases in {el:.0f}s ({done / max(el, 1e-9):.0f}/s), seed {args.seed}, "
          f"{len(seen)} distinct failures")
    return 1 if seen else 0


if __name__ == "__main__":
    sys.exit(main())
