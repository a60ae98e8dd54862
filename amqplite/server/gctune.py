"""Fewer, cheaper cyclic collections in the broker's processes.

Every message allocates a handful of objects that die without cycles (the
broker's per-message records; the writer's decoded ops and row tuples); with
CPython's default threshold the collector runs every 700 of them and every
tenth of those also walks generation 1: in the writer process it was a fifth
of its CPU under S1 (perf: gc_collect_main, visit_decref, visit_reachable).
Freezing what start-up built (recovered topology, imported modules) takes it
out of every later full collection. ``AMQPLITE_GC_TUNE=0`` keeps CPython's
defaults (to measure). The server calls it after recovery; the store's writer
process does not (``store/writer_main.py`` says why: memory).
"""

from __future__ import annotations

import gc
import os

#: the cyclic collector runs after this many allocations net of frees (CPython: 700)
GC_GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    """Collect once, freeze what survives, and raise generation 0's threshold."""
    if os.environ.get("AMQPLITE_GC_TUNE") == "0":
        return
    gc.collect()
    gc.freeze()
    _g0, g1, g2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, g1, g2)
