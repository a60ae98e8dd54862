"""scripts/mypyc_trial.py rewrites a copy for mypyc without changing what the broker is.

The trial is how issue 27's compile lever is re-measured; its rewrite keys on
class statements in ``broker/``, so a refactor there must not silently turn
it into a different broker (or stop it from applying at all).
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


def test_the_rewritten_copy_is_the_same_broker_with_a_linear_chain(tmp_path: Path) -> None:
    trial = _trial()
    shutil.copytree(ROOT / "amqplite", tmp_path / "amqplite",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    modules = trial.transform(tmp_path)
    compiled = {str(p.relative_to(tmp_path / "amqplite")) for p in modules}
    assert "broker/core.py" in compiled and "protocol/reader.py" in compiled
    assert not compiled & set(trial.INTERPRETED)
    assert trial.STUB_BLOCK + "\n" not in (tmp_path / "amqplite/broker/base.py").read_text()
    code = ("import amqplite.broker.core as c\n"
            "print(c.__file__)\n"
            "print(' '.join(k.__name__ for k in c.Broker.__mro__))\n"
            "print(all(len(k.__bases__) == 1 for k in c.Broker.__mro__[:-1]))\n"
            "from amqplite.broker.base import BrokerBase\n"
            "print(all(n in vars(BrokerBase) for n in ('basic_nack', '_dispatch')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env={"PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    where, mro, linear, stubs = out.stdout.split("\n")[:4]
    assert where.startswith(str(tmp_path))
    assert mro == " ".join(k.__name__ for k in Broker.__mro__)
    assert linear == "True"
    assert stubs == "True"  # the TYPE_CHECKING stubs became BrokerBase's own methods
