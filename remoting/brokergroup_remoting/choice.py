"""The one rule for an optional native implementation a process picks at start from an
environment variable (the event loop: `event_loop.py`; the broker's compiled kernels:
`brokergroup_broker/kernels.py`): `auto` takes the native one where it is installed, else
the fallback; naming one takes it, and naming a missing native one is a start-up error,
never a silent fallback (a benchmark that asked for it must get it)."""

from __future__ import annotations

import enum
from typing import TypeVar

K = TypeVar("K", bound=enum.StrEnum)


def choose_implementation(
    kinds: type[K],
    requested: str | None,
    *,
    env: str,
    native: K,
    fallback: K,
    native_available: bool,
    missing: str,
    error: type[ValueError],
) -> K:
    """The member of `kinds` for a process asked for `requested` (None or empty: auto).
    `missing` says why `native` cannot be had and what to do (after "…=<native> but")."""
    wanted = (requested or "auto").strip().lower()
    if wanted == "auto":
        return native if native_available else fallback
    try:
        kind = kinds(wanted)
    except ValueError:
        choices = ", ".join(("auto", *(k.value for k in kinds)))
        raise error(f"{env}={requested!r} is not one of {choices}") from None
    if kind is native and not native_available:
        raise error(f"{env}={native.value} but {missing}")
    return kind
