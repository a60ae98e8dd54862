"""Job state under ``OUT/_state``: watermark, pending batch (run journal), lock.

Protocol of one run (see docs/audit.md, "Exactly once"):

1. take the lock;
2. if ``pending.json`` holds a batch starting at the watermark, a previous run
   crashed before committing: redo *that* batch (same ``lo``, ``hi``, run id);
   otherwise fix ``hi`` and write ``pending.json`` **before** exporting;
3. export rows ``lo < id <= hi`` into Parquet partitions keyed by the batch,
   so a redo replaces instead of duplicating;
4. write the reports;
5. commit: atomically replace ``watermark.json`` (the commit point), append to
   ``runs.jsonl``, delete ``pending.json``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


class AuditBusyError(Exception):
    """Another run holds the state lock."""


@dataclass(frozen=True)
class Batch:
    """One export: log rows with ``lo < id <= hi``."""

    run_id: str
    lo: int
    hi: int
    as_of_us: int  # wall-clock time the batch was fixed (µs, UTC)

    @property
    def empty(self) -> bool:
        return self.hi <= self.lo


def atomic_write_json(path: Path, data: Any) -> None:
    """Write JSON to ``path`` so readers see the old or the new file, never half."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StateStore:
    """Files in ``OUT/_state``."""

    def __init__(self, out: Path) -> None:
        self.dir = Path(out) / "_state"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.watermark_file = self.dir / "watermark.json"
        self.pending_file = self.dir / "pending.json"
        self.runs_file = self.dir / "runs.jsonl"

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold an exclusive lock for one run; fail at once if another run has it."""
        with open(self.dir / "lock", "a+") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise AuditBusyError(f"another audit run holds {self.dir / 'lock'}") from None
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def watermark(self) -> int:
        """Highest log id committed to the dataset (0 before the first run)."""
        if not self.watermark_file.exists():
            return 0
        return int(json.loads(self.watermark_file.read_text())["watermark"])

    def pending(self) -> Batch | None:
        """The batch a crashed run left uncommitted, if it still applies."""
        if not self.pending_file.exists():
            return None
        data = json.loads(self.pending_file.read_text())
        batch = Batch(**data)
        if batch.lo != self.watermark():
            # Committed already (crash between commit and clean-up): stale.
            self.pending_file.unlink(missing_ok=True)
            return None
        return batch

    def begin(self, batch: Batch) -> None:
        """Journal the batch before any of it is written."""
        atomic_write_json(self.pending_file, asdict(batch))

    def commit(self, batch: Batch, summary: dict[str, Any]) -> None:
        """Advance the watermark to ``batch.hi``; this replace is the commit point."""
        atomic_write_json(
            self.watermark_file,
            {"watermark": batch.hi, "run_id": batch.run_id, "as_of_us": batch.as_of_us},
        )
        with open(self.runs_file, "a", encoding="utf-8") as f:
            f.write(json.dumps({**asdict(batch), **summary}, sort_keys=True) + "\n")
        self.pending_file.unlink(missing_ok=True)

    def runs(self) -> list[dict[str, Any]]:
        """Committed runs, oldest first."""
        if not self.runs_file.exists():
            return []
        return [json.loads(line) for line in self.runs_file.read_text().splitlines() if line]
