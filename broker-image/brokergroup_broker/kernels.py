"""The broker's compiled kernels (issue 38 item 3), chosen once, at start.

The `brokergroup-native` package (broker-image/native: Rust through pyo3, built by maturin)
holds the hot loops of three pure functions, which a profile of the master and a slave under
the stock client's batches put at ~10 % of a core each (docs/performance.md "Compiled
kernels"):

- `store.message_encode.encode_run`'s record loop (`encode_run_records`);
- `remoting_front.wire._batch_send_one_pass` (`batch_send_one_pass`);
- `store.message_scan.scan_records`' walk (`scan_accepted`), up to the first record it does
  not accept, after which the Python walk goes on.

Each Python function stays the reference: a hypothesis property holds the kernel to it
(tests/unit/test_native_kernels.py), and it runs wherever the package is not built. A kernel
answers None where it does not take an input, and the reference decides: refusals and their
wording exist once.

`BROKERGROUP_NATIVE` (auto, python, native) chooses, as `BROKERGROUP_EVENT_LOOP` chooses the
loop: auto takes the kernels where the package imports; `native` where it does not is a
start-up error, never a silent fallback (a benchmark that asked for it must get it).
"""

from __future__ import annotations

import enum
import importlib
import os
from collections.abc import Mapping
from types import ModuleType

from brokergroup_remoting.choice import choose_implementation

#: The environment variable naming the kernels: auto, python or native.
NATIVE_ENV = "BROKERGROUP_NATIVE"
#: The compiled package's module.
NATIVE_MODULE = "brokergroup_native"


class KernelKind(enum.StrEnum):
    """Which implementation of the kernels a process runs."""

    PYTHON = "python"
    """The pure-Python references."""
    NATIVE = "native"
    """The compiled package."""


class KernelError(ValueError):
    """The requested kernels are unknown or not installed (a start-up error)."""


def choose(requested: str | None, *, native_available: bool) -> KernelKind:
    """The kernels for a process asked for `requested` (None or empty: auto)."""
    return choose_implementation(
        KernelKind, requested, env=NATIVE_ENV, native=KernelKind.NATIVE,
        fallback=KernelKind.PYTHON, native_available=native_available,
        missing=f"the {NATIVE_MODULE} package is not installed "
        "(make venv builds it where cargo is; or use auto or python)",
        error=KernelError,
    )  # fmt: skip


def _import_native() -> ModuleType | None:
    try:
        return importlib.import_module(NATIVE_MODULE)
    except ImportError:
        return None


def load(environ: Mapping[str, str] = os.environ) -> ModuleType | None:
    """The compiled module when the environment's choice is native, else None."""
    module = _import_native()
    kind = choose(environ.get(NATIVE_ENV), native_available=module is not None)
    return module if kind is KernelKind.NATIVE else None


def load_at_start(
    environ: Mapping[str, str] = os.environ,
) -> tuple[ModuleType | None, KernelError | None]:
    """`load`, with its refusal kept for the process's start to report (`check`), so an
    import never fails on it."""
    try:
        return load(environ), None
    except KernelError as exc:
        return None, exc


#: The kernels this process runs, loaded once when the broker's modules are imported
#: (None: the Python references). Never reassigned but by tests comparing the two.
NATIVE, _START_ERROR = load_at_start()


def check() -> None:
    """Raise the KernelError of this process's choice, if it had one (the broker's command
    calls it first and exits 2 with the message)."""
    if _START_ERROR is not None:
        raise _START_ERROR


def configured() -> KernelKind:
    """What this process runs (named in the benchmarks' JSON)."""
    return KernelKind.NATIVE if NATIVE is not None else KernelKind.PYTHON
