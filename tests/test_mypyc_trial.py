"""scripts/mypyc_trial.py prepares a copy for mypyc without changing what the broker is.

The trial is how issue 27's compile lever is re-measured. The core compiles
with its class structure as it is (parts composed, single inheritance): the
copy's only edits are attrs markers and one typed local.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from amqplite.broker.core import Broker

ROOT = Path(__file__).resolve().parent.parent


def _trial() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mypyc_trial", ROOT / "scripts/mypyc_trial.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_copy_keeps_the_core_s_class_structure(tmp_path: Path) -> None:
    """No class rewrite: the copy's Broker has the same parts, each with one base."""
    trial = _trial()
    shutil.copytree(ROOT / "amqplite", tmp_path / "amqplite",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    before = (ROOT / "amqplite/broker/core.py").read_text()
    modules = trial.transform(tmp_path)
    compiled = {str(p.relative_to(tmp_path / "amqplite")) for p in modules}
    assert "broker/core.py" in compiled and "protocol/reader.py" in compiled
    assert not compiled & set(trial.INTERPRETED)
    assert (tmp_path / "amqplite/broker/core.py").read_text() == before
    code = ("import amqplite.broker.core as c\n"
            "print(c.__file__)\n"
            "print(' '.join(k.__name__ for k in c.Broker.__mro__))\n"
            "b = c.Broker()\n"
            "print(' '.join(sorted(type(v).__name__ for k, v in vars(b).items()\n"
            "                      if k.startswith('_') and not callable(v))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env={"PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    where, mro, parts = out.stdout.split("\n")[:3]
    assert where.startswith(str(tmp_path))
    assert mro == " ".join(k.__name__ for k in Broker.__mro__) == "Broker object"
    b = Broker()
    assert parts == " ".join(sorted(type(v).__name__ for k, v in vars(b).items()
                                    if k.startswith("_") and not callable(v)))
