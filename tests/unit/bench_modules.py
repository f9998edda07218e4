"""The benchmark helpers under test: bench/ is a folder of scripts, not a package, so its
modules are loaded by path (once per name, registered in sys.modules)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench_module(stem: str) -> ModuleType:
    """bench/<stem>.py as the module `bench_<stem without its leading _>`."""
    name = "bench_" + stem.lstrip("_")
    spec = importlib.util.spec_from_file_location(name, _BENCH / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
