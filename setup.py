"""Build amqplite: the hot-path modules compiled with mypyc where possible, else pure Python.

Metadata lives in setup.cfg; this file only decides the extension modules.
``AMQPLITE_COMPILE`` chooses: ``1`` compiles or fails, ``0`` installs pure Python,
unset compiles a regular build (``pip install .``, ``python -m build``) when mypyc
and a C compiler with Python's headers are there, and falls back to pure Python
(never fails) when they are not or the compile breaks. An editable install
(``pip install -e .``) is pure unless ``AMQPLITE_COMPILE=1``: a compiled module
shadows its ``.py``, so edits to the source would silently not run. CI compiles
the tree in place instead (``python setup.py build_ext --inplace``, see
scripts/test.sh). ``amqplite --version`` and the broker's start line say which runs.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from glob import glob
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent

#: compiled: the protocol codecs and readers, the broker's parts and exchanges, the
#: interpreter, the MQTT and STOMP codecs and session rules. The exchange
#: classes stay Python classes (``mypyc_attr(native_class=False)``: subclasses pass
#: ``**kw`` on to a keyword-only ``__init__`` and replace ``route`` per instance);
#: their methods compile.
COMPILED = [
    "amqplite/protocol/*.py",
    "amqplite/protocol/mqtt/*.py",
    "amqplite/protocol/stomp/*.py",
    "amqplite/broker/*.py",
    "amqplite/broker/exchanges/*.py",
    "amqplite/server/interpreter.py",
    "amqplite/server/hotpath.py",
    "amqplite/sessions/mqtt/*.py",
    # the STOMP session rules and connection shell (per SEND, ACK and delivery)
    "amqplite/sessions/stomp/*.py",
    "amqplite/server/stomp/client.py",
]

#: left to the interpreter inside those globs, and why
INTERPRETED = {
    # compiled, mypyc checks each attrs default against its field's type at import,
    # and the FieldTable fields' default is an attrs.Factory; its codecs are generated
    # Python (exec) either way, and basic.publish is decoded once per distinct frame
    "amqplite/protocol/methods.py",
    # an attrs field(factory=list) fails mypyc's type check at import
    "amqplite/broker/auth.py",
    # mypyc cannot build its slotted frozen dataclass (KeyError 'object' at import);
    # selectors are parsed once per binding, not per message
    "amqplite/broker/selector.py",
}


#: the setup.py commands that build extensions; pip runs setup.py for metadata too,
#: and mypyc's type check (a minute) is only worth it once
_BUILDS = {"bdist_wheel", "build", "build_ext", "install", "develop", "editable_wheel"}


def _say(line: str) -> None:
    print(f"amqplite build: {line}", file=sys.stderr, flush=True)


def _modules() -> list[str]:
    found = sorted({p for pattern in COMPILED for p in glob(pattern, root_dir=ROOT)})
    return [p for p in found if p not in INTERPRETED and not p.endswith("__init__.py")]


def _why_not() -> str | None:
    """Why this machine cannot compile, or None when it can."""
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypyc (mypy) is not installed"
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc})"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "Python's C headers (Python.h) are missing"
    return None


class _BuildExt(build_ext):
    """build_ext that falls back to pure Python when compiling fails (unless told to compile)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # distutils' CompileError, LinkError, ...
            if os.environ.get("AMQPLITE_COMPILE") == "1":
                raise
            for ext in self.extensions:  # a shim without its shared library cannot import
                for path in (self.get_ext_fullpath(ext.name),):
                    Path(path).unlink(missing_ok=True)
            self.extensions = []
            _say(f"compiling failed ({exc}); installing pure Python")


def _ext_modules() -> list:
    choice = os.environ.get("AMQPLITE_COMPILE", "")
    if choice == "0":
        _say("pure Python (AMQPLITE_COMPILE=0)")
        return []
    if choice != "1" and "editable_wheel" in sys.argv:
        _say("pure Python for an editable install (AMQPLITE_COMPILE=1 compiles)")
        return []
    if not _BUILDS & set(sys.argv):  # metadata steps (egg_info, dist_info, sdist)
        return []
    reason = _why_not()
    if reason is not None:
        if choice == "1":
            raise SystemExit(f"amqplite build: AMQPLITE_COMPILE=1 but {reason}")
        _say(f"pure Python: {reason}")
        return []
    from mypyc.build import mypycify

    modules = _modules()
    _say(f"compiling {len(modules)} modules with mypyc")
    try:
        # the group's shared library goes inside the package (amqplite/_compiled__mypyc),
        # where an editable install's finder sees it; a top-level one is not found
        return mypycify(modules, opt_level="3", group_name="amqplite._compiled")
    except (Exception, SystemExit) as exc:  # mypyc exits on a type error
        if choice == "1":
            raise
        _say(f"mypyc failed ({exc}); installing pure Python")
        return []


os.chdir(ROOT)  # mypycify names modules by their paths from here
setup(ext_modules=_ext_modules(), cmdclass={"build_ext": _BuildExt})
