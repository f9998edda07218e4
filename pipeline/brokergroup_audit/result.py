"""What an audit returns (summary, findings, failovers, per-epoch ranges), and the
wall seconds per stage it reports; read by the job, the outputs and the report."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from brokergroup_audit import checks
from brokergroup_audit.checks import Finding

Progress = Callable[[str], None]


class Stages:
    """Wall seconds per stage of an audit (in the summary, so a slow stage is named)."""

    def __init__(self, progress: Progress, on_start: Progress = lambda _: None) -> None:
        self._progress = progress
        self._on_start = on_start
        self._seconds: dict[str, float] = {}
        self._current: tuple[str, float] | None = None

    def start(self, name: str, text: str | None = None) -> None:
        self._stop()
        self._progress(text or name)
        self._on_start(name)
        self._current = (name, time.monotonic())

    def _stop(self) -> None:
        if self._current is not None:
            name, began = self._current
            self._seconds[name] = round(time.monotonic() - began, 3)
            self._current = None

    def finish(self) -> dict[str, float]:
        self._stop()
        return dict(self._seconds)


@dataclass
class AuditResult:
    summary: dict[str, Any]
    findings: list[Finding]
    failovers: list[checks.Failover]
    epoch_ranges: list[dict[str, Any]]
    windows: list[dict[str, Any]]
    deletions: list[dict[str, Any]] = field(default_factory=list)
    """Every logged retention deletion: group, brokerId and the retention.log line."""


def comparable_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary without what legitimately differs between runs (time, paths)."""
    out = dict(summary)
    out.pop("elapsedS", None)
    out.pop("stageSeconds", None)
    out.pop("storeRoot", None)
    out["replicas"] = [{k: v for k, v in r.items() if k != "path"} for r in summary["replicas"]]
    return out
