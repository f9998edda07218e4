"""Which extra of the `brokergroup` distribution each console command needs.

The base install carries only what every component uses; each component's own
dependencies are an extra (`brokergroup[broker]`, `[controller]`, `[operator]`,
`[audit]`; `[all]` for development), so the broker/controller image carries no
Spark and no plotting. A command whose extra is missing stops before it starts
with the pip line that fixes it — not with an ImportError traceback, and not
minutes into a chaos run whose report is plotted only after its last window.

The extras' contents are read from the installed distribution's metadata
(pyproject.toml is the one list); only the command → extras table lives here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

DISTRIBUTION = "brokergroup"

#: The extras each subcommand needs beyond the base install. `local` and `chaos`
#: start controllers and brokers as processes; the chaos report plots with
#: matplotlib (in [audit]). Commands not named here (admin, produce, consume) need
#: the base only.
COMMAND_EXTRAS: Mapping[str, tuple[str, ...]] = {
    "controller": ("controller",),
    "broker": ("broker",),
    "local": ("controller", "broker"),
    "chaos": ("controller", "broker", "audit"),
    "operator": ("operator",),
    "operator-stop": ("operator",),
    "kube": ("operator",),
    "kubectl-brokergroup": ("operator",),
    "audit": ("audit",),
}

_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def normalize(name: str) -> str:
    """A distribution name in PEP 503 form (`Prometheus_Client` → `prometheus-client`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def extra_requirements(requires: Iterable[str]) -> dict[str, list[str]]:
    """The distributions each extra names, from `Requires-Dist` lines such as
    `pyspark>=4.0; extra == "audit"` (a line without an extra marker is the base's)."""
    out: dict[str, list[str]] = {}
    for line in requires:
        requirement, _, marker = line.partition(";")
        name = _NAME.match(requirement)
        if name is None:
            continue
        extra = _EXTRA_MARKER.search(marker)
        out.setdefault(extra.group(1) if extra else "", []).append(normalize(name.group(1)))
    return out


def missing_for(
    command: str,
    requires: Iterable[str],
    installed: Callable[[str], bool],
) -> dict[str, list[str]]:
    """The command's extras that are not fully installed, with their missing distributions."""
    by_extra = extra_requirements(requires)
    missing: dict[str, list[str]] = {}
    for extra in COMMAND_EXTRAS.get(command, ()):
        absent = [d for d in by_extra.get(extra, []) if d != DISTRIBUTION and not installed(d)]
        if absent:
            missing[extra] = absent
    return missing


def advice(command: str, missing: Mapping[str, list[str]]) -> str:
    """The one line a person acts on: what is missing and the extra that brings it."""
    extras = ",".join(missing)
    # Two extras may name one distribution (prometheus-client: controller and broker).
    absent = ", ".join(dict.fromkeys(d for ds in missing.values() for d in ds))
    return (
        f"brokergroup {command}: {absent} not installed; "
        f"install brokergroup[{extras}] (pip install 'brokergroup[{extras}]')"
    )


def check_installed(command: str) -> str | None:
    """None when `command` can run here, else the advice line. Without the
    distribution's metadata (a source checkout on PYTHONPATH) nothing is checked."""
    from importlib import metadata

    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return None

    def installed(name: str) -> bool:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            return False
        return True

    missing = missing_for(command, requires, installed)
    return advice(command, missing) if missing else None
